/**
 * The state as the operator's disk holds it: its formats (the SQLite database `state.db` this
 * version writes, and the JSON state files of earlier versions, which it reads and imports), how a
 * state is read and checked, and where states live (one per installation under the state root,
 * and the old place relative to the current directory). Reading is all that happens here;
 * src/local/store.ts (FileStore) is the only writer, and every command that only looks at a state
 * (status, plan, gc, apply --dry-run) reads it with readStateFile, so none of them can take a
 * broken file for an empty fleet.
 *
 * A state path names a pair: `X.db` (the database) and `X.json` (the JSON file an earlier version
 * wrote there), whichever of the two names is given; any other name is the database itself. The
 * database wins; the JSON file is read while no database exists, and imported into it by the
 * first writer (then renamed to `X.json.imported`, never deleted). A file's format is told by its
 * content, not its name: a JSON file moved to `state.db` by hand is still read (and imported).
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { isAbsolute, join, resolve } from 'node:path';
import type { Managed } from '../engine/resource.ts';
import { type DbState, isSqliteFile, openForReading, readDb, schemaProblem } from './state-db.ts';

/** An event as the state file keeps it (the cluster-less stand-in for Kubernetes Events). */
export interface StoredEvent {
  key: string;
  type: 'Normal' | 'Warning';
  reason: string;
  message: string;
  time: string;
  count: number;
}

/**
 * The last JSON state file format (earlier versions wrote it; this one reads versions 1 and 2
 * and imports them). A state database reports version 3 (state-db.ts).
 */
export const STATE_VERSION = 2;

/** What a state holds. `installation`: the installation whose resources it caches (version 2 on). */
export interface StateFile<R extends Managed = Managed> {
  version: number;
  installation?: string;
  rv: number;
  objects: R[];
  events: StoredEvent[];
  retired: string[];
}

// --- where state files live -----------------------------------------------------------------------

/**
 * The state file's place before it moved under the state root: relative to the directory apply
 * ran in, so the same manifests applied from elsewhere started from an empty state. Still used when
 * it exists in the current directory (with a note), so nobody's fleet is forgotten by an upgrade.
 */
export const LEGACY_STATE_FILE = '.provider-proxmox/state.json';

/** Overrides the state root (tests, and users who keep state elsewhere). */
export const STATE_DIR_ENV = 'PROVIDER_PROXMOX_STATE_DIR';

/** The file name of an installation's state under the state root. */
export const STATE_FILE_NAME = 'state.db';

/**
 * The directory holding one `<installation>/state.db` per installation:
 * `$PROVIDER_PROXMOX_STATE_DIR`, else `$XDG_STATE_HOME/provider-proxmox`, else
 * `~/.local/state/provider-proxmox`. A relative XDG_STATE_HOME is ignored, as the XDG base
 * directory specification says (it would again depend on the current directory).
 */
export function stateRoot(env: NodeJS.ProcessEnv = process.env): string {
  const own = env[STATE_DIR_ENV];
  if (own) return resolve(own);
  const xdg = env.XDG_STATE_HOME;
  const base = xdg && isAbsolute(xdg) ? xdg : join(env.HOME || homedir(), '.local', 'state');
  return join(base, 'provider-proxmox');
}

/**
 * The state file of an installation when --state is not given. It depends only on the
 * installation (so on the ProviderConfig), never on the current directory.
 */
export function defaultStateFile(installation: string, env: NodeJS.ProcessEnv = process.env): string {
  return join(stateRoot(env), installation, STATE_FILE_NAME);
}

/**
 * The two files a state path stands for: the database, and the JSON state file of an earlier
 * version at the same name (imported into the database on first use). `X.json` and `X.db` are the
 * same pair; a name ending in neither is the database alone.
 */
export function statePaths(file: string): { db: string; json: string | undefined } {
  const m = /^(.*)\.(json|db)$/.exec(file);
  if (!m) return { db: file, json: undefined };
  return { db: `${m[1]}.db`, json: `${m[1]}.json` };
}

/** The file of a state path that exists (the database first), or undefined when neither does. */
export function existingState(file: string): string | undefined {
  const { db, json } = statePaths(file);
  if (existsSync(db)) return db;
  return json && existsSync(json) ? json : undefined;
}

/** The installations that have a state under `root` (a database or a JSON state file), sorted. */
export function installationsWithState(root: string = stateRoot()): string[] {
  let names: string[];
  try {
    names = readdirSync(root, { withFileTypes: true })
      .filter((d) => d.isDirectory())
      .map((d) => d.name);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw e;
  }
  // A directory without a state is one whose apply stopped before it wrote anything.
  return names.filter((n) => existingState(join(root, n, STATE_FILE_NAME)) !== undefined).sort();
}

// --- reading one ------------------------------------------------------------------------------------

/** A state file that cannot be used: every command stops with it, naming the file. */
export class StateFileError extends Error {}

const STATE_FIX =
  "the state file is only a cache of what Proxmox holds: move it away and run apply again, which finds this installation's VMs by their ownership markers, or pass --state with the right file";

/**
 * Read and check the state at `file` (the pair of statePaths: the database, else the JSON state
 * file of an earlier version); undefined when there is none. Anything else that is not a state of
 * a known version (empty, not JSON, `{}`, `[]`, a newer version, a SQLite file that is not ours,
 * a damaged database, a JSON file beside the database that is not the one imported into it) is a
 * StateFileError naming the file: no command may take it for an empty fleet.
 */
export function readStateFile<R extends Managed = Managed>(file: string): StateFile<R> | undefined {
  const { db, json } = statePaths(file);
  const data = readOneStateFile<R>(db);
  if (data && json && existsSync(json)) checkLeftover(db, json, data);
  const found = data ?? (json ? readOneStateFile<R>(json) : undefined);
  if (!found) return undefined;
  const { importedSha256: _, ...state } = found;
  return state;
}

/**
 * A JSON state file beside its database is the one imported into it (a writer stopped between
 * writing the database and renaming the JSON file: the next writer finishes that), or one an
 * earlier provider-proxmox wrote since: then which of the two is current is the user's call.
 */
export function checkLeftover(db: string, json: string, data: DbState): void {
  if (data.importedSha256 && data.importedSha256 === sha256Of(json)) return;
  throw new StateFileError(
    `${db}: ${json} is beside it and is not the state file imported into it (written by an earlier provider-proxmox since?): keep the one that is current and move the other away; ${STATE_FIX}`,
  );
}

/** The SHA-256 of a file's content (hex). */
export function sha256Of(file: string): string {
  // node:crypto is loaded here, not imported: every command imports this file (src/cli/args.ts),
  // and loading node:crypto is a good part of `--help`'s start-up.
  const { createHash } = process.getBuiltinModule('node:crypto');
  return createHash('sha256').update(readFileSync(file)).digest('hex');
}

/**
 * Read and check exactly `file`, a state database or a JSON state file by its content; undefined
 * when it does not exist. Errors as readStateFile's.
 */
export function readOneStateFile<R extends Managed = Managed>(file: string): DbState<R> | undefined {
  return isSqliteFile(file) ? readStateDb<R>(file) : readJsonStateFile<R>(file);
}

/** A state database, read whole. */
function readStateDb<R extends Managed>(file: string): DbState<R> {
  let db: ReturnType<typeof openForReading> | undefined;
  try {
    db = openForReading(file);
    const problem = schemaProblem(db);
    if (problem === 'empty') throw bad(file, 'it is an empty SQLite database');
    if (problem) throw bad(file, problem);
    return readDb<R>(db);
  } catch (e) {
    if (e instanceof StateFileError) throw e;
    throw bad(file, `cannot read the state database (${(e as Error).message})`);
  } finally {
    db?.close();
  }
}

function bad(file: string, why: string): StateFileError {
  return new StateFileError(`${file}: not a usable provider-proxmox state file: ${why}; ${STATE_FIX}`);
}

/** A JSON state file of an earlier version (versions 1 and 2). */
function readJsonStateFile<R extends Managed>(file: string): StateFile<R> | undefined {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new StateFileError(`${file}: cannot read the state file (${(e as Error).message})`);
  }
  if (!text.trim()) throw bad(file, 'it is empty');
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch (e) {
    throw bad(file, `it is not JSON (${(e as Error).message})`);
  }
  if (typeof data !== 'object' || data === null || Array.isArray(data))
    throw bad(file, `it holds ${Array.isArray(data) ? 'a list' : JSON.stringify(data)}, not a state object`);
  const d = data as Partial<StateFile<R>>;
  if (typeof d.version !== 'number') throw bad(file, 'it has no version');
  if (!Number.isInteger(d.version) || d.version < 1 || d.version > STATE_VERSION)
    throw new StateFileError(
      `${file}: state file version ${d.version}, but this provider-proxmox reads versions 1 to ${STATE_VERSION}; use the provider-proxmox that wrote it, or ${STATE_FIX}`,
    );
  if (!Array.isArray(d.objects) || typeof d.rv !== 'number') throw bad(file, 'it has no objects or rv');
  if (d.installation !== undefined && typeof d.installation !== 'string')
    throw bad(file, 'its installation is not a string');
  return {
    version: d.version,
    ...(d.installation !== undefined ? { installation: d.installation } : {}),
    rv: d.rv,
    objects: d.objects,
    events: Array.isArray(d.events) ? d.events : [],
    retired: Array.isArray(d.retired) ? d.retired.filter((u): u is string => typeof u === 'string') : [],
  };
}
