/**
 * The lifecycle facts behind crossplane-runtime's managed-resource metrics (its MRMetricRecorder,
 * pkg/reconciler/managed/metrics.go), for the replica that reconciles: how long a new resource
 * waited for its first reconcile, how long until it was first Ready, how long a deletion took, and
 * how long a resource had been in sync before an update corrected a drift. The state gauges
 * (exists, ready, synced) are counts over a cache: `countStates`.
 *
 * As crossplane-runtime's, these are this process's observations: a resource first reconciled by
 * another replica, or before a restart, has no first-readiness or drift sample here. Resources are
 * known by uid, not by name (a namespaced kind may have one name in many namespaces).
 */
import type { Metrics } from './metrics.ts';

/** What the recorder reads of a managed resource. */
export interface ManagedView {
  metadata: { uid: string; creationTimestamp?: string; deletionTimestamp?: string };
  status?: { conditions?: Array<{ type: string; status: string }> };
}

/** A GroupVersionKind as Go's `schema.GroupVersionKind.String()` prints it: crossplane-runtime's `gvk` label. */
export function gvkLabel(group: string, version: string, kind: string): string {
  return `${group}/${version}, Kind=${kind}`;
}

function conditionStatus(r: ManagedView, type: string): string | undefined {
  return r.status?.conditions?.find((c) => c.type === type)?.status;
}

/** Seconds from an RFC 3339 timestamp to `now` (ms), or undefined for a missing or bad one. */
function since(at: string | undefined, now: number): number | undefined {
  const t = at ? Date.parse(at) : Number.NaN;
  return Number.isNaN(t) ? undefined : Math.max(0, (now - t) / 1000);
}

export class ManagedLifecycle {
  private readonly metrics: Metrics;
  private readonly now: () => number;
  /** Resources whose first reconcile this process saw, until they are first Ready. */
  private readonly firstObservation = new Set<string>();
  /** When each resource was last found up to date (ms), for the drift time. */
  private readonly lastUnchanged = new Map<string, number>();

  /** `now`: the wall clock, as the apiserver's timestamps are (tests: a fixed one). */
  constructor(metrics: Metrics, now: () => number = Date.now) {
    this.metrics = metrics;
    this.now = now;
  }

  /**
   * A reconcile read `r` at its start. Without a Synced condition it was never reconciled: the
   * time since its creation is its first time to reconcile (recorded once per resource).
   */
  reconciling(gvk: string, r: ManagedView): void {
    if (conditionStatus(r, 'Synced') !== undefined || this.firstObservation.has(r.metadata.uid)) return;
    const s = since(r.metadata.creationTimestamp, this.now());
    if (s === undefined) return;
    this.metrics.mrFirstTimeToReconcile.observe({ gvk }, s);
    this.firstObservation.add(r.metadata.uid);
  }

  /** A reconcile ended with `r` as it wrote it: its first Ready since its first reconcile, if so. */
  reconciled(gvk: string, r: ManagedView): void {
    const uid = r.metadata.uid;
    if (!this.firstObservation.has(uid) || conditionStatus(r, 'Ready') !== 'True') return;
    const s = since(r.metadata.creationTimestamp, this.now());
    if (s !== undefined) this.metrics.mrFirstTimeToReadiness.observe({ gvk }, s);
    this.firstObservation.delete(uid);
  }

  /** A reconcile found `r` up to date: nothing to change. */
  unchanged(r: ManagedView): void {
    this.lastUnchanged.set(r.metadata.uid, this.now());
  }

  /** An update was issued: the drift it corrects is at most as old as the last up-to-date observe. */
  updated(gvk: string, r: ManagedView): void {
    const last = this.lastUnchanged.get(r.metadata.uid);
    if (last === undefined) return;
    const now = this.now();
    this.metrics.mrDrift.observe({ gvk }, Math.max(0, now - last) / 1000);
    this.lastUnchanged.set(r.metadata.uid, now);
  }

  /** `r` is gone: a deletion that was requested took this long; its entries are dropped. */
  deleted(gvk: string, r: ManagedView): void {
    const s = since(r.metadata.deletionTimestamp, this.now());
    if (s !== undefined) this.metrics.mrDeletion.observe({ gvk }, s);
    this.firstObservation.delete(r.metadata.uid);
    this.lastUnchanged.delete(r.metadata.uid);
  }
}

/** crossplane_managed_resource_{exists,ready,synced} of one kind, from the objects it has now. */
export function countStates(metrics: Metrics, gvk: string, items: Iterable<ManagedView>): void {
  let exists = 0;
  let ready = 0;
  let synced = 0;
  for (const r of items) {
    exists++;
    if (conditionStatus(r, 'Ready') === 'True') ready++;
    if (conditionStatus(r, 'Synced') === 'True') synced++;
  }
  metrics.mrExists.set({ gvk }, exists);
  metrics.mrReady.set({ gvk }, ready);
  metrics.mrSynced.set({ gvk }, synced);
}
