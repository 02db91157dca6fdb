/**
 * FairShare (src/vm/fair-share.ts): when copies that share a storage's bandwidth will end, from
 * the service the first one to end needed. The world here is processor sharing itself (each of n
 * running copies gets a nth), computed event by event; the task watcher that uses it is checked
 * against the same world, on a clock of its own (no timers, no sleeps).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { FairShare } from '../../src/vm/fair-share.ts';
import { watcherOnClock } from './watcher-clock.ts';

/** When each of copies of `size` (ms at full bandwidth) begun at `starts` ends, sharing one bandwidth. */
function sharedEnds(starts: number[], size: number): number[] {
  const left = starts.map(() => size);
  const ends = starts.map(() => Number.NaN);
  let now = 0;
  for (;;) {
    const running = starts.map((_, i) => i).filter((i) => starts[i]! <= now && Number.isNaN(ends[i]!));
    const next = starts.filter((s) => s > now);
    if (!running.length && !next.length) return ends;
    const n = running.length;
    // The next event: a copy ends, or another begins.
    const toEnd = n ? Math.min(...running.map((i) => left[i]! * n)) : Number.POSITIVE_INFINITY;
    const toStart = next.length ? Math.min(...next) - now : Number.POSITIVE_INFINITY;
    const step = Math.min(toEnd, toStart);
    for (const i of running) left[i]! -= step / n;
    now += step;
    for (const i of running) if (left[i]! <= 1e-9 && Number.isNaN(ends[i]!)) ends[i] = now;
  }
}

describe('fair share: when copies sharing a bandwidth end', () => {
  const starts = [0, 30, 60, 90, 120];
  const ends = sharedEnds(starts, 200);

  it('the world: copies of one size end in the order they began, sooner apart than they began', () => {
    assert.deepEqual(
      [...ends].sort((a, b) => a - b),
      ends,
    );
    assert.ok(ends[4]! - ends[3]! < 30, `${ends.map((e) => e.toFixed(1)).join(', ')}`);
  });

  it('once one ended, the others are predicted to the millisecond', () => {
    const share = new FairShare(0);
    for (const [i, s] of starts.entries()) share.begin(`copy${i}`, s);
    assert.equal(share.dueIn(ends[0]!).size, 0, 'nothing predicted before one ended');
    share.looked(ends[0]! - 0.001, []);
    share.looked(ends[0]!, ['copy0']);
    const due = share.dueIn(ends[0]!);
    for (let i = 1; i < 5; i++)
      assert.ok(Math.abs(ends[0]! + due.get(`copy${i}`)! - ends[i]!) < 0.01, `copy ${i}: ${due.get(`copy${i}`)}`);
  });

  it('learned at a look before the end (a lower bound), the predictions are early, never late', () => {
    const share = new FairShare(0);
    for (const [i, s] of starts.entries()) share.begin(`copy${i}`, s);
    share.looked(ends[0]! - 40, []);
    share.looked(ends[0]! + 5, ['copy0']);
    const due = share.dueIn(ends[0]! + 5);
    for (let i = 1; i < 5; i++) assert.ok(ends[0]! + 5 + due.get(`copy${i}`)! <= ends[i]! + 1e-6, `copy ${i}`);
    // A look that finds the others running raises the bound: closer, still early.
    const at = ends[1]! - 2;
    share.looked(at, []);
    const closer = share.dueIn(at);
    for (let i = 1; i < 5; i++) {
      const before = ends[i]! - (ends[0]! + 5 + due.get(`copy${i}`)!);
      const after = ends[i]! - (at + closer.get(`copy${i}`)!);
      assert.ok(after >= -1e-6 && after < before, `copy ${i}: ${before.toFixed(1)} ms early, then ${after.toFixed(1)}`);
    }
  });

  it('the task watcher sees each copy after the first within a few ms of its end, where a tenth of its age was up to 90 ms', async () => {
    // Copies of 600 ms at full bandwidth: each runs for seconds beside the others.
    const big = sharedEnds(starts, 600);
    const upids = starts.map((_, i) => `UPID:pve1:0000${i}:00000000:00000000:qmcreate:${300 + i}:root@pam:`);
    const { at, w, runTo, restore } = watcherOnClock((clock) => new Set(upids.filter((_, i) => big[i]! > clock)));
    const woke = new Map<number, number>();
    try {
      for (const [i, s] of starts.entries()) {
        await runTo(s);
        w.watch(upids[i]!, () => woke.set(i, at.clock));
      }
      await runTo(10_000);
      const late = starts.map((_, i) => woke.get(i)! - big[i]!);
      const all = late.map((x) => x.toFixed(1)).join(', ');
      // The first is seen at the cadence, within a tenth of its age; a copy that ended before that
      // look (the second, 120 ms after the first, depending on where the looks fall) is seen by
      // it. Each one that ends after it is predicted from what the first needed.
      assert.ok(late[0]! >= 0 && late[0]! <= big[0]! * 0.1 + 1, `the first seen ${late[0]!.toFixed(1)} ms late`);
      const firstSeen = woke.get(0)!;
      const predicted = late.filter((_, i) => big[i]! > firstSeen);
      assert.ok(predicted.length >= 3, `copies ending after the first was seen: ${predicted.length} (${all})`);
      for (const [i, l] of late.entries())
        if (big[i]! > firstSeen) assert.ok(l >= 0 && l <= 12, `copy ${i} seen ${l.toFixed(1)} ms late (${all})`);
    } finally {
      restore();
    }
  });

  it('a share seeded with the need of the wave before predicts copies begun together; one far past it drops the hint', () => {
    // Two copies of 200 ms begun together end together at 400: nothing ended first to learn from.
    const seeded = new FairShare(0, 200);
    seeded.begin('a', 0);
    seeded.begin('b', 0);
    for (const id of ['a', 'b']) assert.ok(Math.abs(seeded.dueIn(100).get(id)! - 300) < 0.01, id);
    // A look just short of the end raises the bound within the slack: still predicted.
    seeded.looked(399, []);
    assert.ok(Math.abs(seeded.dueIn(399).get('a')! - 1) < 0.01);
    // Copies three times as large: at the first look past the hint by more than a tenth, it goes.
    const wrong = new FairShare(0, 200);
    wrong.begin('a', 0);
    wrong.begin('b', 0);
    wrong.looked(300, []);
    assert.ok(wrong.dueIn(300).size > 0, 'within the slack (150 of 200 so far): kept');
    wrong.looked(500, []);
    assert.equal(wrong.dueIn(500).size, 0, 'past it (250 of 200): dropped, nothing predicted');
    assert.equal(wrong.learned, undefined);
  });

  it('the watcher predicts a wave from the one before it: two copies begun together, seen within a few ms of their end', async () => {
    // Waves of two copies begun together on one node: 600 ms each at full bandwidth, so each
    // wave's pair ends together, 1,200 ms after it began. Then a wave of copies three times as large.
    const waves = [
      { start: 0, size: 600 },
      { start: 3000, size: 600 },
      { start: 6000, size: 600 },
      { start: 9000, size: 1800 },
    ];
    const tasks = waves.flatMap((wave, i) =>
      [0, 1].map((j) => ({
        upid: `UPID:pve1:0000${i}${j}:00000000:00000000:qmcreate:${300 + 2 * i + j}:root@pam:`,
        start: wave.start,
        end: wave.start + 2 * wave.size,
      })),
    );
    const { at, w, runTo, restore } = watcherOnClock(
      (clock) => new Set(tasks.filter((t) => t.start <= clock && t.end > clock).map((t) => t.upid)),
    );
    const seen = new Map<string, number>();
    const readsOfWave: number[] = [];
    try {
      for (const wave of waves) {
        await runTo(wave.start);
        const before = w.reads;
        for (const t of tasks.filter((x) => x.start === wave.start)) w.watch(t.upid, () => seen.set(t.upid, at.clock));
        await runTo(wave.start + 2 * wave.size + 1000);
        readsOfWave.push(w.reads - before);
      }
      const late = tasks.map((t) => seen.get(t.upid)! - t.end);
      // The first wave has nothing to learn from: seen at the cadence (a tenth of its age).
      assert.ok(late[0]! > 12, `the first wave is seen at the cadence: ${late[0]!.toFixed(1)} ms late`);
      // The next two waves are predicted from the one before.
      for (const i of [2, 3, 4, 5])
        assert.ok(late[i]! >= 0 && late[i]! <= 12, `copy ${i}: ${late.map((x) => x.toFixed(1)).join(', ')}`);
      // The larger wave is predicted early and the hint dropped: its looks are the cadence's, not
      // one at the floor (10 ms) from the hint to its end, which took 219 reads here (54 with no hint).
      assert.ok(late[6]! >= 0, 'never seen before its end');
      assert.ok(readsOfWave[3]! < 2 * readsOfWave[0]! + 10, `reads per wave: ${readsOfWave.join(', ')}`);
    } finally {
      restore();
    }
  });
});

describe('the task watcher past a predicted end', () => {
  it('a copy larger than the share predicts is looked at after a growing share of the time past it, not at every read', async () => {
    // Two copies begun together on one node: a small one (1 s) and one forty times as large. Once
    // the small one ended, the share predicted the large one's end from what the small one needed;
    // each look that found it running raised that bound to what it had had, which put its end just
    // ahead again: the watcher read the node's list every 1 to 3 ms until it ended (at speed 1 the
    // seed fleet's phases read a node's list 1,500 times in 5 s).
    const tasks = [
      { upid: 'UPID:pve1:00000001:00000000:00000000:qmcreate:301:root@pam:', end: 1000 },
      { upid: 'UPID:pve1:00000002:00000000:00000000:qmcreate:302:root@pam:', end: 40_000 },
    ];
    const { at, w, runTo, restore } = watcherOnClock(
      (clock) => new Set(tasks.filter((t) => t.end > clock).map((t) => t.upid)),
    );
    const seen = new Map<string, number>();
    try {
      for (const t of tasks) w.watch(t.upid, () => seen.set(t.upid, at.clock));
      await runTo(1500);
      const readsBefore = w.reads;
      await runTo(45_000);
      const late = seen.get(tasks[1]!.upid)! - 40_000;
      assert.ok(late >= 0 && late <= 2000, `the large copy seen ${late} ms late (at most the task poll)`);
      // The cadence alone (a tenth of its age, at most the task poll) takes about 30 reads from 1.5 s
      // to 40 s; past the prediction, about 20 more.
      assert.ok(w.reads - readsBefore <= 80, `${w.reads - readsBefore} reads from 1.5 s to its end`);
    } finally {
      restore();
    }
  });
});
