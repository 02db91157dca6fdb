/**
 * `POST /nodes/{node}/qemu/{vmid}/move_disk` (move_vm_disk): a disk copied to another storage in
 * a `qmmove` task (id: the VMID), online through drive-mirror for a running VM, offline through
 * `qemu-img convert`; the drive then points at the new volume and the old one becomes `unusedN`,
 * or is freed with `delete=1` once the copy succeeded. From 7.4, `target-vmid`/`target-disk`
 * reassign the volume to another VM on the same node instead (qemu-move-reassign.ts).
 *
 * PVE takes no config `lock` for this: the worker holds the VM's flock (lock_config) for the
 * whole copy, so other config writers wait for it (and give up after their 10 s), while `GET
 * config` and `/cluster/resources` show no lock. Sources (qemu-server src/PVE/API2/Qemu.pm at
 * e6352be, move_vm_disk :4753-5219; 8.4 = c2287c17 :4231, 7.4 = 47cf3044 :3706, 6.4 = c948e143
 * :3256) and clone_disk (src/PVE/QemuServer.pm:8005-8110), the mirror's lines from
 * src/PVE/QemuServer/BlockJob.pm:125-235. Per release:
 * - 6.4: the handler itself takes the flock and runs the checks; the worker inherits the flock.
 *   The digest mismatch reads `VM config checksum missmatch (file change by other user?)`; no
 *   privilege on the target storage is checked.
 * - 6.4, 7.4: the target storage is not checked before the copy (a missing one fails the
 *   allocation: `storage migration failed: storage 'x' does not exist`; `images` content is not
 *   required).
 * - 7.4: `storage` and `target-vmid` (one of them); an `unusedN` disk cannot go to another storage
 *   (`cannot move disk 'unused0', only configured disks can be moved to another storage`).
 * - 8.4: the target storage is checked in the handler (exists, enabled; `images` content, a 400
 *   on `storage`); unused disks move.
 * - 9.2: the task logs `copying volume …`, `allocated target volume …`, `adding source volume …
 *   as 'unusedN' to config` and `removing source volume … after successful copy`.
 *
 * Duration: the disk's size through both storages, shared with the copies running on them
 * (bandwidth.ts), at most `bwlimit` KiB/s; the allocation waits for the target storage's lock.
 */
import { requirePriv } from '../auth.ts';
import { flowsOf, type Link, storageLink } from '../bandwidth.ts';
import { die, paramError } from '../errors.ts';
import { allocNamed, renderDuration, storageCheckEnabled, storageFormats } from '../migration.ts';
import { DRIVE_KEY_RE, isCdrom, isCloudinit, parseDrive, UNUSED_KEY_RE } from '../qemu-config.ts';
import type { Route, RouteCtx } from '../server.ts';
import type { ClusterState, VmState } from '../state.ts';
import { MiB, type StorageState, type Volume } from '../storage.ts';
import { underStorageLock } from '../storage-lock.ts';
import { isWorkerDeath, type TaskHandle } from '../tasks.ts';
import { checkLock, loadVm, vmPerm } from './qemu-common.ts';
import { copyWithProgress, printDrive, renderBytes } from './qemu-drives.ts';
import { reassignDisk } from './qemu-move-reassign.ts';

interface MovePlan {
  vm: VmState;
  disk: string;
  oldVolid: string;
  old: Volume;
  source: StorageState;
  snapshotted: boolean;
}

/** The volume's format as parse_volname reports it (the file's extension on file storages). */
function volumeFormat(v: Volume): string {
  return /\.(raw|qcow2|vmdk)$/.exec(v.volname)?.[1] ?? v.format;
}

/** `$load_and_check_move`: the VM, its lock, the digest, the disk, the target storage. */
function loadAndCheckMove(ctx: RouteCtx, node: string, storeid: string): MovePlan {
  const { c, params } = ctx;
  const p = c.profile.profile;
  const vmid = Number(params.vmid);
  const disk = String(params.disk);
  const vm = loadVm(c, node, vmid);
  checkLock(vm, false);
  const digest = params.digest as string | undefined;
  if (digest && digest !== c.digest(vm))
    die(
      p === '6.4'
        ? 'VM config checksum missmatch (file change by other user?)'
        : 'detected modified configuration - file changed by other user? Try again.',
    );
  const value = vm.config[disk];
  if (!value) die(`disk '${disk}' does not exist`);
  const d = parseDrive(value);
  if (!d.file) die(`disk '${disk}' has no associated volume`);
  if (isCdrom(d) && !isCloudinit(d)) die("you can't move a cdrom");
  const i = d.file.indexOf(':');
  if (i <= 0 || d.file.startsWith('/')) die(`unable to parse volume ID '${d.file}'`);
  const oldstoreid = d.file.slice(0, i);
  const source = c.storage(node, oldstoreid);
  if (!source) die(`storage '${oldstoreid}' does not exist`);
  const old = source.volumes.get(d.file.slice(i + 1));
  if (!old) die(`volume '${d.file}' does not exist`);
  const format = params.format as string | undefined;
  const oldfmt = volumeFormat(old);
  if (oldstoreid === storeid && (!format || oldfmt === format))
    die("you can't move to the same storage with same format");
  if (p === '8.4' || p === '9.2') {
    const s = storageCheckEnabled(c, storeid);
    if (!s.content.has('images')) paramError({ storage: `storage '${storeid}' does not support vm images` });
  }
  // is_volume_in_use with the disk given: only snapshots count.
  const snapshotted = [...vm.snapshots.values()].some((s) =>
    Object.entries(s.config).some(
      ([k, v]) => (DRIVE_KEY_RE.test(k) || UNUSED_KEY_RE.test(k)) && parseDrive(v).file === d.file,
    ),
  );
  if (snapshotted && params.delete) die("you can't move a disk with snapshots and delete the source");
  return { vm, disk, oldVolid: d.file, old, source, snapshotted };
}

/** AbstractConfig::add_unused_volume: the lowest free `unusedN` (none twice for one volume). */
export function addUnusedVolume(conf: Record<string, string>, volid: string): string | undefined {
  let key: string | undefined;
  for (let i = 255; i >= 0; i--) {
    const v = conf[`unused${i}`];
    if (v === volid) return undefined;
    if (!v) key = `unused${i}`;
  }
  if (!key) throw new Error('Too many unused volumes - please delete them first.');
  conf[key] = volid;
  return key;
}

/** template_create for one disk: the new volume becomes `base-…` (a moved disk of a template). */
function makeBase(s: StorageState, v: Volume, vmid: number): void {
  s.volumes.delete(v.volname);
  v.volname = v.volname.replace(`vm-${vmid}-disk-`, `base-${vmid}-disk-`);
  v.volid = `${s.id}:${v.volname}`;
  s.volumes.set(v.volname, v);
}

/** `$move_updatefn`: the copy, the config, the old volume (kept as unusedN, or freed). */
async function moveWorker(ctx: RouteCtx, t: TaskHandle, node: string, storeid: string): Promise<void> {
  const { c, params } = ctx;
  const p = c.profile.profile;
  const { vm, disk, oldVolid, old, source, snapshotted } = loadAndCheckMove(ctx, node, storeid);
  const vmid = vm.vmid;
  if (p === '9.2')
    t.log(`copying volume '${oldVolid}' from current storage '${source.id}' to target storage '${storeid}'`);
  const running = vm.status === 'running';
  const newvols: Volume[] = [];
  let target: StorageState | undefined;
  try {
    if (snapshotted) t.warn('moving disk with snapshots, snapshots will not be moved!');
    const unused = UNUSED_KEY_RE.test(disk);
    const mirror = running && !unused;
    if (mirror && disk === 'tpmstate0') throw new Error('cannot move TPM state while VM is running');
    t.log(`create full clone of drive ${disk} (${oldVolid})`);
    // vdisk_alloc: the storage as this node sees it.
    target = c.storage(node, storeid);
    if (!target) throw new Error(storageCheckEnabledMessage(c, storeid, node));
    const requested = params.format as string | undefined;
    const formats = storageFormats(target);
    const hint = requested ?? volumeFormat(old);
    const fmt = formats.valid.includes(hint) ? hint : formats.default;
    if (requested && requested !== fmt)
      t.warn(`format '${requested}' is not supported by the target storage '${storeid}' - using '${fmt}' instead`);
    const cloudinit = isCloudinit(parseDrive(vm.config[disk]!));
    const size = cloudinit ? 4 * MiB : old.size;
    const ts = target;
    // vdisk_alloc: under the target storage's lock (storage-lock.ts).
    const nv = await underStorageLock(ts, c.clock, () =>
      allocNamed(c, ts, vmid, size, fmt, cloudinit ? `vm-${vmid}-cloudinit` : undefined),
    );
    newvols.push(nv);
    if (p === '9.2') t.log(`allocated target volume '${nv.volid}'`);
    else if (target.type === 'lvm' || target.type === 'lvmthin') t.log(`  Logical volume "${nv.volname}" created.`);
    else if (target.isFileBased) t.log(`Formatting '${target.path}/images/${nv.volname}', fmt=${fmt} size=${size}`);
    const bwlimit = params.bwlimit as number | undefined;
    // The copy reads the source and writes the target: it shares both (bandwidth.ts).
    const links = [storageLink(source), storageLink(target)];
    const limit = bwlimit ? bwlimit * 1024 : undefined;
    if (cloudinit) {
      // No data is copied for a cloud-init drive (it is generated).
    } else if (mirror) await driveMirror(c, t, disk, size, links, bwlimit);
    else await copyWithProgress(c, t, size, links, limit);
    const d = parseDrive(vm.config[disk]!);
    // The config write: the drive on the new volume, the old one as unusedN.
    t.endOfWork();
    vm.config[disk] = unused ? nv.volid : printDrive(nv.volid, d, nv.size);
    if (!params.delete) {
      const key = addUnusedVolume(vm.config, oldVolid);
      if (key && p === '9.2') t.log(`adding source volume '${oldVolid}' as '${key}' to config`);
    }
    if (vm.config.template === '1' && !cloudinit) {
      makeBase(target, nv, vmid);
      vm.config[disk] = unused ? nv.volid : printDrive(nv.volid, d, nv.size);
    }
  } catch (e) {
    if (isWorkerDeath(e)) throw e;
    for (const v of newvols) target?.volumes.delete(v.volname);
    throw new Error(`storage migration failed: ${e instanceof Error ? e.message : String(e)}`);
  }
  if (params.delete) {
    if (p === '9.2') t.log(`removing source volume '${oldVolid}' after successful copy`);
    // vdisk_free: a base volume with linked clones stays (only a warning here).
    if (/(^|\/)base-\d+-/.test(old.volname) && [...source.volumes.values()].some((v) => v.parent === old.volid))
      t.warn(`base volume '${old.volname}' is still in use by linked clones`);
    else source.volumes.delete(old.volname);
  }
}

function storageCheckEnabledMessage(c: ClusterState, sid: string, node: string): string {
  try {
    storageCheckEnabled(c, sid, node);
  } catch (e) {
    return e instanceof Error ? e.message : String(e);
  }
  return `storage '${sid}' does not exist`;
}

/** qemu_drive_mirror + the block job monitor: progress lines, ready, completed (the disk switched). */
async function driveMirror(
  c: ClusterState,
  t: TaskHandle,
  disk: string,
  size: number,
  links: Link[],
  bwlimit?: number,
): Promise<void> {
  const d = `drive-${disk}`;
  t.log(`drive mirror is starting for ${d}${bwlimit ? ` with bandwidth limit: ${bwlimit} KiB/s` : ''}`);
  const all = renderBytes(size);
  t.log(`${d}: transferred 0.0 B of ${all} (0.00%) in 0s`);
  const flow = flowsOf(c.clock).start(links, size, bwlimit ? bwlimit * 1024 : undefined);
  try {
    for (let q = 1; q <= 4; q++) {
      const ms = await t.wait((signal) => flow.reached((size * q) / 4, signal));
      t.log(
        `${d}: transferred ${renderBytes(Math.floor((size * q) / 4))} of ${all} (${(q * 25).toFixed(2)}%) in ${renderDuration(ms / 1000)}${q === 4 ? ', ready' : ''}`,
      );
    }
  } finally {
    flow.cancel();
  }
  t.log("all 'mirror' jobs are ready");
  t.log(`${d}: Completing block job...`);
  t.log(`${d}: Completed successfully.`);
  t.log(`${d}: mirror-job finished`);
}

export const moveDiskRoute: Route = {
  method: 'POST',
  path: '/nodes/{node}/qemu/{vmid}/move_disk',
  perm: vmPerm('VM.Config.Disk'),
  handler: async (ctx) => {
    const { c, auth, params } = ctx;
    const p = c.profile.profile;
    const node = String(params.node);
    const vmid = Number(params.vmid);
    const storeid = params.storage as string | undefined;
    const targetVmid = params['target-vmid'] as number | undefined;
    if (targetVmid !== undefined && storeid !== undefined) {
      const msg = "either set 'storage' or 'target-vmid', but not both";
      paramError({ 'target-vmid': msg, storage: msg });
    }
    if (targetVmid !== undefined) return reassignDisk(ctx, node, vmid, targetVmid);
    if (storeid === undefined) {
      const msg = "both 'storage' and 'target-vmid' missing, either needs to be set";
      paramError({ 'target-vmid': msg, storage: msg });
    }
    if (p === '6.4') {
      // The handler locks and checks; the worker inherits the flock (held until it exits).
      const vm = loadVm(c, node, vmid);
      const unlock = await vm.flock.acquire(10_000);
      try {
        loadAndCheckMove(ctx, node, storeid);
      } catch (e) {
        unlock();
        throw e;
      }
      // 6.4 checks no privilege on the target storage (only VM.Config.Disk on the VM).
      return ctx.tasks.start(
        node,
        'qmmove',
        String(vmid),
        auth,
        async (t) => {
          try {
            await moveWorker(ctx, t, node, storeid);
          } finally {
            unlock();
          }
        },
        ({ ran }) => {
          if (!ran) unlock();
        },
      );
    }
    requirePriv(c, auth, `/storage/${storeid}`, ['Datastore.AllocateSpace']);
    if (p === '7.4' && UNUSED_KEY_RE.test(String(params.disk)))
      die(`cannot move disk '${params.disk}', only configured disks can be moved to another storage`);
    loadAndCheckMove(ctx, node, storeid); // early checks before forking/locking
    return ctx.tasks.start(node, 'qmmove', String(vmid), auth, async (t) => {
      const unlock = await c.flock(vmid).acquire(10_000, { signal: t.signal });
      try {
        await moveWorker(ctx, t, node, storeid);
      } finally {
        unlock();
      }
    });
  },
};
