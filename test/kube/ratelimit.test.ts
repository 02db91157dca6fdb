/**
 * The Kubernetes client's token bucket (src/kube/ratelimit.ts) on an injected clock: no API server
 * and no waiting, only the bucket's arithmetic and the order in which waiters are let through.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { TokenBucket } from '../../src/kube/ratelimit.ts';
import { ManualClock } from './manual-clock.ts';

/** Start `n` acquisitions; `done` lists them (by index) as they get their token. */
function asking(b: TokenBucket, n: number, signals: Array<AbortSignal | undefined> = []) {
  const done: number[] = [];
  const all = Array.from({ length: n }, (_, i) =>
    b.acquire(signals[i]).then(
      () => done.push(i),
      () => done.push(-i),
    ),
  );
  return { done, all };
}

describe('TokenBucket (client-go QPS/burst)', () => {
  it('lets a burst through at once, then one request per 1/qps, in the order they asked', async () => {
    const clock = new ManualClock();
    const b = new TokenBucket(5, 2, clock);
    const { done, all } = asking(b, 5);
    await clock.advance(0);
    assert.deepEqual(done, [0, 1], 'the burst');
    assert.equal(b.waiting, 3);
    await clock.advance(199);
    assert.deepEqual(done, [0, 1], 'nothing before 1/qps');
    await clock.advance(1);
    assert.deepEqual(done, [0, 1, 2]);
    await clock.advance(200);
    assert.deepEqual(done, [0, 1, 2, 3]);
    await clock.advance(200);
    assert.deepEqual(done, [0, 1, 2, 3, 4]);
    await Promise.all(all);
    assert.equal(b.waiting, 0);
    assert.equal(b.delayed, 3);
  });

  it('refills at qps up to burst, never beyond', async () => {
    const clock = new ManualClock();
    const b = new TokenBucket(10, 3, clock);
    await asking(b, 3).all;
    await clock.advance(150); // 1.5 tokens back
    const first = asking(b, 2);
    await clock.advance(0);
    assert.deepEqual(first.done, [0]);
    await clock.advance(49);
    assert.deepEqual(first.done, [0], 'half a token is not a token');
    await clock.advance(1);
    assert.deepEqual(first.done, [0, 1]);
    await clock.advance(3_600_000); // an hour of idleness saves up `burst` tokens, no more
    const later = asking(b, 4);
    await clock.advance(0);
    assert.deepEqual(later.done, [0, 1, 2]);
    await clock.advance(100);
    assert.deepEqual(later.done, [0, 1, 2, 3]);
  });

  it('an aborted waiter rejects with its reason, and the ones behind it move up', async () => {
    const clock = new ManualClock();
    const b = new TokenBucket(1, 1, clock);
    const ac = new AbortController();
    const { done, all } = asking(b, 4, [undefined, undefined, ac.signal, undefined]);
    await clock.advance(0);
    assert.deepEqual(done, [0]);
    ac.abort(new Error('reconcile aborted'));
    await clock.advance(0);
    assert.deepEqual(done, [0, -2]);
    assert.equal(b.waiting, 2);
    await clock.advance(1000);
    assert.deepEqual(done, [0, -2, 1]);
    await clock.advance(1000);
    assert.deepEqual(done, [0, -2, 1, 3], 'the third token goes to the fourth request');
    await Promise.all(all);
    await assert.rejects(
      (async () => {
        const c = new AbortController();
        const p = b.acquire(c.signal);
        c.abort(new Error('gone'));
        await p;
      })(),
      /gone/,
    );
  });

  it('an already aborted signal takes no token', async () => {
    const clock = new ManualClock();
    const b = new TokenBucket(1, 1, clock);
    await assert.rejects(b.acquire(AbortSignal.abort(new Error('gone'))), /gone/);
    const { done } = asking(b, 1);
    await clock.advance(0);
    assert.deepEqual(done, [0]);
  });

  it('qps <= 0 is no limit; a bad burst is refused', async () => {
    const b = new TokenBucket(0, 0, new ManualClock());
    await Promise.all(Array.from({ length: 1000 }, () => b.acquire()));
    assert.equal(b.delayed, 0);
    assert.throws(() => new TokenBucket(5, 0), /burst must be a whole number >= 1/);
    assert.throws(() => new TokenBucket(Number.NaN, 1), /QPS must be a number/);
  });
});
