/**
 * Whether a VM's lock still has a worker behind it. PVE's operations on a VM take its config lock
 * inside their worker (qemu-server `QemuMigrate.pm:836` phase1 writes `lock: migrate`; the snapshot,
 * rollback and suspend workers likewise) and drop it at their end, on success and on error. A
 * worker that vanished (a node reboot, an OOM kill, `kill -9`) drops nothing: PVE never clears
 * that lock again, and an operator does (`qm unlock`). Waited for as any lock, it held a resource
 * "Locked" for good, and `apply` until its timeout. So a lock that no running task of its VM
 * holds, at two looks some seconds apart, is reported as what it is (LockWithoutTask) with the
 * fix, and `apply` stops on it. Nothing is cleared here: the lock may guard a half-done operation
 * (a migration's copies on the target, a snapshot left in `snapstate: prepare`) only a person can
 * judge.
 *
 * Every worker that locks a VM runs under the VM's VMID as its task id (qemu-server
 * `API2/Qemu.pm`: fork_worker of `qmigrate` :5663 and :5865, `qmsnapshot` :6229, `qmrollback`
 * :6431, `qmdelsnapshot` :6507, `qmtunnel` :7228, the suspend :4125), except a backup of several
 * VMs, whose `vzdump` task has no id: for `backup`, any running `vzdump` on the site holds it.
 * `create` and `clone` are the placeholder's locks (ownership.ts, placeholderFate), `suspended` a
 * hibernated VM's (no worker holds it; `qm resume` ends it): neither is judged here.
 */

import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { getCondition } from '../engine/resource.ts';
import { ready } from './conditions.ts';
import type { StepContext } from './context.ts';
import { listIndex } from './list-index.ts';

/** Locks a worker holds while it runs. */
const WORKER_LOCKS: ReadonlySet<string> = new Set([
  'backup',
  'migrate',
  'rollback',
  'snapshot',
  'snapshot-delete',
  'suspending',
]);

/** A lock seen with no worker must be seen so again at least this much later (the site's clock). */
export const LOCK_CONFIRM_MS = 10_000;

/** The newest task of a VM that ended, as the last look found it. */
interface EndedTask {
  upid: string;
  status: string;
}

/**
 * What holds `lock` of VM `vmid` now: a running task (its UPID), none (and the newest of the VM's
 * tasks that ended, if any is listed), or unknown (a node of the site could not be read: its
 * workers may be running).
 */
async function lockHolder(
  ctx: StepContext,
  vmid: number,
  lock: string,
): Promise<{ kind: 'held'; upid: string } | { kind: 'none'; last?: EndedTask } | { kind: 'unknown' }> {
  const index = listIndex(await ctx.site.clusterResources(false, ctx.signal, ctx.memory));
  const nodes = index.nodes;
  if (nodes.some((n) => n.status !== 'online')) return { kind: 'unknown' };
  let last: (EndedTask & { endtime: number }) | undefined;
  for (const node of nodes.map((n) => n.node ?? '').filter(Boolean)) {
    let tasks: Awaited<ReturnType<StepContext['client']['listTasks']>>;
    try {
      tasks = await ctx.client.listTasks(node, { source: 'all', vmid, limit: 20 });
      if (lock === 'backup')
        tasks.push(...(await ctx.client.listTasks(node, { source: 'active', typefilter: 'vzdump' })));
    } catch {
      return { kind: 'unknown' };
    }
    for (const t of tasks) {
      const running = t.endtime === undefined && (t.status === undefined || /^running$/i.test(t.status));
      if (running) return { kind: 'held', upid: t.upid };
      if (t.endtime !== undefined && t.status && (!last || t.endtime > last.endtime))
        last = { upid: t.upid, status: t.status, endtime: t.endtime };
    }
  }
  return { kind: 'none', ...(last ? { last: { upid: last.upid, status: last.status } } : {}) };
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
    ctx.memory.lockLook = { lock, vmid, at: now };
    return undefined;
  }
  if (!same || look.unheldSince === undefined) {
    ctx.memory.lockLook = { lock, vmid, at: now, unheldSince: now };
    return undefined;
  }
  const last = holder.last ? ` The VM's last task, ${holder.last.upid}, ended: ${holder.last.status}.` : '';
  const message =
    `VM ${vmid} on node ${node} is locked (${lock}) and no task holds the lock: the worker that took it died ` +
    `(a node restart, an OOM kill), and Proxmox never clears such a lock.${last} Fix: ${LOCK_FIX[lock]?.(vmid) ?? ''}` +
    `then run \`qm unlock ${vmid}\` on node ${node}; the provider goes on once the lock is gone`;
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
  ready(r, 'False', orphaned ? 'LockWithoutTask' : reason, orphaned ?? waiting);
  return orphaned ? LOCK_CONFIRM_MS : ctx.taskPollMs;
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

/** What to look at before unlocking, per lock. */
const LOCK_FIX: Record<string, (vmid: number) => string> = {
  migrate: (vmid) =>
    `a migration that died may have left copies of the disks on the target node: there, every volume \`pvesm list STORAGE --vmid ${vmid}\` lists on a storage of that node alone (not shared) is one (the VM's own are on its node); remove them (\`pvesm free VOLID\`), or a second migration finds a cloud-init volume's name taken; `,
  snapshot: (vmid) =>
    `a snapshot half made is left with \`snapstate: prepare\` (\`qm listsnapshot ${vmid}\`; remove it with \`qm delsnapshot ${vmid} NAME --force\`), `,
  'snapshot-delete': (vmid) =>
    `a snapshot half removed is left with \`snapstate: delete\` (\`qm delsnapshot ${vmid} NAME --force\`), `,
  rollback: () => 'a rollback that died may have left the disks half rolled back (roll back again after unlocking), ',
  backup: () => 'a backup that died leaves a partial archive on its backup storage, ',
  suspending: (vmid) => `a hibernation that died may have left a state volume (\`qm config ${vmid}\`, \`vmstate\`), `,
};
