/**
 * Per-node and per-storage slots for heavy operations (create with import, clone, resize), held
 * from the moment the operation is issued until its Proxmox task ends: a fleet rollout never runs
 * more than N of them on one node or one storage (invariant 8). A node's local storage is one
 * storage per node (`local-lvm` on four nodes is four disks: four times the slots); a shared one
 * (`{ storage, shared: true }`: Ceph, NFS) is one for the whole site.
 */

/** A storage an operation writes to: its id (a node's local storage), or shared across the site. */
export type SlotStorage = string | { storage: string; shared?: boolean | undefined };

function storageKey(node: string, s: SlotStorage): string {
  if (typeof s === 'string') return `storage:${node}/${s}`;
  return s.shared ? `storage:${s.storage}` : `storage:${node}/${s.storage}`;
}
interface Waiter {
  holder: string;
  keys: string[];
  seq: number;
  /** When the holder last asked (a waiter that stops asking is dropped). */
  at: number;
  wake: (() => void) | undefined;
}

/**
 * The slots, and the resources waiting for them in a FIFO: a slot that frees goes to the oldest
 * waiter it lets through, held for it (nobody takes it meanwhile) and the waiter woken, so that
 * waiting costs no requests. A grant not taken within `claimMs` (the resource went into backoff,
 * or away) passes on, and a waiter that stopped asking for `staleMs` is dropped.
 *
 * A disk resize (the one that completes a VM's create, or a grown disk) has its own slots per
 * node (`resize:<node>`, perNode of them), apart from the creates': a resize is a short change of
 * the volume's size, not a copy, and a VM whose disk was imported must not wait for the slot of
 * every create queued after it, which would start the VMs of a phase only once its last create
 * is done.
 *
 * A limit the ProviderConfig does not set adapts (AIMD, as TCP's window): it starts at the
 * default, doubles each time an operation that held it ended well while others waited for it, up
 * to `adaptive.max`, and halves when one failed on contention (a storage lock that timed out:
 * PVE waits 10 s for it, storage-lock.ts in the simulator says where); from its first contention
 * on, it grows by one instead (TCP's slow start, then congestion avoidance). Growing by one from
 * the start, a phase of seven creates on one storage went in three waves (2, 4, 1), each wave
 * starting only once a create of the one before had ended: a whole create's time per slot gained. More creates at once
 * cost nothing where the storage shares its bandwidth (a copy that ends leaves the others its
 * share at once), and hide the gap between one create's end and the next one's start; the halving
 * backs off where they queue on the storage's lock instead.
 */
export type SlotOutcome = 'ok' | 'contention' | 'failed';

/** Whether a failed task's exit status is contention on a storage lock (pve-common Tools.pm:264, pve-cluster Cluster.pm:628). */
export function isLockContention(exitstatus: string | undefined): boolean {
  return /can't lock file .* got timeout|cfs-lock '[^']*' error: got lock request timeout/.test(exitstatus ?? '');
}

export class SlotLimiter {
  private readonly held = new Map<string, Set<string>>();
  private readonly owner = new Map<string, string[]>();
  private readonly limits: { perNode: number; perStorage: number };
  /** By holder, oldest first (a Map keeps insertion order; a waiter that asks again keeps its place). */
  private readonly waiters = new Map<string, Waiter>();
  /**
   * The waiters by the slot keys they want (a node and its storages, or a node's resizes: a few
   * sets per site), each group oldest first. A waiter fits if and only if the oldest of its group
   * does, so the oldest waiter that fits is the head of a group: pump looks at the heads only.
   */
  private readonly groups = new Map<string, Map<string, Waiter>>();
  /** Per slot key, how many waiters want it (what adapt asks). */
  private readonly wanted = new Map<string, number>();
  private lastSweep = 0;
  /** Slots taken for a woken waiter, and when: released if it does not come for them. */
  private readonly granted = new Map<string, number>();
  private seq = 0;
  private readonly now: () => number;
  private readonly claimMs: number;
  private readonly staleMs: number;
  private readonly adaptive: { perNode: boolean; perStorage: boolean; max: number } | undefined;
  /** The adapted limit per slot key (node:x, storage:y), where it adapts. */
  private readonly adapted = new Map<string, number>();
  /** The slot keys that saw contention once: they grow by one from then on (TCP's congestion avoidance). */
  private readonly congested = new Set<string>();
  constructor(
    limits: { perNode: number; perStorage: number },
    opts: {
      now?: () => number;
      claimMs?: number;
      staleMs?: number;
      adaptive?: { perNode: boolean; perStorage: boolean; max: number };
    } = {},
  ) {
    this.limits = limits;
    this.now = opts.now ?? Date.now;
    this.claimMs = opts.claimMs ?? 60_000;
    this.staleMs = opts.staleMs ?? 120_000;
    this.adaptive = opts.adaptive;
  }

  /** Whether a slot key's limit adapts (a node's and its resizes' count as perNode). */
  private adapts(key: string): boolean {
    return Boolean(key.startsWith('storage:') ? this.adaptive?.perStorage : this.adaptive?.perNode);
  }

  /** The limit of a slot key now. */
  limitOf(key: string): number {
    const base = key.startsWith('storage:') ? this.limits.perStorage : this.limits.perNode;
    return this.adapts(key) ? (this.adapted.get(key) ?? base) : base;
  }

  /** The slot keys with an adapted limit, and their limit (for metrics and the tests). */
  get adaptedLimits(): Record<string, number> {
    return Object.fromEntries(this.adapted);
  }

  private adapt(key: string, outcome: SlotOutcome): void {
    if (!this.adaptive || !this.adapts(key)) return;
    const limit = this.limitOf(key);
    if (outcome === 'contention') {
      this.congested.add(key);
      this.adapted.set(key, Math.max(1, Math.floor(limit / 2)));
    } else if (outcome === 'ok' && limit < this.adaptive.max && (this.wanted.get(key) ?? 0) > 0)
      this.adapted.set(key, Math.min(this.adaptive.max, this.congested.has(key) ? limit + 1 : limit * 2));
  }

  /** Resources waiting for a slot, oldest first. */
  get waiting(): string[] {
    return [...this.waiters.keys()];
  }

  /**
   * Take a slot on every key (`node:x`, `storage:y`) or none; idempotent per holder. Refused, the
   * holder waits in the FIFO and `wake` is called once a slot was taken for it.
   */
  tryAcquire(
    holder: string,
    node: string,
    storages: SlotStorage[],
    wake?: () => void,
    opts: { resize?: boolean } = {},
  ): boolean {
    this.expire();
    if (this.owner.has(holder)) {
      this.granted.delete(holder);
      return true;
    }
    const keys = opts.resize ? [`resize:${node}`] : [`node:${node}`, ...storages.map((s) => storageKey(node, s))];
    const mine = this.waiters.get(holder);
    // No older waiter can be let through by free slots: every change that frees a slot or raises a
    // limit (release, expire) hands the free slots to the waiters first (pump), oldest first. So
    // a slot that is free now is one no waiter can use, and taking it passes nobody.
    if (this.fits(keys)) {
      this.take(holder, keys);
      if (mine) this.unwait(mine);
      return true;
    }
    if (mine) {
      // Asking again (every reconcile of a waiting resource does): its place stays, and only
      // other keys move it to another group.
      const moved = groupId(mine.keys) !== groupId(keys);
      this.count(mine.keys, -1);
      if (moved) this.ungroup(mine);
      mine.keys = keys;
      mine.at = this.now();
      mine.wake = wake;
      this.count(keys, 1);
      if (moved) this.group(mine);
    } else {
      const w = { holder, keys, seq: this.seq++, at: this.now(), wake };
      this.waiters.set(holder, w);
      this.count(keys, 1);
      this.group(w);
    }
    return false;
  }

  /** Put a waiter in its group, in its place by age (the newest, unless its keys changed). */
  private group(w: Waiter): void {
    const id = groupId(w.keys);
    const g = this.groups.get(id);
    if (!g) {
      this.groups.set(id, new Map([[w.holder, w]]));
      return;
    }
    g.set(w.holder, w);
    // A new waiter is the newest of all. An older one that asks for other keys now is rare: its
    // group is put in order again.
    if (w.seq !== this.seq - 1) {
      const byAge = [...g.values()].sort((a, b) => a.seq - b.seq);
      g.clear();
      for (const x of byAge) g.set(x.holder, x);
    }
  }

  private ungroup(w: Waiter): void {
    const id = groupId(w.keys);
    const g = this.groups.get(id);
    if (!g) return;
    g.delete(w.holder);
    if (!g.size) this.groups.delete(id);
  }

  /** Give `holder`'s slots back; `outcome`: how its operation ended (adapts the limits). */
  release(holder: string, outcome?: SlotOutcome): void {
    if (outcome) for (const k of this.owner.get(holder) ?? []) this.adapt(k, outcome);
    this.drop(holder);
    this.expire();
    this.pump();
  }

  /**
   * Release what `holder` holds, unless a wake granted it and it has not come for it yet (its turn
   * in the FIFO stays its own). Returns whether it held anything to release.
   */
  releaseHeld(holder: string): boolean {
    if (!this.owner.has(holder) || this.granted.has(holder)) return false;
    this.release(holder);
    return true;
  }

  private drop(holder: string): void {
    for (const k of this.owner.get(holder) ?? []) this.held.get(k)?.delete(holder);
    this.owner.delete(holder);
    this.granted.delete(holder);
    const w = this.waiters.get(holder);
    if (w) this.unwait(w);
  }

  private unwait(w: Waiter): void {
    this.waiters.delete(w.holder);
    this.count(w.keys, -1);
    this.ungroup(w);
  }

  private count(keys: string[], by: number): void {
    for (const k of keys) {
      const n = (this.wanted.get(k) ?? 0) + by;
      if (n > 0) this.wanted.set(k, n);
      else this.wanted.delete(k);
    }
  }

  private hasRoom(key: string): boolean {
    return (this.held.get(key)?.size ?? 0) < this.limitOf(key);
  }

  private fits(keys: string[]): boolean {
    return keys.every((k) => this.hasRoom(k));
  }

  private take(holder: string, keys: string[]): void {
    for (const k of keys) {
      const set = this.held.get(k) ?? new Set();
      set.add(holder);
      this.held.set(k, set);
    }
    this.owner.set(holder, keys);
  }

  /**
   * Hand freed slots to the waiters, oldest first, and wake them: each time the oldest waiter that
   * fits, which is the oldest of the groups' heads that fit (see groups). A pass costs a look at
   * each group's head per slot handed out, not a walk of the waiters (a rollout of 10,000 VMs has
   * nearly all of them waiting, and releases three slots per VM; the walk was O(waiters) each time
   * a node had room and its storage had none).
   */
  private pump(): void {
    for (;;) {
      let next: Waiter | undefined;
      for (const g of this.groups.values()) {
        const head = g.values().next().value;
        if (head && (!next || head.seq < next.seq) && this.fits(head.keys)) next = head;
      }
      if (!next) return;
      this.take(next.holder, next.keys);
      this.granted.set(next.holder, this.now());
      this.unwait(next);
      try {
        next.wake?.();
      } catch {
        // a failing wake must not keep the others waiting
      }
    }
  }

  private expire(): void {
    const t = this.now();
    let freed = false;
    for (const [holder, at] of this.granted)
      if (t - at > this.claimMs) {
        this.drop(holder);
        freed = true;
      }
    // Waiters that stopped asking: looked for once a second at most (every waiter is visited).
    if (t - this.lastSweep >= 1000) {
      this.lastSweep = t;
      for (const w of [...this.waiters.values()]) if (t - w.at > this.staleMs) this.drop(w.holder);
    }
    if (freed) this.pump();
  }
}

/** The group (SlotLimiter's groups) of a waiter that wants `keys`: the same keys, the same group. */
function groupId(keys: string[]): string {
  return keys.join(' ');
}
