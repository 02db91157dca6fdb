/**
 * A replacement, the one way a VM changes site with data loss: only when a remote migration is
 * impossible (site-move-request.ts remoteMigrationBlocker: the source's version, the target's credentials)
 * and spec.forProvider.replacePolicy is CreateThenDelete. Create, then delete, in named steps:
 *
 * 1. `ReservingReplacement`: the old VM (site, node, VMID) is recorded in
 *    status.atProvider.replacing, and the resource moves to the new site in the same status write
 *    (its site; the VMID stays the external name, so the new VM gets it where it is free there;
 *    where another VM holds it, another is chosen: ownership.ts ourVmNotAt, fault search F57).
 * 2. The usual create protocol makes the new VM on the new site (it finds no VM of ours there).
 * 3. `RetiringReplaced`: once the new VM is Ready, the old one is stopped and destroyed with its
 *    disks, after its marker was read again (a VMID reused by somebody else is never touched).
 *
 * Deleting the resource meanwhile destroys both (the old one first). The spec's site back on the
 * old VM's before the new VM was made drops the replacement (dropRevertedReplacement). Nothing here
 * ever runs without the policy: by default a site change that cannot migrate is refused.
 */
import { ANNOTATION_SITE, type ProxmoxVM } from '../api/proxmoxvm.ts';
import {
  ANNOTATION_EXTERNAL_NAME,
  annotation,
  createIncomplete,
  externalName,
  setAnnotation,
} from '../engine/resource.ts';
import type { ExternalObservation } from '../engine/types.ts';
import { parseUpid } from '../proxmox/upid.ts';
import { atProvider, ready, reason } from './conditions.ts';
import { type StepContext, stepContext } from './context.ts';
import type { Change } from './drift.ts';
import { lockCleared, reportLock } from './lock-holder.ts';
import { locate, type ObservedVm } from './lookup.ts';
import { confirmOwnVm, isProtected, protectedVm, unprotect } from './ownership.ts';
import { removeSnippetsLeftOn } from './snippet-removal.ts';
import { markerNames, parseMarker } from './spec.ts';
import { taskDone } from './tasks.ts';
import { confirmedAt, lateCreateMayStillApply, noteUnknownCreate } from './vmid.ts';

/** The change that records the replacement (step 1): the old VM, to destroy once the new one is Ready. */
export function replacementChange(ctx: StepContext, here: ObservedVm, blocker: string): Change {
  const to = ctx.target!.name;
  return {
    kind: 'reserve-replacement',
    why: `replacing VM ${here.vmid} on ${ctx.site.name}/${here.node} by a new VM on ${to} (replacePolicy: CreateThenDelete; the disks' data is lost; a remote migration is impossible: ${blocker})`,
    how: `replace (data loss): a new VM on ${to}, then VM ${here.vmid} on ${ctx.site.name} is destroyed`,
    replaced: { site: ctx.site.name, node: here.node, vmid: here.vmid },
    target: to,
  };
}

/**
 * Before step 2 has made the new VM (none confirmed, no task, no create pending), the spec's site
 * back on the old VM's (a user who changed their mind): the replacement is dropped and the old VM
 * is the resource's again, with its VMID and site. Returns whether it was. Kept, the resource stayed
 * placed on the new site with the old VM's VMID, which names nothing there or another resource's
 * VM: PlacementChangeRefused for good (fault search F40).
 */
export async function dropRevertedReplacement(ctx: StepContext, r: ProxmoxVM): Promise<boolean> {
  const a = atProvider(r);
  if (!reverted(r) || a.vmId !== undefined || a.task || createIncomplete(r)) return false;
  // A VMID chosen for the new VM (the site annotation is the new site's) may hold what a failed
  // create left there: PVE's placeholder, when its worker died. That is cleared first (site-move.ts
  // unfinishedHere) and the replacement dropped at the destroy's end (observe); dropped now, the
  // placeholder was left behind with nobody to clear it (fault search F48).
  const chosen = externalName(r);
  if (chosen !== undefined && a.site !== a.replacing!.site && annotation(r, ANNOTATION_SITE) === a.site) {
    if (await locate(ctx, Number(chosen), true)) return false;
  }
  await backToReplaced(ctx, r);
  return true;
}

/** A replacement is recorded and the spec's site is the old VM's again (not deleting). */
export function reverted(r: ProxmoxVM): boolean {
  const old = atProvider(r).replacing;
  return old !== undefined && !r.metadata.deletionTimestamp && r.spec.forProvider.site === old.site;
}

/**
 * The replacement dropped: the old VM is the resource's again, with its VMID and site. What went up
 * on the new site's node for the new VM (its snippet) is read by nothing there any more.
 */
export async function backToReplaced(ctx: StepContext, r: ProxmoxVM): Promise<void> {
  const a = atProvider(r);
  const old = a.replacing!;
  if (a.node && ctx.site.name !== old.site) await removeSnippetsLeftOn(ctx, r, a.node);
  delete a.replacing;
  a.site = old.site;
  a.node = old.node;
  for (const k of ['vmId', 'placedNode', 'snippetLeftOn', 'smbiosUuid', 'state', 'task', 'userDataSnippet'] as const)
    delete a[k];
  setAnnotation(r, ANNOTATION_EXTERNAL_NAME, String(old.vmid));
  setAnnotation(r, ANNOTATION_SITE, old.site);
  ctx.site.forget(r.metadata.uid);
  ready(
    r,
    'False',
    'Unavailable',
    `the replacement was dropped: spec.forProvider.site is ${old.site} again, where VM ${old.vmid} is`,
  );
}

/**
 * The spec's site back on the old VM's once step 2 made the new VM (reverted, its create ended):
 * the new VM, a few minutes old and this resource's by its marker, is destroyed (stopped hard
 * first), then the replacement is dropped (observe, at the destroy's end). The old VM keeps its
 * data: the user changed their mind before the replacement was done. Left there, the new VM stayed
 * on the other site with our marker, where no per-site check sees a duplicate, and the resource
 * went back to the old VM (fault search F46). Undefined: not this case, or not yet (a create
 * whose outcome is unknown, a placeholder: observe's own paths settle those first).
 */
export async function discardReplacement(
  ctx: StepContext,
  r: ProxmoxVM,
  vmid: number,
): Promise<{ obs: ExternalObservation; change?: Change } | undefined> {
  if (!reverted(r)) return undefined;
  // Step 3 under way (the new VM was Ready): its task is seen to its end first. A stop leaves the
  // old VM, which the user wants back; a destroy does not: the replacement is done, and the new VM
  // is the resource's and goes to the old site as any VM.
  const a = atProvider(r);
  const old = a.replacing!;
  const pctx = previousContext(ctx, r);
  if (old.upid && pctx) {
    const done = await taskDone(pctx, old.upid);
    if (!done.finished) {
      ready(r, 'False', 'Unavailable', `waiting for the retirement of VM ${old.vmid} on ${old.site} to end`);
      return { obs: { exists: true, upToDate: true, requeueAfterMs: ctx.taskPollMs } };
    }
    const destroyed = parseUpid(old.upid)?.type === 'qmdestroy' && !done.error;
    delete old.upid;
    if (destroyed) {
      await replacementDone(pctx, r);
      return undefined;
    }
  }
  // A create of the new VM whose answer was lost (the process died once it was sent) is settled
  // here, not left to observe's paths: those go through the site move first (the spec names the
  // old site), which took the new VM, found with our marker, for one to migrate onto the old VM's
  // VMID, refused for good, and both VMs stayed (fault search F63). Found with our marker, it was
  // made, and is discarded as any; not found, it may still be made while PVE could apply the create.
  const unknown = createIncomplete(r) && !confirmedAt(r, vmid);
  const here = await locate(ctx, vmid, true);
  if (!here) {
    if (unknown) {
      noteUnknownCreate(r, vmid);
      if (lateCreateMayStillApply(ctx, r)) {
        ready(
          r,
          'False',
          'Unavailable',
          `the create of VM ${vmid} got no answer; waiting to see whether Proxmox applied it, to discard it`,
        );
        return { obs: { exists: true, upToDate: true, requeueAfterMs: ctx.taskPollMs } };
      }
    }
    await backToReplaced(ctx, r);
    return { obs: { exists: true, upToDate: true, requeueAfterMs: 0 } };
  }
  const config = await ctx.client.vmConfig(here.node, vmid);
  const cfg = config.values;
  if (!markerNames(parseMarker(cfg.description), r, { installation: ctx.site.installation, vmid })) return undefined;
  if (unknown) {
    // Its create's outcome is known now: made, and confirmed as observe confirms a VM ours.
    confirmOwnVm(r, { vmid, config });
    delete a.createOutcome;
    delete a.unknownCreateSince;
  }
  a.node = here.node;
  if (cfg.lock) {
    const waiting = `VM ${vmid} is locked (${cfg.lock}); it is discarded once unlocked`;
    const requeueAfterMs = await reportLock(ctx, r, { vmid, node: here.node, lock: cfg.lock }, 'Unavailable', waiting);
    return { obs: { exists: true, upToDate: true, requeueAfterMs } };
  }
  lockCleared(ctx, r, vmid);
  // Only while the old VM is there, ours and unlocked: else the new VM is all that is left, and
  // goes to the old site as any VM.
  const kept = pctx && !old.upid ? await ourOldVm(pctx, r, old) : undefined;
  if (!kept || kept.cfg.lock) return undefined;
  const running = here.entry.status === 'running';
  const why = `${running ? 'stopping' : 'destroying'} VM ${vmid}, the new VM of a replacement the spec no longer wants (spec.forProvider.site is ${old.site} again, where VM ${old.vmid} is kept)`;
  ready(r, 'False', 'Unavailable', why);
  return {
    obs: { exists: true, upToDate: false },
    change: { kind: 'discard-replacement', why, node: here.node, vmid, running },
  };
}

/**
 * The old VM is gone (step 3's destroy ended, or it went by hand): the replacement is done, and
 * nothing of ours is left on the old site; its snippet on the old VM's node served it alone.
 */
async function replacementDone(pctx: StepContext, r: ProxmoxVM): Promise<void> {
  const a = atProvider(r);
  await removeSnippetsLeftOn(pctx, r, a.replacing!.node);
  delete a.replacing;
}

/**
 * The replacement's old VM, read on its site (`pctx`): where it is and its config, if it is there
 * and ours by its marker; undefined when it is gone or its VMID is somebody else's now.
 */
async function ourOldVm(
  pctx: StepContext,
  r: ProxmoxVM,
  old: { vmid: number },
): Promise<{ found: ObservedVm; cfg: Record<string, string> } | undefined> {
  const found = await locate(pctx, old.vmid, true);
  if (!found) return undefined;
  const cfg = (await pctx.client.vmConfig(found.node, old.vmid)).values;
  const ours = markerNames(parseMarker(cfg.description), r, { installation: pctx.site.installation, vmid: old.vmid });
  return ours ? { found, cfg } : undefined;
}

/** Step 1, in update: record the old VM and move the resource to the new site, in one status write. */
export function reserveReplacement(ctx: StepContext, r: ProxmoxVM, change: Change): void {
  const a = atProvider(r);
  a.replacing = { ...change.replaced!, at: new Date().toISOString() };
  a.site = ctx.target!.name;
  for (const k of [
    'vmId',
    'node',
    'placedNode',
    'snippetLeftOn',
    'smbiosUuid',
    'state',
    'task',
    'userDataSnippet',
  ] as const)
    delete a[k];
  a.step = 'ReservingReplacement';
  ctx.site.forget(r.metadata.uid);
}

/** The old site's context, for the same resource and reconcile. */
function previousContext(ctx: StepContext, r: ProxmoxVM): StepContext | undefined {
  return ctx.previous ? stepContext(ctx.previous, r, ctx.options, ctx.signal) : undefined;
}

/**
 * Step 3, in observe (the new VM is otherwise Ready): the change that retires the old VM, a wait
 * for its task, or nothing when it is gone (then the record goes).
 */
export async function retireReplaced(
  ctx: StepContext,
  r: ProxmoxVM,
): Promise<{ change?: Change; waitMs?: number } | undefined> {
  const a = atProvider(r);
  const old = a.replacing;
  const pctx = previousContext(ctx, r);
  if (!old || !pctx) return undefined;
  if (old.upid) {
    const done = await taskDone(pctx, old.upid);
    if (!done.finished) return { waitMs: ctx.taskPollMs };
    delete old.upid;
    if (done.error)
      throw reason('TaskFailed', `retiring replaced VM ${old.vmid} on ${old.site}: ${done.error.message}`);
  }
  const kept = await ourOldVm(pctx, r, old);
  if (!kept) {
    // Gone (destroyed by us or by hand), or the VMID is somebody else's now.
    await replacementDone(pctx, r);
    return undefined;
  }
  const { found, cfg } = kept;
  if (cfg.lock) return { waitMs: ctx.taskPollMs };
  // Found before it is stopped (ownership.ts isProtected); the replacement stays unfinished.
  if (isProtected(cfg))
    throw reason(
      'VMProtected',
      `${protectedVm(`replaced VM ${old.vmid} on node ${found.node} of site ${old.site}`)} beside the new VM, and this resource is not Ready until it goes. Fix: ${unprotect(old.vmid, found.node, old.site)}`,
      true,
    );
  return {
    change: {
      kind: 'retire-replaced',
      why: `${found.entry.status === 'running' ? 'stopping' : 'destroying'} replaced VM ${old.vmid} on ${old.site}/${found.node} (replacePolicy: CreateThenDelete)`,
      node: found.node,
      vmid: old.vmid,
      running: found.entry.status === 'running',
    },
  };
}

/** Step 3, in update or delete: stop the old VM hard, or destroy it with its disks. */
export async function retireStep(ctx: StepContext, r: ProxmoxVM, change: Change): Promise<void> {
  const pctx = previousContext(ctx, r)!;
  const a = atProvider(r);
  a.step = 'RetiringReplaced';
  const upid = change.running
    ? await pctx.client.stopVm(change.node!, change.vmid!)
    : await pctx.client.deleteVm(change.node!, change.vmid!, { purge: true, destroyUnreferencedDisks: true });
  a.replacing = { ...a.replacing!, upid };
  pctx.site.invalidate(pctx.memory);
}

/**
 * Deleting the resource while a replacement is under way: the old VM goes first. Returns a wait
 * while there is still something of it, undefined once it is gone.
 */
export async function retireBeforeDelete(ctx: StepContext, r: ProxmoxVM): Promise<number | undefined> {
  const next = await retireReplaced(ctx, r);
  if (!next) return undefined;
  if (next.change) await retireStep(ctx, r, next.change);
  ready(r, 'False', 'Deleting', `destroying replaced VM ${r.status?.atProvider?.replacing?.vmid} first`);
  return next.waitMs ?? ctx.taskPollMs;
}
