/**
 * A ProxmoxVMScaleSet's conditions, in Crossplane's shape (Ready and Synced, with
 * crossplane-runtime's reasons), so that `kubectl wait --for=condition=Ready proxmoxvmscaleset/x`
 * and the READY/SYNCED columns work as they do for a ProxmoxVM. Pure: the controller
 * (src/scaleset/controller.ts) writes the status and records an event per changed condition.
 *
 * - Ready is True when exactly `spec.replicas` replicas exist, all Ready and all made from the
 *   current template: a rollout or a scale down in progress is not Ready yet, so a `kubectl wait`
 *   after `kubectl scale` returns when the scale is done, not before.
 * - Synced is True after a reconcile that did what it had to; False with the error otherwise.
 */
import type { ProxmoxVMScaleSet, ProxmoxVMScaleSetStatus } from '../api/scaleset.ts';
import { type Condition, putCondition, Reason } from '../engine/resource.ts';
import type { ScaleActions } from './reconcile.ts';

export type SetCondition = Omit<Condition, 'lastTransitionTime'>;

/** The Ready condition of a set whose plan is `plan` (computed before its actions ran). */
export function readyCondition(set: ProxmoxVMScaleSet, plan: ScaleActions): SetCondition {
  const gen = set.metadata.generation;
  const want = set.metadata.deletionTimestamp ? 0 : set.spec.replicas;
  const { replicas, readyReplicas, updatedReplicas } = plan.status;
  if (set.metadata.deletionTimestamp)
    return {
      type: 'Ready',
      status: 'False',
      reason: Reason.Deleting,
      message: `deleting the scale set: ${replicas} replicas left`,
      observedGeneration: gen,
    };
  const counts = `${readyReplicas}/${want} replicas Ready, ${updatedReplicas} up to date`;
  if (replicas === want && readyReplicas === want && updatedReplicas === want)
    return { type: 'Ready', status: 'True', reason: Reason.Available, message: counts, observedGeneration: gen };
  if (replicas > want)
    return {
      type: 'Ready',
      status: 'False',
      reason: Reason.Deleting,
      message: `scaling down from ${replicas} to ${want}; ${counts}`,
      observedGeneration: gen,
    };
  return { type: 'Ready', status: 'False', reason: Reason.Creating, message: counts, observedGeneration: gen };
}

export function syncedCondition(set: ProxmoxVMScaleSet, error?: unknown): SetCondition {
  const gen = set.metadata.generation;
  if (error === undefined)
    return { type: 'Synced', status: 'True', reason: Reason.ReconcileSuccess, observedGeneration: gen };
  const message = error instanceof Error ? error.message : String(error);
  return {
    type: 'Synced',
    status: 'False',
    reason: Reason.ReconcileError,
    message: message.length > 1000 ? `${message.slice(0, 997)}...` : message,
    observedGeneration: gen,
  };
}

/**
 * `status` with `conditions` merged in (lastTransitionTime kept unless the status flips), and the
 * conditions that changed (one event each).
 */
export function withConditions(
  status: ProxmoxVMScaleSetStatus | undefined,
  conditions: SetCondition[],
  now: number,
): { status: ProxmoxVMScaleSetStatus; changed: SetCondition[] } {
  const list: Condition[] = [...((status?.conditions as Condition[] | undefined) ?? [])];
  const changed: SetCondition[] = [];
  for (const c of conditions) if (putCondition(list, c, now)) changed.push(c);
  return { status: { ...status, conditions: list as ProxmoxVMScaleSetStatus['conditions'] }, changed };
}

/** Whether a condition change deserves a Warning event (a failure, not progress). */
export function isWarning(c: SetCondition): boolean {
  return c.status === 'False' && c.reason === Reason.ReconcileError;
}
