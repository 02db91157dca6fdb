/**
 * apply does not poll a VM it saw Ready (RuntimeOptions.pollReady false, which openRuntime sets):
 * its run ends once every VM is Ready, and a poll of every Ready VM each poll interval made an
 * apply of N VMs cost O(N x its duration). A runtime that polls (the default) still does, and a VM
 * that is not Ready yet is still reconciled until it is. The poll interval is made short so that a
 * poll would come many times within the test; the reconciles are counted, no timing is asserted
 * beyond "several intervals passed".
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { LocalRuntime } from '../../src/local/runtime.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { simConfig, startSim, vm } from '../vm/harness.ts';

const POLL_MS = 50;

describe('Ready VMs under apply', () => {
  let sim: Simulator;
  let dir: string;
  before(async () => {
    sim = await startSim();
    dir = mkdtempSync(join(tmpdir(), 'pp-ready-poll-'));
  });
  after(async () => {
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Reconciles of one VM while the runtime runs on for `ms` after the VM was Ready. */
  async function reconcilesAfterReady(name: string, pollReady: boolean | undefined): Promise<number> {
    const key = `default/${name}`;
    let results = 0;
    const rt = new LocalRuntime({
      config: simConfig(sim),
      stateFile: join(dir, `${name}.db`),
      taskPollMs: 20,
      agentPollMs: 50,
      pollIntervalMs: POLL_MS,
      backoff: { baseMs: 20, capMs: 200 },
      ...(pollReady !== undefined ? { pollReady } : {}),
      onResult: (k) => {
        if (k === key) results++;
      },
    });
    try {
      rt.applyManifests([vm(name, { memory: '256Mi', disk: '4Gi' })]);
      let atReady: number | undefined;
      const ranOn = { since: 0 };
      const res = await rt.runUntil({
        timeoutMs: 60_000,
        tickMs: 10,
        check: () => {
          if (rt.stateOf(key) !== 'ready') return 'continue';
          if (atReady === undefined) {
            atReady = results;
            ranOn.since = Date.now();
          }
          // Twenty poll intervals after Ready.
          return Date.now() - ranOn.since >= 20 * POLL_MS ? 'ok' : 'continue';
        },
      });
      assert.ok(res.ok, JSON.stringify(rt.store.getSync(key)?.status));
      // Ready when the check ended the run (res.ok). A runtime that polls may be stopped in the
      // middle of a poll, whose interrupted reconcile leaves the VM 'progressing' in this
      // runtime's eyes; one that does not poll has nothing in flight, and it stays 'ready'.
      if (pollReady === false) assert.equal(rt.stateOf(key), 'ready');
      return results - atReady!;
    } finally {
      await rt.close();
    }
  }

  it('apply (pollReady false): a Ready VM is not reconciled again', async () => {
    assert.equal(await reconcilesAfterReady('ready-no-poll', false), 0);
  });

  it('the default: a Ready VM is polled every poll interval', async () => {
    const n = await reconcilesAfterReady('ready-polled', undefined);
    assert.ok(n >= 3, `${n} polls in 20 intervals`);
  });
});
