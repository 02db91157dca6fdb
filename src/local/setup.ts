/**
 * What the cluster-less commands that run the engine start from: their arguments (ApplyArgs),
 * the ProxmoxVMs and Secrets of the manifests, and the LocalRuntime over them. Finding the
 * ProviderConfig and the state file is src/workspace/arguments.ts (plan and gc find them the same
 * way without a runtime); this file is what needs the runtime.
 */
import { existsSync, mkdirSync, rmdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import type { LoadedProviderConfig } from '../api/provider-config-load.ts';
import type { ProxmoxImage } from '../api/proxmoximage.ts';
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { internStrings } from '../engine/intern.ts';
import type { ReconcileResult } from '../engine/reconciler.ts';
import type { ResourcePlan } from '../vm/plan.ts';
import { configAmong, loadConfigArg, UsageError } from '../workspace/arguments.ts';
import { type LoadedManifests, loadManifests, type ManifestDoc, ManifestError } from '../workspace/manifests.ts';
import { manifestKey, type ResourceState } from '../workspace/phases.ts';
import { LocalRuntime } from './runtime.ts';

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
  /** How often a Ready VM's config is read in full for drift (`--drift-interval`; default 5 min). */
  driftIntervalMs?: number;
  header?: string;
  /** Fleet file with phases (overrides the phase annotations). */
  fleet?: string;
  /** Do not wait for a phase to be Ready before starting the next. */
  noWait?: boolean;
  /** At most this many VMs of a phase in progress at once. */
  maxParallel?: number;
  /** Stop waiting for a VM whose node has been offline this long (`--offline-grace`; default: for the whole run). */
  offlineGraceMs?: number;
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

/**
 * The manifests of `files`, read once; ManifestError with every problem there is. An apply holds
 * its VMs' manifests to the end: their strings are interned, so that 10,000 VMs hold one copy of
 * each repeated value and none of the files' texts (which the parser's substrings would pin).
 */
export function loadVms(files: string[]): {
  vms: ProxmoxVM[];
  others: ManifestDoc[];
  images: LoadedManifests['images'];
  templates: LoadedManifests['templates'];
  warnings: LoadedManifests['warnings'];
} {
  const m = loadManifests(files);
  if (m.problems.length) throw new ManifestError(m.problems);
  return {
    vms: m.vms.map((x) => internStrings(x.vm)),
    others: m.others,
    images: m.images,
    templates: m.templates,
    warnings: m.warnings,
  };
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

/**
 * The directories of `state` that do not exist yet, deepest first: openRuntime makes them (the
 * state's lock file goes there), and a run that stops before it writes anything (a confirmation
 * refused or declined) removes them again with removeEmptyDirs, leaving no empty
 * `<state root>/<installation>/` behind.
 */
export function missingDirs(state: string | undefined): string[] {
  const out: string[] = [];
  if (!state) return out;
  for (let d = dirname(resolve(state)); !existsSync(d); d = dirname(d)) {
    out.push(d);
    if (dirname(d) === d) break;
  }
  return out;
}

/** Remove `dirs` (deepest first) while they are empty: a state written meanwhile keeps its own. */
export function removeEmptyDirs(dirs: readonly string[]): void {
  for (const d of dirs) {
    try {
      rmdirSync(d);
    } catch {
      return; // not empty (a state was written), or not ours to remove: leave it and its parents
    }
  }
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
    // What apply waits for is every VM Ready once; it does not watch them after (the controller does).
    pollReady: false,
    ...(args.taskPollMs !== undefined ? { taskPollMs: args.taskPollMs } : {}),
    ...(args.agentPollMs !== undefined ? { agentPollMs: args.agentPollMs } : {}),
    ...(args.driftIntervalMs !== undefined ? { driftIntervalMs: args.driftIntervalMs } : {}),
    ...(args.creationGraceMs !== undefined ? { creationGraceMs: args.creationGraceMs } : {}),
    ...(args.offlineGraceMs !== undefined ? { offlineGraceMs: args.offlineGraceMs } : {}),
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

/**
 * What apply would do to each manifest, read from Proxmox and changing nothing (`plan`,
 * `apply --dry-run`): each manifest planned against the state file's copy of its resource
 * (`stored`, as read from the state file), by a runtime without a state file of its own.
 * `args` sets the runtime's options (workers, poll intervals) as apply would.
 */
export async function planChanges(
  config: LoadedProviderConfig,
  manifests: ProxmoxVM[],
  stored: ProxmoxVM[],
  others: ManifestDoc[] = [],
  images: readonly ProxmoxImage[] = [],
  args: ApplyArgs = { files: [] },
): Promise<ResourcePlan[]> {
  const byKey = new Map(stored.map((o) => [manifestKey(o), o]));
  const rt = openRuntime(config, undefined, args, others);
  try {
    return await rt.plan(
      manifests.map((m) => planTarget(byKey.get(manifestKey(m)), m)),
      { images },
    );
  } finally {
    await rt.close();
  }
}
