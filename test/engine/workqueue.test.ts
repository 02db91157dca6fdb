import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import {
  CREATE_FAILURE_SCHEDULE_MS,
  DEFAULT_BACKOFF,
  ItemBackoff,
  PRIORITY_EVENT,
  PRIORITY_LOW,
  WorkQueue,
} from '../../src/engine/workqueue.ts';
import { FakeClock, flush } from '../helpers/fake-clock.ts';

function queue(random: () => number = () => 0.5) {
  const clock = new FakeClock(1_000_000);
  const q = new WorkQueue({ clock, random });
  return { clock, q };
}

/** Start a get() and expose what it resolved to (once it has). */
function pendingGet(q: WorkQueue): { readonly value: string | undefined; readonly settled: boolean } {
  const s = { value: undefined as string | undefined, settled: false };
  void q.get().then((k) => {
    s.value = k;
    s.settled = true;
  });
  return s;
}

describe('WorkQueue: client-go semantics', () => {
  it('hands out keys in FIFO order', async () => {
    const { q } = queue();
    q.add('a');
    q.add('b');
    q.add('c');
    assert.equal(q.length, 3);
    assert.equal(await q.get(), 'a');
    assert.equal(await q.get(), 'b');
    assert.equal(await q.get(), 'c');
    assert.equal(q.length, 0);
  });

  it('de-duplicates a key that is already queued', async () => {
    const { q } = queue();
    q.add('a');
    q.add('b');
    q.add('a');
    q.add('a');
    assert.equal(q.length, 2);
    assert.equal(await q.get(), 'a');
    assert.equal(await q.get(), 'b');
    assert.equal(q.length, 0);
  });

  it('never hands a key to two workers at once; a key added while processing comes back after done()', async () => {
    const { q } = queue();
    q.add('a');
    assert.equal(await q.get(), 'a');
    assert.ok(q.isProcessing('a'));
    q.add('a'); // an event arrives while worker 1 reconciles 'a'
    q.add('a'); // and another: still one pending run
    const second = pendingGet(q); // worker 2 is idle
    await flush();
    assert.equal(second.settled, false, 'worker 2 must not receive a key that worker 1 holds');
    assert.equal(q.length, 0);
    q.done('a');
    await flush();
    assert.equal(second.value, 'a', 'the re-added key is handed out once processing ended');
    q.done('a');
    assert.equal(q.length, 0, 'two adds during processing give exactly one more run');
  });

  it('done() without a re-add leaves the key out of the queue', async () => {
    const { q } = queue();
    q.add('a');
    await q.get();
    q.done('a');
    assert.equal(q.length, 0);
    assert.equal(q.isProcessing('a'), false);
  });

  it('a waiting worker receives a new key directly', async () => {
    const { q } = queue();
    const w1 = pendingGet(q);
    const w2 = pendingGet(q);
    q.add('x');
    q.add('y');
    await flush();
    assert.deepEqual([w1.value, w2.value], ['x', 'y']);
    assert.ok(q.isProcessing('x') && q.isProcessing('y'));
  });

  it('addAfter fires after the delay, not before', async () => {
    const { clock, q } = queue();
    q.addAfter('a', 5000);
    assert.equal(q.length, 0);
    assert.equal(q.pendingDelayed, 1);
    clock.advance(4999);
    assert.equal(q.length, 0);
    clock.advance(1);
    assert.equal(q.length, 1);
    assert.equal(q.pendingDelayed, 0);
    assert.equal(await q.get(), 'a');
  });

  it('a delay longer than a timer can hold (crossplane.io/poll-interval: 1000h) waits, never turns into a hot loop', async () => {
    const q = new WorkQueue(); // the real clock: setTimeout itself overflows past 2^31-1 ms
    q.addAfter('a', 1000 * 3_600_000);
    await new Promise((resolve) => setTimeout(resolve, 30));
    assert.equal(q.length, 0, 'not fired at once');
    assert.equal(q.pendingDelayed, 1);
    q.shutdown();
  });

  it('addAfter keeps the earliest time (earlier replaces later)', () => {
    const { clock, q } = queue();
    q.addAfter('a', 10_000);
    q.addAfter('a', 3000);
    assert.equal(q.pendingDelayed, 1);
    clock.advance(3000);
    assert.equal(q.length, 1, 'fired at the earlier time');
    assert.equal(clock.pending, 0, 'the later timer was cancelled');
  });

  it('addAfter keeps the earliest time (later is ignored)', () => {
    const { clock, q } = queue();
    q.addAfter('a', 3000);
    q.addAfter('a', 10_000);
    clock.advance(3000);
    assert.equal(q.length, 1);
    clock.advance(10_000);
    assert.equal(q.length, 1, 'no second add from the later request');
  });

  it('cancelAfter drops the pending delayed add: a later addAfter then holds, later or not', () => {
    const { clock, q } = queue();
    q.addAfter('a', 3000);
    q.cancelAfter('a');
    assert.equal(q.pendingDelayed, 0);
    assert.equal(clock.pending, 0, 'its timer cancelled');
    q.addAfter('a', 10_000);
    clock.advance(3000);
    assert.equal(q.length, 0, 'not at the dropped time');
    clock.advance(7000);
    assert.equal(q.length, 1, 'at the later one');
    q.cancelAfter('b'); // none pending: nothing happens
  });

  it('addAfter with a zero or negative delay adds now', () => {
    const { q } = queue();
    q.addAfter('a', 0);
    q.addAfter('b', -5);
    assert.equal(q.length, 2);
    assert.equal(q.pendingDelayed, 0);
  });

  it('addAfter of a key being processed re-queues it after done()', async () => {
    const { clock, q } = queue();
    q.add('a');
    await q.get();
    q.addAfter('a', 100);
    clock.advance(100);
    assert.equal(q.length, 0, 'not handed out while processing');
    q.done('a');
    assert.equal(q.length, 1);
  });

  it('shutdown releases waiting getters, cancels delayed adds, ignores new adds, drains what is queued', async () => {
    const { clock, q } = queue();
    const w1 = pendingGet(q);
    const w2 = pendingGet(q);
    await flush();
    assert.equal(w1.settled || w2.settled, false);
    q.addAfter('later', 1000);
    q.shutdown();
    await flush();
    assert.ok(w1.settled && w2.settled);
    assert.equal(w1.value, undefined);
    assert.equal(w2.value, undefined);
    clock.advance(5000);
    assert.equal(q.length, 0, 'delayed add was cancelled');
    q.add('new');
    assert.equal(q.length, 0, 'adds after shutdown are ignored');
    assert.equal(await q.get(), undefined);

    const { q: q2 } = queue();
    q2.add('queued');
    q2.shutdown();
    assert.equal(await q2.get(), 'queued', 'items queued before shutdown are drained');
    assert.equal(await q2.get(), undefined);
  });

  it("tells its metrics as client-go's workqueue does: adds, wait, work, retries, unfinished work", async () => {
    const { clock, q } = queue();
    const seen: string[] = [];
    q.metrics = {
      added: () => seen.push('added'),
      taken: (ms) => seen.push(`taken ${ms}`),
      finished: (ms) => seen.push(`finished ${ms}`),
      retried: () => seen.push('retried'),
    };
    q.add('a');
    q.add('a'); // already pending: not an add
    clock.advance(250);
    assert.equal(await q.get(), 'a');
    q.add('b');
    clock.advance(100);
    assert.equal(await q.get(), 'b');
    clock.advance(50);
    assert.deepEqual(q.unfinished(), { totalMs: 150 + 50, longestMs: 150 });
    q.done('a');
    q.addAfter('a', 1000);
    clock.advance(1000);
    assert.deepEqual(q.unfinished(), { totalMs: 1050, longestMs: 1050 }, 'b only');
    assert.deepEqual(seen, ['added', 'taken 250', 'added', 'taken 100', 'finished 150', 'retried', 'added']);
  });
});

describe('WorkQueue: priorities (controller-runtime priorityqueue)', () => {
  it('hands out the higher priority first, first in first out within one', async () => {
    const { q } = queue();
    q.add('poll-1', PRIORITY_LOW);
    q.add('poll-2', PRIORITY_LOW);
    q.add('change-1', PRIORITY_EVENT);
    q.add('poll-3', PRIORITY_LOW);
    q.add('change-2'); // the default is PRIORITY_EVENT
    assert.equal(q.length, 5);
    assert.equal(q.lengthAt(PRIORITY_EVENT), 2);
    const order = [];
    for (let i = 0; i < 5; i++) order.push(await q.get());
    assert.deepEqual(order, ['change-1', 'change-2', 'poll-1', 'poll-2', 'poll-3']);
  });

  it('a change to one resource never waits behind a poll round of 10,000 (issue 17)', async () => {
    const { q } = queue();
    for (let i = 0; i < 10_000; i++) q.add(`poll-${i}`, PRIORITY_LOW);
    q.add('poll-9999', PRIORITY_EVENT); // the watch saw a change to a resource already queued for its poll
    assert.equal(q.length, 10_000, 'still one entry per key');
    assert.equal(await q.get(), 'poll-9999');
    assert.equal(await q.get(), 'poll-0');
  });

  it('a key queued again at a higher priority moves up once: its old place is skipped, never handed out twice', async () => {
    const { q } = queue();
    q.add('a', PRIORITY_LOW);
    q.add('b', PRIORITY_LOW);
    q.add('a', PRIORITY_EVENT);
    q.add('a', PRIORITY_EVENT);
    assert.equal(q.length, 2);
    assert.equal(await q.get(), 'a');
    assert.equal(await q.get(), 'b');
    assert.equal(q.length, 0);
    q.done('a');
    q.done('b');
    const third = pendingGet(q);
    await flush();
    assert.equal(third.settled, false, "a's old entry is not handed out");
    q.add('c', PRIORITY_LOW);
    await flush();
    assert.equal(third.value, 'c');
  });

  it('a lower priority never demotes a queued key', async () => {
    const { q } = queue();
    q.add('a', PRIORITY_EVENT);
    q.add('b', PRIORITY_LOW);
    q.add('a', PRIORITY_LOW);
    assert.equal(await q.get(), 'a');
    assert.equal(await q.get(), 'b');
  });

  it('a key added while it is processed comes back after done() at the highest priority it was added with', async () => {
    const { q } = queue();
    q.add('a');
    assert.equal(await q.get(), 'a');
    q.add('a', PRIORITY_LOW); // its next poll fires during the reconcile
    q.add('b', PRIORITY_LOW);
    q.add('a', PRIORITY_EVENT); // and the watch sees a change
    assert.equal(q.length, 1, 'a is not queued while it is processed');
    q.done('a');
    assert.equal(await q.get(), 'a');
    assert.equal(await q.get(), 'b');
  });

  it('addAfter keeps the earliest time and the highest priority of its requests', async () => {
    const { clock, q } = queue();
    q.addAfter('a', 1000, PRIORITY_LOW);
    q.addAfter('a', 5000, PRIORITY_EVENT); // later: the earlier time stays, with this priority
    q.addAfter('b', 500, PRIORITY_LOW);
    clock.advance(1000);
    assert.equal(q.length, 2);
    assert.equal(await q.get(), 'a', 'a fired at 1000 ms at PRIORITY_EVENT, ahead of b');
    assert.equal(await q.get(), 'b');
    clock.advance(10_000);
    assert.equal(q.length, 0, 'the later request added nothing');
    q.addAfter('c', 2000, PRIORITY_EVENT);
    q.addAfter('c', 1000, PRIORITY_LOW); // earlier: replaces the timer, keeps the higher priority
    q.add('d', PRIORITY_LOW);
    clock.advance(1000);
    assert.equal(await q.get(), 'c');
    assert.equal(q.pendingDelayed, 0);
  });

  it('addRateLimited takes a priority too', async () => {
    const { clock, q } = queue();
    q.add('poll', PRIORITY_LOW);
    assert.equal(q.addRateLimited('retry', undefined, false, PRIORITY_EVENT), 1000);
    clock.advance(1000);
    assert.equal(await q.get(), 'retry');
  });

  it('moving many keys up leaves no stale length and hands each out once', async () => {
    const { q } = queue();
    for (let i = 0; i < 3000; i++) q.add(`k${i}`, PRIORITY_LOW);
    for (let i = 0; i < 3000; i += 2) q.add(`k${i}`, PRIORITY_EVENT);
    assert.equal(q.length, 3000);
    const seen: string[] = [];
    for (let i = 0; i < 3000; i++) {
      const k = (await q.get())!;
      seen.push(k);
      q.done(k);
    }
    assert.equal(q.length, 0);
    assert.equal(new Set(seen).size, 3000);
    assert.deepEqual(seen.slice(0, 3), ['k0', 'k2', 'k4'], 'the raised keys first, in the order they were raised');
    assert.deepEqual(seen.slice(1500, 1503), ['k1', 'k3', 'k5']);
  });
});

describe('ItemBackoff / addRateLimited', () => {
  it('defaults: base 1 s, factor 2, cap 5 min, jitter 10 %', () => {
    assert.deepEqual(DEFAULT_BACKOFF, { baseMs: 1000, capMs: 300_000, factor: 2, jitter: 0.1 });
  });

  it('doubles per failure from 1 s up to the 5 min cap; forget() resets', () => {
    const b = new ItemBackoff({}, () => 0.5); // 0.5 = no jitter
    const got = Array.from({ length: 12 }, () => b.when('k'));
    assert.deepEqual(
      got,
      [1000, 2000, 4000, 8000, 16_000, 32_000, 64_000, 128_000, 256_000, 300_000, 300_000, 300_000],
    );
    assert.equal(b.failuresOf('k'), 12);
    assert.equal(b.when('other'), 1000, 'per item');
    b.forget('k');
    assert.equal(b.failuresOf('k'), 0);
    assert.equal(b.when('k'), 1000);
  });

  it('jitter stays within [1-j, 1+j] and never pushes past the cap', () => {
    const lo = new ItemBackoff({}, () => 0);
    const hi = new ItemBackoff({}, () => 0.999_999);
    for (let n = 0; n < 15; n++) {
      const nominal = Math.min(300_000, 1000 * 2 ** n);
      const a = lo.when('k');
      const b = hi.when('k');
      assert.equal(a, Math.round(nominal * 0.9));
      assert.ok(b <= Math.min(300_000, Math.round(nominal * 1.1)), `n=${n}: ${b}`);
      assert.ok(b >= nominal * 1.09 || b === 300_000, `n=${n}: ${b}`);
    }
  });

  it('property: every delay is within jitter of the nominal exponential delay and at most the cap', () => {
    fc.assert(
      fc.property(
        fc.array(fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }), { minLength: 1, maxLength: 40 }),
        (randoms) => {
          let i = 0;
          const b = new ItemBackoff({}, () => randoms[i++ % randoms.length]!);
          for (let n = 0; n < randoms.length; n++) {
            const nominal = Math.min(300_000, 1000 * 2 ** n);
            const d = b.when('k');
            assert.ok(d >= Math.floor(nominal * 0.9) && d <= Math.ceil(nominal * 1.1), `n=${n} d=${d}`);
            assert.ok(d <= 300_000);
          }
        },
      ),
    );
  });

  it('the failed-create schedule is about 30 s, 1 m, 2 m, 5 m, 10 m, then stays at 10 m', () => {
    assert.deepEqual(CREATE_FAILURE_SCHEDULE_MS, [30_000, 60_000, 120_000, 300_000, 600_000]);
    for (const r of [0, 0.25, 0.5, 0.75, 0.999]) {
      const b = new ItemBackoff({}, () => r);
      const expected = [30_000, 60_000, 120_000, 300_000, 600_000, 600_000, 600_000];
      for (const nominal of expected) {
        const d = b.when('vm', CREATE_FAILURE_SCHEDULE_MS);
        assert.ok(d >= nominal * 0.9 && d <= nominal * 1.1, `random=${r}: ${d} vs ${nominal}`);
      }
    }
  });

  it('addRateLimited schedules the key after its backoff delay and returns it', () => {
    const { clock, q } = queue(() => 0.5);
    assert.equal(q.addRateLimited('a'), 1000);
    clock.advance(999);
    assert.equal(q.length, 0);
    clock.advance(1);
    assert.equal(q.length, 1);
    assert.equal(q.addRateLimited('b', CREATE_FAILURE_SCHEDULE_MS), 30_000);
    assert.equal(q.addRateLimited('a'), 2000);
    q.forget('a');
    assert.equal(q.backoff.failuresOf('a'), 0);
    assert.equal(q.addRateLimited('a'), 1000);
  });

  it('custom backoff options are honoured', () => {
    const b = new ItemBackoff({ baseMs: 5, capMs: 40, factor: 3, jitter: 0 }, () => 0.9);
    assert.deepEqual(
      Array.from({ length: 5 }, () => b.when('k')),
      [5, 15, 40, 40, 40],
    );
  });
});

describe('WorkQueue: property', () => {
  type Cmd =
    | { op: 'add'; key: string; priority: number }
    | { op: 'addAfter'; key: string; ms: number; priority: number }
    | { op: 'get'; worker: number }
    | { op: 'done'; worker: number }
    | { op: 'advance'; ms: number };

  const keyArb = fc.constantFrom('a', 'b', 'c', 'd');
  const priorityArb = fc.constantFrom(PRIORITY_EVENT, PRIORITY_LOW, 10);
  const cmdArb = (workers: number): fc.Arbitrary<Cmd> =>
    fc.oneof(
      fc.record({ op: fc.constant('add' as const), key: keyArb, priority: priorityArb }),
      fc.record({
        op: fc.constant('addAfter' as const),
        key: keyArb,
        ms: fc.integer({ min: -10, max: 5000 }),
        priority: priorityArb,
      }),
      fc.record({ op: fc.constant('get' as const), worker: fc.integer({ min: 0, max: workers - 1 }) }),
      fc.record({ op: fc.constant('done' as const), worker: fc.integer({ min: 0, max: workers - 1 }) }),
      fc.record({ op: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 3000 }) }),
    );

  it('never two workers on one key; every added key is processed after its last add (at any priority)', async () => {
    let runs = 0;
    await fc.assert(
      fc.asyncProperty(
        fc
          .integer({ min: 1, max: 4 })
          .chain((w) => fc.tuple(fc.constant(w), fc.array(cmdArb(w), { minLength: 1, maxLength: 60 }))),
        async ([workers, cmds]) => {
          const clock = new FakeClock(0);
          const q = new WorkQueue({ clock, random: () => 0.5 });
          // worker state: 'idle' | 'waiting' | key held
          const state: Array<{ s: 'idle' } | { s: 'waiting' } | { s: 'holding'; key: string }> = Array.from(
            { length: workers },
            () => ({ s: 'idle' }) as const,
          );
          let seq = 0;
          const lastAdd = new Map<string, number>();
          const lastTake = new Map<string, number>();
          const violations: string[] = [];
          runs++;
          const startGet = (w: number) => {
            state[w] = { s: 'waiting' };
            void q.get().then((k) => {
              if (k === undefined) {
                state[w] = { s: 'idle' };
                return;
              }
              for (const [i, st] of state.entries()) {
                if (st.s === 'holding' && st.key === k)
                  violations.push(`key ${k} handed to worker ${w} while worker ${i} holds it`);
              }
              state[w] = { s: 'holding', key: k };
              lastTake.set(k, ++seq);
            });
          };
          const run = async (c: Cmd) => {
            switch (c.op) {
              case 'add':
                lastAdd.set(c.key, ++seq);
                q.add(c.key, c.priority);
                break;
              case 'addAfter':
                lastAdd.set(c.key, ++seq);
                q.addAfter(c.key, c.ms, c.priority);
                break;
              case 'get':
                if (state[c.worker]!.s === 'idle') startGet(c.worker);
                break;
              case 'done': {
                const st = state[c.worker]!;
                if (st.s === 'holding') {
                  state[c.worker] = { s: 'idle' };
                  q.done(st.key);
                }
                break;
              }
              case 'advance':
                clock.advance(c.ms);
                break;
            }
            await flush();
          };
          for (const c of cmds) {
            await run(c);
            assert.deepEqual(violations, []);
          }
          // Drain: fire every timer, let every worker finish and ask again, until nothing is left.
          for (let round = 0; round < 50; round++) {
            clock.advance(10_000);
            for (let w = 0; w < workers; w++) {
              const st = state[w]!;
              if (st.s === 'holding') {
                state[w] = { s: 'idle' };
                q.done(st.key);
              }
              if (state[w]!.s === 'idle') startGet(w);
            }
            await flush();
            const busy = state.some((s) => s.s === 'holding');
            if (!busy && q.length === 0 && q.pendingDelayed === 0) break;
          }
          assert.equal(q.length, 0);
          assert.equal(q.pendingDelayed, 0);
          for (const [key, added] of lastAdd) {
            const taken = lastTake.get(key) ?? -1;
            assert.ok(taken > added, `key ${key} added at ${added} but last processed at ${taken}`);
          }
          q.shutdown();
          await flush();
          assert.ok(
            state.every((s) => s.s === 'idle'),
            'shutdown released every waiting worker',
          );
        },
      ),
      { numRuns: 200 },
    );
    assert.equal(runs, 200);
  });
});
