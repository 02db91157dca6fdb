/**
 * bench/local-apply: what a real `apply` of N VMs costs the local runtime, end to end.
 *
 * bench/state-store.ts replays the store's traffic alone; this runs the project's `apply` of N
 * generated ProxmoxVM manifests, as an installed `provider-proxmox apply` runs it (the bundle of
 * scripts/build.ts, built afresh, through its bin; `--cli sources`: applyCommand from src/), its
 * output counted, not shown, against the in-process simulator (speed 1000 unless --speed), so that every
 * cost outside the store is in it too: the plan read from Proxmox, the runtime's 200 ms check of
 * every resource, the engine's per-resource state, VMID choice, the progress lines and the state
 * database. The simulator runs in this (the parent) process with a generated topology (--sites x
 * --nodes nodes, each large enough for every VM, with a DHCP range for every guest), and each
 * apply runs in a child process of its own, so that its peak RSS, CPU and bytes written are the
 * apply's alone. Then, in a second child, the next apply of the same manifests on that state (every
 * VM exists: the plan finds nothing to do, one reconcile each).
 *
 * The child loads what the CLI loads (not the simulator's code, and with the bundle none of the
 * sources) and runs with Node's compile cache, as the installed CLI does (see COMPILE_CACHE). The
 * 250 MB target of issue 16 is the installed CLI's: the sources cost about 20 MiB more at the peak
 * (Node's type stripping), which an installed CLI never pays.
 *
 * Prints one JSON object: per N the wall time of the apply, CPU, bytes written (Linux
 * /proc/self/io wchar: every write syscall of the child: state database, WAL, checkpoints and the
 * progress output), the progress output's bytes, peak RSS, the state's size, what the memory was
 * made of over time (see memoryTimeline); the same for the next apply; then growth exponents
 * between consecutive sizes (1 is O(N), 2 is O(N^2)). A run over its budget is stopped and
 * reported with finished: false. Timings on a shared machine are noisy.
 *
 * Usage: node bench/local-apply.ts [--n 300,1000,10000] [--budget-s 600] [--sites 2] [--nodes 4]
 *                                  [--speed 1000] [--task-poll-ms N] [--no-next] [--cli bundle|sources]
 *                                  [--child-node-options='--cpu-prof --cpu-prof-dir=DIR']
 *                                  [--heap-snapshot-dir DIR [--heap-snapshot-mb 200]]
 *                                  [--alloc-prof FILE.heapprofile]
 * (--child-node-options with `=`: its value starts with a dash.) The child runs with V8's heap and
 * glibc's malloc as the CLI's apply does: the young generation bounded and MALLOC_ARENA_MAX as
 * src/cli/young-generation.ts restarts it (unless --child-node-options sets a semi-space size of
 * its own, as the CLI leaves one alone), and heap-growing-percent 20 (src/cli/program.ts, before a
 * command runs: the bundle's CLI sets it itself).
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { parseArgs } from 'node:util';
import { setFlagsFromString, writeHeapSnapshot } from 'node:v8';
import { boundedNodeOptions, boundedRestartEnv } from '../src/cli/young-generation.ts';
import type { startSimulator } from '../src/sim/index.ts';
import { dirBytes, wchar } from './proc-io.ts';

const { values } = parseArgs({
  options: {
    n: { type: 'string', default: '300,1000,10000' },
    'budget-s': { type: 'string', default: '600' },
    sites: { type: 'string', default: '2' },
    nodes: { type: 'string', default: '4' },
    speed: { type: 'string', default: '1000' },
    /** The engine's task poll (`apply --task-poll`); default the CLI's. */
    'task-poll-ms': { type: 'string' },
    'no-next': { type: 'boolean', default: false },
    /** Node options for the apply's child, e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof` (space-separated). */
    'child-node-options': { type: 'string', default: '' },
    /** Write a heap snapshot (into this directory) the first time the apply's heap passes --heap-snapshot-mb. */
    'heap-snapshot-dir': { type: 'string' },
    'heap-snapshot-mb': { type: 'string', default: '200' },
    /**
     * Write a sampling profile of every allocation of the apply, the garbage included (what drives
     * the heap's growth, which a heap snapshot of live objects does not show), to this file
     * (.heapprofile: Chrome DevTools' Memory tab).
     */
    'alloc-prof': { type: 'string' },
    /**
     * Which CLI applies: `bundle` (default), the bundle of scripts/build.ts built afresh into a
     * package as `npm pack` ships it, run through its bin as an installed `provider-proxmox apply`;
     * or `sources`, applyCommand from src/ in the child (the sources pay Node's type stripping, about
     * 19 MiB more at the peak, which the installed CLI never does).
     */
    cli: { type: 'string', default: 'bundle' },
    /** Internal: the bundle's bin, for a child that runs it. */
    'bundle-bin': { type: 'string' },
    child: { type: 'boolean', default: false },
    warm: { type: 'boolean', default: false },
    dir: { type: 'string' },
  },
});

/** What one apply wrote to its output (stdout and stderr together). */
interface Output {
  bytes: number;
  lines: number;
}

function counted(out: Output, chunk: Uint8Array | string): void {
  const b = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
  out.bytes += b.length;
  for (const x of b) if (x === 10) out.lines++;
}

/**
 * One apply in this process (the child), measured: the manifests of `dir`, its state, its
 * ProviderConfig; `apply` runs it (applyCommand from the sources, or the bundle's CLI) and gives
 * its exit code.
 */
async function child(dir: string, apply: (out: Output, stateDb: string) => Promise<number>): Promise<object> {
  const output: Output = { bytes: 0, lines: 0 };
  const stateDir = join(dir, 'state');
  const w0 = wchar();
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const memory = memoryTimeline(t0);
  const allocations = values['alloc-prof'] ? await allocationProfile() : undefined;
  const code = await apply(output, join(stateDir, 'state.db'));
  const wallMs = performance.now() - t0;
  const mem = memory.stop();
  if (allocations) writeFileSync(values['alloc-prof']!, JSON.stringify(await allocations.stop()));
  const cpu = process.cpuUsage(cpu0);
  const w1 = wchar();
  const usage = process.resourceUsage();
  return {
    exit: code,
    wallMs: Math.round(wallMs),
    cpuMs: Math.round((cpu.user + cpu.system) / 1000),
    bytesWritten: w0 !== undefined && w1 !== undefined ? w1 - w0 : null,
    outputBytes: output.bytes,
    outputLines: output.lines,
    stateBytes: dirBytes(stateDir),
    rssPeakMB: Math.round(usage.maxRSS / 1024),
    heapUsedMB: Math.round(process.memoryUsage().heapUsed / 2 ** 20),
    ...mem,
  };
}

/** applyCommand from the sources, its output to a counting sink. */
function sourcesApply(dir: string, budgetMs: number, taskPollMs: number | undefined) {
  return async (output: Output, stateDb: string): Promise<number> => {
    // What the CLI sets before a command runs (src/cli/program.ts sizeHeapForLongRuns).
    setFlagsFromString('--heap-growing-percent=20');
    const sink = new Writable({
      write(chunk: Buffer, _enc, cb) {
        counted(output, chunk);
        cb();
      },
    }) as unknown as NodeJS.WriteStream;
    // Loaded here, not at the top: a child that runs the bundle loads none of the sources.
    const { parseProviderConfig } = await import('../src/api/provider-config-load.ts');
    const { applyCommand } = await import('../src/local/apply.ts');
    const config = parseProviderConfig(readFileSync(join(dir, 'providerconfig.yaml'), 'utf8'), 'providerconfig.yaml');
    return applyCommand({
      files: [join(dir, 'manifests')],
      loadedConfig: config,
      state: stateDb,
      out: sink,
      err: sink,
      timeoutMs: budgetMs,
      // What `apply --task-poll` passes (src/cli/local.ts pollArgs): the agent poll at 2.5 x.
      ...(taskPollMs ? { taskPollMs, agentPollMs: Math.round(taskPollMs * 2.5) } : {}),
    });
  };
}

/**
 * The installed CLI: the bundle's bin with `apply`'s arguments, in this process (so that what is
 * measured here is its CPU, memory and writes), its stdout and stderr counted, not shown. It sizes
 * its heap itself; it does not restart, as the child runs with a semi-space size already.
 */
function bundleApply(bin: string, dir: string, budgetMs: number, taskPollMs: number | undefined) {
  return async (output: Output, stateDb: string): Promise<number> => {
    const streams = [process.stdout, process.stderr];
    const writes = streams.map((s) => s.write);
    for (const s of streams)
      s.write = ((chunk: Uint8Array | string, ...rest: unknown[]) => {
        counted(output, chunk);
        const cb = rest.find((x): x is () => void => typeof x === 'function');
        cb?.();
        return true;
      }) as typeof s.write;
    process.argv = [
      process.execPath,
      bin,
      'apply',
      '-f',
      join(dir, 'manifests'),
      '--config',
      join(dir, 'providerconfig.yaml'),
      '--state',
      stateDb,
      '--yes',
      '--timeout',
      `${Math.ceil(budgetMs / 1000)}s`,
      ...(taskPollMs ? ['--task-poll', `${taskPollMs}ms`] : []),
    ];
    try {
      await import(bin);
    } finally {
      streams.forEach((s, i) => {
        s.write = writes[i]!;
      });
    }
    const code = Number(process.exitCode ?? 0);
    process.exitCode = 0;
    return code;
  };
}

/** V8's sampling heap profiler with the objects collected since included: where the allocations come from. */
async function allocationProfile(): Promise<{ stop(): Promise<unknown> }> {
  const session = new Session();
  session.connect();
  await session.post('HeapProfiler.startSampling', {
    samplingInterval: 64 * 1024,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true,
  });
  return {
    async stop() {
      const { profile } = await session.post('HeapProfiler.stopSampling');
      session.disconnect();
      return profile;
    },
  };
}

/**
 * What the apply's memory is made of over time (sampled every 250 ms): the peak of each part
 * (V8's heap used and reserved, memory outside the heap: SQLite's, Buffers) and 20 samples spread
 * over the run, so that a peak can be told from a steady growth, and the heap from the rest.
 * With --heap-snapshot-dir, a heap snapshot the first time the heap used passes
 * --heap-snapshot-mb (what holds the memory, for Chrome DevTools' Memory tab).
 */
function memoryTimeline(t0: number): { stop(): Record<string, unknown> } {
  const mb = (b: number) => Math.round(b / 2 ** 20);
  const samples: Array<{ s: number; rss: number; heapUsed: number; heapTotal: number; external: number }> = [];
  const peak = { rss: 0, heapUsed: 0, heapTotal: 0, external: 0 };
  const snapshotDir = values['heap-snapshot-dir'];
  let snapshot: string | undefined;
  const sample = () => {
    const m = process.memoryUsage();
    const x = {
      s: Math.round((performance.now() - t0) / 1000),
      rss: mb(m.rss),
      heapUsed: mb(m.heapUsed),
      heapTotal: mb(m.heapTotal),
      external: mb(m.external),
    };
    samples.push(x);
    for (const k of ['rss', 'heapUsed', 'heapTotal', 'external'] as const) peak[k] = Math.max(peak[k], x[k]);
    if (snapshotDir && !snapshot && x.heapUsed >= Number(values['heap-snapshot-mb']))
      snapshot = writeHeapSnapshot(join(snapshotDir, `apply-${x.heapUsed}MB.heapsnapshot`));
  };
  const timer = setInterval(sample, 250);
  return {
    stop() {
      clearInterval(timer);
      sample();
      const step = Math.max(1, Math.ceil(samples.length / 20));
      return {
        memoryPeakMB: peak,
        memoryTimelineMB: samples.filter((_, i) => i % step === 0 || i === samples.length - 1),
        ...(snapshot ? { heapSnapshot: snapshot } : {}),
      };
    },
  };
}

/**
 * The children run with Node's compile cache, as the installed CLI does (bin/provider-proxmox.js
 * turns it on; the built bundle needs no type stripping at all): without it every child strips the
 * types of every source file again, and loads the stripper, which was 30 MB of its RSS and
 * seconds of its CPU that no operator's second apply pays. warmCompileCache fills it first.
 */
const COMPILE_CACHE = join(tmpdir(), 'provider-proxmox-bench-compile-cache');

/** Load the child's modules once (with --child --warm), so that every measured child finds them compiled. */
async function warmCompileCache(): Promise<void> {
  await runChild(['--warm']);
}

/** Run a child and parse its last line; the parent's event loop keeps serving the simulator meanwhile. */
function runChild(args: string[]): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const nodeOptions = values['child-node-options'].split(' ').filter(Boolean);
    // What the CLI's apply restarts with, unless the options name a semi-space size of their own.
    const bounded = boundedNodeOptions(nodeOptions, undefined);
    const c = spawn(
      process.execPath,
      [...(bounded ?? nodeOptions), new URL(import.meta.url).pathname, '--child', ...args],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
        env: { ...(bounded ? boundedRestartEnv(process.env) : process.env), NODE_COMPILE_CACHE: COMPILE_CACHE },
      },
    );
    let out = '';
    let err = '';
    c.stdout.setEncoding('utf8').on('data', (d: string) => {
      out += d;
    });
    c.stderr.setEncoding('utf8').on('data', (d: string) => {
      err += d;
    });
    c.on('error', reject);
    c.on('close', (code) => {
      if (code !== 0) return reject(new Error(`child ${args.join(' ')} exited ${code}: ${err || out}`));
      resolve(JSON.parse(out.trim().split('\n').at(-1)!) as Record<string, unknown>);
    });
  });
}

/**
 * Run `f` (a child's apply) and add what the simulator served meanwhile: its CPU (this process's,
 * where it runs), the API requests by route, the most frequent first, and the bulk lists.
 */
async function withSimulator(
  sim: Awaited<ReturnType<typeof startSimulator>>,
  f: () => Promise<Record<string, unknown>>,
): Promise<Record<string, unknown>> {
  for (const c of sim.clusters) c.faults.counters.clear();
  const cpu0 = process.cpuUsage();
  const r = await f();
  const cpu = process.cpuUsage(cpu0);
  const byRoute = new Map<string, number>();
  for (const c of sim.clusters)
    for (const [route, k] of c.faults.counters) byRoute.set(route, (byRoute.get(route) ?? 0) + k);
  const requests = [...byRoute.values()].reduce((a, b) => a + b, 0);
  const top = Object.fromEntries([...byRoute].sort((a, b) => b[1] - a[1]).slice(0, 12));
  return {
    ...r,
    simCpuMs: Math.round((cpu.user + cpu.system) / 1000),
    simRequests: requests,
    // The bulk lists apart: each is O(VMs) on both sides, so their number per create is what makes
    // a rollout quadratic or not.
    simBulkLists: byRoute.get('GET /cluster/resources') ?? 0,
    simTopRoutes: top,
  };
}

/** N VMs applied by a child (and the next apply, by another); `bundleBin`: the bundle's bin the children run (--cli bundle). */
async function measure(n: number, bundleBin: string | undefined): Promise<Record<string, unknown>> {
  const sites = Number(values.sites);
  const nodes = Number(values.nodes);
  // Here, not at the top: the child (the apply measured) must not load the simulator's code, which
  // the CLI never loads either (it was 45 MB of the child's RSS).
  const { smallVmYaml, startFleetSimulator } = await import('./fleet.ts');
  const { providerConfigYaml } = await import('../src/sim/provider-config.ts');
  const sim = await startFleetSimulator(sites, nodes, Number(values.speed), 18006);
  const dir = mkdtempSync(join(tmpdir(), 'pp-bench-local-apply-'));
  try {
    writeFileSync(join(dir, 'providerconfig.yaml'), providerConfigYaml(sim, { ssh: false }));
    mkdirSync(join(dir, 'manifests'));
    mkdirSync(join(dir, 'state'));
    // 100 VMs per file, as an operator's fleet directory holds a few files of many documents each.
    for (let f = 0; f * 100 < n; f++) {
      const docs: string[] = [];
      for (let i = f * 100; i < Math.min(n, (f + 1) * 100); i++) docs.push(smallVmYaml(i, sites, nodes));
      writeFileSync(join(dir, 'manifests', `vms-${String(f).padStart(4, '0')}.yaml`), docs.join('---\n'));
    }
    const args = ['--dir', dir, '--budget-s', String(values['budget-s'])];
    if (bundleBin) args.push('--bundle-bin', bundleBin);
    if (values['alloc-prof']) args.push('--alloc-prof', values['alloc-prof']);
    if (values['heap-snapshot-dir'])
      args.push('--heap-snapshot-dir', values['heap-snapshot-dir'], '--heap-snapshot-mb', values['heap-snapshot-mb']);
    if (values['task-poll-ms']) args.push('--task-poll-ms', values['task-poll-ms']);
    const first = await withSimulator(sim, () => runChild(args));
    const vmsInSim = sim.clusters.reduce(
      (k, c) => k + [...c.state.vms.values()].filter((v) => !v.config.template).length,
      0,
    );
    const next = values['no-next'] || first.exit !== 0 ? null : await withSimulator(sim, () => runChild(args));
    return { n, vmsInSim, finished: first.exit === 0 && vmsInSim === n, apply: first, nextApply: next };
  } finally {
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (values.child && values.warm) {
  process.stdout.write('{}\n');
  process.exit(0);
} else if (values.child) {
  const poll = values['task-poll-ms'] ? Number(values['task-poll-ms']) : undefined;
  const budgetMs = Number(values['budget-s']) * 1000;
  const bin = values['bundle-bin'];
  const out = await child(
    values.dir!,
    bin ? bundleApply(bin, values.dir!, budgetMs, poll) : sourcesApply(values.dir!, budgetMs, poll),
  );
  process.stdout.write(`${JSON.stringify(out)}\n`);
  // The simulator's connections may keep the loop alive a little; the result is out.
  process.exit(0);
} else {
  const results: Array<Record<string, unknown>> = [];
  if (values.cli !== 'bundle' && values.cli !== 'sources') throw new Error(`--cli ${values.cli}: bundle or sources`);
  const packages = mkdtempSync(join(tmpdir(), 'pp-bench-local-apply-package-'));
  const { bundlePackage } = await import('./package-dir.ts');
  const bundleBin = values.cli === 'bundle' ? (await bundlePackage(packages, 'package')).bin : undefined;
  try {
    await warmCompileCache();
    for (const n of values.n.split(',').map(Number)) {
      const r = await measure(n, bundleBin);
      results.push(r);
      process.stderr.write(`${JSON.stringify(r)}\n`);
    }
  } finally {
    rmSync(packages, { recursive: true, force: true });
  }
  type Run = { n: number; finished: boolean; apply: Record<string, number> };
  const runs = results as unknown as Run[];
  const exponent = (metric: string) =>
    runs.slice(1).flatMap((r, i) => {
      const p = runs[i]!;
      const a = p.apply[metric];
      const b = r.apply[metric];
      return r.finished && p.finished && a && b
        ? [{ from: p.n, to: r.n, exponent: +(Math.log(b / a) / Math.log(r.n / p.n)).toFixed(2) }]
        : [];
    });
  console.log(
    JSON.stringify(
      {
        bench: 'local-apply',
        node: process.version,
        cli: values.cli,
        speed: Number(values.speed),
        taskPollMs: values['task-poll-ms'] ? Number(values['task-poll-ms']) : 'default',
        topology: { sites: Number(values.sites), nodesPerSite: Number(values.nodes) },
        results,
        growth: { wallMs: exponent('wallMs'), cpuMs: exponent('cpuMs'), bytesWritten: exponent('bytesWritten') },
      },
      null,
      2,
    ),
  );
}
