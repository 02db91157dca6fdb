/**
 * bench/engine-steady-state: what the engine costs Proxmox.
 *
 * Deploys the seed fleet (30 VMs over 2 sites) into the in-process simulator, then measures:
 *   - deploy: wall time and Proxmox API requests to get every VM Ready;
 *   - steady state: requests per poll interval once everything is Ready (invariant 7: O(sites),
 *     not O(VMs), between the periodic drift checks);
 *   - outage: request rate while both sites are unreachable (invariant 4: bounded by backoff).
 * Prints one JSON object.
 *
 * Usage: node bench/engine-steady-state.ts [--speed 200] [--poll-ms 1000] [--window-ms 10000]
 */
import { parseArgs } from 'node:util';
import { parseProviderConfig } from '../src/api/provider-config.ts';
import { LocalRuntime } from '../src/local/runtime.ts';
import { startSimulator } from '../src/sim/index.ts';
import { providerConfigYaml } from '../src/sim/provider-config.ts';
import { loadManifests } from '../src/workspace/manifests.ts';

const { values } = parseArgs({
  options: {
    speed: { type: 'string', default: '200' },
    'poll-ms': { type: 'string', default: '1000' },
    'window-ms': { type: 'string', default: '10000' },
  },
});
const speed = Number(values.speed);
const pollMs = Number(values['poll-ms']);
const windowMs = Number(values['window-ms']);

const sim = await startSimulator({
  speed,
  ephemeralPorts: true,
  http: true,
  authFailDelayMs: 0,
  tokens: ['root@pam!bench=b0b0b0b0-0000-4000-8000-000000000000'],
});
const total = () => sim.clusters.reduce((a, c) => a + Object.values(c.counters()).reduce((x, y) => x + y, 0), 0);
const byTemplate = () => {
  const out: Record<string, number> = {};
  for (const c of sim.clusters) for (const [k, v] of Object.entries(c.counters())) out[k] = (out[k] ?? 0) + v;
  return out;
};
const config = parseProviderConfig(providerConfigYaml(sim), 'bench.yaml');
const m = loadManifests([new URL('../examples/production', import.meta.url).pathname]);
const vms = m.vms.map((x) => x.vm);
const rt = new LocalRuntime({ config, pollIntervalMs: pollMs, taskPollMs: Math.max(10, 2000 / speed), workers: 8 });
rt.applyManifests(vms);
const keys = vms.map((v) => `${v.metadata.namespace ?? 'default'}/${v.metadata.name}`);

await rt.controller.start();
const t0 = performance.now();
for (;;) {
  if (keys.every((k) => rt.stateOf(k) === 'ready')) break;
  if (performance.now() - t0 > 300_000) throw new Error('fleet not ready after 300 s');
  await new Promise((r) => setTimeout(r, 50));
}
const deployMs = performance.now() - t0;
const deployRequests = total();

// Steady state: everything Ready; count requests over a window of poll intervals.
await new Promise((r) => setTimeout(r, pollMs * 2));
for (const c of sim.clusters) c.resetCounters();
await new Promise((r) => setTimeout(r, windowMs));
const steady = byTemplate();
const steadyTotal = Object.values(steady).reduce((a, b) => a + b, 0);
const polls = windowMs / pollMs;

// Outage: both sites reset every connection for the window.
for (const c of sim.clusters) c.resetCounters();
for (const c of sim.clusters) c.addFault({ kind: 'unavailable', ms: windowMs * speed, mode: 'reset' });
await new Promise((r) => setTimeout(r, windowMs));
const outageTotal = sim.clusters.reduce((a, c) => a + (c.counters().unavailable ?? 0), 0);

await rt.controller.stop();
await rt.close();
await sim.close();

console.log(
  JSON.stringify(
    {
      benchmark: 'engine-steady-state',
      node: process.version,
      vms: vms.length,
      sites: sim.clusters.length,
      speed,
      pollIntervalMs: pollMs,
      deploy: {
        seconds: Math.round(deployMs / 100) / 10,
        pveRequests: deployRequests,
        requestsPerVm: Math.round(deployRequests / vms.length),
      },
      steadyState: {
        windowMs,
        pveRequests: steadyTotal,
        requestsPerPollInterval: Math.round((steadyTotal / polls) * 10) / 10,
        requestsPerVmPerPoll: Math.round((steadyTotal / polls / vms.length) * 100) / 100,
        byPath: steady,
      },
      outage: {
        windowMs,
        connectionAttempts: outageTotal,
        attemptsPerSecond: Math.round((outageTotal / (windowMs / 1000)) * 10) / 10,
      },
    },
    null,
    2,
  ),
);
