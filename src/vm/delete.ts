/**
 * Step 14: delete. Only a VM whose marker says it is this resource's (or a create/clone placeholder
 * of ours whose worker died) is ever touched. Locks: only the `create`/`clone` lock this provider
 * set, on its own VM, with no task running, is cleared (root@pam's skiplock on destroy). Any other
 * lock (`backup`, `migrate`, `snapshot`, `suspended`, ...) belongs to somebody else's operation: it
 * is waited for and reported, never cleared (../shared/research/pve-failure-semantics.md, "Locks").
 * A VM an operator protected (`protection: 1`) is reported and left as it is. Then: stop a running
 * VM, destroy with purge and the unreferenced disks, confirm it is gone.
 */
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { externalName } from '../engine/resource.ts';
import { NotFoundError } from '../proxmox/index.ts';
import { atProvider, reason, setStep } from './conditions.ts';
import { followTask, hook, type StepContext } from './context.ts';
import { lockCleared, lockWithoutTask } from './lock-holder.ts';
import { locate, nodeOffline } from './lookup.ts';
import { destroyWaitsForNode } from './node-offline.ts';
import {
  cloneSource,
  isProtected,
  manualCleanup,
  ownershipOf,
  placeholderFate,
  protectedVm,
  unprotect,
} from './ownership.ts';
import { awaitQuorumAfterRefusal } from './site-quorum.ts';
import { isPlaceholderLock } from './spec.ts';
import { lateCreateMayStillApply } from './vmid.ts';

export async function deleteVm(ctx: StepContext, r: ProxmoxVM): Promise<{ requeueAfterMs?: number }> {
  const a = atProvider(r);
  const vmid = Number(externalName(r));
  if (a.task) return { requeueAfterMs: followTask(ctx, r, a.task) }; // observe clears it once the task ends
  // (Not the step observe's drift named, e.g. Starting for a VM found stopped, while a protection
  // or a lock holds the delete.)
  setStep(r, 'Deleting');
  const found = await locate(ctx, vmid, true);
  // Its node is offline: nothing can be sent there until it is back.
  if (found && found.entry.status === 'unknown' && (await nodeOffline(ctx, found.node)))
    throw reason(
      'NodeOffline',
      `node ${found.node} of site ${ctx.site.name} is offline: ${destroyWaitsForNode(found.node, vmid)}`,
      true,
    );
  const cfg = found
    ? await ctx.client.vmConfig(found.node, vmid).catch((e) => {
        if (e instanceof NotFoundError) return undefined;
        throw e;
      })
    : undefined;
  if (!found || !cfg) {
    // A create of ours may still be applied: do not let the finalizer go before it had its chance.
    if (lateCreateMayStillApply(ctx, r)) return { requeueAfterMs: ctx.taskPollMs };
    return {};
  }
  const own = ownershipOf(r, cfg.values, { installation: ctx.site.installation, vmid });
  // Not ours (our create never happened there, or ours is gone and the VMID reused): nothing of
  // ours to delete, and the stranger is never touched.
  if (own.kind === 'other' || own.kind === 'foreign') return {};
  const lock = cfg.values.lock;
  const caps = await ctx.client.capabilities();
  if (isPlaceholderLock(lock)) {
    const fate = await placeholderFate(
      ctx,
      r,
      vmid,
      found.node,
      lock === 'clone' ? await cloneSource(ctx, r) : undefined,
    );
    if (fate.kind === 'in-progress' || fate.kind === 'foreign' || (fate.kind === 'unknown' && own.kind !== 'ours')) {
      // Our create or clone is still running (or it is not provably ours): the lock is not ours to clear.
      throw reason(
        'Locked',
        `VM ${vmid} is locked (${lock}) ${fate.kind === 'in-progress' ? 'by a task still running' : 'and not provably ours'}; waiting for it to end before deleting`,
        true,
      );
    }
    if (!caps.rootTicket)
      throw reason(
        'CreateInterrupted',
        `VM ${vmid} on node ${found.node} is left from an interrupted ${lock} of this resource (its worker died); only root@pam can clear its 'lock: ${lock}'. Fix: ${manualCleanup(found.node, vmid)}, or give the provider root@pam password credentials`,
        true,
      );
    setStep(r, 'Destroying');
    await awaitQuorumAfterRefusal(ctx, r, `VM ${vmid} is destroyed`);
    a.task = await ctx.client.deleteVm(found.node, vmid, {
      purge: true,
      destroyUnreferencedDisks: true,
      skiplock: true,
    });
    ctx.site.invalidate(ctx.memory);
    await hook(ctx, 'delete-destroy-issued', r);
    return { requeueAfterMs: followTask(ctx, r, a.task) };
  }
  if (lock) {
    const orphaned = await lockWithoutTask(ctx, vmid, found.node, String(lock));
    if (orphaned) throw reason('LockWithoutTask', orphaned, true);
    throw reason(
      'Locked',
      `VM ${vmid} is locked (${lock}) by an operation of somebody else (backup, migration, snapshot, hibernation...); waiting for the lock to clear before deleting it. It is never cleared by this provider`,
      true,
    );
  }
  lockCleared(ctx, r, vmid);
  // Before the VM is stopped: stopping what could then not be destroyed took it down for nothing.
  if (isProtected(cfg.values))
    throw reason(
      'VMProtected',
      `${protectedVm(`VM ${vmid} on node ${found.node} of site ${ctx.site.name}`)}. Fix: if it is to go, ${unprotect(vmid, found.node, ctx.site.name)}; to keep it, set spec.deletionPolicy: Orphan (in Kubernetes on the object; with the CLI in the manifest, applied before delete)`,
      true,
    );
  // (A test seam: what happens between these checks and the stop or destroy, e.g. a lock or a
  // protection set meanwhile, which PVE then refuses them for.)
  await hook(ctx, 'delete-checked', r);
  const status = await ctx.client.vmStatus(found.node, vmid);
  if (status.status === 'running') {
    setStep(r, 'Stopping');
    a.task = await ctx.client.stopVm(found.node, vmid);
    ctx.site.invalidate(ctx.memory);
    await hook(ctx, 'delete-stop-issued', r);
    return { requeueAfterMs: followTask(ctx, r, a.task) };
  }
  setStep(r, 'Destroying');
  await awaitQuorumAfterRefusal(ctx, r, `VM ${vmid} is destroyed`);
  a.task = await ctx.client.deleteVm(found.node, vmid, { purge: true, destroyUnreferencedDisks: true });
  ctx.site.invalidate(ctx.memory);
  await hook(ctx, 'delete-destroy-issued', r);
  return { requeueAfterMs: followTask(ctx, r, a.task) };
}
