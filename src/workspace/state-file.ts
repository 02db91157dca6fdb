/**
 * The state file as the operator's disk holds it: its format (what a state file contains, the
 * versions this provider reads), how it is read and checked, and where state files live (one per
 * installation under the state root, and the old place relative to the current directory).
 * Reading is all that happens here; src/local/store.ts (FileStore) is the only writer, and every
 * command that only looks at a state file (status, plan, gc, apply --dry-run) reads it with
 * readStateFile, so none of them can take a broken file for an empty fleet.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { isAbsolute, join, resolve } from 'node:path';
import type { Managed } from '../engine/resource.ts';

/** An event as the state file keeps it (the cluster-less stand-in for Kubernetes Events). */
export interface StoredEvent {
  key: string;
  type: 'Normal' | 'Warning';
  reason: string;
  message: string;
  time: string;
  count: number;
}

/** The state file format this version writes; it reads every version up to it. */
export const STATE_VERSION = 2;

/** What a state file holds. `installation`: the installation whose resources it caches (version 2). */
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

/**
 * The directory holding one `<installation>/state.json` per installation:
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
  return join(stateRoot(env), installation, 'state.json');
}

/** The installations that have a state file under `root`, sorted. */
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
  // A directory without state.json is one whose apply stopped before it wrote anything.
  return names.filter((n) => existsSync(join(root, n, 'state.json'))).sort();
}

// --- reading one ------------------------------------------------------------------------------------

/** A state file that cannot be used: every command stops with it, naming the file. */
export class StateFileError extends Error {}

const STATE_FIX =
  "the state file is only a cache of what Proxmox holds: move it away and run apply again, which finds this installation's VMs by their ownership markers, or pass --state with the right file";

/**
 * Read and check a state file; undefined when there is none. Anything else that is not a state
 * file of a known version (empty, not JSON, `{}`, `[]`, a newer version) is a StateFileError: no
 * command may take it for an empty fleet.
 */
export function readStateFile<R extends Managed = Managed>(file: string): StateFile<R> | undefined {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new StateFileError(`${file}: cannot read the state file (${(e as Error).message})`);
  }
  const bad = (why: string) =>
    new StateFileError(`${file}: not a usable provider-proxmox state file: ${why}; ${STATE_FIX}`);
  if (!text.trim()) throw bad('it is empty');
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch (e) {
    throw bad(`it is not JSON (${(e as Error).message})`);
  }
  if (typeof data !== 'object' || data === null || Array.isArray(data))
    throw bad(`it holds ${Array.isArray(data) ? 'a list' : JSON.stringify(data)}, not a state object`);
  const d = data as Partial<StateFile<R>>;
  if (typeof d.version !== 'number') throw bad('it has no version');
  if (!Number.isInteger(d.version) || d.version < 1 || d.version > STATE_VERSION)
    throw new StateFileError(
      `${file}: state file version ${d.version}, but this provider-proxmox reads versions 1 to ${STATE_VERSION}; use the provider-proxmox that wrote it, or ${STATE_FIX}`,
    );
  if (!Array.isArray(d.objects) || typeof d.rv !== 'number') throw bad('it has no objects or rv');
  if (d.installation !== undefined && typeof d.installation !== 'string') throw bad('its installation is not a string');
  return {
    version: d.version,
    ...(d.installation !== undefined ? { installation: d.installation } : {}),
    rv: d.rv,
    objects: d.objects,
    events: Array.isArray(d.events) ? d.events : [],
    retired: Array.isArray(d.retired) ? d.retired.filter((u): u is string => typeof u === 'string') : [],
  };
}
