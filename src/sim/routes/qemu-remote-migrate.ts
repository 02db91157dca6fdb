/**
 * `POST /nodes/{node}/qemu/{vmid}/remote_migrate` (remote_migrate_vm, 7.3 on; the 6.4 schema has
 * no such method, so the server answers 501 there): the checks the handler makes, including its
 * two API calls to the target through `target-endpoint` (remote-endpoints.ts), then a `qmigrate`
 * task running RemoteMigration (../migrate-remote.ts).
 *
 * Order (qemu-server src/PVE/API2/Qemu.pm:5670-5867 at e6352be; 8.4 c2287c17 :5035 and 7.4
 * 47cf3044 :4434 say `cannot migrate HA-managed VM to remote cluster` for an HA-managed VM): the
 * VM on this node, its lock, HA (400 on `vmid`), the endpoint parsed; without `fingerprint` a
 * first call (`GET /nodes/localhost/certificates/info`) fails on the target's self-signed
 * certificate (`fingerprint '…' not verified, abort!`); a running VM without `online`; the
 * storage and bridge maps (400s `failed to parse … map: …`), `remote migration requires explicit
 * storage mapping!` for `target-storage=1`; then `GET /cluster/status` on the target (its token
 * check: a bad secret is a 500 whose text is the target's 401 line, `401 …`; Sys.Audit on `/`),
 * whose local node is the target node. Errors of the target's API come back as the handler's 500
 * with PVE::APIClient's text (`<status> <reason>`), connection errors as `500 Can't connect to …`.
 */
import { requirePriv } from '../auth.ts';
import { die, paramError } from '../errors.ts';
import { RemoteMigration } from '../migrate-remote.ts';
import { parseIdMap } from '../migration.ts';
import { answeringNode, checkCfsQuorum } from '../quorum.ts';
import { parseRemote, RemoteApi, RemoteError } from '../remote-endpoints.ts';
import type { Route } from '../server.ts';
import { checkLock, loadVm, vmPerm } from './qemu-common.ts';

/** A call to the target from the handler: its failure is the handler's 500 with the client's text. */
async function remote<T>(p: Promise<T>): Promise<T> {
  try {
    return await p;
  } catch (e) {
    if (e instanceof RemoteError) die(e.message);
    throw e;
  }
}

export const remoteMigrateRoute: Route = {
  method: 'POST',
  path: '/nodes/{node}/qemu/{vmid}/remote_migrate',
  perm: vmPerm('VM.Migrate'),
  handler: async (ctx) => {
    const { c, auth, params } = ctx;
    const node = String(params.node);
    const vmid = Number(params.vmid);
    const targetVmid = (params['target-vmid'] as number | undefined) ?? vmid;
    checkCfsQuorum(c); // (:5741, before the VM is loaded)
    const vm = loadVm(c, node, vmid);
    checkLock(vm, false);
    if (vm.haManaged)
      paramError({
        vmid:
          c.profile.profile === '9.2'
            ? 'cannot remote-migrate VM that is configured for HA'
            : 'cannot migrate HA-managed VM to remote cluster',
      });
    const spec = parseRemote(String(params['target-endpoint']));
    const api = new RemoteApi(spec);
    // "Establishing API connection with remote at '…'" goes to the API daemon's log.
    if (!spec.fingerprint) await remote(api.call(() => null));
    let online = Boolean(params.online);
    if (vm.status === 'running') {
      if (!online) die("can't migrate running VM without --online");
    } else online = false;
    const storagemap = parseIdMap(params['target-storage'] as string, 'target-storage', 'storage');
    const bridgemap = parseIdMap(params['target-bridge'] as string, 'target-bridge', 'bridge');
    if (!storagemap || storagemap.identity) die('remote migration requires explicit storage mapping!');
    // GET /cluster/status: the entry with `local: 1` names the endpoint's node (the one answering).
    const targetNode = await remote(
      api.call((ep, tauth) => {
        requirePriv(ep.state, tauth, '/', ['Sys.Audit']);
        const local = answeringNode(ep.state);
        if (!local) die("couldn't determine endpoint's node name");
        return local;
      }),
    );
    const opts = {
      node,
      vmid,
      online,
      delete: Boolean(params.delete),
      storagemap,
      bridgemap,
      bwlimit: params.bwlimit as number | undefined,
      api,
      targetNode,
      targetVmid,
    };
    return ctx.tasks.start(node, 'qmigrate', String(vmid), auth, (t) => new RemoteMigration(c, t, opts).run());
  },
};
