/**
 * Per-node and per-storage slots for heavy operations (create with import, clone, resize), held
 * from the moment the operation is issued until its Proxmox task ends: a fleet rollout never runs
 * more than N of them on one node or one storage (invariant 8).
 */
export class SlotLimiter {
  private readonly held = new Map<string, Set<string>>();
  private readonly owner = new Map<string, string[]>();
  private readonly limits: { perNode: number; perStorage: number };
  constructor(limits: { perNode: number; perStorage: number }) {
    this.limits = limits;
  }

  /** Take a slot on every key (`node:x`, `storage:y`) or none; idempotent per holder. */
  tryAcquire(holder: string, node: string, storages: string[]): boolean {
    if (this.owner.has(holder)) return true;
    const keys = [`node:${node}`, ...storages.map((s) => `storage:${s}`)];
    for (const k of keys) {
      const limit = k.startsWith('node:') ? this.limits.perNode : this.limits.perStorage;
      if ((this.held.get(k)?.size ?? 0) >= limit) return false;
    }
    for (const k of keys) {
      const set = this.held.get(k) ?? new Set();
      set.add(holder);
      this.held.set(k, set);
    }
    this.owner.set(holder, keys);
    return true;
  }

  release(holder: string): void {
    for (const k of this.owner.get(holder) ?? []) this.held.get(k)?.delete(holder);
    this.owner.delete(holder);
  }
}
