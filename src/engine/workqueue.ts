/**
 * A rate-limited work queue with client-go's semantics:
 * - a key is never processed by two workers at once ("dirty" + "processing" sets); a key added
 *   while it is processed is queued again after `done`;
 * - `addAfter` keeps the earliest of several pending times for a key (`cancelAfter` drops it);
 * - `addRateLimited` waits the key's per-item exponential backoff (with jitter, capped);
 *   `forget` resets it.
 * Plus controller-runtime's priorities (pkg/controller/priorityqueue, v0.20): a key is handed out
 * by priority, then first in first out; a key queued again takes the higher of its priorities (and,
 * delayed, the earlier of its times). The controller queues changes seen by the watch at
 * PRIORITY_EVENT and the periodic polls, the first list and the resync at PRIORITY_LOW, so that a
 * change to one resource never waits behind a poll round of ten thousand.
 * Time comes from an injectable clock so tests need no sleeps.
 */

/** A change seen by the watch, a wake, work in flight, a retry: handed out first. */
export const PRIORITY_EVENT = 0;
/** A periodic poll, the first list, a resync (controller-runtime's `LowPriority`). */
export const PRIORITY_LOW = -100;

/** The longest delay a timer can hold (setTimeout overflows past 2^31-1 ms and fires at once). */
export const MAX_DELAY_MS = 2 ** 31 - 1;

export interface QueueClock {
  now(): number;
  setTimeout(fn: () => void, ms: number): { cancel(): void };
}

/**
 * What a queue tells its metrics, as client-go's workqueue MetricsProvider: a key that became
 * dirty (an add that was not already pending), the time a key waited for a worker, the time a
 * worker spent on it, and a key queued again after a delay (controller-runtime's retries: backoff
 * and RequeueAfter alike).
 */
export interface QueueMetrics {
  added(): void;
  taken(waitedMs: number): void;
  finished(workedMs: number): void;
  retried(): void;
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

/**
 * First in, first out, with O(1) removal from the front (Array.shift is O(n) on a large array) and
 * entries that can go stale: a key moved to a higher priority leaves its old entry behind, which
 * `get` skips (its sequence number is no longer the key's).
 */
class Fifo {
  private items: Array<{ key: string; seq: number }> = [];
  private head = 0;
  push(key: string, seq: number): void {
    this.items.push({ key, seq });
  }
  shift(): { key: string; seq: number } | undefined {
    if (this.head >= this.items.length) return undefined;
    const e = this.items[this.head++];
    // Compact once the consumed front is large and most of the array.
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return e;
  }
}

export class WorkQueue {
  /** One FIFO per priority, and the priorities in use, highest first. */
  private readonly fifos = new Map<number, Fifo>();
  private priorities: number[] = [];
  /** Keys queued (dirty, not processing) -> their live entry: its sequence number and priority. */
  private readonly queued = new Map<string, { seq: number; priority: number }>();
  private seq = 0;
  private readonly dirty = new Set<string>();
  /** The priority a dirty key is to be queued with (a key added while it is processed). */
  private readonly dirtyPriority = new Map<string, number>();
  private readonly processing = new Set<string>();
  private readonly waiting = new Map<string, { at: number; priority: number; timer: { cancel(): void } }>();
  private readonly waiters: Array<(key: string | undefined) => void> = [];
  private shuttingDown = false;
  readonly backoff: ItemBackoff;
  private readonly clock: QueueClock;
  /** Time each key entered the queue, and each key in process was handed out, for the metrics. */
  private readonly addedAt = new Map<string, number>();
  private readonly takenAt = new Map<string, number>();
  metrics?: QueueMetrics;

  constructor(opts: { backoff?: Partial<BackoffOptions>; clock?: QueueClock; random?: () => number } = {}) {
    this.clock = opts.clock ?? realClock;
    this.backoff = new ItemBackoff(opts.backoff, opts.random);
  }

  /** Keys waiting for a worker. */
  get length(): number {
    return this.queued.size;
  }
  /** Keys waiting for a worker at `priority` or higher. */
  lengthAt(priority: number): number {
    let n = 0;
    for (const e of this.queued.values()) if (e.priority >= priority) n++;
    return n;
  }
  /** Keys waiting for a worker, by priority: every priority this queue has used, 0 when none waits. */
  lengthsByPriority(): Map<number, number> {
    const out = new Map<number, number>(this.priorities.map((p) => [p, 0]));
    for (const e of this.queued.values()) out.set(e.priority, (out.get(e.priority) ?? 0) + 1);
    return out;
  }
  get pendingDelayed(): number {
    return this.waiting.size;
  }

  private enqueue(key: string, priority: number): void {
    const w = this.waiters.shift();
    if (w) {
      this.queued.delete(key);
      return w(key);
    }
    let fifo = this.fifos.get(priority);
    if (!fifo) {
      fifo = new Fifo();
      this.fifos.set(priority, fifo);
      this.priorities = [...this.fifos.keys()].sort((a, b) => b - a);
    }
    const seq = ++this.seq;
    fifo.push(key, seq);
    this.queued.set(key, { seq, priority });
  }

  /** Queue `key` (once: a key already queued keeps its place, or moves up to a higher priority). */
  add(key: string, priority = PRIORITY_EVENT): void {
    if (this.shuttingDown) return;
    if (this.dirty.has(key)) {
      if (priority <= (this.dirtyPriority.get(key) ?? priority)) return;
      this.dirtyPriority.set(key, priority);
      // Queued at a lower priority: queued again at this one (the old entry is skipped by get).
      if (this.queued.has(key)) this.enqueue(key, priority);
      return;
    }
    this.dirty.add(key);
    this.dirtyPriority.set(key, priority);
    this.addedAt.set(key, this.clock.now());
    this.metrics?.added();
    if (this.processing.has(key)) return;
    this.enqueue(key, priority);
  }

  /**
   * Add after a delay; of several pending delays for one key the earliest wins, and the higher
   * priority (a later request at a higher priority raises the pending one's).
   */
  addAfter(key: string, delay: number, priority = PRIORITY_EVENT): void {
    if (this.shuttingDown) return;
    if (!(delay > 0)) return this.add(key, priority);
    this.metrics?.retried();
    // A timer cannot hold more: setTimeout would fire at once (a hot loop) instead of much later.
    const ms = Math.min(delay, MAX_DELAY_MS);
    const at = this.clock.now() + ms;
    const existing = this.waiting.get(key);
    if (existing && existing.at <= at) {
      existing.priority = Math.max(existing.priority, priority);
      return;
    }
    existing?.timer.cancel();
    const entry = { at, priority: Math.max(priority, existing?.priority ?? priority), timer: { cancel() {} } };
    entry.timer = this.clock.setTimeout(() => {
      this.waiting.delete(key);
      this.add(key, entry.priority);
    }, ms);
    this.waiting.set(key, entry);
  }

  /** Add after the key's next backoff delay; returns the delay. */
  addRateLimited(key: string, schedule?: number[], permanent = false, priority = PRIORITY_EVENT): number {
    const d = this.backoff.when(key, schedule, permanent);
    this.addAfter(key, d, priority);
    return d;
  }

  forget(key: string): void {
    this.backoff.forget(key);
  }

  /**
   * Drop the key's pending delayed add, if any (the controller, before it queues what a reconcile
   * asked for: see Controller.handle).
   */
  cancelAfter(key: string): void {
    this.waiting.get(key)?.timer.cancel();
    this.waiting.delete(key);
  }

  /** The next live entry: highest priority first, first in first out within one. */
  private next(): string | undefined {
    for (const p of this.priorities) {
      const fifo = this.fifos.get(p)!;
      for (let e = fifo.shift(); e; e = fifo.shift()) {
        if (this.queued.get(e.key)?.seq !== e.seq) continue; // moved up, or taken already
        this.queued.delete(e.key);
        return e.key;
      }
    }
    return undefined;
  }

  /** Next key to process (waits for one); undefined once shut down and drained. */
  get(): Promise<string | undefined> {
    const key = this.next();
    if (key !== undefined) return Promise.resolve(this.take(key));
    if (this.shuttingDown) return Promise.resolve(undefined);
    return new Promise((resolve) => this.waiters.push((k) => resolve(k === undefined ? undefined : this.take(k))));
  }

  private take(key: string): string {
    this.processing.add(key);
    this.dirty.delete(key);
    this.dirtyPriority.delete(key);
    const now = this.clock.now();
    const added = this.addedAt.get(key);
    if (added !== undefined) {
      this.metrics?.taken(now - added);
      this.addedAt.delete(key);
    }
    this.takenAt.set(key, now);
    return key;
  }

  done(key: string): void {
    this.processing.delete(key);
    const taken = this.takenAt.get(key);
    if (taken !== undefined) {
      this.metrics?.finished(this.clock.now() - taken);
      this.takenAt.delete(key);
    }
    if (this.dirty.has(key)) this.enqueue(key, this.dirtyPriority.get(key) ?? PRIORITY_EVENT);
  }

  /**
   * Work handed out and not done yet: its total age and the oldest one's (client-go's
   * unfinished_work_seconds and longest_running_processor_seconds), in ms.
   */
  unfinished(): { totalMs: number; longestMs: number } {
    const now = this.clock.now();
    let totalMs = 0;
    let longestMs = 0;
    for (const t of this.takenAt.values()) {
      totalMs += now - t;
      longestMs = Math.max(longestMs, now - t);
    }
    return { totalMs, longestMs };
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
