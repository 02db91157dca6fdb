/**
 * Step 12: make the one change drift found: a config POST (with the digest, so a concurrent edit
 * by someone else is refused by PVE rather than overwritten), a disk resize (in a concurrency
 * slot), or a start/shutdown. The UPID goes to `status.atProvider.task`.
 */
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { externalName } from '../engine/resource.ts';
import { PveError } from '../proxmox/errors.ts';
import { atProvider, reason, setStep } from './conditions.ts';
import { followTask, hook, type StepContext, slotWait, slotWake } from './context.ts';
import { checkDisksAfterFailure, recheckMissingDisks } from './disk-missing.ts';
import { checkStaleDiskSize, resizeSent } from './disk-size.ts';
import type { Change } from './drift.ts';
import { checkMigration } from './migrate.ts';
import { refuseProtected } from './ownership.ts';
import { reserveReplacement, retireStep } from './replace.ts';
import { sendSiteMove } from './site-move-request.ts';
import { removeSnippets } from './snippet-removal.ts';
import { needsSnippet, recheckSnippet, uploadSnippet, writeSnippetOn } from './snippets.ts';

/** The changes that send nothing to the VM's own node (the move's and replacement's nodes are in the change). */
const NO_NODE_NEEDED: ReadonlySet<Change['kind']> = new Set([
  'reserve-site-move',
  'remote-migrate',
  'reserve-replacement',
  'retire-replaced',
]);

export async function applyChange(
  ctx: StepContext,
  r: ProxmoxVM,
  change: Change | undefined,
): Promise<{ requeueAfterMs?: number }> {
  const a = atProvider(r);
  const vmid = Number(externalName(r));
  if (!change) return {};
  const node = change.node ?? a.node ?? '';
  // Observe sets the node wherever it plans a change on the VM; dropped in silence, a change
  // planned without one was planned again on every reconcile with Synced True, for good (fault
  // search F45). A move's and a replacement's bookkeeping name their own nodes.
  if (!node && !NO_NODE_NEEDED.has(change.kind))
    throw reason(
      'NodeUnknown',
      `the change '${change.why}' was planned for VM ${vmid} with no node recorded in status.atProvider.node; nothing was sent. This is a provider bug: please report it with the resource's status`,
      true,
    );
  let upid: string | null = null;
  switch (change.kind) {
    case 'config': {
      const set = { ...change.set } as Record<string, string | number>;
      const digest = ctx.memory.lastFull?.digest;
      const snippet = ctx.memory.snippet;
      // The file first: the config never names a snippet that is not on the node.
      const newSnippet = snippet && set.cicustom === `user=${snippet.volid}`;
      if (newSnippet) {
        setStep(r, 'UploadingSnippet');
        await uploadSnippet(ctx);
      }
      upid = await ctx.client.updateVmConfig(node, vmid, {
        set,
        ...(change.del ? { delete: change.del } : {}),
        ...(digest ? { digest } : {}),
      });
      if (newSnippet || change.del?.includes('cicustom')) {
        // The old files are read by nothing now (PVE reads a snippet only when it builds the drive).
        await removeSnippets(ctx, r, node, newSnippet ? snippet.file : undefined);
        if (newSnippet) a.userDataSnippet = snippet.volid;
        else delete a.userDataSnippet;
      }
      break;
    }
    case 'resize': {
      // A resize has its own slots per node, apart from the creates' (limits.ts says why).
      if (!ctx.site.limiter.tryAcquire(r.metadata.uid, node, [], slotWake(ctx, r), { resize: true })) {
        a.step = 'WaitingForSlot';
        return { requeueAfterMs: slotWait(ctx) };
      }
      try {
        await recheckMissingDisks(ctx, node, vmid);
        await checkStaleDiskSize(ctx, node, vmid, change);
        resizeSent(ctx, vmid, change);
        upid = (await ctx.client.resizeDisk(node, vmid, change.disk!, change.size!)) ?? null;
      } catch (e) {
        // Refused, or its answer lost: no task of ours to wait for, so the slot goes back now (a
        // lost answer leaves at worst one resize running outside the limit, never a slot held).
        ctx.site.limiter.release(r.metadata.uid);
        // PVE before 8 resizes in the request itself (no task): its refusal is looked into here.
        if (e instanceof PveError && e.kind === 'server') await checkDisksAfterFailure(ctx, node, vmid);
        throw e;
      }
      if (!upid) ctx.site.limiter.release(r.metadata.uid);
      break;
    }
    case 'start':
      await recheckMissingDisks(ctx, node, vmid);
      ctx.memory.startSentAt = ctx.site.now();
      upid = await ctx.client.startVm(node, vmid);
      break;
    case 'reboot':
      // qemu-server's reboot shuts the guest down and starts it again, which applies pending changes.
      upid = await ctx.client.rebootVm(node, vmid, { timeout: 120 });
      break;
    case 'destroy-placeholder':
      // One request, so that no unlocked, unmarked VM is ever left between two steps: root@pam's
      // skiplock destroys a config under `lock: create|clone` (qemu-server Qemu.pm destroy_vm).
      setStep(r, 'Destroying');
      upid = await ctx.client.deleteVm(node, vmid, {
        purge: true,
        destroyUnreferencedDisks: true,
        skiplock: true,
      });
      break;
    case 'retire-duplicate':
    case 'discard-replacement': {
      // Stopped hard, then destroyed with its disks: it is a few minutes old (duplicates.ts, replace.ts).
      setStep(r, change.kind === 'retire-duplicate' ? 'RetiringDuplicate' : 'DiscardingReplacement');
      await refuseProtected(ctx, node, change.vmid ?? vmid, change.why);
      upid = change.running
        ? await ctx.client.stopVm(node, change.vmid ?? vmid)
        : await ctx.client.deleteVm(node, change.vmid ?? vmid, {
            purge: true,
            destroyUnreferencedDisks: true,
          });
      ctx.site.forgetMarked(change.vmid ?? vmid);
      break;
    }
    case 'stop':
      upid = await ctx.client.shutdownVm(node, vmid, { timeout: 60, forceStop: true });
      break;
    case 'migrate': {
      // Nothing moves unless the target passes its checks; the slot is the target's.
      setStep(r, 'CheckingNode');
      await recheckMissingDisks(ctx, node, vmid);
      const how = await checkMigration(ctx, r, node, vmid, change);
      const storages = how.targetStorage ? [how.targetStorage] : [];
      if (!ctx.site.limiter.tryAcquire(r.metadata.uid, change.target!, storages, slotWake(ctx, r))) {
        a.step = 'WaitingForSlot';
        return { requeueAfterMs: ctx.taskPollMs };
      }
      try {
        if (a.userDataSnippet || needsSnippet(r)) {
          // Its snippet on the target first: PVE migrates the disks, not the files `cicustom`
          // names (qemu-server QemuMigrate.pm scan_local_volumes walks QemuServer.pm foreach_volid,
          // drives only), and a VM reads its snippet when it starts. A node-local snippet storage
          // (`local`) would leave the config naming a file its new node has not got.
          setStep(r, 'UploadingSnippet');
          await writeSnippetOn(ctx, r, change.target!);
        }
        setStep(r, 'Migrating');
        upid = await ctx.client.migrateVm(node, vmid, {
          target: change.target!,
          ...(change.running ? { online: true } : {}),
          ...(how.withLocalDisks ? { withLocalDisks: true } : {}),
          ...(how.targetStorage ? { targetStorage: how.targetStorage } : {}),
        });
        // Its copy on the target once more, while the migration runs: another runtime's pending
        // removal of the copy there (the VM had left that node) may have checked the lock before
        // this migration took it (fault search F80), as a create's snippet is looked at again.
        await recheckSnippet(ctx);
      } catch (e) {
        ctx.site.limiter.release(r.metadata.uid);
        throw e;
      }
      break;
    }
    case 'move-disk': {
      if (!ctx.site.limiter.tryAcquire(r.metadata.uid, node, [change.storage!], slotWake(ctx, r))) {
        a.step = 'WaitingForSlot';
        return { requeueAfterMs: ctx.taskPollMs };
      }
      setStep(r, 'MovingDisk');
      const digest = ctx.memory.lastFull?.digest;
      try {
        // delete=1: PVE removes the source volume only after the copy completed.
        upid = await ctx.client.moveDisk(node, vmid, {
          disk: change.disk!,
          storage: change.storage!,
          delete: true,
          ...(digest ? { digest } : {}),
        });
      } catch (e) {
        ctx.site.limiter.release(r.metadata.uid);
        throw e;
      }
      break;
    }
    case 'reserve-site-move':
      // Written before anything is sent (the engine writes the status after this update), as a
      // create's VMID is: the next reconcile sends exactly this move, and finds it afterwards.
      a.siteMove = change.move!;
      setStep(r, 'ReservingTarget');
      await hook(ctx, 'update-reserve-site-move', r);
      return { requeueAfterMs: 0 };
    case 'reserve-replacement':
      reserveReplacement(ctx, r, change);
      await hook(ctx, 'update-reserve-replacement', r);
      return { requeueAfterMs: 0 };
    case 'retire-replaced':
      await retireStep(ctx, r, change);
      await hook(ctx, 'update-retire-replaced', r);
      return { requeueAfterMs: ctx.taskPollMs };
    case 'remote-migrate': {
      setStep(r, 'MigratingToSite');
      upid = await sendSiteMove(ctx, r, change);
      a.siteMove = { ...change.move!, upid };
      break;
    }
    default:
      return {};
  }
  ctx.memory.lastFull = undefined;
  ctx.site.invalidate(ctx.memory);
  if (upid) a.task = upid;
  await hook(ctx, `update-${change.kind}`, r);
  return { requeueAfterMs: upid ? followTask(ctx, r, upid, change.expectedMs) : ctx.taskPollMs };
}
