/**
 * What one ProxmoxVM's object says, read without a runtime: its row, as the status table, the live
 * views and the JSON/YAML documents show it (the AGE column, rollout order), and whether it is
 * settled or failed for good, and the rows of a whole store kept from one look to the next
 * (StoreRows). LocalRuntime (src/local/runtime.ts) adds to these judgments what a reconcile of its
 * run observed (stateOf).
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
      ? `Deleting${a.step && a.step !== 'Ready' && a.step !== 'Deleting' ? `/${a.step}` : ''}`
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
 * Ready reasons apply stops waiting for: a guest that did not come up, and a lock whose worker
 * died (vm/lock-holder.ts), which only a person clears.
 */
export const READY_STOP_REASONS: ReadonlySet<string> = new Set([...GUEST_FAILURE_REASONS, 'LockWithoutTask']);

/**
 * Reasons apply stops waiting for: those the engine backs off to the cap (vm/conditions.ts), and
 * those no wait fixes in a run of apply: a create or task that failed (its fix is in the message),
 * and a Secret the manifests do not hold.
 */
export const STOP_REASONS: ReadonlySet<string> = new Set([
  ...PERMANENT_REASONS,
  ...IMAGE_PERMANENT_REASONS,
  'CreateFailed',
  'LockWithoutTask',
  'SecretNotFound',
  'TaskFailed',
  // An operator's protection: retried (it may be lifted), but no wait lifts it (ownership.ts isProtected).
  'VMProtected',
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
  return ready?.status === 'False' && READY_STOP_REASONS.has(ready.reason);
}

/** The rows of a store's resources, kept from one call to the next (see rows). */
export class StoreRows {
  /**
   * The rows of every resource, in rollout order. Apply's check asks for them every few hundred
   * milliseconds while at most a few resources changed since: a resource's row is made again only
   * when it was written since (its resourceVersion moved) or its AGE reads differently, and the
   * order is sorted again only when a resource came, went or changed phase. Rows are frozen: the
   * same row object is returned while it is unchanged (and may be compared by identity).
   */
  rows(objs: readonly ProxmoxVM[], now = Date.now()): Row[] {
    const rows: Row[] = new Array(objs.length);
    let sameOrder = objs.length === this.rowOrder.keys.length;
    for (let i = 0; i < objs.length; i++) {
      const r = objs[i]!;
      const key = keyOf(r);
      const rv = r.metadata.resourceVersion;
      let cached = this.rowCache.get(key);
      if (!cached || !rv || cached.rv !== rv) {
        const created = r.metadata.creationTimestamp ? Date.parse(r.metadata.creationTimestamp) : Number.NaN;
        cached = { rv, row: freezeRow(rowOf(r, now)), created, ageFrom: 0, ageUntil: 0 };
        this.rowCache.set(key, cached);
      }
      // An unparsable creation time is left to age() every time (it prints what it prints).
      if (!Number.isNaN(cached.created) && (now < cached.ageFrom || now >= cached.ageUntil)) {
        const span = ageSpan(cached.created, now);
        cached.ageFrom = span.from;
        cached.ageUntil = span.until;
        if (span.text !== cached.row.age) cached.row = Object.freeze({ ...cached.row, age: span.text });
      } else if (Number.isNaN(cached.created) && r.metadata.creationTimestamp) {
        const a = age(r.metadata.creationTimestamp, now);
        if (a !== cached.row.age) cached.row = Object.freeze({ ...cached.row, age: a });
      }
      const row = cached.row;
      rows[i] = row;
      if (sameOrder && (this.rowOrder.keys[i] !== key || this.rowOrder.phases[i] !== row.phase)) sameOrder = false;
    }
    if (this.rowCache.size > objs.length) {
      const present = new Set(rows.map((r) => r.key));
      for (const k of this.rowCache.keys()) if (!present.has(k)) this.rowCache.delete(k);
    }
    if (!sameOrder) {
      const sorted = sortRows(rows.map((row, i) => ({ ...row, index: i })));
      this.rowOrder = {
        keys: rows.map((r) => r.key),
        phases: rows.map((r) => r.phase),
        permutation: sorted.map((r) => r.index),
      };
    }
    return this.rowOrder.permutation.map((i) => rows[i]!);
  }

  /** Each resource's last row and the version of the resource it was made from (see rows). */
  private readonly rowCache = new Map<
    string,
    { rv: string | undefined; row: Row; created: number; ageFrom: number; ageUntil: number }
  >();
  /** The keys and phases rows() last sorted, in the store's order, and their rollout order (indexes into them). */
  private rowOrder: { keys: string[]; phases: Array<string | undefined>; permutation: number[] } = {
    keys: [],
    phases: [],
    permutation: [],
  };
}
