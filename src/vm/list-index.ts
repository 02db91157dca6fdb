/**
 * An index of one bulk `/cluster/resources` list, built once per list and shared by every lookup
 * that reads it: by VMID, by VM name, the nodes, and the VMs that may carry a marker whatever
 * their name (our tag, or a create's placeholder lock). A site serves the same list (one array) to
 * every resource for a TTL, and at 10,000 VMs a scan of it per lookup (three or four per create)
 * made a rollout quadratic; with the index each lookup costs what it finds. Lists are never
 * changed once read (the site cache hands the array out as is), so the index stays true to it.
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
    if (hasOwnerTag(e.tags) || isPlaceholderLock(e.lock)) index.tagged.push(e);
  }
  indexes.set(list, index);
  return index;
}
