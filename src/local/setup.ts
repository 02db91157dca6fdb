/**
 * What every cluster-less command starts from: which state file (one per installation under the
 * state root, so the same manifests applied from any directory share it), the ProviderConfig
 * (--config or among the manifests), the manifests and their Secrets, and the runtime over them.
 */
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import {
  ConfigError,
  cliInstallation,
  installationOf,
  type LoadedProviderConfig,
  loadProviderConfig,
  parseProviderConfig,
} from '../api/provider-config.ts';
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import type { ReconcileResult } from '../engine/reconciler.ts';
import type { ResourceState } from '../fleet/phases.ts';
import type { ResourcePlan } from '../vm/plan.ts';
import { loadManifests, type ManifestDoc, ManifestError } from './manifests.ts';
import { LocalRuntime } from './runtime.ts';
import { defaultStateFile, installationsWithState, LEGACY_STATE_FILE, readStateFile, stateRoot } from './store.ts';

/**
 * The state file's old default place (relative to the current directory). Only `gc` still
 * defaults to it (src/fleet, src/cli/fleet.ts); the other commands use stateFileFor.
 */
export const DEFAULT_STATE = LEGACY_STATE_FILE;

export class UsageError extends Error {}

/** Which state file a command uses, and the note to print about it (the legacy place). */
export interface StateChoice {
  file: string;
  note?: string;
}

/** The installation of a ProviderConfig as the CLI runs it (spec.installation, else cli-<name>). */
export function cliInstallationOf(config: LoadedProviderConfig): string {
  return installationOf(config.config, cliInstallation);
}

/**
 * The state file of a command: `--state`; else `./.provider-proxmox/state.json` when it exists in
 * `cwd` (the old default, with a note naming the new place); else the installation's file under the
 * state root. Without an installation (a command that loads no ProviderConfig), the one
 * installation that has a state file there; several are a usage error; none: `{ none: why }`.
 */
export function stateFileFor(opts: {
  state?: string | undefined;
  installation?: string | undefined;
  cwd?: string | undefined;
}): StateChoice | { none: string } {
  if (opts.state) return { file: opts.state };
  const legacy = join(opts.cwd ?? process.cwd(), LEGACY_STATE_FILE);
  if (existsSync(legacy)) {
    const inst = opts.installation ?? peekInstallation(legacy);
    const target = inst ? defaultStateFile(inst) : join(stateRoot(), '<installation>', 'state.json');
    return {
      file: legacy,
      note: `note: using ${legacy}, the state file's old default place; the default is now ${target}, the same from every directory: move it there${inst ? ` (mkdir -p ${dirname(target)} && mv ${legacy} ${target})` : ''} while no apply runs, or pass --state`,
    };
  }
  if (opts.installation) return { file: defaultStateFile(opts.installation) };
  const root = stateRoot();
  const found = installationsWithState(root);
  if (found.length === 1) return { file: join(root, found[0]!, 'state.json') };
  if (found.length > 1)
    throw new UsageError(
      `${root} holds the state files of ${found.length} installations (${found.join(', ')}): pass --config FILE to pick its installation's, or --state FILE`,
    );
  return {
    none: `nothing has been applied: no state file under ${root} (apply writes one per installation there; pass --state FILE for one elsewhere)`,
  };
}

/** The installation a (legacy) state file records, for the note; nothing when it cannot say. */
export function peekInstallation(file: string): string | undefined {
  try {
    return readStateFile(file)?.installation;
  } catch {
    return undefined; // the command reading it next reports what is wrong with it
  }
}

/** The state file of a command that has its ProviderConfig; the legacy note goes to `err`. */
export function chooseState(
  args: { state?: string | undefined; cwd?: string | undefined; err?: NodeJS.WriteStream | undefined },
  config: LoadedProviderConfig,
): string {
  const c = stateFileFor({ state: args.state, installation: cliInstallationOf(config), cwd: args.cwd });
  if ('none' in c) throw new Error(c.none); // not reached: with an installation there always is a file
  if (c.note) write(args.err ?? process.stderr, c.note);
  return c.file;
}

export interface ApplyArgs {
  files: string[];
  config?: string;
  state?: string;
  timeoutMs?: number;
  workers?: number;
  output?: 'table' | 'json' | 'yaml';
  quiet?: boolean;
  out?: NodeJS.WriteStream;
  /** Used by `demo`: a config already loaded. */
  loadedConfig?: LoadedProviderConfig;
  taskPollMs?: number;
  agentPollMs?: number;
  header?: string;
  /** Fleet file with phases (overrides the phase annotations). */
  fleet?: string;
  /** Do not wait for a phase to be Ready before starting the next. */
  noWait?: boolean;
  /** At most this many VMs of a phase in progress at once. */
  maxParallel?: number;
  dryRun?: boolean;
  /** Stop as SIGINT does (for embedding and tests): the state file keeps what was done. */
  signal?: AbortSignal;
  /** Called after every admission round with where each resource stands (progress observers, tests). */
  onTick?: (states: Map<string, ResourceState>) => void;
  /** Called after every reconcile (tests count what a run reconciled). */
  onResult?: (key: string, result: ReconcileResult, failures: number) => void;
  /** The engine's creation grace period (default 30 s; tests shorten it). */
  creationGraceMs?: number;
  /** Notes (the legacy state file place) go here; default stderr. */
  err?: NodeJS.WriteStream;
  /** Where the legacy `./.provider-proxmox/state.json` is looked for; default the current directory. */
  cwd?: string;
  /**
   * Asked, with the plan, before anything changes (the CLI: a prompt on a terminal; without one,
   * --yes is needed); false cancels. Without it apply goes ahead (demo, tests, embedding).
   */
  confirm?: (plans: ResourcePlan[]) => Promise<boolean>;
  /** Where a manifest sets no spec.forProvider.rebootPolicy: this one. */
  rebootPolicy?: 'Never' | 'IfNeeded';
}

/** Write `s` as one or more whole lines. */
export function write(out: NodeJS.WriteStream | undefined, s: string): void {
  (out ?? process.stdout).write(s.endsWith('\n') ? s : `${s}\n`);
}

/** --config FILE, loaded; a file that is unreadable or holds no usable ProviderConfig is a usage error (exit 2). */
export async function loadConfigArg(file: string): Promise<LoadedProviderConfig> {
  try {
    return await loadProviderConfig(file);
  } catch (e) {
    if (e instanceof ConfigError) throw new UsageError(e.message);
    throw e;
  }
}

/** The ProviderConfig among the manifests (read from its file, with the Secrets there), if any. */
export function configAmong(others: ManifestDoc[]): LoadedProviderConfig | undefined {
  const doc = others.find((d) => d.kind === 'ProviderConfig' || d.kind === 'ClusterProviderConfig');
  return doc ? parseProviderConfig(readFileSync(doc.file, 'utf8'), doc.file) : undefined;
}

/** The ProviderConfig: --config, or the one found among the manifests. */
export async function resolveConfig(args: ApplyArgs, others: ManifestDoc[]): Promise<LoadedProviderConfig> {
  if (args.loadedConfig) return args.loadedConfig;
  if (args.config) return loadConfigArg(args.config);
  const config = configAmong(others);
  if (!config) {
    throw new UsageError(
      'no ProviderConfig: pass --config FILE (for the simulator: `provider-proxmox sim --print-config FILE` writes one) or put a ProviderConfig in the manifests',
    );
  }
  return config;
}

export function loadVms(files: string[]): { vms: ProxmoxVM[]; others: ManifestDoc[] } {
  const m = loadManifests(files);
  if (m.problems.length) throw new ManifestError(m.problems);
  return { vms: m.vms.map((x) => x.vm), others: m.others };
}

/** v1 Secrets among the manifests (`namespace/name` -> data), for cloud-init references. */
export function manifestSecrets(others: ManifestDoc[]): Map<string, Record<string, string>> {
  const out = new Map<string, Record<string, string>>();
  for (const d of others) {
    if (d.kind !== 'Secret') continue;
    const md = (d.value.metadata ?? {}) as { name?: string; namespace?: string };
    if (!md.name) continue;
    const data: Record<string, string> = {};
    for (const [k, v] of Object.entries((d.value.data ?? {}) as Record<string, string>))
      data[k] = Buffer.from(String(v), 'base64').toString('utf8');
    for (const [k, v] of Object.entries((d.value.stringData ?? {}) as Record<string, string>)) data[k] = String(v);
    out.set(`${md.namespace ?? 'default'}/${md.name}`, data);
  }
  return out;
}

export function openRuntime(
  config: LoadedProviderConfig,
  state: string | undefined,
  args: ApplyArgs,
  others: ManifestDoc[] = [],
): LocalRuntime {
  if (state) mkdirSync(dirname(resolve(state)), { recursive: true });
  return new LocalRuntime({
    config,
    ...(state ? { stateFile: state } : {}),
    secrets: manifestSecrets(others),
    ...(args.workers ? { workers: args.workers } : {}),
    ...(args.taskPollMs !== undefined ? { taskPollMs: args.taskPollMs } : {}),
    ...(args.agentPollMs !== undefined ? { agentPollMs: args.agentPollMs } : {}),
    ...(args.creationGraceMs !== undefined ? { creationGraceMs: args.creationGraceMs } : {}),
    ...(args.onResult ? { onResult: args.onResult } : {}),
  });
}

/**
 * What the plan sees of a manifest: the state's copy of the resource (uid, VMID, status) with the
 * manifest's spec, labels and annotations, or the manifest alone for a resource the state does not
 * hold (the plan then looks for its VM by marker, as apply does).
 */
export function planTarget(stored: ProxmoxVM | undefined, manifest: ProxmoxVM): ProxmoxVM {
  const m = structuredClone(manifest);
  m.metadata.namespace ??= 'default';
  if (!stored) return { ...m, metadata: { ...m.metadata, uid: m.metadata.uid || '' } };
  return {
    ...stored,
    spec: m.spec,
    metadata: {
      ...stored.metadata,
      labels: { ...m.metadata.labels },
      annotations: { ...stored.metadata.annotations, ...m.metadata.annotations },
    },
  };
}
