/**
 * A destroy PVE may still apply late (src/vm/recent-destroys.ts, fault search F89): a VMID whose
 * destroy ended within twice `unknownOutcomeWaitMs` is not chosen for a create, whoever destroyed
 * it; and a create at a VMID it did not choose in the same reconcile (here one the user set) waits
 * for that window's end when the provider's own credentials destroyed it, not when a person's did.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { SimCluster, Simulator } from '../../src/sim/index.ts';
import { AS_OPERATOR, raw, waitTask } from '../helpers/sim.ts';
import { cond, Engine, NODE1, ownedBy, SITE1, startSim, twoNodeTopology, vm } from './harness.ts';

describe('a destroy PVE may still apply late', () => {
  let sim: Simulator;
  let c: SimCluster;
  before(async () => {
    sim = await startSim();
    c = sim.cluster(SITE1);
  });
  after(() => sim.close());

  /** A person destroys VM `vmid` with their own token, and waits for the task. */
  async function destroyByHand(vmid: number): Promise<void> {
    await raw(c.url, 'POST', `/nodes/${NODE1}/qemu/${vmid}/status/stop`, { headers: AS_OPERATOR }).then((r) =>
      waitTask(c.url, NODE1, (r.json as { data: string }).data),
    );
    const r = await raw(c.url, 'DELETE', `/nodes/${NODE1}/qemu/${vmid}?purge=1`, { headers: AS_OPERATOR });
    assert.equal(r.status, 200, r.text);
    await waitTask(c.url, NODE1, (r.json as { data: string }).data);
  }

  it('a VMID destroyed within the window is not chosen again: by the provider (its delete), nor by a person', async () => {
    // A 60 s window: the test is over long before it ends.
    const eng = await new Engine(sim, { unknownOutcomeWaitMs: 30_000 }).start();
    try {
      const first = eng.apply(vm('late-a'));
      const a = (await eng.waitReady(first)).status!.atProvider!.vmId!;
      eng.delete(first);
      await eng.waitGone(first);
      assert.equal(c.state.vms.has(a), false);
      const second = eng.apply(vm('late-b'));
      const b = (await eng.waitReady(second)).status!.atProvider!.vmId!;
      assert.notEqual(b, a, `VMID ${a}, destroyed by the provider moments ago, was taken again`);
      assert.ok(b > a, 'the next free one after it');

      await destroyByHand(b);
      const third = eng.apply(vm('late-c'));
      const made = (await eng.waitReady(third)).status!.atProvider!.vmId!;
      assert.ok(made !== a && made !== b, `VMID ${made}: one destroyed moments ago was taken again`);
    } finally {
      await eng.stop();
    }
  });

  it("a create at the VMID the user set waits out the window after the provider's own destroy of it, not after a person's", async () => {
    // A 4 s window.
    const eng = await new Engine(sim, { unknownOutcomeWaitMs: 2_000, pollIntervalMs: 200 }).start();
    try {
      const key = eng.apply(vm('late-fixed', { vmid: 150 }));
      await eng.waitReady(key);
      eng.delete(key);
      await eng.waitGone(key);
      const destroyed = [...c.state.tasks.values()].find((t) => t.type === 'qmdestroy' && t.id === '150');
      assert.ok(destroyed?.endtime, 'the provider destroyed VM 150');
      // Applied again (a new resource, as after `kubectl delete` and `kubectl apply`).
      const again = eng.apply(vm('late-fixed', { vmid: 150 }));
      const waiting = await eng.waitSynced(again, 'VMIDRecentlyDestroyed');
      assert.match(
        waiting.status!.conditions!.find((x) => x.type === 'Synced')!.message!,
        /VM 150 was destroyed by these credentials less than 4 s ago, and PVE may still apply a destroy of it that was sent earlier/,
      );
      assert.equal(c.state.vms.has(150), false, 'nothing made within the window');
      const made = await eng.waitReady(again);
      assert.equal(made.status!.atProvider!.vmId, 150);
      // (Task times are whole seconds.)
      const creates = [...c.state.tasks.values()].filter((t) => t.type === 'qmcreate' && t.id === '150');
      assert.equal(creates.length, 2);
      assert.ok(creates[1]!.starttime - destroyed.endtime! >= 4, 'made once the window was over');
      assert.equal(ownedBy(c, made.metadata.uid).length, 1);

      // A person's destroy: made again at once.
      await destroyByHand(150);
      const before = eng.attemptsOf(again).length;
      const back = await eng.waitFor(
        again,
        // (Its marker and no lock: the create's placeholder at 150 comes while the status still says Ready.)
        (r) =>
          ownedBy(c, r.metadata.uid).length === 1 &&
          c.state.vms.get(150)?.config.lock === undefined &&
          r.status?.atProvider?.step === 'Ready',
        'VM 150 made again',
      );
      assert.equal(ownedBy(c, back.metadata.uid).length, 1);
      assert.ok(
        !eng
          .attemptsOf(again)
          .slice(before)
          .some((x) => x.reason === 'VMIDRecentlyDestroyed'),
        "a person's destroy made the create wait",
      );
    } finally {
      await eng.stop();
    }
  });
});

describe('a node whose API does not answer (listed online, pveproxy or pvedaemon hung)', () => {
  let sim: Simulator;
  let c: SimCluster;
  before(async () => {
    sim = await startSim({ topology: twoNodeTopology('late-destroy-hung.yaml') });
    c = sim.cluster(SITE1);
  });
  after(() => sim.close());

  it('holds only the creates made on it (595 from pveproxy): one on the other node is made at once, one on it once it answers', async () => {
    // pveproxy hands /nodes/pve-b/... to pve-b and answers 595 when it cannot reach it. A late
    // destroy sent there reaches only a VM on pve-b (QemuConfig.pm cfs_config_path): a create on
    // pve-a is clear of it. Before, every create of the site waited for pve-b's task list.
    const down = c.addFault({
      kind: 'request',
      path: 're:^/nodes/pve-b/',
      status: 595,
      message: 'Connection timed out',
      count: 1_000_000,
    });
    const eng = await new Engine(sim, { unknownOutcomeWaitMs: 2_000, pollIntervalMs: 50 }).start();
    try {
      const onA = eng.apply(vm('hung-a', { node: 'pve-a' }));
      const onB = eng.apply(vm('hung-b', { node: 'pve-b' }));
      const a = await eng.waitReady(onA);
      assert.equal(ownedBy(c, a.metadata.uid).length, 1);
      const held = await eng.waitFor(
        onB,
        (r) => /pve-b/.test(cond(r, 'Synced')?.message ?? '') && cond(r, 'Synced')?.status === 'False',
        'the create on pve-b held, naming it',
      );
      assert.equal(ownedBy(c, held.metadata.uid).length, 0, 'nothing made on pve-b while it does not answer');
      c.removeFault(down);
      const b = await eng.waitReady(onB);
      assert.equal(ownedBy(c, b.metadata.uid).length, 1);
    } finally {
      c.removeFault(down);
      await eng.stop();
    }
  });

  it('a node that hangs (no answer at all) holds one read of its tasks, and a create elsewhere waits for it at most a moment', async () => {
    // A simulator of its own: with a VM of ours on pve-b (the test before), a new runtime's look by
    // marker would wait for pve-b too, as it must (that VM may be the resource's).
    const sim = await startSim({ topology: twoNodeTopology('late-destroy-stall.yaml') });
    const c = sim.cluster(SITE1);
    const hung = c.addFault({ kind: 'applied-late', path: 're:^/nodes/pve-b/', delayMs: 365 * 24 * 3600_000 });
    const eng = await new Engine(sim, { unknownOutcomeWaitMs: 2_000, pollIntervalMs: 50 }).start();
    try {
      const keys = ['stall-a1', 'stall-a2', 'stall-a3'].map((n) => eng.apply(vm(n, { node: 'pve-a' })));
      for (const k of keys) assert.equal(ownedBy(c, (await eng.waitReady(k)).metadata.uid).length, 1);
      const reads = c.faults.active.get(hung)!.seen;
      assert.ok(reads >= 1 && reads <= 2, `${reads} requests held at pve-b: one read at a time, not one per choice`);
    } finally {
      c.removeFault(hung);
      await eng.stop();
      await sim.close();
    }
  });
});
