/**
 * Every "Potential Issue" of the seed (DETAILED_VM_DEPLOYMENT_STEPS.md) -> its documented condition
 * reason on Synced, no VM created in the simulator, and backoff observed (growing delays, a bounded
 * number of API requests per attempt, no create request at all).
 */
import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import type { Simulator } from '../../src/sim/index.ts';
import { raw, waitTask } from '../helpers/sim.ts';
import {
  assertBackoffGrows,
  cond,
  count,
  Engine,
  foreignVm,
  guests,
  IMPORT_IMAGE,
  NODE1,
  ownedBy,
  SEED_IMAGE,
  SITE1,
  startSim,
  vm,
} from './harness.ts';

const CREATE = 'POST /nodes/{node}/qemu';
const CLONE = 'POST /nodes/{node}/qemu/{vmid}/clone';
const CAP = 640;

/** Total API requests to a cluster (every counter). */
function requests(sim: Simulator): number {
  return Object.values(sim.cluster(SITE1).counters()).reduce((a, b) => a + b, 0);
}

describe('the seed\'s "Potential Issues": refused before anything is created, with backoff', () => {
  let sim: Simulator;
  let eng: Engine | undefined;
  before(async () => {
    sim = await startSim();
  });
  afterEach(async () => {
    await eng?.stop();
    eng = undefined;
    sim.cluster(SITE1).clearFaults();
  });
  after(async () => {
    await sim.close();
  });

  /**
   * Apply one resource, wait for `failures` failed reconciles in a row, and check: the reason, no
   * create/clone request, no VM, growing backoff delays, bounded requests per attempt.
   */
  async function refused(name: string, fp: Parameters<typeof vm>[1], reason: string, failures = 5) {
    const c = sim.cluster(SITE1);
    eng = await new Engine(sim).start();
    const vmsBefore = guests(c).length;
    c.resetCounters();
    const key = eng.apply(vm(name, fp));
    const tail = await eng.waitFailures(key, failures);
    const r = eng.get(key);
    const synced = cond(r, 'Synced');
    assert.equal(synced?.status, 'False');
    assert.equal(synced?.reason, reason, `Synced: ${JSON.stringify(synced)}`);
    assert.ok(
      tail.every((a) => a.reason === reason),
      `every attempt failed with ${reason}`,
    );
    assert.equal(count(c, CREATE), 0, 'no create request');
    assert.equal(count(c, CLONE), 0, 'no clone request');
    assert.equal(guests(c).length, vmsBefore, 'no VM in the simulator');
    assert.equal(ownedBy(c, r.metadata.uid).length, 0);
    assert.equal(r.metadata.annotations?.['crossplane.io/external-name'], undefined, 'no VMID reserved');
    assertBackoffGrows(tail, CAP);
    // Bounded: a handful of read requests per attempt, whatever the speed of this machine.
    const attempts = eng.attemptsOf(key).length;
    assert.ok(requests(sim) <= attempts * 12 + 10, `requests ${requests(sim)} for ${attempts} attempts`);
    return { key, r, message: synced!.message ?? '' };
  }

  it('image not found -> ImageNotFound', async () => {
    const { message } = await refused('img-missing', { image: 'local:import/nope.qcow2' }, 'ImageNotFound');
    assert.match(message, /local:import\/nope\.qcow2/);
    assert.match(message, /upload it|fix spec\.forProvider\.image/);
  });

  it('a bare image file name that no storage holds -> ImageNotFound, naming the storages searched', async () => {
    const { message } = await refused('img-missing-bare', { image: 'debian-13.qcow2' }, 'ImageNotFound');
    assert.match(message, /searched: .*local/);
  });

  it('bridge missing -> BridgeNotFound', async () => {
    const { message } = await refused('no-bridge', { network: 'vmbr9' }, 'BridgeNotFound');
    assert.match(message, /vmbr9/);
    assert.match(message, /bridges: vmbr0/);
  });

  it('node unhealthy (node offline) -> NodeUnhealthy; retried with backoff and created once the node is back', async () => {
    const c = sim.cluster(SITE1);
    const fault = c.addFault({ kind: 'node-offline', node: NODE1 });
    const { key, message } = await refused('node-down', {}, 'NodeUnhealthy', 4);
    assert.match(message, new RegExp(NODE1));
    c.removeFault(fault);
    const r = await eng!.waitReady(key);
    assert.equal(count(c, CREATE), 1, 'exactly one create once the node is back');
    assert.equal(ownedBy(c, r.metadata.uid).length, 1);
  });

  it('resources exhausted: more vCPUs than the node has -> InsufficientCapacity', async () => {
    const { message } = await refused('too-many-cpus', { cpu: 8 }, 'InsufficientCapacity');
    assert.match(message, /8 vCPUs/);
  });

  it('resources exhausted: more memory than the node has free -> InsufficientCapacity', async () => {
    const { message } = await refused('too-much-memory', { memory: '300Gi' }, 'InsufficientCapacity');
    assert.match(message, /GiB memory requested/);
  });

  it('a disk bigger than the whole storage -> InsufficientCapacity, confirmed once, then retried only at the backoff cap', async () => {
    const { key, message } = await refused('disk-too-big', { disk: '2Ti' }, 'InsufficientCapacity', 4);
    assert.match(message, /2048\.0 GiB needed on storage 'local-lvm', which holds .* GiB in all/);
    const delays = eng!
      .attemptsOf(key)
      .map((a) => a.delay)
      .filter((d): d is number => d !== undefined);
    assert.ok(delays[0]! < CAP / 4, `the confirmation comes soon: ${delays.join(', ')}`);
    assert.ok(
      delays.slice(1).every((d) => d >= CAP * 0.85),
      `then at the cap: ${delays.join(', ')}`,
    );
  });

  it('a disk that fits in bytes but not in the whole GiB PVE allocates -> StorageFull, not a create PVE refuses', async () => {
    // local-lvm on NODE1 holds the template's 2252 MiB disk, so its free space is a whole GiB and
    // 0.8 of one (less what earlier tests left); half a GiB past the whole ones fits in bytes.
    const free = sim.cluster(SITE1).state.storage(NODE1, 'local-lvm')!.avail / 1024 ** 3;
    assert.ok(free % 1 > 0.5, `free ${free} GiB`);
    const { message } = await refused('whole-gib', { disk: `${Math.floor(free)}.5Gi` }, 'StorageFull', 3);
    assert.match(message, new RegExp(`has ${free.toFixed(1)} GiB free, ${Math.ceil(free)}\\.0 GiB needed`));
  });

  it("a VM's disks on one storage count together: two that each fit, but not both -> StorageFull before any create", async () => {
    const free = sim.cluster(SITE1).state.storage(NODE1, 'local-lvm')!.avail / 1024 ** 3;
    const half = `${Math.ceil(free / 2)}Gi`;
    const { message } = await refused('two-disks', { disk: half, disks: [{ size: half }] }, 'StorageFull', 3);
    assert.match(message, new RegExp(`has ${free.toFixed(1)} GiB free, ${2 * Math.ceil(free / 2)}\\.0 GiB needed`));
  });

  it('a blank VM (no image, template nor disk) counts the 20 GiB its create makes', async () => {
    const c = sim.cluster(SITE1);
    // Another user's VM leaves 10-11 GiB of local-lvm free.
    const filler = 990;
    await foreignVm(
      c,
      filler,
      { scsi0: `local-lvm:${Math.floor(c.state.storage(NODE1, 'local-lvm')!.avail / 1024 ** 3) - 10}` },
      NODE1,
    );
    try {
      const { message } = await refused('blank-20g', { image: undefined, disk: undefined }, 'StorageFull', 3);
      assert.match(message, /GiB free, 20\.0 GiB needed/);
    } finally {
      const res = await raw(c.url, 'DELETE', `/nodes/${NODE1}/qemu/${filler}`);
      assert.equal((await waitTask(c.url, NODE1, (res.json as { data: string }).data)).exitstatus, 'OK');
    }
  });

  it('storage full (storage-full fault) -> StorageFull; created once space is freed', async () => {
    const c = sim.cluster(SITE1);
    const fault = c.addFault({ kind: 'storage-full', node: NODE1, storage: 'local-lvm' });
    const { key, message } = await refused('storage-full', {}, 'StorageFull', 4);
    assert.match(message, /local-lvm/);
    c.removeFault(fault);
    const r = await eng!.waitReady(key);
    assert.equal(count(c, CREATE), 1);
    assert.equal(ownedBy(c, r.metadata.uid).length, 1);
  });

  it('the seed image local:iso/... with an API token on 8.4 -> ImageNotImportable naming the three fixes', async () => {
    const { message } = await refused('seed-image-token', { image: SEED_IMAGE }, 'ImageNotImportable');
    assert.match(message, /ISO-content volume/);
    assert.match(message, /import` content type|local:import\//, 'fix 1: an import storage');
    assert.match(message, /spec\.forProvider\.template/, 'fix 2: a template');
    assert.match(message, /root@pam password/, 'fix 3: password credentials');
  });

  it('the seed image local:iso/... with root@pam password credentials imports from the absolute path', async () => {
    const c = sim.cluster(SITE1);
    eng = await new Engine(sim, { auth: 'password' }).start();
    const key = eng.apply(vm('seed-image-root', { image: SEED_IMAGE, disk: '10Gi' }));
    const r = await eng.waitReady(key);
    const vmid = r.status!.atProvider!.vmId!;
    const create = [...c.state.tasks.values()].find((t) => t.type === 'qmcreate' && t.id === String(vmid));
    assert.ok(create, 'a qmcreate task');
    assert.ok(
      create.log.some((l) => l.includes("importing disk '/var/lib/vz/template/iso/ubuntu-22.04-cloud.img'")),
      `imported from the absolute path: ${create.log.join(' | ')}`,
    );
    assert.equal(create.user, 'root@pam');
    assert.equal(create.tokenid, undefined, 'a ticket, not a token');
    assert.equal(ownedBy(c, r.metadata.uid).length, 1);
  });

  it('a create task that fails for lack of space leaves no VM, backs off on the create schedule, then succeeds', async () => {
    const c = sim.cluster(SITE1);
    eng = await new Engine(sim).start();
    c.resetCounters();
    const vmsBefore = guests(c).length;
    const fault = c.addFault({
      kind: 'task',
      type: 'qmcreate',
      action: 'fail',
      at: 'start',
      count: -1,
      message: 'lvcreate \'pve/vm-disk\' error:   Volume group "pve" has insufficient free space (0 extents)',
    });
    const key = eng.apply(vm('space-task-fails'));
    const tail = await eng.waitRateLimited(key, 4);
    const r = eng.get(key);
    assert.equal(cond(r, 'Synced')?.reason, 'CreateFailed');
    assert.match(cond(r, 'Synced')?.message ?? '', /insufficient free space/);
    assert.equal(guests(c).length, vmsBefore, 'the failed creates left no VM');
    // the failed-create schedule (40, 80, 160, 320, 640 here): one more step per failed create
    assertBackoffGrows(tail, 640);
    const creates = count(c, CREATE);
    assert.ok(creates >= 4 && creates <= tail.length + 1, `creates ${creates} for ${tail.length} failures`);
    c.removeFault(fault);
    const ok = await eng.waitReady(key);
    assert.equal(ownedBy(c, ok.metadata.uid).length, 1);
    assert.equal(guests(c).length, vmsBefore + 1, 'exactly one VM in the end');
  });
});

describe('import not supported on PVE 6.4', () => {
  let sim: Simulator;
  let eng: Engine;
  before(async () => {
    sim = await startSim({ profile: '6.4' });
    eng = await new Engine(sim).start();
  });
  after(async () => {
    await eng.stop();
    await sim.close();
  });

  for (const image of [SEED_IMAGE, IMPORT_IMAGE, 'ubuntu-22.04-cloud.img'])
    it(`a cloud image (${image}) -> ImageNotImportable naming the template fix; no VM; backoff`, async () => {
      const c = sim.cluster(SITE1);
      const vmsBefore = guests(c).length;
      const key = eng.apply(vm(`old-pve-${image.length}`, { image }));
      const tail = await eng.waitFailures(key, 4);
      const r = eng.get(key);
      assert.equal(cond(r, 'Synced')?.reason, 'ImageNotImportable');
      const message = cond(r, 'Synced')?.message ?? '';
      assert.match(message, /6\.4/);
      assert.match(message, /spec\.forProvider\.template/);
      assert.equal(count(c, CREATE), 0);
      assert.equal(guests(c).length, vmsBefore);
      assertBackoffGrows(tail, CAP);
    });

  it('the template path works on 6.4', async () => {
    const key = eng.apply(vm('old-pve-template', { image: undefined, template: { name: 'ubuntu-2204-cloudinit' } }));
    const r = await eng.waitReady(key);
    assert.equal(ownedBy(sim.cluster(SITE1), r.metadata.uid).length, 1);
  });
});
