/**
 * The simulator's bandwidth model: every copy (an import, a full clone, a disk move, an upload or
 * download, a backup archive, a migration's disks and RAM) is a flow through one or more links (a
 * storage, a node's network in one direction), and concurrent flows share each link fairly
 * (max-min fairness: a flow gets an equal share of its most crowded link, what it leaves unused
 * goes to the others; `bwlimit` caps a flow on its own). A flow's end time is recomputed whenever
 * a flow starts or ends, so a copy that ends speeds up the others at once.
 *
 * The scheduler runs on a Timeline: the simulator's Clock (simulated ms, the speed factor
 * dividing every wait) or a ManualTimeline that moves only when told (tests, the ideal makespan of
 * ideal.ts), so durations are exact and deterministic. A timer that fires late (the 1 ms floor of
 * setTimeout at a high speed factor) does not stretch the copies: the model's time goes on from
 * the moment the event was due, as a `t.sleep` step's does.
 */
import type { Clock } from './clock.ts';
import type { ClusterState } from './state.ts';
import type { StorageState } from './storage.ts';
import type { TaskHandle } from './tasks.ts';

/** What copies share: bytes per second, split fairly among the flows through it. */
export interface Link {
  readonly name: string;
  readonly bytesPerSec: number;
}

/** Simulated time: `now()` in ms and timers in simulated ms. */
export interface Timeline {
  now(): number;
  after(ms: number, fn: () => void): () => void;
}

/** The simulator's clock as a timeline: real time times the speed factor. */
export function clockTimeline(clock: Clock): Timeline {
  // Date.now, not performance.now: tests that mock Date and setTimeout drive both together.
  const t0 = Date.now();
  return {
    now: () => (Date.now() - t0) * clock.speed,
    after: (ms, fn) => {
      const h = setTimeout(fn, clock.scaled(Math.max(0, ms)));
      return () => clearTimeout(h);
    },
  };
}

/** A timeline that moves only in run(): timers fire in time order, promises settle in between. */
export class ManualTimeline implements Timeline {
  private t = 0;
  private seq = 0;
  private timers: Array<{ at: number; seq: number; fn: () => void; live: boolean }> = [];
  now(): number {
    return this.t;
  }
  after(ms: number, fn: () => void): () => void {
    const e = { at: this.t + Math.max(0, ms), seq: this.seq++, fn, live: true };
    this.timers.push(e);
    return () => {
      e.live = false;
    };
  }
  sleep(ms: number): Promise<void> {
    return new Promise((resolve) => this.after(ms, resolve));
  }
  /** Fire every timer due up to `untilMs` (default: until none is left), settling promises after each. */
  async run(untilMs = Number.POSITIVE_INFINITY): Promise<void> {
    for (;;) {
      await new Promise((resolve) => setImmediate(resolve));
      this.timers = this.timers.filter((e) => e.live);
      if (!this.timers.length) break;
      const next = this.timers.reduce((a, b) => (b.at < a.at || (b.at === a.at && b.seq < a.seq) ? b : a));
      if (next.at > untilMs) break;
      next.live = false;
      this.t = Math.max(this.t, next.at);
      next.fn();
    }
    if (Number.isFinite(untilMs)) this.t = Math.max(this.t, untilMs);
  }
}

/** A copy under way. */
export interface Transfer {
  readonly bytes: number;
  /** Resolves, with the simulated ms since the copy started, once `bytes` (of the total) have moved. */
  reached(bytes: number, signal?: AbortSignal): Promise<number>;
  /** Stop the copy (its process died or was killed): its share goes to the others. */
  cancel(): void;
  /** Bytes per second it gets now. */
  readonly rate: number;
}

interface Waiter {
  bytes: number;
  resolve: (ms: number) => void;
  reject: (e: unknown) => void;
}

class Flow implements Transfer {
  readonly links: Link[];
  readonly limit: number;
  readonly bytes: number;
  readonly startedAt: number;
  moved = 0;
  rate = 0;
  /** Where the rate changed: [model time, bytes moved, the new rate], oldest first. */
  history: Array<[number, number, number]> = [];
  waiters: Waiter[] = [];
  done = false;
  private readonly scheduler: FlowScheduler;
  constructor(scheduler: FlowScheduler, links: Link[], bytes: number, limit: number, startedAt: number) {
    this.scheduler = scheduler;
    this.links = links;
    this.bytes = bytes;
    this.limit = limit;
    this.startedAt = startedAt;
  }
  reached(bytes: number, signal?: AbortSignal): Promise<number> {
    return this.scheduler.wait(this, Math.min(bytes, this.bytes), signal);
  }
  cancel(): void {
    this.scheduler.cancel(this);
  }
  /** Simulated ms from the start to the moment `bytes` had moved (for a point already passed). */
  timeTo(bytes: number): number {
    let at = this.startedAt;
    for (const [t, moved, rate] of this.history) {
      if (moved > bytes) break;
      at = rate > 0 ? t + ((bytes - moved) / rate) * 1000 : t;
    }
    return Math.max(0, at - this.startedAt);
  }
}

/**
 * Within this many bytes of its target a flow counts as there: a byte (floating-point sums of
 * rate x time are off by far less), more for copies so large that a byte is below their rounding.
 */
function slack(f: Flow): number {
  return Math.max(1, f.bytes * 1e-12);
}

/** The shortest wait the scheduler sets (1 µs simulated): the model's time always moves on. */
const MIN_STEP_MS = 1e-3;

/** The fair shares: progressive filling over the links (max-min fairness), each flow's own cap included. */
export function fairRates(flows: ReadonlyArray<{ links: readonly Link[]; limit: number; rate: number }>): void {
  const left = new Map<Link, number>();
  for (const f of flows) for (const l of f.links) left.set(l, l.bytesPerSec);
  const open = new Set(flows);
  while (open.size) {
    const users = new Map<Link, number>();
    for (const f of open) for (const l of f.links) users.set(l, (users.get(l) ?? 0) + 1);
    let level = Number.POSITIVE_INFINITY;
    for (const [l, n] of users) level = Math.min(level, left.get(l)! / n);
    for (const f of open) level = Math.min(level, f.limit);
    const tight = level * (1 + 1e-12);
    const fixed = [...open].filter(
      (f) => f.limit <= tight || f.links.some((l) => left.get(l)! / users.get(l)! <= tight),
    );
    for (const f of fixed) {
      f.rate = level;
      open.delete(f);
      for (const l of f.links) left.set(l, Math.max(0, left.get(l)! - level));
    }
  }
}

export class FlowScheduler {
  private readonly timeline: Timeline;
  private readonly flows = new Set<Flow>();
  /** The model's time at the last event, and the timeline's reading then. */
  private modelAt: number;
  private timelineAt: number;
  private cancelTimer: (() => void) | undefined;
  constructor(timeline: Timeline) {
    this.timeline = timeline;
    this.modelAt = 0;
    this.timelineAt = timeline.now();
  }

  /** The model's time, simulated ms. */
  now(): number {
    return this.modelAt + Math.max(0, this.timeline.now() - this.timelineAt);
  }

  /** Flows under way. */
  get active(): number {
    return this.flows.size;
  }

  /**
   * Start copying `bytes` through `links` (at most `limitBps` if given): a flow that shares each
   * link with the others from now on.
   */
  start(links: readonly Link[], bytes: number, limitBps?: number): Transfer {
    if (!links.length && !limitBps) throw new Error('a copy needs a link or a limit');
    this.advance(this.now());
    const f = new Flow(
      this,
      [...new Set(links)],
      Math.max(0, bytes),
      limitBps && limitBps > 0 ? limitBps : Number.POSITIVE_INFINITY,
      this.modelAt,
    );
    if (f.bytes <= 0) f.done = true;
    else this.flows.add(f);
    this.reschedule();
    return f;
  }

  wait(f: Flow, bytes: number, signal?: AbortSignal): Promise<number> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (f.moved >= bytes - slack(f) || f.done) {
      // Passed already (the task was held, by a stall, while the copy went on): when it was.
      if (f.moved >= bytes - slack(f)) return Promise.resolve(f.timeTo(bytes));
      return Promise.reject(new Error('copy cancelled'));
    }
    return new Promise((resolve, reject) => {
      const w: Waiter = {
        bytes,
        resolve: (ms) => {
          signal?.removeEventListener('abort', onAbort);
          resolve(ms);
        },
        reject: (e) => {
          signal?.removeEventListener('abort', onAbort);
          reject(e);
        },
      };
      const onAbort = () => {
        f.waiters = f.waiters.filter((x) => x !== w);
        reject(signal?.reason);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      f.waiters.push(w);
      this.reschedule();
    });
  }

  cancel(f: Flow): void {
    if (f.done) return;
    this.advance(this.now());
    f.done = true;
    this.flows.delete(f);
    for (const w of f.waiters.splice(0)) w.reject(new Error('copy cancelled'));
    this.reschedule();
  }

  /** Move every flow on to model time `t`, then settle what got there. */
  private advance(t: number): void {
    const dt = Math.max(0, t - this.modelAt) / 1000;
    for (const f of this.flows) f.moved = Math.min(f.bytes, f.moved + f.rate * dt);
    this.modelAt = Math.max(this.modelAt, t);
    this.timelineAt = this.timeline.now();
    for (const f of [...this.flows]) {
      const reached = f.waiters.filter((w) => f.moved >= w.bytes - slack(f));
      if (reached.length) f.waiters = f.waiters.filter((w) => !reached.includes(w));
      if (f.moved >= f.bytes - slack(f)) {
        f.moved = f.bytes;
        f.done = true;
        this.flows.delete(f);
      }
      for (const w of reached) w.resolve(f.timeTo(w.bytes));
    }
  }

  /** New shares, and one timer for the next event: a flow's end or a waited-for point. */
  private reschedule(): void {
    this.cancelTimer?.();
    this.cancelTimer = undefined;
    const before = new Map([...this.flows].map((f) => [f, f.rate]));
    fairRates([...this.flows]);
    for (const f of this.flows)
      if (f.rate !== before.get(f) || !f.history.length) f.history.push([this.modelAt, f.moved, f.rate]);
    let next = Number.POSITIVE_INFINITY;
    for (const f of this.flows) {
      let target = f.bytes;
      for (const w of f.waiters) if (w.bytes > f.moved) target = Math.min(target, w.bytes);
      if (f.rate > 0) next = Math.min(next, ((target - f.moved) / f.rate) * 1000);
    }
    if (!Number.isFinite(next)) return;
    const due = this.modelAt + Math.max(MIN_STEP_MS, next);
    const wait = due - this.now();
    this.cancelTimer = this.timeline.after(wait, () => {
      this.cancelTimer = undefined;
      // Due now in the model's time, however late the timer fired.
      this.advance(Math.max(due, this.modelAt));
      this.reschedule();
    });
  }
}

/**
 * One step of a task (one `wait`, for the stall and die faults): `overheadMs` of fixed work, then
 * `bytes` through `links` shared with the other copies. Resolves with the copy's simulated ms.
 */
export function copyStep(
  clock: Clock,
  t: Pick<TaskHandle, 'wait'>,
  links: readonly Link[],
  bytes: number,
  overheadMs = 0,
): Promise<number> {
  return t.wait(async (signal) => {
    if (overheadMs > 0) await clock.sleep(overheadMs, signal);
    const flow = flowsOf(clock).start(links, bytes);
    try {
      return await flow.reached(bytes, signal);
    } finally {
      flow.cancel();
    }
  });
}

const schedulers = new WeakMap<Clock, FlowScheduler>();

/** The scheduler of a simulator (all its clusters share one clock: a remote migration spans two). */
export function flowsOf(clock: Clock): FlowScheduler {
  let s = schedulers.get(clock);
  if (!s) {
    s = new FlowScheduler(clockTimeline(clock));
    schedulers.set(clock, s);
  }
  return s;
}

const storageLinks = new WeakMap<StorageState, Link>();

/**
 * A storage's link: its `bandwidth` (MB/s), one for the whole cluster when the storage is shared
 * (every node's copy is the same object), one per node otherwise.
 */
export function storageLink(s: StorageState): Link {
  let l = storageLinks.get(s);
  if (!l) {
    l = { name: `storage ${s.id}`, bytesPerSec: s.bandwidth * 1e6 };
    storageLinks.set(s, l);
  }
  return l;
}

const nodeLinks = new WeakMap<ClusterState, Map<string, { tx: Link; rx: Link }>>();

/** A node's network, one link per direction (full duplex), at `mbps` MB/s. */
export function nodeNetwork(c: ClusterState, node: string, mbps: number): { tx: Link; rx: Link } {
  let m = nodeLinks.get(c);
  if (!m) {
    m = new Map();
    nodeLinks.set(c, m);
  }
  let n = m.get(node);
  if (!n) {
    n = {
      tx: { name: `${c.name}/${node} network out`, bytesPerSec: mbps * 1e6 },
      rx: { name: `${c.name}/${node} network in`, bytesPerSec: mbps * 1e6 },
    };
    m.set(node, n);
  }
  return n;
}
