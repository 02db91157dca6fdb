/** A QueueClock whose time only moves when the test says so; timers fire in time order. */
import type { QueueClock } from '../../src/engine/workqueue.ts';

interface FakeTimer {
  at: number;
  seq: number;
  fn: () => void;
  cancelled: boolean;
}

export class FakeClock implements QueueClock {
  t: number;
  private seq = 0;
  private timers: FakeTimer[] = [];

  constructor(start = 0) {
    this.t = start;
  }

  now(): number {
    return this.t;
  }

  setTimeout(fn: () => void, ms: number): { cancel(): void } {
    const timer: FakeTimer = { at: this.t + Math.max(0, ms), seq: this.seq++, fn, cancelled: false };
    this.timers.push(timer);
    return {
      cancel: () => {
        timer.cancelled = true;
      },
    };
  }

  /** Live (not cancelled, not fired) timers. */
  get pending(): number {
    return this.timers.filter((t) => !t.cancelled).length;
  }

  /** When the next live timer fires, or undefined. */
  nextAt(): number | undefined {
    const live = this.timers.filter((t) => !t.cancelled);
    return live.length ? Math.min(...live.map((t) => t.at)) : undefined;
  }

  /** Move time forward by `ms`, firing every timer due on the way, in order. */
  advance(ms: number): void {
    const target = this.t + ms;
    for (;;) {
      let next: FakeTimer | undefined;
      for (const t of this.timers) {
        if (t.cancelled || t.at > target) continue;
        if (!next || t.at < next.at || (t.at === next.at && t.seq < next.seq)) next = t;
      }
      if (!next) break;
      this.timers = this.timers.filter((t) => t !== next);
      this.t = Math.max(this.t, next.at);
      next.fn();
    }
    this.timers = this.timers.filter((t) => !t.cancelled);
    this.t = target;
  }
}

/** Let every queued promise callback run (one macrotask turn; not a timed sleep). */
export function flush(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
