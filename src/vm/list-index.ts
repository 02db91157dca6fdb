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
