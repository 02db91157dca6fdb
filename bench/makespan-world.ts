/**
 * The simulated world of one bench/makespan run: the simulator with the seed topology, the
 * requests its API servers answered (by class, and the VM's own ones by route), and after the
 * apply the fleet as the ideal schedule sees it (src/sim/ideal.ts idealVmOf).
 *
 * It runs in this thread or in a worker thread of its own. At speed 100 a millisecond of CPU is a
 * tenth of a simulated second, and in one thread every millisecond the simulator spends answering
 * is one the client waits for; real Proxmox answers on machines of its own. In a worker the
 * simulator has its own event loop (and core, when there is a free one), so the client's makespan
 * holds the client's costs and the API's latency, not the simulator's CPU on the client's thread.
 * A worker's simulator is warmed by an unmeasured apply first (warmUp).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { parseProviderConfig } from '../src/api/provider-config-load.ts';
import { applyCommand } from '../src/local/apply.ts';
import { type IdealVm, idealVmOf } from '../src/sim/ideal.ts';
import { startSimulator } from '../src/sim/index.ts';
import { providerConfigYaml } from '../src/sim/provider-config.ts';
import { loadManifests } from '../src/workspace/manifests.ts';
import { manifestKey, planRollout } from '../src/workspace/phases.ts';
import { classOf, type RequestClass } from './fleet.ts';

export const FLEET = new URL('../examples/production', import.meta.url).pathname;

export interface Outcome {
  fleet: IdealVm[];
  requests: Record<RequestClass, number>;
  /** The VM's own requests (mutating, task, per-VM) by the simulator's route. */
  routes: Array<[string, number]>;
  /** The shared reads by the simulator's route. */
  sharedRoutes: Array<[string, number]>;
}

export interface World {
  /** The ClusterProviderConfig (and its Secrets) of the simulator, as YAML. */
  providerYaml: string;
  /** What the world holds after the apply. */
  outcome(): Promise<Outcome>;
  close(): Promise<void>;
}

/** The world in this thread. */
async function openHere(speed: number): Promise<World> {
  const sim = await startSimulator({
    speed,
    http: true,
    ephemeralPorts: true,
    authFailDelayMs: 0,
    tokens: ['root@pam!bench=b0b0b0b0-0000-4000-8000-000000000000'],
  });
  return {
    providerYaml: providerConfigYaml(sim),
    async outcome() {
      const vms = loadManifests([FLEET]).vms.map((x) => x.vm);
      const rollout = planRollout(vms);
      const phaseOf = new Map(rollout.phases.flatMap((p, i) => p.members.map((k) => [k, i] as const)));
      const fleet = vms.map((vm) => {
        const fp = vm.spec.forProvider;
        const sc = sim.cluster(String(fp.site));
        const found = [...sc.state.vms.values()].find((v) => v.config.name === fp.name && v.node === fp.node);
        if (!found) throw new Error(`${fp.name}: not found on ${fp.site}/${fp.node} after apply`);
        const key = manifestKey(vm);
        return idealVmOf(sc.state, found, String(fp.image), key, phaseOf.get(key) ?? 0);
      });
      // The simulator counts every request by its route (`GET /nodes/{node}/qemu/{vmid}/config`).
      const requests: Record<RequestClass, number> = { mutating: 0, task: 0, perVm: 0, shared: 0 };
      const routes = new Map<string, number>();
      const sharedRoutes = new Map<string, number>();
      for (const c of sim.clusters)
        for (const [route, n] of Object.entries(c.counters())) {
          const [method, path] = route.split(' ');
          if (!path) continue; // (a fault's count, not a request)
          const cls = classOf(method!, path);
          requests[cls] += n;
          const into = cls === 'shared' ? sharedRoutes : routes;
          into.set(route, (into.get(route) ?? 0) + n);
        }
      return { fleet, requests, routes: [...routes], sharedRoutes: [...sharedRoutes] };
    },
    close: () => sim.close(),
  };
}

/** The world in a worker thread: the same, asked by message. */
async function openInWorker(speed: number): Promise<World> {
  const worker = new Worker(new URL(import.meta.url), { workerData: { makespanWorld: { speed } } });
  const replies: Array<(v: unknown) => void> = [];
  const failed = new Promise<never>((_, reject) => {
    worker.once('error', reject);
  });
  worker.on('message', (m) => replies.shift()?.(m));
  const ask = <T>(what: string): Promise<T> => {
    const reply = new Promise<T>((resolve) => replies.push(resolve as (v: unknown) => void));
    if (what) worker.postMessage(what);
    return Promise.race([reply, failed]);
  };
  const providerYaml = await ask<string>('');
  return {
    providerYaml,
    outcome: () => ask<Outcome>('outcome'),
    async close() {
      await ask('close');
      await worker.terminate();
    },
  };
}

export function openWorld(speed: number, where: 'thread' | 'worker'): Promise<World> {
  return where === 'worker' ? openInWorker(speed) : openHere(speed);
}

/**
 * The project's `apply` of the fleet against a world's simulator as the bench runs it (quiet, its
 * output discarded, its state in a directory of its own), ready to start: the ProviderConfig is
 * read here, so that a caller timing `run` times the apply alone. `close` removes the directory.
 */
export function fleetApply(
  providerYaml: string,
  opts: { noWait: boolean; taskPollMs?: number | undefined },
): { run: () => Promise<number>; close: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'makespan-bench-'));
  const close = () => rmSync(dir, { recursive: true, force: true });
  let config: ReturnType<typeof parseProviderConfig>;
  try {
    config = parseProviderConfig(providerYaml, join(dir, 'providerconfig.yaml'));
  } catch (e) {
    close();
    throw e;
  }
  const sink = new Writable({ write: (_c, _e, cb) => cb() }) as unknown as NodeJS.WriteStream;
  return {
    run: () =>
      applyCommand({
        files: [FLEET],
        loadedConfig: config,
        state: join(dir, 'state.json'),
        out: sink,
        quiet: true,
        noWait: opts.noWait,
        // What `apply --task-poll` passes (src/cli/local.ts pollArgs): the agent poll at 2.5 x.
        ...(opts.taskPollMs ? { taskPollMs: opts.taskPollMs, agentPollMs: Math.round(opts.taskPollMs * 2.5) } : {}),
      } as Parameters<typeof applyCommand>[0]),
    close,
  };
}

/**
 * One unmeasured apply of the fleet (unphased, at speed 1000) against a simulator of this thread's
 * own. In a worker, before the measured world opens: a worker is a new V8 isolate, and without
 * this the simulator that answered a measured run had never run before, and its code was compiled
 * while it answered (a Proxmox host has been up for days). In the main thread, for a warm client
 * (bench/makespan.ts --client warm): the client's code, and the simulator's in thread mode, have
 * run before, as a long-running controller's have.
 */
export async function warmUp(): Promise<void> {
  const world = await openHere(1000);
  let apply: ReturnType<typeof fleetApply> | undefined;
  try {
    apply = fleetApply(world.providerYaml, { noWait: true });
    await apply.run();
  } finally {
    apply?.close();
    await world.close();
  }
}

if (!isMainThread && workerData?.makespanWorld) {
  await warmUp();
  const world = await openHere(Number(workerData.makespanWorld.speed));
  const port = parentPort!;
  port.postMessage(world.providerYaml);
  port.on('message', async (what: string) => {
    if (what === 'outcome') port.postMessage(await world.outcome());
    if (what === 'close') {
      await world.close();
      port.postMessage('closed');
    }
  });
}
