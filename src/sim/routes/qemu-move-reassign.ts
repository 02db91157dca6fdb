/**
 * `move_disk` with `target-vmid` (7.4 on): a volume reassigned to another VM on the same node, as
 * qemu-server's `$disk_reassignfn` does it: the volume renamed to the target VMID
 * (`vm-101-disk-N`, the first free N), the disk removed from the source config (and its boot
 * order), added to the target's under `target-disk` (default: the same key). A `qmmove` task with
 * the id `<vmid>-<disk>><target-vmid>-<target-disk>`, holding both VMs' flocks; nothing is copied.
 *
 * Sources: qemu-server src/PVE/API2/Qemu.pm:4995-5201 at e6352be ($load_and_check_reassign_configs,
 * $disk_reassignfn, the handler's `target-vmid` branch); 8.4 (c2287c17) and 7.4 (47cf3044) log
 * `moving disk 'D' from VM 'A' to 'B'` where 9.x logs `reassign disk …`.
 */
import { isRootUser, requirePriv } from '../auth.ts';
import { die, paramError } from '../errors.ts';
import { isCdrom, isCloudinit, parseDrive, UNUSED_KEY_RE } from '../qemu-config.ts';
import type { RouteCtx } from '../server.ts';
import type { ClusterState, VmState } from '../state.ts';
import { checkLock, DURATIONS, loadVm } from './qemu-common.ts';
import { printDrive } from './qemu-drives.ts';

const MODIFIED = 'detected modified configuration - file changed by other user? Try again.';

interface ReassignPlan {
  src: VmState;
  dst: VmState;
  disk: string;
  targetDisk: string;
  volid: string;
}

function loadAndCheck(ctx: RouteCtx, node: string, vmid: number, targetVmid: number): ReassignPlan {
  const { c, params } = ctx;
  const disk = String(params.disk);
  const targetDisk = String(params['target-disk'] ?? disk);
  const s = c.vms.get(vmid);
  const d = c.vms.get(targetVmid);
  if (!s) die(`could not find VM ${vmid}`);
  if (!d) die(`could not find target VM ${targetVmid}`);
  if (s.node !== d.node) die(`Both VMs need to be on the same node (${s.node} != ${d.node})`);
  const src = loadVm(c, node, vmid);
  checkLock(src, false);
  const dst = loadVm(c, node, targetVmid);
  checkLock(dst, false);
  if (src.config.template === '1' || dst.config.template === '1') die("Can't move disks from or to template VMs");
  const digest = params.digest as string | undefined;
  if (digest && digest !== c.digest(src)) die(`VM ${vmid}: ${MODIFIED}`);
  const tdigest = params['target-digest'] as string | undefined;
  if (tdigest && tdigest !== c.digest(dst)) die(`VM ${targetVmid}: ${MODIFIED}`);
  if (src.config[disk] === undefined) die(`Disk '${disk}' for VM '${vmid}' does not exist`);
  if (dst.config[targetDisk]) die(`Target disk key '${targetDisk}' is already in use for VM '${targetVmid}'`);
  const drive = parseDrive(src.config[disk]!);
  const volid = drive.file;
  if (!volid) die(`disk '${disk}' has no associated volume`);
  if (isCdrom(drive) && !isCloudinit(drive)) die("CD drive contents can't be moved to another VM");
  const i = volid.indexOf(':');
  if (i <= 0 || volid.startsWith('/')) die(`Volume '${volid}' not managed by PVE`);
  const inSnapshot = [...src.snapshots.values()].some((sn) =>
    Object.values(sn.config).some((v) => parseDrive(v).file === volid),
  );
  if (inSnapshot) die("Can't move disk used by a snapshot to another VM");
  // volume_has_feature('rename'): a base volume cannot be renamed.
  if (/(^|\/)base-\d+-disk-\d+[^/]*$/.test(volid.slice(i + 1)))
    die('Storage does not support moving of this disk to another VM');
  if (src.status === 'running' && !UNUSED_KEY_RE.test(disk))
    die('Cannot move disk to another VM while the source VM is running - detach first');
  return { src, dst, disk, targetDisk, volid };
}

/** rename_volume to the target VMID: `find_free_diskname` on the volume's storage. */
function renameVolume(c: ClusterState, node: string, volid: string, to: number): string {
  const i = volid.indexOf(':');
  const s = c.storage(node, volid.slice(0, i))!;
  const vol = s.volumes.get(volid.slice(i + 1));
  if (!vol) throw new Error(`volume '${volid}' does not exist`);
  const taken = new Set([...s.volumes.values()].map((v) => v.volname.replace(/^.*\//, '').replace(/\.[a-z0-9]+$/, '')));
  let n = 0;
  while (taken.has(`vm-${to}-disk-${n}`) || taken.has(`base-${to}-disk-${n}`)) n++;
  const base = `vm-${to}-disk-${n}`;
  const own = s.isFileBased ? `${to}/${base}.${vol.format}` : base;
  // A linked clone keeps its base: `base-9000-disk-0/vm-101-disk-0`,
  // `9000/base-9000-disk-0.qcow2/101/vm-101-disk-0.qcow2`.
  let prefix = '';
  if (vol.parent) {
    const cut = s.isFileBased ? vol.volname.lastIndexOf(`/${vol.vmid}/`) : vol.volname.lastIndexOf('/');
    prefix = vol.volname.slice(0, cut + 1);
  }
  const volname = `${prefix}${own}`;
  s.volumes.delete(vol.volname);
  vol.volname = volname;
  vol.volid = `${s.id}:${volname}`;
  vol.vmid = to;
  s.volumes.set(volname, vol);
  return vol.volid;
}

/** The `target-vmid` branch of move_vm_disk: checks, then the `qmmove` worker. */
export function reassignDisk(ctx: RouteCtx, node: string, vmid: number, targetVmid: number): string {
  const { c, auth } = ctx;
  if (!isRootUser(auth)) requirePriv(c, auth, `/vms/${targetVmid}`, ['VM.Config.Disk']);
  if (vmid === targetVmid) paramError({ 'target-vmid': 'must be different than source VMID to reassign disk' });
  const plan = loadAndCheck(ctx, node, vmid, targetVmid);
  requirePriv(c, auth, `/storage/${plan.volid.slice(0, plan.volid.indexOf(':'))}`, ['Datastore.AllocateSpace']);
  const { disk, targetDisk } = plan;
  return ctx.tasks.start(node, 'qmmove', `${vmid}-${disk}>${targetVmid}-${targetDisk}`, auth, async (t) => {
    const unlockSrc = await c.flock(vmid).acquire(10_000, { signal: t.signal });
    try {
      const unlockDst = await c.flock(targetVmid).acquire(10_000, { signal: t.signal });
      try {
        const { src, dst, volid } = loadAndCheck(ctx, node, vmid, targetVmid);
        t.log(
          c.profile.profile === '9.2'
            ? `reassign disk '${disk}' from VM '${vmid}' as '${targetDisk}' to VM '${targetVmid}'`
            : `moving disk '${disk}' from VM '${vmid}' to '${targetVmid}'`,
        );
        await t.sleep(DURATIONS.config);
        t.endOfWork();
        const newVolid = renameVolume(c, node, volid, targetVmid);
        const order = /(?:^|,)order=([^,]*)/.exec(src.config.boot ?? '')?.[1];
        if (order?.split(';').includes(disk)) {
          t.log(`removing disk '${disk}' from boot order config`);
          const rest = order.split(';').filter((d) => d !== disk);
          if (rest.length) src.config.boot = `order=${rest.join(';')}`;
          else delete src.config.boot;
        }
        const value = src.config[disk]!;
        delete src.config[disk];
        t.log(`removing disk '${disk}' from VM '${vmid}' config`);
        const d = parseDrive(value);
        dst.config[targetDisk] = UNUSED_KEY_RE.test(targetDisk) ? newVolid : printDrive(newVolid, d);
      } finally {
        unlockDst();
      }
    } finally {
      unlockSrc();
    }
  });
}
