/**
 * What our own finished task says, so that the next observe need not read it back. A create's
 * VM is stopped when its task ends (qemu-server creates without starting unless asked, and we
 * never ask); a resize we sent grew the disk to the size we sent; a start we sent left the VM
 * running with its pending changes applied and its cloud-init drive rebuilt (qemu-server
 * `src/PVE/QemuServer.pm:5598-5611`, vm_start_nolock: vmconfig_apply_pending, then
 * apply_cloudinit_config). The full observe
 * that chose a change also knows the ones after it (drift.ts `changes`: resize, then start): when
 * the task ends OK, the next is made without the config, status, pending changes and cloud-init
 * drive read again. Every other ending (an error, a lost answer, another generation, the VM on
 * another node, a change whose request needs a fresh digest) drops the plan, and the next observe
 * reads everything as before. What the bulk list shows (lock, node, presence) is still checked
 * on every observe, and the periodic drift read still comes (its clock is the plan's full read).
 */
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { parseUpid } from '../proxmox/upid.ts';
import type { StepContext } from './context.ts';
import type { Change } from './drift.ts';
import type { ObservedVm } from './lookup.ts';
import { listShowsSameVm } from './read-schedule.ts';
import type { PlannedChanges } from './resource-memory.ts';

/** Changes whose task's success says all there is to know, and the UPID type of that task. */
const TASK_OF: Partial<Record<Change['kind'], string>> = { resize: 'resize', start: 'qmstart' };

/** The VM's power state once such a change is made (undefined: as before). */
const STATE_AFTER: Partial<Record<Change['kind'], string>> = { start: 'running' };

export interface KnownOutcome {
  /** The VM's power state now. */
  state: string;
  /** Nothing needs reading: the next change (if any) is known, the VM as the plan left it. */
  planned: boolean;
  /** The next change to make, when the plan holds one. */
  next?: Change;
  /** Our start ended just now: the guest's boot begins here. */
  started?: boolean;
}

/** The VM's power state once the plan's head change is made. */
function stateAfter(plan: PlannedChanges): string {
  return STATE_AFTER[plan.head.kind] ?? plan.before;
}

/**
 * After a full observe found `list` (the first being sent now): keep what follows for when its
 * task ends, if that task's success tells its outcome; else keep nothing.
 */
export function planAfter(ctx: StepContext, r: ProxmoxVM, found: ObservedVm, list: Change[], state: string): void {
  ctx.memory.planned = undefined;
  const [head, ...rest] = list;
  const last = ctx.memory.lastFull;
  if (!head || !TASK_OF[head.kind] || !last) return;
  ctx.memory.planned = {
    generation: r.metadata.generation,
    vmid: found.vmid,
    node: found.node,
    head,
    before: state,
    rest,
    lastFull: last,
  };
}

/**
 * What `upid`, ours and ended OK, tells about VM `vmid` (found on `found.node` in the bulk list),
 * or undefined when it tells nothing that saves a read. Consumes the plan.
 */
export function knownOutcome(
  ctx: StepContext,
  r: ProxmoxVM,
  upid: string,
  found: ObservedVm,
): KnownOutcome | undefined {
  const plan = ctx.memory.planned;
  ctx.memory.planned = undefined;
  const task = parseUpid(upid);
  if (!task) return undefined;
  // A create or clone of ours: the VM is there, stopped (its config is still read: it confirms whose it is).
  if (task.type === 'qmcreate' || task.type === 'qmclone') return { state: 'stopped', planned: false };
  if (!plan || TASK_OF[plan.head.kind] !== task.type || task.id !== String(found.vmid) || !holds(plan, r, found))
    return undefined;
  const [next, ...rest] = plan.rest;
  // The chain goes on only through changes whose request needs no fresh config (no digest).
  if (next && !TASK_OF[next.kind]) return undefined;
  const state = stateAfter(plan);
  ctx.memory.lastFull = plan.lastFull;
  if (next) ctx.memory.planned = { ...plan, head: next, before: state, rest };
  return {
    state,
    planned: true,
    ...(next ? { next } : {}),
    ...(task.type === 'qmstart' ? { started: true } : {}),
  };
}

/**
 * No task ended: the planned change is still waiting for its slot (applyChange sent nothing), and
 * is tried again as planned; anything else drops the plan.
 */
export function plannedWait(ctx: StepContext, r: ProxmoxVM, found: ObservedVm): KnownOutcome | undefined {
  const plan = ctx.memory.planned;
  if (!plan || r.status?.atProvider?.step !== 'WaitingForSlot' || !holds(plan, r, found) || !ctx.memory.lastFull) {
    ctx.memory.planned = undefined;
    return undefined;
  }
  return { state: plan.before, planned: true, next: plan.head };
}

/**
 * The plan stands for the VM the list shows now: the same generation, VMID and node, and the list's
 * tags and name still those of the full read the plan came from. Without the last, a VM another
 * user made at our VMID after destroying ours (between our resize and its start) was started as
 * the plan's next change, never read (F58).
 */
function holds(plan: PlannedChanges, r: ProxmoxVM, found: ObservedVm): boolean {
  return (
    plan.generation === r.metadata.generation &&
    plan.vmid === found.vmid &&
    plan.node === found.node &&
    listShowsSameVm(plan.lastFull, found.entry)
  );
}
