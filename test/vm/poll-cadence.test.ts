/**
 * The cadences that replace fixed poll intervals (issue 16): the task watcher's (task-watch.ts
 * pollDelay) and a booting guest's (guest-timing.ts). Both look again after a share of the time
 * waited so far, so an end is seen within that share of its duration; the watcher does not look
 * before a task's scaled estimate, and a site's next guest of a kind is first asked between the
 * bounds its earlier boots taught (the last ask that missed, the first that hit), then at the hit.
 * The clock is a plain number: these are the functions the runtimes call, without timers.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ProxmoxVM } from '../../src/api/proxmoxvm.ts';
import type { StepContext } from '../../src/vm/context.ts';
import {
  FLOOR_MS,
  guestBooted,
  guestExecExited,
  guestExecPollMs,
  guestExecRunning,
  guestMissed,
  guestPollMs,
  guestReached,
  guestStopped,
  waitsForScout,
} from '../../src/vm/guest-timing.ts';
import type { ResourceMemory } from '../../src/vm/resource-memory.ts';
import type { SiteContext } from '../../src/vm/site-cache.ts';
import { pollDelay } from '../../src/vm/task-watch.ts';
import { watcherOnClock } from './watcher-clock.ts';

describe('task watcher cadence', () => {
  const o = { floorMs: 50, maxMs: 2000 };
  it('looks again after a quarter of the task age, within the floor and the task poll', () => {
    assert.equal(pollDelay({ since: 0, expectedMs: 0 }, 0, o), 50, 'a new task: the floor');
    assert.equal(pollDelay({ since: 0, expectedMs: 0 }, 1000, o), 250);
    assert.equal(pollDelay({ since: 0, expectedMs: 0 }, 60_000, o), 2000, 'a long task: the task poll');
  });
  it('does not look before the scaled estimate once the site scale is known, and not without one', () => {
    const t = { since: 0, expectedMs: 40_000 };
    assert.equal(pollDelay(t, 0, o), 50, 'no scale: the estimate (in the cluster terms) is not trusted');
    assert.equal(pollDelay(t, 0, { ...o, scale: 0.05 }), 2000, 'due in 2 s: not before, at most the task poll');
    assert.equal(pollDelay(t, 1000, { ...o, scale: 0.05 }), 1000);
    assert.equal(pollDelay(t, 1990, { ...o, scale: 0.05 }), 497.5, 'due now: geometric again');
  });
  it("the watcher's first look follows the site's tasks of a type: sooner while they end before it (to 10 ms), later again when one runs past it (to the floor given)", async () => {
    const { at, ends, w, fireNext, restore } = watcherOnClock();
    try {
      let n = 0;
      /** A task of `ms` on pve1: when the watcher first woke it, after its start. */
      const seenAfter = async (ms: number, type = 'qmstart'): Promise<number> => {
        const upid = `UPID:pve1:0000${n}:00000000:00000000:${type}:${100 + n++}:root@pam:`;
        ends.set(upid, at.clock + ms);
        const start = at.clock;
        let woke: number | undefined;
        w.watch(upid, () => {
          woke = at.clock;
        });
        while (woke === undefined) assert.ok(await fireNext(), 'a timer is due');
        return woke - start;
      };
      const short: number[] = [];
      for (let i = 0; i < 3; i++) short.push(await seenAfter(2));
      assert.deepEqual(short, [10, 10, 10], 'a type starts at the lowest floor');
      // A create runs past its first look: the starts keep theirs.
      const create = await seenAfter(300, 'qmcreate');
      assert.ok(create >= 300 && create <= 300 * 1.1 + 20, `a 300 ms create seen at ${create}`);
      assert.equal(await seenAfter(2), 10, "another type's long task leaves the floor of the starts");
      const long = await seenAfter(300);
      assert.ok(long >= 300 && long <= 300 * 1.1 + 20, `a 300 ms task seen at ${long}`);
      assert.equal(await seenAfter(2), 20, 'a start was seen running at its first look: the floor doubled');
      // Clones of 160 ms: the first one looked at after 10 ms, then (none of the type seen to end)
      // at its type's first-look floor, doubled to 20 by that look, until a tenth of its age is more;
      // once the site's clones are known to take that long, every 10% of that.
      const first = await seenAfter(160, 'qmclone');
      const next = await seenAfter(160, 'qmclone');
      assert.ok(first - 160 <= 20, `the first clone seen ${first - 160} ms late`);
      assert.ok(next - 160 <= 20, `the next one seen ${next - 160} ms late`);
      // A type whose first task runs long climbs to minMs: a real cluster's starts, seconds long.
      for (let i = 0; i < 4; i++) await seenAfter(1000, 'qmmigrate');
      const migrate = await seenAfter(1000, 'qmmigrate');
      assert.ok(migrate >= 1000 && migrate <= 1000 * 1.1 + 50, `a 1 s task seen at ${migrate}`);
    } finally {
      restore();
    }
  });
});

describe('task watcher: a task watched again', () => {
  it('keeps its age: a reconcile that finds its task running does not start its looks over', async () => {
    /** Reads of the node's list until a 1 s task is seen ended, watched again at `again` ms (or not). */
    const readsFor = async (again: number | undefined) => {
      const { at, ends, w, runTo, restore } = watcherOnClock();
      try {
        const upid = 'UPID:pve1:00000001:00000000:00000000:qmstart:301:root@pam:';
        ends.set(upid, 1000);
        let woke: number | undefined;
        w.watch(upid, () => {
          woke = at.clock;
        });
        if (again !== undefined) {
          await runTo(again);
          w.watch(upid, () => {
            woke = at.clock;
          });
        }
        await runTo(3000);
        assert.ok(woke !== undefined && woke >= 1000, 'woken once it ended');
        return { reads: w.reads, late: woke - 1000 };
      } finally {
        restore();
      }
    };
    const once = await readsFor(undefined);
    const twice = await readsFor(700);
    assert.ok(twice.reads <= once.reads + 1, `${twice.reads} reads watched twice, ${once.reads} once`);
    assert.ok(twice.late <= 1000 * 0.1 + 1, `seen ${twice.late} ms late`);
  });
});

describe('task watcher: a task watched while a look is pending', () => {
  it('does not put that look off: a 500 ms task is seen within a tenth of its time when another begins after its end', async () => {
    const { at, ends, w, runTo, restore } = watcherOnClock();
    try {
      const first = 'UPID:pve1:00000001:00000000:00000000:qmcreate:301:root@pam:';
      const second = 'UPID:pve1:00000002:00000000:00000000:qmcreate:302:root@pam:';
      ends.set(first, 500);
      let woke: number | undefined;
      w.watch(first, () => {
        woke ??= at.clock;
      });
      // Its look was due at about 545 (a tenth past the last one, at 495); the second, watched at
      // 532, had it computed again from then: a tenth of 532 later, or the newcomer's floor, 552.
      await runTo(532);
      ends.set(second, 1032);
      w.watch(second, () => {});
      await runTo(2000);
      assert.ok(woke !== undefined && woke - 500 <= 50, `seen ${woke === undefined ? 'never' : woke - 500} ms late`);
    } finally {
      restore();
    }
  });
});

describe('task watcher: tasks of a type that run together on a node', () => {
  it('once one ended, the others are looked at closely from the age at which it was last seen running', async () => {
    const { at, ends, w, runTo, restore } = watcherOnClock();
    try {
      // A wave of five 600 ms imports begun 30 ms apart: copies that share a storage's bandwidth
      // end one after another, as far apart as they began.
      const woke = new Map<string, number>();
      for (let i = 0; i < 5; i++) {
        await runTo(i * 30);
        const upid = `UPID:pve1:0000${i}:00000000:00000000:qmcreate:${200 + i}:root@pam:`;
        ends.set(upid, at.clock + 600);
        w.watch(upid, () => woke.set(upid, at.clock));
      }
      await runTo(3000);
      const late = [...ends].map(([upid, end]) => woke.get(upid)! - end);
      assert.ok(late[0]! <= 600 * 0.1 + 1, `the first one seen ${late[0]} ms late (a tenth of its age)`);
      for (const [i, l] of late.entries())
        if (i > 0) assert.ok(l >= 0 && l <= 12, `import ${i} seen ${l} ms late (${late.join(', ')})`);
    } finally {
      restore();
    }
  });
});

describe('guest cadence', () => {
  let now = 0;
  const site = { now: () => now } as unknown as SiteContext;
  const vm = (image: string) => ({ spec: { forProvider: { image } } }) as unknown as ProxmoxVM;
  const ctxOf = (memory: ResourceMemory) =>
    ({ site, memory, options: { agentPollMs: 5000 } }) as unknown as StepContext;
  /**
   * One boot of a guest of `r`'s kind, seen from its start at `start`, whose agent answers `tookMs`
   * in, asked as guestPollMs says (an agent poll of a minute): when it was seen, and after how many asks.
   */
  const bootAsked = (r: ProxmoxVM, start: number, tookMs: number, agentPollMs = 60_000) => {
    const ctx = {
      site,
      memory: { secrets: { sshKeys: [] } },
      options: { agentPollMs },
    } as unknown as StepContext;
    guestStopped(ctx.memory);
    now = start;
    guestBooted(ctx);
    let asks = 0;
    for (;;) {
      now += guestPollMs(ctx, r, 'agent');
      asks++;
      if (now - start >= tookMs) break;
      guestMissed(ctx, 'agent');
    }
    guestReached(ctx, r, 'agent');
    return { seen: now - start, asks };
  };

  it('asks the first guest after a share of its boot; the next of its kind not before the first one answered', () => {
    const first = ctxOf({ secrets: { sshKeys: [] } });
    const r = vm('local:import/noble.qcow2');
    assert.equal(guestPollMs(first, r, 'agent'), 5000, 'a boot not seen: the agent poll');
    guestStopped(first.memory);
    now = 10_000;
    guestBooted(first);
    const asks: number[] = [];
    // The agent answers 12 s into the boot.
    while (now - 10_000 < 12_000) {
      const wait = guestPollMs(first, r, 'agent');
      asks.push(wait);
      now += wait;
    }
    guestReached(first, r, 'agent');
    const seenAfter = now - 10_000;
    assert.ok(seenAfter <= 12_000 * 1.25 + 100, `seen ${seenAfter} ms into the boot`);
    assert.ok(asks.length <= 25, `${asks.length} asks`);
    assert.ok(
      asks.every((w, i) => i === 0 || w >= asks[i - 1]!),
      'the waits grow',
    );

    // The second guest of the kind: its first ask aims at most of what the first one's hit took
    // (0.85 of it, no miss learned), and is sent halfway there, that being more than the agent poll.
    const second = ctxOf({ secrets: { sshKeys: [] } });
    guestStopped(second.memory);
    now = 100_000;
    guestBooted(second);
    const wait = guestPollMs(second, r, 'agent');
    const aimed = 0.85 * seenAfter;
    assert.ok(aimed / 2 > 5000, `(the case: a learned time over twice the poll, ${aimed} ms)`);
    assert.ok(Math.abs(wait - aimed / 2) < 1, `waits ${wait} ms: half of the ${aimed} ms aimed at`);
    now += wait;
    guestMissed(second, 'agent');
    assert.ok(Math.abs(guestPollMs(second, r, 'agent') - aimed / 2) < 1, 'then the rest of the way, at once');
    // Another kind learns nothing from it.
    const other = ctxOf({ secrets: { sshKeys: [] } });
    guestStopped(other.memory);
    guestBooted(other);
    assert.equal(guestPollMs(other, vm('local:import/other.qcow2'), 'agent'), FLOOR_MS, 'the floor');
  });

  it('the first boot of a kind that this process started: asked no sooner than the start took, and a third as often', () => {
    const scoutOf = (image: string, startMs: number | undefined) => {
      const ctx = ctxOf({ secrets: { sshKeys: [] } } as ResourceMemory);
      const r = vm(image);
      guestStopped(ctx.memory);
      now = 70_000_000;
      if (startMs !== undefined) ctx.memory.startSentAt = now - startMs;
      guestBooted(ctx);
      assert.equal(ctx.memory.startSentAt, undefined, 'taken by this boot');
      const first = guestPollMs(ctx, r, 'agent');
      let asks = 0;
      // The agent answers 25 s into the boot (a real guest; the start took 2.5 s).
      while (now - 70_000_000 < 25_000) {
        now += guestPollMs(ctx, r, 'agent');
        asks++;
        guestMissed(ctx, 'agent');
      }
      return { first, asks, seen: now - 70_000_000 };
    };
    const started = scoutOf('local:import/started.qcow2', 2500);
    const unknown = scoutOf('local:import/not-started.qcow2', undefined);
    assert.equal(started.first, 2500, 'first asked when as old as its start took');
    assert.equal(unknown.first, FLOOR_MS, 'a boot this process did not start: from the floor');
    assert.ok(started.asks <= 10 && unknown.asks >= 20, `asks: ${started.asks} against ${unknown.asks}`);
    assert.ok(started.seen <= 25_000 * 1.25 + 1, `seen at ${started.seen} ms`);
  });

  it('a boot not seen from its start (a restart of the provider) teaches nothing', () => {
    const m = { secrets: { sshKeys: [] } } as ResourceMemory;
    const ctx = ctxOf(m);
    const r = vm('local:import/jammy.qcow2');
    now = 0;
    guestBooted(ctx); // first seen running: not seen stopped before
    now = 40_000;
    guestReached(ctx, r, 'agent');
    const next = ctxOf({ secrets: { sshKeys: [] } });
    guestStopped(next.memory);
    guestBooted(next);
    assert.equal(guestPollMs(next, r, 'agent'), FLOOR_MS);
  });
  it("boot after boot, the first ask closes in on the milestone until the bounds are within a tenth of the hit; at most two asks a boot, never later than the first boot's hit", () => {
    const r = vm('local:import/converge.qcow2');
    let firstHit = Number.POSITIVE_INFINITY;
    const lags: number[] = [];
    for (let boot = 0; boot < 8; boot++) {
      // The agent answers 20 s into every boot.
      const { seen, asks } = bootAsked(r, 1_000_000 * (boot + 1), 20_000);
      if (boot > 0) {
        assert.ok(asks <= 2, `boot ${boot}: ${asks} asks`);
        // (a sum of floating-point waits: equal to within a nanosecond)
        assert.ok(seen <= firstHit + 1e-6, `boot ${boot}: seen at ${seen} ms, after the first boot's ${firstHit}`);
      } else firstHit = seen;
      lags.push(seen - 20_000);
    }
    assert.ok(lags[0]! > 1000, `the first boot's lag ${lags[0]} ms`);
    const late = lags.slice(4).reduce((x, y) => x + y, 0) / 4;
    // Closer than the first boot (asked at its hit alone, every boot would be as late), within
    // the tenth of the boot where probing stops (NARROW in guest-timing.ts).
    assert.ok(late < lags[0]! / 1.5 && late <= 2000, `lags ${lags.map(Math.round).join(', ')} ms: closing in`);
  });
  it('a boot slower than those that taught the hit is asked closely past it, not a quarter of its age later', () => {
    const r = vm('local:import/slower.qcow2');
    /** A boot whose agent answers `tookMs` in, a while after the last one. */
    const boot = (tookMs: number) => bootAsked(r, now + 1_000_000, tookMs);
    now = 40_000_000;
    for (let i = 0; i < 6; i++) boot(20_000);
    const slow = boot(21_000);
    // Asked as an unlearned boot past the hit, it was seen after a quarter of its age: at 25 s.
    assert.ok(slow.seen <= 21_000 + 1000, `a 21 s boot seen at ${slow.seen} ms`);
    assert.ok(slow.asks <= 4, `${slow.asks} asks`);
  });

  it('a kind learned to take several agent polls: asked at its learned time, not at every poll; while its bounds are wide, once halfway too, which sees a faster boot', () => {
    now = 60_000_000;
    // The agent poll at its default (5 s); the agent answers 25 s into the boot (a real guest at speed 1).
    const r = vm('local:import/long-boot.qcow2');
    const first = bootAsked(r, now + 1_000_000, 25_000, 5000);
    assert.ok(first.asks >= 10, `the first boot (the scout): ${first.asks} asks`);
    const perBoot: number[] = [];
    for (let i = 0; i < 3; i++) {
      const next = bootAsked(r, now + 1_000_000, 25_000, 5000);
      perBoot.push(next.asks);
      // At the poll: at 5, 10, 15 and 20 s, then the probe and the hit; now at most halfway, the probe and the hit.
      assert.ok(next.asks <= 3, `boot ${i + 2}: ${next.asks} asks`);
      assert.ok(next.seen <= first.seen + 1e-6, `boot ${i + 2}: seen at ${next.seen} ms`);
    }
    // The halfway asks teach no bound (they would widen the learned ones): the bounds close in on
    // the boot, and once within a tenth of it each boot is asked once, at the hit.
    for (let i = 0; i < 5; i++) perBoot.push(bootAsked(r, now + 1_000_000, 25_000, 5000).asks);
    assert.deepEqual(perBoot.slice(-4), [1, 1, 1, 1], `asks per boot: ${perBoot.join(', ')}`);
    // Another kind, taught by its scout alone (its bounds a quarter of a boot apart): a guest of it
    // whose agent answers at 8 s (another package list, a warm cache) is seen by the halfway ask.
    const other = vm('local:import/long-boot-2.qcow2');
    const scout = bootAsked(other, now + 1_000_000, 25_000, 5000);
    const fast = bootAsked(other, now + 1_000_000, 8000, 5000);
    assert.ok(fast.seen <= scout.seen / 2 + 1, `a boot of 8 s seen at ${fast.seen} ms`);
    assert.equal(fast.asks, 1);
  });

  it('boots of a kind that begin together: one asks from the floor up, the others wait to be woken by its answer, then ask at its time', () => {
    const woken: string[] = [];
    const together = (memory: ResourceMemory) =>
      ({
        site,
        memory,
        options: { agentPollMs: 60_000, wake: (key: string) => woken.push(key) },
      }) as unknown as StepContext;
    const named = (name: string) =>
      ({
        metadata: { name, namespace: 'default' },
        spec: { forProvider: { image: 'local:import/together.qcow2' } },
      }) as unknown as ProxmoxVM;
    now = 5_000_000;
    const boots = ['a', 'b', 'c'].map((name) => {
      const ctx = together({ secrets: { sshKeys: [] } } as ResourceMemory);
      guestStopped(ctx.memory);
      guestBooted(ctx);
      now += 10;
      return { ctx, r: named(name) };
    });
    const [scout, ...others] = boots;
    assert.equal(guestPollMs(scout!.ctx, scout!.r, 'agent'), FLOOR_MS, 'the first one asks from the floor');
    for (const o of others)
      assert.equal(guestPollMs(o.ctx, o.r, 'agent'), 60_000, 'the others wait (the agent poll, if no wake comes)');
    // Reconciled meanwhile (that poll, a lost wake), a waiter does not ask its guest; the scout does.
    assert.equal(waitsForScout(scout!.ctx, scout!.r, 'agent'), false);
    for (const o of others) assert.equal(waitsForScout(o.ctx, o.r, 'agent'), true);
    let asks = 0;
    while (now - 5_000_000 < 20_000) {
      now += guestPollMs(scout!.ctx, scout!.r, 'agent');
      asks++;
      guestMissed(scout!.ctx, 'agent');
    }
    assert.deepEqual(woken, [], 'nobody is woken before the answer');
    guestReached(scout!.ctx, scout!.r, 'agent');
    const hit = now - 5_000_000;
    assert.deepEqual(woken, ['default/b', 'default/c']);
    for (const o of others) assert.equal(waitsForScout(o.ctx, o.r, 'agent'), false, 'the kind learned: each asks');
    assert.ok(asks > 5, `the scout asked ${asks} times`);
    // Each one asks when it is as old as the scout was at its answer (boots alike).
    for (const [i, o] of others.entries()) {
      const age = now - (5_000_000 + 10 * (i + 1));
      assert.ok(Math.abs(guestPollMs(o.ctx, o.r, 'agent') - (hit - age)) < 1);
    }
  });

  it('a scout that stops asking hands the scouting on after two agent polls: its waiters do not wait for good', () => {
    // Two processes on one fleet (two `apply` runs, a CLI and the controller): a scout whose
    // milestone the other process saw was live here for good, and its waiter never asked.
    const named = (name: string) =>
      ({
        metadata: { name, namespace: 'default' },
        spec: { forProvider: { image: 'local:import/silent-scout.qcow2' } },
      }) as unknown as ProxmoxVM;
    const ctxOf = (memory: ResourceMemory) =>
      ({ site, memory, options: { agentPollMs: 5000, wake: () => {} } }) as unknown as StepContext;
    now = 9_000_000;
    const [scout, waiter] = ['s', 'w'].map((name) => {
      const ctx = ctxOf({ secrets: { sshKeys: [] } } as ResourceMemory);
      guestStopped(ctx.memory);
      guestBooted(ctx);
      now += 10;
      return { ctx, r: named(name) };
    });
    assert.equal(guestPollMs(scout!.ctx, scout!.r, 'agent'), FLOOR_MS);
    assert.equal(guestPollMs(waiter!.ctx, waiter!.r, 'agent'), 5000, 'the waiter waits for the scout');
    now += FLOOR_MS;
    guestMissed(scout!.ctx, 'agent');
    // The scout asks no more (another process finished its resource). Within two agent polls of its
    // last ask the waiter still waits; past them it asks, as the kind's scout now.
    now += 9_900;
    assert.equal(waitsForScout(waiter!.ctx, waiter!.r, 'agent'), true);
    now += 200;
    assert.equal(waitsForScout(waiter!.ctx, waiter!.r, 'agent'), false, 'the silent scout is not waited for');
    assert.ok(guestPollMs(waiter!.ctx, waiter!.r, 'agent') < 5000, 'the waiter asks, from its own cadence');
    assert.equal(waitsForScout(scout!.ctx, scout!.r, 'agent'), false);
  });

  it('a command in the guest: the first asked at 10 ms, then at twice its age; the next ones at the hit it taught, its bounds being within half of it', () => {
    // Each site learns apart: this one is new.
    const own = { now: () => now } as unknown as SiteContext;
    const ctxAt = (memory: ResourceMemory) =>
      ({ site: own, memory, options: { agentPollMs: 5000 } }) as unknown as StepContext;
    const run = (ctx: StepContext, tookMs: number): number[] => {
      const startedAt = now;
      const asks: number[] = [];
      for (;;) {
        const wait = guestExecPollMs(ctx, startedAt);
        asks.push(wait);
        now += wait;
        if (now - startedAt >= tookMs) break;
        guestExecRunning(ctx, startedAt);
      }
      guestExecExited(ctx, startedAt);
      return asks;
    };
    now = 9_000_000;
    // A command of 3 ms (the simulator at speed 100) is seen at the first ask, 10 ms after it began.
    assert.deepEqual(run(ctxAt({ secrets: { sshKeys: [] } } as ResourceMemory), 3), [10]);
    // One of 300 ms on a site that has learned nothing: at 10, 20, 40, 80, 160, 320 ms.
    const slow = { now: () => now } as unknown as SiteContext;
    const slowCtx = (memory: ResourceMemory) =>
      ({ site: slow, memory, options: { agentPollMs: 5000 } }) as unknown as StepContext;
    const first = run(slowCtx({ secrets: { sshKeys: [] } } as ResourceMemory), 300);
    assert.deepEqual(first, [10, 10, 20, 40, 80, 160]);
    // The next one there is asked at the hit (320): the last miss (160) is within half of it, and
    // a probe between them would gain little of a short command for the ask it costs.
    const next = run(slowCtx({ secrets: { sshKeys: [] } } as ResourceMemory), 300);
    assert.deepEqual(next, [320]);
  });

  it('an ask is sent later than scheduled (the timer, the reconcile before it): the site takes that lag off, and what it learns does not drift later', () => {
    const own = { now: () => now } as unknown as SiteContext;
    const ctxAt = () =>
      ({ site: own, memory: { secrets: { sshKeys: [] } }, options: { agentPollMs: 5000 } }) as unknown as StepContext;
    const LAG_MS = 4;
    /** A command of `tookMs`, each ask sent LAG_MS after its time: how long after its start it was seen exited. */
    const run = (tookMs: number): number => {
      const ctx = ctxAt();
      const startedAt = now;
      for (;;) {
        now += guestExecPollMs(ctx, startedAt) + LAG_MS;
        if (now - startedAt >= tookMs) break;
        guestExecRunning(ctx, startedAt);
      }
      guestExecExited(ctx, startedAt);
      return now - startedAt;
    };
    now = 30_000_000;
    const seen: number[] = [];
    for (let i = 0; i < 12; i++) seen.push(run(3));
    assert.equal(seen[0], 10 + LAG_MS, 'the first: at the floor, and the lag');
    // Learned from asks each sent 4 ms late, the time asked at settled near 27 ms (6.7 times the lag).
    const last = seen.slice(-4);
    assert.ok(
      last.every((t) => t <= 3 + 2 * LAG_MS),
      `seen at ${seen.map((t) => t.toFixed(1)).join(', ')} ms`,
    );
  });
});
