/**
 * A disk whose config says less than its volume holds. qemu-server's resize grows the volume, then
 * writes the new size into the config (src/PVE/API2/Qemu.pm:6059-6066 at e6352be); a write refused
 * (no quorum: /etc/pve read-only) or a worker killed between the two leaves the config at the old
 * size. A resize to the same size then compares with the volume's own size and returns without a
 * write (`return if $size == $newsize`, :6050): the task ends OK, the config still shows the old
 * size, and drift planned the same resize again at every observe, for good. Only `qm disk rescan`
 * (no API) writes the volume's size back into the config.
 *
 * So a resize planned again with the arguments of the last one this process sent reads the
 * volume's size first (one request, on a path no rollout takes): a volume already that large is
 * reported (DiskSizeStale, with the command to run) instead of resized again, unless a resize of
 * the VM still runs (its answer was lost: it writes the config when it ends). A smaller one (the
 * resize failed before it grew the volume) is resized as before.
 */
import { reason } from './conditions.ts';
import type { StepContext } from './context.ts';
import type { Change } from './drift.ts';
import { listedAs, parsePveSize } from './spec.ts';

/** Before sending `change` (a resize) to VM `vmid` on `node`: throws DiskSizeStale when the config is what is behind. */
export async function checkStaleDiskSize(ctx: StepContext, node: string, vmid: number, change: Change): Promise<void> {
  const last = ctx.memory.resizeSent;
  const again = last?.vmid === vmid && last.disk === change.disk && last.size === change.size;
  const storage = change.volume?.split(':')[0];
  if (!again || !storage) return;
  const volumes = await ctx.client.storageContent(node, storage, { vmid });
  const volume = volumes.find((v) => listedAs(v.volid) === listedAs(change.volume!));
  const want = parsePveSize(change.size);
  if (!volume || want === undefined || volume.size < want) return;
  // The resize sent before may still run (its answer lost): it grew the volume and writes the
  // config when it ends, which is no stale size (fault search F96).
  const running = (await ctx.client.listTasks(node, { source: 'active', vmid, typefilter: 'resize' })).find(
    (t) => t.endtime === undefined,
  );
  if (running)
    throw reason(
      'Locked',
      `a resize of VM ${vmid} is still running (task ${running.upid}): its config shows the new size of ${change.disk} when it ends; waiting for it`,
      true,
    );
  throw reason(
    'DiskSizeStale',
    `${change.disk} of VM ${vmid} is ${change.size} or more on its storage (${change.volume}), but its config still shows the size it had before: a resize grew the volume and its write of the config failed (no quorum, or its worker died). Resizing again changes nothing (Proxmox compares with the volume). Fix: qm disk rescan --vmid ${vmid} on node ${node}, which writes the volume's size into the config`,
  );
}

/** A resize was sent: the same one planned again is looked into (checkStaleDiskSize). */
export function resizeSent(ctx: StepContext, vmid: number, change: Change): void {
  ctx.memory.resizeSent = { vmid, disk: change.disk ?? '', size: change.size ?? '' };
}
