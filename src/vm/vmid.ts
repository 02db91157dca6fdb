/**
 * Choosing a VMID before create, and giving one up. The VMID is chosen and persisted (as the
 * external name, with `external-create-pending`) before the create is sent, so a crash or a lost
 * reply can never make us create at a second VMID while the first create might still exist.
 *
 * A VMID we chose is given up only when Proxmox proves that our create cannot be there: another
 * VM, complete (unlocked) and without our marker, holds it, and this resource never confirmed a
 * VM of its own there (`status.atProvider.vmId`). PVE refuses a create at a taken VMID (qemu-server
 * `src/PVE/API2/Qemu.pm`, create_vm: "unable to create VM N - VM N already exists on node"), so a
 * late-applied create of ours at the old VMID fails harmlessly.
 */
import { ANNOTATION_SITE, type ProxmoxVM } from '../api/proxmoxvm.ts';
import {
  ANNOTATION_CREATE_PENDING,
  ANNOTATION_EXTERNAL_NAME,
  annotation,
  createIncomplete,
  setAnnotation,
} from '../engine/resource.ts';
import type { ExternalObservation } from '../engine/types.ts';
import { abortable } from '../proxmox/deadline.ts';
import { atProvider, reason, setStep } from './conditions.ts';
import type { StepContext } from './context.ts';
import { listIndex } from './list-index.ts';
import { lateDestroyWindowMs, type RecentDestroys, recentlyDestroyed } from './recent-destroys.ts';

/** The first free VMID >= nextid in the site's range, skipping VMIDs in use, reserved or held by other resources. */
export async function chooseVmid(
  ctx: StepContext,
  r: ProxmoxVM,
  placedOn?: readonly string[],
): Promise<{ externalName: string }> {
  const fp = r.spec.forProvider;
  setStep(r, 'ReservingVMID');
  // Persisted with the external name in one write: where the create goes (F21).
  setAnnotation(r, ANNOTATION_SITE, ctx.site.name);
  if (fp.vmid !== undefined) return { externalName: String(fp.vmid) };
  const { min, max } = ctx.site.vmidRange;
  // Both reads at once: nextid does not depend on the list (a round trip less before the create).
  // nextid is advisory; the resource list is enough where it fails.
  const next = nextIdShared(ctx).catch(() => min);
  const free = await freeVmids(ctx, r, placedOn);
  const start = Math.max(min, await next);
  for (let id = start; id <= max; id++) {
    if (!free(id)) continue;
    ctx.site.unreserve(r.metadata.uid);
    ctx.site.reserved.set(id, r.metadata.uid);
    return { externalName: String(id) };
  }
  ctx.site.releaseCreate(r.metadata.uid);
  throw reason(
    'VMIDRangeExhausted',
    `no free VMID in the configured range ${min}-${max}; widen spec.vmidRange of the ProviderConfig`,
  );
}

/**
 * The site's nextid, one read for the creates that ask at once (a phase's wave asked it once per
 * create). An answer shared by several is as good as one each: nextid is only where the search
 * starts, and what makes two creates take two VMIDs is the reservation above and the fresh list,
 * then PVE itself, which refuses a create at a taken VMID (the nextid race, create.ts). As the
 * node facts' reads (node-facts.ts), the read is the site's client's: a reconcile aborted stops
 * waiting for it, and the others still get its answer.
 */
function nextIdShared(ctx: StepContext): Promise<number> {
  let read = nextIdReads.get(ctx.site);
  if (!read) {
    const sent = ctx.site.client.nextId();
    read = sent;
    nextIdReads.set(ctx.site, sent);
    const done = () => {
      if (nextIdReads.get(ctx.site) === sent) nextIdReads.delete(ctx.site);
    };
    sent.then(done, done);
  }
  return abortable(read, ctx.signal);
}
const nextIdReads = new WeakMap<object, Promise<number>>();

/** Which VMIDs of a site a resource may take (freeVmids); `destroyedLately`: those a late destroy may still reach. */
export interface FreeVmids {
  (id: number): boolean;
  destroyedLately: RecentDestroys;
}

/**
 * Which VMIDs of `ctx`'s site this resource may take: none that Proxmox shows (a fresh bulk list),
 * nor one reserved in this process or held by another resource of the store, nor one whose
 * destroy ended so lately that a late `DELETE` may still reach it (recent-destroys.ts, F89).
 * `placedOn`: the nodes the VM will be made on, when known (recentlyDestroyed).
 */
export async function freeVmids(ctx: StepContext, r: ProxmoxVM, placedOn?: readonly string[]): Promise<FreeVmids> {
  const index = listIndex(await ctx.site.clusterResources(true, ctx.signal, ctx.memory));
  const destroyedLately = await recentlyDestroyed(ctx, index.nodes, placedOn);
  const taken = index.byVmid;
  const held = ctx.options.vmidHolders?.(ctx.site.name);
  const free = (id: number) => {
    const holder = ctx.site.reserved.get(id) ?? held?.get(id);
    return !taken.has(id) && !destroyedLately.has(id) && (holder === undefined || holder === r.metadata.uid);
  };
  return Object.assign(free, { destroyedLately });
}

/**
 * Whether this resource chose its VMID itself: no `spec.forProvider.vmid`, and the external name
 * was written by chooseVmid (always together with `external-create-pending`). An external name a
 * user set names a VM to manage or adopt: never given up.
 */
export function vmidChosenByUs(r: ProxmoxVM): boolean {
  return r.spec.forProvider.vmid === undefined && annotation(r, ANNOTATION_CREATE_PENDING) !== undefined;
}

/** Whether this resource has seen a VM of its own (with its marker) at `vmid`. */
export function confirmedAt(r: ProxmoxVM, vmid: number): boolean {
  return r.status?.atProvider?.vmId === vmid;
}

/**
 * `external-create-pending` is the newest record and no task is known: a process stopped between
 * marking the create and recording its answer (a crash, SIGKILL, a lost status write). The create
 * may have been sent: its outcome is unknown (from then on, see lateCreateMayStillApply).
 */
export function noteUnknownCreate(r: ProxmoxVM, vmid: number): void {
  const a = atProvider(r);
  if (a.task || !createIncomplete(r) || a.createOutcome !== undefined || confirmedAt(r, vmid)) return;
  a.createOutcome = 'Unknown';
  a.unknownCreateSince ??= annotation(r, ANNOTATION_CREATE_PENDING);
}

/**
 * Whether a create of ours whose outcome is unknown may still be applied by PVE (at the external
 * name): until `unknownOutcomeWaitMs` after it was sent. Past that, the record is dropped.
 */
export function lateCreateMayStillApply(ctx: StepContext, r: ProxmoxVM): boolean {
  const a = r.status?.atProvider;
  const since = Date.parse(a?.unknownCreateSince ?? '');
  if (!since) return false;
  if (ctx.site.now() - since < (ctx.options.unknownOutcomeWaitMs ?? 30_000)) return true;
  if (a) delete a.unknownCreateSince;
  return false;
}

/** Our create cannot be at this VMID (a stranger holds it): forget it, so that another is chosen. */
export function giveUpVmid(ctx: StepContext, r: ProxmoxVM, vmid: number): ExternalObservation {
  setAnnotation(r, ANNOTATION_EXTERNAL_NAME, undefined);
  const a = atProvider(r);
  delete a.vmId;
  delete a.smbiosUuid;
  delete a.createOutcome;
  delete a.unknownCreateSince;
  ctx.site.unreserve(r.metadata.uid, vmid);
  return { exists: false, upToDate: false };
}

/**
 * Before a create at `vmid` (one chooseVmid just found clear of late destroys, which the site's
 * shared read then says again at no cost; one sent again at a kept VMID, after our dead
 * placeholder there was destroyed; a VMID the user set, re-applied after a delete): a destroy of it by our credentials that ended within the late-destroy window may be
 * followed by one sent earlier and applied late, which would destroy the new VM (F89's family;
 * recent-destroys.ts). The create waits for the window's end; the VMID is kept, since a create of
 * ours may still be applied there (invariant 4). A VM destroyed by hand with the provider's own
 * credentials is made again after that wait too: nothing tells that destroy from the provider's.
 */
export async function clearOfLateDestroys(
  ctx: StepContext,
  r: ProxmoxVM,
  vmid: number,
  placedOn: readonly string[],
): Promise<void> {
  const index = listIndex(await ctx.site.clusterResources(false, ctx.signal, ctx.memory));
  const by = (await recentlyDestroyed(ctx, index.nodes, placedOn)).get(vmid);
  if (!by?.has(ctx.client.auth.authId)) return;
  ctx.site.releaseCreate(r.metadata.uid);
  throw reason(
    'VMIDRecentlyDestroyed',
    `VM ${vmid} was destroyed by these credentials less than ${lateDestroyWindowMs(ctx) / 1000} s ago, and PVE may still apply a destroy of it that was sent earlier and whose sender gave up; the create is sent once that time has passed`,
    true,
  );
}
