/**
 * The cluster-less ResourceStore: resources in memory with Kubernetes' write semantics
 * (resourceVersion conflicts, generation bumps on spec changes, finalizers holding deletion,
 * status written separately and not waking the watch) — MemoryStore — and FileStore, the same
 * persisted to the state database (state.db, SQLite) one resource at a time under an exclusive
 * lock file. Where states live, their formats and how commands that only read one read it are
 * src/workspace/state-file.ts; the database's writing side and its crash safety are
 * state-database.ts, the lock state-lock.ts.
 */
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { isDeepStrictEqual } from 'node:util';
import { ANNOTATION_SITE } from '../api/proxmoxvm.ts';
import { internString } from '../engine/intern.ts';
import { keyOf, type Managed, rfc3339 } from '../engine/resource.ts';
import { ConflictError, type ResourceStore, type WatchEvent } from '../engine/types.ts';
import { type DbState, isSqliteFile } from '../workspace/state-db.ts';
import {
  checkLeftover,
  readOneStateFile,
  StateFileError,
  type StoredEvent,
  sha256Of,
  statePaths,
} from '../workspace/state-file.ts';
import { createDatabase, keepAside, StateDatabase } from './state-database.ts';
import { lockState, type StateLock, StateLockedError } from './state-lock.ts';

export { StateLockedError };

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

const MAX_RETIRED = 10_000;
/** The events a store keeps (the newest). */
const MAX_EVENTS = 1000;

/**
 * Freeze `o` and everything in it (what FileStore holds is shared by its read-only views), its
 * string values interned on the way (engine/intern.ts: 10,000 resources held 10,000 copies of
 * the same kind, namespace, site, node and condition reasons, and of the timestamps of one second). What is frozen already (the parts a new version
 * shares with the one before) is not walked again.
 */
function deepFreeze<T>(o: T): T {
  if (o && typeof o === 'object' && !Object.isFrozen(o)) {
    const x = o as Record<string, unknown>;
    for (const k in x) {
      const v = x[k];
      if (typeof v === 'string') x[k] = internString(v);
      else deepFreeze(v);
    }
    Object.freeze(o);
  }
  return o;
}

/**
 * A MemoryStore persisted to the state database: every change is written through, one resource
 * row per write (with the events recorded since, and on deletion the retired uid), committed
 * before the change is visible in memory or to watchers: a write that fails to commit throws and
 * changes nothing. The engine's writes (update, updateStatus) of one turn of the event loop share
 * one transaction (a group commit, see commitChange); the runtime's synchronous ones (apply,
 * markDeleted) commit at once. `open()` takes `<state.db>.lock` exclusively (a lock left by
 * a dead process is taken over) and loads the database, or imports the JSON state file of an
 * earlier version (`--state x.json`, or `state.json` beside `state.db`), after which that file is
 * renamed to `<name>.imported`. Without either, the database is created at the first write.
 *
 * `getSync` and `listSync` return the stored objects themselves, deep-frozen: read-only views,
 * so that the runtime's checks and the VMID holders' scan on every create cost no copy of the
 * whole store; so do watchers get them (the controller's reads only the key). `get` and `list`
 * (the engine's, which edits what it reads) return copies.
 */
export class FileStore<R extends Managed = Managed> extends MemoryStore<R> {
  /** The state path as given (`--state`, or the default). */
  readonly file: string;
  /** The database it stands for (statePaths: `x.json` -> `x.db`). */
  readonly dbFile: string;
  /** The installation whose resources this state caches. */
  installation: string | undefined;
  private lock: StateLock | undefined;
  private db: StateDatabase | undefined;
  /** Set when a commit could not be made durable (see lost): every later write fails with it. */
  private broken: Error | undefined;
  /** A synchronous write (put, remove) was committed and not yet made durable (syncWritten). */
  private unsynced = false;
  /** Before open() a FileStore is a MemoryStore; after close() it refuses writes (see database()). */
  private phase: 'new' | 'open' | 'closed' = 'new';
  /** Each event's row in the database, and the events not written yet. */
  private readonly eventSeq = new WeakMap<StoredEvent, number>();
  private readonly unwritten = new Set<StoredEvent>();
  private lastEventSeq = 0;
  /** The writes waiting for the group commit, in order, and the state they leave each key in (null: gone). */
  private batch: Array<{ c: Change<R>; resolve: (r: R) => void; reject: (e: unknown) => void }> = [];
  private readonly staged = new Map<string, R | null>();
  private flushTimer: NodeJS.Immediate | undefined;
  /** While a committed batch goes into memory: put and remove write nothing more. */
  private committed = false;

  constructor(file: string) {
    super();
    this.file = file;
    this.dbFile = statePaths(file).db;
  }

  /**
   * Lock and load. `installation`: the one this run belongs to; a state written for another is
   * refused (its resources are another installation's) and left as it is, a state without one
   * takes it.
   */
  open(installation?: string): void {
    this.lock = lockState(this.dbFile);
    try {
      const { json } = statePaths(this.file);
      if (isSqliteFile(this.dbFile)) {
        this.db = new StateDatabase(this.dbFile);
        const data = this.db.read<R>();
        this.checkInstallation(data, installation, this.dbFile);
        // An import killed between writing the database and renaming its source: finish it.
        if (json && existsSync(json)) {
          checkLeftover(this.dbFile, json, data);
          keepAside(json);
        }
      } else {
        // A JSON state: an earlier version's beside the database, or moved to its name by hand.
        const source = existsSync(this.dbFile) ? this.dbFile : json && existsSync(json) ? json : undefined;
        const data = source ? readOneStateFile<R>(source) : undefined;
        if (source && data) {
          this.checkInstallation(data, installation, source);
          createDatabase(
            this.dbFile,
            { state: data, installation, importedFrom: source, importedSha256: sha256Of(source) },
            // In place (the JSON file has the database's name): keep a copy before it is replaced.
            source === this.dbFile ? () => keepAside(source, true) : undefined,
          );
          if (source !== this.dbFile) keepAside(source);
          this.db = new StateDatabase(this.dbFile);
        }
      }
      if (this.db) this.load(this.db, installation);
    } catch (e) {
      this.close();
      throw e;
    }
    this.installation ??= installation;
    this.phase = 'open';
  }

  private checkInstallation(data: DbState<R>, installation: string | undefined, file: string): void {
    if (installation && data.installation && data.installation !== installation)
      throw new StateFileError(
        `${file}: this state file belongs to installation '${data.installation}', but the ProviderConfig says '${installation}'; pass the state file of '${installation}' with --state, or set spec.installation: ${data.installation} in the ProviderConfig`,
      );
  }

  private load(db: StateDatabase, installation: string | undefined): void {
    const data = db.read<R>();
    this.restore(data);
    for (const o of this.objects.values()) deepFreeze(o);
    const seqs = db.eventSeqs();
    for (const [i, e] of this.events.entries()) this.eventSeq.set(e, seqs[i]!);
    this.lastEventSeq = seqs.at(-1) ?? 0;
    this.installation = data.installation;
    if (!data.installation && installation) {
      db.setMeta('installation', installation);
      this.installation = installation;
    }
  }

  /**
   * The database, created at the first write when there was none; undefined before open() (the
   * store is in memory only, as it always was). After close() a write is an error: the lock is
   * gone, and a write now would be one no other apply knows to wait for.
   */
  private database(): StateDatabase | undefined {
    if (this.phase === 'new') return undefined;
    if (this.broken) throw this.broken;
    if (this.phase === 'closed') throw new Error(`${this.dbFile}: the state is closed; this write was not stored`);
    if (!this.db) {
      createDatabase(this.dbFile, { installation: this.installation });
      this.db = new StateDatabase(this.dbFile);
    }
    return this.db;
  }

  override getSync(key: string): R | undefined {
    return this.objects.get(key);
  }

  protected override watched(obj: R): R {
    return obj;
  }

  override listSync(): R[] {
    return [...this.objects.values()];
  }

  /**
   * Group commit. update and updateStatus (the engine's writes, which it awaits) are staged and
   * committed together at the end of the event loop's turn: one transaction and one fsync for
   * every write made meanwhile by every reconcile, where each took one of its own (an fsync blocks
   * the process: at 10,000 resources, one per write was minutes of an apply spent waiting for the
   * disk). A write is visible in memory and to watchers once committed (so that the next one
   * builds on it), and resolves only once the commit is durable (fsynced, off the event loop: see
   * state-database.ts): a write the engine was told is done is on disk. A failed commit rejects
   * every write of the batch and changes nothing.
   * apply and markDeleted (the runtime's, synchronous) commit the staged writes first, then
   * themselves, as before.
   */
  protected override current(key: string): R | undefined {
    const s = this.staged.get(key);
    return s === undefined ? this.objects.get(key) : (s ?? undefined);
  }

  protected override commitChange(c: Change<R>): Promise<R> {
    // Before open() (memory only) and after close() (database() refuses the write): at once.
    if (this.phase !== 'open') return super.commitChange(c);
    return new Promise<R>((resolve, reject) => {
      this.batch.push({ c, resolve, reject });
      this.staged.set(c.key, c.removed !== undefined ? null : c.next);
      this.flushTimer ??= setImmediate(() => this.flush());
    });
  }

  /**
   * Commit the staged writes in one transaction and make them visible; each resolves once the
   * commit is durable (StateDatabase.durable: an fsync off the event loop), so that nothing the
   * engine does after a write (a create after its VMID) comes before the write is on disk.
   */
  flush(): void {
    if (this.flushTimer) clearImmediate(this.flushTimer);
    this.flushTimer = undefined;
    const batch = this.batch;
    if (!batch.length) return;
    this.batch = [];
    this.staged.clear();
    let events: StoredEvent[];
    let db: StateDatabase;
    try {
      db = this.database()!;
      events = this.writeEvents(db, () => {
        for (const { c } of batch)
          if (c.removed !== undefined) this.deleteRow(db, c.key, c.removed);
          else db.putObject(c.key, Number(c.next.metadata.resourceVersion), JSON.stringify(c.next));
      });
    } catch (e) {
      for (const b of batch) b.reject(e);
      return;
    }
    this.written(events);
    // Visible at once: a later write builds on it (committed, it is what the database holds).
    const settle: Array<() => void> = [];
    this.committed = true;
    try {
      for (const b of batch) {
        try {
          const stored = this.applyChange(b.c);
          settle.push(() => b.resolve(stored));
        } catch (e) {
          settle.push(() => b.reject(e));
        }
      }
    } finally {
      this.committed = false;
    }
    db.durable().then(
      () => {
        for (const s of settle) s();
      },
      (e: unknown) => this.lost(e, batch),
    );
  }

  /**
   * The disk refused to make a commit durable (an fsync failed: what it wrote may be lost, and
   * Linux does not report it again). Its writes are rejected, and the store takes no more: the
   * run must stop rather than act on a state the disk may not hold.
   */
  private lost(e: unknown, batch: Array<{ reject: (e: unknown) => void }>): void {
    const why = new Error(
      `${this.dbFile}: the state could not be made durable (${e instanceof Error ? e.message : String(e)}); nothing more is written. Check the disk, then run the command again: it reads what the state file holds`,
    );
    this.broken = why;
    for (const b of batch) b.reject(why);
  }

  override apply(desired: R): R {
    this.flush();
    const out = super.apply(desired);
    this.syncWritten();
    return out;
  }

  /**
   * The writes of a rollout's admission (LocalRuntime.admit): each committed as apply() commits it,
   * all made durable by one fsync of the log before this returns, not one each. Nothing acts on
   * them before it returns (a watcher's reconcile runs later), and an fsync covers every write to
   * the log before it. A phase of 14 VMs cost 14 fsyncs on the event loop, 4 ms of its gate.
   */
  override applyAll(desired: Iterable<R>): void {
    this.flush();
    try {
      for (const d of desired) super.apply(d);
    } finally {
      this.syncWritten();
    }
  }

  override markDeleted(key: string): void {
    this.flush();
    super.markDeleted(key);
    this.syncWritten();
  }

  /** The runtime's synchronous writes are durable when they return, as each was before. */
  private syncWritten(): void {
    if (!this.unsynced) return;
    this.unsynced = false;
    this.db?.durableSync();
  }

  private deleteRow(db: StateDatabase, key: string, uid: string): void {
    db.deleteObject(key);
    if (uid) db.addRetired(uid, MAX_RETIRED);
    // The counter outlives the object: a later resource never reuses its resourceVersions.
    db.setMeta('rv', String(this.rv));
  }

  protected override put(key: string, next: R): void {
    const db = this.committed ? undefined : this.database();
    if (db) {
      const doc = JSON.stringify(next);
      this.written(this.writeEvents(db, () => db.putObject(key, Number(next.metadata.resourceVersion), doc)));
      this.unsynced = true;
    }
    super.put(key, deepFreeze(next));
  }

  protected override remove(key: string, uid: string): void {
    const db = this.committed ? undefined : this.database();
    if (db) {
      this.written(this.writeEvents(db, () => this.deleteRow(db, key, uid)));
      this.unsynced = true;
    }
    super.remove(key, uid);
  }

  /**
   * Events are best effort: they reach the database with the next object write's transaction (a
   * status write follows every condition change) or at close, not with a commit of their own.
   */
  protected override eventRecorded(e: StoredEvent): void {
    if (!this.eventSeq.has(e)) this.eventSeq.set(e, ++this.lastEventSeq);
    this.unwritten.add(e);
  }

  /** One transaction: `write`, then the events not written yet; returns those events. */
  private writeEvents(db: StateDatabase, write: () => void): StoredEvent[] {
    const events = [...this.unwritten];
    db.transaction(() => {
      write();
      for (const e of events) db.putEvent(this.eventSeq.get(e)!, JSON.stringify(e));
      const first = this.events[0];
      if (events.length && first) db.trimEvents(this.eventSeq.get(first)!);
    });
    return events;
  }

  private written(events: StoredEvent[]): void {
    for (const e of events) this.unwritten.delete(e);
  }

  close(): void {
    try {
      this.flush();
      if (this.db && this.unwritten.size) this.written(this.writeEvents(this.db, () => {}));
    } finally {
      this.db?.close();
      this.db = undefined;
      this.lock?.release();
      this.lock = undefined;
      if (this.phase === 'open') this.phase = 'closed';
    }
  }
}
