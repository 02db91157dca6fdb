/**
 * The Kubernetes side of crossplane-runtime's conventions that the engine cannot know: the `gvk`
 * label of its managed-resource metrics, the `controller` label of controller-runtime's, and the two facts of a reconcile those metrics need (the
 * object it started from; whether it found the resource up to date). Its events are the engine's
 * (src/engine/events.ts); KubeStore gives them the external-name annotation.
 */
import { GROUP, VERSION } from '../api/proxmoxvm.ts';
import type { ReconcileResult } from '../engine/reconciler.ts';
import type { Managed } from '../engine/resource.ts';
import type { ResourceStore } from '../engine/types.ts';
import { managedControllerName } from '../observability/controller-runtime.ts';
import { gvkLabel } from '../observability/managed-lifecycle.ts';

/** crossplane-runtime's `gvk` label of the provider's managed kinds. */
export const GVK = {
  ProxmoxVM: gvkLabel(GROUP, VERSION, 'ProxmoxVM'),
  ProxmoxImage: gvkLabel(GROUP, VERSION, 'ProxmoxImage'),
  ProxmoxTemplate: gvkLabel(GROUP, VERSION, 'ProxmoxTemplate'),
} as const;

/** crossplane-runtime's controller name of each managed kind: the `controller` label of the controller metrics. */
export const CONTROLLER = {
  ProxmoxVM: managedControllerName('ProxmoxVM', GROUP),
  ProxmoxImage: managedControllerName('ProxmoxImage', GROUP),
  ProxmoxTemplate: managedControllerName('ProxmoxTemplate', GROUP),
} as const;

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
