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
import { keyOf } from '../engine/resource.ts';
import { startSimulator } from '../sim/index.ts';
import { providerConfigYaml } from '../sim/provider-config.ts';
import { formatProblem, loadManifests, ManifestError } from './manifests.ts';
import { formatRows, Progress, table } from './render.ts';
import { LocalRuntime, rowOf } from './runtime.ts';
import { FileStore } from './store.ts';

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
  header?: string;
}

function write(out: NodeJS.WriteStream | undefined, s: string): void {
  (out ?? process.stdout).write(s.endsWith('\n') ? s : `${s}\n`);
}

/** The ProviderConfig: --config, or the one found among the manifests. */
async function resolveConfig(
  args: ApplyArgs,
  others: ReturnType<typeof loadManifests>['others'],
): Promise<LoadedProviderConfig> {
  if (args.loadedConfig) return args.loadedConfig;
  if (args.config) return loadProviderConfig(args.config);
  const doc = others.find((d) => d.kind === 'ProviderConfig' || d.kind === 'ClusterProviderConfig');
  if (!doc) {
    throw new UsageError(
      'no ProviderConfig: pass --config FILE (for the simulator: `provider-proxmox sim --print-config FILE` writes one) or put a ProviderConfig in the manifests',
    );
  }
  return parseProviderConfig(readFileSync(doc.file, 'utf8'), doc.file);
}

function loadVms(files: string[]): { vms: ProxmoxVM[]; others: ReturnType<typeof loadManifests>['others'] } {
  const m = loadManifests(files);
  if (m.problems.length) throw new ManifestError(m.problems);
  return { vms: m.vms.map((x) => x.vm), others: m.others };
}

function openRuntime(config: LoadedProviderConfig, state: string, args: ApplyArgs): LocalRuntime {
  mkdirSync(dirname(resolve(state)), { recursive: true });
  return new LocalRuntime({
    config,
    stateFile: state,
    ...(args.workers ? { workers: args.workers } : {}),
    ...(args.taskPollMs !== undefined ? { taskPollMs: args.taskPollMs } : {}),
  });
}

/** Reconcile the manifests until every VM is Ready (exit 0) or failed clearly (exit 1). */
export async function applyCommand(args: ApplyArgs): Promise<number> {
  const { vms, others } = loadVms(args.files);
  if (!vms.length) throw new UsageError(`no ProxmoxVM in ${args.files.join(', ')}`);
  const config = await resolveConfig(args, others);
  const rt = openRuntime(config, args.state ?? DEFAULT_STATE, args);
  const progress = new Progress(args.out);
  const keys = vms.map((v) =>
    keyOf({ metadata: { name: v.metadata.name, namespace: v.metadata.namespace ?? 'default' } }),
  );
  const abort = new AbortController();
  const onSignal = () => abort.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    rt.applyManifests(vms);
    const started = Date.now();
    const header = () => {
      const rows = rt.rows().filter((r) => keys.includes(r.key));
      const ready = rows.filter((r) => r.ready === 'True' && r.step === 'Ready').length;
      return `${args.header ?? 'Applying'} ${rows.length} VMs: ${ready} ready (${((Date.now() - started) / 1000).toFixed(0)}s)`;
    };
    const res = await rt.run({
      keys,
      until: 'ready',
      timeoutMs: args.timeoutMs ?? 30 * 60_000,
      signal: abort.signal,
      tick: () => {
        if (!args.quiet)
          progress.update(
            rt.rows().filter((r) => keys.includes(r.key)),
            header(),
          );
      },
    });
    progress.done();
    const rows = rt.rows().filter((r) => keys.includes(r.key));
    write(args.out, `\n${formatRows(rows, args.output ?? 'table')}`);
    const failed = rows.filter((r) => !(r.ready === 'True' && r.synced === 'True'));
    if (abort.signal.aborted) write(args.out, '\ninterrupted: run apply again to continue where it stopped');
    else if (res.timedOut) write(args.out, `\ntimed out with ${failed.length} VM(s) not ready`);
    else if (failed.length)
      write(args.out, `\n${failed.length} VM(s) failed; the MESSAGE column says why and how to fix it`);
    else write(args.out, `\nall ${rows.length} VMs ready`);
    return res.ok ? 0 : 1;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await rt.close();
  }
}

/** Delete what the manifests own: stop, destroy, confirm gone. */
export async function deleteCommand(args: ApplyArgs): Promise<number> {
  const { vms, others } = loadVms(args.files);
  const config = await resolveConfig(args, others);
  const rt = openRuntime(config, args.state ?? DEFAULT_STATE, args);
  const progress = new Progress(args.out);
  try {
    const keys = vms
      .map((v) => `${v.metadata.namespace ?? 'default'}/${v.metadata.name}`)
      .filter((k) => rt.store.getSync(k));
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

/** The table, from the state file (read-only; works while apply runs). */
export function statusCommand(args: {
  state?: string;
  output?: 'table' | 'json' | 'yaml';
  out?: NodeJS.WriteStream;
}): number {
  const file = args.state ?? DEFAULT_STATE;
  let data: { objects?: ProxmoxVM[] };
  try {
    data = JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') {
      write(args.out, `no state file at ${file}: nothing has been applied from here (use --state FILE)`);
      return 0;
    }
    throw new Error(`${file}: unreadable state file (${(e as Error).message})`);
  }
  const now = Date.now();
  const rows = (data.objects ?? [])
    .map((o) => rowOf(o, now))
    .sort((a, b) => (a.phase ?? '').localeCompare(b.phase ?? '') || a.key.localeCompare(b.key));
  write(args.out, formatRows(rows, args.output ?? 'table'));
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

export { FileStore };
