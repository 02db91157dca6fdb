/**
 * Finding a VM in a site: by VMID in the bulk `/cluster/resources` list (cached per site, served
 * to every resource), and by ownership marker (candidates tagged `provider-proxmox` or under a
 * create/clone lock, then their configs) for a create whose result was never recorded.
 */
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import type { ClusterResource, VmConfig } from '../proxmox/types.ts';
import { reason } from './conditions.ts';
import type { StepContext } from './context.ts';
import { hasOwnerTag, isPlaceholderLock, markerUid } from './spec.ts';

export interface ObservedVm {
  vmid: number;
  node: string;
  entry: ClusterResource;
  config?: VmConfig;
}

export async function locate(ctx: StepContext, vmid: number, fresh: boolean): Promise<ObservedVm | undefined> {
  const list = await ctx.site.clusterResources(fresh, ctx.signal);
  const entry = list.find((e) => (e.type === 'qemu' || e.id?.startsWith('qemu/')) && Number(e.vmid) === vmid);
  if (entry?.node) return { vmid, node: entry.node, entry };
  if (list.some((e) => e.type === 'lxc' && Number(e.vmid) === vmid)) {
    throw reason('VMIDConflict', `VMID ${vmid} is used by a container; it will never be modified or deleted`);
  }
  return undefined;
}

/** Our VM by ownership marker: candidates tagged `provider-proxmox`, then their descriptions. */
export async function findByMarker(ctx: StepContext, r: ProxmoxVM): Promise<ObservedVm | undefined> {
  const list = await ctx.site.clusterResources(true, ctx.signal);
  for (const e of list) {
    if (e.type !== 'qemu' || !e.node || e.vmid === undefined) continue;
    if (!hasOwnerTag(e.tags) && !isPlaceholderLock(e.lock)) continue;
    const cfg = await ctx.client.vmConfig(e.node, Number(e.vmid)).catch(() => undefined);
    if (cfg && markerUid(cfg.values.description) === r.metadata.uid)
      return { vmid: Number(e.vmid), node: e.node, entry: e, config: cfg };
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
