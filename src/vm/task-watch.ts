/**
 * One watcher of a site's running tasks per node, shared by every resource with a task there: it
 * reads the node's active-task list (one request, whatever the number of tasks) at a cadence that
 * follows what runs — not before the soonest task is expected to end (its duration estimated from
 * sizes), then at the resources' task poll — and wakes the resource whose task left the list at
 * once, so that its slot goes back and the next step starts without waiting out a poll interval.
 *
 * The watcher only wakes: whether a task ended well is still read by the resource's own observe
 * (tasks.ts), and a resource whose wake was lost (a watcher stopped, a process restarted) is still
 * reconciled at its own poll, so nothing depends on a wake arriving.
 */

interface Watched {
  upid: string;
  /** When the task is expected to have ended (ms, this process's clock). */
  expectedEnd: number;
  wake: () => void;
}

export interface TaskWatcherOptions {
  /** The node's running tasks (fresh, not a cache). */
  activeTasks: (node: string) => Promise<Set<string>>;
  /** The shortest wait between two reads of a node's list (the task poll interval). */
  minMs: number;
  /** The longest wait between two reads of a node's list, whatever is expected. */
  maxMs?: number;
  now?: () => number;
}

export class TaskWatcher {
  private readonly o: Required<TaskWatcherOptions>;
  private readonly nodes = new Map<string, { tasks: Map<string, Watched>; timer?: NodeJS.Timeout; busy: boolean }>();
  private stopped = false;
  /** Reads of the active-task lists made, for the benchmarks. */
  reads = 0;

  constructor(opts: TaskWatcherOptions) {
    this.o = { maxMs: 5_000, now: Date.now, ...opts };
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
    n.tasks.set(upid, { upid, expectedEnd: this.o.now() + Math.max(0, expectedMs), wake });
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
    for (const n of this.nodes.values()) if (n.timer) clearTimeout(n.timer);
    this.nodes.clear();
  }

  private schedule(node: string): void {
    const n = this.nodes.get(node);
    if (!n || n.busy || this.stopped) return;
    if (n.timer) clearTimeout(n.timer);
    if (!n.tasks.size) {
      this.nodes.delete(node);
      return;
    }
    const now = this.o.now();
    const soonest = Math.min(...[...n.tasks.values()].map((t) => t.expectedEnd));
    const wait = Math.min(this.o.maxMs, Math.max(this.o.minMs, soonest - now));
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
      for (const t of [...n.tasks.values()])
        if (!active.has(t.upid)) {
          n.tasks.delete(t.upid);
          try {
            t.wake();
          } catch {
            // a wake that throws must not stop the others
          }
        }
    } catch {
      // the node does not answer: try again later; the resources poll on their own meanwhile
    } finally {
      n.busy = false;
      this.schedule(node);
    }
  }
}
