/**
 * Step 12, across clusters: a change of spec.forProvider.site moves the VM with its disks by a
 * remote migration, never by a recreate. The reconcile runs on the site the VM is on (the
 * connector's placed site) with the spec's site as `ctx.target`, in three named steps:
 *
 * 1. `ReservingTarget`: the checks (the source's version, the target's API-token credentials, node,
 *    room, bridges, storages, the snippet), then the target VMID (the VM's own one when it is free
 *    there, so the marker and VMID stay) is recorded in status.atProvider.siteMove and written
 *    before anything is sent, as a create records its VMID first.
 * 2. `MigratingToSite`: `POST .../remote_migrate` with `delete=1`, its `qmigrate` task tracked.
 * 3. Arrival: the VM is found at the recorded VMID on the target, marked as ours and unlocked;
 *    the resource's external name, site and node follow it.
 *
 * This file observes the move (which step it is at, its arrival, a source lost on the way); what
 * steps 1 and 2 check, choose and send is in site-move-request.ts.
 *
 * Proxmox's facts (qemu-server src/PVE/API2/Qemu.pm:5668-5867 at e6352be): VM.Migrate on the
 * VM is the source's only check; the target endpoint is `apitoken=PVEAPIToken=…,host=…,
 * fingerprint=…` and the VM lands on the endpoint's own node (the `local` entry of the target's
 * /cluster/status); without a fingerprint the source reads the target's certificates through an
 * unverified connection and fails on a self-signed one; `target-storage` must be an explicit map;
 * an HA-managed or replicated VM is refused. The worker locks the source `migrate`
 * (QemuMigrate.pm:835-837); a failure in phase 1 unlocks it and destroys what the target got
 * (:948-977); with `delete` the source is destroyed after the target was unlocked (:1906-1909),
 * and a failure there only warns, leaving the source stopped and locked. The target's token needs
 * VM.Allocate on the target VMID, Datastore.AllocateSpace on the mapped storages, SDN.Use on the
 * bridges, and Sys.Audit on / for /cluster/status (the mtunnel endpoint's checks).
 */
import { ANNOTATION_SITE, type ProxmoxVM, type SiteMove } from '../api/proxmoxvm.ts';
import { ANNOTATION_EXTERNAL_NAME, setAnnotation } from '../engine/resource.ts';
import type { ExternalObservation } from '../engine/types.ts';
import { parseUpid } from '../proxmox/upid.ts';
import { atProvider, ready, reason } from './conditions.ts';
import type { StepContext } from './context.ts';
import type { Change } from './drift.ts';
import { retireDuplicates } from './duplicates.ts';
import { retireStrayElsewhere } from './duplicates-elsewhere.ts';
import { lockCleared, reportLock } from './lock-holder.ts';
import { findOwnVm, locate, type ObservedVm } from './lookup.ts';
import {
  clearPlaceholder,
  cloneSource,
  confirmOwnVm,
  manualCleanup,
  ourVmNotAt,
  ownershipOf,
  placeholderFate,
} from './ownership.ts';
import { replacementChange } from './replace.ts';
import { planSiteMove, remoteMigrationBlocker, targetContext } from './site-move-request.ts';
import { noteNode, removeSnippetsLeftOn } from './snippet-removal.ts';
import { leftBehind, noteSourceLeft } from './source-left.ts';
import { markerNames, parseMarker } from './spec.ts';
import { giveUpVmid, lateCreateMayStillApply, noteUnknownCreate } from './vmid.ts';

export interface SiteMoveObservation {
  obs: ExternalObservation;
  change?: Change;
}

function waiting(r: ProxmoxVM, message: string, ctx: StepContext): SiteMoveObservation {
  atProvider(r).step = 'MigratingToSite';
  ready(r, 'False', 'Migrating', message);
  return { obs: { exists: true, upToDate: true, requeueAfterMs: ctx.taskPollMs } };
}

/**
 * `waiting` for a VM of the move that is locked: the lock reported as one no worker holds
 * (LockWithoutTask, lock-holder.ts) once that is so, and looked at again when its report says.
 */
async function waitingOnLock(
  ctx: StepContext,
  r: ProxmoxVM,
  at: { vmid: number; node: string; lock: string },
  message: string,
): Promise<SiteMoveObservation> {
  atProvider(r).step = 'MigratingToSite';
  const requeueAfterMs = await reportLock(ctx, r, at, 'Migrating', message);
  return { obs: { exists: true, upToDate: true, requeueAfterMs } };
}

/** Whether a config at the target is this resource's VM after the move (its marker may name the old VMID). */
function movedHere(r: ProxmoxVM, description: string | undefined, installation: string, move: SiteMove): boolean {
  const m = parseMarker(description);
  return markerNames(m, r, { installation, vmid: move.vmid });
}

/**
 * A `qmigrate` of the VM still runs on the source (a lost answer leaves no UPID to follow).
 * `fresh`: a task list read now, not a shared one of the last second (one read before another
 * process sent the migration does not show it).
 */
async function migrationRunning(ctx: StepContext, move: SiteMove, fresh = false): Promise<boolean> {
  const active = await ctx.site.tasks.activeTasks(move.fromNode, ctx.signal, fresh, ctx.memory);
  return [...active].some((u) => {
    const t = parseUpid(u);
    return t?.type === 'qmigrate' && t.id === String(move.fromVmid);
  });
}

/**
 * Observe while spec.forProvider.site names another site than the one the VM is on. Returns the
 * next change (record the move, send it), a wait, or the arrival (the resource then follows the VM).
 */
export async function observeSiteMove(ctx: StepContext, r: ProxmoxVM, vmid: number): Promise<SiteMoveObservation> {
  const a = atProvider(r);
  const move = a.siteMove;
  const tctx = targetContext(ctx, r);
  const here = await locate(ctx, vmid, true);
  if (move) {
    const there = await locate(tctx, move.vmid, true);
    const hereCfg = here && (await ctx.client.vmConfig(here.node, vmid)).values;
    const hereLock = here && (here.entry.lock ?? hereCfg?.lock);
    // Our VM is still at the source VMID, not another user's VM that took the VMID once it was
    // free (found by the fault search, F23: the arrival then told the operator to destroy that VM).
    const source =
      here && hereCfg && ownershipOf(r, hereCfg, { installation: ctx.site.installation, vmid }).kind === 'ours'
        ? here
        : undefined;
    const thereCfg = there && (await tctx.client.vmConfig(there.node, move.vmid)).values;
    // Our source gone (destroyed since) while the target still holds what our dead tunnel left:
    // nothing will ever unlock it. Left to lostOnSource, the VM was made at another VMID there and
    // the leftover kept by nobody (fault search F86); read as arriving, it was waited on for good.
    if (!source && there) {
      const leftover = await tunnelLeftover(tctx, r, move, there, thereCfg?.lock, true);
      if (leftover) return leftover;
    }
    if (there && thereCfg) {
      // Only a migration's result has arrived: PVE destroys the source once the target is unlocked,
      // or leaves it locked `migrate` when that fails (QemuMigrate.pm:835-837, :1906-1909). Our
      // source still there without that lock was not migrated, and a VM of this identity at the
      // target VMID is another one (another state file's, made there meanwhile): found by the
      // fault search (F20), where following it left the resource's own VM behind.
      if (movedHere(r, thereCfg.description, tctx.site.installation, move) && (!source || hereLock === 'migrate')) {
        if (thereCfg.lock) {
          const arriving = `VM ${move.vmid} is arriving on site ${move.to} (${thereCfg.lock})`;
          // The source still locked and no migration of it running: its worker died (its node
          // crashed) with the copy half made. That dead lock is reported (once unlocked, the
          // copy left at the target is: tunnelLeftover), not waited on for good.
          if (!source || (await migrationRunning(ctx, move, true))) return waiting(r, arriving, ctx);
          return waitingOnLock(ctx, r, { vmid, node: source.node, lock: 'migrate' }, arriving);
        }
        if (source && (await migrationRunning(ctx, move, true)))
          return waiting(r, `the migration of VM ${vmid} to site ${move.to} is finishing`, ctx);
        const left = source !== undefined && (await leftBehind(ctx, r, vmid, source.node));
        // Its snippet on the source node served the source VM alone (a left source still reads it).
        if (!left) await removeSnippetsLeftOn(ctx, r, move.fromNode);
        return arrived(ctx, r, move, there, left);
      }
    }
    if (here) {
      // The VM at the source VMID is not ours any more (ours destroyed after the move was
      // recorded, the VMID taken by someone): nothing of ours is left there to move. Sent anyway,
      // the migration carried the other user's VM away (found by the fault search, F42).
      if (!source) return lostOnSource(ctx, r, vmid);
      await noteNode(ctx, r, here.node, !ctx.readOnly, here.entry.lock);
      const lock = hereLock;
      const sending = `VM ${vmid} is being migrated to site ${move.to} (${lock ?? 'qmigrate'})`;
      // A lock no worker holds (the source's node crashed under the migration) is reported, not
      // waited for: it stays until someone unlocks it (fault search, the twenty-first session).
      if (lock) return waitingOnLock(ctx, r, { vmid, node: here.node, lock }, sending);
      lockCleared(ctx, r, vmid);
      if (await migrationRunning(ctx, move)) return waiting(r, sending, ctx);
      if (there) {
        const leftover = await tunnelLeftover(tctx, r, move, there, thereCfg?.lock);
        if (leftover) return leftover;
        // Someone else's VM took the recorded VMID before ours got there: choose again.
        delete a.siteMove;
        return { obs: { exists: true, upToDate: true, requeueAfterMs: ctx.taskPollMs } };
      }
      if (r.metadata.deletionTimestamp) {
        // Deleting before the move was made: the VM is deleted where it is.
        delete a.siteMove;
        return { obs: { exists: true, upToDate: true, requeueAfterMs: 0 } };
      }
      if (r.spec.forProvider.site !== move.to) {
        // The spec went back (or elsewhere) before the move was made or after it failed: nothing
        // arrived, nothing is sent; the next reconcile plans from the spec (fault search F24).
        delete a.siteMove;
        return { obs: { exists: true, upToDate: true, requeueAfterMs: 0 } };
      }
      // Not sent yet, or it failed (PVE then unlocked the source and cleaned up the target): send it,
      // from the node the VM is on now: HA or a person may have migrated it inside the site since
      // the move was recorded, and its config is read there (fault search F72: read on the recorded
      // node, the move failed for good with "does not exist").
      const from = here.node === move.fromNode ? move : { ...move, fromNode: here.node };
      return {
        obs: { exists: true, upToDate: false },
        change: {
          kind: 'remote-migrate',
          why: `migrating VM ${vmid} ${from.from}/${from.fromNode} -> ${from.to}/${from.node} as VM ${from.vmid}`,
          move: from,
          running: here.entry.status === 'running',
        },
      };
    }
  }
  if (!here) return lostOnSource(ctx, r, vmid);
  if (r.metadata.deletionTimestamp) return { obs: { exists: true, upToDate: true, requeueAfterMs: 0 } };
  const cfg = (await ctx.client.vmConfig(here.node, vmid)).values;
  const own = ownershipOf(r, cfg, { installation: ctx.site.installation, vmid });
  const unfinished = own.kind === 'placeholder' ? own.lock : own.kind === 'ours' ? own.lock : undefined;
  if (unfinished) return unfinishedHere(ctx, r, here, unfinished, own.kind === 'ours');
  // Not ours, at a VMID we chose and never confirmed, or where ours was confirmed and another VM
  // holds it now (ours destroyed, the VMID reused): by observe's rules (notOurs) our VM is not
  // here, so it is gone from the source and lostOnSource follows it or makes it on the target.
  // Taken for a VM the move may not touch, it held the resource in PlacementChangeRefused for good
  // (fault search F41, once another user could destroy our VM).
  if (own.kind !== 'ours' && ourVmNotAt(r, vmid, own, cfg.smbios1)) return lostOnSource(ctx, r, vmid);
  if (own.kind !== 'ours')
    throw reason(
      'PlacementChangeRefused',
      `spec.forProvider.site is now '${tctx.site.name}', but VM ${vmid} on site '${ctx.site.name}' is not this resource's (${own.kind === 'other' ? own.why : 'no ownership marker'}); nothing is moved or created. Fix: revert spec.forProvider.site`,
    );
  // Where the VM is, as Proxmox shows it: a create whose process died before its first status
  // write left none, and every change is made on the recorded node (found by the fault search,
  // F33: the move was planned for ever and never recorded). Moved there by HA or a person, its
  // snippet follows it, in case the move to the other site is refused or fails.
  await noteNode(ctx, r, here.node, !ctx.readOnly, here.entry.lock);
  if (cfg.lock) {
    const waits = `VM ${vmid} is locked (${cfg.lock}); the move to site ${tctx.site.name} waits`;
    return waitingOnLock(ctx, r, { vmid, node: here.node, lock: cfg.lock }, waits);
  }
  lockCleared(ctx, r, vmid);
  // Two runtimes' VMs for this resource here are settled before either moves, by the rule every
  // runtime keeps (the lowest VMID stays): moved away from its twin, a duplicate is one that no
  // site's check sees any more (fault search F35). Ours retired, the twin is followed (lostOnSource).
  const twin = await retireDuplicates(ctx, r, here, here.entry.status ?? '', true);
  if (twin) return twin;
  // And another runtime's VM for it on another site (another state file's create, made there while
  // ours was a clone without a marker yet), by the rule both runtimes keep (duplicates-elsewhere.ts):
  // moved onto it, the move found the VMID it carries taken by that twin and was refused for good
  // (fault search F59). Ours retired, the twin is followed (lostOnSource); the twin retired, the move goes on.
  // Only for a move that can be made: one refused (no migration possible, no replacement allowed)
  // moves nothing onto the twin, and the twin may be another runtime's replacement of this VM in
  // progress (its spec on the target, CreateThenDelete): destroyed as the later of the two, it was
  // made again at once and destroyed again, for good (fault search F64).
  const blocker = await remoteMigrationBlocker(ctx, tctx);
  const replacing = blocker !== undefined && r.spec.forProvider.replacePolicy === 'CreateThenDelete';
  if (!blocker || replacing) {
    const stray = await retireStrayElsewhere(ctx, r, here, here.entry.status ?? '', true);
    if (stray) return stray;
  }
  if (replacing) {
    const change = replacementChange(ctx, here, blocker);
    atProvider(r).step = 'ReservingReplacement';
    ready(r, 'False', 'Unavailable', change.why);
    return { obs: { exists: true, upToDate: false }, change };
  }
  const planned = await planSiteMove(ctx, tctx, r, here, cfg, blocker);
  a.step = 'ReservingTarget';
  return {
    obs: { exists: true, upToDate: false },
    change: {
      kind: 'reserve-site-move',
      why: `migrating VM ${vmid} ${planned.from}/${planned.fromNode} -> ${planned.to}/${planned.node}${planned.vmid === vmid ? '' : ` as VM ${planned.vmid}`} (${planned.how})`,
      how: planned.how,
      move: planned.move,
    },
  };
}

/**
 * Our create or clone here has not finished (PVE's `lock: create|clone` placeholder): there is
 * nothing to migrate yet. While its worker runs, wait (then the complete VM moves); once the worker
 * died, its placeholder is cleared here as observe clears one (root@pam: one skiplock destroy) and
 * the VM is made again, else the fix is named. Found by the fault search (F22): such a placeholder
 * was taken for somebody else's VM, and the resource stayed in PlacementChangeRefused for good.
 */
async function unfinishedHere(
  ctx: StepContext,
  r: ProxmoxVM,
  here: ObservedVm,
  lock: 'create' | 'clone',
  marked: boolean,
): Promise<SiteMoveObservation> {
  const vmid = here.vmid;
  const fate = await placeholderFate(ctx, r, vmid, here.node, lock === 'clone' ? await cloneSource(ctx, r) : undefined);
  if (fate.kind === 'in-progress') {
    atProvider(r).step = lock === 'create' ? 'Creating' : 'Cloning';
    ready(
      r,
      'False',
      'Creating',
      `VM ${vmid} is being ${lock === 'create' ? 'created' : 'cloned'} on site ${ctx.site.name}; it moves to site ${r.spec.forProvider.site} once complete`,
    );
    return { obs: { exists: true, upToDate: true, requeueAfterMs: ctx.taskPollMs } };
  }
  // Another's placeholder (its task made with other credentials) at a VMID that proves ours is not
  // there (ourVmNotAt: one we chose and never confirmed): ours is gone from the source, as for a
  // complete VM not ours (lostOnSource), and observe's notOurs would give the VMID up. Refused, a
  // resource whose create lost its VMID to another user's (whose worker then died) stayed in
  // PlacementChangeRefused for good once its spec moved (fault search F66).
  if (!marked && fate.kind === 'foreign' && ourVmNotAt(r, vmid, { kind: 'foreign', lock }, undefined))
    return lostOnSource(ctx, r, vmid);
  if (!marked && fate.kind !== 'ours-interrupted')
    throw reason(
      'PlacementChangeRefused',
      `spec.forProvider.site is now '${r.spec.forProvider.site}', but VM ${vmid} on site '${ctx.site.name}' is a '${lock}' placeholder that this resource's credentials did not make; nothing is moved or created. Fix: revert spec.forProvider.site`,
    );
  atProvider(r).step = 'CreateInterrupted';
  // Where it is, as below for a complete VM (F33): a create whose process died before its first
  // status write left none, and the clearing was dropped for want of a node, for good (F45).
  atProvider(r).node = here.node;
  if ((await ctx.client.capabilities()).rootTicket) return clearPlaceholder(r, vmid, lock, here.node);
  throw reason(
    'CreateInterrupted',
    `VM ${vmid} on node ${here.node} of site ${ctx.site.name} is left from a ${lock} of this resource whose worker died; Proxmox keeps its 'lock: ${lock}' and only root@pam can clear it. Fix: ${manualCleanup(here.node, vmid)} (the provider then creates the VM again)`,
    true,
  );
}

/**
 * What a migration of ours whose source worker died left at the target VMID (the source's node
 * crashed, or its worker was killed): the target's `mtunnel` made a `lock: create` placeholder
 * (and, once the disks were sent, wrote the VM's config under `lock: migrate`), and its worker,
 * seeing the source's connection close, ends "mtunnel exited unexpectedly" without cleaning up
 * (qemu-server src/PVE/API2/Qemu.pm:7217-7222 at e6352be; only a `quit` with `cleanup`, :7102-7114,
 * or no connection within 300 s, :7136-7151, destroys it). Its `qmtunnel` task, made with the
 * target's credentials, says it is ours. Such a VM was taken for another user's, the move planned
 * again onto a VMID it held for good (MigrationRefused), and the VM left to nobody (fault search,
 * the twenty-first session). A token, which a remote migration's target needs, may not clear the
 * lock: the fix is named, and the move is sent again once the VMID is free. Undefined: not ours.
 */
async function tunnelLeftover(
  tctx: StepContext,
  r: ProxmoxVM,
  move: SiteMove,
  there: ObservedVm,
  lock: string | undefined,
  sourceGone = false,
): Promise<SiteMoveObservation | undefined> {
  if (lock !== 'create' && lock !== 'migrate') return undefined;
  const fate = await placeholderFate(tctx, r, move.vmid, there.node, undefined);
  if (fate.kind === 'in-progress')
    return waiting(r, `VM ${move.vmid} on site ${move.to} is still held by its migration tunnel (${lock})`, tctx);
  if (fate.kind !== 'ours-interrupted' || fate.task.type !== 'qmtunnel') return undefined;
  atProvider(r).step = 'MigratingToSite';
  const left = `VM ${move.vmid} on node ${there.node} of site ${move.to} is left from a remote migration of this resource whose worker died (its tunnel, task ${fate.task.upid}, ended: ${fate.task.status ?? 'unknown'}); Proxmox keeps its 'lock: ${lock}' and only root@pam can clear it.`;
  const gone = `Its source, VM ${move.fromVmid} on site ${move.from}, is gone (destroyed since)`;
  // The config arrived (it carries our marker) and the source is gone: the copy may be all that is
  // left of the VM, so the fix keeps it (the provider follows it once unlocked).
  if (sourceGone && lock === 'migrate')
    throw reason(
      'CreateInterrupted',
      `${left} ${gone}: this copy, its disks and config sent, may be all that is left of it. Fix: check its disks on node ${there.node}, then run 'qm unlock ${move.vmid}' there (the provider follows it), or, to make the VM anew instead, 'qm unlock ${move.vmid} && qm stop ${move.vmid} && qm destroy ${move.vmid} --purge'`,
      true,
    );
  throw reason(
    'CreateInterrupted',
    `${left} Fix: on node ${there.node} run 'qm unlock ${move.vmid} && qm stop ${move.vmid} && qm destroy ${move.vmid} --purge' (${sourceGone ? `${gone}: the provider then makes the VM on site ${move.to}` : `an online migration's target may still run, waiting for the source; the provider then migrates VM ${move.fromVmid} again`})`,
    true,
  );
}

/**
 * The VM is not at its VMID on the site it was on: it was moved (a lost record, or a person),
 * retired as a twin's duplicate (retireDuplicates above), or destroyed. Markers say which: the
 * resource follows its VM to the target, or to the twin kept here (which then moves), or the VM is
 * made again on the target.
 */
export async function lostOnSource(ctx: StepContext, r: ProxmoxVM, vmid: number): Promise<SiteMoveObservation> {
  const a = atProvider(r);
  const tctx = targetContext(ctx, r);
  // "Gone" makes a VM: only on a list of the target begun now. A list a moment old (a fresh read
  // may take one begun up to FRESH_MS before) can predate a migration that just arrived, which our
  // own mutations on the source site do not date; taken for gone, the VM was made again on the
  // target, then retired as the moved VM's twin (the site-move tests, with no creation grace).
  tctx.site.invalidate();
  const moved = await findOwnVm(tctx, r);
  const kept = moved ? undefined : await findOwnVm(ctx, r);
  const found = moved ?? kept;
  const site = kept ? ctx.site.name : tctx.site.name;
  // Gone from here after a move was recorded (its migration's end seen here, not its arrival: the
  // VM may still be locked on the target), or found moved: the snippet on the node it left served
  // it alone. Not for a twin kept here, nor for a VM of ours gone without a move (made again here,
  // a late create of ours here would read it).
  const leftNode = a.siteMove?.fromNode ?? a.node;
  if (!kept && (moved || a.siteMove) && leftNode) await removeSnippetsLeftOn(ctx, r, leftNode);
  if (found) {
    setAnnotation(r, ANNOTATION_EXTERNAL_NAME, String(found.vmid));
    // With the VMID, in the same write, the site it is on (F28).
    setAnnotation(r, ANNOTATION_SITE, site);
    a.node = found.node;
    // A twin is another VM: a delete checks the SMBIOS UUID it recorded (ownership.ts anotherVm).
    confirmOwnVm(r, found);
  } else {
    // Gone from both. A create of ours here whose answer was lost may still be applied here: wait
    // that out, as observe does. Then the VMID goes with the site: it names nothing on the target,
    // where the next reconcile chooses one by the usual protocol (found by the fault search: a
    // VMID kept from a create that never happened was taken on the target by another user, and
    // the move back was refused for good, that VM not being ours).
    noteUnknownCreate(r, vmid);
    if (lateCreateMayStillApply(ctx, r)) {
      a.step = 'CreateOutcomeUnknown';
      ready(
        r,
        'False',
        'Creating',
        `the create of VM ${vmid} got no answer; waiting to see whether Proxmox applied it`,
      );
      return { obs: { exists: true, upToDate: true, requeueAfterMs: ctx.taskPollMs } };
    }
    giveUpVmid(ctx, r, vmid);
  }
  a.site = site;
  delete a.placedNode;
  delete a.snippetLeftOn;
  // A move recorded for the VM that is gone is moot: kept, it held every reconcile on the source
  // (VmConnector.placedSiteName follows a recorded move's source), where the create then made for
  // the spec was refused (its node is the target's: NodeNotFound, for good; found by the fault
  // search once another user could destroy our VM, F39), and a twin kept here would have been sent
  // with the old VM's VMID. The twin's move is planned afresh.
  delete a.siteMove;
  ctx.site.forget(r.metadata.uid);
  ready(
    r,
    'False',
    'Creating',
    found
      ? `VM ${vmid} is no longer on site ${ctx.site.name}; VM ${found.vmid} on ${found.node} of site ${site} carries this resource's marker and is followed there`
      : `VM ${vmid} is no longer on site ${ctx.site.name}, nor anywhere on site ${tctx.site.name}; it is made there`,
  );
  return { obs: { exists: true, upToDate: true, requeueAfterMs: 0 } };
}

/** The move arrived: the resource's external name, site and node follow the VM. */
function arrived(
  ctx: StepContext,
  r: ProxmoxVM,
  move: SiteMove,
  there: ObservedVm,
  left: boolean,
): SiteMoveObservation {
  const a = atProvider(r);
  setAnnotation(r, ANNOTATION_EXTERNAL_NAME, String(move.vmid));
  // With the VMID, in the same write, the site it is on (F28): left on the source, a VM made again
  // at this VMID on the target (ours destroyed there by someone) was looked for on the source,
  // where its clone's task does not exist (fault search F76, once F74 let that site win).
  setAnnotation(r, ANNOTATION_SITE, move.to);
  a.site = move.to;
  a.node = there.node;
  a.vmId = move.vmid;
  // The spec's node on the new site, if it names another, is reached by an in-cluster migration.
  delete a.placedNode;
  delete a.snippetLeftOn;
  delete a.siteMove;
  delete a.task;
  ctx.site.forget(r.metadata.uid);
  if (left) noteSourceLeft(r, move);
  ready(r, 'False', 'Creating', `VM ${move.vmid} arrived on ${there.node} of site ${move.to}`);
  return { obs: { exists: true, upToDate: true, requeueAfterMs: 0 } };
}
