/**
 * `POST /nodes/{node}/qemu/{vmid}/migrate` (migrate_vm): the checks qemu-server makes before it
 * forks the worker, then a `qmigrate` task running LocalMigration (../migrate-local.ts), or for an
 * HA-managed VM a `hamigrate` task that asks the HA stack, whose local resource manager then runs
 * the `qmigrate` task as root@pam (as `ha-manager migrate` does).
 *
 * Order of the checks (qemu-server src/PVE/API2/Qemu.pm:5481-5667 at e6352be; 8.4 c2287c17
 * PVE/API2/Qemu.pm:4870, 7.4 47cf3044 :4269 and 6.4 c948e143 :3575 are the same but for the
 * target storage check, see below):
 * `target is local node.` (400 on `target`), `no such cluster node 'X'`, root-only `force`,
 * `migration_type`, `migration_network` (400), the VM on this node, its lock, a running VM
 * without `online` (`can't migrate running VM without --online`), then the storages: with
 * `targetstorage` each target storage (enabled on the target node, Datastore.AllocateSpace,
 * `images` content) and VM.Config.Disk unless the map is `1`; without it (or with `1`)
 * check_storage_availability: every drive's storage enabled on the target node, with the volume's
 * content type. Neither the target node's state nor local disks are checked here: an offline
 * target fails the task (`Can't connect to destination address using public key`), and local
 * disks of a running VM without `with-local-disks` fail its volume scan.
 *
 * 6.4's check of a target storage is storage_check_node (a disabled storage passes) and its
 * `does not support vm images` a 400 on `targetstorage` (PVE/API2/Qemu.pm:3689-3696 at c948e143).
 */
import { isRootUser, requirePriv } from '../auth.ts';
import { die, paramError } from '../errors.ts';
import { LocalMigration } from '../migrate-local.ts';
import { type IdMap, parseIdMap, storageCheckEnabled } from '../migration.ts';
import { DRIVE_KEY_RE, parseDrive } from '../qemu-config.ts';
import { checkCfsQuorum } from '../quorum.ts';
import type { Route, RouteCtx } from '../server.ts';
import type { ClusterState, VmState } from '../state.ts';
import { checkLock, loadVm, vmPerm } from './qemu-common.ts';
import { storageConfig } from './qemu-migrate.ts';

/** $check_storage_access_migrate (7.4+), or 6.4's $check_storage. */
export function checkStorageAccessMigrate(
  ctx: Pick<RouteCtx, 'c' | 'auth'>,
  sid: string,
  node: string,
  param: string,
): void {
  const { c, auth } = ctx;
  if (c.profile.profile === '6.4') {
    if (!storageConfig(c, sid)) die(`storage '${sid}' does not exist`);
    if (!c.storage(node, sid)) die(`storage '${sid}' is not available on node '${node}'`);
  } else storageCheckEnabled(c, sid, node);
  requirePriv(c, auth, `/storage/${sid}`, ['Datastore.AllocateSpace']);
  const s = c.storage(node, sid) ?? storageConfig(c, sid)!;
  if (!s.content.has('images')) {
    if (c.profile.profile === '6.4') paramError({ [param]: `storage '${sid}' does not support vm images` });
    die(`storage '${sid}' does not support vm images`);
  }
}

/** check_storage_availability (src/PVE/QemuServer.pm:2234-2258 at e6352be): the drives only. */
export function checkStorageAvailability(c: ClusterState, vm: VmState, target: string): void {
  for (const [k, v] of Object.entries(vm.config)) {
    if (!DRIVE_KEY_RE.test(k)) continue;
    const volid = parseDrive(v).file;
    const i = volid.indexOf(':');
    if (i <= 0 || volid.startsWith('/')) continue;
    const sid = volid.slice(0, i);
    const scfg = storageCheckEnabled(c, sid);
    storageCheckEnabled(c, sid, target);
    const vtype = /:(iso|vztmpl|backup|snippets|import)\//.exec(volid)?.[1] ?? 'images';
    if (!scfg.content.has(vtype)) die(`${volid}: content type '${vtype}' is not available on storage '${sid}'`);
  }
}

export const migratePostRoute: Route = {
  method: 'POST',
  path: '/nodes/{node}/qemu/{vmid}/migrate',
  perm: vmPerm('VM.Migrate'),
  handler: (ctx) => {
    const { c, auth, params } = ctx;
    const node = String(params.node);
    const vmid = Number(params.vmid);
    const target = String(params.target);
    if (target === node) paramError({ target: 'target is local node.' });
    checkCfsQuorum(c); // (:5569, before the target node's check)
    if (!c.nodes.has(target)) die(`no such cluster node '${target}'`);
    const root = isRootUser(auth);
    for (const p of ['force', 'migration_type', 'migration_network'])
      if (params[p] && !root) paramError({ [p]: 'Only root may use this option.' });
    const vm = loadVm(c, node, vmid);
    // "try to detect errors early"
    checkLock(vm, false);
    let online = Boolean(params.online);
    if (vm.status === 'running') {
      if (!online) die("can't migrate running VM without --online");
    } else online = false; // "VM isn't running. Doing offline migration instead." (the daemon's log)
    let storagemap: IdMap | undefined;
    const ts = params.targetstorage as string | undefined;
    if (ts) {
      storagemap = parseIdMap(ts, 'targetstorage', 'storage');
      if (!storagemap?.identity) requirePriv(c, auth, `/vms/${vmid}`, ['VM.Config.Disk']);
      for (const sid of storagemap?.entries.values() ?? [])
        checkStorageAccessMigrate(ctx, sid, target, 'targetstorage');
      if (storagemap?.default) checkStorageAccessMigrate(ctx, storagemap.default, target, 'targetstorage');
      if (storagemap?.identity) checkStorageAvailability(c, vm, target);
    } else checkStorageAvailability(c, vm, target);

    const opts = {
      node,
      target,
      vmid,
      online,
      withLocalDisks: Boolean(params['with-local-disks']),
      force: Boolean(params.force),
      storagemap,
      bwlimit: params.bwlimit as number | undefined,
      withConntrackState: online && Boolean(params['with-conntrack-state']),
    };
    if (vm.haManaged) {
      return ctx.tasks.start(node, 'hamigrate', String(vmid), auth, async (t) => {
        t.log(`Requesting HA migration for VM ${vmid} to node ${target}`);
        // The LRM migrates the service: `qm migrate` as root, online when it runs.
        const lrm = { authid: 'root@pam', userid: 'root@pam', kind: 'ticket' as const };
        ctx.tasks.start(node, 'qmigrate', String(vmid), lrm, (m) =>
          new LocalMigration(c, m, { ...opts, online: vm.status === 'running', force: false }).run(),
        );
      });
    }
    return ctx.tasks.start(node, 'qmigrate', String(vmid), auth, (t) => new LocalMigration(c, t, opts).run());
  },
};
