/**
 * A resource that becomes ready brings the runtime's next check forward (LocalRuntime.runUntil):
 * the VM that completes a phase opens the next one at once, not a tick later. Here the tick is
 * ten minutes, longer than the test may run: a run that ends is one whose checks were woken by
 * its resources, and one that is not woken would time out. No timing is asserted.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { localRuntimeWorld } from '../helpers/local-runtime.ts';
import { vm } from '../vm/harness.ts';

/** A check interval no run of this test lasts: every check after the first was woken. */
const TICK_NEVER_MS = 10 * 60_000;

describe('runUntil: a resource that settles wakes the check', () => {
  const world = localRuntimeWorld('pp-check-wake-');
  const runtime = world.runtime;

  it('a gate opened by a Ready VM admits the next one without waiting for the tick', async () => {
    const rt = runtime('wake.db');
    const first = vm('wake-first', { memory: '256Mi', disk: '4Gi' });
    const second = vm('wake-second', { memory: '256Mi', disk: '4Gi' });
    const keys = ['default/wake-first', 'default/wake-second'];
    let checks = 0;
    let admitted = false;
    try {
      rt.applyManifests([first]);
      const res = await rt.runUntil({
        timeoutMs: 60_000,
        tickMs: TICK_NEVER_MS,
        check: () => {
          checks++;
          // A phase gate: the second VM once the first is Ready.
          if (!admitted && rt.stateOf(keys[0]!) === 'ready') {
            rt.applyManifests([second]);
            admitted = true;
          }
          return keys.every((k) => rt.stateOf(k) === 'ready') ? 'ok' : 'continue';
        },
      });
      assert.deepEqual(res, { ok: true, timedOut: false });
      assert.ok(admitted);
      assert.ok(checks >= 3, `${checks} checks: the first, one per VM that became Ready`);
    } finally {
      await rt.close();
    }
  });

  it("the store writes of what a check admits are not the check's cost, which spaces the next check", async () => {
    const rt = runtime('cost.db');
    // Each write of the store takes 60 ms (a slow disk, the state database's first open).
    const apply = rt.store.apply.bind(rt.store);
    const pause = new Int32Array(new SharedArrayBuffer(4));
    rt.store.apply = ((o: Parameters<typeof apply>[0]) => {
      Atomics.wait(pause, 0, 0, 60);
      return apply(o);
    }) as typeof rt.store.apply;
    const costs: number[] = [];
    try {
      const res = await rt.runUntil({
        timeoutMs: 60_000,
        tickMs: TICK_NEVER_MS,
        check: () => {
          costs.push(rt.lastCheckCostMs);
          if (!rt.store.getSync('default/cost-one'))
            rt.applyManifests([vm('cost-one', { memory: '256Mi', disk: '4Gi' })]);
          return rt.stateOf('default/cost-one') === 'ready' ? 'ok' : 'continue';
        },
      });
      assert.deepEqual(res, { ok: true, timedOut: false });
      // The first check admitted the VM (60 ms in the store); its cost, read by the second check:
      // 19 times 60 ms would have kept the next check 1.1 s away from the wake of a Ready VM.
      assert.ok(costs.length >= 2);
      assert.ok(costs[1]! < 30, `the admitting check cost ${costs[1]} ms`);
    } finally {
      await rt.close();
    }
  });
});
