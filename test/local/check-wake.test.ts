/**
 * A resource that becomes ready brings the runtime's next check forward (LocalRuntime.runUntil):
 * the VM that completes a phase opens the next one at once, not a tick later. Here the tick is
 * ten minutes, longer than the test may run: a run that ends is one whose checks were woken by
 * its resources, and one that is not woken would time out. No timing is asserted.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { LocalRuntime } from '../../src/local/runtime.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { simConfig, startSim, vm } from '../vm/harness.ts';

/** A check interval no run of this test lasts: every check after the first was woken. */
const TICK_NEVER_MS = 10 * 60_000;

describe('runUntil: a resource that settles wakes the check', () => {
  let sim: Simulator;
  let dir: string;
  before(async () => {
    sim = await startSim();
    dir = mkdtempSync(join(tmpdir(), 'pp-check-wake-'));
  });
  after(async () => {
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a gate opened by a Ready VM admits the next one without waiting for the tick', async () => {
    const rt = new LocalRuntime({
      config: simConfig(sim),
      stateFile: join(dir, 'wake.db'),
      taskPollMs: 20,
      agentPollMs: 50,
      backoff: { baseMs: 20, capMs: 200 },
    });
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
});
