/**
 * Which changes of a managed resource are worth a Kubernetes Event, and with which reason: the
 * managed reconciler's events, kept to crossplane-runtime's conventions (its `reasonCannot*` for a
 * failed step, its Normal event per external mutation; nothing for an observe that found everything
 * as it should be).
 */
import { Reason } from './resource.ts';

/** Condition types whose True, not False, is the state worth a Warning event. */
const WARNING_WHEN_TRUE = new Set(['PendingReboot', 'DiskShrinkRefused']);

/**
 * crossplane-runtime's event reason for each step that can fail (its `reasonCannot*`), so that
 * `kubectl get events --field-selector reason=CannotCreateExternalResource` finds what it finds
 * for any Crossplane provider. The provider's own reason (the Synced condition's) leads the message.
 */
export const CANNOT = {
  'connect failed': 'CannotConnectToProvider',
  'observe failed': 'CannotObserveExternalResource',
  'cannot create': 'CannotCreateExternalResource',
  'create failed': 'CannotCreateExternalResource',
  'create outcome unknown': 'CannotCreateExternalResource',
  'update failed': 'CannotUpdateExternalResource',
  'delete failed': 'CannotDeleteExternalResource',
  'cannot publish connection details': 'CannotPublishConnectionDetails',
} as const;
export type FailedStep = keyof typeof CANNOT;

/**
 * crossplane-runtime's Normal event for each external mutation and for a create not yet visible
 * (pkg/reconciler/managed/reconciler.go: reasonCreated, reasonUpdated, reasonDeleted, reasonPending),
 * with its messages.
 */
export const MUTATED = {
  created: { reason: 'CreatedExternalResource', message: 'Successfully requested creation of external resource' },
  updated: { reason: 'UpdatedExternalResource', message: 'Successfully requested update of external resource' },
  deleted: { reason: 'DeletedExternalResource', message: 'Successfully requested deletion of external resource' },
  pending: { reason: 'PendingExternalResource', message: 'Waiting for external resource existence to be confirmed' },
} as const;

/**
 * The message of mutation event `what` for a resource whose external name is `name`: Crossplane's
 * text, then the name, which `kubectl describe` would not show otherwise (Kubernetes events carry
 * it as their `external-name` annotation too).
 */
export function mutationMessage(what: keyof typeof MUTATED, name: string | undefined): string {
  return name ? `${MUTATED[what].message} (external name ${name})` : MUTATED[what].message;
}

export type ConditionView = { type: string; status: string; reason: string; message?: string };
export type EventView = { type: 'Normal' | 'Warning'; reason: string; message: string };

/**
 * The event for a condition that changed (`p`: as it was), or none. As crossplane-runtime, an event
 * is for a change or an error, never for an observe that found everything as it should be: Synced
 * turning True says so only after an error or a pause, and a problem condition (PendingReboot...)
 * that first appears clear says nothing. Ready turning True is a change, and is recorded, once: a
 * poll that finds it True again changes nothing. `cannot`: the Crossplane reason of the step whose
 * failure set Synced False.
 */
export function conditionEvent(c: ConditionView, p: ConditionView | undefined, cannot?: string): EventView | undefined {
  if (c.type === 'Synced' && c.status === 'True')
    return p?.status === 'False'
      ? { type: 'Normal', reason: c.reason, message: `Synced is True again (was ${p.reason})` }
      : undefined;
  if (WARNING_WHEN_TRUE.has(c.type) && c.status === 'False' && !p) return undefined;
  const message = c.message ?? `${c.type} is ${c.status}`;
  if (c.type === 'Synced' && c.reason === Reason.ReconcilePaused)
    return { type: 'Normal', reason: 'ReconciliationPaused', message };
  if (c.type === 'Synced' && c.status === 'False' && cannot)
    return {
      type: 'Warning',
      reason: cannot,
      message: c.reason === Reason.ReconcileError ? message : `${c.reason}: ${message}`,
    };
  // Ready, Synced and the like are bad when False; a few conditions report a problem by being True
  // (PendingReboot: changes wait for a boot; DiskShrinkRefused). Waiting for a slot is no problem.
  const warning = WARNING_WHEN_TRUE.has(c.type)
    ? c.status === 'True'
    : c.status === 'False' &&
      c.reason !== Reason.Creating &&
      c.reason !== Reason.Deleting &&
      c.reason !== Reason.Unavailable &&
      c.reason !== 'Waiting';
  return { type: warning ? 'Warning' : 'Normal', reason: c.reason, message };
}

export function conditionChanged(c: ConditionView, p: ConditionView | undefined): boolean {
  return !p || p.status !== c.status || p.reason !== c.reason || p.message !== c.message;
}
