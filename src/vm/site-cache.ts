/**
 * What one site (one Proxmox VE cluster) shares between every ProxmoxVM on it, and the only place
 * where per-resource state survives from one reconcile to the next: the bulk list
 * (`/cluster/resources`) and each resource's own view of it (cluster-list.ts), the node task reads
 * (node-tasks.ts), the VMIDs handed out but not yet created (the nextid race), memory and CPU
 * promised to creates in flight, the concurrency slots, and each resource's memory
 * (resource-memory.ts).
 * `forget(uid)` releases all of it for a resource that left the engine, so a deleted, orphaned or
 * renamed resource never keeps a slot or a VMID.
 */
import type { SiteSsh } from '../api/provider-config-site.ts';
import type { Credentials } from '../proxmox/auth.ts';
import { abortable } from '../proxmox/deadline.ts';
import type { PveClient } from '../proxmox/index.ts';
import type { SshSessions } from '../proxmox/ssh-sessions.ts';
import type { ClusterResource } from '../proxmox/types.ts';
import { ClusterList } from './cluster-list.ts';
import { type MarkedVm, readMarkedVm } from './inventory.ts';
import type { SlotLimiter, SlotOutcome } from './limits.ts';
import type { ListIndex } from './list-index.ts';
import { NodeTaskReads } from './node-tasks.ts';
import { newResourceMemory, type ResourceMemory } from './resource-memory.ts';

/** How long a VM's marker, once read, serves adoption and duplicate checks. */
const MARKER_TTL_MS = 30_000;

/**
 * How another cluster's node reaches this site's API, for a remote migration to it
 * (`target-endpoint`): the endpoint, the pinned certificate fingerprints, the credentials.
 */
export interface SiteAccess {
  endpoint: string;
  fingerprints: string[];
  credentials: Credentials;
}

/** Where a node's snippets go: the storage, and its snippets directory on the node. */
export interface SnippetStore {
  storage: string;
  dir: string;
  shared: boolean;
}

export class SiteContext {
  readonly name: string;
  readonly client: PveClient;
  readonly limiter: SlotLimiter;
  readonly vmidRange: { min: number; max: number };
  /** The installation this runtime's VMs on the site belong to (written into every marker). */
  readonly installation: string;
  /** SSH to the nodes (cloud-init snippets), when the ProviderConfig gives it. */
  readonly ssh: SiteSsh | undefined;
  /** How a remote migration from another site reaches this one. */
  readonly access: SiteAccess | undefined;
  /** Per node: where snippets go (found once, see snippets.ts snippetStore). */
  readonly snippetStores = new Map<string, Promise<SnippetStore>>();
  /** One SSH connection per node for snippets (made on first use, see snippets.ts withNodeFiles). */
  sshSessions: SshSessions | undefined;
  /** Marked VMs by VMID (their config read), shared by adoption and duplicate checks; see markedVms. */
  private marked = new Map<number, { at: number; row: string; data: Promise<MarkedVm | undefined> }>();
  /** VMIDs handed out by chooseVmid (-> resource uid) and not yet visible in Proxmox (the nextid race). */
  readonly reserved = new Map<number, string>();
  /**
   * VMIDs whose create or clone this process sent and saw answered with a task, until that task's
   * end is seen (-> the task and the resource's uid): the `lock: create`/`clone` placeholder at
   * such a VMID is this process's, since PVE refuses a second create at a VMID while a placeholder
   * holds it, so it is never another state file's twin (snippet-removal.ts namedByTwins).
   */
  readonly ownCreates = new Map<number, { upid: string; uid: string }>();
  /** Memory, CPU and disk bytes (per storage) promised to creates in flight, per node. */
  readonly inflight = new Map<
    string,
    {
      memory: number;
      cpu: number;
      holders: Map<string, { memory: number; cpu: number; storages: Array<{ id: string; bytes: number }> }>;
    }
  >();
  private readonly memory = new Map<string, ResourceMemory>();
  /** The nodes' task reads, and the tasks followed on them. */
  readonly tasks: NodeTaskReads;
  readonly ttlMs: number;
  /** The bulk list, its epochs and the resources' own views of it (reached through the methods below). */
  private readonly list: ClusterList;
  readonly now: () => number;

  constructor(opts: {
    name: string;
    client: PveClient;
    limiter: SlotLimiter;
    vmidRange: { min: number; max: number };
    installation: string;
    ssh?: SiteSsh | undefined;
    access?: SiteAccess | undefined;
    ttlMs?: number;
    now?: () => number;
    paceClock?: () => number;
    /** The fewest entries of the site's list for which ownView reads a VM instead (default OWN_VIEW_FROM). */
    ownViewFrom?: number;
  }) {
    this.name = opts.name;
    this.ssh = opts.ssh;
    this.access = opts.access;
    this.installation = opts.installation;
    this.client = opts.client;
    this.limiter = opts.limiter;
    this.vmidRange = opts.vmidRange;
    this.ttlMs = opts.ttlMs ?? 1000;
    this.now = opts.now ?? Date.now;
    this.tasks = new NodeTaskReads({
      client: this.client,
      now: this.now,
      ttlMs: this.ttlMs,
      epochs: { current: () => this.list.epoch, needed: (of) => this.list.epochNeeded(false, of) },
    });
    this.list = new ClusterList({
      client: this.client,
      now: this.now,
      ttlMs: this.ttlMs,
      tasks: this.tasks,
      paceClock: opts.paceClock,
      ownViewFrom: opts.ownViewFrom,
    });
  }

  // The bulk list's reads and epochs stay reachable on the site, where every step (and node-facts.ts)
  // already reads them: what each does is told in cluster-list.ts.

  /** See ClusterList.epoch (node-facts.ts keys its reads with it). */
  get epoch(): number {
    return this.list.epoch;
  }

  clusterResources(fresh = false, signal?: AbortSignal, of?: ResourceMemory): Promise<ClusterResource[]> {
    return this.list.clusterResources(fresh, signal, of);
  }

  recentResources(maxAgeMs: number, signal?: AbortSignal): Promise<ClusterResource[]> {
    return this.list.recentResources(maxAgeMs, signal);
  }

  invalidate(of?: ResourceMemory): void {
    this.list.invalidate(of);
  }

  ownView(
    of: ResourceMemory,
    vmid: number,
    node: string | undefined,
    read: (node: string) => Promise<ClusterResource | undefined>,
    signal?: AbortSignal,
  ): Promise<ListIndex | undefined> {
    return this.list.ownView(of, vmid, node, read, signal);
  }

  /**
   * The marked VMs among `entries` (bulk-list rows), each config read at most once per
   * MARKER_TTL_MS and shared by every resource of the site, while its row stays as it was read
   * (rowKey). Markers change only when a VM is made, adopted or destroyed, and whoever acts on an
   * entry reads that VM's config again first. But another VM can come to a VMID without this
   * process acting (a migration arriving, another runtime's create), and a read of what was there
   * hid it: a remote migration's `lock: create` target, read while it arrived, kept the moved VM
   * unmarked for 30 s, and a resource looking for its VM made a second one (fault search, F62).
   * Its row changes with it (name, lock, node, tags), so a changed row is read again.
   */
  async markedVms(entries: ClusterResource[], signal?: AbortSignal): Promise<MarkedVm[]> {
    const t = this.now();
    const reads = entries.map(async (e) => {
      const vmid = Number(e.vmid);
      const row = rowKey(e);
      let c = this.marked.get(vmid);
      if (!c || t - c.at > MARKER_TTL_MS || c.row !== row) {
        const data = readMarkedVm(this.client, e);
        c = { at: t, row, data };
        this.marked.set(vmid, c);
        data.catch(() => {
          if (this.marked.get(vmid)?.data === data) this.marked.delete(vmid);
        });
      }
      const vm = await abortable(c.data, signal);
      // The power state is the row's, not the read's: the duplicate rules keep the one that runs.
      return vm && e.status !== undefined && vm.status !== e.status ? { ...vm, status: e.status } : vm;
    });
    return (await Promise.all(reads)).filter((v): v is MarkedVm => v !== undefined);
  }

  /** Forget what markedVms knows of `vmid` (we made, adopted or destroyed the VM there). */
  forgetMarked(vmid: number): void {
    this.marked.delete(vmid);
  }

  /** Stop watching tasks (the connector closes). */
  stop(): void {
    this.tasks.stop();
    this.sshSessions?.close();
    this.sshSessions = undefined;
  }

  /** The resource's memory if it has one here, else an empty one that is not kept. */
  peekMemory(uid: string): ResourceMemory {
    return this.memory.get(uid) ?? newResourceMemory();
  }

  /** The resource's memory (created on first use). */
  remember(uid: string): ResourceMemory {
    let m = this.memory.get(uid);
    if (!m) {
      m = newResourceMemory();
      this.memory.set(uid, m);
    }
    return m;
  }

  /**
   * Promise a node's memory, CPU and room on its storages to a create in flight (idempotent per
   * resource): the next create's checks count it, until the task ended and Proxmox shows it.
   */
  reserveCapacity(
    uid: string,
    node: string,
    memory: number,
    cpu: number,
    storages: Array<{ id: string; bytes: number }> = [],
  ): void {
    const e = this.inflight.get(node) ?? { memory: 0, cpu: 0, holders: new Map() };
    if (!e.holders.has(uid)) {
      e.memory += memory;
      e.cpu += cpu;
      e.holders.set(uid, { memory, cpu, storages });
    }
    this.inflight.set(node, e);
  }

  /** Bytes promised on a node's storage to creates in flight (but `except`'s own). */
  storageInFlight(node: string, id: string, except?: string): number {
    let bytes = 0;
    for (const [uid, h] of this.inflight.get(node)?.holders ?? [])
      if (uid !== except) for (const st of h.storages) if (st.id === id) bytes += st.bytes;
    return bytes;
  }

  /** Release what `reserveCapacity` promised (by what was promised, not by today's spec). */
  releaseCapacity(uid: string): void {
    for (const e of this.inflight.values()) {
      const held = e.holders.get(uid);
      if (!held) continue;
      e.holders.delete(uid);
      e.memory -= held.memory;
      e.cpu -= held.cpu;
    }
  }

  /** Release the create's slot and promised capacity (its task ended, or it was never issued). */
  releaseCreate(uid: string, outcome?: SlotOutcome): void {
    this.limiter.release(uid, outcome);
    this.releaseCapacity(uid);
  }

  /**
   * A reconcile of a resource with no task in flight: a slot this process still holds for it (and
   * the capacity reserved with it) was held for a task whose end another process saw. Released,
   * unless a wake granted it a moment ago (see SlotLimiter.releaseHeld).
   */
  releaseIdle(uid: string): void {
    if (this.limiter.releaseHeld(uid)) this.releaseCapacity(uid);
  }

  /** Drop this resource's in-process reservation of `vmid` (visible in Proxmox now, or given up), or of all. */
  unreserve(uid: string, vmid?: number): void {
    for (const [id, holder] of this.reserved)
      if (holder === uid && (vmid === undefined || id === vmid)) this.reserved.delete(id);
  }

  /**
   * The resource's create or clone is no longer in flight (its task's end seen, by this process or
   * by another writer of its state that cleared the task): its VMID's placeholder, if any is left,
   * is no longer known to be this process's (see ownCreates).
   */
  ownCreateEnded(uid: string, upid?: string): void {
    for (const [vmid, c] of this.ownCreates)
      if (c.uid === uid && (upid === undefined || c.upid === upid)) this.ownCreates.delete(vmid);
  }

  /** The resource left the engine (deleted, orphaned, renamed): release everything it held here. */
  forget(uid: string): void {
    this.releaseCreate(uid);
    this.unreserve(uid);
    this.ownCreateEnded(uid);
    const m = this.memory.get(uid);
    if (m) m.view = undefined;
    this.memory.delete(uid);
  }
}

/** What of a bulk-list row changes when another VM comes to its VMID or its config is rewritten. */
function rowKey(e: ClusterResource): string {
  return `${e.node ?? ''}\u0000${e.name ?? ''}\u0000${e.lock ?? ''}\u0000${e.tags ?? ''}\u0000${e.template ?? 0}`;
}
