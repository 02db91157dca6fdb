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
    const t0 = Date.now();
    /** Every agent ask, in the order sent: which VM, when (ms), and whether the agent answered. */
    const asks: Array<{ vmid: string; at: number; answered?: boolean }> = [];
    c.server.prependListener(
      'request',
      (req: { url?: string }, res: { statusCode: number; on(e: 'finish', f: () => void): void }) => {
        const m = /\/qemu\/(\d+)\/agent\/network-get-interfaces/.exec(req.url ?? '');
        if (!m) return;
        const ask: (typeof asks)[number] = { vmid: m[1]!, at: Date.now() - t0 };
        asks.push(ask);
        res.on('finish', () => {
          ask.answered = res.statusCode === 200;
        });
      },
    );
    const keys = ['scouted-1', 'scouted-2'].map((n) => eng.apply(vm(n)));
    await Promise.all(keys.map((k) => eng.waitReady(k)));
    const shown = asks.map((a) => `${a.vmid}@${a.at}${a.answered ? '+' : '-'}`).join(' ');
    // Before the first answer, one boot asks (the scout, from the floor up: every agent poll of the
    // harness, 20 ms). The scouting may pass once to the other boot, when that one was seen to begin
    // sooner; at the agent poll both asked, turn about (11 times each).
    const firstAnswer = asks.findIndex((a) => a.answered);
    assert.ok(firstAnswer >= 0, `no ask was answered: ${shown}`);
    const scouting = asks.slice(0, firstAnswer + 1);
    const turns = scouting.filter((a, i) => i > 0 && a.vmid !== scouting[i - 1]!.vmid).length;
    assert.ok(turns <= 1, `before the first answer the two boots took turns ${turns} times: ${shown}`);
    assert.ok(scouting.length >= 4, `the scout asked ${scouting.length} times before its answer: ${shown}`);
    // After it, the other boot is asked at the time learned: a few times at most.
    const waiter = asks.filter((a) => a.vmid !== asks[firstAnswer]!.vmid);
    const afterAnswer = waiter.filter((a) => asks.indexOf(a) > firstAnswer);
    assert.ok(
      afterAnswer.length <= 4,
      `the other boot was asked ${afterAnswer.length} times after the answer: ${shown}`,
    );
  });
});
