/**
 * `apply`, `delete`, `status`, `demo`: the cluster-less commands (the CLI only wires options to
 * these), and where their state file is: one per installation under the state root, so the same
 * manifests applied from any directory share it.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
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
import { externalName, keyOf } from '../engine/resource.ts';
import {
  loadFleetFile,
  manifestKey,
  nextAdmissions,
  PHASE_ANNOTATION,
  planRollout,
  type ResourceState,
  RolloutError,
  type RolloutPlan,
} from '../fleet/phases.ts';
import { clientForSite } from '../proxmox/site.ts';
import { startSimulator } from '../sim/index.ts';
import { providerConfigYaml } from '../sim/provider-config.ts';
import { classify, inventory } from '../vm/inventory.ts';
import { formatProblem, loadManifests, type ManifestDoc, ManifestError } from './manifests.ts';
import { formatLive, formatRows, type LiveView, Progress, STATUS_COLUMNS, table } from './render.ts';
import { LocalRuntime, type Row, rowOf, sortRows } from './runtime.ts';
import {
  defaultStateFile,
  installationsWithState,
  LEGACY_STATE_FILE,
  readStateFile,
  StateFileError,
  stateRoot,
} from './store.ts';

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
function peekInstallation(file: string): string | undefined {
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
async function resolveConfig(args: ApplyArgs, others: ManifestDoc[]): Promise<LoadedProviderConfig> {
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

function loadVms(files: string[]): { vms: ProxmoxVM[]; others: ManifestDoc[] } {
  const m = loadManifests(files);
  if (m.problems.length) throw new ManifestError(m.problems);
  return { vms: m.vms.map((x) => x.vm), others: m.others };
}

/** v1 Secrets among the manifests (`namespace/name` -> data), for cloud-init references. */
function manifestSecrets(others: ManifestDoc[]): Map<string, Record<string, string>> {
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

function openRuntime(
  config: LoadedProviderConfig,
  state: string,
  args: ApplyArgs,
  others: ManifestDoc[] = [],
): LocalRuntime {
  mkdirSync(dirname(resolve(state)), { recursive: true });
  return new LocalRuntime({
    config,
    stateFile: state,
    secrets: manifestSecrets(others),
    ...(args.workers ? { workers: args.workers } : {}),
    ...(args.taskPollMs !== undefined ? { taskPollMs: args.taskPollMs } : {}),
    ...(args.agentPollMs !== undefined ? { agentPollMs: args.agentPollMs } : {}),
    ...(args.creationGraceMs !== undefined ? { creationGraceMs: args.creationGraceMs } : {}),
    ...(args.onResult ? { onResult: args.onResult } : {}),
  });
}

/**
 * Reconcile the manifests phase by phase until every VM is Ready (exit 0) or failed clearly
 * (exit 1), as reconciles of this run observed them: every resource is reconciled on every run, so
 * what changed in Proxmox since the state file was written (a VM stopped, resized or destroyed by
 * hand) is repaired, not taken for Ready.
 */
export async function applyCommand(args: ApplyArgs): Promise<number> {
  const { vms, others } = loadVms(args.files);
  if (!vms.length) throw new UsageError(`no ProxmoxVM in ${args.files.join(', ')}`);
  let plan: RolloutPlan;
  try {
    plan = planRollout(vms, {
      ...(args.fleet ? { fleet: loadFleetFile(args.fleet) } : {}),
      ...(args.maxParallel ? { maxParallel: args.maxParallel } : {}),
    });
  } catch (e) {
    if (e instanceof RolloutError) throw new UsageError(e.message);
    throw e;
  }
  const byKey = new Map(vms.map((v) => [manifestKey(v), v]));
  const keys = [...byKey.keys()];
  // With a fleet file the phase comes from the file: record it where `status` shows it.
  if (args.fleet)
    for (const p of plan.phases)
      for (const k of p.members) {
        const vm = byKey.get(k)!;
        vm.metadata.annotations = { ...vm.metadata.annotations, [PHASE_ANNOTATION]: p.name };
      }
  if (args.dryRun) return dryRun(args, plan, byKey, others);
  const config = await resolveConfig(args, others);
  const rt = openRuntime(config, chooseState(args, config), args, others);
  const progress = new Progress(args.out);
  const abort = new AbortController();
  const onSignal = () => abort.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  if (args.signal?.aborted) abort.abort();
  args.signal?.addEventListener('abort', onSignal, { once: true });
  try {
    // Resume: what an earlier run already started keeps going, with the manifests' current spec.
    rt.applyManifests(keys.filter((k) => rt.store.getSync(k)).map((k) => byKey.get(k)!));
    const started = Date.now();
    let blocked: string | undefined;
    let lastPhaseLine = '';
    const out = args.out ?? process.stdout;
    const tty = Boolean(out.isTTY) && process.env.TERM !== 'dumb';
    const res = await rt.runUntil({
      timeoutMs: args.timeoutMs ?? 30 * 60_000,
      signal: abort.signal,
      check: () => {
        const adm = nextAdmissions(plan, (k) => rt.stateOf(k), { noWait: Boolean(args.noWait) });
        if (adm.admit.length) rt.applyManifests(adm.admit.map((k) => byKey.get(k)!));
        blocked = adm.blocked?.reason;
        args.onTick?.(new Map(keys.map((k) => [k, rt.stateOf(k)])));
        if (!args.quiet) {
          const rows = rt.rows().filter((r) => byKey.has(r.key));
          const ready = keys.filter((k) => rt.stateOf(k) === 'ready').length;
          const phases = plan.phases
            .map((p) => `${p.name}:${p.members.filter((m) => rt.stateOf(m) === 'ready').length}/${p.members.length}`)
            .join(' ');
          // Not a terminal: the per-VM lines, and a line whenever the phases move on (when there are phases).
          const phaseLine = `phases ${phases}${blocked ? ` — waiting: ${blocked}` : ''}`;
          if (!tty && plan.phases.length > 1 && phaseLine !== lastPhaseLine)
            write(args.out, `[${((Date.now() - started) / 1000).toFixed(1).padStart(6)}s] ${phaseLine}`);
          lastPhaseLine = phaseLine;
          progress.update(
            rows,
            `${args.header ?? 'Applying'} ${keys.length} VMs, ${ready} ready (${((Date.now() - started) / 1000).toFixed(0)}s) ${phaseLine}`,
          );
        }
        const states = keys.map((k) => rt.stateOf(k));
        if (states.every((x) => x === 'ready')) return 'ok';
        if (adm.stuck) return 'fail';
        return 'continue';
      },
    });
    progress.done();
    const rows = rt.rows().filter((r) => byKey.has(r.key));
    write(args.out, `\n${formatRows(rows, args.output ?? 'table')}`);
    const notStarted = keys.filter((k) => !rt.store.getSync(k));
    const failed = rows.filter((r) => !(r.ready === 'True' && r.synced === 'True'));
    if (abort.signal.aborted) write(args.out, '\ninterrupted: run apply again to continue where it stopped');
    // Not ready: as this run saw them (a row may still show an earlier run's Ready).
    else if (res.timedOut)
      write(args.out, `\ntimed out with ${keys.filter((k) => rt.stateOf(k) !== 'ready').length} VM(s) not ready`);
    else if (failed.length || notStarted.length) {
      write(args.out, `\n${failed.length} VM(s) failed; the MESSAGE column says why and how to fix it`);
      if (notStarted.length) {
        // Why: the gate of an earlier phase (one line), or a dependency that is not Ready (one line each).
        const name = (k: string) => k.split('/')[1]!;
        const lines = [`${notStarted.length} VM(s) not started: ${blocked ?? 'an earlier phase did not become Ready'}`];
        for (const k of notStarted) {
          const bad = (plan.dependsOn.get(k) ?? []).filter((d) => rt.stateOf(d) !== 'ready');
          if (bad.length)
            lines.push(
              `  ${name(k)} waits for ${bad.map((d) => `${name(d)} (${rt.stateOf(d) === 'absent' ? 'not started' : rt.stateOf(d)})`).join(', ')}`,
            );
        }
        write(args.out, lines.join('\n'));
      }
    } else write(args.out, `\nall ${rows.length} VMs ready`);
    return res.ok ? 0 : 1;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    args.signal?.removeEventListener('abort', onSignal);
    await rt.close();
  }
}

async function dryRun(
  args: ApplyArgs,
  plan: RolloutPlan,
  byKey: Map<string, ProxmoxVM>,
  others: ManifestDoc[],
): Promise<number> {
  // The state file says create or update; it is found as apply finds it (the config, when there is
  // one, names the installation: loading it contacts nothing).
  const config = args.loadedConfig ?? (args.config ? await loadConfigArg(args.config) : configAmong(others));
  const where = stateFileFor({
    state: args.state,
    installation: config ? cliInstallationOf(config) : undefined,
    cwd: args.cwd,
  });
  if ('file' in where && where.note) write(args.err ?? process.stderr, where.note);
  const data = 'file' in where ? readStateFile<ProxmoxVM>(where.file) : undefined;
  const existing = new Set((data?.objects ?? []).map(manifestKey));
  const lines: string[] = ['Dry run: nothing is contacted or changed.', ''];
  for (const p of plan.phases) {
    lines.push(
      `phase ${p.name}${p.maxParallel ? ` (at most ${p.maxParallel} at once)` : ''}: ${p.members.length} VM(s)${plan.phases[0] === p ? '' : args.noWait ? ', at once (--no-wait)' : ', after the previous phase is Ready'}`,
    );
    for (const k of p.members) {
      const fp = byKey.get(k)!.spec.forProvider;
      const deps = plan.dependsOn.get(k);
      lines.push(
        `  ${existing.has(k) ? 'update' : 'create'} ${k}: ${fp.cpu ?? 1} cpu, ${fp.memory ?? '2048Mi'}, disk ${fp.disk ?? '(image size)'} on ${fp.site ?? '(only site)'}/${fp.node ?? '(placed)'}${fp.storage ? `:${fp.storage}` : ''}${deps ? `; after ${deps.join(', ')}` : ''}`,
      );
    }
  }
  write(args.out, lines.join('\n'));
  return 0;
}

/** Delete what the manifests own: stop, destroy, confirm gone. */
export async function deleteCommand(args: ApplyArgs): Promise<number> {
  const { vms, others } = loadVms(args.files);
  const config = await resolveConfig(args, others);
  const rt = openRuntime(config, chooseState(args, config), args, others);
  const progress = new Progress(args.out);
  try {
    const keys = vms.map(manifestKey);
    const known = new Set(keys.filter((k) => rt.store.getSync(k)));
    // Which resources turned out to have a VM (held or adopted by marker), for the summary.
    const hadVm = new Set<string>();
    const unwatch = rt.store.watch((key, _event, obj) => {
      if (obj && externalName(obj)) hadVm.add(key);
    });
    for (const k of known) if (externalName(rt.store.getSync(k)!)) hadVm.add(k);
    rt.markDeleted([...known]);
    const unknown = vms.filter((v) => !known.has(manifestKey(v)));
    if (unknown.length && !args.quiet)
      write(
        args.out,
        `${unknown.length} of these resources are not in the state file: looking for their VMs by ownership marker`,
      );
    // Not in this state (lost, or another state file): Proxmox may still hold their VMs.
    rt.deleteUnknown(unknown);
    const res = await rt.run({
      keys,
      until: 'gone',
      timeoutMs: args.timeoutMs ?? 30 * 60_000,
      tick: () => {
        if (!args.quiet)
          progress.update(
            rt.rows().filter((r) => keys.includes(r.key)),
            `Deleting ${keys.length} VMs`,
          );
      },
    });
    progress.done();
    unwatch();
    const left = rt.rows().filter((r) => keys.includes(r.key));
    const none = keys.length - hadVm.size;
    if (left.length) write(args.out, `\n${table(left)}\n\n${left.length} VM(s) not deleted`);
    else
      write(
        args.out,
        `deleted ${hadVm.size} VM(s)${none ? `; ${none} resource(s) had no VM in Proxmox (nothing to delete)` : ''}`,
      );
    return res.ok ? 0 : 1;
  } finally {
    await rt.close();
  }
}

export interface StatusArgs {
  /** The state file; default: as apply finds it (see stateFileFor). */
  state?: string;
  /** A ProviderConfig: its installation's state file; with `live`, the sites to read. */
  config?: string;
  loadedConfig?: LoadedProviderConfig;
  /** Rebuild the view from Proxmox (the ownership markers of every site), not from the state file. */
  live?: boolean;
  output?: 'table' | 'json' | 'yaml';
  out?: NodeJS.WriteStream;
  /** Notes (the legacy state file place) go here; default stderr. */
  err?: NodeJS.WriteStream;
  /** Where the legacy `./.provider-proxmox/state.json` is looked for; default the current directory. */
  cwd?: string;
  /** Redraw every `intervalMs` until SIGINT/SIGTERM (or `signal`). */
  watch?: boolean;
  intervalMs?: number;
  signal?: AbortSignal;
  /** Read ProxmoxVMs from a cluster (the controller's resources) instead of a state file. */
  kubeconfig?: string;
  /** With kubeconfig: one namespace (default: all). */
  namespace?: string;
}

/** The rows of every ProxmoxVM in a cluster (what `kubectl get proxmoxvm -A` lists). */
async function readKubeStatus(kubeconfig: string, namespace?: string): Promise<{ rows: Row[] } | { missing: string }> {
  const { KubeApi, loadKubeConfig, collectionPath } = await import('../kube/api.ts');
  const api = new KubeApi(loadKubeConfig(kubeconfig));
  try {
    const list = await api.request<{ items: ProxmoxVM[] }>(
      'GET',
      collectionPath('proxmox.sankofa.io', 'v1alpha1', 'proxmoxvms', namespace),
    );
    const now = Date.now();
    return { rows: sortRows(list.items.map((o) => rowOf(o, now))) };
  } finally {
    api.close();
  }
}

/** Where `status` reads: the file (with what to say when it does not exist yet), or why there is none. */
type StatusSource = { file: string; missing: string; note?: string } | { none: string };

/** `status`'s ProviderConfig, when given: it names the installation, so the state file. */
async function statusConfig(args: StatusArgs): Promise<LoadedProviderConfig | undefined> {
  return args.loadedConfig ?? (args.config ? await loadConfigArg(args.config) : undefined);
}

function statusSource(args: StatusArgs, config: LoadedProviderConfig | undefined): StatusSource {
  const installation = config ? cliInstallationOf(config) : undefined;
  const c = stateFileFor({ state: args.state, installation, cwd: args.cwd });
  if ('none' in c) return c;
  const missing = args.state
    ? `no state file at ${c.file}: nothing has been applied from here (use --state FILE)`
    : `no state file at ${c.file}: nothing has been applied${installation ? ` for installation ${installation}` : ''} (status --live --config FILE lists its VMs in Proxmox)`;
  return { file: c.file, missing, ...(c.note ? { note: c.note } : {}) };
}

/**
 * The rows of a state file, or what to say when it does not exist. A file that exists and is not a
 * usable state file throws StateFileError (exit 1, the file named): it is never an empty fleet.
 */
function readStatus(file: string, missing: string): { rows: Row[] } | { missing: string } {
  const data = readStateFile<ProxmoxVM>(file);
  if (!data) return { missing };
  const now = Date.now();
  return { rows: sortRows(data.objects.map((o) => rowOf(o, now))) };
}

/**
 * The table, from the state file (read-only; works while apply runs), or with `live` from Proxmox.
 * With `watch`: until a signal.
 */
export async function statusCommand(args: StatusArgs): Promise<number> {
  if (args.live) return liveStatus(args);
  if (args.watch) return watchStatus(args);
  let r: { rows: Row[] } | { missing: string };
  if (args.kubeconfig) r = await readKubeStatus(args.kubeconfig, args.namespace);
  else {
    const src = statusSource(args, await statusConfig(args));
    if ('file' in src && src.note) write(args.err ?? process.stderr, src.note);
    r = 'none' in src ? { missing: src.none } : readStatus(src.file, src.missing);
  }
  write(args.out, 'missing' in r ? r.missing : formatRows(r.rows, args.output ?? 'table'));
  return 0;
}

/**
 * `status --watch`: the table every `intervalMs` (2 s) until SIGINT/SIGTERM. On a terminal it is
 * redrawn in place (like watch(1)); otherwise it is printed again only when something other than
 * the AGE column changed (JSON: one line per change; YAML: one document per change). A state file
 * that does not exist yet is waited for; one that is not a usable state file stops it (exit 1).
 */
async function watchStatus(args: StatusArgs): Promise<number> {
  const config = args.kubeconfig ? undefined : await statusConfig(args);
  const out = args.out ?? process.stdout;
  const output = args.output ?? 'table';
  const interval = args.intervalMs ?? 2000;
  const tty = Boolean(out.isTTY) && process.env.TERM !== 'dumb' && output === 'table';
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  if (args.signal?.aborted) stop.abort();
  args.signal?.addEventListener('abort', onSignal, { once: true });
  let last: string | undefined;
  let noted = false;
  try {
    while (!stop.signal.aborted) {
      let r: { rows: Row[] } | { missing: string };
      let where = args.kubeconfig ?? '';
      if (args.kubeconfig) {
        try {
          r = await readKubeStatus(args.kubeconfig, args.namespace);
        } catch (e) {
          r = { missing: (e as Error).message };
        }
      } else {
        // Looked up again each time: without --state the file's installation may appear meanwhile.
        const src = statusSource(args, config);
        if ('file' in src && src.note && !noted) write(args.err ?? process.stderr, src.note);
        noted = true;
        where = 'file' in src ? src.file : stateRoot();
        r = 'none' in src ? { missing: src.none } : readStatus(src.file, src.missing);
      }
      // What counts as a change: everything but the age, which changes every second.
      const key = 'missing' in r ? r.missing : JSON.stringify(r.rows.map(({ age: _age, ...rest }) => rest));
      if (tty) {
        const body =
          'missing' in r
            ? r.missing
            : r.rows.length
              ? table(r.rows, STATUS_COLUMNS, out.columns ?? 160)
              : 'No resources.';
        const head = `Every ${interval / 1000}s: ${where}  ${new Date().toISOString().replace(/\.\d+Z$/, 'Z')}  (Ctrl-C to stop)`;
        out.write(`\x1b[H\x1b[2J${head}\n\n${body}\n`);
      } else if (key !== last) {
        if ('missing' in r) out.write(`${r.missing}\n`);
        else if (output === 'json') out.write(`${JSON.stringify(r.rows)}\n`);
        else if (output === 'yaml') out.write(`---\n${formatRows(r.rows, 'yaml')}`);
        else out.write(`${last === undefined ? '' : '\n'}${formatRows(r.rows, 'table')}\n`);
      }
      last = key;
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, interval);
        stop.signal.addEventListener(
          'abort',
          () => {
            clearTimeout(t);
            resolve();
          },
          { once: true },
        );
      });
    }
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    args.signal?.removeEventListener('abort', onSignal);
  }
  return 0;
}

/**
 * `status --live`: what Proxmox holds for this installation, read from the ownership markers of
 * every site (the inventory), with whether the state file knows each VM. Works without a state
 * file: that is what it is for (the state file is only a cache). Exit 1 when a site cannot be read
 * (the list would be incomplete).
 */
async function liveStatus(args: StatusArgs): Promise<number> {
  if (args.watch) throw new UsageError('--live reads Proxmox once; it cannot be combined with --watch');
  if (args.kubeconfig)
    throw new UsageError('--live reads Proxmox through a ProviderConfig: pass --config, not --kubeconfig');
  const config = await statusConfig(args);
  if (!config)
    throw new UsageError('status --live reads Proxmox: pass --config FILE (the ProviderConfig with its Secret)');
  const installation = cliInstallationOf(config);
  const file = chooseState(args, config);
  const data = readStateFile<ProxmoxVM>(file);
  const view = await liveView(config, installation, data ? { file, objects: data.objects } : undefined);
  write(args.out, formatLive(view, args.output ?? 'table'));
  return view.errors.length ? 1 : 0;
}

/**
 * The live view of `installation`: per site, its VMs by marker (`ours`, and the first marker
 * format as `legacy`), the VMs of other installations counted, and copied markers (an operator's
 * clone of one of our VMs: the marker names another VMID). `state`: the state file, to say whether
 * it knows each VM (by uid, or by resource and VMID on the same site).
 */
export async function liveView(
  config: LoadedProviderConfig,
  installation: string,
  state?: { file: string; objects: ProxmoxVM[] },
): Promise<LiveView> {
  const sites = config.config.spec.sites;
  const only = sites.length === 1 ? sites[0]!.name : undefined;
  const objects = state?.objects ?? [];
  const uids = new Set(objects.map((o) => o.metadata.uid));
  const known = (site: string, key: string, vmid: number, uid: string) =>
    uids.has(uid) ||
    objects.some(
      (o) =>
        keyOf(o) === key &&
        externalName(o) === String(vmid) &&
        (o.status?.atProvider?.site ?? o.spec.forProvider.site ?? only) === site,
    );
  const view: LiveView = {
    installation,
    ...(state ? { stateFile: state.file } : {}),
    vms: [],
    elsewhere: [],
    copies: [],
    errors: [],
  };
  const perSite = await Promise.all(
    sites.map(async (s) => {
      const client = clientForSite(config, s.name);
      try {
        return { site: s.name, vms: await inventory(client) };
      } catch (e) {
        return { site: s.name, error: e instanceof Error ? e.message : String(e) };
      } finally {
        await client.close();
      }
    }),
  );
  const elsewhere = new Map<string, number>();
  for (const r of perSite) {
    if ('error' in r) {
      view.errors.push({ site: r.site, message: r.error ?? 'unknown error' });
      continue;
    }
    for (const vm of r.vms) {
      const m = vm.marker;
      if (!m) continue;
      const key = `${m.namespace ?? 'default'}/${m.name}`;
      const cls = classify(vm, installation);
      if (cls === 'ours' || cls === 'legacy')
        view.vms.push({
          name: key,
          site: r.site,
          node: vm.node,
          vmid: vm.vmid,
          state: vm.template ? 'template' : vm.status,
          lock: vm.lock ?? '',
          inState: state ? (known(r.site, key, vm.vmid, m.uid) ? 'yes' : 'no') : '—',
          marker: cls === 'ours' ? 'current' : 'legacy',
          uid: m.uid,
        });
      else if (cls === 'elsewhere') {
        const k = `${m.installation}\u0000${r.site}`;
        elsewhere.set(k, (elsewhere.get(k) ?? 0) + 1);
      } else if (cls === 'copy')
        view.copies.push({ site: r.site, node: vm.node, vmid: vm.vmid, name: key, writtenFor: m.vmid ?? 0 });
    }
  }
  for (const [k, n] of elsewhere) {
    const [inst, site] = k.split('\u0000') as [string, string];
    view.elsewhere.push({ installation: inst, site, vms: n });
  }
  view.vms.sort((a, b) => a.name.localeCompare(b.name) || a.site.localeCompare(b.site) || a.vmid - b.vmid);
  view.elsewhere.sort((a, b) => a.installation.localeCompare(b.installation) || a.site.localeCompare(b.site));
  return view;
}

/** `demo`: the simulator with the seed topology, the seed fleet applied, progress and the final table. */
export async function demoCommand(args: {
  speed: number;
  files: string[];
  out?: NodeJS.WriteStream;
  keep?: boolean;
  profile?: '6.4' | '7.4' | '8.4' | '9.2';
}): Promise<number> {
  const out = args.out ?? process.stdout;
  const sim = await startSimulator({
    speed: args.speed,
    ephemeralPorts: true,
    tokens: ['root@pam!provider=demo-0000-4000-8000-000000000000'],
    ...(args.profile ? { profile: args.profile } : {}),
  });
  const dir = mkdtempSync(join(tmpdir(), 'provider-proxmox-demo-'));
  try {
    out.write(`Simulated Proxmox VE ${sim.profile} (speed x${args.speed}):\n`);
    for (const c of sim.clusters) out.write(`  ${c.name}  ${c.url}  node ${c.nodes.join(',')}\n`);
    const config = parseProviderConfig(providerConfigYaml(sim), join(dir, 'providerconfig.yaml'));
    const code = await applyCommand({
      files: args.files,
      loadedConfig: config,
      state: join(dir, 'state.json'),
      out,
      taskPollMs: Math.max(20, Math.round(2000 / args.speed)),
      agentPollMs: Math.max(20, Math.round(5000 / args.speed)),
      header: 'Deploying the seed fleet:',
    });
    return code;
  } finally {
    await sim.close();
    if (!args.keep) rmSync(dir, { recursive: true, force: true });
  }
}

export function describeError(e: unknown): string {
  if (e instanceof ManifestError) return e.problems.map(formatProblem).join('\n');
  if (e instanceof ConfigError || e instanceof StateFileError) return e.message;
  return e instanceof Error ? e.message : String(e);
}
