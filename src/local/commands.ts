/** `apply`, `delete`, `status`, `demo`: the cluster-less commands (the CLI only wires options to these). */
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import {
  ConfigError,
  type LoadedProviderConfig,
  loadProviderConfig,
  parseProviderConfig,
} from '../api/provider-config.ts';
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
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
import { startSimulator } from '../sim/index.ts';
import { providerConfigYaml } from '../sim/provider-config.ts';
import { formatProblem, loadManifests, type ManifestDoc, ManifestError } from './manifests.ts';
import { formatRows, Progress, STATUS_COLUMNS, table } from './render.ts';
import { LocalRuntime, type Row, rowOf, sortRows } from './runtime.ts';

export const DEFAULT_STATE = '.provider-proxmox/state.json';

export class UsageError extends Error {}

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
  });
}

/** Reconcile the manifests phase by phase until every VM is Ready (exit 0) or failed clearly (exit 1). */
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
  if (args.dryRun) return dryRun(args, plan, byKey);
  const config = await resolveConfig(args, others);
  const rt = openRuntime(config, args.state ?? DEFAULT_STATE, args, others);
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
          const ready = rows.filter((r) => r.ready === 'True' && r.step === 'Ready').length;
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
    else if (res.timedOut) write(args.out, `\ntimed out with ${failed.length + notStarted.length} VM(s) not ready`);
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

function dryRun(args: ApplyArgs, plan: RolloutPlan, byKey: Map<string, ProxmoxVM>): number {
  let existing: Set<string> = new Set();
  try {
    const data = JSON.parse(readFileSync(args.state ?? DEFAULT_STATE, 'utf8')) as { objects?: ProxmoxVM[] };
    existing = new Set((data.objects ?? []).map(manifestKey));
  } catch {
    // no state yet: everything is a create
  }
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
  const rt = openRuntime(config, args.state ?? DEFAULT_STATE, args, others);
  const progress = new Progress(args.out);
  try {
    const keys = vms.map(manifestKey).filter((k) => rt.store.getSync(k));
    if (!keys.length) {
      write(args.out, 'nothing to delete: none of these resources is in the state file');
      return 0;
    }
    rt.markDeleted(keys);
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
    const left = rt.rows().filter((r) => keys.includes(r.key));
    if (left.length) write(args.out, `\n${table(left)}\n\n${left.length} VM(s) not deleted`);
    else write(args.out, `deleted ${keys.length} VM(s)`);
    return res.ok ? 0 : 1;
  } finally {
    await rt.close();
  }
}

export interface StatusArgs {
  state?: string;
  output?: 'table' | 'json' | 'yaml';
  out?: NodeJS.WriteStream;
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

/** The rows of a state file, or why there are none (missing, unreadable). */
function readStatus(file: string): { rows: Row[] } | { missing: string } {
  let data: { objects?: ProxmoxVM[] };
  try {
    data = JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT')
      return { missing: `no state file at ${file}: nothing has been applied from here (use --state FILE)` };
    throw new Error(`${file}: unreadable state file (${(e as Error).message})`);
  }
  const now = Date.now();
  return { rows: sortRows((data.objects ?? []).map((o) => rowOf(o, now))) };
}

/** The table, from the state file (read-only; works while apply runs). With `watch`: until a signal. */
export async function statusCommand(args: StatusArgs): Promise<number> {
  if (args.watch) return watchStatus(args);
  const r = args.kubeconfig
    ? await readKubeStatus(args.kubeconfig, args.namespace)
    : readStatus(args.state ?? DEFAULT_STATE);
  write(args.out, 'missing' in r ? r.missing : formatRows(r.rows, args.output ?? 'table'));
  return 0;
}

/**
 * `status --watch`: the table every `intervalMs` (2 s) until SIGINT/SIGTERM. On a terminal it is
 * redrawn in place (like watch(1)); otherwise it is printed again only when something other than
 * the AGE column changed (JSON: one line per change; YAML: one document per change).
 */
async function watchStatus(args: StatusArgs): Promise<number> {
  const out = args.out ?? process.stdout;
  const file = args.state ?? DEFAULT_STATE;
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
  try {
    while (!stop.signal.aborted) {
      let r: ReturnType<typeof readStatus>;
      try {
        r = args.kubeconfig ? await readKubeStatus(args.kubeconfig, args.namespace) : readStatus(file);
      } catch (e) {
        r = { missing: (e as Error).message };
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
        const head = `Every ${interval / 1000}s: ${file}  ${new Date().toISOString().replace(/\.\d+Z$/, 'Z')}  (Ctrl-C to stop)`;
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
  if (e instanceof ConfigError) return e.message;
  return e instanceof Error ? e.message : String(e);
}
