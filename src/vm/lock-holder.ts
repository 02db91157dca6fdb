/**
 * A VM's lock whose worker died, as the reconciles see it. Waited for as any lock, such a lock
 * (PVE never clears it: proxmox/lock-holders.ts) held a resource "Locked" for good, and `apply`
 * until its timeout. So a worker's lock that no running task of its VM holds, at two looks some
 * seconds apart, is reported as what it is (LockWithoutTask) with the fix, `apply` and `delete`
 * stop on it, and the report is taken back once the VM is seen unlocked. Nothing is cleared here:
 * the lock may guard a half-done operation (a migration's copies on the target, a snapshot left in
 * `snapstate: prepare`) only a person can judge.
 */

import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { getCondition } from '../engine/resource.ts';
import { type LockHolding, lockHolding, nodesToRead, unlockAdvice, WORKER_LOCKS } from '../proxmox/lock-holders.ts';
import { ready } from './conditions.ts';
import type { StepContext } from './context.ts';
import { listIndex } from './list-index.ts';

/** A lock seen with no worker must be seen so again at least this much later (the site's clock). */
export const LOCK_CONFIRM_MS = 10_000;

/**
 * What holds `lock` of VM `vmid` now (lockHolding), over every node of the site; unknown while a
 * node is not online (its workers may be running).
 */
async function lockHolder(ctx: StepContext, vmid: number, lock: string): Promise<LockHolding & { unseen?: string[] }> {
  const nodes = listIndex(await ctx.site.clusterResources(false, ctx.signal, ctx.memory)).nodes;
  const names = nodesToRead(nodes);
  if (names) return lockHolding(ctx.client, names, vmid, lock);
  const unseen = nodes.filter((n) => n.type === 'node' && n.status !== 'online').map((n) => n.node ?? '');
  return { kind: 'unknown', unseen };
}

/**
 * The LockWithoutTask message for a VM whose `lock` no worker holds, confirmed at two looks at
 * least LOCK_CONFIRM_MS apart; undefined while it is held, unknown or not confirmed yet. A lock
 * whose worker drops it between our config read and the task read looks unheld once: the second
 * look (a later config read still showing it) is what tells a dead worker from that. Until it is
 * reported, the task lists are read at most once per LOCK_CONFIRM_MS for a VM (a backup holds its
 * lock for minutes, and a locked VM is looked at every task poll); a reported lock is looked at
 * again at every reconcile (every LOCK_CONFIRM_MS, see reportLock).
 */
export async function lockWithoutTask(
  ctx: StepContext,
  vmid: number,
  node: string,
  lock: string,
): Promise<string | undefined> {
  if (!WORKER_LOCKS.has(lock)) return undefined;
  const now = ctx.site.now();
  const look = ctx.memory.lockLook;
  const same = look !== undefined && look.lock === lock && look.vmid === vmid;
  // A lock reported is looked at again every time: unlocked and taken again by a live worker
  // between two looks (an operator's `qm unlock`, then another runtime's migration), it is still
  // `migrate`, and a report served from here told an operator to unlock a running migration.
  if (same && now - look.at < LOCK_CONFIRM_MS && look.message === undefined) return undefined;
  const holder = await lockHolder(ctx, vmid, lock);
  if (holder.kind !== 'none') {
    ctx.memory.lockLook = { lock, vmid, at: now, ...(holder.unseen?.length ? { unseen: holder.unseen } : {}) };
    return undefined;
  }
  if (!same || look.unheldSince === undefined) {
    ctx.memory.lockLook = { lock, vmid, at: now, unheldSince: now };
    return undefined;
  }
  const last = holder.last ? ` The VM's last task, ${holder.last.upid}, ended: ${holder.last.status}.` : '';
  const message =
    `VM ${vmid} on node ${node} is locked (${lock}) and no task holds the lock: the worker that took it died ` +
    `(a node restart, an OOM kill), and Proxmox never clears such a lock.${last} Fix: ${unlockAdvice(lock, vmid, node)}` +
    '; the provider goes on once the lock is gone';
  ctx.memory.lockLook = { ...look, at: now, message };
  return message;
}

/**
 * A VM the resource waits on while it is locked: Ready False with `reason` and `waiting`, or, for
 * a lock no worker holds (lockWithoutTask), LockWithoutTask and the fix. Returns when to look again.
 */
export async function reportLock(
  ctx: StepContext,
  r: ProxmoxVM,
  at: { vmid: number; node: string; lock: string },
  reason: string,
  waiting: string,
): Promise<number> {
  const orphaned = await lockWithoutTask(ctx, at.vmid, at.node, at.lock);
  ready(r, 'False', orphaned ? 'LockWithoutTask' : reason, orphaned ?? `${waiting}${unseenNodes(ctx, at)}`);
  return orphaned ? LOCK_CONFIRM_MS : ctx.taskPollMs;
}

/**
 * Why a worker's lock is waited on with no verdict: a node that is not online hides its task list,
 * and the lock's worker may be one of its (a migration's runs on the source node). Said, so that
 * an operator knows where to look, and that a crash there killed the worker.
 */
function unseenNodes(ctx: StepContext, at: { vmid: number; lock: string }): string {
  const look = ctx.memory.lockLook;
  if (!look?.unseen?.length || look.vmid !== at.vmid || look.lock !== at.lock) return '';
  const nodes = look.unseen.join(', ');
  return `; whether a task still holds the lock cannot be seen while node ${nodes} is offline (its tasks cannot be read; a worker there died if the node crashed, and its lock then stays until someone runs qm unlock): looked at again once it is back`;
}

/**
 * A VM found unlocked: the next lock is looked at afresh, and a LockWithoutTask report, now
 * untrue, is taken back at once. Left standing, it told an operator to unlock the VM while the
 * step that follows (a migration of this resource's own, sent by this reconcile) held its lock.
 */
export function lockCleared(ctx: StepContext, r: ProxmoxVM, vmid: number): void {
  ctx.memory.lockLook = undefined;
  if (getCondition(r, 'Ready')?.reason === 'LockWithoutTask')
    ready(r, 'False', 'Unavailable', `VM ${vmid} is no longer locked; going on`);
}
