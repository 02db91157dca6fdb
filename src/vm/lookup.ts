/**
 * Finding a VM in a site: by VMID in the bulk `/cluster/resources` list (cached per site, served
 * to every resource), and by ownership marker (see inventory.ts) for a resource whose VMID was
 * never recorded or lost: Proxmox, not the state, says which VM is the resource's.
 */
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import type { ClusterResource, VmConfig, VmStatus } from '../proxmox/types.ts';
import { reason } from './conditions.ts';
import type { StepContext } from './context.ts';
import type { MarkedVm } from './inventory.ts';
import { isVmEntry, listIndex, unheldTagged } from './list-index.ts';
import { markerNames, parseMarker, vmName } from './spec.ts';

export interface ObservedVm {
  vmid: number;
  node: string;
  entry: ClusterResource;
  config?: VmConfig;
}

export async function locate(ctx: StepContext, vmid: number, fresh: boolean): Promise<ObservedVm | undefined> {
  // After its own mutation, a resource looks at its VM with a read of that VM over the site's list
  // (cluster-list.ts ownView), not a whole list of the site begun after it. Not for a replacement
  // or a move to another site: those mutate another VM too.
  const view =
    fresh || ctx.previous || ctx.target
      ? undefined
      : await ctx.site.ownView(
          ctx.memory,
          vmid,
          ctx.memory.lastFull?.node ?? ctx.memory.planned?.node,
          (node) => readEntry(ctx, node, vmid),
          ctx.signal,
        );
  const index = view ?? listIndex(await ctx.site.clusterResources(fresh, ctx.signal, ctx.memory));
  const entry = index.byVmid.get(vmid);
  if (entry && isVmEntry(entry) && entry.node) return { vmid, node: entry.node, entry };
  if (entry?.type === 'lxc') {
    throw reason('VMIDConflict', `VMID ${vmid} is used by a container; it will never be modified or deleted`);
  }
  return undefined;
}

/**
 * Whether the bulk list shows `node` offline (crashed, powered off, cut off from the cluster):
 * PVE then knows nothing current of its VMs (each listed `status: unknown`) and answers every
 * request to the node `595 No route to host`.
 */
export async function nodeOffline(ctx: StepContext, node: string): Promise<boolean> {
  const index = listIndex(await ctx.site.clusterResources(false, ctx.signal, ctx.memory));
  return index.nodes.find((n) => n.node === node)?.status === 'offline';
}

/**
 * VM `vmid` on `node` as a bulk-list entry, from its status (`status/current`: PVE's vmstatus, the
 * same fields as pvestatd's row the list shows, but current); undefined when it is not there, or
 * the read failed (the caller goes to the list instead; an aborted reconcile stops).
 */
async function readEntry(ctx: StepContext, node: string, vmid: number): Promise<ClusterResource | undefined> {
  let s: (VmStatus & { maxdisk?: number; disk?: number }) | undefined;
  try {
    s = await ctx.client.findVmStatus(node, vmid);
  } catch {
    ctx.signal?.throwIfAborted();
    return undefined;
  }
  if (!s) return undefined;
  const e: ClusterResource = { id: `qemu/${vmid}`, type: 'qemu', vmid, node, status: s.status };
  if (s.name !== undefined) e.name = s.name;
  e.template = s.template === 1 ? 1 : 0;
  if (s.lock) e.lock = s.lock;
  if (s.tags) e.tags = s.tags;
  if (s.cpus !== undefined) e.maxcpu = s.cpus;
  if (s.cpu !== undefined) e.cpu = s.cpu;
  if (s.maxmem !== undefined) e.maxmem = s.maxmem;
  if (s.mem !== undefined) e.mem = s.mem;
  if (s.maxdisk !== undefined) e.maxdisk = s.maxdisk;
  if (s.disk !== undefined) e.disk = s.disk;
  if (s.uptime !== undefined) e.uptime = s.uptime;
  return e;
}

/**
 * Whether a marked VM is this resource's own: this installation's marker naming its namespace/name
 * and written for the VM's own VMID (any uid: another state file's incarnation is still the same
 * resource), or the first format's marker with its uid.
 */
export function isOwnVm(vm: MarkedVm, r: ProxmoxVM, installation: string): boolean {
  if (!vm.marker) return false;
  if (vm.marker.installation === undefined) return vm.marker.uid === r.metadata.uid;
  return markerNames(vm.marker, r, { installation, vmid: vm.vmid });
}

/**
 * This resource's VM, found by its marker alone: what makes the state file (or a Kubernetes object
 * re-created from a manifest) a cache of what Proxmox holds. A resource with no recorded VMID (a
 * new, lost or other state file), or whose VM is not at its recorded VMID, looks here before it
 * creates anything. Candidates are the marked VMs that no other resource of this runtime holds,
 * and those of its name whoever holds them; with several (duplicates from two runtimes racing), the lowest VMID, the one every runtime
 * keeps (see duplicates.ts). The pick is confirmed by a fresh read of its config.
 */
export async function findOwnVm(ctx: StepContext, r: ProxmoxVM): Promise<ObservedVm | undefined> {
  const index = listIndex(await ctx.site.clusterResources(true, ctx.signal, ctx.memory));
  const held = ctx.options.vmidHolders?.(ctx.site.name);
  const name = vmName(r);
  const named = index.byName.get(name) ?? [];
  // Every entry of the tagged and the named is a VM that may carry the marker (mayBeMarked), if
  // placed. At 10,000 VMs nearly all are tagged and held, and this runs once per create: the
  // tagged come from the list's index of those no other resource holds (unheldTagged).
  const candidates = unheldTagged(index, held, r.metadata.uid);
  const tagged = new Set(candidates);
  // A VM of this resource's name is read whoever holds its VMID: a hold is this runtime's record,
  // the marker is Proxmox's. Another resource's unknown create held site-2/100 when another state
  // file's runtime migrated this resource's VM there; left out, the VM was made again beside it
  // (fault search F88).
  for (const e of named) if (!tagged.has(e) && e.node && e.template !== 1) candidates.push(e);
  const installation = ctx.site.installation;
  const own = (await ctx.site.markedVms(candidates, ctx.signal)).filter((v) => isOwnVm(v, r, installation));
  for (const v of own.sort((a, b) => a.vmid - b.vmid)) {
    const config = await ctx.client.vmConfig(v.node, v.vmid).catch(() => undefined);
    if (!config) continue;
    ctx.site.forgetMarked(v.vmid);
    const fresh = parseMarker(config.values.description);
    if (!isOwnVm({ ...v, ...(fresh ? { marker: fresh } : {}) }, r, installation) || !fresh) continue;
    const entry = index.byVmid.get(v.vmid)!;
    return { vmid: v.vmid, node: v.node, entry, config };
  }
  return undefined;
}

/** The template VM a `spec.forProvider.template` names (by VMID, else by name) in a bulk list. */
export function findTemplate(
  list: ClusterResource[],
  t: { vmid?: number; name?: string },
): ClusterResource | undefined {
  return list.find(
    (e) =>
      e.type === 'qemu' && e.template === 1 && (t.vmid !== undefined ? Number(e.vmid) === t.vmid : e.name === t.name),
  );
}
