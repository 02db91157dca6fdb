/**
 * Boots of one kind that begin before the site learned how long that kind takes: one (the scout)
 * asks its guest agent from the floor up, the others wait for its answer. Reconciled meanwhile (the
 * agent poll, in case the wake is lost), a waiter does not ask its guest: each such reconcile used
 * to, and the seed fleet without phases asked each waiter about five times at speed 1.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Simulator } from '../../src/sim/index.ts';
import { Engine, SITE1, startSim, vm } from './harness.ts';

describe('boots waiting for their scout', () => {
  let sim: Simulator;
  let eng: Engine;
  before(async () => {
    // Speed 100: a boot of 250 ms, many agent polls (20 ms in the harness) long.
    sim = await startSim({ speed: 100 });
    eng = await new Engine(sim).start();
  });
  after(async () => {
    await eng.stop();
    await sim.close();
  });

  it('a waiter is not asked before the scout answers; then at the time it learned', async () => {
    const c = sim.cluster(SITE1);
    const asks = new Map<string, number[]>();
    const t0 = Date.now();
    c.server.prependListener('request', (req: { url?: string }) => {
      const m = /\/qemu\/(\d+)\/agent\/network-get-interfaces/.exec(req.url ?? '');
      if (m) asks.set(m[1]!, [...(asks.get(m[1]!) ?? []), Date.now() - t0]);
    });
    const keys = ['scouted-1', 'scouted-2'].map((n) => eng.apply(vm(n)));
    const ready = await Promise.all(keys.map((k) => eng.waitReady(k)));
    const perVm = ready.map((r) => asks.get(String(r.status!.atProvider!.vmId)) ?? []);
    const [few, many] = [...perVm].sort((x, y) => x.length - y.length);
    // The scout asks from the floor up (every agent poll of the harness, 20 ms); the waiter a few times,
    // after the scout's answer (at the agent poll it was asked as often as the scout: 11 times).
    assert.ok(many!.length >= 4, `the scout asked ${many!.length} times`);
    assert.ok(few!.length <= 4, `the waiter asked ${few!.length} times (${few!.join(', ')} ms)`);
    const scoutHit = many!.at(-1)!;
    assert.ok(
      few!.every((t) => t >= scoutHit - 5),
      `the waiter's asks (${few!.join(', ')} ms) come after the scout's answer (${scoutHit} ms)`,
    );
  });
});
