/**
 * A site's bulk list (`/cluster/resources`), read once for every resource on the site: its cache
 * and the pace of its reads, the read ahead of the TTL's end, the epochs that say which list is new
 * enough for a resource after its own mutations, and each resource's own view of it after them.
 * Part of the site's shared state (site-cache.ts, which reaches it through SiteContext's methods of
 * the same names).
 */
import { abortable } from '../proxmox/deadline.ts';
import type { PveClient } from '../proxmox/index.ts';
import type { ClusterResource } from '../proxmox/types.ts';
import { isVmEntry, type ListIndex, listIndex, patchedIndex, patchedList } from './list-index.ts';
import type { NodeTaskReads } from './node-tasks.ts';
import type { OwnView, ResourceMemory } from './resource-memory.ts';

/**
 * The fewest entries (VMs, nodes, storages) of a site's bulk list for which a resource reads its own
 * VM after its mutation rather than wait for a list (ownView). Below, a list costs little and serves
 * every resource waiting for one: the seed fleet (30 VMs) sent three status reads per VM more for
 * nothing. Above, each list is O(N) for pveproxy and this process, and a rollout's lists made it
 * O(N^2): at 3,000 VMs, 5,670 lists against 307, and half the CPU.
 */
export const OWN_VIEW_FROM = 200;

/** How old a bulk list may be that serves a fresh read (see clusterResources), at the least. */
const FRESH_MS = 250;

/**
 * A long list's own pace: from OWN_VIEW_FROM entries up, the next list starts no sooner than
 * LIST_MS_PER_ENTRY per entry of the last after it ended (at most MAX_LIST_GAP_MS), and a fresh
 * read takes a list begun that long ago (up to the list's TTL; 10,000 VMs: a second). In a rollout
 * some resource waits for a list after its own change at nearly every moment, so the site's lists
 * come as fast as their pace allows, and each is O(VMs) for pveproxy and for this process. Paced
 * by their duration alone (lists of a few thousand VMs take a few ms), an apply of N VMs, which
 * runs O(N) long, read O(N^2) bytes of lists (10,000 VMs: 3,734 lists of up to 10,000 entries);
 * paced by their length, the entries listed per second are bounded and the apply's lists are O(N)
 * bytes. The seed fleet's lists (tens of entries) are paced as before.
 *
 * A list costs this process about 2 µs an entry to parse and index, and as much again in garbage
 * collection. At 0.3 ms an entry a 10,000-VM apply used less CPU (bench/local-apply.ts: 122.7 s
 * against 146.4 s) and ran faster, but the installed CLI then peaked at 249,120-253,288 KiB of
 * RSS against 233,824-235,480 at 0.1 (247,320 at 0.2), over the 250 MB that issue 16 allows.
 * Part of it was the apply's end, where the final table was made as one string with V8's old
 * space grown; with the table written in pieces (render.ts writeTable), 0.3 peaked at
 * 233,728-243,072 KiB and 0.1 at 229,464: still too close to 250 MB to take. So 0.1.
 */
const LIST_MS_PER_ENTRY = 0.1;

/** The longest pause between two list reads, and the shortest list that is followed by one (see beginList). */
const MAX_LIST_GAP_MS = 2000;
const PACED_LIST_MS = 20;

/** The share of the bulk list's TTL after which a call reads the next list ahead (clusterResources). */
const READ_AHEAD = 0.75;

/** A view's list, made once (patchedList): most views are only looked up by their index. */
function viewList(v: OwnView): ClusterResource[] {
  v.list ??= patchedList(v.base, v.entry, v.index);
  return v.list;
}

export class ClusterList {
  private readonly client: PveClient;
  private readonly now: () => number;
  private readonly ttlMs: number;
  /** The site's task reads: the node a VM's last task ran on is where ownView reads it. */
  private readonly tasks: NodeTaskReads;
  private resources: { at: number; data: Promise<ClusterResource[]>; epoch: number } | undefined;
  /** The next list, read ahead of the TTL's end (see clusterResources). */
  private readingAhead: Promise<ClusterResource[]> | undefined;
  /** The list read in flight, and the one queued behind it (see clusterResources). */
  private listing: Promise<ClusterResource[]> | undefined;
  /** The entries of the last list read (see listPaceMs). */
  private listLength = 0;
  private nextListing: Promise<ClusterResource[]> | undefined;
  /** When (paceClock) the next list read may start (see beginList). */
  private nextListAt = 0;
  /**
   * Bumped by invalidate(), which every mutation this process makes calls: a shared read begun in
   * the same epoch has seen everything this process did (node-facts.ts keys its reads with it).
   */
  epoch = 0;
  /** The epoch of the last mutation made for no one resource: every list read is newer (epochNeeded). */
  private floor = 0;
  /**
   * The own views made (see ownView), oldest first: each is dropped once a list begun after it
   * arrived, or its list is older than the TTL (it serves no read then, and holds a copy of a list).
   */
  private views: Array<{ memory: ResourceMemory; view: OwnView }> = [];
  private readonly ownViewFrom: number;
  /** The real time list reads are paced by (a list's cost is real time, whatever the site's clock). */
  private readonly paceClock: () => number;

  constructor(opts: {
    client: PveClient;
    now: () => number;
    ttlMs: number;
    tasks: NodeTaskReads;
    paceClock?: (() => number) | undefined;
    ownViewFrom?: number | undefined;
  }) {
    this.client = opts.client;
    this.now = opts.now;
    this.ttlMs = opts.ttlMs;
    this.tasks = opts.tasks;
    this.paceClock = opts.paceClock ?? (() => performance.now());
    this.ownViewFrom = opts.ownViewFrom ?? OWN_VIEW_FROM;
  }

  /**
   * One `/cluster/resources` per site per TTL serves every resource (invariant 7). The list is read
   * with the site's own client (not a reconcile's view): a reconcile that is aborted must not fail
   * the shared read for every other resource waiting on it.
   *
   * Read ahead: a call in the last quarter of the list's TTL starts the next read and is served the
   * current list, which the next one replaces when it arrives. Under a steady stream of polls
   * (10,000 resources: 170 a second) no reconcile then waits for the list, where every one of them
   * on the site used to wait for it once per TTL; what a call gets is still a list asked for less
   * than a TTL ago. A mutation's invalidate() drops a read ahead in flight (it may predate it).
   *
   * One read at a time: a call that needs a newer list than the one in flight (fresh, or after a
   * mutation of ours) waits for the next read, begun when that one ends (and the pause after it,
   * see beginList) and shared by every call that came meanwhile. The list is O(VMs), and a rollout
   * mutates several times a second: with a read per mutation, 3,000 creates cost 13,000 lists (4.4
   * a create; at 10,000 VMs, 44,000 lists of 10,000 entries), where one at a time they cost what
   * the site's list rate allows (about one per list's own duration), whatever the rollout's size.
   */
  clusterResources(fresh = false, signal?: AbortSignal, of?: ResourceMemory): Promise<ClusterResource[]> {
    const t = this.now();
    const cur = this.resources;
    const need = this.epochNeeded(fresh, of);
    // The resource's own view (see ownView) serves as the list it was made from would, with its
    // own VM as it is after its mutations, until a list begun after it arrived (dropViews).
    const v = of?.view;
    const freshMs = Math.max(FRESH_MS, Math.min(this.ttlMs, this.listPaceMs()));
    if (v && v.epoch >= need && t - v.at < (fresh ? freshMs : this.ttlMs))
      return abortable(Promise.resolve(viewList(v)), signal);
    if (!fresh && cur && cur.epoch >= need && t - cur.at < this.ttlMs) {
      if (t - cur.at >= this.ttlMs * READ_AHEAD && !this.readingAhead) this.readAhead(t);
      return abortable(cur.data, signal);
    }
    // A fresh read takes one begun after the mutations it must see (see epochNeeded) and at most
    // freshMs ago (still on its way, or just answered): it shows all that a new one would, but for
    // changes of others in those milliseconds, which no read can promise anyway. Without it the
    // start of a rollout sends one list per resource.
    if (fresh && cur && cur.epoch >= need && t - cur.at < freshMs) return abortable(cur.data, signal);
    if (this.listing || this.paceClock() < this.nextListAt) {
      this.nextListing ??= this.listAfterGap();
      return abortable(this.nextListing, signal);
    }
    return abortable(this.beginList(), signal);
  }

  /**
   * The bulk list as cached, if it was asked for less than `maxAgeMs` ago, else as
   * clusterResources reads it. For a look that may be minutes late (a stray on another site,
   * duplicates-elsewhere.ts): a site none of this process's resources polls is read once per
   * `maxAgeMs`, not once per TTL.
   */
  recentResources(maxAgeMs: number, signal?: AbortSignal): Promise<ClusterResource[]> {
    const cur = this.resources;
    if (cur && cur.epoch >= this.floor && this.now() - cur.at < maxAgeMs) return abortable(cur.data, signal);
    return this.clusterResources(false, signal);
  }

  /** The next list read: after the one in flight, and after the gap that follows it (see beginList). */
  private async listAfterGap(): Promise<ClusterResource[]> {
    await this.listing?.catch(() => undefined);
    const wait = this.nextListAt - this.paceClock();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    return this.beginList();
  }

  /**
   * The epoch a list must have been begun in to serve a read. A resource's reads (`of`, its memory
   * here) must see its own mutations, and those not made for one resource (`floor`); what other
   * resources of this process do does not change what it decides: the VMIDs they chose are
   * reserved until Proxmox shows them (vmid.ts), the capacity their creates take is promised
   * (reserveCapacity), and their VMs are never its own or its twins (markers name the resource).
   * So in a rollout, where some resource mutates every few milliseconds, one list serves them all,
   * where a list per mutation cost 4.4 lists of the whole site per create. A read for no resource
   * (fresh) sees every mutation of this process.
   */
  epochNeeded(fresh: boolean, of: ResourceMemory | undefined): number {
    if (of) return Math.max(this.floor, of.mutatedEpoch ?? 0);
    return fresh ? this.epoch : this.floor;
  }

  /** A long list's own pace (see LIST_MS_PER_ENTRY): 0 below ownViewFrom entries (default OWN_VIEW_FROM). */
  private listPaceMs(): number {
    return this.listLength >= this.ownViewFrom ? this.listLength * LIST_MS_PER_ENTRY : 0;
  }

  /**
   * Start a list read (the one in flight until it ends). The next one starts no sooner than this
   * one's own duration after it ends, nor, for a long list, its own pace (listPaceMs; real time; a
   * pause under 20 ms is not taken): a site spends at most half of its time listing for us, and
   * the list's cost (O(VMs), on pveproxy and on this process) stays a share of the rollout's time,
   * whatever the number of VMs (6,000 VMs at speed 1000: a list every 40 ms, back to back, before).
   */
  private beginList(): Promise<ClusterResource[]> {
    const began = this.paceClock();
    const data = this.client.clusterResources();
    const epoch = this.epoch;
    this.resources = { at: this.now(), data, epoch };
    this.listing = data;
    this.nextListing = undefined;
    const ended = (length: number) => {
      if (this.listing !== data) return;
      this.listing = undefined;
      this.listLength = length;
      const end = this.paceClock();
      const took = end - began;
      const gap = Math.max(took, this.listPaceMs());
      this.nextListAt = gap < PACED_LIST_MS ? 0 : end + Math.min(gap, MAX_LIST_GAP_MS);
    };
    data.then(
      (list) => {
        ended(list.length);
        if (this.resources?.data === data) this.dropViews(epoch);
      },
      () => {
        ended(this.listLength);
        if (this.resources?.data === data) this.resources = undefined;
      },
    );
    return data;
  }

  private readAhead(t: number): void {
    const data = this.client.clusterResources();
    const epoch = this.epoch;
    this.readingAhead = data;
    data
      .then(
        () => {
          // Not after an invalidate() for no resource (the read may predate the mutation), nor over
          // a newer list; a resource's own mutation since is seen by its epoch (epochNeeded).
          if (this.readingAhead === data && epoch >= this.floor && (!this.resources || this.resources.at < t)) {
            this.resources = { at: t, data, epoch };
            this.dropViews(epoch);
          }
        },
        () => undefined, // the list in use serves on; the next call past the TTL reads again
      )
      .finally(() => {
        if (this.readingAhead === data) this.readingAhead = undefined;
      });
  }

  /**
   * This process mutated the site: for the resource whose memory is `of` (its later list reads
   * wait for a list begun after now, see epochNeeded), or for none (every read does). The same
   * holds for the node task reads; node facts are read again either way.
   */
  invalidate(of?: ResourceMemory): void {
    this.epoch++;
    if (of) {
      of.mutatedEpoch = this.epoch;
      return;
    }
    this.floor = this.epoch;
    this.resources = undefined;
    this.readingAhead = undefined;
    this.dropViews(this.epoch);
  }

  /**
   * The list `of` waits for (one begun after its last mutation), when the site's list is older than
   * that mutation but no older than a TTL and the resource's own VM at `vmid` is all that changed
   * for it: `read` reads that VM after now (its status, on the node its last task ran on or the list
   * shows; undefined when it is not there), and the index it gets is that of the site's list with
   * that entry (patchedIndex; the list itself is made only when a read asks for it, viewList).
   * After every task of a rollout its resource looked at its VM again, in a whole list of the site
   * begun after the task: 3,000 creates cost 5,000 lists of up to 3,000 VMs (O(N^2) for the
   * rollout, on this process and on pveproxy), where a read of the VM costs O(1).
   *
   * The view shows what such a list would of the VM (where it is, its state, lock, name and tags:
   * Proxmox's own answer, newer than any list), and of other VMs what lists served to other
   * resources show: what those do changes nothing this one decides (epochNeeded). Not when the list
   * shows another VM of the same name: a twin, or a replacement's old VM, whose retirement (a
   * mutation of this resource, at another VMID) only a new list shows. A VM not there, or a read
   * that failed, is left to the list, as before: only a list says a VM is gone. The view serves
   * until the resource mutates again, or the site's list is newer than the view (dropViews).
   */
  async ownView(
    of: ResourceMemory,
    vmid: number,
    node: string | undefined,
    read: (node: string) => Promise<ClusterResource | undefined>,
    signal?: AbortSignal,
  ): Promise<ListIndex | undefined> {
    const t = this.now();
    const cur = this.resources;
    const need = this.epochNeeded(false, of);
    const v = of.view;
    if (v && v.epoch >= need && t - v.at < this.ttlMs) return v.index;
    if (!cur || cur.epoch >= need || cur.epoch < this.floor || t - cur.at >= this.ttlMs) return undefined;
    const epoch = this.epoch;
    let base: ClusterResource[];
    try {
      base = await abortable(cur.data, signal);
    } catch {
      signal?.throwIfAborted();
      return undefined;
    }
    // A small site's list is cheap and one serves every resource waiting: a read per VM there
    // would only add requests (three per VM created, beyond issue 16's ten).
    if (base.length < this.ownViewFrom) return undefined;
    const index = listIndex(base);
    const listed = index.byVmid.get(vmid);
    const where = listed && isVmEntry(listed) ? listed.node : (this.tasks.nodeOf(vmid) ?? node);
    if (!where) return undefined;
    const entry = await read(where);
    if (!entry || Number(entry.vmid) !== vmid) return undefined;
    for (const name of new Set([entry.name, listed?.name]))
      if (name !== undefined && index.byName.get(name)?.some((e) => Number(e.vmid) !== vmid)) return undefined;
    // Not when the resource mutated, or the site's list for everyone was dropped, meanwhile.
    if ((of.mutatedEpoch ?? 0) > epoch || this.floor > epoch) return undefined;
    const view: OwnView = { epoch, at: cur.at, base, entry, index: patchedIndex(base, entry), list: undefined };
    of.view = view;
    this.views.push({ memory: of, view });
    this.dropViews(-1);
    return view.index;
  }

  /**
   * Drop the views that a list begun in `epoch` serves as well, that the floor outdated, or whose
   * list is past the TTL. Views are made in the order of their epochs, and nearly so of their
   * lists' ages: those to drop are at the head (one kept a little longer costs memory only).
   */
  private dropViews(epoch: number): void {
    const t = this.now();
    let k = 0;
    for (const { memory, view } of this.views) {
      if (memory.view === view && view.epoch > epoch && view.epoch >= this.floor && t - view.at < this.ttlMs) break;
      if (memory.view === view) memory.view = undefined;
      k++;
    }
    if (k) this.views.splice(0, k);
  }
}
