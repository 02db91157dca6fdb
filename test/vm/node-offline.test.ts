/**
 * A Ready VM whose node goes offline (src/vm/node-offline.ts onOfflineNode): the bulk list shows the
 * node `offline` and the VM `status: unknown`, so the resource is Ready False (NodeOffline), saying
 * what becomes of the VM, and sends the node nothing; once a node that crashed is back, its VM is
 * stopped (no `onboot`: its startall leaves it) and the provider starts it again. A resize whose
 * worker died with the node after the volume grew is reported (DiskSizeStale), not sent for good. A
 * VM deleted meanwhile waits for the node (Synced False NodeOffline, with what to do), then goes.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Simulator } from '../../src/sim/index.ts';
import { cond, Engine, NODE1, SITE1, startSim, vm, waitUntil } from './harness.ts';

describe('a VM whose node goes offline', () => {
  let sim: Simulator;
  let eng: Engine;
  before(async () => {
    sim = await startSim();
    eng = await new Engine(sim, { pollIntervalMs: 200 }).start();
  });
  after(async () => {
    await eng.stop();
    await sim.close();
  });

  it('crashed: Ready False NodeOffline with what happens next; booted: started again by the provider', async () => {
    const c = sim.cluster(SITE1);
    const key = eng.apply(vm('offline-1'));
    const vmid = (await eng.waitReady(key)).status!.atProvider!.vmId!;
    const crash = c.addFault({ kind: 'node-crash', node: NODE1 });
    const down = await eng.waitFor(key, (x) => cond(x, 'Ready')?.reason === 'NodeOffline', 'NodeOffline');
    assert.equal(cond(down, 'Ready')?.status, 'False');
    assert.match(
      cond(down, 'Ready')?.message ?? '',
      new RegExp(`^node ${NODE1} of site ${SITE1} is offline: the state of VM ${vmid} is unknown until it is back`),
    );
    assert.equal(down.status?.atProvider?.state, 'unknown');
    assert.equal(c.state.vms.get(vmid)?.status, 'stopped', 'the crash stopped it');
    c.resetCounters();
    c.removeFault(crash);
    const up = await eng.waitReady(key);
    assert.equal(up.status?.atProvider?.state, 'running');
    assert.equal(c.state.vms.get(vmid)?.status, 'running');
    const starts = [...c.state.tasks.values()].filter((t) => t.type === 'qmstart' && t.id === String(vmid));
    assert.ok(
      starts.some((t) => t.user !== 'root@pam' || t.tokenid),
      `started by the provider's credentials: ${starts.map((t) => t.upid).join(', ')}`,
    );
  });

  it('a resize whose worker died with its node after the volume grew: DiskSizeStale after the boot, not a resize for good', async () => {
    const c = sim.cluster(SITE1);
    const key = eng.apply(vm('offline-resize', { disk: '8Gi' }));
    const vmid = (await eng.waitReady(key)).status!.atProvider!.vmId!;
    c.addFault({ kind: 'task', type: 'resize', id: String(vmid), action: 'stall', step: 1 });
    eng.apply(vm('offline-resize', { disk: '16Gi' }));
    while (![...c.faults.active.values()].some((f) => f.reached)) await new Promise((r) => setTimeout(r, 5));
    const crash = c.addFault({ kind: 'node-crash', node: NODE1 });
    for (const [id, f] of c.faults.active) if (f.spec.kind === 'task') c.removeFault(id);
    await eng.waitFor(key, (x) => cond(x, 'Ready')?.reason === 'NodeOffline', 'NodeOffline');
    // Nothing more is sent to the node while the list shows it offline: each reconcile retried
    // the task's read against it before (about 1.7 s of real time each).
    c.resetCounters();
    const seen = eng.attemptsOf(key).length;
    await waitUntil(() => (eng.attemptsOf(key).length >= seen + 3 ? true : undefined), 'three reconciles', 30_000);
    assert.equal(c.counters()['GET /nodes/{node}/tasks/{upid}/status'] ?? 0, 0);
    c.removeFault(crash);
    const stale = await eng.waitSynced(key, 'DiskSizeStale');
    const reasons = eng.attemptsOf(key).map((x) => x.reason);
    assert.ok(reasons.includes('TaskDied'), `the dead resize read as such: ${reasons.join(', ')}`);
    assert.ok(!reasons.includes('TaskFailed'), 'not as a refusal, which stops apply');
    assert.match(
      cond(stale, 'Synced')?.message ?? '',
      new RegExp(`Fix: qm disk rescan --vmid ${vmid} on node ${NODE1}`),
    );
  });

  it('deleted while its node is offline: Synced False NodeOffline with what to do, nothing sent to the node; destroyed once it is back', async () => {
    const c = sim.cluster(SITE1);
    const key = eng.apply(vm('offline-delete'));
    const vmid = (await eng.waitReady(key)).status!.atProvider!.vmId!;
    const crash = c.addFault({ kind: 'node-crash', node: NODE1 });
    await eng.waitFor(key, (x) => cond(x, 'Ready')?.reason === 'NodeOffline', 'NodeOffline');
    eng.delete(key);
    const waiting = await eng.waitSynced(key, 'NodeOffline');
    assert.match(
      cond(waiting, 'Synced')?.message ?? '',
      new RegExp(
        `node ${NODE1} of site ${SITE1} is offline: VM ${vmid} cannot be destroyed until it is back.*mv /etc/pve/nodes/${NODE1}/qemu-server/${vmid}\\.conf`,
      ),
    );
    c.resetCounters();
    const seen = eng.attemptsOf(key).length;
    await waitUntil(() => (eng.attemptsOf(key).length >= seen + 2 ? true : undefined), 'two reconciles', 30_000);
    assert.deepEqual(
      Object.keys(c.counters()).filter((k) => /\/qemu\/\{vmid\}/.test(k)),
      [],
      'nothing asked of the VM on the offline node',
    );
    c.removeFault(crash);
    await eng.waitGone(key);
    assert.equal(c.state.vms.has(vmid), false);
  });
});
