/**
 * Errors that no retry fixes (a wrong token, a stale certificate fingerprint, more vCPUs than the
 * node has) are named with their fix and backed off to the cap after one confirmation, instead of
 * the exponential backoff that retried them for the whole 30-minute apply timeout.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import type { Simulator } from '../../src/sim/index.ts';
import { cond, Engine, startSim, vm } from './harness.ts';

const CAP = 640;

/** The backoff delays recorded for `key`: the first soon (a confirmation), the rest at the cap. */
function assertConfirmedThenCapped(eng: Engine, key: string): void {
  const delays = eng
    .attemptsOf(key)
    .map((a) => a.delay)
    .filter((d): d is number => d !== undefined);
  assert.ok(delays.length >= 3, `delays: ${delays.join(', ')}`);
  assert.ok(delays[0]! < CAP / 4, `confirmation first: ${delays.join(', ')}`);
  assert.ok(
    delays.slice(1).every((d) => d >= CAP * 0.85),
    `then the cap: ${delays.join(', ')}`,
  );
}

describe('permanent errors', () => {
  const sims: Simulator[] = [];
  after(async () => {
    for (const s of sims) await s.close();
  });

  it('a wrong API token -> AuthenticationFailed with its fix, at the cap after one confirmation', async () => {
    const sim = await startSim();
    sims.push(sim);
    const eng = await new Engine(sim, {
      configYaml: (y) => y.replace(/token: c0ffee00-[0-9a-f-]+/, 'token: 00000000-0000-4000-8000-000000000000'),
    }).start();
    try {
      const key = eng.apply(vm('bad-token'));
      await eng.waitFailures(key, 4);
      const synced = cond(eng.get(key), 'Synced');
      assert.equal(synced?.reason, 'AuthenticationFailed');
      assert.match(synced?.message ?? '', /Fix: check the credentials Secret of site site-1/);
      assert.doesNotMatch(JSON.stringify(eng.get(key)), /00000000-0000-4000-8000-000000000000/, 'no secret');
      assertConfirmedThenCapped(eng, key);
    } finally {
      await eng.stop();
    }
  });

  it('a stale TLS fingerprint -> TLSVerificationFailed naming the presented fingerprint, at the cap', async () => {
    const sim = await startSim({ http: false });
    sims.push(sim);
    const stale = Array.from({ length: 32 }, () => 'AB').join(':');
    const eng = await new Engine(sim, {
      configYaml: (y) => y.replace(/fingerprint: .*/g, `fingerprint: "${stale}"`),
    }).start();
    try {
      const key = eng.apply(vm('stale-fingerprint'));
      await eng.waitFailures(key, 4);
      const synced = cond(eng.get(key), 'Synced');
      assert.equal(synced?.reason, 'TLSVerificationFailed', JSON.stringify(synced));
      const presented = sim.clusters[0]!.fingerprint;
      assert.ok(presented && (synced?.message ?? '').includes(presented), synced?.message);
      assert.match(synced?.message ?? '', /pvenode cert info/);
      assertConfirmedThenCapped(eng, key);
    } finally {
      await eng.stop();
    }
  });

  it('more vCPUs than the node has -> InsufficientCapacity at the cap after one confirmation', async () => {
    const sim = await startSim();
    sims.push(sim);
    const eng = await new Engine(sim).start();
    try {
      const key = eng.apply(vm('cpu-64', { cpu: 64 }));
      await eng.waitFailures(key, 4);
      assert.equal(cond(eng.get(key), 'Synced')?.reason, 'InsufficientCapacity');
      assertConfirmedThenCapped(eng, key);
    } finally {
      await eng.stop();
    }
  });
});
