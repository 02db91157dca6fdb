/**
 * Two runtimes of one installation that each made a VM for one resource (two state files applied
 * at once, a state lost while a create was in flight): which VM every runtime keeps, from what
 * Proxmox shows alone, and the change that retires the other. Run by observe before a VM is first
 * called Ready, and by a move to another site before it is planned (site-move.ts): a duplicate
 * moved away from its twin is one that no site's check sees any more (fault search F35).
 */
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import type { ExternalObservation } from '../engine/types.ts';
import { atProvider, isReady, ready } from './conditions.ts';
import type { StepContext } from './context.ts';
import type { Change } from './drift.ts';
import { type MarkedVm, mayBeMarked } from './inventory.ts';
import { listIndex, unheldTagged } from './list-index.ts';
import { isOwnVm, type ObservedVm } from './lookup.ts';
import { isPlaceholderLock, vmName } from './spec.ts';

/**
 * The VMs that two runtimes of one installation both made for this resource (two state files
 * applied at once, or a state lost while a create was in flight): every runtime keeps the lowest
 * VMID and retires the others. Which one is kept must follow from what Proxmox shows alone, with
 * no coordination: only a create racing another one makes a duplicate (a resource looks for its
 * VM by marker before it creates one), so all of them are new and the choice loses nothing.
 *
 * `kept`: a twin at a lower VMID (this resource's VM `found` is the duplicate: retire it, then
 * adopt `kept`). `strays`: unlocked twins at higher VMIDs that no resource of this runtime holds
 * (another runtime, or none, made them; retire them). Costs nothing unless the bulk list shows
 * another VM with the same name, or a tagged one no resource holds that pvestatd has not named yet.
 * `fresh`: a fresh bulk list and fresh marker reads (before
 * a VM is first called Ready: of two runtimes racing, the later one to get there then sees the
 * other's VM complete, since that one was complete before its own runtime got there).
 */
export async function duplicatesOf(
  ctx: StepContext,
  r: ProxmoxVM,
  found: ObservedVm,
  fresh = false,
): Promise<{ kept?: MarkedVm; strays: MarkedVm[] }> {
  const index = listIndex(await ctx.site.clusterResources(fresh, ctx.signal, ctx.memory));
  const held = ctx.options.vmidHolders?.(ctx.site.name);
  const name = vmName(r);
  const candidates = new Set([
    ...(index.byName.get(name) ?? []),
    ...(found.entry.name !== undefined && found.entry.name !== name ? (index.byName.get(found.entry.name) ?? []) : []),
    // The name in the list is pvestatd's, as of its last tick (pve-manager PVE/API2Tools.pm
    // extract_vm_stats), while tags and lock follow the config: a VM made since that tick is
    // listed nameless or as its placeholder's `VM <vmid>` (a loaded or hung pvestatd lags for
    // long). Two runtimes racing each went by name alone, missed the other's new VM, and both
    // called their own Ready. Such VMs are read too; they are the few made since the last tick.
    ...unheldTagged(index, held, r.metadata.uid).filter((e) => e.name === undefined || e.name === `VM ${e.vmid}`),
  ]);
  const twins = [...candidates].filter(
    (e) =>
      // (Named alike, tagged, or a placeholder: each may carry the marker. `e.name` itself: a
      // named candidate came by its name.)
      mayBeMarked(e, e.name) &&
      e.template !== 1 &&
      !isPlaceholderLock(e.lock) &&
      Number(e.vmid) !== found.vmid &&
      (held?.get(Number(e.vmid)) ?? r.metadata.uid) === r.metadata.uid,
  );
  if (!twins.length) return { strays: [] };
  if (fresh) for (const e of twins) ctx.site.forgetMarked(Number(e.vmid));
  const installation = ctx.site.installation;
  const own = (await ctx.site.markedVms(twins, ctx.signal))
    .filter((v) => v.marker?.installation !== undefined && isOwnVm(v, r, installation) && !v.lock)
    .sort((a, b) => a.vmid - b.vmid);
  const kept = own.find((v) => v.vmid < found.vmid);
  // (Protected ones last: one an operator protected is left as it is, and must not hold back the
  // retirement of the others, which goes one at a time.)
  const strays = own.filter((v) => v.vmid > found.vmid).sort((a, b) => Number(!!a.protected) - Number(!!b.protected));
  return kept ? { kept, strays: [] } : { strays };
}

/** The change that retires a duplicate of this resource's VM (ours, or a stray twin), if there is one. */
export async function retireDuplicates(
  ctx: StepContext,
  r: ProxmoxVM,
  found: ObservedVm,
  state: string,
  fresh: boolean,
): Promise<{ obs: ExternalObservation; change: Change } | undefined> {
  const dup = await duplicatesOf(ctx, r, found, fresh);
  const stray = dup.strays[0];
  if (!dup.kept && !stray) return undefined;
  const vmid = found.vmid;
  const gone = dup.kept
    ? { vmid, node: found.node, running: state === 'running' }
    : { vmid: stray!.vmid, node: stray!.node, running: stray!.status === 'running' };
  const keep = dup.kept?.vmid ?? vmid;
  const a = atProvider(r);
  a.step = 'RetiringDuplicate';
  const why = `VM ${gone.vmid} duplicates VM ${keep} of ${r.metadata.namespace ?? ''}/${r.metadata.name} (made by another runtime of installation ${ctx.site.installation} at the same time): VM ${keep} is kept, VM ${gone.vmid} is ${gone.running ? 'stopped, then ' : ''}destroyed`;
  ready(r, 'False', dup.kept ? 'Creating' : isReady(r) ? 'Available' : 'Creating', why);
  return {
    obs: { exists: true, upToDate: false },
    change: { kind: 'retire-duplicate', why, node: gone.node, vmid: gone.vmid, running: gone.running },
  };
}
