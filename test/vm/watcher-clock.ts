/**
 * A TaskWatcher (src/vm/task-watch.ts) on a test's own clock: its timers are kept in a list and
 * fired in order by the test, so that a cadence is checked without sleeps or real time.
 */
import { TaskWatcher } from '../../src/vm/task-watch.ts';

/**
 * A TaskWatcher on this test's clock over node pve1, whose tasks end when `ends` says; its timers
 * are fired in order, each followed by the reads it started, by `fireNext`.
 */
export function watcherOnClock(active?: (clock: number) => Set<string>) {
  const at = { clock: 0 };
  const ends = new Map<string, number>();
  const timers: Array<{ at: number; fn: () => void }> = [];
  const realSetTimeout = globalThis.setTimeout;
  const realClearTimeout = globalThis.clearTimeout;
  globalThis.setTimeout = ((fn: () => void, ms: number) => {
    const t = { at: at.clock + ms, fn, unref() {} };
    timers.push(t);
    return t;
  }) as unknown as typeof setTimeout;
  globalThis.clearTimeout = ((t: unknown) => {
    const i = timers.indexOf(t as (typeof timers)[number]);
    if (i >= 0) timers.splice(i, 1);
  }) as typeof clearTimeout;
  const w = new TaskWatcher({
    minMs: 50,
    maxMs: 2000,
    now: () => at.clock,
    activeTasks: async () =>
      active ? active(at.clock) : new Set([...ends].filter(([, end]) => end > at.clock).map(([upid]) => upid)),
  });
  /** Fire the next timer due by `until`: false when none is. */
  const fireNext = async (until = Number.POSITIVE_INFINITY): Promise<boolean> => {
    timers.sort((a, b) => a.at - b.at);
    const next = timers[0];
    if (!next || next.at > until) return false;
    timers.shift();
    at.clock = Math.max(at.clock, next.at);
    next.fn();
    await new Promise((resolve) => setImmediate(resolve));
    return true;
  };
  /** Fire the timers due by `t`, in order; then the clock is `t`. */
  const runTo = async (t: number) => {
    while (await fireNext(t));
    at.clock = t;
  };
  const restore = () => {
    globalThis.setTimeout = realSetTimeout;
    globalThis.clearTimeout = realClearTimeout;
    w.stop();
  };
  return { at, ends, w, fireNext, runTo, restore };
}
