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
 */

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

  constructor(now: number) {
    this.at = now;
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
      gone = true;
    }
    this.advance(now, this.running.size);
    // Seen running now, each needs more than it got: a closer bound than the last one's end gave
    // (whose look may have come long after the one before). Not when one just ended: the service
    // since the last update is then counted as shared by fewer, more than it was.
    if (gone || this.needed === undefined) return;
    for (const t of this.running.values()) this.needed = Math.max(this.needed, this.service - t.start);
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
