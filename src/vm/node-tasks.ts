/**
 * A site's reads of its nodes' task lists: one read of a node serves every resource polling a task
 * there (invariant 7), and lists the end of each task this process follows on that node; one
 * watcher per node wakes the resources whose task ended (task-watch.ts). Part of the site's shared
 * state (site-cache.ts), whose epochs say which read is new enough for a resource.
 */
import { abortable } from '../proxmox/deadline.ts';
import type { PveClient } from '../proxmox/index.ts';
import { parseUpid } from '../proxmox/upid.ts';
import type { ResourceMemory } from './resource-memory.ts';
import { TaskWatcher } from './task-watch.ts';

/** A node's tasks as one read shows them (NodeTaskReads.nodeTasks). */
export interface NodeTasks {
  running: Set<string>;
  /** UPID -> exit status (`OK`, `WARNINGS: 2`, an error) of a followed task that ended. */
  ended: Map<string, string>;
}

/** Tasks one node-task read lists at most (newest first; a followed task beyond is read on its own). */
const TASK_LIST_LIMIT = 500;

/** How long a followed task seen ended stays followed when nobody asks about it. */
const FOLLOW_ENDED_MS = 10 * 60_000;

/**
 * The site's epochs (SiteContext.invalidate): the current one, and the one a read must have been
 * begun in to serve the resource whose memory is `of` (ClusterList.epochNeeded, cluster-list.ts).
 */
export interface TaskReadEpochs {
  current(): number;
  needed(of: ResourceMemory | undefined): number;
}

export class NodeTaskReads {
  private readonly client: PveClient;
  private readonly now: () => number;
  private readonly ttlMs: number;
  private readonly epochs: TaskReadEpochs;
  /** Per node, its last task read: when, in which epoch it was begun (see nodeTasks), and its answer. */
  private active = new Map<string, { at: number; epoch: number; data: Promise<NodeTasks> }>();
  /**
   * Per node: the tasks followed there (UPID -> its start, PVE's UNIX time, and when this process
   * first saw it ended), which the node's task read covers.
   */
  private followed = new Map<string, Map<string, { start: number; endedSeen?: number }>>();
  /** Per VMID, the node of the last task followed for it (see nodeOf). */
  private taskNodes = new Map<number, string>();
  private watcher: TaskWatcher | undefined;

  constructor(opts: { client: PveClient; now: () => number; ttlMs: number; epochs: TaskReadEpochs }) {
    this.client = opts.client;
    this.now = opts.now;
    this.ttlMs = opts.ttlMs;
    this.epochs = opts.epochs;
  }

  /** Active task UPIDs on a node, shared by every VM polling a task there (`of`: as nodeTasks). */
  async activeTasks(node: string, signal?: AbortSignal, fresh = false, of?: ResourceMemory): Promise<Set<string>> {
    return (await this.nodeTasks(node, signal, fresh, of)).running;
  }

  /**
   * A node's tasks, shared by every VM polling a task there: the running ones and, of the tasks
   * followed (followTask), the exit status of those that ended. One read: on PVE >= 7 the node's
   * task list since the oldest task followed there (`source=all`, `since`: pve-manager
   * `PVE/API2/Tasks.pm` node_tasks lists the active file, then the archive index, each entry with
   * its status), else its active tasks only (PVE 6 has no `since`).
   *
   * A read serves for a second, and, as the bulk list (epochNeeded), only a read begun after the
   * last mutation of the resource whose memory is `of`: a task it started since is in it, either
   * running or ended. Other resources' tasks begun since are not, and their pollers read again.
   * (Every mutation of the process dropped the node's read: at 10,000 creates, 2.5 task reads a
   * create.) A task a read does not show is read on its own (tasks.ts taskDone), so a read older
   * than a task is never taken for its end.
   */
  nodeTasks(node: string, signal?: AbortSignal, fresh = false, of?: ResourceMemory): Promise<NodeTasks> {
    const t = this.now();
    const c = this.active.get(node);
    if (!fresh && c && t - c.at < Math.min(this.ttlMs, 1000) && c.epoch >= this.epochs.needed(of))
      return abortable(c.data, signal);
    const data = this.readNodeTasks(node);
    this.active.set(node, { at: t, epoch: this.epochs.current(), data });
    // A failed read is dropped, not a newer one begun meanwhile (a fresh read, or a later epoch's).
    data.catch(() => {
      if (this.active.get(node)?.data === data) this.active.delete(node);
    });
    return abortable(data, signal);
  }

  private async readNodeTasks(node: string): Promise<NodeTasks> {
    const followed = this.followed.get(node);
    const starts = [...(followed?.values() ?? [])].map((f) => f.start);
    const since = starts.length ? Math.min(...starts) : undefined;
    const all = since !== undefined && (await this.client.capabilities()).version.major >= 7;
    const list = all
      ? await this.client.listTasks(node, { source: 'all', since, limit: TASK_LIST_LIMIT })
      : await this.client.activeTasks(node);
    const out: NodeTasks = { running: new Set(), ended: new Map() };
    for (const e of list) {
      // (The active file lists a task that ended until it is archived, with its status.)
      if (e.status === undefined || e.status === 'RUNNING') out.running.add(e.upid);
      else out.ended.set(e.upid, e.status);
    }
    // A task seen ended that nobody asked about for a while (its resource went): no longer followed.
    const now = this.now();
    for (const [upid, f] of followed ?? []) {
      if (!out.ended.has(upid)) continue;
      f.endedSeen ??= now;
      if (now - f.endedSeen > FOLLOW_ENDED_MS) this.forgetTask(upid);
    }
    return out;
  }

  /** Follow task `upid` (its node's task read lists its end) until forgetTask. */
  followTask(upid: string): void {
    const u = parseUpid(upid);
    if (!u) return;
    let m = this.followed.get(u.node);
    if (!m) {
      m = new Map();
      this.followed.set(u.node, m);
    }
    if (!m.has(upid)) m.set(upid, { start: u.starttime });
    // (A VM's task runs on its node; a clone's names its source, harmless: ownView reads, finds or not.)
    if (/^\d+$/.test(u.id)) this.taskNodes.set(Number(u.id), u.node);
  }

  /** Stop following task `upid`. */
  forgetTask(upid: string): void {
    const node = parseUpid(upid)?.node;
    const m = node === undefined ? undefined : this.followed.get(node);
    m?.delete(upid);
    if (m?.size === 0) this.followed.delete(node!);
  }

  /**
   * Call `wake` once task `upid` ended: one watcher per node reads the node's active tasks for
   * every task watched there (task-watch.ts), and its reads serve activeTasks() too.
   */
  watchTask(upid: string, wake: () => void, expectedMs: number, minMs: number): void {
    this.followTask(upid);
    this.watcher ??= new TaskWatcher({
      minMs,
      now: this.now,
      activeTasks: (node) => this.activeTasks(node, undefined, true),
    });
    this.watcher.watch(upid, wake, expectedMs);
  }

  /** The node of the last task followed for VM `vmid` (where SiteContext.ownView reads the VM). */
  nodeOf(vmid: number): string | undefined {
    return this.taskNodes.get(vmid);
  }

  /** Stop watching tasks (the connector closes). */
  stop(): void {
    this.watcher?.stop();
    this.watcher = undefined;
  }
}
