/**
 * The periodic full read of a Ready VM comes once per drift interval at a moment of its own:
 * 1,000 VMs that became Ready in the same second are read spread over the interval (issue 16's
 * lockstep burst: 2,812 requests in one minute for 1,000 VMs), each exactly once per interval.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, it } from 'node:test';
import { driftDue } from '../../src/vm/read-schedule.ts';

describe('drift schedule', () => {
  it('spreads the full reads of VMs made together over the interval, once each per interval', () => {
    const interval = 300_000;
    const poll = 60_000;
    const uids = Array.from({ length: 1000 }, () => randomUUID());
    const last = new Map(uids.map((u) => [u, 0]));
    const perMinute: number[] = [];
    for (let t = poll; t <= 4 * interval; t += poll) {
      let n = 0;
      for (const u of uids)
        if (driftDue(u, last.get(u)!, t, interval)) {
          last.set(u, t);
          n++;
        }
      perMinute.push(n);
    }
    // 1,000 VMs, 5 polls per interval: 200 per poll on average; never all of them at once.
    assert.ok(Math.max(...perMinute) < 300, `worst minute: ${Math.max(...perMinute)} (${perMinute.join(', ')})`);
    const after = perMinute.slice(5);
    assert.equal(
      after.reduce((a, b) => a + b, 0),
      3 * 1000,
      'each VM read exactly once per interval after the first',
    );
  });

  it("a full read just before the VM's moment stands for it: no second read a moment later", () => {
    // `apply`'s plan reads every VM in full, and the reconcile a moment later takes that read as
    // its own, unless the VM's moment in the interval fell between the two (the 31st read of
    // test/local/apply-every-run.test.ts, under load). Found by trying every moment of the interval.
    const interval = 300_000;
    const uids = Array.from({ length: 200 }, () => randomUUID());
    let deferred = 0;
    for (const u of uids) {
      const moment = firstDue(u, 0, interval);
      for (const before of [1, 1_000, 30_000, interval / 4]) {
        const planRead = moment - before;
        assert.equal(
          driftDue(u, planRead, moment + 1_000, interval),
          false,
          `${u}: read ${before} ms before its moment`,
        );
        // The next read comes at its moment in the next interval, not later.
        assert.equal(driftDue(u, planRead, moment + interval, interval), true, `${u}: its next moment`);
        deferred++;
      }
      // A read well before its moment does not stand for it: the moment's read comes.
      assert.equal(driftDue(u, moment - interval / 2, moment, interval), true, `${u}: read half an interval before`);
    }
    assert.equal(deferred, 800);
  });

  it('two full reads are never more than 1.25 drift intervals apart', () => {
    const interval = 60_000;
    for (const u of Array.from({ length: 100 }, () => randomUUID()))
      for (let lastAt = 0; lastAt < interval; lastAt += 997) {
        const next = firstDue(u, lastAt, interval);
        assert.ok(next - lastAt <= 1.25 * interval + 1, `${u}: read at ${lastAt}, next at ${next}`);
      }
  });

  it('an interval of 0 reads every time', () => {
    assert.equal(driftDue('u', 10, 10, 0), true);
  });
});

/** The first time after `lastAt` (to the millisecond) at which the full read of `uid` is due. */
function firstDue(uid: string, lastAt: number, interval: number): number {
  let lo = lastAt;
  let hi = lastAt + 2 * interval;
  assert.ok(driftDue(uid, lastAt, hi, interval), 'due within two intervals');
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (driftDue(uid, lastAt, mid, interval)) hi = mid;
    else lo = mid;
  }
  return hi;
}
