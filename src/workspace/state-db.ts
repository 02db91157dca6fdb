/**
 * The state database (`state.db`, SQLite through node:sqlite): its schema, how node:sqlite is
 * loaded, and how its content is read into a StateFile. The writer (FileStore, src/local/store.ts)
 * and the commands that only read a state (status, plan, gc through readStateFile in
 * state-file.ts) share this, so both agree on what a usable database is.
 *
 * One row per resource (`objects`), so a write touches one row and the database's pages that hold
 * it, not the whole state: that is what keeps an apply of N resources at O(N) bytes written.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { DatabaseSync } from 'node:sqlite';
import type { Managed } from '../engine/resource.ts';
import type { StateFile, StoredEvent } from './state-file.ts';

/** `PRAGMA application_id` of our databases ('pprx'): any other SQLite file is not a state database. */
export const APPLICATION_ID = 0x70707278;
/** `PRAGMA user_version`: the schema this version writes; it reads every one up to it. */
export const SCHEMA_VERSION = 1;
/** The state format number readStateFile reports for a database (JSON state files are 1 and 2). */
export const DB_STATE_VERSION = 3;

/**
 * `objects.rv` is the resource's resourceVersion, so that a write needs no second row for the
 * counter; `meta.rv` only remembers the counter across deletions (the largest of both is next).
 * STRICT tables: a value of the wrong type is an error, not silently stored.
 */
export const SCHEMA = `
PRAGMA application_id = ${APPLICATION_ID};
PRAGMA user_version = ${SCHEMA_VERSION};
CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT;
CREATE TABLE objects (key TEXT PRIMARY KEY, rv INTEGER NOT NULL, doc TEXT NOT NULL) STRICT;
CREATE TABLE events (seq INTEGER PRIMARY KEY, doc TEXT NOT NULL) STRICT;
CREATE TABLE retired (seq INTEGER PRIMARY KEY, uid TEXT NOT NULL) STRICT;
`;

/** What the first 16 bytes of every SQLite database are. */
const SQLITE_HEADER = 'SQLite format 3\0';

/** Whether `file` holds a SQLite database (by its content, whatever its name). */
export function isSqliteFile(file: string): boolean {
  try {
    return readFileSync(file).subarray(0, 16).toString('latin1') === SQLITE_HEADER;
  } catch {
    return false;
  }
}

let sqlite: typeof import('node:sqlite') | undefined;

/**
 * node:sqlite, loaded on first use (no command that does not touch a state pays for it). Node 24
 * loads it without a flag and silently; Node 22.13 to 23 (package.json allows >= 22.19) print
 * "ExperimentalWarning: SQLite is an experimental feature" to stderr on the first load. Exactly
 * that warning is dropped, once, while the module loads; every other warning passes.
 */
export function sqliteModule(): typeof import('node:sqlite') {
  if (sqlite) return sqlite;
  const emit = process.emitWarning;
  process.emitWarning = ((warning: string | Error, ...rest: unknown[]) => {
    const message = typeof warning === 'string' ? warning : warning.message;
    const o = rest[0];
    const type = typeof o === 'string' ? o : ((o as { type?: string } | undefined)?.type ?? (warning as Error).name);
    if (type === 'ExperimentalWarning' && /SQLite/.test(message)) return;
    return (emit as (...a: unknown[]) => void).call(process, warning, ...rest);
  }) as typeof process.emitWarning;
  try {
    sqlite = createRequire(import.meta.url)('node:sqlite') as typeof import('node:sqlite');
  } finally {
    process.emitWarning = emit;
  }
  return sqlite;
}

/** A state database as read: the StateFile, and the checksum of the JSON file it was imported from. */
export interface DbState<R extends Managed = Managed> extends StateFile<R> {
  importedSha256?: string;
}

/**
 * Why `db` is not a state database of a schema this version reads, or undefined when it is one.
 * A database without any table is a new one (`empty`).
 */
export function schemaProblem(db: DatabaseSync): 'empty' | string | undefined {
  const app = (db.prepare('PRAGMA application_id').get() as { application_id: number }).application_id;
  const version = (db.prepare('PRAGMA user_version').get() as { user_version: number }).user_version;
  if (app === 0 && version === 0) {
    const tables = db.prepare("SELECT count(*) AS n FROM sqlite_schema WHERE type = 'table'").get() as { n: number };
    return tables.n === 0 ? 'empty' : 'it is a SQLite database, but not a provider-proxmox state database';
  }
  if (app !== APPLICATION_ID) return 'it is a SQLite database, but not a provider-proxmox state database';
  if (version > SCHEMA_VERSION)
    return `state database schema ${version}, but this provider-proxmox reads schemas 1 to ${SCHEMA_VERSION}; use the provider-proxmox that wrote it`;
  if (version < 1) return `it has no schema version`;
  return undefined;
}

/** The whole content of an open state database (its schema checked by the caller). */
export function readDb<R extends Managed = Managed>(db: DatabaseSync): DbState<R> {
  const meta = new Map(
    (db.prepare('SELECT name, value FROM meta').all() as Array<{ name: string; value: string }>).map((m) => [
      m.name,
      m.value,
    ]),
  );
  let rv = Number(meta.get('rv') ?? 0);
  const objects: R[] = [];
  // rowid order: the order resources first entered the store (an upsert keeps the row's rowid).
  // Row by row (iterate, not all): the rows' text is never all in memory next to the objects.
  for (const row of db.prepare('SELECT rv, doc FROM objects ORDER BY rowid').iterate() as Iterable<{
    rv: number;
    doc: string;
  }>) {
    objects.push(JSON.parse(row.doc) as R);
    if (row.rv > rv) rv = row.rv;
  }
  const events = (db.prepare('SELECT doc FROM events ORDER BY seq').all() as Array<{ doc: string }>).map(
    (e) => JSON.parse(e.doc) as StoredEvent,
  );
  const retired = (db.prepare('SELECT uid FROM retired ORDER BY seq').all() as Array<{ uid: string }>).map(
    (r) => r.uid,
  );
  const installation = meta.get('installation');
  const sha = meta.get('importedSha256');
  return {
    version: DB_STATE_VERSION,
    ...(installation !== undefined ? { installation } : {}),
    rv,
    objects,
    events,
    retired,
    ...(sha ? { importedSha256: sha } : {}),
  };
}

/** Open a state database to read it; read-write when the file allows it (see openForReading's comment). */
export function openForReading(file: string): DatabaseSync {
  const { DatabaseSync } = sqliteModule();
  // A read-only connection to a WAL database leaves empty -wal and -shm files beside it when it
  // closes; a read-write one that only reads removes them (or checkpoints what a killed writer
  // committed). Read-only is the fallback for a file this user may not write.
  try {
    return new DatabaseSync(file, { timeout: 5000 });
  } catch {
    return new DatabaseSync(file, { readOnly: true, timeout: 5000 });
  }
}
