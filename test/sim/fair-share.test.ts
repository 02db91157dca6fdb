/**
 * The bandwidth model and the storage lock through the API (src/sim/bandwidth.ts,
 * src/sim/storage-lock.ts): concurrent imports on one storage share it, imports on different
 * storages do not slow each other, an import that ends speeds up the others, and creates
 * allocate one at a time under the storage's lock, which a waiter gives up after 10 s with PVE's
 * message (the node's flock for a local storage, the cluster-wide cfs lock for a shared one).
 *
 * Deterministic: setTimeout and Date are mocked, the simulator runs at speed 1 and the test moves
 * time 1 ms at a time, so the simulated times are the same on every run. Each task's end is read
 * off the mocked clock when its `done` settles. The image is 1 GiB and the storages copy
 * 107.3741824 MB/s, so an import alone copies for 10 s.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it, mock } from 'node:test';
import type { SimCluster, Simulator } from '../../src/sim/index.ts';
import { DURATIONS } from '../../src/sim/routes/qemu-common.ts';
import { STORAGE_LOCK_TIMEOUT_MS } from '../../src/sim/storage-lock.ts';
import { parseTopology } from '../../src/sim/topology.ts';
import { raw, startTestSim } from '../helpers/sim.ts';

const BW = 107.3741824; // MB/s: 1 GiB in 10 s
const COPY_MS = 10_000;
const A = DURATIONS.alloc;

const TOPOLOGY = `clusters:
  - name: site-1
    listen: 127.0.0.1:0
    nodes:
      - name: n1
        cpus: 64
        memory: 512G
        storages:
          - { id: img, type: dir, content: [import, images], total: 100G, bandwidth: 10000,
              volumes: [{ name: import/big.qcow2, size: 1G }, { name: import/half.qcow2, size: 512M }] }
          - { id: thin, type: lvmthin, content: [images], total: 1T, bandwidth: ${BW} }
          - { id: thin2, type: lvmthin, content: [images], total: 1T, bandwidth: ${BW} }
          - { id: ceph, type: rbd, content: [images], total: 8T, shared: true, bandwidth: ${BW} }
      - name: n2
        cpus: 64
        memory: 512G
        storages:
          - { id: thin, type: lvmthin, content: [images], total: 1T, bandwidth: ${BW} }
          - { id: ceph, type: rbd, content: [images], total: 8T, shared: true, bandwidth: ${BW} }
`;

describe('fair share and storage locks through the API (mocked clock, speed 1)', () => {
  let sim: Simulator;
  let sc: SimCluster;
  let vmid = 100;
  before(async () => {
    mock.timers.enable({ apis: ['setTimeout', 'Date'] });
    sim = await startTestSim({ speed: 1, ssh: false, topology: parseTopology(TOPOLOGY, 'fair-share.yaml') });
    sc = sim.cluster('site-1');
  });
  after(async () => {
    await sim.close();
    mock.timers.reset();
  });

  /** Send the creates at once (no simulated time passes), then run the clock until every task ended. */
  async function run(creates: Array<{ node?: string; form: Record<string, string> }>) {
    const t0 = Date.now();
    const upids: string[] = [];
    for (const c of creates) {
      const node = c.node ?? 'n1';
      const r = await raw(sc.url, 'POST', `/nodes/${node}/qemu`, { form: { vmid: String(vmid++), ...c.form } });
      assert.equal(r.status, 200, r.text);
      upids.push((r.json as { data: string }).data);
    }
    const ends: number[] = [];
    const tasks = upids.map((u) => sc.state.tasks.get(u)!);
    for (const [i, t] of tasks.entries())
      void t.done.then(() => {
        ends[i] = Date.now() - t0;
      });
    for (let i = 0; i < 200_000 && tasks.some((t) => t.status !== 'stopped'); i++) {
      mock.timers.tick(1);
      await new Promise((resolve) => setImmediate(resolve));
    }
    return tasks.map((t, i) => ({ end: ends[i]!, exit: t.exitstatus ?? '' }));
  }

  const importTo = (storage: string, image = 'big') => ({
    form: { scsi0: `${storage}:0,import-from=img:import/${image}.qcow2` },
  });
  /** Within the 1 ms steps of the test's clock (each chained step may land up to 1 ms late). */
  const near = (actual: number, expected: number, what: string) =>
    assert.ok(Math.abs(actual - expected) <= 10, `${what}: ${actual} ms, expected ${expected} ms`);

  it('one import alone: the allocation, then the copy at the storage bandwidth', async () => {
    const [a] = await run([importTo('thin')]);
    assert.equal(a!.exit, 'OK');
    near(a!.end, A + COPY_MS, 'alone');
  });

  it('two concurrent imports on one storage take the fair-share time', async () => {
    // The allocations take turns under the lock (A at 0, B at 0.4 s); from then on the storage
    // never idles, so both copies together end 2 x 10 s after the first allocation ended.
    const [a, b] = await run([importTo('thin'), importTo('thin')]);
    near(a!.end, 2 * COPY_MS, 'first');
    near(b!.end, 2 * COPY_MS + A, 'second');
  });

  it('three concurrent imports on one storage take the fair-share time', async () => {
    // First allocation 0-0.4 s, second 0.4-0.8 s, third 0.8-1.2 s; the storage is busy from
    // 0.4 s on, so the last copy ends at 0.4 s + 3 x 10 s; the others shortly before it.
    const r = await run([importTo('thin'), importTo('thin'), importTo('thin')]);
    near(r[0]!.end, 3 * COPY_MS - 1.5 * A, 'first');
    near(r[1]!.end, 3 * COPY_MS + 0.5 * A, 'second');
    near(r[2]!.end, 3 * COPY_MS + A, 'third');
    assert.deepEqual(
      r.map((x) => x.exit),
      ['OK', 'OK', 'OK'],
    );
  });

  it('imports on different storages do not slow each other (local storages of two nodes included)', async () => {
    const r = await run([importTo('thin'), importTo('thin2'), { node: 'n2', form: { scsi0: 'thin:1' } }]);
    near(r[0]!.end, A + COPY_MS, 'thin');
    near(r[1]!.end, A + COPY_MS, 'thin2');
    near(r[2]!.end, A, "n2's thin");
  });

  it('an import that ends speeds up the other', async () => {
    // Both share from 0.8 s; the half-size one ends at 10 s, the big one then has the storage
    // alone: it ends at 15.4 s instead of the 20.4 s it would take beside another full copy.
    const [half, big] = await run([importTo('thin', 'half'), importTo('thin')]);
    near(half!.end, COPY_MS, 'half');
    near(big!.end, 1.5 * COPY_MS + A, 'big');
  });

  it('creates on one local storage allocate one at a time; a waiter gives up after 10 s', async () => {
    // 27 new disks, 0.4 s each under the node's flock: the k-th waits k x 0.4 s, so 25 fit in
    // the 10 s and the last two time out with lock_file's message.
    const n = 27;
    const r = await run(Array.from({ length: n }, () => ({ form: { scsi0: 'thin:1' } })));
    const fits = Math.ceil(STORAGE_LOCK_TIMEOUT_MS / A);
    r.slice(0, fits).forEach((x, k) => {
      assert.equal(x.exit, 'OK', `create ${k}`);
      near(x.end, (k + 1) * A, `create ${k}`);
    });
    for (const x of r.slice(fits))
      assert.match(x.exit, /can't lock file '\/var\/lock\/pve-manager\/pve-storage-thin' - got timeout$/);
  });

  it('a shared storage is locked cluster-wide: creates on two nodes take turns, timeouts say cfs-lock', async () => {
    const n = 27;
    const r = await run(
      Array.from({ length: n }, (_, k) => ({ node: k % 2 ? 'n2' : 'n1', form: { scsi0: 'ceph:1' } })),
    );
    const fits = Math.ceil(STORAGE_LOCK_TIMEOUT_MS / A);
    r.slice(0, fits).forEach((x, k) => {
      assert.equal(x.exit, 'OK', `create ${k}`);
      near(x.end, (k + 1) * A, `create ${k}`);
    });
    for (const x of r.slice(fits)) assert.match(x.exit, /cfs-lock 'storage-ceph' error: got lock request timeout$/);
  });
});
