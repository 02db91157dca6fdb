/**
 * The writing side of the state database (state.db; its schema and reading are
 * src/workspace/state-db.ts): creating one (empty, or imported from the JSON state file of an
 * earlier version), and the per-object statements FileStore (store.ts) writes through.
 *
 * Crash safety. The database runs in WAL mode, and a commit is durable (fsynced) before the
 * write it holds is reported done:
 *   - A commit appends the changed pages (the rows written, a few KB each) to the write-ahead log.
 *     A process killed at any instant (SIGKILL mid-apply) leaves the database with every
 *     committed write and none of an uncommitted one: the next open replays the log.
 *   - The log is fsynced after the commit, off the event loop (`durable`, in libuv's thread pool),
 *     and FileStore resolves a write only once an fsync begun after its commit has ended: the
 *     durability of SQLite's `synchronous = FULL` (a commit survives a power loss or kernel crash,
 *     which the engine relies on: it persists `external-create-pending` and the VMID *before* it
 *     sends the create), without FULL's fsync inside COMMIT, which blocked the process for each
 *     group commit (a quarter of a 3,000-VM apply's wall time). So SQLite itself runs with
 *     `synchronous = OFF`, and what OFF would lose across a power loss is what this file takes
 *     back: the log is never checkpointed by SQLite on its own (`wal_autocheckpoint = 0`); this file
 *     checkpoints it as it grows (CHECKPOINT_BYTES) and at close, each time with `synchronous =
 *     FULL`, under which SQLite fsyncs the log before it copies pages into the database and the
 *     database before the log is reused. (An fsync covers every write to the file before it: one
 *     that ends for a later commit makes the earlier ones durable too.)
 *   - WAL (not a rollback journal) lets `status --watch` read while apply writes, and writes
 *     each change once to the log (a checkpoint later copies the page into the database file), so
 *     the bytes written per apply grow with the number of writes, not with the state's size.
 *   - A database is never created in place: it is built as `<db>.new` (in one transaction,
 *     fsynced), then renamed over, so a crash leaves either no database or a whole one.
 *   - An imported JSON file is renamed aside only after the database holding its content is in
 *     place; a JSON file found beside its database with the checksum recorded at the import is
 *     that same file (a crash between the two renames), and the next open finishes the rename.
 */
import { closeSync, copyFileSync, existsSync, fsync, fsyncSync, openSync, renameSync, rmSync } from 'node:fs';
import { dirname } from 'node:path';
import type { DatabaseSync, StatementSync } from 'node:sqlite';
import { keyOf, type Managed } from '../engine/resource.ts';
import { type DbState, isSqliteFile, readDb, SCHEMA, schemaProblem, sqliteModule } from '../workspace/state-db.ts';
import { type StateFile, StateFileError } from '../workspace/state-file.ts';

/** What a new database starts with: nothing, or an imported state (and where it came from). */
export interface DatabaseContent<R extends Managed = Managed> {
  state?: StateFile<R>;
  installation?: string | undefined;
  importedFrom?: string;
  importedSha256?: string;
}

/**
 * Build a complete database at `file` (which must not exist yet, or hold the JSON state being
 * imported in place): at `<file>.new`, then renamed over. `beforeRename` runs once the new
 * database is durable (to keep a JSON file at the same name aside first).
 */
export function createDatabase<R extends Managed>(
  file: string,
  content: DatabaseContent<R>,
  beforeRename?: () => void,
): void {
  // Never over a database: what it holds would be lost (the import in place replaces JSON only).
  if (isSqliteFile(file)) throw new Error(`${file} is already a state database; it is not created again`);
  const tmp = `${file}.new`;
  // A leftover of a create that was killed (we hold the state's lock: nobody else builds it).
  for (const f of [tmp, `${tmp}-journal`, `${tmp}-wal`, `${tmp}-shm`]) rmSync(f, { force: true });
  const { DatabaseSync } = sqliteModule();
  const db = new DatabaseSync(tmp);
  try {
    // A rollback journal with synchronous FULL (SQLite's defaults): the commit is fsynced.
    db.exec('BEGIN');
    db.exec(SCHEMA);
    const meta = db.prepare('INSERT INTO meta (name, value) VALUES (?, ?)');
    const s = content.state;
    const installation = s?.installation ?? content.installation;
    if (installation) meta.run('installation', installation);
    meta.run('rv', String(s?.rv ?? 0));
    meta.run('created', new Date().toISOString());
    if (content.importedFrom) meta.run('importedFrom', content.importedFrom);
    if (content.importedSha256) meta.run('importedSha256', content.importedSha256);
    if (s) {
      // As the JSON store loaded it: a key twice (never written so) keeps the last.
      const obj = db.prepare('INSERT OR REPLACE INTO objects (key, rv, doc) VALUES (?, ?, ?)');
      for (const o of s.objects) obj.run(keyOf(o), Number(o.metadata.resourceVersion) || 0, JSON.stringify(o));
      const ev = db.prepare('INSERT INTO events (doc) VALUES (?)');
      for (const e of s.events) ev.run(JSON.stringify(e));
      const ret = db.prepare('INSERT INTO retired (uid) VALUES (?)');
      for (const u of s.retired) ret.run(u);
    }
    db.exec('COMMIT');
  } finally {
    db.close();
  }
  beforeRename?.();
  renameSync(tmp, file);
  syncDir(file);
}

/** Rename `file` to the first free `<file>.imported[.N]` (never over an earlier one); returns it. */
export function keepAside(file: string, copy = false): string {
  let aside = `${file}.imported`;
  for (let i = 2; existsSync(aside); i++) aside = `${file}.imported.${i}`;
  if (copy) copyFileSync(file, aside);
  else renameSync(file, aside);
  syncDir(file);
  return aside;
}

/** Make a rename in `file`'s directory durable (best effort: not every filesystem allows it). */
function syncDir(file: string): void {
  try {
    const fd = openSync(dirname(file), 'r');
    try {
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
  } catch {
    // the rename is done; only its durability across a power loss is not confirmed
  }
}

/**
 * How many bytes of rows may be written before the log is checkpointed into the database (see
 * the file's comment): the log holds each changed page, so it grows a few times faster than this.
 * Counted as written, not read off the log's size, which journal_size_limit leaves at 8 MB after a
 * checkpoint, whatever the log then holds.
 */
const CHECKPOINT_BYTES = 2 * 1024 * 1024;

/** An open state database with the statements FileStore writes through. */
export class StateDatabase {
  readonly file: string;
  private readonly db: DatabaseSync;
  private readonly putObjectSql: StatementSync;
  private readonly deleteObjectSql: StatementSync;
  private readonly addRetiredSql: StatementSync;
  private readonly trimRetiredSql: StatementSync;
  private readonly putEventSql: StatementSync;
  private readonly trimEventsSql: StatementSync;
  private readonly setMetaSql: StatementSync;
  /** The write-ahead log, opened for its fsyncs once a commit made it (see durable). */
  private logFd: number | undefined;
  private readonly fsync: (fd: number, done: (e: Error | null) => void) => void;
  /** Bytes of rows written since the last checkpoint. */
  private sinceCheckpoint = 0;
  /** Checkpoints made (for the tests). */
  checkpoints = 0;
  /** fsyncs of the log begun (for the tests), and those not ended yet. */
  syncs = 0;
  private pending = 0;

  /** Open `file` (an existing SQLite file) for writing; StateFileError when it is not a state database we read. */
  constructor(file: string, opts: { fsync?: (fd: number, done: (e: Error | null) => void) => void } = {}) {
    this.file = file;
    this.fsync = opts.fsync ?? fsync;
    const { DatabaseSync } = sqliteModule();
    let db: DatabaseSync;
    try {
      db = new DatabaseSync(file, { timeout: 5000 });
    } catch (e) {
      throw new StateFileError(`${file}: cannot open the state database (${(e as Error).message})`);
    }
    try {
      const problem = schemaProblem(db);
      if (problem)
        throw new StateFileError(
          `${file}: not a usable provider-proxmox state file: ${problem === 'empty' ? 'it is an empty SQLite database' : problem}; move it away or pass --state with the right file`,
        );
      // See the file's comment: WAL, every commit fsynced by durable(), checkpoints by checkpoint().
      db.prepare('PRAGMA journal_mode = WAL').get();
      db.exec('PRAGMA synchronous = OFF');
      db.exec('PRAGMA wal_autocheckpoint = 0');
      // The log is reused after each checkpoint; this caps what it keeps on disk meanwhile.
      db.exec('PRAGMA journal_size_limit = 8388608');
      // An upsert, not INSERT OR REPLACE: the row keeps its rowid, so the order stays that of creation.
      this.putObjectSql = db.prepare(
        'INSERT INTO objects (key, rv, doc) VALUES (?, ?, ?) ON CONFLICT (key) DO UPDATE SET rv = excluded.rv, doc = excluded.doc',
      );
      this.deleteObjectSql = db.prepare('DELETE FROM objects WHERE key = ?');
      this.addRetiredSql = db.prepare('INSERT INTO retired (uid) VALUES (?)');
      this.trimRetiredSql = db.prepare('DELETE FROM retired WHERE seq <= (SELECT max(seq) FROM retired) - ?');
      this.putEventSql = db.prepare(
        'INSERT INTO events (seq, doc) VALUES (?, ?) ON CONFLICT (seq) DO UPDATE SET doc = excluded.doc',
      );
      this.trimEventsSql = db.prepare('DELETE FROM events WHERE seq < ?');
      this.setMetaSql = db.prepare(
        'INSERT INTO meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value',
      );
    } catch (e) {
      db.close();
      throw this.unusable(e);
    }
    this.db = db;
  }

  /** A failure to read the database (damaged, not ours) as the StateFileError naming it. */
  private unusable(e: unknown): Error {
    if (e instanceof StateFileError) return e;
    return new StateFileError(
      `${this.file}: not a usable provider-proxmox state file: cannot read the state database (${(e as Error).message}); move it away or pass --state with the right file`,
    );
  }

  /** The whole state; StateFileError when the database cannot be read (damaged). */
  read<R extends Managed>(): DbState<R> {
    try {
      return readDb<R>(this.db);
    } catch (e) {
      throw this.unusable(e);
    }
  }

  /** The events' sequence numbers, in the order read() returns the events. */
  eventSeqs(): number[] {
    return (this.db.prepare('SELECT seq FROM events ORDER BY seq').all() as Array<{ seq: number }>).map((r) => r.seq);
  }

  /**
   * Run `fn` in one transaction: all of its writes are committed together, or none. Committed is
   * not yet durable: durable() (or durableSync()) says when it is.
   */
  transaction(fn: () => void): void {
    this.db.exec('BEGIN IMMEDIATE');
    try {
      fn();
      this.db.exec('COMMIT');
    } catch (e) {
      if (this.db.isTransaction) this.db.exec('ROLLBACK');
      throw e;
    }
  }

  /**
   * Resolves once every commit made so far is on disk: an fsync of the log, begun now, run in
   * libuv's thread pool so that the event loop goes on meanwhile. Checkpoints the log first when
   * CHECKPOINT_BYTES of rows were written since the last one (see the file's comment).
   */
  durable(): Promise<void> {
    let fd: number;
    try {
      this.checkpointIfLarge();
      fd = this.log();
    } catch (e) {
      return Promise.reject(e);
    }
    this.syncs++;
    this.pending++;
    return new Promise<void>((resolve, reject) =>
      this.fsync(fd, (e) => {
        this.pending--;
        // The log's descriptor outlives close() while an fsync on it runs (see close).
        if (this.pending === 0 && !this.db.isOpen) this.closeLog();
        if (e) reject(e);
        else resolve();
      }),
    );
  }

  /** durable(), waited for: for the runtime's synchronous writes. */
  durableSync(): void {
    this.checkpointIfLarge();
    this.syncs++;
    fsyncSync(this.log());
  }

  /** The log's descriptor (opened on first use: the log exists once a commit wrote to it). */
  private log(): number {
    this.logFd ??= openSync(`${this.file}-wal`, 'r');
    return this.logFd;
  }

  /**
   * Copy the log into the database once CHECKPOINT_BYTES of rows were written, with SQLite's full
   * syncs (the log before the copy, the database before the log is reused); readers (status
   * --watch) are not waited for (PASSIVE): what they still read is copied at a later checkpoint.
   */
  private checkpointIfLarge(): void {
    if (this.sinceCheckpoint < CHECKPOINT_BYTES) return;
    this.sinceCheckpoint = 0;
    this.checkpoints++;
    this.db.exec('PRAGMA synchronous = FULL');
    try {
      this.db.prepare('PRAGMA wal_checkpoint(PASSIVE)').get();
    } finally {
      this.db.exec('PRAGMA synchronous = OFF');
    }
  }

  putObject(key: string, rv: number, doc: string): void {
    this.sinceCheckpoint += doc.length;
    this.putObjectSql.run(key, rv, doc);
  }

  deleteObject(key: string): void {
    this.deleteObjectSql.run(key);
  }

  /** Remember a retired uid, keeping the newest `keep`. */
  addRetired(uid: string, keep: number): void {
    this.addRetiredSql.run(uid);
    this.trimRetiredSql.run(keep);
  }

  putEvent(seq: number, doc: string): void {
    this.sinceCheckpoint += doc.length;
    this.putEventSql.run(seq, doc);
  }

  /** Forget the events before `seq` (the store keeps the newest 1,000). */
  trimEvents(seq: number): void {
    this.trimEventsSql.run(seq);
  }

  setMeta(name: string, value: string): void {
    this.setMetaSql.run(name, value);
  }

  close(): void {
    try {
      // The last connection to close checkpoints the log into the database and removes it: with
      // FULL, SQLite fsyncs both before the log goes.
      if (this.db.isOpen) this.db.exec('PRAGMA synchronous = FULL');
    } finally {
      if (this.db.isOpen) this.db.close();
      if (this.pending === 0) this.closeLog();
    }
  }

  private closeLog(): void {
    if (this.logFd !== undefined) closeSync(this.logFd);
    this.logFd = undefined;
  }
}
