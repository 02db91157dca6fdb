/**
 * Event-driven progress (issue 16): a task's end wakes the resource waiting for it, and a slot
 * that frees wakes the oldest resource waiting for one. With a task poll of a minute, polling
 * alone would take minutes per step; woken, a fleet gets through create, resize and start at
 * once, and the per-node watcher reads each node's task list instead of every VM polling its own.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Simulator } from '../../src/sim/index.ts';
import { Engine, ownedBy, SITE1, startSim, vm } from './harness.ts';

describe('tasks and slots wake their resources', () => {
  let sim: Simulator;
  let eng: Engine;
  before(async () => {
    sim = await startSim();
    // A minute between looks at a task: only a wake can make these VMs Ready within the test's wait.
    eng = await new Engine(sim, { taskPollMs: 60_000 }).start();
  });
  after(async () => {
    await eng.stop();
    await sim.close();
  });

  it('five creates on one node (two slots): woken through every task and every slot, each VM once', async () => {
    const c = sim.cluster(SITE1);
    c.resetCounters();
    const keys = [1, 2, 3, 4, 5].map((i) => eng.apply(vm(`woken-${i}`, { disk: '12Gi' })));
    for (const k of keys) await eng.waitReady(k);
    for (const k of keys) assert.equal(ownedBy(c, eng.get(k).metadata.uid).length, 1, k);
    const counters = c.counters();
    const perVmStatus = counters['GET /nodes/{node}/tasks/{upid}/status'] ?? 0;
    // Polling would read each task's status every poll; woken, each task's end is read once or twice.
    assert.ok(perVmStatus <= 5 * 6, `task status reads: ${perVmStatus}`);
  });
});
