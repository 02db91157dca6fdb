/**
 * One watcher of a site's running tasks per node, shared by every resource with a task there: it
 * reads the node's active-task list (one request, whatever the number of tasks) at a cadence that
 * follows what runs, and wakes the resource whose task left the list at once, so that its slot
 * goes back and the next step starts without waiting out a poll interval.
 *
 * The cadence (pollDelay) is geometric: a task is looked at again after a fixed share (a tenth,
 * WATCH_GROWTH) of the time it has run so far, between a floor and the task poll. A task that ends
 * is thus seen within that share of its duration (a 1 s start within a tenth of a second, a 10 min
 * import within the task poll), for a number of reads that grows with the log of its duration,
 * not with it.
 * Where a task's duration was estimated from sizes (a migration, a move of a disk), the watcher
 * learns how this site's tasks compare with their estimates (the ratio of the last read that saw
 * them running to the estimate: a lower bound, so that the learning never makes a wake late) and,
 * once it has, does not look before the scaled estimate.
 *
 * Tasks of one type on one node that run together take about as long as each other: copies
 * sharing a storage's bandwidth (fair share) end one after another, as far apart as they began. So
 * once one ended, the others of its type on its node are looked at closely from the age at which it
 * was last seen running (NEAR_END of that age apart, then a share of the time past it), never later than the
 * cadence above would have: at speed 100 an import ended on average 1.5 simulated seconds, and up
 * to 5, before its end was seen, each create of a wave looked at every tenth of its age. A copy
 * that runs past its predicted end (one of another size) is looked at after a growing share of the
 * time past it, not at every read (nearEnd).
 *
 * The watcher only wakes: whether a task ended well is still read by the resource's own observe
 * (tasks.ts), and a resource whose wake was lost (a watcher stopped, a process restarted) is still
 * reconciled at its own poll, so nothing depends on a wake arriving.
 */

import { FairShare } from './fair-share.ts';

/** What the watcher learns per node and type of task (lastRan, shares) is keyed by this. */
function groupOf(node: string, type: string): string {
  return `${node}\u0000${type}`;
}

interface Watched {
  upid: string;
  /** The task's type (the UPID's: qmcreate, qmresize, qmstart...), whose first look it shares. */
  type: string;
  /** When the watch began (ms, this process's clock). */
  since: number;
  /** Whether a read has looked at it yet. */
  looked?: boolean;
  /** The task's estimated duration in the cluster's terms (0: none). */
  expectedMs: number;
  /** When a read last saw it running. */
  seenRunning?: number;
  /** The end its node's share of copies predicted at the last schedule (this process's clock). */
  dueAt?: number;
  /** When a read first found it running past its predicted end (see nearEnd); cleared when one of its group ends. */
  overdueSince?: number;
  wake: () => void;
}

/** The share of a task's (or a guest's) age after which it is looked at again, by default. */
const GROWTH = 0.25;

/**
 * The watcher's share: one read of a node's list serves every task there, so it can look more
 * often than a per-VM ask. A 35 s import is then seen within 3.5 s of its end instead of 9 s, and
 * a long task's reads are capped at the task poll as before.
 */
const WATCH_GROWTH = 0.1;

/** The shortest floor the watcher adapts to (see TaskWatcher.floors). */
const MIN_FLOOR_MS = 10;

/**
 * Past the age at which the node's last task of its type ended, a task is looked at again after
 * this share of that age (a 60 s import within 1.2 s of its end), growing as it runs on.
 */
const NEAR_END = 0.02;
/** The same past an end fair-share.ts predicted, which is closer (a 60 s copy within 0.3 s). */
const NEAR_PREDICTED = 0.005;
/**
 * A copy a read found running past its predicted end: looked at again after this share of its age
 * (at least 1 ms: 2 ms at 4 s, 20 ms at 40 s), then as pastExpected says (see nearEnd).
 */
const NEAR_OVERDUE = 0.0005;

/** The share of the time past an expected end after which pastExpected looks again. */
const PAST_GROWTH = 0.25;

/**
 * How long to wait before looking again at something still going past the time it was expected
 * by (a task past the end its node's tasks predict, nearEnd; a guest past the boot its kind was
 * learned to take, guest-timing.ts): `closeMs` at first, as it may be only a moment past a lower
 * bound, then a share of the time past (`pastMs`, by `growth`, default PAST_GROWTH), at least
 * 1 ms: seen within that share of its overrun, for reads that grow with the log of it.
 */
export function pastExpected(closeMs: number, pastMs: number, growth = PAST_GROWTH): number {
  return Math.max(1, closeMs, pastMs * growth);
}

/**
 * How long after `now` the watcher looks at task `t` again: not before its scaled estimate (when
 * the site's scale is known), then after GROWTH of its age, within [floorMs, maxMs].
 */
export function pollDelay(
  t: { since: number; expectedMs: number },
  now: number,
  o: { floorMs: number; maxMs: number; scale?: number | undefined; growth?: number },
): number {
  const age = now - t.since;
  if (o.scale !== undefined && t.expectedMs > 0) {
    const due = t.expectedMs * o.scale - age;
    if (due > o.floorMs) return Math.min(o.maxMs, due);
  }
  return Math.min(o.maxMs, Math.max(o.floorMs, age * (o.growth ?? GROWTH)));
}

export interface TaskWatcherOptions {
  /** The node's running tasks (fresh, not a cache). */
  activeTasks: (node: string) => Promise<Set<string>>;
  /** The shortest wait between two reads of a node's list. */
  minMs: number;
  /** The longest wait between two reads of a node's list (the task poll), whatever is expected. */
  maxMs?: number;
  now?: () => number;
}

export class TaskWatcher {
  private readonly o: Required<TaskWatcherOptions>;
  private readonly nodes = new Map<
    string,
    { tasks: Map<string, Watched>; timer?: NodeJS.Timeout; timerAt?: number; busy: boolean }
  >();
  private stopped = false;
  /** Reads of the active-task lists made, for the benchmarks. */
  reads = 0;
  /** Observed duration / estimated duration of this site's tasks (moving average), once known. */
  private scale: number | undefined;
  /**
   * Per type of task, the wait before a task's first look, within [MIN_FLOOR_MS, minMs]: halved
   * when a first look finds the task already ended, doubled when it finds it running. A site whose
   * short tasks (a resize, a start) end within milliseconds (a fast simulator) is then looked at
   * that soon, and a real cluster, whose tasks take a second, at minMs after its first few. Per
   * type: one floor for the site let the creates, which always run past it, hold every resize and
   * start of a fast site at minMs (50 ms: 5 simulated seconds at speed 100, at each step of each
   * VM). A type starts at MIN_FLOOR_MS, not at minMs: a rollout's first resize, the one of each
   * phase's first VM, was seen 50 ms (5 simulated seconds) after a 1.5 ms task, and climbing to
   * minMs costs a real cluster two or three reads of a node's list per type, once.
   */
  private readonly floors = new Map<string, number>();
  /**
   * Per type of task, how long its tasks ran here (leaning to the shortest of those seen end, by
   * this watcher's looks: at most that for one its first look found ended; see ran). The later looks at a task are spaced by a share of its age (WATCH_GROWTH) but not less
   * than minMs, unless the site's tasks of that type are so short that minMs is more than that
   * share of them: then by the share of their duration, down to MIN_FLOOR_MS. A real cluster's
   * creates (seconds, minutes) keep minMs; a fast simulator's 160 ms creates, looked at every
   * 50 ms, were seen up to 50 ms (5 simulated seconds at speed 100) late.
   */
  private readonly durations = new Map<string, number>();
  /** Per node and type of task, how long the last one seen to end there was seen running (see nearEnd). */
  private readonly lastRan = new Map<string, number>();
  /** Per node and type of task, the share of the node's tasks of that type running together (see nearEnd). */
  private readonly shares = new Map<string, FairShare>();
  /** Per node and type of task, the service its last share learned, for the next wave's (see FairShare). */
  private readonly needs = new Map<string, number>();

  constructor(opts: TaskWatcherOptions) {
    this.o = { maxMs: 2_000, now: Date.now, ...opts };
  }

  /**
   * The floor of a task's next look: its type's first-look floor, then its type's spacing; while
   * no task of the type was seen to end, the first-look floor again (which doubles with every
   * first look that finds one running): a start of 25 ms was seen at the 50 ms of minMs.
   */
  private floorOf(t: Pick<Watched, 'type' | 'looked'>): number {
    const lowest = Math.min(MIN_FLOOR_MS, this.o.minMs);
    const first = this.floors.get(t.type) ?? lowest;
    if (!t.looked) return first;
    const ran = this.durations.get(t.type);
    return ran === undefined ? first : Math.min(this.o.minMs, Math.max(lowest, ran * WATCH_GROWTH));
  }

  /** Wake `wake` once `upid` (a task on its node) is no longer running; `expectedMs`: its estimated duration. */
  watch(upid: string, wake: () => void, expectedMs = 0): void {
    if (this.stopped) return;
    const node = upid.split(':')[1];
    if (!node) return;
    let n = this.nodes.get(node);
    if (!n) {
      n = { tasks: new Map(), busy: false };
      this.nodes.set(node, n);
    }
    // Watched already (a reconcile that found its task still running watches it again): the task
    // keeps its age and its place in its share; only the wake is the newer one. Begun again, it was
    // looked at from the floor up once more, and its share counted it as a copy just begun.
    const watched = n.tasks.get(upid);
    if (watched) {
      watched.wake = wake;
      watched.expectedMs = Math.max(watched.expectedMs, expectedMs);
      return;
    }
    const type = upid.split(':')[5] ?? '';
    const now = this.o.now();
    n.tasks.set(upid, { upid, type, since: now, expectedMs: Math.max(0, expectedMs), wake });
    const group = groupOf(node, type);
    let share = this.shares.get(group);
    if (!share) {
      share = new FairShare(now, this.needs.get(group));
      this.shares.set(group, share);
    }
    share.begin(upid, now);
    this.schedule(node);
  }

  /** How many tasks are watched (all nodes). */
  get size(): number {
    let s = 0;
    for (const n of this.nodes.values()) s += n.tasks.size;
    return s;
  }

  stop(): void {
    this.stopped = true;
    this.shares.clear();
    this.needs.clear();
    for (const n of this.nodes.values()) if (n.timer) clearTimeout(n.timer);
    this.nodes.clear();
  }

  private schedule(node: string): void {
    const n = this.nodes.get(node);
    if (!n || n.busy || this.stopped) return;
    if (!n.tasks.size) {
      if (n.timer) clearTimeout(n.timer);
      this.nodes.delete(node);
      return;
    }
    const now = this.o.now();
    const opts = { maxMs: this.o.maxMs, scale: this.scale, growth: WATCH_GROWTH };
    const pending = n.timer ? n.timerAt : undefined;
    const due = new Map<string, Map<string, number>>();
    const dueOf = (t: Watched) => {
      let d = due.get(t.type);
      if (!d) {
        d = this.shares.get(groupOf(node, t.type))?.dueIn(now) ?? new Map<string, number>();
        due.set(t.type, d);
      }
      const ms = d.get(t.upid);
      t.dueAt = ms === undefined ? undefined : now + ms;
      return ms;
    };
    const wait = Math.min(
      ...[...n.tasks.values()].map((t) =>
        this.nearEnd(node, t, now, dueOf(t), pollDelay(t, now, { ...opts, floorMs: this.floorOf(t) })),
      ),
    );
    // A task watched meanwhile never puts off a look already due sooner: its age share, computed
    // again from now, was later than the one the pending look was set for (a 500 ms task was
    // seen 52 ms late, past a tenth of its time, when another one began 32 ms after its end).
    if (pending !== undefined && pending <= now + wait) return;
    if (n.timer) clearTimeout(n.timer);
    n.timerAt = now + wait;
    n.timer = setTimeout(() => void this.poll(node), wait);
    n.timer.unref?.();
  }

  private async poll(node: string): Promise<void> {
    const n = this.nodes.get(node);
    if (!n || this.stopped) return;
    n.busy = true;
    n.timer = undefined;
    try {
      this.reads++;
      const active = await this.o.activeTasks(node);
      const now = this.o.now();
      const ended = new Map<string, string[]>();
      for (const t of n.tasks.values()) {
        if (!ended.has(t.type)) ended.set(t.type, []);
        if (!active.has(t.upid)) ended.get(t.type)!.push(t.upid);
      }
      for (const [type, upids] of ended) {
        // One of the group ended: its share predicts the others afresh, from what that one needed.
        if (upids.length) for (const t of n.tasks.values()) if (t.type === type) t.overdueSince = undefined;
        const group = groupOf(node, type);
        const share = this.shares.get(group);
        if (!share) continue;
        share.looked(now, upids);
        if (share.learned !== undefined) this.needs.set(group, share.learned);
        if (!share.size) this.shares.delete(group);
      }
      for (const t of [...n.tasks.values()]) {
        // Only a first look that waited the floor out says how the floor compares with the site's tasks.
        if (!t.looked && now - t.since >= this.floorOf(t)) this.adaptFloor(t.type, !active.has(t.upid));
        t.looked = true;
        if (active.has(t.upid)) {
          t.seenRunning = now;
          // (A timer fires at its time or a little after; its clock's millisecond may round down.)
          if (t.dueAt !== undefined && now >= t.dueAt - 1) t.overdueSince ??= now;
        } else {
          n.tasks.delete(t.upid);
          this.learn(t);
          // Ended by now: seen running before, about its duration; at its first look, at most
          // that (a resize found ended at 10 ms spaces the next ones' looks as a 10 ms task's).
          this.ran(t.type, now - t.since);
          // At least until the last look that saw it running: the others are looked at closely from there.
          this.lastRan.set(groupOf(node, t.type), (t.seenRunning ?? now) - t.since);
          try {
            t.wake();
          } catch {
            // a wake that throws must not stop the others
          }
        }
      }
    } catch {
      // the node does not answer: try again later; the resources poll on their own meanwhile
    } finally {
      n.busy = false;
      this.schedule(node);
    }
  }

  /**
   * `wait`, or sooner when task `t` nears its end as the node's tasks of its type tell: the age at
   * which the last one ended (tasks of a fixed time: starts), or the end its fair share of the
   * node's running ones predicts (`dueMs`, copies: fair-share.ts); a look then, then NEAR_END of
   * its age apart, growing by a share of the time past it.
   */
  private nearEnd(node: string, t: Watched, now: number, dueMs: number | undefined, wait: number): number {
    const age = now - t.since;
    const lowest = Math.min(MIN_FLOOR_MS, this.o.minMs);
    const near = (ahead: number, share: number) =>
      ahead > 0 ? ahead : Math.max(lowest, pastExpected(age * share, -ahead, WATCH_GROWTH));
    const ran = this.lastRan.get(groupOf(node, t.type));
    let look = wait;
    if (ran !== undefined) look = Math.min(look, near(ran - age, NEAR_END));
    // Found running past its predicted end, a copy's share raises its prediction to what it has had
    // (FairShare.looked: a lower bound), which puts its end just ahead again, look after look: at
    // speed 1 a wave of copies larger than the one that taught the share was read every 3 ms until
    // it ended (1,500 reads of a node's list in 5 s; 68% of a rollout's reads). From the read that
    // first found it past, it is looked at closely (it may be a millisecond past a lower bound),
    // then after a growing share of the time since (pastExpected): a copy 10 s longer than
    // predicted costs about twenty reads. An end in its group predicts it afresh (poll).
    if (t.overdueSince !== undefined) look = Math.min(look, pastExpected(age * NEAR_OVERDUE, now - t.overdueSince));
    else if (dueMs !== undefined) look = Math.min(look, near(dueMs, NEAR_PREDICTED));
    return Math.max(1, look);
  }

  private adaptFloor(type: string, endedAlready: boolean): void {
    const floor = this.floorOf({ type, looked: false });
    this.floors.set(
      type,
      endedAlready ? Math.max(Math.min(MIN_FLOOR_MS, this.o.minMs), floor / 2) : Math.min(this.o.minMs, floor * 2),
    );
  }

  /**
   * A task of `type` was seen ended `ms` after it was watched. What is kept leans to the shortest
   * (a shorter one at once, a longer one a quarter of the way): the spacing is a tenth of it, and a
   * task shorter than what is kept is seen later than a tenth of its own time. With the mean, the
   * creates of a rollout's later phases, whose waves had made the mean six times a lone create's,
   * were each looked at every 45 ms and seen up to 4.4 simulated seconds late at speed 100.
   */
  private ran(type: string, ms: number): void {
    const before = this.durations.get(type);
    this.durations.set(type, before === undefined || ms < before ? ms : (3 * before + ms) / 4);
  }

  /** The site's scale from a task seen ended. */
  private learn(t: Watched): void {
    if (t.expectedMs <= 0 || t.seenRunning === undefined) return;
    const ratio = (t.seenRunning - t.since) / t.expectedMs;
    this.scale = this.scale === undefined ? ratio : (this.scale + ratio) / 2;
  }
}
