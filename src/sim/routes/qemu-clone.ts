/**
 * `POST /nodes/{node}/qemu/{vmid}/clone` (clone_vm), step by step as qemu-server does it, so that
 * a client sees (and a dead worker leaves) the same intermediate configs. Line numbers are
 * qemu-server's src/PVE/API2/Qemu.pm at e6352be (9.2.6); 8.3.13 (c2287c17, PVE/API2/Qemu.pm
 * :3959-4227) is the same; 6.4-2 (c948e143, PVE/API2/Qemu.pm:3039-3252) differs where noted.
 *
 * - `$load_and_check` (:4448-4581): the source's lock, `full` (default: linked for templates),
 *   storage access, `unable to create VM N: config file already exists`, and `newconf`: every
 *   option of the source except snapshot data and `unusedN`, NICs with new MACs, CD-ROMs copied,
 *   disks set aside, plus `lock: clone`. The handler runs it once as an early check (:4747).
 * - The worker (:4749, `qmclone`, id = the source VMID) takes the source's flock (exclusive if
 *   it runs, shared otherwise) and then the new VMID's, 1 s each (:4734-4745), runs
 *   `$load_and_check` again, gives `newconf` a new smbios1 uuid, a new vmgenid if the source has
 *   one, drops `template`, sets `name` (`Copy-of-VM-<name>` by default) and `description` (when
 *   the parameter is non-empty) (:4592-4611), then writes the temporary config
 *   `# qmclone temporary file` / `lock: clone` (:4615).
 * - Each disk in key order (:4633) is cloned and the config rewritten with `newconf` so far,
 *   still `lock: clone` (:4676). Then `lock` is dropped, pending changes are discarded with a
 *   warning, the config is written a last time (:4680-4689), moved to `target` (:4706) and the
 *   VM joins its pool (:4710). Until then a pool-limited token cannot see it.
 * - On an error the new volumes are freed and the config unlinked: `clone failed: <error>`
 *   (:4712-4727). A worker that dies leaves the config as it was, `lock: clone`.
 * - 6.4 (before qemu-server 7.1-5): the handler itself takes the flocks, runs the checks and
 *   writes the temporary config; the worker inherits the flocks (held until it exits).
 *
 * The temporary file parses like any config (src/PVE/QemuServer.pm parse_vm_config, :1939 at
 * e6352be): a `#` line is description text (:2022-2026), so GET config answers
 * `description: " qmclone temporary file"` (the leading space kept; only trailing space is
 * trimmed, :1969-1975) and `lock: clone`.
 */

import { requirePriv } from '../auth.ts';
import { die } from '../errors.ts';
import { copyGuestDisk } from '../guest-state.ts';
import {
  DRIVE_KEY_RE,
  type DriveSpec,
  isCdrom,
  isCloudinit,
  NET_KEY_RE,
  parseDrive,
  parseNic,
  printNic,
  UNUSED_KEY_RE,
} from '../qemu-config.ts';
import { checkCfsQuorum } from '../quorum.ts';
import type { Route, RouteCtx } from '../server.ts';
import type { VmState } from '../state.ts';
import { MiB, type Volume } from '../storage.ts';
import { isWorkerDeath, type TaskHandle } from '../tasks.ts';
import { checkLock, checkPoolExists, DURATIONS, loadVm, vmPerm } from './qemu-common.ts';
import { allocUnderLock, copyWithProgress, printDrive, writeLinks } from './qemu-drives.ts';

/** The temporary config as parse_vm_config reads "# qmclone temporary file\nlock: clone\n". */
export const CLONE_TEMP_CONFIG: Readonly<Record<string, string>> = {
  description: ' qmclone temporary file',
  lock: 'clone',
};

interface ClonePlan {
  src: VmState;
  full: boolean;
  /** Disks to clone, in key order (cloud-init drives included). */
  disks: Array<{ key: string; drive: DriveSpec; vol: Volume }>;
  /** Every other option, NICs with new MACs, `lock: clone`. */
  newconf: Record<string, string>;
}

/** Options clone_vm does not copy (:4514-4525), besides `unusedN` and `snapshots`. */
const NOT_COPIED = new Set(['parent', 'snaptime', 'vmstate', 'snapstate', 'runningcpu', 'runningmachine']);

export const cloneRoute: Route = {
  method: 'POST',
  path: '/nodes/{node}/qemu/{vmid}/clone',
  perm: vmPerm('VM.Clone'),
  handler: async (ctx) => {
    const { c, auth, params } = ctx;
    const node = String(params.node);
    const vmid = Number(params.vmid);
    const newid = Number(params.newid);
    const pool = params.pool as string | undefined;
    checkPoolExists(c, pool);
    requirePriv(c, auth, pool ? `/pool/${pool}` : `/vms/${newid}`, ['VM.Allocate']);
    const target = (params.target as string | undefined) ?? node;
    if (!c.nodes.has(target)) die(`no such node '${target}'`);
    const storageId = params.storage as string | undefined;
    if (storageId !== undefined) {
      const s = c.storage(target, storageId);
      if (!s) die(`storage '${storageId}' does not exist`);
      requirePriv(c, auth, `/storage/${storageId}`, ['Datastore.AllocateSpace']);
      if (!s.content.has('images')) die(`storage '${storageId}' does not support vm images`);
      if (target !== node && !s.shared) die(`can't clone to non-shared storage '${storageId}'`);
    }
    const loadAndCheck = (): ClonePlan => planClone(ctx, node, vmid, newid, target, storageId);
    /** The source's flock: shared for a stopped source, exclusive for a running one (:4738-4745). */
    const lockSource = (src: VmState, signal?: AbortSignal) =>
      src.flock.acquire(1000, { shared: src.status !== 'running', ...(signal ? { signal } : {}) });

    if (!c.profile.cloneLocksInWorker) {
      // 6.4: flocks, checks and the temporary config in the handler; the worker inherits the flocks.
      const src = loadVm(c, node, vmid);
      const unlockSrc = await lockSource(src);
      let unlockNew: (() => void) | undefined;
      let newVm: VmState;
      let plan: ClonePlan;
      try {
        unlockNew = await c.flock(newid).acquire(1000);
        plan = loadAndCheck();
        newVm = writeTempConfig(ctx, plan, newid, node, params);
      } catch (e) {
        unlockNew?.();
        unlockSrc();
        throw e;
      }
      const unlock = () => {
        unlockNew?.();
        unlockSrc();
      };
      return ctx.tasks.start(
        node,
        'qmclone',
        String(vmid),
        auth,
        async (t) => {
          try {
            await cloneDisks(ctx, t, plan, newVm, { newid, target, storageId, pool });
          } finally {
            unlock();
          }
        },
        ({ ran, died }) => {
          if (ran) return;
          // A `fail` before the worker ran stands for its error path (the config goes);
          // a dead worker leaves the temporary config. Either way its flocks go.
          if (!died && c.vms.get(newid) === newVm) c.vms.delete(newid);
          unlock();
        },
      );
    }

    loadAndCheck(); // early checks before forking/locking (:4747)
    return ctx.tasks.start(node, 'qmclone', String(vmid), auth, async (t) => {
      const src = loadVm(c, node, vmid);
      const unlockSrc = await lockSource(src, t.signal);
      try {
        const unlockNew = await c.flock(newid).acquire(1000, { signal: t.signal });
        try {
          const plan = loadAndCheck();
          if (c.profile.profile === '9.2') t.log(`creating a clone of VM ${vmid} with ID ${newid}`);
          const newVm = writeTempConfig(ctx, plan, newid, node, params);
          await cloneDisks(ctx, t, plan, newVm, { newid, target, storageId, pool });
        } finally {
          unlockNew();
        }
      } finally {
        unlockSrc();
      }
    });
  },
};

/** `$load_and_check`: the checks, the disks to clone and `newconf` (:4448-4581). */
function planClone(
  ctx: RouteCtx,
  node: string,
  vmid: number,
  newid: number,
  target: string,
  storageId: string | undefined,
): ClonePlan {
  const { c, params } = ctx;
  // In the handler and again in the worker, after the target storage's checks (:4469).
  checkCfsQuorum(c);
  const src = loadVm(c, node, vmid);
  checkLock(src, false);
  const full = params.full === undefined ? src.config.template !== '1' : Boolean(params.full);
  if (!full && params.storage !== undefined) die("parameter 'storage' not allowed for linked clones");
  if (!full && params.format !== undefined) die("parameter 'format' not allowed for linked clones");
  const disks: ClonePlan['disks'] = [];
  const newconf: Record<string, string> = { lock: 'clone' };
  for (const k of Object.keys(src.config).sort()) {
    const v = src.config[k]!;
    if (NOT_COPIED.has(k) || UNUSED_KEY_RE.test(k)) continue;
    if (NET_KEY_RE.test(k)) {
      const nic = parseNic(v);
      nic.mac = c.generateMac();
      newconf[k] = printNic(nic);
      continue;
    }
    if (!DRIVE_KEY_RE.test(k)) {
      newconf[k] = v;
      continue;
    }
    const d = parseDrive(v);
    if (isCdrom(d) && !isCloudinit(d)) {
      newconf[k] = v;
      continue;
    }
    const vol = c.volume(node, d.file);
    if (!vol) continue;
    if (!full && !isCloudinit(d) && !vol.volname.includes('base-')) {
      die(
        c.profile.proxmoxOui
          ? `Linked clone feature is not supported for '${vol.volid}' (${k})`
          : `Linked clone feature is not supported for drive '${k}'`,
      );
    }
    if (target !== node && !c.storage(target, vol.storage)?.shared && !storageId) {
      die(`can't clone VM to node '${target}' (VM uses local storage)`);
    }
    disks.push({ key: k, drive: d, vol });
  }
  if (c.vms.has(newid)) die(`unable to create VM ${newid}: config file already exists`);
  return { src, full, disks, newconf };
}

/** The rest of `$clonefn` before the disks: identity, name, description, the temporary config. */
function writeTempConfig(
  ctx: RouteCtx,
  plan: ClonePlan,
  newid: number,
  node: string,
  params: Record<string, unknown>,
): VmState {
  const { c } = ctx;
  const { src, newconf } = plan;
  const uuid = c.rng.uuid();
  const smbios1 = newconf.smbios1 ?? '';
  newconf.smbios1 = /(^|,)uuid=[^,]*/.test(smbios1)
    ? smbios1.replace(/(^|,)uuid=[^,]*/, `$1uuid=${uuid}`)
    : [`uuid=${uuid}`, ...(smbios1 ? [smbios1] : [])].join(',');
  if (newconf.vmgenid) newconf.vmgenid = c.rng.uuid();
  delete newconf.template;
  newconf.name = params.name ? String(params.name) : `Copy-of-VM-${src.config.name ?? src.vmid}`;
  if (params.description) newconf.description = String(params.description);
  // The config lives on this node until the end, whatever `target` says (moved at :4706).
  const vm = c.newVm(newid, node, { ...CLONE_TEMP_CONFIG });
  vm.guestAgent = src.guestAgent;
  // The disk goes with what was installed on it (and its last cloud-init instance).
  vm.guestDisk = copyGuestDisk(src.guestDisk);
  return vm;
}

/** The disk loop and the final writes of `$clonefn` (:4617-4727). */
async function cloneDisks(
  ctx: RouteCtx,
  t: TaskHandle,
  plan: ClonePlan,
  newVm: VmState,
  where: { newid: number; target: string; storageId?: string | undefined; pool?: string | undefined },
): Promise<void> {
  const { c } = ctx;
  const { src, full, disks, newconf } = plan;
  const { newid, target, storageId, pool } = where;
  const created: Volume[] = [];
  // Written with every config: newconf carries the source's pending section (:4576, :4682-4686).
  const pending = { ...src.pending };
  const pendingDelete = new Set(src.pendingDelete);
  const write = (conf: Record<string, string>) => {
    newVm.config = { ...conf };
    newVm.pending = { ...pending };
    newVm.pendingDelete = new Set(pendingDelete);
  };
  try {
    for (const d of disks) {
      // clone_disk (src/PVE/QemuServer.pm:8005-8110 at e6352be): one line per drive; cloud-init drives are always
      // allocated anew (no data copied), other disks copied (full) or cloned from the base.
      const asFull = full || isCloudinit(d.drive);
      t.log(`create ${asFull ? 'full' : 'linked'} clone of drive ${d.key} (${d.vol.volid})`);
      const ts = c.storage(target, storageId ?? d.vol.storage)!;
      let nv: Volume;
      // vdisk_alloc / vdisk_clone: under the target storage's lock (storage-lock.ts); the copy of a
      // full clone runs outside it.
      if (isCloudinit(d.drive)) {
        nv = await allocUnderLock(c, t, ts, DURATIONS.cloudinit, () =>
          c.allocVolume(target, ts.id, newid, 4 * MiB, 'cloudinit'),
        );
        created.push(nv);
        newconf[d.key] = `${nv.volid},media=cdrom`;
      } else if (asFull) {
        nv = await allocUnderLock(c, t, ts, DURATIONS.alloc, () =>
          c.allocVolume(target, ts.id, newid, d.vol.size, 'disk'),
        );
        created.push(nv);
        await copyWithProgress(c, t, d.vol.size, writeLinks(ts));
        newconf[d.key] = printDrive(nv.volid, d.drive, nv.size);
      } else {
        nv = await allocUnderLock(c, t, ts, DURATIONS.linkedClone, () =>
          c.allocVolume(target, ts.id, newid, d.vol.size, 'disk', d.vol),
        );
        created.push(nv);
        newconf[d.key] = printDrive(nv.volid, d.drive, nv.size);
      }
      write(newconf);
    }
    // A `die` at `end` strikes here: every disk cloned, the config still `lock: clone`.
    t.endOfWork();
    delete newconf.lock;
    const changes = [...Object.keys(pending), ...(pendingDelete.size ? ['delete'] : [])].sort();
    if (changes.length) t.warn(`found pending changes for '${changes.join(',')}', discarding for clone`);
    for (const k of Object.keys(pending)) delete pending[k];
    pendingDelete.clear();
    write(newconf);
    newVm.node = target;
  } catch (e) {
    if (isWorkerDeath(e)) throw e;
    for (const v of created) c.freeVolume(target, v.volid);
    if (c.vms.get(newid) === newVm) c.vms.delete(newid);
    throw new Error(`clone failed: ${e instanceof Error ? e.message : String(e)}`);
  }
  if (pool) c.pools.get(pool)?.members.add(`qemu/${newid}`);
}
