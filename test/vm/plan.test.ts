/**
 * The per-resource plan read from the live VMs (what `plan` and `apply` print before acting):
 * create, adopt, update in place, update that waits for a reboot, no-op, refused; and the plan
 * itself changes nothing in Proxmox.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { ProxmoxVM } from '../../src/api/proxmoxvm.ts';
import { keyOf } from '../../src/engine/resource.ts';
import type { SimCluster, Simulator } from '../../src/sim/index.ts';
import { planResources } from '../../src/vm/plan.ts';
import { describePlans } from '../../src/vm/plan-text.ts';
import { ownershipMarker } from '../../src/vm/spec.ts';
import { raw, waitTask } from '../helpers/sim.ts';
import { count, Engine, foreignVm, mutations, NODE1, putConfig, SITE1, startSim, vm } from './harness.ts';

describe('plan: what a reconcile would do, from the live VMs', () => {
  let sim: Simulator;
  let eng: Engine;
  before(async () => {
    sim = await startSim();
    eng = await new Engine(sim).start();
  });
  after(async () => {
    await eng.stop();
    await sim.close();
  });

  /** Plan the store's copy of each named resource with the given spec changes. */
  async function plan(...rs: ReturnType<typeof vm>[]) {
    const c = sim.cluster(SITE1);
    const before = JSON.stringify(mutations(c));
    const withState = rs.map((r) => {
      const cur = eng.store.getSync(`default/${r.metadata.name}`);
      return cur ? { ...cur, spec: r.spec } : { ...r, metadata: { ...r.metadata, namespace: 'default', uid: 'u-new' } };
    });
    const out = await planResources(withState, (r) => eng.connector.connect(r), keyOf);
    assert.equal(JSON.stringify(mutations(c)), before, 'planning changes nothing');
    return out;
  }

  it('no-op, update in place, update that waits for a reboot, create', async () => {
    const r = await eng.waitReady(eng.apply(vm('plan-1')));
    const vmid = r.status!.atProvider!.vmId!;
    const [same] = await plan(vm('plan-1'));
    assert.equal(same!.action, 'no-op');
    assert.deepEqual(same!.changes, []);

    const [tags] = await plan(vm('plan-1', { tags: ['web'] }));
    assert.equal(tags!.action, 'update');
    assert.deepEqual(
      tags!.changes.map((f) => [f.key, f.field, f.reboot]),
      [['tags', 'tags', false]],
    );

    const [mem] = await plan(vm('plan-1', { memory: '2Gi', cpu: 2 }));
    assert.equal(mem!.action, 'update-reboot');
    assert.deepEqual(mem!.changes.map((f) => [f.key, f.from, f.to, f.reboot]).sort(), [
      ['cores', '1', '2', true],
      ['memory', '1024 MiB', '2048 MiB', true],
    ]);
    assert.equal(mem!.vmid, vmid);

    const [disk] = await plan(vm('plan-1', { disk: '16Gi' }));
    assert.equal(disk!.action, 'update');
    assert.deepEqual(
      disk!.changes.map((f) => [f.key, f.field, f.from, f.to]),
      [['scsi0', 'disk', '8G', '16G']],
    );

    const [fresh] = await plan(vm('plan-new'));
    assert.equal(fresh!.action, 'create');
  });

  it('a resource with no state whose VM exists is adopted; a refused one says why', async () => {
    await eng.waitReady(eng.apply(vm('plan-adopt')));
    const lost = { ...vm('plan-adopt'), metadata: { ...vm('plan-adopt').metadata, namespace: 'default', uid: 'u-2' } };
    // Another runtime whose state does not hold it (a lost or other state file).
    const other = new Engine(sim);
    const [adopt] = await planResources([lost], (r) => other.connector.connect(r), keyOf).finally(() => other.stop());
    assert.equal(adopt!.action, 'adopt');

    // Not created yet: what its create would be refused for at once is refused in the plan (apply
    // failed it right after planning a create), naming what is missing and the fix.
    const [big, bridge, image, storage] = await plan(
      vm('plan-bad', { cpu: 64 }),
      vm('plan-bridge', { network: 'vmbr9' }),
      vm('plan-image', { image: 'local:import/nosuch.qcow2' }),
      vm('plan-storage', { storage: 'nosuch' }),
    );
    assert.deepEqual(
      [big, bridge, image, storage].map((p) => [p!.action, p!.reason]),
      [
        ['refused', 'InsufficientCapacity'],
        ['refused', 'BridgeNotFound'],
        ['refused', 'ImageNotFound'],
        ['refused', 'StorageNotFound'],
      ],
    );
    assert.match(bridge!.message ?? '', /bridge 'vmbr9' does not exist on node ml110-01 \(bridges: .*vmbr0/);
    // A read that fails says nothing of what the create would meet: still planned as a create
    // (the create's own checks read again, and wait or fail as they do).
    const unread = sim.cluster(SITE1).addFault({
      kind: 'request',
      status: 500,
      message: 'unable to read network config',
      method: 'GET',
      path: '/nodes/{node}/network',
    });
    // (A runtime of its own: the site's node facts read above would serve it.)
    const alone = new Engine(sim);
    try {
      const waits = {
        ...vm('plan-waits', { network: 'vmbr7' }),
        metadata: { ...vm('plan-waits').metadata, uid: 'u-4' },
      };
      const [shown] = await planResources([waits], (r) => alone.connector.connect(r), keyOf);
      assert.equal(shown!.action, 'create');
    } finally {
      sim.cluster(SITE1).removeFault(unread);
      await alone.stop();
    }
    // A site change is a remote migration, shown before it is made: from, to, how, how long.
    const vmsThere = sim.cluster('site-2').state.vms.size;
    const [site] = await plan(vm('plan-1', { site: 'site-2', node: 'r630-01' }));
    assert.equal(site!.action, 'update');
    assert.deepEqual(
      site!.changes.map((f) => [f.field, f.from, f.to]),
      [['site', 'site-1/ml110-01', 'site-2/r630-01']],
    );
    assert.match(site!.changes[0]!.detail ?? '', /^remote migrate, online, storage local-lvm:local-lvm, about \d+ s$/);
    assert.equal(sim.cluster('site-2').state.vms.size, vmsThere, 'planning created nothing on site-2');
  });

  it("a plan reads the node facts its create's checks need, once each; carried out at once (apply), its create's reads start with it", async () => {
    const c = sim.cluster(SITE1);
    const nodeReads = () =>
      ['GET /nodes/{node}/status', 'GET /nodes/{node}/network', 'GET /nodes/{node}/storage'].map((k) => count(c, k));
    const fresh = { ...vm('plan-ahead'), metadata: { ...vm('plan-ahead').metadata, namespace: 'default', uid: 'u-3' } };
    // Runtimes of their own: a site's node facts are shared by its resources, and these have none read yet.
    const alone = new Engine(sim);
    const first = nodeReads();
    const [shown] = await planResources([fresh], (r) => alone.connector.connect(r), keyOf).finally(() => alone.stop());
    assert.equal(shown!.action, 'create');
    assert.deepEqual(
      nodeReads(),
      first.map((n) => n + 1),
      "a plan alone (plan, apply before its confirmation) reads the node's status, bridges and storages once each, for what the create would be refused for",
    );
    const before = nodeReads();
    const applying = new Engine(sim);
    const changes = JSON.stringify(mutations(c));
    try {
      const [carried] = await planResources([fresh], (r) => applying.connector.connect(r), keyOf, 4, {
        readAhead: (key) => key === 'default/plan-ahead',
      });
      assert.equal(carried!.action, 'create');
      // Started, not awaited: the plan returns without them; they arrive at once.
      for (let i = 0; i < 200 && nodeReads().some((n, j) => n === before[j]); i++)
        await new Promise((resolve) => setTimeout(resolve, 10));
      assert.ok(
        nodeReads().every((n, j) => n === before[j]! + 1),
        `the node's status, bridges and storages read once each: ${before} -> ${nodeReads()}`,
      );
      assert.equal(JSON.stringify(mutations(c)), changes, 'reads only');
    } finally {
      await applying.stop();
    }
  });

  /**
   * A second VM of `r`'s identity on cluster `c` at `vmid`, as a create whose state was lost leaves
   * it (this installation's marker for a uid no resource holds, our tag, the resource's name).
   */
  async function twin(r: ProxmoxVM, c: SimCluster, node: string, vmid: number): Promise<void> {
    const installation = /installation=(\S+)/.exec(
      sim.cluster(SITE1).state.vms.get(r.status!.atProvider!.vmId!)!.config.description ?? '',
    )![1]!;
    const lost = { ...r, metadata: { ...r.metadata, uid: '0b5e6a0e-5f1c-4c3e-9d0e-0000000a11e5' } };
    await foreignVm(
      c,
      vmid,
      { name: r.metadata.name, tags: 'provider-proxmox', description: ownershipMarker(lost, { installation, vmid }) },
      node,
    );
  }

  async function destroy(c: SimCluster, node: string, vmid: number): Promise<void> {
    const res = await raw(c.url, 'DELETE', `/nodes/${node}/qemu/${vmid}`, {});
    assert.equal(res.status, 200);
    assert.equal((await waitTask(c.url, node, (res.json as { data: string }).data)).exitstatus, 'OK');
  }

  /** The stored resource planned as `plan` (the CLI) plans it: a process of its own, nothing cached. */
  async function planFresh(r: ProxmoxVM) {
    const alone = new Engine(sim);
    const clusters = sim.clusters.map((c) => JSON.stringify(mutations(c)));
    try {
      const [p] = await planResources([r], (x) => alone.connector.connect(x), keyOf);
      assert.deepEqual(
        sim.clusters.map((c) => JSON.stringify(mutations(c))),
        clusters,
        'planning changes nothing on any site',
      );
      return p!;
    } finally {
      await alone.stop();
    }
  }

  it('a twin of the same identity, on the same site or another, is shown as the duplicate the apply destroys', async () => {
    const r = await eng.waitReady(eng.apply(vm('plan-twin')));
    const vmid = r.status!.atProvider!.vmId!;
    const c1 = sim.cluster(SITE1);
    const c2 = sim.cluster('site-2');
    // On its own site, at a higher VMID: the twin goes (duplicates.ts keeps the lowest).
    await twin(r, c1, NODE1, 870);
    const same = await planFresh(r);
    assert.equal(same.action, 'retire-duplicate');
    assert.equal(same.vmid, vmid);
    assert.deepEqual(
      same.changes.map((f) => [f.key, f.from, f.to]),
      [['duplicate', `VM 870 on node ${NODE1}`, '(destroyed)']],
    );
    assert.match(same.changes[0]!.detail ?? '', new RegExp(`VM ${vmid} is kept, VM 870 is destroyed`));
    const text = describePlans([same]).join('\n');
    assert.match(text, /- retire-duplicate +default\/plan-twin/);
    assert.match(text, /1 duplicate VM\(s\) to destroy/);
    // With another twin after it, the one an operator protected goes last: the other first.
    await putConfig(c1, NODE1, 870, { protection: '1' });
    await twin(r, c1, NODE1, 872);
    const next = await planFresh(r);
    assert.deepEqual(
      next.changes.map((f) => [f.key, f.from, f.to]),
      [['duplicate', `VM 872 on node ${NODE1}`, '(destroyed)']],
    );
    await putConfig(c1, NODE1, 870, { protection: '0' });
    await destroy(c1, NODE1, 870);
    await destroy(c1, NODE1, 872);

    // On another site, never started while the resource's VM runs: the twin there goes.
    await twin(r, c2, 'r630-01', 871);
    const elsewhere = await planFresh(r);
    assert.equal(elsewhere.action, 'retire-duplicate');
    assert.deepEqual(
      elsewhere.changes.map((f) => [f.key, f.from, f.to]),
      [['duplicate', 'VM 871 on site site-2, node r630-01', '(destroyed)']],
    );
    assert.match(elsewhere.changes[0]!.detail ?? '', /does not run where the other does: destroyed/);
    assert.ok(c2.state.vms.has(871), 'the plan destroyed nothing');
    // Protected by an operator: apply leaves it (duplicates-elsewhere.ts), so the plan does not say it goes.
    await putConfig(c2, 'r630-01', 871, { protection: '1' });
    assert.equal((await planFresh(r)).action, 'no-op');
    await putConfig(c2, 'r630-01', 871, { protection: '0' });
    await destroy(c2, 'r630-01', 871);
    assert.equal((await planFresh(r)).action, 'no-op');
  });
});
