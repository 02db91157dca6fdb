/**
 * The VMIDs a runtime's resources hold, per site, kept up to date with every write of its store
 * (the local runtime's FileStore, the Kubernetes controller's informer cache): what the engine's
 * `vmidHolders` option asks for on every VMID choice and marker search. Computing that from a scan
 * of every resource made every create cost O(N), a rollout of N resources O(N^2); this index
 * costs O(1) per write and nothing per question.
 *
 * What counts as held is src/vm/connector.ts heldVmids, vmidHoldersOf's rule for one resource, so
 * that the index cannot drift from the rule gc uses. Two resources holding one VMID on one site (a
 * user-set external name) resolve as that scan resolves them: the one later in the store's order
 * wins.
 */
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { heldVmids } from './connector.ts';
import type { HoldingLog } from './list-index.ts';

/** The changes a HeldVmids remembers; an index further behind than this is built again. */
const MAX_LOG = 8192;

/**
 * One site's VMID -> holder uid (what holdersOf hands out), which also remembers which VMIDs
 * changed holder lately and which VMIDs each uid holds: an index over a bulk list (list-index.ts
 * unheldTagged) then follows the holders by what changed, not by a scan of every VM per question.
 */
export class HeldVmids extends Map<number, string> implements HoldingLog {
  version = 0;
  /** The VMIDs of the changes from version logStart on. */
  private log: number[] = [];
  private logStart = 0;
  private byUid = new Map<string, number[]>();

  override set(vmid: number, uid: string): this {
    const old = super.get(vmid);
    if (old === uid) return this;
    if (old !== undefined) this.unlink(old, vmid);
    const mine = this.byUid?.get(uid);
    if (mine) mine.push(vmid);
    else this.byUid?.set(uid, [vmid]);
    this.note(vmid);
    return super.set(vmid, uid);
  }

  override delete(vmid: number): boolean {
    const old = super.get(vmid);
    if (old === undefined) return false;
    this.unlink(old, vmid);
    this.note(vmid);
    return super.delete(vmid);
  }

  override clear(): void {
    for (const vmid of this.keys()) this.note(vmid);
    this.byUid.clear();
    super.clear();
  }

  changedSince(version: number): readonly number[] | undefined {
    return version < this.logStart ? undefined : this.log.slice(version - this.logStart);
  }

  vmidsOf(uid: string): readonly number[] {
    return this.byUid.get(uid) ?? [];
  }

  private unlink(uid: string, vmid: number): void {
    const mine = this.byUid.get(uid);
    if (!mine) return;
    const i = mine.indexOf(vmid);
    if (i >= 0) mine.splice(i, 1);
    if (!mine.length) this.byUid.delete(uid);
  }

  private note(vmid: number): void {
    // (Undefined only while Map's constructor runs, before the fields are set: no entries then.)
    if (!this.log) return;
    this.log.push(vmid);
    this.version++;
    if (this.log.length > MAX_LOG) {
      const drop = this.log.length - MAX_LOG / 2;
      this.log.splice(0, drop);
      this.logStart += drop;
    }
  }
}

/**
 * One resource's holdings: each site and VMID it holds, once (one pair but during a site move). An
 * array, not a map per resource: the index holds one entry for every resource of the runtime.
 */
type Holdings = Array<{ site: string; vmid: number }>;

export class VmidHolderIndex {
  /** The sites asked about, or any (undefined). */
  private readonly sites: ReadonlySet<string> | undefined;
  private readonly onlySite: string | undefined;
  /** Per site: VMID -> the uid of its holder (the view the connector reads). */
  private readonly bySite = new Map<string, HeldVmids>();
  /**
   * Per site and VMID: the key of the resource holding it, or on a conflict the set of every key
   * holding it (a set per VMID would cost 10,000 resources 2 MB for the rare conflict).
   */
  private readonly claims = new Map<string, Map<number, string | Set<string>>>();
  /** Per resource key: its place in the store's order, uid and holdings. */
  private readonly byKey = new Map<string, { order: number; uid: string; holdings: Holdings }>();
  private nextOrder = 0;

  /**
   * `sites`: the ProviderConfig's (with one, a resource naming none is on it, as vmidHoldersOf's
   * onlySite); none: any site (the controller, whose ProviderConfigs come and go).
   */
  constructor(sites?: readonly string[]) {
    this.sites = sites ? new Set(sites) : undefined;
    this.onlySite = sites?.length === 1 ? sites[0] : undefined;
  }

  /**
   * VMID -> uid of the resources holding an external name on `site`: a live view (it follows later
   * writes), never to be written by the caller. A site outside the ProviderConfig holds nothing.
   */
  holdersOf(site: string): Map<number, string> {
    let held = this.bySite.get(site);
    if (!held) {
      held = new HeldVmids();
      if (!this.sites || this.sites.has(site)) this.bySite.set(site, held);
    }
    return held;
  }

  /** The resource at `key` was stored as `r`, or left the store (undefined). */
  set(key: string, r: ProxmoxVM | undefined): void {
    const prev = this.byKey.get(key);
    const holdings: Holdings = [];
    for (const h of r ? heldVmids(r, this.onlySite) : []) {
      if (this.sites && !this.sites.has(h.site)) continue;
      if (!holdings.some((x) => x.site === h.site && x.vmid === h.vmid)) holdings.push(h);
    }
    if (prev) for (const h of prev.holdings) this.unclaim(h.site, h.vmid, key);
    if (!r) {
      this.byKey.delete(key);
      return;
    }
    // (slice: an array grown by push keeps room for 17 elements; 10,000 entries held 1.5 MB of it)
    const entry = { order: prev?.order ?? this.nextOrder++, uid: r.metadata.uid, holdings: holdings.slice() };
    this.byKey.set(key, entry);
    for (const h of holdings) this.claim(h.site, h.vmid, key);
  }

  private claim(site: string, vmid: number, key: string): void {
    let claims = this.claims.get(site);
    if (!claims) {
      claims = new Map();
      this.claims.set(site, claims);
    }
    const held = claims.get(vmid);
    if (held === undefined || held === key) claims.set(vmid, key);
    else if (typeof held === 'string') claims.set(vmid, new Set([held, key]));
    else held.add(key);
    this.resolve(site, vmid, claims.get(vmid)!);
  }

  private unclaim(site: string, vmid: number, key: string): void {
    const claims = this.claims.get(site)!;
    const held = claims.get(vmid);
    if (held === undefined || held === key) {
      if (held !== undefined) {
        claims.delete(vmid);
        this.bySite.get(site)?.delete(vmid);
      }
      return;
    }
    if (typeof held === 'string' || !held.delete(key)) return;
    // Back to one holder: a plain key again.
    const left = held.size === 1 ? held.values().next().value! : held;
    claims.set(vmid, left);
    this.resolve(site, vmid, left);
  }

  /** The holder of a VMID claimed by `keys`: the latest of them in the store's order. */
  private resolve(site: string, vmid: number, keys: string | Set<string>): void {
    let best: { order: number; uid: string } | undefined;
    for (const k of typeof keys === 'string' ? [keys] : keys) {
      const e = this.byKey.get(k);
      if (e && (!best || e.order > best.order)) best = e;
    }
    if (best) this.holdersOf(site).set(vmid, best.uid);
  }
}
