/**
 * VM snapshots: list, create (with or without RAM), the snapshot index and config, rollback and
 * delete, step by step as qemu-server and pve-guest-common do them, so that a client sees (and a
 * dead worker leaves) the same locks and `snapstate`s. Line numbers are qemu-server's
 * src/PVE/API2/Qemu.pm at e6352be (9.2.6) and pve-guest-common's src/PVE/AbstractConfig.pm at
 * 4a8f6cb; the same flow in 6.4-8.4 except where noted.
 *
 * - create (`snapshot`, :6167, task `qmsnapshot`): __snapshot_prepare under the flock (template,
 *   check_lock, `lock: snapshot`, name in use, has_feature('snapshot'), the RAM state volume
 *   when `vmstate` and the VM runs, the `[snapname]` section with `snapstate: prepare`), then one
 *   storage snapshot per disk (`snapshotting 'drive-scsi0' (…)`), then __snapshot_commit
 *   (`parent`, the lock and snapstate removed).
 * - delete (`delsnapshot`, :6436, `qmdelsnapshot`): set_lock `snapshot-delete`, `snapstate:
 *   delete`, the RAM state and the disk snapshots removed, the section and the lock dropped,
 *   parent references moved up.
 * - rollback (`rollback`, :6368, `qmrollback`): checks, the VM stopped, `lock: rollback`, each
 *   disk rolled back, the section's config applied (description and unusedN kept), `parent`; a
 *   snapshot with RAM starts the VM again from its state.
 *
 * Which disks can be snapshotted is pve-storage volume_has_feature('snapshot') (src/PVE/Storage/
 * *Plugin.pm at 0c56bad): lvmthin, zfspool and rbd volumes always (linked clones too: they are
 * `current` volumes), dir/nfs/cephfs only qcow2 files, plain LVM (raw) never. A ZFS volume rolls
 * back only to its most recent snapshot (ZFSPoolPlugin volume_rollback_is_possible).
 */

import { requirePriv } from '../auth.ts';
import { die } from '../errors.ts';
import { powerOff } from '../guest-cloudinit.ts';
import { configMemoryMiB, DRIVE_KEY_RE, isCdrom, parseDrive, typedConfig, UNUSED_KEY_RE } from '../qemu-config.ts';
import type { Route } from '../server.ts';
import type { ClusterState, SnapshotState, VmState } from '../state.ts';
import { MiB, type Volume } from '../storage.ts';
import { isWorkerDeath, type TaskHandle } from '../tasks.ts';
import { checkLock, DURATIONS, loadVm, vmPerm } from './qemu-common.ts';
import { renderBytes } from './qemu-drives.ts';
import { bootVm } from './qemu-power.ts';

/** Keys __snapshot_copy_config does not copy into (or back from) a snapshot section. */
const NOT_IN_SNAPSHOT = new Set(['snapstate', 'snaptime', 'vmstate', 'lock', 'digest', 'description']);
/** `parent` is copied too; here it is kept as the section's own field (SnapshotState.parent). */
const SECTION_KEYS = new Set([...NOT_IN_SNAPSHOT, 'parent']);

/** The disks of a config (CD-ROMs, cloud-init drives included, are skipped by every snapshot step). */
function disks(
  c: ClusterState,
  vm: VmState,
  config: Record<string, string>,
): Array<{ key: string; vol?: Volume; file: string }> {
  const out: Array<{ key: string; vol?: Volume; file: string }> = [];
  for (const k of Object.keys(config).sort()) {
    if (!DRIVE_KEY_RE.test(k)) continue;
    const d = parseDrive(config[k]!);
    if (isCdrom(d)) continue;
    const vol = c.volume(vm.node, d.file);
    out.push({ key: k, file: d.file, ...(vol ? { vol } : {}) });
  }
  return out;
}

/** volume_has_feature($storecfg, 'snapshot', $volid) for a current volume. */
function canSnapshot(c: ClusterState, vm: VmState, vol: Volume | undefined): boolean {
  if (!vol) return false;
  const s = c.storage(vm.node, vol.storage);
  if (!s) return false;
  switch (s.type) {
    case 'lvmthin':
    case 'zfspool':
    case 'rbd':
      return true;
    case 'lvm':
      // LVMPlugin: only qcow2 (the 9.x snapshot-as-volume-chain); the simulator's LVM holds raw.
      return vol.format === 'qcow2';
    default:
      return vol.format === 'qcow2';
  }
}

/** find_vmstate_storage (QemuConfig.pm): `vmstatestorage`, else a shared disk storage, else a local one (file based preferred), else `local`. */
export function vmstateStorage(c: ClusterState, vm: VmState): string {
  if (vm.config.vmstatestorage) return vm.config.vmstatestorage;
  let shared: string | undefined;
  let local: string | undefined;
  for (const d of disks(c, vm, vm.config)) {
    const s = d.vol && c.storage(vm.node, d.vol.storage);
    if (!s) continue;
    if (s.shared) {
      if (!shared || s.path) shared = s.id;
    } else if (!local || s.path) local = s.id;
  }
  return shared ?? local ?? 'local';
}

function snapshotConfig(config: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(config)) if (!SECTION_KEYS.has(k) && !UNUSED_KEY_RE.test(k)) out[k] = v;
  return out;
}

function getSnapshot(vm: VmState, name: string): SnapshotState {
  const snap = vm.snapshots.get(name);
  if (!snap) throw new Error(`snapshot '${name}' does not exist`);
  return snap;
}

/** __snapshot_prepare + the disk snapshots + __snapshot_commit (AbstractConfig.pm:730-925). */
async function createSnapshot(
  c: ClusterState,
  t: TaskHandle,
  vm: VmState,
  name: string,
  saveVmstate: boolean,
  description: string | undefined,
): Promise<void> {
  let unlock = await vm.flock.acquire(10_000, { signal: t.signal });
  let snap: SnapshotState;
  try {
    if (vm.config.template === '1') throw new Error("you can't take a snapshot if it's a template");
    checkLock(vm, false);
    if (vm.snapshots.has(name)) throw new Error(`snapshot name '${name}' already used`);
    if (!disks(c, vm, vm.config).every((d) => canSnapshot(c, vm, d.vol)))
      throw new Error('snapshot feature is not available');
    for (const [other, s] of vm.snapshots)
      if (s.parent === name) {
        t.warn(`deleting parent '${name}' reference from '${other}' to avoid bogus snapshot cycle.`);
        delete s.parent;
      }
    snap = {
      config: snapshotConfig(vm.config),
      snaptime: c.clock.epoch(),
      snapstate: 'prepare',
      ...(vm.config.parent ? { parent: vm.config.parent } : {}),
      ...(description ? { description } : {}),
    };
    if (saveVmstate && vm.status === 'running') {
      // __snapshot_save_vmstate: `vm-N-state-NAME` (`.raw` on file storages), 2 x memory + 500 MiB.
      const sid = vmstateStorage(c, vm);
      const s = c.storage(vm.node, sid);
      if (!s) throw new Error(`storage '${sid}' does not exist`);
      const size = (configMemoryMiB(vm.config) * 2 + 500) * MiB;
      const base = `vm-${vm.vmid}-state-${name}`;
      const volname = s.isFileBased ? `${vm.vmid}/${base}.raw` : base;
      if (s.avail < size) throw new Error(`unable to create state volume '${volname}': not enough space on '${sid}'`);
      s.volumes.set(volname, {
        volid: `${sid}:${volname}`,
        storage: sid,
        volname,
        content: 'images',
        format: 'raw',
        size,
        vmid: vm.vmid,
        ctime: c.clock.epoch(),
      });
      snap.vmstate = `${sid}:${volname}`;
      snap.config.runningmachine = 'pc-i440fx-9.2+pve1';
    }
    vm.config.lock = 'snapshot';
    vm.snapshots.set(name, snap);
  } finally {
    unlock();
  }
  const running = vm.status === 'running';
  if (running && snap.vmstate) {
    // __snapshot_create_vol_snapshots_hook 'before': savevm-start and its progress lines.
    const sid = snap.vmstate.split(':')[0];
    t.log(`saving VM state and RAM using storage '${sid}'`);
    const mem = Math.round(configMemoryMiB(vm.config) * MiB * 0.42);
    await t.sleep(DURATIONS.savevm / 2);
    t.log(`${renderBytes(mem / 2)} in 1s`);
    await t.sleep(DURATIONS.savevm / 2);
    t.log(`completed saving the VM state in 2s, saved ${renderBytes(mem)}`);
  }
  for (const d of disks(c, vm, snap.config)) {
    t.log(`snapshotting 'drive-${d.key}' (${d.file})`);
    await t.sleep(DURATIONS.volumeSnapshot);
    if (d.vol) d.vol.snapshots = [...(d.vol.snapshots ?? []), name];
  }
  t.endOfWork();
  unlock = await vm.flock.acquire(10_000, { signal: t.signal });
  try {
    if (vm.config.lock !== 'snapshot') throw new Error('missing snapshot lock');
    const s = getSnapshot(vm, name);
    if (s.snapstate !== 'prepare') throw new Error('wrong snapshot state');
    delete s.snapstate;
    delete vm.config.lock;
    vm.config.parent = name;
  } finally {
    unlock();
  }
}

/** snapshot_delete (AbstractConfig.pm:922-1040), with `lock: snapshot-delete`. */
async function deleteSnapshot(c: ClusterState, t: TaskHandle, vm: VmState, name: string): Promise<void> {
  let unlock = await vm.flock.acquire(10_000, { signal: t.signal });
  let snap: SnapshotState;
  try {
    snap = getSnapshot(vm, name);
    // set_lock: check_lock first.
    if (vm.config.lock) throw new Error(`VM is locked (${vm.config.lock})`);
    vm.config.lock = 'snapshot-delete';
    if (vm.config.template === '1') throw new Error("you can't delete a snapshot if vm is a template");
    snap.snapstate = 'delete';
  } finally {
    unlock();
  }
  if (snap.vmstate) {
    c.freeVolume(vm.node, snap.vmstate);
    delete snap.vmstate;
    delete snap.config.runningmachine;
  }
  for (const d of disks(c, vm, snap.config)) {
    await t.sleep(DURATIONS.volumeSnapshot);
    if (d.vol?.snapshots) d.vol.snapshots = d.vol.snapshots.filter((x) => x !== name);
  }
  t.endOfWork();
  unlock = await vm.flock.acquire(10_000, { signal: t.signal });
  try {
    if (vm.config.lock !== 'snapshot-delete') throw new Error("encountered invalid lock, expected 'snapshot-delete'");
    getSnapshot(vm, name);
    // $unlink_parent: whoever had this snapshot as parent now has its parent.
    if (vm.config.parent === name) {
      if (snap.parent) vm.config.parent = snap.parent;
      else delete vm.config.parent;
    }
    for (const [other, s] of vm.snapshots) {
      if (other === name || s.parent !== name) continue;
      if (snap.parent) s.parent = snap.parent;
      else delete s.parent;
    }
    vm.snapshots.delete(name);
    delete vm.config.lock;
  } finally {
    unlock();
  }
}

/** snapshot_rollback (AbstractConfig.pm:1124-1215). */
async function rollbackSnapshot(c: ClusterState, t: TaskHandle, vm: VmState, name: string): Promise<void> {
  let unlock = await vm.flock.acquire(10_000, { signal: t.signal });
  let snap: SnapshotState;
  try {
    if (vm.config.template === '1') throw new Error("you can't rollback if vm is a template");
    snap = getSnapshot(vm, name);
    for (const d of disks(c, vm, snap.config)) {
      const s = d.vol && c.storage(vm.node, d.vol.storage);
      const list = d.vol?.snapshots ?? [];
      const later = list.includes(name) ? list.slice(list.indexOf(name) + 1) : [];
      if (s?.type === 'zfspool' && later.length)
        throw new Error(`can't rollback, '${name}' is not most recent snapshot on '${d.file}'`);
    }
    if (snap.snapstate) throw new Error(`unable to rollback to incomplete snapshot (snapstate = ${snap.snapstate})`);
    checkLock(vm, false);
    if (vm.status === 'running') {
      // __snapshot_rollback_vm_stop: vm_stop with a 5 s timeout.
      await t.sleep(DURATIONS.stop);
      powerOff(c, vm);
    }
    vm.config.lock = 'rollback';
  } finally {
    unlock();
  }
  for (const d of disks(c, vm, snap.config)) {
    if (c.storage(vm.node, d.vol?.storage ?? '')?.type === 'zfspool' && d.vol?.snapshots)
      d.vol.snapshots = d.vol.snapshots.slice(0, d.vol.snapshots.indexOf(name) + 1);
    await t.sleep(DURATIONS.volumeSnapshot);
  }
  t.endOfWork();
  unlock = await vm.flock.acquire(10_000, { signal: t.signal });
  try {
    if (vm.config.lock !== 'rollback') throw new Error('got wrong lock');
    // __snapshot_apply_config: the section's config; description and unusedN stay.
    const keep = Object.entries(vm.config).filter(([k]) => k === 'description' || UNUSED_KEY_RE.test(k));
    const { runningmachine: _m, ...config } = snap.config;
    vm.config = { ...Object.fromEntries(keep), ...config, parent: name };
    vm.pending = {};
    vm.pendingDelete.clear();
  } finally {
    unlock();
  }
  if (snap.vmstate) await bootVm(c, t, vm);
}

const snapPath = '/nodes/{node}/qemu/{vmid}/snapshot';

export const snapshotRoutes: Route[] = [
  {
    method: 'GET',
    path: snapPath,
    perm: vmPerm('VM.Audit'),
    handler: ({ c, params }) => {
      const vm = loadVm(c, String(params.node), Number(params.vmid));
      // `keys %$snaphash` has no order in PVE; oldest first here (creation order within a
      // second), `current` last as in PVE.
      const list = [...vm.snapshots.entries()]
        .sort(([, x], [, y]) => x.snaptime - y.snaptime)
        .map(([name, s]) => ({
          name,
          snaptime: s.snaptime || 0,
          vmstate: s.vmstate ? 1 : 0,
          description: s.description ?? '',
          ...(s.parent ? { parent: s.parent } : {}),
          ...(s.snapstate ? { snapstate: s.snapstate } : {}),
        }));
      return [
        ...list,
        {
          name: 'current',
          digest: c.digest(vm),
          running: vm.status === 'running' ? 1 : 0,
          description: 'You are here!',
          ...(vm.config.parent ? { parent: vm.config.parent } : {}),
        },
      ];
    },
  },
  {
    method: 'POST',
    path: snapPath,
    perm: vmPerm('VM.Snapshot'),
    handler: (ctx) => {
      const { c, auth, params } = ctx;
      const node = String(params.node);
      const vmid = Number(params.vmid);
      const name = String(params.snapname);
      if (name === 'current') die("unable to use snapshot name 'current' (reserved name)");
      if (name.toLowerCase() === 'pending') die("unable to use snapshot name 'pending' (reserved name)");
      const vm = loadVm(c, node, vmid);
      const vmstate = Boolean(params.vmstate);
      return ctx.tasks.start(node, 'qmsnapshot', String(vmid), auth, async (t) => {
        try {
          await createSnapshot(c, t, vm, name, vmstate, params.description as string | undefined);
        } catch (e) {
          if (isWorkerDeath(e)) throw e;
          // snapshot_create's cleanup: a prepared section and its lock go again (snapshot_delete
          // with force); a failure in prepare itself left nothing.
          const s = vm.snapshots.get(name);
          if (s?.snapstate === 'prepare' && vm.config.lock === 'snapshot') {
            t.warn('snapshot create failed: starting cleanup');
            if (s.vmstate) c.freeVolume(node, s.vmstate);
            for (const d of disks(c, vm, s.config))
              if (d.vol?.snapshots) d.vol.snapshots = d.vol.snapshots.filter((x) => x !== name);
            vm.snapshots.delete(name);
            delete vm.config.lock;
          }
          throw e;
        }
      });
    },
  },
  {
    // snapshot_cmd_idx: `user => 'all'`, no VM lookup.
    method: 'GET',
    path: `${snapPath}/{snapname}`,
    handler: () => [{ cmd: 'rollback' }, { cmd: 'config' }],
  },
  {
    method: 'GET',
    path: `${snapPath}/{snapname}/config`,
    perm: ({ c, auth, params }) =>
      requirePriv(c, auth, `/vms/${params.vmid}`, ['VM.Snapshot', 'VM.Snapshot.Rollback', 'VM.Audit'], { any: true }),
    handler: ({ c, params }) => {
      const vm = loadVm(c, String(params.node), Number(params.vmid));
      const s = vm.snapshots.get(String(params.snapname));
      if (!s) die(`snapshot '${params.snapname}' does not exist`);
      return snapshotSection(c, s);
    },
  },
  {
    method: 'PUT',
    path: `${snapPath}/{snapname}/config`,
    perm: vmPerm('VM.Snapshot'),
    handler: async ({ c, params }) => {
      if (params.description === undefined) return null;
      const vm = loadVm(c, String(params.node), Number(params.vmid));
      const unlock = await vm.flock.acquire(10_000);
      try {
        checkLock(vm, false);
        const s = vm.snapshots.get(String(params.snapname));
        if (!s) die(`snapshot '${params.snapname}' does not exist`);
        s.description = String(params.description);
      } finally {
        unlock();
      }
      return null;
    },
  },
  {
    method: 'POST',
    path: `${snapPath}/{snapname}/rollback`,
    perm: ({ c, auth, params }) =>
      requirePriv(c, auth, `/vms/${params.vmid}`, ['VM.Snapshot', 'VM.Snapshot.Rollback'], { any: true }),
    handler: (ctx) => {
      const { c, auth, params } = ctx;
      const node = String(params.node);
      const vmid = Number(params.vmid);
      // 9.x checks VM.PowerMgmt up front for `start` (vm_start is called from the worker).
      if (params.start && c.profile.profile === '9.2') requirePriv(c, auth, `/vms/${vmid}`, ['VM.PowerMgmt']);
      const vm = loadVm(c, node, vmid);
      return ctx.tasks.start(node, 'qmrollback', String(vmid), auth, async (t) => {
        await rollbackSnapshot(c, t, vm, String(params.snapname));
        if (params.start && vm.status !== 'running') await bootVm(c, t, vm);
      });
    },
  },
  {
    method: 'DELETE',
    path: `${snapPath}/{snapname}`,
    perm: vmPerm('VM.Snapshot'),
    handler: (ctx) => {
      const { c, auth, params } = ctx;
      const node = String(params.node);
      const vmid = Number(params.vmid);
      const vm = loadVm(c, node, vmid);
      return ctx.tasks.start(node, 'qmdelsnapshot', String(vmid), auth, (t) =>
        deleteSnapshot(c, t, vm, String(params.snapname)),
      );
    },
  },
];

/** A `[snapname]` section as the API gives it: its config keys, typed, plus the section's own keys. */
export function snapshotSection(c: ClusterState, s: SnapshotState): Record<string, unknown> {
  return {
    ...typedConfig(s.config, c.profile),
    snaptime: s.snaptime,
    ...(s.description !== undefined ? { description: s.description } : {}),
    ...(s.parent ? { parent: s.parent } : {}),
    ...(s.vmstate ? { vmstate: s.vmstate } : {}),
    ...(s.snapstate ? { snapstate: s.snapstate } : {}),
  };
}
