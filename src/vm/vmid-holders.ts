/**
 * The VMIDs the local runtime's resources hold, per site, kept up to date with every write of its
 * store: what the engine's `vmidHolders` option asks for on every VMID choice and marker search.
 * Computing that from a scan of the whole store made every create cost O(N), an apply of N
 * resources O(N^2); this index costs O(sites) per write and nothing per question.
 *
 * What counts as held is src/vm/connector.ts vmidHoldersOf's rule, applied to one resource at a
 * time for each site of the ProviderConfig (the only sites the connector asks about), so that the
 * index cannot drift from the rule gc and the Kubernetes controller use. Two resources holding
 * one VMID on one site (a user-set external name) resolve as that scan resolves them: the one
 * later in the store's order wins.
 */
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { vmidHoldersOf } from '../vm/connector.ts';

/** One resource's holdings: `site` -> the VMIDs it holds there. */
type Holdings = Map<string, number[]>;

export class VmidHolderIndex {
  private readonly sites: readonly string[];
  private readonly onlySite: string | undefined;
  /** Per site: VMID -> the uid of its holder (the view the connector reads). */
  private readonly bySite = new Map<string, Map<number, string>>();
  /** Per site and VMID: every resource key holding it (more than one only on a conflict). */
  private readonly claims = new Map<string, Map<number, Set<string>>>();
  /** Per resource key: its place in the store's order, uid and holdings. */
  private readonly byKey = new Map<string, { order: number; uid: string; holdings: Holdings }>();
  private nextOrder = 0;

  /** `sites`: the ProviderConfig's; with one, a resource naming none is on it (as vmidHoldersOf's onlySite). */
  constructor(sites: readonly string[]) {
    this.sites = sites;
    this.onlySite = sites.length === 1 ? sites[0] : undefined;
    for (const s of sites) {
      this.bySite.set(s, new Map());
      this.claims.set(s, new Map());
    }
  }

  /**
   * VMID -> uid of the resources holding an external name on `site`: a live view (it follows later
   * writes), never to be written by the caller. A site outside the ProviderConfig holds nothing.
   */
  holdersOf(site: string): Map<number, string> {
    return this.bySite.get(site) ?? new Map();
  }

  /** The resource at `key` was stored as `r`, or left the store (undefined). */
  set(key: string, r: ProxmoxVM | undefined): void {
    const prev = this.byKey.get(key);
    const holdings: Holdings = new Map();
    if (r)
      for (const s of this.sites) {
        const held = [...vmidHoldersOf([r], s, this.onlySite).keys()];
        if (held.length) holdings.set(s, held);
      }
    if (prev) for (const [s, vmids] of prev.holdings) for (const v of vmids) this.unclaim(s, v, key);
    if (!r) {
      this.byKey.delete(key);
      return;
    }
    const entry = { order: prev?.order ?? this.nextOrder++, uid: r.metadata.uid, holdings };
    this.byKey.set(key, entry);
    for (const [s, vmids] of holdings) for (const v of vmids) this.claim(s, v, key);
  }

  private claim(site: string, vmid: number, key: string): void {
    const claims = this.claims.get(site)!;
    const keys = claims.get(vmid) ?? new Set<string>();
    claims.set(vmid, keys);
    keys.add(key);
    this.resolve(site, vmid, keys);
  }

  private unclaim(site: string, vmid: number, key: string): void {
    const claims = this.claims.get(site)!;
    const keys = claims.get(vmid);
    if (!keys) return;
    keys.delete(key);
    if (!keys.size) {
      claims.delete(vmid);
      this.bySite.get(site)!.delete(vmid);
    } else this.resolve(site, vmid, keys);
  }

  /** The holder of a VMID claimed by `keys`: the latest of them in the store's order. */
  private resolve(site: string, vmid: number, keys: Set<string>): void {
    let best: { order: number; uid: string } | undefined;
    for (const k of keys) {
      const e = this.byKey.get(k);
      if (e && (!best || e.order > best.order)) best = e;
    }
    if (best) this.bySite.get(site)!.set(vmid, best.uid);
  }
}
