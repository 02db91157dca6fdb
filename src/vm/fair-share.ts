/**
 * When tasks that share a resource will end: copies onto one storage share its bandwidth, each of
 * the n running gets a nth of it (fair share, as qemu-img converts on one disk do, and as the
 * simulator's bandwidth model has it). Counted in per-task service (a virtual clock that runs at
 * 1/n of real time while n run), every copy of one image needs the same service, whatever ran
 * beside it; once one ended, the service it got tells when each of the others will: the one with
 * the least left ends after that least times n, the next after its difference times n - 1, and
 * so on. The task watcher (task-watch.ts) looks at a task then, where it would otherwise look
 * after a share of its age: the copies of a rollout's phase end at ages that differ with what ran
 * beside them, so neither their age nor the last one's duration says when.
 *
 * What is learned is a lower bound (the service at the last update before a task was seen ended,
 * raised by each look that finds the others running), so a prediction errs early: a look too
 * many, never a late one. Tasks of other sizes (another
 * image, a blank disk) are predicted wrong, and the watcher's own cadence still bounds how late
 * their end is seen.
 *
 * A wave's need is kept for the next wave of its node and type (TaskWatcher): a phase's copies that
 * begin and end together had nothing ended to predict from, and were seen at the cadence (phase 3
 * of the seed fleet: its two copies to `ceph-fs`, 1-3 simulated seconds late at speed 100).
 */

/**
 * How far past the last wave's need (a share of it) a running copy may be and that need still be
 * taken as this wave's: the need learned is a lower bound (the last look before an end), so copies
 * like the last ones run a little past it.
 */
const SEED_SLACK = 0.1;

interface Share {
  /** Service (virtual ms) when the task began. */
  start: number;
}

export class FairShare {
  /** Service per task so far (virtual ms), as of `at`. */
  private service = 0;
  private at: number;
  private readonly running = new Map<string, Share>();
  /** The service a task of this group needed, learned from the last one seen to end. */
  private needed: number | undefined;

  /** The last wave's need this share began with (a hint), until one of its own copies ends. */
  private seed: number | undefined;

  /**
   * `needed`: what the group's last copies needed (TaskWatcher keeps it across waves): copies that
   * begin and end together (a phase's two creates on one storage) otherwise have no ended one to
   * predict from. Copies of another size or storage are predicted wrong by it: late, which the
   * watcher's own cadence bounds as for any task predicted wrong; or early, and then a look finds
   * them running past it: the hint is dropped (looked), not raised look by look, which would have
   * the watcher look at its floor until they end.
   */
  constructor(now: number, needed?: number) {
    this.at = now;
    this.needed = needed;
    this.seed = needed;
  }

  /** The service a copy of the group needed, as learned so far (undefined before one ended). */
  get learned(): number | undefined {
    return this.needed;
  }

  get size(): number {
    return this.running.size;
  }

  /** A task began (was first watched) at `now`. */
  begin(id: string, now: number): void {
    this.advance(now, this.running.size);
    if (!this.running.has(id)) this.running.set(id, { start: this.service });
  }

  /**
   * A look at `now` found `ended` ended (the others running). They are taken to have ended at the
   * last update, so that the others' service since then counts as shared by fewer: early, not late.
   */
  looked(now: number, ended: readonly string[]): void {
    let gone = false;
    for (const id of ended) {
      const t = this.running.get(id);
      if (!t) continue;
      this.running.delete(id);
      this.needed = Math.max(0, this.service - t.start);
      this.seed = undefined;
      gone = true;
    }
    this.advance(now, this.running.size);
    // Seen running now, each needs more than it got: a closer bound than the last one's end gave
    // (whose look may have come long after the one before). Not when one just ended: the service
    // since the last update is then counted as shared by fewer, more than it was.
    if (gone || this.needed === undefined) return;
    let most = this.needed;
    for (const t of this.running.values()) most = Math.max(most, this.service - t.start);
    // The last wave's need, passed by more than SEED_SLACK: these copies are not like those.
    if (this.seed !== undefined && most > this.seed * (1 + SEED_SLACK)) {
      this.needed = undefined;
      this.seed = undefined;
      return;
    }
    this.needed = most;
  }

  /**
   * Per running task, in how many ms (from `now`) it is expected to end: negative when that is
   * past; nothing before a task of the group was seen to end.
   */
  dueIn(now: number): Map<string, number> {
    const due = new Map<string, number>();
    if (this.needed === undefined || !this.running.size) return due;
    const n = this.running.size;
    const service = this.service + (now - this.at) / n;
    const left = [...this.running].map(([id, t]) => ({ id, left: t.start + this.needed! - service }));
    left.sort((a, b) => a.left - b.left);
    let ms = 0;
    let before = 0;
    for (const [i, t] of left.entries()) {
      // Those already due are overdue by their own shortfall, at the present share.
      if (t.left <= 0) due.set(t.id, t.left * n);
      else {
        ms += (t.left - Math.max(0, before)) * (n - i);
        before = t.left;
        due.set(t.id, ms);
      }
    }
    return due;
  }

  private advance(now: number, sharing: number): void {
    if (sharing > 0 && now > this.at) this.service += (now - this.at) / sharing;
    this.at = Math.max(this.at, now);
  }
}
