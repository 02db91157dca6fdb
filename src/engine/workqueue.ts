/**
 * A rate-limited work queue with client-go's semantics:
 * - a key is never processed by two workers at once ("dirty" + "processing" sets); a key added
 *   while it is processed is queued again after `done`;
 * - `addAfter` keeps the earliest of several pending times for a key;
 * - `addRateLimited` waits the key's per-item exponential backoff (with jitter, capped);
 *   `forget` resets it.
 * Time comes from an injectable clock so tests need no sleeps.
 */

/** The longest delay a timer can hold (setTimeout overflows past 2^31-1 ms and fires at once). */
export const MAX_DELAY_MS = 2 ** 31 - 1;

export interface QueueClock {
  now(): number;
  setTimeout(fn: () => void, ms: number): { cancel(): void };
}

export const realClock: QueueClock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => {
    const t = setTimeout(fn, ms);
    t.unref?.();
    return { cancel: () => clearTimeout(t) };
  },
};

export interface BackoffOptions {
  /** First delay, ms. Default 1000. */
  baseMs: number;
  /** Cap, ms. Default 300000 (5 min). */
  capMs: number;
  /** Multiplier per failure. Default 2. */
  factor: number;
  /** Jitter fraction: the delay is multiplied by a random factor in [1 - j, 1 + j]. Default 0.1. */
  jitter: number;
}

export const DEFAULT_BACKOFF: BackoffOptions = { baseMs: 1000, capMs: 300_000, factor: 2, jitter: 0.1 };

/** The seed's schedule for failed creates: about 30 s, 1 m, 2 m, 5 m, 10 m. */
export const CREATE_FAILURE_SCHEDULE_MS = [30_000, 60_000, 120_000, 300_000, 600_000];

export class ItemBackoff {
  private readonly failures = new Map<string, number>();
  private readonly opts: BackoffOptions;
  private readonly random: () => number;
  constructor(opts: Partial<BackoffOptions> = {}, random: () => number = Math.random) {
    this.opts = { ...DEFAULT_BACKOFF, ...opts };
    this.random = random;
  }
  /**
   * The next delay for this key, counting one more failure. `permanent`: a failure only a change
   * elsewhere fixes: the first is looked at again after the base delay (a confirmation), every
   * later one at the cap.
   */
  when(key: string, schedule?: number[], permanent = false): number {
    const n = this.failures.get(key) ?? 0;
    this.failures.set(key, n + 1);
    const base = schedule
      ? schedule[Math.min(n, schedule.length - 1)]!
      : permanent
        ? n === 0
          ? this.opts.baseMs
          : this.opts.capMs
        : Math.min(this.opts.capMs, this.opts.baseMs * this.opts.factor ** n);
    const j = this.opts.jitter;
    const d = Math.round(base * (1 - j + 2 * j * this.random()));
    // The cap is a cap: jitter may pull a capped delay down, never push it past the cap.
    return schedule ? d : Math.min(this.opts.capMs, d);
  }
  failuresOf(key: string): number {
    return this.failures.get(key) ?? 0;
  }
  forget(key: string): void {
    this.failures.delete(key);
  }
}

export class WorkQueue {
  private readonly queue: string[] = [];
  private readonly dirty = new Set<string>();
  private readonly processing = new Set<string>();
  private readonly waiting = new Map<string, { at: number; timer: { cancel(): void } }>();
  private readonly waiters: Array<(key: string | undefined) => void> = [];
  private shuttingDown = false;
  readonly backoff: ItemBackoff;
  private readonly clock: QueueClock;
  /** Time each key entered the queue, for latency metrics. */
  private readonly addedAt = new Map<string, number>();
  onLatency?: (ms: number) => void;

  constructor(opts: { backoff?: Partial<BackoffOptions>; clock?: QueueClock; random?: () => number } = {}) {
    this.clock = opts.clock ?? realClock;
    this.backoff = new ItemBackoff(opts.backoff, opts.random);
  }

  get length(): number {
    return this.queue.length;
  }
  get pendingDelayed(): number {
    return this.waiting.size;
  }

  add(key: string): void {
    if (this.shuttingDown || this.dirty.has(key)) return;
    this.dirty.add(key);
    this.addedAt.set(key, this.clock.now());
    if (this.processing.has(key)) return;
    const w = this.waiters.shift();
    if (w) w(key);
    else this.queue.push(key);
  }

  /** Add after a delay; of several pending delays for one key the earliest wins. */
  addAfter(key: string, delay: number): void {
    if (this.shuttingDown) return;
    if (!(delay > 0)) return this.add(key);
    // A timer cannot hold more: setTimeout would fire at once (a hot loop) instead of much later.
    const ms = Math.min(delay, MAX_DELAY_MS);
    const at = this.clock.now() + ms;
    const existing = this.waiting.get(key);
    if (existing && existing.at <= at) return;
    existing?.timer.cancel();
    const timer = this.clock.setTimeout(() => {
      this.waiting.delete(key);
      this.add(key);
    }, ms);
    this.waiting.set(key, { at, timer });
  }

  /** Add after the key's next backoff delay; returns the delay. */
  addRateLimited(key: string, schedule?: number[], permanent = false): number {
    const d = this.backoff.when(key, schedule, permanent);
    this.addAfter(key, d);
    return d;
  }

  forget(key: string): void {
    this.backoff.forget(key);
  }

  /** Next key to process (waits for one); undefined once shut down and drained. */
  get(): Promise<string | undefined> {
    const key = this.queue.shift();
    if (key !== undefined) return Promise.resolve(this.take(key));
    if (this.shuttingDown) return Promise.resolve(undefined);
    return new Promise((resolve) => this.waiters.push((k) => resolve(k === undefined ? undefined : this.take(k))));
  }

  private take(key: string): string {
    this.processing.add(key);
    this.dirty.delete(key);
    const added = this.addedAt.get(key);
    if (added !== undefined) {
      this.onLatency?.(this.clock.now() - added);
      this.addedAt.delete(key);
    }
    return key;
  }

  done(key: string): void {
    this.processing.delete(key);
    if (this.dirty.has(key)) {
      const w = this.waiters.shift();
      if (w) w(key);
      else this.queue.push(key);
    }
  }

  isProcessing(key: string): boolean {
    return this.processing.has(key);
  }

  shutdown(): void {
    this.shuttingDown = true;
    for (const w of this.waiting.values()) w.timer.cancel();
    this.waiting.clear();
    for (const w of this.waiters.splice(0)) w(undefined);
  }
}
