/**
 * The Kubernetes side of crossplane-runtime's conventions that the engine cannot know: the event
 * it records for each external mutation (with the VMID, as its events carry the external name),
 * the `gvk` label of its managed-resource metrics, and the two facts of a reconcile those metrics
 * need (the object it started from; whether it found the resource up to date).
 */
import { API_VERSION, GROUP, VERSION } from '../api/proxmoxvm.ts';
import type { ReconcileResult } from '../engine/reconciler.ts';
import { ANNOTATION_EXTERNAL_NAME, type Managed } from '../engine/resource.ts';
import type { ResourceStore } from '../engine/types.ts';
import { gvkLabel } from '../observability/managed-lifecycle.ts';

/** crossplane-runtime's `gvk` label of the provider's managed kinds. */
export const GVK = {
  ProxmoxVM: gvkLabel(GROUP, VERSION, 'ProxmoxVM'),
  ProxmoxImage: gvkLabel(GROUP, VERSION, 'ProxmoxImage'),
  ProxmoxTemplate: gvkLabel(GROUP, VERSION, 'ProxmoxTemplate'),
} as const;

/**
 * Engine steps (EngineHooks) and the event crossplane-runtime records for each external mutation.
 * Failures are the engine's events (src/engine/events.ts), with crossplane-runtime's `Cannot...`
 * reasons and the cause.
 */
const MUTATION_EVENTS: Record<string, { reason: string; message: string }> = {
  'create-succeeded': {
    reason: 'CreatedExternalResource',
    message: 'Successfully requested creation of external resource',
  },
  'update-issued': { reason: 'UpdatedExternalResource', message: 'Successfully requested update of external resource' },
  'delete-issued': {
    reason: 'DeletedExternalResource',
    message: 'Successfully requested deletion of external resource',
  },
};

/** The object an event is about, as EventRecorder.record takes it. */
export interface EventObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; uid: string };
}

/** The Normal event crossplane-runtime records after engine step `step` of ProxmoxVM `vm`, if any. */
export function mutationEvent(
  step: string,
  vm: Managed,
): { object: EventObject; reason: string; message: string } | undefined {
  const e = MUTATION_EVENTS[step];
  if (!e) return undefined;
  const name = vm.metadata.annotations?.[ANNOTATION_EXTERNAL_NAME];
  return {
    object: {
      apiVersion: API_VERSION,
      kind: 'ProxmoxVM',
      metadata: {
        name: vm.metadata.name,
        ...(vm.metadata.namespace ? { namespace: vm.metadata.namespace } : {}),
        uid: vm.metadata.uid,
      },
    },
    reason: e.reason,
    message: name ? `${e.message} (VMID ${name})` : e.message,
  };
}

/**
 * `store` as a reconciler reads it: the object a reconcile starts from is shown to `seen` first
 * (crossplane-runtime records the first time to reconcile right after its Get).
 */
export function readsSeen<R extends Managed>(store: ResourceStore<R>, seen: (r: R) => void): ResourceStore<R> {
  return {
    get: async (key) => {
      const r = await store.get(key);
      if (r) seen(r);
      return r;
    },
    list: () => store.list(),
    watch: (handler) => store.watch(handler),
    update: (r) => store.update(r),
    updateStatus: (r) => store.updateStatus(r),
    event: (r, type, reason, message) => store.event(r, type, reason, message),
  };
}

/**
 * A reconcile that found the resource up to date (crossplane-runtime's "unchanged"): a plain poll
 * requeue, no work in flight, Synced True (`r`: as the reconcile left it).
 */
export function foundUpToDate(result: ReconcileResult, r: Managed | undefined): boolean {
  return (
    result.kind === 'requeueAfter' &&
    !result.progress &&
    r?.status?.conditions?.some((c) => c.type === 'Synced' && c.status === 'True') === true
  );
}
