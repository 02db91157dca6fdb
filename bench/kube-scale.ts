/**
 * bench/kube-scale: the controller with N ProxmoxVMs on a real kube-apiserver (the test harness,
 * test/kube/harness.ts) and the in-process simulator.
 *
 * The N resources are Observe-only (`managementPolicies: [Observe]`, `crossplane.io/external-name`
 * set) against N running VMs seeded straight into the simulator's two sites (no create tasks:
 * the subject is the Kubernetes side). The controller runs as the tests run it (the arguments of
 * test/kube/support.ts spawnController: its own process, deploy/'s ServiceAccount token, leader
 * election on, debug logs to a file), with a longer wait for /readyz: caches of 10,000 objects
 * take longer to fill than the tests' 30 s. Measured:
 *   - controller peak RSS (VmHWM) and RSS samples;
 *   - start-up: from spawning the controller to every resource observed (Synced True with the VMID
 *     in status.atProvider.vmId);
 *   - change-to-status latency, p50/p99 over `--changes` changes: each change is the annotation
 *     `crossplane.io/reconcile-requested-at`, done when status.lastHandledReconcileAt echoes it
 *     (seen by the bench's own watch);
 *   - steady state over `--steady-s`: apiserver requests a minute by verb and resource (the
 *     apiserver's own apiserver_request_total, the bench's scrapes left out), the controller's own
 *     count (provider_proxmox_kube_requests_total) and its Proxmox VE requests a minute;
 *   - status writes that changed nothing: status PUTs the apiserver answered minus the status
 *     changes the bench's watch saw (a PUT that changes nothing makes no watch event).
 *   - the controller's memory at the end (heap used, external, array buffers: prom-client's
 *     default metrics), beside its RSS.
 * Prints one JSON object.
 *
 * Usage: node bench/kube-scale.ts [N=10000] [--changes 100] [--steady-s 120] [--settle-s 30]
 *        [--speed 1000] [--workers 8] [--poll 1m] [--admin] [--keep DIR] [--cpu-prof]
 *        [--heap-snapshot] [--node-flag F]... [--no-default-node-flags] [-- extra controller flags]
 * `--keep DIR` writes the controller's log (and profiles) to DIR and leaves it there; `--cpu-prof`
 * profiles the controller (written when it stops: it is stopped with SIGTERM, as a Pod is);
 * `--heap-snapshot` takes a heap snapshot of it at the end of the steady window (SIGUSR2). The
 * controller's Node runs with the V8 flags the tests and the image give it (support.ts
 * CONTROLLER_NODE_FLAGS) unless `--no-default-node-flags`, plus any `--node-flag`.
 */
import { spawn } from 'node:child_process';
import { createWriteStream, readdirSync, readFileSync, statSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { KubeApi, loadKubeConfig } from '../src/kube/api.ts';
import { Informer, type KubeObject } from '../src/kube/informer.ts';
import { startSimulator } from '../src/sim/index.ts';
import { startKube } from '../test/kube/harness.ts';
import {
  API,
  applyCrds,
  CONTROLLER_NODE_FLAGS,
  controllerArgv,
  createProviderConfig,
  freePort,
  httpGet,
  installRbac,
  kreq,
  NODE,
  ROOT,
  serviceAccountKubeconfig,
  vmPath,
} from '../test/kube/support.ts';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  allowNegative: true,
  options: {
    changes: { type: 'string', default: '100' },
    'steady-s': { type: 'string', default: '120' },
    'settle-s': { type: 'string', default: '30' },
    speed: { type: 'string', default: '1000' },
    workers: { type: 'string', default: '8' },
    poll: { type: 'string', default: '1m' },
    admin: { type: 'boolean', default: false },
    keep: { type: 'string' },
    'cpu-prof': { type: 'boolean', default: false },
    'heap-snapshot': { type: 'boolean', default: false },
    'node-flag': { type: 'string', multiple: true, default: [] },
    'default-node-flags': { type: 'boolean', default: true },
  },
});
const N = Number(positionals[0] ?? 10_000);
const extra = positionals.slice(1);
if (!Number.isInteger(N) || N < 1) throw new Error(`N: expected a whole number >= 1, got ${positionals[0]}`);
const CHANGES = Number(values.changes);
const STEADY_MS = Number(values['steady-s']) * 1000;
const SETTLE_MS = Number(values['settle-s']) * 1000;
const NS = 'scale';
const FIRST_VMID = 10_000;
const ANNOTATION = 'crossplane.io/reconcile-requested-at';

type Vm = KubeObject & {
  metadata: KubeObject['metadata'] & { generation?: number; annotations?: Record<string, string>; labels?: unknown };
  status?: {
    lastHandledReconcileAt?: string;
    atProvider?: { vmId?: number };
    conditions?: Array<{ type: string; status: string; reason?: string }>;
  };
};

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const quantile = (xs: number[], q: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor(q * s.length))]! : Number.NaN;
};
async function until(what: string, fn: () => boolean, timeoutMs: number, everyMs = 50): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!fn()) {
    if (Date.now() > deadline) throw new Error(`${what}: not after ${timeoutMs} ms`);
    await sleep(everyMs);
  }
}
/** Run `fn` over `items`, `width` at a time. */
async function pool<T>(items: T[], width: number, fn: (x: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < items.length) await fn(items[next++]!);
    }),
  );
}

/** Prometheus text -> samples of one metric, with their labels. */
function samples(text: string, name: string): Array<{ labels: Record<string, string>; value: number }> {
  const out: Array<{ labels: Record<string, string>; value: number }> = [];
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!m || m[1] !== name) continue;
    const labels = Object.fromEntries([...(m[2] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1]!, x[2]!]));
    out.push({ labels, value: Number(m[3]) });
  }
  return out;
}
function sumBy(text: string, name: string, key: (l: Record<string, string>) => string | undefined) {
  const out: Record<string, number> = {};
  for (const s of samples(text, name)) {
    const k = key(s.labels);
    if (k !== undefined) out[k] = (out[k] ?? 0) + s.value;
  }
  return out;
}
function perMinute(a: Record<string, number>, b: Record<string, number>, ms: number): Record<string, number> {
  const out: Record<string, number> = {};
  for (const k of Object.keys(b).sort()) {
    const d = (b[k] ?? 0) - (a[k] ?? 0);
    if (d > 0) out[k] = Math.round((d * 60_000) / ms);
  }
  return out;
}
const total = (o: Record<string, number>) => Object.values(o).reduce((x, y) => x + y, 0);

const dir = values.keep ?? (await mkdtemp(join(tmpdir(), 'bench-kube-scale-')));
if (values.keep) await mkdir(dir, { recursive: true });
const nodeFlags = [
  ...(values['default-node-flags'] ? CONTROLLER_NODE_FLAGS : []),
  ...(values['node-flag'] ?? []),
  ...(values['cpu-prof'] ? ['--cpu-prof', `--cpu-prof-dir=${dir}`] : []),
  ...(values['heap-snapshot'] ? ['--heapsnapshot-signal=SIGUSR2', `--diagnostic-dir=${dir}`] : []),
];
const [kube, sim] = await Promise.all([
  startKube(),
  startSimulator({
    ephemeralPorts: true,
    speed: Number(values.speed),
    authFailDelayMs: 0,
    ssh: false,
    tokens: ['root@pam!bench=b0b0b0b0-0000-4000-8000-000000000000'],
    seed: 17,
  }),
]);
/** The controller process, as spawnController starts it; /readyz waited for up to 10 minutes. */
async function startController(kubeconfig: string, logFile: string, flags: string[]) {
  const [healthPort, metricsPort] = [await freePort(), await freePort()];
  const child = spawn(NODE, controllerArgv({ kubeconfig, healthPort, metricsPort, nodeFlags, extra: flags }), {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, LOG_LEVEL: 'debug' },
  });
  const out = createWriteStream(logFile, { flags: 'a' });
  child.stdout!.pipe(out);
  child.stderr!.pipe(out);
  const exited = new Promise<void>((ok) => child.once('exit', () => ok()));
  const kill = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
  };
  /** SIGTERM (a profile is written on a clean exit), SIGKILL after 60 s. */
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    await exited;
    clearTimeout(timer);
  };
  const deadline = Date.now() + 600_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`controller exited: ${readFileSync(logFile, 'utf8').slice(-2000)}`);
    if ((await httpGet(healthPort, '/readyz').catch(() => ({ status: 0 }))).status === 200) break;
    if (Date.now() > deadline) {
      await kill();
      throw new Error(`controller /readyz not 200 in 10 min: ${readFileSync(logFile, 'utf8').slice(-2000)}`);
    }
    await sleep(250);
  }
  return { pid: child.pid!, metricsPort, kill, stop, signal: (s: NodeJS.Signals) => child.kill(s) };
}

let controller: Awaited<ReturnType<typeof startController>> | undefined;
try {
  await applyCrds(kube);
  await installRbac(kube);
  await createProviderConfig(kube, sim);
  // The controller runs as deploy/'s ServiceAccount (as the tests run it); `--admin`: with the
  // harness's admin token instead (RBAC out of the picture).
  const kubeconfig = values.admin
    ? kube.kubeconfigPath
    : await serviceAccountKubeconfig(kube, join(dir, 'sa.kubeconfig'));
  const admin = new KubeApi(loadKubeConfig(kube.kubeconfigPath), { qps: 0 });

  // N running VMs, alternating between the two sites.
  const placement = (i: number) => {
    const c = sim.clusters[i % sim.clusters.length]!;
    return { site: c.name, node: c.nodes[0]!, cluster: c };
  };
  for (let i = 0; i < N; i++) {
    const { node, cluster } = placement(i);
    const vm = cluster.state.newVm(FIRST_VMID + i, node, {
      name: `obs-${i}`,
      cores: '1',
      memory: '512',
      ostype: 'l26',
      net0: 'virtio=BC:24:11:00:00:01,bridge=vmbr0',
    });
    vm.status = 'running';
    vm.startedAt = cluster.state.clock.now();
  }

  await admin.request('POST', '/api/v1/namespaces', {
    body: { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } },
  });
  const createStart = performance.now();
  await pool(
    Array.from({ length: N }, (_, i) => i),
    32,
    async (i) => {
      const { site, node } = placement(i);
      await admin.request('POST', vmPath(NS), {
        body: {
          apiVersion: API,
          kind: 'ProxmoxVM',
          metadata: {
            name: `obs-${i}`,
            namespace: NS,
            annotations: { 'crossplane.io/external-name': String(FIRST_VMID + i) },
          },
          spec: {
            managementPolicies: ['Observe'],
            forProvider: {
              site,
              node,
              name: `obs-${i}`,
              cpu: 1,
              memory: '512Mi',
              disk: '10Gi',
              storage: 'local-lvm',
              network: 'vmbr0',
              agent: false,
            },
            providerConfigRef: { name: 'default' },
          },
        },
      });
    },
  );
  const createMs = performance.now() - createStart;

  // The bench's own view: one watch; what is observed, and which events only changed status.
  const observed = new Set<string>();
  const handled = new Map<string, { at: string; seen: number }>();
  const fingerprints = new Map<string, string>();
  let statusOnlyEvents = 0;
  const informer = new Informer<Vm>(admin, vmPath(NS));
  informer.on((type, o, key, resync) => {
    if (resync) return;
    if (type === 'DELETED') return;
    const s = o.status;
    const synced = s?.conditions?.some((c) => c.type === 'Synced' && c.status === 'True');
    if (synced && s?.atProvider?.vmId) observed.add(key);
    const h = s?.lastHandledReconcileAt;
    if (h && handled.get(key)?.at !== h) handled.set(key, { at: h, seen: performance.now() });
    const m = o.metadata;
    const fp = JSON.stringify([m.generation, m.annotations, m.labels, (m as { finalizers?: unknown }).finalizers]);
    if (type === 'MODIFIED' && fingerprints.get(key) === fp) statusOnlyEvents++;
    fingerprints.set(key, fp);
  });
  await informer.start();

  const scrapeApiserver = async () => (await kreq(kube, 'GET', '/metrics', { accept: 'text/plain' })).text;
  const byVerb = (l: Record<string, string>) =>
    l.resource ? `${l.verb} ${l.resource}${l.subresource ? `/${l.subresource}` : ''}` : undefined;
  const beforeStart = sumBy(await scrapeApiserver(), 'apiserver_request_total', byVerb);
  const spawnAt = performance.now();
  controller = await startController(kubeconfig, join(dir, 'controller.log'), [
    '--workers',
    String(values.workers),
    '--poll',
    String(values.poll),
    ...extra,
  ]);
  const pid = controller.pid;
  const readyzMs = performance.now() - spawnAt;
  const scrapeController = async () => (await httpGet(controller!.metricsPort, '/metrics')).text;
  /** What the controller's work queue and reconciles did between two scrapes (ms: their distance). */
  const engine = (a: string, b: string, ms: number) => {
    const sum = (t: string, name: string) => samples(t, name).reduce((x, s) => x + s.value, 0);
    const d = (name: string) => sum(b, name) - sum(a, name);
    const mean = (name: string) => Math.round((1000 * d(`${name}_sum`)) / Math.max(1, d(`${name}_count`)));
    return {
      reconcilesPerSecond: Math.round((1000 * d('controller_runtime_reconcile_total')) / ms),
      meanQueueWaitMs: mean('workqueue_queue_duration_seconds'),
      meanReconcileMs: mean('controller_runtime_reconcile_time_seconds'),
      meanPveRequestMs: mean('provider_proxmox_pve_request_duration_seconds'),
      queueDepthAtEnd: sum(b, 'workqueue_depth'),
    };
  };

  const startup0 = { text: await scrapeController(), at: performance.now() };
  const rssSamples: number[] = [];
  const procStatus = (field: string) => {
    try {
      const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
      return m ? Number(m[1]) / 1024 : Number.NaN;
    } catch {
      return Number.NaN;
    }
  };
  // A coarse timeline too (every 10 s: RSS, and the heap from the controller's /metrics), with the
  // phase it fell in, to tell which phase the peak belongs to.
  let phase = 'startup';
  const timeline: Array<{ s: number; phase: string; rss: number; hwm: number; heapUsed?: number; external?: number }> =
    [];
  const rssTimer = setInterval(() => rssSamples.push(procStatus('VmRSS')), 1000);
  const timelineTimer = setInterval(async () => {
    const point = {
      s: Math.round((performance.now() - spawnAt) / 1000),
      phase,
      rss: Math.round(procStatus('VmRSS')),
      hwm: Math.round(procStatus('VmHWM')),
    };
    timeline.push(point);
    const text = await scrapeController().catch(() => '');
    const mbOf = (name: string) => Math.round((samples(text, name)[0]?.value ?? Number.NaN) / 2 ** 20);
    Object.assign(point, {
      heapUsed: mbOf('provider_proxmox_nodejs_heap_size_used_bytes'),
      external: mbOf('provider_proxmox_nodejs_external_memory_bytes'),
    });
  }, 10_000);
  // At the default --kube-qps 50 a first start costs 3 writes a resource (finalizer, usage, status).
  const progress = setInterval(() => console.error(`observed ${observed.size}/${N}`), 60_000);
  await until('every resource observed', () => observed.size >= N, Math.max(300_000, N * 250)).finally(() =>
    clearInterval(progress),
  );
  const startupMs = performance.now() - spawnAt;
  const startupEngine = engine(startup0.text, await scrapeController(), performance.now() - startup0.at);
  const startupRequests = perMinute(
    beforeStart,
    sumBy(await scrapeApiserver(), 'apiserver_request_total', byVerb),
    60_000,
  );

  // Changes: one every 100 ms, each on another resource, each timed until its status echoes it.
  phase = 'changes';
  const changes0 = { text: await scrapeController(), at: performance.now() };
  const latencies: number[] = [];
  const pending: Array<Promise<void>> = [];
  for (let c = 0; c < CHANGES; c++) {
    const key = `obs-${Math.floor((c * N) / CHANGES)}`;
    const at = new Date(Date.now() + c).toISOString();
    const sent = performance.now();
    await admin.request('PATCH', `${vmPath(NS)}/${key}`, {
      body: { metadata: { annotations: { [ANNOTATION]: at } } },
      contentType: 'application/merge-patch+json',
    });
    pending.push(
      until(`status of ${key} echoes ${at}`, () => handled.get(`${NS}/${key}`)?.at === at, 120_000).then(() => {
        latencies[c] = handled.get(`${NS}/${key}`)!.seen - sent;
      }),
    );
    await sleep(100);
  }
  await Promise.all(pending);
  const changesEngine = engine(changes0.text, await scrapeController(), performance.now() - changes0.at);

  // Steady state.
  phase = 'settle';
  await sleep(SETTLE_MS);
  phase = 'steady';
  const statusPuts = (l: Record<string, string>) =>
    l.verb === 'PUT' && l.subresource === 'status' && l.resource === 'proxmoxvms' && l.code === '200' ? 'n' : undefined;
  const [a0, c0] = [await scrapeApiserver(), await scrapeController()];
  const events0 = statusOnlyEvents;
  const t0 = performance.now();
  await sleep(STEADY_MS);
  const [a1, c1] = [await scrapeApiserver(), await scrapeController()];
  const windowMs = performance.now() - t0;
  const events1 = statusOnlyEvents;
  clearInterval(rssTimer);
  clearInterval(timelineTimer);

  const apiserver = perMinute(
    sumBy(a0, 'apiserver_request_total', byVerb),
    sumBy(a1, 'apiserver_request_total', byVerb),
    windowMs,
  );
  const ctlKube = perMinute(
    sumBy(c0, 'provider_proxmox_kube_requests_total', (l) => l.verb),
    sumBy(c1, 'provider_proxmox_kube_requests_total', (l) => l.verb),
    windowMs,
  );
  const pve = perMinute(
    sumBy(c0, 'provider_proxmox_pve_requests_total', () => 'all'),
    sumBy(c1, 'provider_proxmox_pve_requests_total', () => 'all'),
    windowMs,
  );
  const puts =
    (sumBy(a1, 'apiserver_request_total', statusPuts).n ?? 0) -
    (sumBy(a0, 'apiserver_request_total', statusPuts).n ?? 0);
  const skipped = sumBy(c1, 'provider_proxmox_kube_status_writes_total', (l) => l.result);
  const mb = (name: string) => Math.round((samples(c1, name)[0]?.value ?? Number.NaN) / 2 ** 20);
  // Before a heap snapshot, which takes memory of its own.
  const peakRss = procStatus('VmHWM');
  if (values['heap-snapshot']) {
    const before = new Set(await readdir(dir));
    controller.signal('SIGUSR2');
    // The file appears when the writing starts: done when its size holds still for a second (the
    // controller is killed right after).
    const snapshotSize = () =>
      readdirSync(dir)
        .filter((f) => f.endsWith('.heapsnapshot') && !before.has(f))
        .reduce((n, f) => n + statSync(join(dir, f)).size, 0);
    let last = -1;
    await until(
      'heap snapshot written',
      () => {
        const size = snapshotSize();
        const still = size > 0 && size === last;
        last = size;
        return still;
      },
      300_000,
      1000,
    );
  }
  const ready = [...informer.cache.values()].filter((o) =>
    o.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'),
  ).length;

  console.log(
    JSON.stringify(
      {
        bench: 'kube-scale',
        resources: N,
        kind: 'ProxmoxVM, managementPolicies [Observe], against running simulated VMs (2 sites)',
        controller: {
          workers: Number(values.workers),
          poll: values.poll,
          credentials: values.admin ? 'admin' : 'deploy/ ServiceAccount',
          nodeFlags,
          extraFlags: extra,
        },
        createMs: Math.round(createMs),
        readyzMs: Math.round(readyzMs),
        startupToAllObservedMs: Math.round(startupMs),
        // Every apiserver request from the spawn to all observed (the bench's own watch included).
        startupRequests: { total: total(startupRequests), byVerb: startupRequests },
        startupEngine,
        readyAtEnd: ready,
        peakRssMb: Math.round(peakRss),
        rssMb: { p50: Math.round(quantile(rssSamples, 0.5)), max: Math.round(Math.max(...rssSamples)) },
        // Every 10 s from /readyz (times from the spawn): phase, RSS, VmHWM so far, heap used, external (MB).
        rssTimeline: timeline.map(
          (p) => `${p.s}s ${p.phase} rss=${p.rss} hwm=${p.hwm} heap=${p.heapUsed} ext=${p.external}`,
        ),
        // At the end of the steady window, from the controller's own /metrics.
        memoryMbAtEnd: {
          rss: mb('provider_proxmox_process_resident_memory_bytes'),
          heapUsed: mb('provider_proxmox_nodejs_heap_size_used_bytes'),
          heapTotal: mb('provider_proxmox_nodejs_heap_size_total_bytes'),
          external: mb('provider_proxmox_nodejs_external_memory_bytes'),
        },
        changeToStatusMs: {
          changes: latencies.length,
          p50: Math.round(quantile(latencies, 0.5)),
          p99: Math.round(quantile(latencies, 0.99)),
          max: Math.round(Math.max(...latencies)),
          inOrder: latencies.map(Math.round),
          engine: changesEngine,
        },
        steadyState: {
          windowS: Math.round(windowMs / 1000),
          apiserverRequestsPerMinute: { total: total(apiserver), byVerb: apiserver },
          controllerKubeRequestsPerMinute: { total: total(ctlKube), byVerb: ctlKube },
          pveRequestsPerMinute: pve.all ?? 0,
          engine: engine(c0, c1, windowMs),
          statusWritesAnswered: puts,
          statusChangesSeen: events1 - events0,
          statusWritesThatChangedNothing: Math.max(0, puts - (events1 - events0)),
          // Only with KubeStore.onStatusWrite wired to the metric (src/kube/controller.ts).
          controllerStatusWrites: Object.keys(skipped).length ? skipped : null,
        },
      },
      null,
      2,
    ),
  );
  await informer.stop();
  admin.close();
} finally {
  if (values['cpu-prof']) await controller?.stop();
  await controller?.kill();
  await sim.close();
  await kube.stop().catch(() => {});
  if (!values.keep) await rm(dir, { recursive: true, force: true });
}
