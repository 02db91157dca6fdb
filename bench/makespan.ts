/**
 * bench/makespan: the seed fleet's makespan under `apply` next to the ideal one.
 *
 * For each speed factor (default 20 and 100) and each rollout (phased: the phase annotations of
 * examples/production; unphased: `--no-wait`), starts the in-process simulator with the seed
 * topology, runs the project's `apply` of examples/production against it as typed (the CLI's
 * default polls unless --task-poll-ms, which sets them as `apply --task-poll` does), and measures the wall time from the call to its
 * return, in simulated seconds (wall x speed). The ideal comes from the simulator's own model
 * (src/sim/ideal.ts): every VM's steps timed by the simulator's constants, copies sharing their
 * storage (fair share) and allocations taking turns under the storage lock, no polling, no
 * overhead; the guest's time to Ready is read off the model of each VM's boot. Also printed: the
 * ideal under the model before the fair share (every copy at full bandwidth, no lock).
 * Also counted, per VM (create to Ready, the requests the simulator's API servers answered during
 * the apply, divided by the VMs): mutating (POST/PUT/DELETE), task (a task's status or log),
 * perVm (reads of one VM, /nodes/N/qemu/VMID/..., and /cluster/nextid, one per create), and
 * shared apart (the bulk list, a node's active tasks, status, bridges, storages: one read serves
 * every VM of the node or site). Target: mutating + task + perVm <= 10. `perVmRoutes`: the first three
 * classes by route (VMIDs, nodes and UPIDs folded), per VM, the most first.
 * Prints one JSON object. Target (issue 16): project <= 1.10 x ideal, phased and unphased.
 *
 * Usage: node bench/makespan.ts [--speeds 20,100] [--task-poll-ms N]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { parseArgs } from 'node:util';
import { parseProviderConfig } from '../src/api/provider-config.ts';
import { applyCommand } from '../src/local/apply.ts';
import { type IdealVm, idealMakespan, idealVmOf } from '../src/sim/ideal.ts';
import { startSimulator } from '../src/sim/index.ts';
import { providerConfigYaml } from '../src/sim/provider-config.ts';
import { loadManifests } from '../src/workspace/manifests.ts';
import { manifestKey, planRollout } from '../src/workspace/phases.ts';
import { classOf, type RequestClass } from './fleet.ts';

const { values } = parseArgs({
  options: { speeds: { type: 'string', default: '20,100' }, 'task-poll-ms': { type: 'string' } },
});
const speeds = String(values.speeds).split(',').map(Number);
const taskPollMs = values['task-poll-ms'] ? Number(values['task-poll-ms']) : undefined;
const FLEET = new URL('../examples/production', import.meta.url).pathname;
const TARGET = 1.1;

const vms = loadManifests([FLEET]).vms.map((x) => x.vm);
const rollout = planRollout(vms);
const phaseOf = new Map(rollout.phases.flatMap((p, i) => p.members.map((k) => [k, i] as const)));

const sink = new Writable({
  write(_chunk, _enc, cb) {
    cb();
  },
}) as unknown as NodeJS.WriteStream;

/** One apply against a fresh simulator: its simulated seconds, and the fleet as the ideal sees it. */

async function measure(
  speed: number,
  phased: boolean,
): Promise<{
  projectS: number;
  code: number;
  fleet: IdealVm[];
  requests: Record<RequestClass, number>;
  routes: Map<string, number>;
}> {
  const sim = await startSimulator({
    speed,
    http: true,
    ephemeralPorts: true,
    authFailDelayMs: 0,
    tokens: ['root@pam!bench=b0b0b0b0-0000-4000-8000-000000000000'],
  });
  const requests: Record<RequestClass, number> = { mutating: 0, task: 0, perVm: 0, shared: 0 };
  const routes = new Map<string, number>();
  for (const c of sim.clusters)
    c.server.prependListener('request', (req: { method?: string; url?: string }) => {
      const cls = classOf(req.method ?? 'GET', req.url ?? '');
      requests[cls]++;
      if (cls === 'shared') return;
      const route = `${req.method} ${(req.url ?? '')
        .replace(/\?.*/, '')
        .replace(/\/\d+(?=\/|$)/g, '/{vmid}')
        .replace(/\/UPID:[^/]+/, '/{upid}')
        .replace(/\/nodes\/[^/]+/, '/nodes/{node}')}`;
      routes.set(route, (routes.get(route) ?? 0) + 1);
    });
  const dir = mkdtempSync(join(tmpdir(), 'makespan-bench-'));
  try {
    const config = parseProviderConfig(providerConfigYaml(sim), join(dir, 'providerconfig.yaml'));
    const t0 = performance.now();
    const code = await applyCommand({
      files: [FLEET],
      loadedConfig: config,
      state: join(dir, 'state.json'),
      out: sink,
      quiet: true,
      noWait: !phased,
      // What `apply --task-poll` passes (src/cli/local.ts pollArgs): the agent poll at 2.5 x.
      ...(taskPollMs ? { taskPollMs, agentPollMs: Math.round(taskPollMs * 2.5) } : {}),
    } as Parameters<typeof applyCommand>[0]);
    const projectS = ((performance.now() - t0) * speed) / 1000;
    const fleet = vms.map((vm) => {
      const fp = vm.spec.forProvider;
      const sc = sim.cluster(String(fp.site));
      const found = [...sc.state.vms.values()].find((v) => v.config.name === fp.name && v.node === fp.node);
      if (!found) throw new Error(`${fp.name}: not found on ${fp.site}/${fp.node} after apply`);
      const key = manifestKey(vm);
      return idealVmOf(sc.state, found, String(fp.image), key, phaseOf.get(key) ?? 0);
    });
    return { projectS, code, fleet, requests, routes };
  } finally {
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

const round = (x: number, d = 2) => Math.round(x * 10 ** d) / 10 ** d;
const runs: Array<Record<string, unknown>> = [];
let fleetForIdeal: IdealVm[] | undefined;
for (const speed of speeds) {
  const row: Record<string, unknown> = { speed };
  for (const phased of [true, false]) {
    const m = await measure(speed, phased);
    fleetForIdeal ??= m.fleet;
    const ideal = (await idealMakespan(m.fleet, { phased })).makespanMs / 1000;
    const perVm = Object.fromEntries(
      Object.entries(m.requests).map(([k, n]) => [k, round(n / m.fleet.length, 1)]),
    ) as Record<RequestClass, number>;
    const ownPerVm = round(perVm.mutating + perVm.task + perVm.perVm, 1);
    row[phased ? 'phased' : 'unphased'] = {
      projectS: round(m.projectS, 1),
      idealS: round(ideal, 1),
      ratio: round(m.projectS / ideal),
      applyExit: m.code,
      met: m.projectS <= TARGET * ideal,
      requestsPerVm: { ...perVm, total: ownPerVm, met: ownPerVm <= 10 },
      // Where the VM's own requests go (mutating, task and per-VM routes), per VM, the most first.
      perVmRoutes: Object.fromEntries(
        [...m.routes]
          .sort((x, y) => y[1] - x[1])
          .slice(0, 12)
          .map(([k, n]) => [k, round(n / m.fleet.length, 2)]),
      ),
    };
  }
  runs.push(row);
}

const fleet = fleetForIdeal ?? [];
const shared = {
  phased: await idealMakespan(fleet, { phased: true }),
  unphased: await idealMakespan(fleet, { phased: false }),
};
const before = {
  phased: await idealMakespan(fleet, { phased: true, shared: false }),
  unphased: await idealMakespan(fleet, { phased: false, shared: false }),
};

console.log(
  JSON.stringify(
    {
      benchmark: 'makespan',
      node: process.version,
      cpus: cpus().length,
      vms: fleet.length,
      phases: rollout.phases.map((p) => p.name),
      taskPollMs: taskPollMs ?? 'default',
      runs,
      ideal: {
        phasedS: round(shared.phased.makespanMs / 1000, 1),
        phaseS: shared.phased.phaseMs.map((x) => round(x / 1000, 1)),
        unphasedS: round(shared.unphased.makespanMs / 1000, 1),
      },
      idealWithoutFairShare: {
        phasedS: round(before.phased.makespanMs / 1000, 1),
        unphasedS: round(before.unphased.makespanMs / 1000, 1),
      },
      target: { ratio: TARGET },
    },
    null,
    2,
  ),
);
