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

  it('an interval of 0 reads every time', () => {
    assert.equal(driftDue('u', 10, 10, 0), true);
  });
});
