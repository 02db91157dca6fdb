/**
 * Migrations on the bandwidth model (src/sim/migration-copy.ts): an offline migration's disk copy
 * crosses the source node's network out and the target node's network in (1000 MB/s each way),
 * so two migrations from one node to another share them, while a migration between two other
 * nodes keeps its full speed. Storages here are fast (10 GB/s), so the network is what limits.
 *
 * Deterministic: setTimeout and Date are mocked at speed 1, time moves 1 ms at a time, and each
 * task's end is read off the mocked clock when its `done` settles.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it, mock } from 'node:test';
import type { SimCluster, Simulator } from '../../src/sim/index.ts';
import { MIGRATION_NETWORK_MBPS } from '../../src/sim/migration.ts';
import { DURATIONS } from '../../src/sim/routes/qemu-common.ts';
import { parseTopology } from '../../src/sim/topology.ts';
import { raw, startTestSim } from '../helpers/sim.ts';

const GiB = 1024 ** 3;
const node = (name: string, vms: string) => `      - name: ${name}
        cpus: 64
        memory: 512G
        storages:
          - { id: fast, type: lvmthin, content: [images], total: 1T, bandwidth: 10000 }
        bridges: [{ name: vmbr0 }]
${vms}`;
const vm = (vmid: number) => `          - { vmid: ${vmid}, name: v${vmid}, disk: { storage: fast, size: 2G } }\n`;
const TOPOLOGY = `clusters:
  - name: site-1
    listen: 127.0.0.1:0
    nodes:
${node('n1', `        vms:\n${vm(201)}${vm(202)}${vm(203)}`)}
${node('n2', '')}
${node('n3', `        vms:\n${vm(301)}`)}
${node('n4', '')}
`;

/** Setup, the copy of `bytes` at `bps`, the finish. */
const migrationMs = (bytes: number, bps: number) =>
  DURATIONS.migrateConnect + (bytes / bps) * 1000 + DURATIONS.migrateFinish;

describe('migrations share the nodes networks (mocked clock, speed 1)', () => {
  let sim: Simulator;
  let sc: SimCluster;
  before(async () => {
    mock.timers.enable({ apis: ['setTimeout', 'Date'] });
    sim = await startTestSim({ speed: 1, ssh: false, topology: parseTopology(TOPOLOGY, 'fair-share-migrate.yaml') });
    sc = sim.cluster('site-1');
  });
  after(async () => {
    await sim.close();
    mock.timers.reset();
  });

  async function run(moves: Array<{ from: string; vmid: number; to: string }>) {
    const t0 = Date.now();
    const tasks = [];
    for (const m of moves) {
      const r = await raw(sc.url, 'POST', `/nodes/${m.from}/qemu/${m.vmid}/migrate`, {
        form: { target: m.to, 'with-local-disks': '1' },
      });
      assert.equal(r.status, 200, r.text);
      tasks.push(sc.state.tasks.get((r.json as { data: string }).data)!);
    }
    const ends: number[] = [];
    for (const [i, t] of tasks.entries())
      void t.done.then(() => {
        ends[i] = Date.now() - t0;
      });
    for (let i = 0; i < 100_000 && tasks.some((t) => t.status !== 'stopped'); i++) {
      mock.timers.tick(1);
      await new Promise((resolve) => setImmediate(resolve));
    }
    return tasks.map((t, i) => ({ end: ends[i]!, exit: t.exitstatus }));
  }
  const near = (actual: number, expected: number, what: string) =>
    assert.ok(Math.abs(actual - expected) <= 10, `${what}: ${actual} ms, expected ${Math.round(expected)} ms`);

  it('one migration alone copies at the network rate', async () => {
    const [a] = await run([{ from: 'n1', vmid: 201, to: 'n2' }]);
    assert.equal(a!.exit, 'OK');
    near(a!.end, migrationMs(2 * GiB, MIGRATION_NETWORK_MBPS * 1e6), 'alone');
  });

  it('two from one node to another share its network; one between two other nodes does not', async () => {
    const r = await run([
      { from: 'n1', vmid: 202, to: 'n2' },
      { from: 'n1', vmid: 203, to: 'n2' },
      { from: 'n3', vmid: 301, to: 'n4' },
    ]);
    assert.deepEqual(
      r.map((x) => x.exit),
      ['OK', 'OK', 'OK'],
    );
    near(r[0]!.end, migrationMs(2 * GiB, (MIGRATION_NETWORK_MBPS * 1e6) / 2), 'n1 -> n2, first');
    near(r[1]!.end, migrationMs(2 * GiB, (MIGRATION_NETWORK_MBPS * 1e6) / 2), 'n1 -> n2, second');
    near(r[2]!.end, migrationMs(2 * GiB, MIGRATION_NETWORK_MBPS * 1e6), 'n3 -> n4');
  });
});
