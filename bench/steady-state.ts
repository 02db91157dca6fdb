/**
 * bench/steady-state: what N Ready VMs cost Proxmox per minute once nothing changes (issue 16:
 * "steady state O(sites)"), for N = 30, 300 and 1,000 (--sizes).
 *
 * For each N: starts the in-process simulator with a generated topology (--sites clusters of
 * --nodes nodes, each large enough for every VM, with a DHCP range for every guest), gets N small
 * generated VMs Ready through the local runtime (LocalRuntime: the engine, the VM connector and the
 * cadences `apply` and the controller use), waits two polls, then counts every Proxmox API request
 * the simulator answers over --window-min simulated minutes (default 10: two drift intervals).
 * Time is scaled by --speed: the simulator runs that much faster, and every cadence of the runtime
 * is divided by it (poll 60 s, drift interval 5 m, task poll 2 s, agent poll 5 s, creation grace
 * 30 s), so a simulated minute is 60 / speed seconds of wall time. The bulk list's cache lives
 * the runtime's poll / 2 (LocalRuntime: min(10 s, poll / 2) of wall time): 30 simulated seconds
 * here, 10 s at the production 60 s poll, so the shared reads are a little fewer than production's.
 *
 * Requests are classed as in bench/makespan.ts (mutating, task, per-VM reads of /qemu/VMID/...,
 * shared reads: the bulk list, a node's tasks...). The per-VM reads of one VM are grouped into
 * reconciles (reads less than half a poll apart); a reconcile that read the VM's config is a full
 * observe (the drift read), any other per-VM read is a per-VM cost beyond the drift reads. The
 * expected drift component is N x (reads per full observe) / (drift interval in minutes); the
 * slope is a least-squares fit of requests/min over N. "Flat" (O(sites)): for every N, each VM's
 * config is read at most 1.1 times per drift interval, no per-VM read comes outside full observes,
 * and what is not a drift read (the shared reads) stays within the sites' bound, whatever N:
 * sites x (60 s / the bulk list's TTL) x 4/3 (its read-ahead) a minute; and no minute is a burst:
 * its drift reads stay within what phases drawn at random give (a VM is read in a given minute
 * with odds 1 / the interval in minutes: the mean plus 4 standard deviations of that binomial),
 * plus the shared bound. A run counts only when the runtime kept its poll (at least 0.95
 * reconciles per VM per poll interval): on a machine too busy for N / poll reconciles a second of
 * wall time, polls come late and bunch, which the per-minute counts would show as bursts that are
 * the machine's (then try a lower --speed).
 *
 * Then, with the fleet still Ready, every site refuses every connection for --outage-min simulated
 * minutes (default 2; 0: none): the connection attempts per minute, bounded by the engine's backoff
 * (scaled as the cadences are: 1 s doubling to 5 m) and by the bulk list shared per site.
 *
 * Prints one JSON object.
 *
 * Usage: node bench/steady-state.ts [--sizes 30,300,1000] [--sites 4] [--nodes 2] [--speed 20]
 *                                   [--poll-s 60] [--drift-s 300] [--window-min 10] [--outage-min 2]
 *                                   [--budget-s 900]
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { parseProviderConfig } from '../src/api/provider-config-load.ts';
import { keyOf } from '../src/engine/resource.ts';
import { LocalRuntime } from '../src/local/runtime.ts';
import type { startSimulator } from '../src/sim/index.ts';
import { providerConfigYaml } from '../src/sim/provider-config.ts';
import { loadManifests } from '../src/workspace/manifests.ts';
import { classOf, type RequestClass, smallVmYaml, startFleetSimulator } from './fleet.ts';

const { values } = parseArgs({
  options: {
    sizes: { type: 'string', default: '30,300,1000' },
    sites: { type: 'string', default: '4' },
    nodes: { type: 'string', default: '2' },
    speed: { type: 'string', default: '20' },
    'poll-s': { type: 'string', default: '60' },
    'drift-s': { type: 'string', default: '300' },
    'window-min': { type: 'string', default: '10' },
    'outage-min': { type: 'string', default: '2' },
    'budget-s': { type: 'string', default: '900' },
  },
});
const round = (x: number, d = 2) => Math.round(x * 10 ** d) / 10 ** d;
const sizes = values.sizes.split(',').map(Number);
const sites = Number(values.sites);
const nodesPerSite = Number(values.nodes);
const speed = Number(values.speed);
const pollMs = Number(values['poll-s']) * 1000;
const driftMs = Number(values['drift-s']) * 1000;
const windowMin = Number(values['window-min']);
const outageMin = Number(values['outage-min']);
const budgetMs = Number(values['budget-s']) * 1000;
/** One simulated minute in wall milliseconds. */
const MINUTE = 60_000 / speed;
/** The bulk list's cache lifetime in simulated ms (LocalRuntime: min(10 s, poll / 2) of wall time). */
const TTL_MS = Math.min(10_000, Math.max(100, pollMs / speed / 2)) * speed;
/** What the shared reads may cost a minute whatever N: each site's bulk list once per TTL, and its read-ahead. */
const SHARED_BOUND = round(((sites * 60_000) / TTL_MS) * (4 / 3), 1);
const FLAT_FULL_PER_INTERVAL = 1.1;
const KEPT_POLL = 0.95;

interface Hit {
  at: number;
  cls: RequestClass;
  route: string;
  vm?: string;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function measure(n: number): Promise<Record<string, unknown>> {
  const sim = await startFleetSimulator(sites, nodesPerSite, speed, 18106);
  const dir = mkdtempSync(join(tmpdir(), 'pp-bench-steady-'));
  let hits: Hit[] | undefined;
  let refused: number[] | undefined;
  for (const c of sim.clusters)
    c.server.prependListener('request', (req: { method?: string; url?: string }) => {
      if (refused) refused.push(performance.now());
      if (!hits) return;
      const path = (req.url ?? '').replace(/\?.*/, '');
      const vmid = /\/qemu\/(\d+)/.exec(path)?.[1];
      const route = path.replace(/\/nodes\/[^/]+/, '/nodes/{node}').replace(/\/qemu\/\d+/, '/qemu/{vmid}');
      hits.push({
        at: performance.now(),
        cls: classOf(req.method ?? 'GET', path),
        route: `${req.method ?? 'GET'} ${route}`,
        ...(vmid ? { vm: `${c.name}/${vmid}` } : {}),
      });
    });
  let reconciles = 0;
  const rt = new LocalRuntime({
    config: parseProviderConfig(providerConfigYaml(sim, { ssh: false }), 'bench.yaml'),
    pollIntervalMs: pollMs / speed,
    driftIntervalMs: driftMs / speed,
    taskPollMs: 2000 / speed,
    agentPollMs: 5000 / speed,
    creationGraceMs: 30_000 / speed,
    backoff: { baseMs: 1000 / speed, capMs: 300_000 / speed },
    onResult: () => {
      reconciles++;
    },
  });
  try {
    for (let f = 0; f * 100 < n; f++) {
      const docs: string[] = [];
      for (let i = f * 100; i < Math.min(n, (f + 1) * 100); i++) docs.push(smallVmYaml(i, sites, nodesPerSite));
      writeFileSync(join(dir, `vms-${f}.yaml`), docs.join('---\n'));
    }
    const vms = loadManifests([dir]).vms.map((x) => x.vm);
    const keys = vms.map((v) =>
      keyOf({ ...v, metadata: { ...v.metadata, namespace: v.metadata.namespace ?? 'default' } }),
    );
    rt.applyManifests(vms);
    const t0 = performance.now();
    await rt.controller.start();
    for (;;) {
      const states = keys.map((k) => rt.stateOf(k));
      if (states.every((s) => s === 'ready')) break;
      if (states.some((s) => s === 'failed'))
        throw new Error(`N=${n}: a VM failed: ${JSON.stringify(rt.rows().find((r) => r.reason))}`);
      if (performance.now() - t0 > budgetMs) throw new Error(`N=${n}: not every VM Ready after ${budgetMs / 1000} s`);
      await sleep(200);
    }
    const deployWallMs = performance.now() - t0;
    // The deploy's tail settles: the last VMs started are seen running in a bulk list read after
    // pvestatd's next tick (until then their state differs from the list's, which is a full read).
    // Recorded from here, so that a reconcile under way when the window opens is classed whole.
    hits = [];
    await sleep((2 * pollMs) / speed);
    reconciles = 0;
    const w0 = performance.now();
    await sleep(windowMin * MINUTE);
    const recorded = hits;
    const window = recorded.filter((h) => h.at >= w0 && h.at - w0 < windowMin * MINUTE);
    const windowReconciles = reconciles;
    hits = undefined;
    const outage = outageMin > 0 ? await refuseEverything(sim, outageMin, (list) => (refused = list)) : undefined;

    const perMinute = Array.from({ length: windowMin }, () => 0);
    const byClass: Record<RequestClass, number> = { mutating: 0, task: 0, perVm: 0, shared: 0 };
    const byRoute: Record<string, number> = {};
    const perVmHits = new Map<string, Hit[]>();
    for (const h of window) {
      perMinute[Math.min(windowMin - 1, Math.floor((h.at - w0) / MINUTE))]!++;
      byClass[h.cls]++;
      byRoute[h.route] = (byRoute[h.route] ?? 0) + 1;
    }
    for (const h of recorded) {
      if (h.cls !== 'perVm' || !h.vm || h.at - w0 >= windowMin * MINUTE) continue;
      const list = perVmHits.get(h.vm);
      if (list) list.push(h);
      else perVmHits.set(h.vm, [h]);
    }
    // One VM's reads of one reconcile come together; its next reconcile is a poll later. Only the
    // window's reads count; a full observe is counted where its config read is.
    let fullObserves = 0;
    let fullObserveReads = 0;
    let otherPerVmReads = 0;
    for (const list of perVmHits.values()) {
      let group: Hit[] = [];
      const close = () => {
        const inWindow = group.filter((h) => h.at >= w0).length;
        const config = group.find((h) => h.route.endsWith('/config'));
        if (config) {
          if (config.at >= w0) fullObserves++;
          fullObserveReads += inWindow;
        } else otherPerVmReads += inWindow;
        group = [];
      };
      for (const h of list) {
        if (group.length && h.at - group.at(-1)!.at > pollMs / speed / 2) close();
        group.push(h);
      }
      if (group.length) close();
    }
    const total = window.length;
    const intervals = (windowMin * 60_000) / driftMs;
    const readsPerFullObserve = fullObserves ? fullObserveReads / fullObserves : 0;
    const expectedDriftPerMin = (n * readsPerFullObserve) / (driftMs / 60_000);
    const perMin = (x: number) => round(x / windowMin, 1);
    const p = Math.min(1, 60_000 / driftMs);
    const burstBound = Math.round(readsPerFullObserve * (n * p + 4 * Math.sqrt(n * p * (1 - p))) + SHARED_BOUND);
    const reconcilesPerPoll = windowReconciles / n / (windowMin / (pollMs / 60_000));
    return {
      n,
      deploy: { wallS: round(deployWallMs / 1000, 1), simulatedMin: round((deployWallMs * speed) / 60_000, 1) },
      reconcilesPerVmPerMin: round(windowReconciles / n / windowMin),
      keptPoll: reconcilesPerPoll >= KEPT_POLL,
      requestsPerMin: {
        mean: perMin(total),
        worstMinute: Math.max(...perMinute),
        worstOverMean: round(Math.max(...perMinute) / (total / windowMin)),
        burstBound,
        minutes: perMinute,
      },
      perMinByClass: {
        perVm: perMin(byClass.perVm),
        shared: perMin(byClass.shared),
        task: perMin(byClass.task),
        mutating: perMin(byClass.mutating),
      },
      drift: {
        fullObserves,
        fullObservesPerVmPerInterval: round(fullObserves / n / intervals),
        readsPerFullObserve: round(readsPerFullObserve),
        driftReadsPerMin: perMin(fullObserveReads),
        expectedDriftPerMin: round(expectedDriftPerMin, 1),
        perVmReadsOutsideFullObserves: otherPerVmReads,
      },
      byRoutePerMin: Object.fromEntries(
        Object.entries(byRoute)
          .sort((a, b) => b[1] - a[1])
          .map(([k, v]) => [k, perMin(v)]),
      ),
      // Everything but the drift reads: what must not grow with N.
      notDriftPerMin: perMin(total - fullObserveReads),
      ...(outage ? { outage } : {}),
    };
  } finally {
    await rt.controller.stop();
    await rt.close();
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Every site down (connections reset) for `minutes` simulated minutes: the connection attempts it
 * got per simulated minute. `track` hands the listener the list to push each attempt's time to.
 */
async function refuseEverything(
  sim: Awaited<ReturnType<typeof startSimulator>>,
  minutes: number,
  track: (list: number[] | undefined) => void,
): Promise<Record<string, unknown>> {
  const list: number[] = [];
  track(list);
  const t0 = performance.now();
  for (const c of sim.clusters) c.addFault({ kind: 'unavailable', ms: minutes * 60_000, mode: 'reset' });
  await sleep(minutes * MINUTE);
  track(undefined);
  const perMinute = Array.from({ length: minutes }, () => 0);
  for (const at of list) if (at - t0 < minutes * MINUTE) perMinute[Math.floor((at - t0) / MINUTE)]!++;
  return {
    minutes,
    attemptsPerMin: round(perMinute.reduce((a, b) => a + b, 0) / minutes, 1),
    worstMinute: Math.max(...perMinute),
    perMinute,
  };
}

/** Least-squares slope of y over x. */
function slope(xs: number[], ys: number[]): number {
  const mx = xs.reduce((a, b) => a + b, 0) / xs.length;
  const my = ys.reduce((a, b) => a + b, 0) / ys.length;
  const num = xs.reduce((a, x, i) => a + (x - mx) * (ys[i]! - my), 0);
  const den = xs.reduce((a, x) => a + (x - mx) ** 2, 0);
  return den ? num / den : 0;
}

const runs: Array<Record<string, unknown>> = [];
for (const n of sizes) {
  const r = await measure(n);
  runs.push(r);
  process.stderr.write(`${JSON.stringify(r)}\n`);
}
type Run = {
  n: number;
  keptPoll: boolean;
  requestsPerMin: { mean: number; worstMinute: number; burstBound: number };
  perMinByClass: { perVm: number; shared: number };
  drift: { fullObservesPerVmPerInterval: number; perVmReadsOutsideFullObserves: number; readsPerFullObserve: number };
  notDriftPerMin: number;
};
const rs = runs as unknown as Run[];
const ns = rs.map((r) => r.n);
const fit = (f: (r: Run) => number) => round(slope(ns, rs.map(f)), 4);
const readsPerFull = rs.map((r) => r.drift.readsPerFullObserve);
console.log(
  JSON.stringify(
    {
      benchmark: 'steady-state',
      node: process.version,
      cpus: cpus().length,
      settings: {
        speed,
        topology: { sites, nodesPerSite },
        simulated: {
          pollS: pollMs / 1000,
          driftIntervalS: driftMs / 1000,
          windowMin,
          bulkListTtlS: round(TTL_MS / 1000, 1),
        },
        wallMsPerSimulatedMinute: round(MINUTE, 1),
      },
      runs,
      slope: {
        requestsPerMinPerVm: fit((r) => r.requestsPerMin.mean),
        perVmPerMinPerVm: fit((r) => r.perMinByClass.perVm),
        sharedPerMinPerVm: fit((r) => r.perMinByClass.shared),
        notDriftPerMinPerVm: fit((r) => r.notDriftPerMin),
        // Where the slope comes from: each VM's full observe once per drift interval.
        expectedDriftPerMinPerVm: round(Math.max(...readsPerFull) / (driftMs / 60_000), 4),
      },
      flat: {
        // Not measured when a run could not keep its poll (see above).
        measured: rs.every((r) => r.keptPoll),
        met:
          rs.every((r) => r.keptPoll) &&
          rs.every(
            (r) =>
              r.notDriftPerMin <= SHARED_BOUND &&
              r.requestsPerMin.worstMinute <= r.requestsPerMin.burstBound &&
              r.drift.fullObservesPerVmPerInterval <= FLAT_FULL_PER_INTERVAL &&
              r.drift.perVmReadsOutsideFullObserves === 0,
          ),
        threshold: {
          notDriftPerMin: SHARED_BOUND,
          worstMinute: 'requestsPerMin.burstBound',
          fullObservesPerVmPerInterval: FLAT_FULL_PER_INTERVAL,
          perVmReadsOutsideFullObserves: 0,
          reconcilesPerVmPerPoll: KEPT_POLL,
        },
      },
    },
    null,
    2,
  ),
);
