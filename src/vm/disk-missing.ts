/**
 * A VM of ours whose config names disks its storage does not hold. qemu-server's destroy frees the
 * disks first and then writes the config (`destroy_vm` in src/PVE/QemuServer.pm:1839-1927 at
 * e6352be: vdisk_free per drive, then the `lock: destroyed` replacement config written, the API's
 * worker removing the config last, src/PVE/API2/Qemu.pm:2868, :2888); a write refused there (no quorum: /etc/pve read-only) or a worker killed between
 * the two leaves the config, ours, with volumes that are gone. Every resize and start of it then
 * fails (activate_volumes, Qemu.pm:6027), and each was sent again at every retry, for good (fault
 * search F87).
 *
 * So when a resize, start or migration of ours fails on a VM that is still there (a migration's
 * scan of the volumes fails on one that is gone: "Problem found while scanning volumes", F94, where
 * it was sent again at every other reconcile), its disks are looked up on
 * their storages (the config and one listing per storage, on a failure path only): volumes gone are
 * reported (DiskVolumeMissing, with what to run), and nothing more is sent to that VM until a look
 * finds them back. An unreadable storage says nothing (an NFS share not mounted is not a volume
 * gone).
 */
import { reason } from './conditions.ts';
import type { StepContext } from './context.ts';
import { driveVolume, listedAs } from './spec.ts';

/** Config keys that hold a volume of the VM (a CD-ROM and `none` are skipped where read). */
const VOLUME_KEY = /^(scsi|virtio|sata|ide)\d+$|^efidisk0$|^tpmstate0$/;

/** The owner VMID in a volume name (`vm-100-disk-0`, a linked clone's `base-9000-disk-0/vm-100-disk-0`). */
function owner(volid: string): number | undefined {
  const m = /(?:^|[:/])(?:vm|base)-(\d+)-[^/]*$/.exec(volid);
  return m ? Number(m[1]) : undefined;
}

/**
 * The disks of VM `vmid` on `node` whose own volume (named for this VMID) its storage does not
 * list. Undefined when the config or a storage cannot be read: nothing is known then.
 */
export async function missingDisks(
  ctx: StepContext,
  node: string,
  vmid: number,
): Promise<Array<{ disk: string; volume: string }> | undefined> {
  try {
    const config = await ctx.client.vmConfig(node, vmid);
    const disks: Array<{ disk: string; volume: string }> = [];
    for (const [disk, value] of Object.entries(config.values)) {
      if (!VOLUME_KEY.test(disk) || /media=cdrom/.test(value)) continue;
      const volume = driveVolume(value);
      if (!volume.includes(':') || owner(volume) !== vmid) continue;
      disks.push({ disk, volume });
    }
    const listed = new Set<string>();
    for (const storage of new Set(disks.map((d) => d.volume.split(':')[0]!)))
      for (const v of await ctx.client.storageContent(node, storage, { vmid })) listed.add(listedAs(v.volid));
    return disks.filter((d) => !listed.has(listedAs(d.volume)));
  } catch {
    return undefined;
  }
}

function missingReport(node: string, vmid: number, missing: Array<{ disk: string; volume: string }>): Error {
  const which = missing.map((d) => `${d.disk} (${d.volume})`).join(', ');
  return reason(
    'DiskVolumeMissing',
    `VM ${vmid} on node ${node} names disks whose volumes its storage does not hold: ${which}. Its disks were freed and its config was left: a destroy whose last write failed (no quorum, or its worker died), or a volume removed by hand. Nothing more is sent to it. Fix: restore the volumes (from a backup), or qm destroy ${vmid} --purge on node ${node} (its other disks go with it), and the provider makes the VM again`,
  );
}

/**
 * After a resize, start or migration of ours failed on VM `vmid`, still there: throws DiskVolumeMissing when
 * its disks are gone (and remembers it), else returns and the failure is reported as it was.
 */
export async function checkDisksAfterFailure(ctx: StepContext, node: string, vmid: number): Promise<void> {
  const missing = await missingDisks(ctx, node, vmid);
  if (!missing?.length) return;
  ctx.memory.diskMissing = vmid;
  throw missingReport(node, vmid, missing);
}

/**
 * Before a resize, start or migration of VM `vmid`: one reported with volumes missing is looked at again
 * first, and nothing is sent while they still are.
 */
export async function recheckMissingDisks(ctx: StepContext, node: string, vmid: number): Promise<void> {
  if (ctx.memory.diskMissing !== vmid) return;
  const missing = await missingDisks(ctx, node, vmid);
  if (missing?.length) throw missingReport(node, vmid, missing);
  if (missing) delete ctx.memory.diskMissing;
}
