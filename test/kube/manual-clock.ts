/**
 * A clock for the Kubernetes client's rate limiter (src/kube/ratelimit.ts) that moves only when a
 * test says, so that what a token bucket lets through is asserted by order and count, never by
 * wall time.
 */
import type { LimiterClock } from '../../src/kube/ratelimit.ts';

/** Sleepers wake in due order. */
export class ManualClock implements LimiterClock {
  t = 0;
  private sleepers: Array<{ due: number; wake: () => void }> = [];
  now(): number {
    return this.t;
  }
  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      const s = { due: this.t + ms, wake: resolve };
      this.sleepers.push(s);
      signal?.addEventListener(
        'abort',
        () => {
          this.sleepers = this.sleepers.filter((x) => x !== s);
          reject(signal.reason);
        },
        { once: true },
      );
    });
  }
  /** Move on by `ms` and wake every sleeper due by then, earliest first. */
  async advance(ms: number): Promise<void> {
    this.t += ms;
    const due = this.sleepers.filter((s) => s.due <= this.t).sort((a, b) => a.due - b.due);
    this.sleepers = this.sleepers.filter((s) => s.due > this.t);
    for (const s of due) {
      s.wake();
      await Promise.resolve();
    }
    // Let the awaiting callers run.
    for (let i = 0; i < 5; i++) await Promise.resolve();
  }
}
