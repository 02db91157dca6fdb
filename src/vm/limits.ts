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
 */
export class SlotLimiter {
  private readonly held = new Map<string, Set<string>>();
  private readonly owner = new Map<string, string[]>();
  private readonly limits: { perNode: number; perStorage: number };
  private readonly waiters: Waiter[] = [];
  /** Slots taken for a woken waiter, and when: released if it does not come for them. */
  private readonly granted = new Map<string, number>();
  private seq = 0;
  private readonly now: () => number;
  private readonly claimMs: number;
  private readonly staleMs: number;
  constructor(
    limits: { perNode: number; perStorage: number },
    opts: { now?: () => number; claimMs?: number; staleMs?: number } = {},
  ) {
    this.limits = limits;
    this.now = opts.now ?? Date.now;
    this.claimMs = opts.claimMs ?? 60_000;
    this.staleMs = opts.staleMs ?? 120_000;
  }

  /** Resources waiting for a slot, oldest first. */
  get waiting(): string[] {
    return this.waiters.map((w) => w.holder);
  }

  /**
   * Take a slot on every key (`node:x`, `storage:y`) or none; idempotent per holder. Refused, the
   * holder waits in the FIFO and `wake` is called once a slot was taken for it.
   */
  tryAcquire(holder: string, node: string, storages: SlotStorage[], wake?: () => void): boolean {
    this.expire();
    if (this.owner.has(holder)) {
      this.granted.delete(holder);
      return true;
    }
    const keys = [`node:${node}`, ...storages.map((s) => storageKey(node, s))];
    const mine = this.waiters.find((w) => w.holder === holder);
    // An older waiter that these slots would let through goes first.
    const ahead = this.waiters.some(
      (w) =>
        w !== mine && w.seq < (mine?.seq ?? Number.POSITIVE_INFINITY) && this.fits(w.keys) && overlaps(w.keys, keys),
    );
    if (this.fits(keys) && !ahead) {
      this.take(holder, keys);
      if (mine) this.waiters.splice(this.waiters.indexOf(mine), 1);
      return true;
    }
    if (mine) {
      mine.keys = keys;
      mine.at = this.now();
      mine.wake = wake;
    } else this.waiters.push({ holder, keys, seq: this.seq++, at: this.now(), wake });
    return false;
  }

  release(holder: string): void {
    this.drop(holder);
    this.expire();
    this.pump();
  }

  private drop(holder: string): void {
    for (const k of this.owner.get(holder) ?? []) this.held.get(k)?.delete(holder);
    this.owner.delete(holder);
    this.granted.delete(holder);
    const i = this.waiters.findIndex((w) => w.holder === holder);
    if (i >= 0) this.waiters.splice(i, 1);
  }

  private fits(keys: string[]): boolean {
    return keys.every(
      (k) => (this.held.get(k)?.size ?? 0) < (k.startsWith('node:') ? this.limits.perNode : this.limits.perStorage),
    );
  }

  private take(holder: string, keys: string[]): void {
    for (const k of keys) {
      const set = this.held.get(k) ?? new Set();
      set.add(holder);
      this.held.set(k, set);
    }
    this.owner.set(holder, keys);
  }

  /** Hand freed slots to the waiters, oldest first, and wake them. */
  private pump(): void {
    for (const w of [...this.waiters]) {
      if (!this.fits(w.keys)) continue;
      this.take(w.holder, w.keys);
      this.granted.set(w.holder, this.now());
      this.waiters.splice(this.waiters.indexOf(w), 1);
      try {
        w.wake?.();
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
    for (const w of [...this.waiters]) if (t - w.at > this.staleMs) this.drop(w.holder);
    if (freed) this.pump();
  }
}

function overlaps(a: string[], b: string[]): boolean {
  return a.some((k) => b.includes(k));
}
