/**
 * The shape of a Crossplane managed resource as the engine sees it, and the annotation,
 * finalizer and condition helpers of crossplane-runtime's `meta` and `xpv1` packages.
 */
import { internString } from './intern.ts';

export const ANNOTATION_EXTERNAL_NAME = 'crossplane.io/external-name';
export const ANNOTATION_CREATE_PENDING = 'crossplane.io/external-create-pending';
export const ANNOTATION_CREATE_SUCCEEDED = 'crossplane.io/external-create-succeeded';
export const ANNOTATION_CREATE_FAILED = 'crossplane.io/external-create-failed';
export const ANNOTATION_PAUSED = 'crossplane.io/paused';
export const ANNOTATION_POLL_INTERVAL = 'crossplane.io/poll-interval';
export const ANNOTATION_RECONCILE_REQUESTED = 'crossplane.io/reconcile-requested-at';
export const FINALIZER = 'finalizer.managedresource.crossplane.io';

export type ConditionStatus = 'True' | 'False' | 'Unknown';

export interface Condition {
  type: string;
  status: ConditionStatus;
  reason: string;
  message?: string;
  lastTransitionTime: string;
  observedGeneration?: number;
}

export interface ObjectMeta {
  name: string;
  namespace?: string;
  uid: string;
  generation: number;
  resourceVersion?: string;
  creationTimestamp?: string;
  deletionTimestamp?: string;
  annotations?: Record<string, string>;
  labels?: Record<string, string>;
  finalizers?: string[];
}

export type ManagementAction = 'Observe' | 'Create' | 'Update' | 'Delete' | 'LateInitialize' | '*';

export interface ManagedSpec<P> {
  forProvider: P;
  initProvider?: Partial<P>;
  providerConfigRef?: { kind?: string; name: string };
  managementPolicies?: ManagementAction[];
  /** Legacy (Crossplane v1) deletion policy. */
  deletionPolicy?: 'Delete' | 'Orphan';
  writeConnectionSecretToRef?: { name: string; namespace?: string };
}

export interface ManagedStatus<O> {
  conditions?: Condition[];
  atProvider?: O;
  observedGeneration?: number;
  lastHandledReconcileAt?: string;
}

export interface Managed<P = unknown, O = unknown> {
  apiVersion: string;
  kind: string;
  metadata: ObjectMeta;
  spec: ManagedSpec<P>;
  status?: ManagedStatus<O>;
}

/**
 * `namespace/name`, the key every map of a resource uses. Interned (intern.ts): a runtime keys a
 * dozen maps, queues and rows by it, and each key made apart is a string of its own (10,000
 * resources held 9 copies of each, about 3 MB).
 */
export function keyOf(r: { metadata: { name: string; namespace?: string } }): string {
  return internString(r.metadata.namespace ? `${r.metadata.namespace}/${r.metadata.name}` : r.metadata.name);
}

export function annotation(r: Managed, key: string): string | undefined {
  return r.metadata.annotations?.[key];
}

export function setAnnotation(r: Managed, key: string, value: string | undefined): void {
  r.metadata.annotations ??= {};
  if (value === undefined) delete r.metadata.annotations[key];
  else r.metadata.annotations[key] = value;
}

export function externalName(r: Managed): string | undefined {
  const v = annotation(r, ANNOTATION_EXTERNAL_NAME);
  return v === '' ? undefined : v;
}

export function hasFinalizer(r: Managed, f = FINALIZER): boolean {
  return r.metadata.finalizers?.includes(f) ?? false;
}

export function addFinalizer(r: Managed, f = FINALIZER): void {
  r.metadata.finalizers ??= [];
  if (!r.metadata.finalizers.includes(f)) r.metadata.finalizers.push(f);
}

export function removeFinalizer(r: Managed, f = FINALIZER): void {
  if (r.metadata.finalizers) r.metadata.finalizers = r.metadata.finalizers.filter((x) => x !== f);
}

/** RFC 3339 with one-second resolution, as crossplane-runtime writes the create annotations. */
export function rfc3339(ms: number): string {
  return new Date(Math.floor(ms / 1000) * 1000).toISOString().replace('.000Z', 'Z');
}

/**
 * `ExternalCreateIncomplete`: pending newer than both succeeded and failed (equal is not
 * incomplete).
 */
export function createIncomplete(r: Managed): boolean {
  const pending = annotation(r, ANNOTATION_CREATE_PENDING);
  if (!pending) return false;
  const p = Date.parse(pending);
  const s = Date.parse(annotation(r, ANNOTATION_CREATE_SUCCEEDED) ?? '') || 0;
  const f = Date.parse(annotation(r, ANNOTATION_CREATE_FAILED) ?? '') || 0;
  return p > s && p > f;
}

export function getCondition(r: Managed, type: string): Condition | undefined {
  return r.status?.conditions?.find((c) => c.type === type);
}

/** Set a condition; `lastTransitionTime` changes only when the status changes. */
export function setCondition(r: Managed, c: Omit<Condition, 'lastTransitionTime'>, now: number): boolean {
  r.status ??= {};
  r.status.conditions ??= [];
  return putCondition(r.status.conditions, c, now);
}

/**
 * Put `c` into a list of conditions (any kind's), keeping `lastTransitionTime` unless the status
 * flips; true when anything about it changed.
 */
export function putCondition(list: Condition[], c: Omit<Condition, 'lastTransitionTime'>, now: number): boolean {
  const i = list.findIndex((x) => x.type === c.type);
  const prev = i >= 0 ? list[i] : undefined;
  const next: Condition = {
    type: c.type,
    status: c.status,
    reason: c.reason,
    ...(c.message ? { message: c.message } : {}),
    lastTransitionTime: prev && prev.status === c.status ? prev.lastTransitionTime : rfc3339(now),
    ...(c.observedGeneration !== undefined ? { observedGeneration: c.observedGeneration } : {}),
  };
  const changed =
    !prev ||
    prev.status !== next.status ||
    prev.reason !== next.reason ||
    prev.message !== next.message ||
    prev.observedGeneration !== next.observedGeneration;
  if (i >= 0) list[i] = next;
  else list.push(next);
  return changed;
}

/** Reasons used by the engine (crossplane-runtime's) — resource-specific reasons come from the ExternalClient. */
export const Reason = {
  Available: 'Available',
  Unavailable: 'Unavailable',
  Creating: 'Creating',
  Deleting: 'Deleting',
  ReconcileSuccess: 'ReconcileSuccess',
  ReconcileError: 'ReconcileError',
  ReconcilePaused: 'ReconcilePaused',
} as const;

/** Parse a Go duration (`1m`, `30s`, `1h30m`, `500ms`) into ms. */
export function parseGoDuration(s: string): number | undefined {
  const re = /(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/g;
  const unit: Record<string, number> = { ns: 1e-6, us: 1e-3, µs: 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
  let total = 0;
  let consumed = 0;
  for (const m of s.matchAll(re)) {
    total += Number(m[1]) * unit[m[2]!]!;
    consumed += m[0].length;
  }
  return consumed === s.length && consumed > 0 ? total : undefined;
}

/** The management policy combinations crossplane-runtime supports. */
export function policySupported(policies: ManagementAction[]): boolean {
  const set = new Set(policies);
  const key = [...set].sort().join(',');
  const all = ['Create', 'Delete', 'LateInitialize', 'Observe', 'Update'];
  const ok = [
    '*',
    '',
    'Observe',
    all.join(','),
    'Create,Delete,Observe,Update',
    'Create,LateInitialize,Observe,Update',
    'Delete,Observe',
    'Observe,Update',
    'LateInitialize,Observe',
    'Create,Observe,Update',
    'Create,Delete,Observe',
    'Create,Observe',
    // Missing before: no Update (immutable resources), no Update + no Delete, and no Create + no Delete
    // (crossplane-runtime's defaultSupportedManagementPolicies).
    'Create,Delete,LateInitialize,Observe',
    'Create,LateInitialize,Observe',
    'LateInitialize,Observe,Update',
  ];
  return ok.includes(key);
}

export function policyAllows(
  policies: ManagementAction[] | undefined,
  action: Exclude<ManagementAction, '*'>,
): boolean {
  const p = policies ?? ['*'];
  return p.includes('*') || p.includes(action);
}
