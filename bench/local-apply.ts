/**
 * bench/local-apply: what a real `apply` of N VMs costs the local runtime, end to end.
 *
 * bench/state-store.ts replays the store's traffic alone; this runs the project's `apply`
 * (applyCommand, as the CLI calls it, with its line progress to a counting sink) of N generated
 * ProxmoxVM manifests against the in-process simulator (speed 1000 unless --speed), so that every
 * cost outside the store is in it too: the plan read from Proxmox, the runtime's 200 ms check of
 * every resource, the engine's per-resource state, VMID choice, the progress lines and the state
 * database. The simulator runs in this (the parent) process with a generated topology (--sites x
 * --nodes nodes, each large enough for every VM, with a DHCP range for every guest), and each
 * apply runs in a child process of its own, so that its peak RSS, CPU and bytes written are the
 * apply's alone. Then, in a second child, the next apply of the same manifests on that state (every
 * VM exists: the plan finds nothing to do, one reconcile each).
 *
 * Prints one JSON object: per N the wall time of the apply, CPU, bytes written (Linux
 * /proc/self/io wchar: every write syscall of the child: state database, WAL, checkpoints and the
 * progress output), the progress output's bytes, peak RSS, the state's size; the same for the next
 * apply; then growth exponents between consecutive sizes (1 is O(N), 2 is O(N^2)). A run over its
 * budget is stopped and reported with finished: false. Timings on a shared machine are noisy.
 *
 * Usage: node bench/local-apply.ts [--n 300,1000,10000] [--budget-s 600] [--sites 2] [--nodes 4]
 *                                  [--speed 1000] [--task-poll-ms N] [--no-next]
 *                                  [--child-node-options '--cpu-prof --cpu-prof-dir=DIR']
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { parseArgs } from 'node:util';
import { parseProviderConfig } from '../src/api/provider-config.ts';
import { applyCommand } from '../src/local/apply.ts';
import type { startSimulator } from '../src/sim/index.ts';
import { providerConfigYaml } from '../src/sim/provider-config.ts';
import { smallVmYaml, startFleetSimulator } from './fleet.ts';
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
    child: { type: 'boolean', default: false },
    dir: { type: 'string' },
  },
});

/** One apply in this process (the child): the manifests of `dir`, its state, its ProviderConfig. */
async function child(dir: string, budgetMs: number, taskPollMs: number | undefined): Promise<object> {
  let outBytes = 0;
  let outLines = 0;
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      outBytes += chunk.length;
      for (const b of chunk) if (b === 10) outLines++;
      cb();
    },
  }) as unknown as NodeJS.WriteStream;
  const stateDir = join(dir, 'state');
  const config = parseProviderConfig(readFileSync(join(dir, 'providerconfig.yaml'), 'utf8'), 'providerconfig.yaml');
  const w0 = wchar();
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const code = await applyCommand({
    files: [join(dir, 'manifests')],
    loadedConfig: config,
    state: join(stateDir, 'state.db'),
    out: sink,
    err: sink,
    timeoutMs: budgetMs,
    // What `apply --task-poll` passes (src/cli/local.ts pollArgs): the agent poll at 2.5 x.
    ...(taskPollMs ? { taskPollMs, agentPollMs: Math.round(taskPollMs * 2.5) } : {}),
  });
  const wallMs = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  const w1 = wchar();
  const usage = process.resourceUsage();
  return {
    exit: code,
    wallMs: Math.round(wallMs),
    cpuMs: Math.round((cpu.user + cpu.system) / 1000),
    bytesWritten: w0 !== undefined && w1 !== undefined ? w1 - w0 : null,
    outputBytes: outBytes,
    outputLines: outLines,
    stateBytes: dirBytes(stateDir),
    rssPeakMB: Math.round(usage.maxRSS / 1024),
    heapUsedMB: Math.round(process.memoryUsage().heapUsed / 2 ** 20),
  };
}

/** Run a child and parse its last line; the parent's event loop keeps serving the simulator meanwhile. */
function runChild(args: string[]): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const nodeOptions = values['child-node-options'].split(' ').filter(Boolean);
    const c = spawn(process.execPath, [...nodeOptions, new URL(import.meta.url).pathname, '--child', ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
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
 * where it runs) and the API requests by route, the most frequent first.
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
  return { ...r, simCpuMs: Math.round((cpu.user + cpu.system) / 1000), simRequests: requests, simTopRoutes: top };
}

async function measure(n: number): Promise<Record<string, unknown>> {
  const sites = Number(values.sites);
  const nodes = Number(values.nodes);
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

if (values.child) {
  const poll = values['task-poll-ms'] ? Number(values['task-poll-ms']) : undefined;
  const out = await child(values.dir!, Number(values['budget-s']) * 1000, poll);
  process.stdout.write(`${JSON.stringify(out)}\n`);
  // The simulator's connections may keep the loop alive a little; the result is out.
  process.exit(0);
} else {
  const results: Array<Record<string, unknown>> = [];
  for (const n of values.n.split(',').map(Number)) {
    const r = await measure(n);
    results.push(r);
    process.stderr.write(`${JSON.stringify(r)}\n`);
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
