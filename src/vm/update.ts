/**
 * Step 12: make the one change drift found: a config POST (with the digest, so a concurrent edit
 * by someone else is refused by PVE rather than overwritten), a disk resize (in a concurrency
 * slot), or a start/shutdown. The UPID goes to `status.atProvider.task`.
 */
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { externalName } from '../engine/resource.ts';
import { atProvider, setStep } from './conditions.ts';
import { hook, type StepContext } from './context.ts';
import type { Change } from './drift.ts';

export async function applyChange(
  ctx: StepContext,
  r: ProxmoxVM,
  change: Change | undefined,
): Promise<{ requeueAfterMs?: number }> {
  const a = atProvider(r);
  const vmid = Number(externalName(r));
  const node = a.node;
  if (!change || !node) return {};
  let upid: string | null = null;
  switch (change.kind) {
    case 'config': {
      const set = { ...change.set } as Record<string, string | number>;
      const digest = ctx.memory.lastFull?.digest;
      upid = await ctx.client.updateVmConfig(node, vmid, {
        set,
        ...(change.del ? { delete: change.del } : {}),
        ...(digest ? { digest } : {}),
      });
      break;
    }
    case 'resize': {
      if (!ctx.site.limiter.tryAcquire(r.metadata.uid, node, [])) {
        a.step = 'WaitingForSlot';
        return { requeueAfterMs: ctx.taskPollMs };
      }
      try {
        upid = (await ctx.client.resizeDisk(node, vmid, change.disk!, change.size!)) ?? null;
      } catch (e) {
        // Refused, or its answer lost: no task of ours to wait for, so the slot goes back now (a
        // lost answer leaves at worst one resize running outside the limit, never a slot held).
        ctx.site.limiter.release(r.metadata.uid);
        throw e;
      }
      if (!upid) ctx.site.limiter.release(r.metadata.uid);
      break;
    }
    case 'start':
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
      upid = await ctx.client.deleteVm(change.node ?? node, vmid, {
        purge: true,
        destroyUnreferencedDisks: true,
        skiplock: true,
      });
      break;
    case 'retire-duplicate':
      // Stopped hard, then destroyed with its disks: it is a few minutes old (duplicateKept).
      setStep(r, 'RetiringDuplicate');
      upid = change.running
        ? await ctx.client.stopVm(change.node ?? node, change.vmid ?? vmid)
        : await ctx.client.deleteVm(change.node ?? node, change.vmid ?? vmid, {
            purge: true,
            destroyUnreferencedDisks: true,
          });
      ctx.site.forgetMarked(change.vmid ?? vmid);
      break;
    case 'stop':
      upid = await ctx.client.shutdownVm(node, vmid, { timeout: 60, forceStop: true });
      break;
    default:
      return {};
  }
  delete ctx.memory.lastFull;
  ctx.site.invalidate();
  if (upid) a.task = upid;
  await hook(ctx, `update-${change.kind}`, r);
  return { requeueAfterMs: ctx.taskPollMs };
}
