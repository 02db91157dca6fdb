/**
 * What one ProxmoxVM's object says, read without a runtime: its row, as the status table, the live
 * views and the JSON/YAML documents show it (the AGE column, rollout order), and whether it is
 * settled or failed for good. LocalRuntime (src/local/runtime.ts) keeps the rows of its store and
 * adds to these judgments what a reconcile of its run observed (stateOf).
 */

import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { externalName, getCondition, keyOf } from '../engine/resource.ts';
import { IMAGE_PERMANENT_REASONS } from '../image/references.ts';
import { PERMANENT_REASONS } from '../vm/conditions.ts';
import { GUEST_FAILURE_REASONS } from '../vm/guest.ts';
import { comparePhases, DEFAULT_PHASE, PHASE_ANNOTATION } from '../workspace/phases.ts';

/**
 * One resource as the status table, the live views and the JSON/YAML documents show it (see
 * docs/output.md). The string fields are what the table prints (`ready`: `True`, `False`,
 * `Unknown`; `vmid`, `site`... `''` when not known yet); the typed document is made from them by
 * statusItem (src/local/status-list.ts).
 */
export interface Row {
  /** `namespace/name`. */
  key: string;
  namespace: string;
  name: string;
  phase?: string;
  site: string;
  node: string;
  vmid: string;
  step: string;
  state: string;
  /** The first address (the IP column). */
  ip: string;
  /** Every address the guest agent reported. */
  ipAddresses: string[];
  ready: string;
  synced: string;
  /** The creation time (RFC 3339) the AGE column counts from; `''` when not known. */
  createdAt: string;
  age: string;
  /** Fields Proxmox holds as pending until the VM's next boot (status.atProvider.pendingChanges). */
  pendingChanges: string[];
  /** Whether the VM must be rebooted for its spec to take effect (pending changes, or the PendingReboot condition). */
  pendingReboot: boolean;
  message: string;
  reason: string;
}

/** The AGE column: `42s`, `18m`, `5h`, `3d` (as kubectl prints it); `''` without a time. */
export function age(ts: string | undefined, now = Date.now()): string {
  if (!ts) return '';
  return ageSpan(Date.parse(ts), now).text;
}

/**
 * The AGE of something created at `created` (ms), and the times between which it reads so (`from`
 * inclusive, `until` exclusive): what the row cache keeps, so that a check does not parse every
 * creation time again to find that no age changed.
 */
export function ageSpan(created: number, now: number): { text: string; from: number; until: number } {
  const s = Math.max(0, Math.floor((now - created) / 1000));
  const unit = s < 120 ? 1 : s < 7200 ? 60 : s < 172800 ? 3600 : 86400;
  const n = Math.floor(s / unit);
  const text = `${n}${unit === 1 ? 's' : unit === 60 ? 'm' : unit === 3600 ? 'h' : 'd'}`;
  // Up to its first second every earlier time reads 0s too.
  return {
    text,
    from: s === 0 ? Number.NEGATIVE_INFINITY : created + n * unit * 1000,
    until: created + (n + 1) * unit * 1000,
  };
}

export function rowOf(r: ProxmoxVM, now = Date.now()): Row {
  const a = r.status?.atProvider ?? {};
  const rd = getCondition(r, 'Ready');
  const sy = getCondition(r, 'Synced');
  const bad = sy?.status === 'False' ? sy : rd?.status === 'False' ? rd : undefined;
  const phase = r.metadata.annotations?.[PHASE_ANNOTATION];
  const pendingChanges = [...(a.pendingChanges ?? [])];
  return {
    key: keyOf(r),
    namespace: r.metadata.namespace ?? 'default',
    name: r.metadata.name,
    ...(phase ? { phase } : {}),
    site: a.site ?? r.spec.forProvider.site ?? '',
    node: a.node ?? r.spec.forProvider.node ?? '',
    vmid: externalName(r) ?? '',
    step: r.metadata.deletionTimestamp
      ? `Deleting${a.step && a.step !== 'Ready' ? `/${a.step}` : ''}`
      : (a.step ?? 'Pending'),
    state: a.state ?? '',
    ip: a.ipAddresses?.[0] ?? '',
    ipAddresses: [...(a.ipAddresses ?? [])],
    ready: rd?.status ?? 'Unknown',
    synced: sy?.status ?? 'Unknown',
    createdAt: r.metadata.creationTimestamp ?? '',
    age: age(r.metadata.creationTimestamp, now),
    pendingChanges,
    pendingReboot: pendingChanges.length > 0 || getCondition(r, 'PendingReboot')?.status === 'True',
    message: bad?.message ?? '',
    reason: bad?.reason ?? '',
  };
}

/** A row and its lists, read-only (LocalRuntime.rows hands the same row out while it is unchanged). */
export function freezeRow(r: Row): Row {
  Object.freeze(r.ipAddresses);
  Object.freeze(r.pendingChanges);
  return Object.freeze(r);
}

/** localeCompare's order at a fraction of its cost (it builds a collator per call): 10,000 rows sort per check. */
const byLocale = new Intl.Collator().compare;

/** Rows in rollout order: by phase (no phase: the default phase, first), then by key. */
export function sortRows<T extends Row>(rows: T[]): T[] {
  return rows.sort(
    (a, b) => comparePhases(a.phase ?? DEFAULT_PHASE, b.phase ?? DEFAULT_PHASE) || byLocale(a.key, b.key),
  );
}

/**
 * Reasons apply stops waiting for: those the engine backs off to the cap (vm/conditions.ts), and
 * those no wait fixes in a run of apply: a create or task that failed (its fix is in the message),
 * and a Secret the manifests do not hold.
 */
export const STOP_REASONS: ReadonlySet<string> = new Set([
  ...PERMANENT_REASONS,
  ...IMAGE_PERMANENT_REASONS,
  'CreateFailed',
  'SecretNotFound',
  'TaskFailed',
]);

export function settled(r: ProxmoxVM): boolean {
  return (
    getCondition(r, 'Ready')?.status === 'True' &&
    getCondition(r, 'Synced')?.status === 'True' &&
    r.status?.atProvider?.step === 'Ready'
  );
}

export function isSettled(r: ProxmoxVM | undefined): boolean {
  return r !== undefined && !r.metadata.deletionTimestamp && settled(r);
}

export function failedPermanently(r: ProxmoxVM): boolean {
  const s = getCondition(r, 'Synced');
  if (s?.status === 'False' && STOP_REASONS.has(s.reason)) return true;
  // The VM is there but its guest is not coming up (no agent within agentTimeout, cloud-init failed).
  const ready = getCondition(r, 'Ready');
  return ready?.status === 'False' && GUEST_FAILURE_REASONS.has(ready.reason);
}
