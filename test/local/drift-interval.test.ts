/**
 * The drift interval (`--drift-interval`, RuntimeOptions.driftIntervalMs) reaches the engine: with
 * 0 every reconcile of a Ready VM reads its config in full; with a long one none does, the bulk
 * list alone serving them. The VM is made Ready by one runtime; a second one, over the same state
 * file, is measured (its bulk list is read after the VM was Ready, so nothing it lists is stale).
 * Its reconciles are asked for one at a time (the runtime's wake) under a poll too long to come by
 * itself, and the simulator counts the reads: no timing is asserted.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { LocalRuntime } from '../../src/local/runtime.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { simConfig, startSim, vm } from '../vm/harness.ts';

/** A poll that never comes during the test: every reconcile after the first is one the test asked for. */
const NO_POLL_MS = 24 * 3_600_000;
/**
 * A VM's drift read comes when the interval's boundary at its own phase (from its uid) passes; in
 * a test of seconds that happens with odds of seconds / interval: 1e-8 with ten years.
 */
const TEN_YEARS_MS = 10 * 365 * 24 * 3_600_000;

async function until(probe: () => boolean, what: string, ms = 60_000): Promise<void> {
  const end = Date.now() + ms;
  while (!probe()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('drift interval', () => {
  let sim: Simulator;
  let dir: string;
  /** GET .../qemu/VMID/config requests, by VMID. */
  const configReads = new Map<string, number>();
  before(async () => {
    sim = await startSim();
    dir = mkdtempSync(join(tmpdir(), 'pp-drift-interval-'));
    for (const c of sim.clusters)
      c.server.prependListener('request', (req: { method?: string; url?: string }) => {
        const m = /\/qemu\/(\d+)\/config(\?|$)/.exec(req.url ?? '');
        if (req.method === 'GET' && m) configReads.set(m[1]!, (configReads.get(m[1]!) ?? 0) + 1);
      });
  });
  after(async () => {
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /**
   * A Ready VM under a fresh runtime with `driftIntervalMs`: the config reads of its reconciles
   * after the first (which reads it in full: the runtime has seen nothing yet), and how many.
   */
  async function readsAfterFirst(
    name: string,
    driftIntervalMs: number,
  ): Promise<{ reads: number; reconciles: number }> {
    const key = `default/${name}`;
    const stateFile = join(dir, `${name}.db`);
    const common = {
      config: simConfig(sim),
      stateFile,
      taskPollMs: 20,
      agentPollMs: 50,
      backoff: { baseMs: 20, capMs: 200 },
    };
    const maker = new LocalRuntime(common);
    try {
      maker.applyManifests([vm(name, { memory: '256Mi', disk: '4Gi' })]);
      const made = await maker.run({ keys: [key], until: 'ready', timeoutMs: 60_000, tickMs: 20 });
      assert.ok(made.ok, JSON.stringify(maker.store.getSync(key)?.status));
    } finally {
      await maker.close();
    }

    let results = 0;
    const rt = new LocalRuntime({
      ...common,
      pollIntervalMs: NO_POLL_MS,
      driftIntervalMs,
      onResult: (k) => {
        if (k === key) results++;
      },
    });
    const idle = () => rt.controller.queue.length === 0 && !rt.controller.queue.isProcessing(key);
    try {
      const vmid = rt.store.getSync(key)!.metadata.annotations!['crossplane.io/external-name']!;
      await rt.controller.start();
      await until(() => results > 0 && idle() && rt.stateOf(key) === 'ready', `${name} observed Ready`);
      const reads0 = configReads.get(vmid) ?? 0;
      const results0 = results;
      for (let i = 0; i < 3; i++) {
        const seen = results;
        rt.controller.wake(key);
        await until(() => results > seen && idle(), `reconcile ${i + 1} of ${name}`);
      }
      assert.equal(rt.stateOf(key), 'ready', 'still Ready: nothing to change');
      return { reads: (configReads.get(vmid) ?? 0) - reads0, reconciles: results - results0 };
    } finally {
      await rt.controller.stop();
      await rt.close();
    }
  }

  it('0: every reconcile of a Ready VM reads its config', async () => {
    const { reads, reconciles } = await readsAfterFirst('drift-every-poll', 0);
    assert.ok(reconciles >= 3, `${reconciles} reconciles`);
    assert.equal(reads, reconciles, 'one config read per reconcile');
  });

  it('a long interval: no reconcile of a Ready VM reads its config (the bulk list serves them)', async () => {
    const { reads, reconciles } = await readsAfterFirst('drift-long', TEN_YEARS_MS);
    assert.ok(reconciles >= 3, `${reconciles} reconciles`);
    assert.equal(reads, 0);
  });
});
