/**
 * The cadences that replace fixed poll intervals (issue 16): the task watcher's (task-watch.ts
 * pollDelay) and a booting guest's (guest-timing.ts). Both look again after a share of the time
 * waited so far, so an end is seen within that share of its duration; the watcher does not look
 * before a task's scaled estimate, and a site's second guest of a kind is not asked before the
 * time the first one took (its lower bound, so that learning never makes an answer late).
 * The clock is a plain number: these are the functions the runtimes call, without timers.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ProxmoxVM } from '../../src/api/proxmoxvm.ts';
import type { StepContext } from '../../src/vm/context.ts';
import { guestBooted, guestPollMs, guestReached, guestStopped } from '../../src/vm/guest-timing.ts';
import type { ResourceMemory, SiteContext } from '../../src/vm/site-cache.ts';
import { pollDelay } from '../../src/vm/task-watch.ts';

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
});

describe('guest cadence', () => {
  let now = 0;
  const site = { now: () => now } as unknown as SiteContext;
  const vm = (image: string) => ({ spec: { forProvider: { image } } }) as unknown as ProxmoxVM;
  const ctxOf = (memory: ResourceMemory) =>
    ({ site, memory, options: { agentPollMs: 5000 } }) as unknown as StepContext;

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

    // The second guest of the kind: its first ask waits for what the first one's first hit took.
    const second = ctxOf({ secrets: { sshKeys: [] } });
    guestStopped(second.memory);
    now = 100_000;
    guestBooted(second);
    const wait = guestPollMs(second, r, 'agent');
    assert.ok(wait > 4000 && wait <= 5000, `waits ${wait} ms (at most the agent poll)`);
    // Another kind learns nothing from it.
    const other = ctxOf({ secrets: { sshKeys: [] } });
    guestStopped(other.memory);
    guestBooted(other);
    assert.equal(guestPollMs(other, vm('local:import/other.qcow2'), 'agent'), 100, 'the floor');
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
    assert.equal(guestPollMs(next, r, 'agent'), 100);
  });
});
