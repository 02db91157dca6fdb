/**
 * MemoryStore, the cluster-less ResourceStore: resources in memory with Kubernetes' write
 * semantics (resourceVersion conflicts, generation bumps on spec changes, finalizers holding
 * deletion, status written separately and not waking the watch), the events recorded about them
 * and the uids of those deleted. It keeps nothing on disk: FileStore (store.ts) persists it to the
 * state database through the hooks it leaves (put, remove, eventRecorded, commitChange).
 */
import { randomUUID } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import { ANNOTATION_SITE } from '../api/proxmoxvm.ts';
import { keyOf, type Managed, rfc3339 } from '../engine/resource.ts';
import { ConflictError, type ResourceStore, type WatchEvent } from '../engine/types.ts';
import type { StoredEvent } from '../workspace/state-file.ts';

/**
 * A deep copy of a resource or a part of one, through JSON: what the state database keeps of it
 * anyway (a field set to undefined is no field), so memory and a reopened state agree. It is a
 * quarter faster than structuredClone, and V8 gives each object JSON.parse makes room for exactly
 * its fields, where structuredClone's objects of more than four fields carry a second array for
 * the rest (10,000 stored resources: about 4 MB).
 */
function copy<T>(v: T): T {
  return v === undefined ? v : (JSON.parse(JSON.stringify(v)) as T);
}

export class MemoryStore<R extends Managed = Managed> implements ResourceStore<R> {
  protected objects = new Map<string, R>();
  protected rv = 0;
  /**
   * The uids of resources that left this store (deleted). A VM whose marker names one of them is an
   * orphan of this store for sure; a uid neither here nor among the objects may be another state
   * file's (gc refuses to delete such VMs while they run).
   */
  readonly retired: string[] = [];
  private readonly watchers = new Set<(key: string, event: WatchEvent, obj: R | undefined) => void>();
  /** Told of every stored change, status writes included (see addIndex). */
  private readonly indexes = new Set<(key: string, obj: R | undefined) => void>();
  readonly events: StoredEvent[] = [];
  /** The newest of `events` per key (what a repeated event counts on), so recording one does not scan them all. */
  private readonly lastEvent = new Map<string, StoredEvent>();
  now: () => number = () => Date.now();

  protected nextRv(): string {
    return String(++this.rv);
  }

  async get(key: string): Promise<R | undefined> {
    const o = this.objects.get(key);
    return o ? copy(o) : undefined;
  }

  async list(): Promise<R[]> {
    return [...this.objects.values()].map((o) => copy(o));
  }

  getSync(key: string): R | undefined {
    const o = this.objects.get(key);
    return o ? copy(o) : undefined;
  }

  listSync(): R[] {
    return [...this.objects.values()].map((o) => copy(o));
  }

  watch(handler: (key: string, event: WatchEvent, obj: R | undefined) => void): () => void {
    this.watchers.add(handler);
    return () => this.watchers.delete(handler);
  }

  /**
   * Keep an index of this store: `handler` is called for every object now, then with every object
   * stored (status writes included, which watchers do not see) or removed (undefined), after the
   * change is stored. What it is given is the stored object: read it, never change it.
   */
  addIndex(handler: (key: string, obj: R | undefined) => void): () => void {
    for (const [k, o] of this.objects) handler(k, o);
    this.indexes.add(handler);
    return () => this.indexes.delete(handler);
  }

  private notify(key: string, event: WatchEvent, obj: R | undefined): void {
    for (const w of this.watchers) w(key, event, obj ? this.watched(obj) : undefined);
  }

  /** What a watcher is given of a stored object: a copy of its own (FileStore: the object itself, frozen). */
  protected watched(obj: R): R {
    return copy(obj);
  }

  /** Create or update from a manifest (what `kubectl apply` does to spec, labels and our annotations). */
  apply(desired: R): R {
    const key = keyOf(desired);
    const cur = this.objects.get(key);
    if (!cur) {
      const o = copy(desired);
      o.metadata.uid ||= randomUUID();
      o.metadata.generation = 1;
      o.metadata.creationTimestamp ??= rfc3339(this.now());
      o.metadata.resourceVersion = this.nextRv();
      o.metadata.finalizers ??= [];
      // normalized as a later apply() writes them, so that re-applying an unchanged manifest is a no-op
      o.metadata.labels ??= {};
      o.metadata.annotations ??= {};
      this.put(key, o);
      this.notify(key, 'ADDED', o);
      return copy(o);
    }
    const next = copy(cur);
    next.spec = copy(desired.spec);
    const specChanged = !isDeepStrictEqual(cur.spec, next.spec);
    next.metadata.labels = { ...desired.metadata.labels };
    // The manifest owns its annotations (removing `crossplane.io/paused` from it must unpause); only
    // the ones the engine writes (external name, create-pending/succeeded/failed, the site the
    // external name is on) survive from the store.
    next.metadata.annotations = { ...engineAnnotations(cur), ...desired.metadata.annotations };
    if (specChanged) next.metadata.generation = cur.metadata.generation + 1;
    if (isDeepStrictEqual(next, cur)) return copy(cur);
    next.metadata.resourceVersion = this.nextRv();
    this.put(key, next);
    this.notify(key, 'MODIFIED', next);
    return copy(next);
  }

  /** apply() of each, in order (FileStore: durable together, with one sync); taken one at a time. */
  applyAll(desired: Iterable<R>): void {
    for (const d of desired) this.apply(d);
  }

  /** Request deletion: with finalizers the object stays, marked; without, it is gone. */
  markDeleted(key: string): void {
    const cur = this.objects.get(key);
    if (!cur) return;
    if (!cur.metadata.finalizers?.length) {
      this.remove(key, cur.metadata.uid);
      this.notify(key, 'DELETED', undefined);
      return;
    }
    if (cur.metadata.deletionTimestamp) return;
    const next = copy(cur);
    next.metadata.deletionTimestamp = rfc3339(this.now());
    next.metadata.resourceVersion = this.nextRv();
    this.put(key, next);
    this.notify(key, 'MODIFIED', next);
  }

  async update(r: R): Promise<R> {
    const key = keyOf(r);
    const cur = this.current(key);
    if (!cur) throw new ConflictError(`${key} not found`);
    if (r.metadata.resourceVersion !== cur.metadata.resourceVersion) throw new ConflictError();
    // A new version shares what it does not change with the one stored (status, an unchanged
    // spec): a stored object is never changed in place, so no write copies the whole resource.
    const finalizers = [...(r.metadata.finalizers ?? [])];
    const next: R = {
      ...cur,
      metadata: {
        ...cur.metadata,
        annotations: { ...r.metadata.annotations },
        labels: { ...r.metadata.labels },
        finalizers,
      },
    };
    const spec = copy(r.spec);
    if (!isDeepStrictEqual(cur.spec, spec)) {
      next.spec = spec;
      next.metadata.generation = cur.metadata.generation + 1;
    }
    if (next.metadata.deletionTimestamp && finalizers.length === 0)
      return this.commitChange({ key, removed: cur.metadata.uid, next });
    if (isDeepStrictEqual(next, cur)) return copy(cur);
    next.metadata.resourceVersion = this.nextRv();
    return this.commitChange({ key, next, watched: true });
  }

  async updateStatus(r: R): Promise<R> {
    const key = keyOf(r);
    const cur = this.current(key);
    if (!cur) throw new ConflictError(`${key} not found`);
    if (r.metadata.resourceVersion !== cur.metadata.resourceVersion) throw new ConflictError();
    const status = copy(r.status);
    if (isDeepStrictEqual(cur.status, status)) return copy(cur);
    // Shares metadata's values and the spec with the stored version (see update).
    const next: R = { ...cur, metadata: { ...cur.metadata }, status };
    next.metadata.resourceVersion = this.nextRv();
    return this.commitChange({ key, next, watched: false });
  }

  /** What update and updateStatus compare with: the object as stored (FileStore: with its writes not committed yet). */
  protected current(key: string): R | undefined {
    return this.objects.get(key);
  }

  /** Make a change of update or updateStatus take effect (FileStore: with the next group commit). */
  protected async commitChange(c: Change<R>): Promise<R> {
    return this.applyChange(c);
  }

  /** A change into memory, then to the watchers; what update or updateStatus returns. */
  protected applyChange(c: Change<R>): R {
    if (c.removed !== undefined) {
      this.remove(c.key, c.removed);
      this.notify(c.key, 'DELETED', undefined);
      return copy(c.next);
    }
    this.put(c.key, c.next);
    if (c.watched) this.notify(c.key, 'MODIFIED', c.next);
    return copy(c.next);
  }

  event(r: R, type: 'Normal' | 'Warning', reason: string, message: string): void {
    const key = keyOf(r);
    const time = new Date(this.now()).toISOString();
    let e = this.lastEvent.get(key);
    if (e && e.reason === reason && e.message === message && e.type === type) {
      e.count++;
      e.time = time;
    } else {
      e = { key, type, reason, message, time, count: 1 };
      this.events.push(e);
      this.lastEvent.set(key, e);
      if (this.events.length > MAX_EVENTS)
        for (const old of this.events.splice(0, this.events.length - MAX_EVENTS))
          if (this.lastEvent.get(old.key) === old) this.lastEvent.delete(old.key);
    }
    this.eventRecorded(e);
  }

  private retire(uid: string): void {
    if (!uid) return;
    this.retired.push(uid);
    if (this.retired.length > MAX_RETIRED) this.retired.splice(0, this.retired.length - MAX_RETIRED);
  }

  /** Store `next` (new or changed) at `key`: the one place an object enters the map (persistence hooks in here). */
  protected put(key: string, next: R): void {
    this.objects.set(key, next);
    for (const i of this.indexes) i(key, next);
  }

  /** The object at `key` is gone for good; its uid is retired. */
  protected remove(key: string, uid: string): void {
    this.objects.delete(key);
    this.retire(uid);
    for (const i of this.indexes) i(key, undefined);
  }

  /** An event was added or counted again (persistence hooks in here). */
  protected eventRecorded(_e: StoredEvent): void {}

  protected restore(s: { rv: number; objects: R[]; events?: StoredEvent[]; retired?: string[] }): void {
    this.rv = s.rv;
    for (const k of this.objects.keys()) for (const i of this.indexes) i(k, undefined);
    this.objects = new Map(s.objects.map((o) => [keyOf(o), o]));
    for (const [k, o] of this.objects) for (const i of this.indexes) i(k, o);
    this.events.splice(0, this.events.length, ...(s.events ?? []));
    this.lastEvent.clear();
    for (const e of this.events) this.lastEvent.set(e.key, e);
    this.retired.splice(0, this.retired.length, ...(s.retired ?? []));
  }
}

/**
 * A change update or updateStatus makes: `next` stored at `key` (`watched`: the watchers hear of
 * it; a status write they do not), or with `removed` (the uid it retires) the object gone.
 */
export interface Change<R extends Managed> {
  key: string;
  next: R;
  watched?: boolean;
  removed?: string;
}

/**
 * Annotations the engine writes and a manifest normally does not carry: crossplane-runtime's
 * `crossplane.io/external-*`, and the site a VMID is on, written with it (F21, F28: dropped by a
 * re-apply before the first status write, the VMID was read on the spec's new site).
 */
function engineAnnotations(r: Managed): Record<string, string> {
  return Object.fromEntries(
    Object.entries(r.metadata.annotations ?? {}).filter(
      ([k]) => k.startsWith('crossplane.io/external-') || k === ANNOTATION_SITE,
    ),
  );
}

/** The uids of deleted resources a store keeps (the newest; FileStore keeps as many in the database). */
export const MAX_RETIRED = 10_000;
/** The events a store keeps (the newest). */
const MAX_EVENTS = 1000;
