/**
 * An index of one bulk `/cluster/resources` list, built once per list and shared by every lookup
 * that reads it: by VMID, by VM name, the nodes, and the VMs that may carry a marker whatever
 * their name (our tag, or a create's placeholder lock). A site serves the same list (one array) to
 * every resource for a TTL, and at 10,000 VMs a scan of it per lookup (three or four per create)
 * made a rollout quadratic; with the index each lookup costs what it finds. Lists are never
 * changed once read (the site cache hands the array out as is), so the index stays true to it.
 *
 * Per list and per site's VMID holders, the tagged VMs no resource holds (unheldTagged): the
 * marker search's candidates. Holders change with every create of a rollout; the set follows the
 * VMIDs that changed holder since it was last asked (HoldingLog), so a search costs what it finds
 * plus those changes, where a scan of every tagged VM per create made a rollout O(N^2).
 *
 * A list with one VM's entry replaced (a resource's own view, see cluster-list.ts ownView) gets an
 * index derived from its list's (patchedIndex): what the entry changed, over the list's maps, with
 * no scan or copy of the list, as such a view is made after every task of a rollout.
 */
import type { ClusterResource } from '../proxmox/types.ts';
import { hasOwnerTag, isPlaceholderLock } from './spec.ts';

export interface ListIndex {
  /** Every entry with a VMID (VMs and containers: one VMID is either, never both). */
  byVmid: Map<number, ClusterResource>;
  /** VMs (qemu) by name. */
  byName: Map<string, ClusterResource[]>;
  /** VMs tagged as ours or under a create/clone placeholder lock (see mayBeMarked). */
  tagged: ClusterResource[];
  nodes: ClusterResource[];
}

const indexes = new WeakMap<readonly ClusterResource[], ListIndex>();

/**
 * A VMID -> holder uid map that says which VMIDs changed holder since a version (undefined: it no
 * longer remembers that far) and which VMIDs a uid holds (vmid-holders.ts HeldVmids).
 */
export interface HoldingLog {
  readonly version: number;
  changedSince(version: number): readonly number[] | undefined;
  vmidsOf(uid: string): readonly number[];
}

/** Of a list's tagged VMs, the placed ones that are not templates (a marker search's candidates). */
function searchable(e: ClusterResource): boolean {
  return Boolean(e.node) && e.template !== 1;
}

function isTagged(e: ClusterResource): boolean {
  return isVmEntry(e) && (hasOwnerTag(e.tags) || isPlaceholderLock(e.lock));
}

/** Per list index: its searchable tagged VMs that no resource held at `version` of `held`. */
const unheld = new WeakMap<
  ListIndex,
  { held: Map<number, string>; version: number; entries: Map<number, ClusterResource> }
>();

function isHoldingLog(m: Map<number, string>): m is Map<number, string> & HoldingLog {
  return typeof (m as Partial<HoldingLog>).changedSince === 'function';
}

export function isVmEntry(e: ClusterResource): boolean {
  return e.type === 'qemu' || Boolean(e.id?.startsWith('qemu/'));
}

export function listIndex(list: readonly ClusterResource[]): ListIndex {
  let index = indexes.get(list);
  if (index) return index;
  index = { byVmid: new Map(), byName: new Map(), tagged: [], nodes: [] };
  for (const e of list) {
    if (e.type === 'node') index.nodes.push(e);
    if (e.vmid === undefined) continue;
    index.byVmid.set(Number(e.vmid), e);
    if (!isVmEntry(e)) continue;
    if (e.name !== undefined) {
      const same = index.byName.get(e.name);
      if (same) same.push(e);
      else index.byName.set(e.name, [e]);
    }
    if (isTagged(e)) index.tagged.push(e);
  }
  indexes.set(list, index);
  return index;
}

/**
 * The searchable tagged VMs of a list that `held` (VMID -> holder uid, live) gives to no resource
 * or to `uid`: whom a marker search for the resource `uid` must read. With a HoldingLog the set is
 * kept per list and brought up to date by the VMIDs that changed holder since; a plain map is
 * scanned.
 */
export function unheldTagged(index: ListIndex, held: Map<number, string> | undefined, uid: string): ClusterResource[] {
  if (!held || !isHoldingLog(held))
    return index.tagged.filter((e) => {
      if (!searchable(e)) return false;
      const holder = held?.get(Number(e.vmid));
      return holder === undefined || holder === uid;
    });
  let u = unheld.get(index);
  const changed = u && u.held === held ? held.changedSince(u.version) : undefined;
  if (!u || !changed) {
    const entries = new Map<number, ClusterResource>();
    for (const e of index.tagged) if (searchable(e) && !held.has(Number(e.vmid))) entries.set(Number(e.vmid), e);
    u = { held, version: held.version, entries };
    unheld.set(index, u);
  } else {
    for (const vmid of changed) {
      const e = index.byVmid.get(vmid);
      if (e && isTagged(e) && searchable(e) && !held.has(vmid)) u.entries.set(vmid, e);
      else u.entries.delete(vmid);
    }
    u.version = held.version;
  }
  const out = [...u.entries.values()];
  for (const vmid of held.vmidsOf(uid)) {
    const e = index.byVmid.get(vmid);
    if (e && isTagged(e) && searchable(e)) out.push(e);
  }
  return out;
}

/**
 * A read-only Map over `base` with the keys of `patch` changed (to undefined: absent): get and has
 * cost what a Map's do; anything that walks every entry (rare: lookups do not) walks a merged copy.
 */
class PatchedMap<K, V> extends Map<K, V> {
  private readonly base: ReadonlyMap<K, V>;
  private readonly patch: ReadonlyMap<K, V | undefined>;
  private merged: Map<K, V> | undefined;

  constructor(base: ReadonlyMap<K, V>, patch: ReadonlyMap<K, V | undefined>) {
    super();
    this.base = base;
    this.patch = patch;
  }

  override get(k: K): V | undefined {
    return this.patch.has(k) ? this.patch.get(k) : this.base.get(k);
  }

  override has(k: K): boolean {
    return this.patch.has(k) ? this.patch.get(k) !== undefined : this.base.has(k);
  }

  private all(): Map<K, V> {
    if (!this.merged) {
      this.merged = new Map(this.base);
      for (const [k, v] of this.patch) {
        if (v === undefined) this.merged.delete(k);
        else this.merged.set(k, v);
      }
    }
    return this.merged;
  }

  override get size(): number {
    return this.all().size;
  }
  override [Symbol.iterator](): MapIterator<[K, V]> {
    return this.all()[Symbol.iterator]();
  }
  override entries(): MapIterator<[K, V]> {
    return this.all().entries();
  }
  override keys(): MapIterator<K> {
    return this.all().keys();
  }
  override values(): MapIterator<V> {
    return this.all().values();
  }
  override forEach(f: (v: V, k: K, m: Map<K, V>) => void, thisArg?: unknown): void {
    for (const [k, v] of this.all()) f.call(thisArg, v, k, this);
  }
  override set(): this {
    throw new Error('a list index is read-only');
  }
  override delete(): boolean {
    throw new Error('a list index is read-only');
  }
  override clear(): void {
    throw new Error('a list index is read-only');
  }
}

/**
 * The index of `base` with `entry` (a VM) in place of the entry at its VMID (or added), derived
 * from `base`'s: O(1) maps over the list's, the tagged VMs made only if asked for. No list is
 * made: a resource's own view (cluster-list.ts ownView) is looked up through its index, and most
 * views are never iterated, while a copy of a site's list per view cost 8 bytes an entry (a
 * 10,000-VM apply held hundreds of views of 5,000 entries). patchedList makes the list.
 */
export function patchedIndex(base: readonly ClusterResource[], entry: ClusterResource): ListIndex {
  const bi = listIndex(base);
  const vmid = Number(entry.vmid);
  const old = bi.byVmid.get(vmid);
  const names = new Map<string, ClusterResource[] | undefined>();
  for (const name of [old && isVmEntry(old) ? old.name : undefined, entry.name]) {
    if (name === undefined || names.has(name)) continue;
    const same = (bi.byName.get(name) ?? []).filter((e) => e !== old);
    if (entry.name === name && same.length) {
      // In the list's order, as listIndex has it (a name is rarely on more than one VM): the entry
      // is where the old one was, or last.
      const pos = old ? base.indexOf(old) : base.length;
      const i = same.findIndex((e) => base.indexOf(e) > pos);
      same.splice(i < 0 ? same.length : i, 0, entry);
    } else if (entry.name === name) same.push(entry);
    names.set(name, same.length ? same : undefined);
  }
  let tagged: ClusterResource[] | undefined;
  return {
    byVmid: new PatchedMap(bi.byVmid, new Map([[vmid, entry]])),
    byName: new PatchedMap(bi.byName, names),
    get tagged() {
      if (!tagged) {
        tagged = bi.tagged.filter((e) => e !== old);
        if (isTagged(entry)) tagged.push(entry);
      }
      return tagged;
    },
    nodes: bi.nodes,
  };
}

/**
 * `base` with `entry` (a VM) in place of the entry at its VMID (or added): a copy of `base`
 * (pointers: lists are handed out as arrays, and never changed), whose index is `index` (by
 * default patchedIndex's).
 */
export function patchedList(
  base: readonly ClusterResource[],
  entry: ClusterResource,
  index: ListIndex = patchedIndex(base, entry),
): ClusterResource[] {
  const old = listIndex(base).byVmid.get(Number(entry.vmid));
  const list = base.slice();
  const at = old ? list.indexOf(old) : -1;
  if (at >= 0) list[at] = entry;
  else list.push(entry);
  indexes.set(list, index);
  return list;
}
