/**
 * FileStore, the cluster-less ResourceStore the CLI runs on: a MemoryStore (memory-store.ts, the
 * Kubernetes write semantics) persisted to the state database (state.db, SQLite) one resource at a
 * time under an exclusive lock file, the engine's writes of one turn of the event loop in one
 * group commit. Where states live, their formats and how commands that only read one read it are
 * src/workspace/state-file.ts; the database's writing side and its crash safety are
 * state-database.ts, the lock state-lock.ts.
 */
import { existsSync } from 'node:fs';
import { internString } from '../engine/intern.ts';
import type { Managed } from '../engine/resource.ts';
import { type DbState, isSqliteFile } from '../workspace/state-db.ts';
import {
  checkLeftover,
  readOneStateFile,
  StateFileError,
  type StoredEvent,
  sha256Of,
  statePaths,
} from '../workspace/state-file.ts';
import { type Change, MAX_RETIRED, MemoryStore } from './memory-store.ts';
import { createDatabase, keepAside, StateDatabase } from './state-database.ts';
import { lockState, type StateLock, StateLockedError } from './state-lock.ts';

export { StateLockedError };

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
