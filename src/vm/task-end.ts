/**
 * The end of a task of ours that observe finds recorded (status.atProvider.task): its slot given
 * back, what its outcome says of the VM (our destroy ended: the VM is gone and its VMID given up;
 * a failure: the resource's, or, on a VM that is not there any more, nobody's), and where the
 * resource goes from there. A task still running is followed (its end wakes the resource).
 */
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { isNoQuorum } from '../proxmox/errors.ts';
import { parseUpid, workerDied } from '../proxmox/upid.ts';
import { adoptElsewhere, adoptOwn } from './adoption.ts';
import { atProvider, noQuorum, reason } from './conditions.ts';
import { followTask, type StepContext } from './context.ts';
import { checkDisksAfterFailure } from './disk-missing.ts';
import { isLockContention } from './limits.ts';
import { locate, type ObservedVm } from './lookup.ts';
import type { Observed } from './observe.ts';
import { backToReplaced, reverted } from './replace.ts';
import { withoutSecrets } from './secrets.ts';
import { lostOnSource } from './site-move.ts';
import { removeSnippets } from './snippet-removal.ts';
import { taskDone } from './tasks.ts';
import { giveUpVmid } from './vmid.ts';

/**
 * What observe goes on with after the task's end: `endedOk`, the task when it ended OK (its
 * outcome is known: known-outcome.ts); `vmGone`, it failed on a VM that is not at its VMID any
 * more; `adopted`, the VM of this resource found by its marker once its own was destroyed. Or
 * what observe answers at once (`observed`).
 */
export type TaskEnd = { observed: Observed } | { endedOk: string | undefined; vmGone: boolean; adopted?: ObservedVm };

export async function observeTaskEnd(
  ctx: StepContext,
  r: ProxmoxVM,
  vmid: number,
  task: string,
  observeOnly: boolean,
): Promise<TaskEnd> {
  const a = atProvider(r);
  const done = await recordTaskEnd(ctx, r, task);
  if (!done) return { observed: followRecordedTask(ctx, r, task) };
  const endedOk = !done.error ? task : undefined;
  // Our destroy ended: our VM is gone, whatever holds its VMID from now on is not it.
  if (!done.error && parseUpid(task)?.type === 'qmdestroy' && parseUpid(task)?.id === String(vmid)) {
    delete a.vmId;
    // Deleting: the UUID of the VM it destroyed tells a newer VM of the same identity from it.
    if (!r.metadata.deletionTimestamp) delete a.smbiosUuid;
    // Its snippets are read by nothing now (best effort; their names carry this resource's uid).
    if (r.metadata.deletionTimestamp && a.node && a.userDataSnippet) {
      await removeSnippets(ctx, r, a.node);
      delete a.userDataSnippet;
    }
    // Our own VM is gone (an interrupted create's placeholder, a retired duplicate): unless the
    // spec pins the VMID, the next VM is made through the whole create protocol at a VMID chosen
    // then, so a stranger taking this one meanwhile is a VMID lost, not a VMIDConflict for good.
    if (!r.metadata.deletionTimestamp && r.spec.forProvider.vmid === undefined) {
      // Moving to another site with no VM left here (the placeholder of a create whose worker
      // died, cleared): the resource goes where the spec says, as for any VM gone from its source
      // (a VM of ours there, or a twin kept here, is followed; else it is made there). A create
      // here failed (the spec's node is the target's) and left the VMID given up in the status
      // only; another resource's VM made at it here was then taken for ours, for good (found by
      // the fault search, FINDINGS.md F38).
      // (A replacement's new VM discarded, the spec back on the old VM's site: that VM again.)
      if (reverted(r)) {
        await backToReplaced(ctx, r);
        return { observed: { obs: { exists: true, upToDate: true, requeueAfterMs: 0 } } };
      }
      if (ctx.target && !observeOnly) return { observed: await lostOnSource(ctx, r, vmid) };
      const gone = giveUpVmid(ctx, r, vmid);
      // A retired duplicate's resource adopts the VM that was kept (on another site, it follows
      // it there: duplicates-elsewhere.ts); otherwise a create follows.
      const adopted = observeOnly ? undefined : await adoptOwn(ctx, r);
      if (adopted) return { endedOk, vmGone: false, adopted };
      return { observed: (observeOnly ? undefined : await adoptElsewhere(ctx, r)) ?? { obs: gone } };
    }
  }
  if (done.error && !alreadyDone(task, done.error.message)) {
    const creating = /:(qmcreate|qmclone):/.test(task);
    // A task of ours on a VM that is gone by now (retired as a twin by another state file's
    // runtime while our resize waited for its lock, destroyed by hand) failed for that: observe
    // goes on as for any VM not found at its VMID (the twin kept is adopted, or the VM is made
    // again). Taken as the resource's failure, it stopped `apply` (TaskFailed is a stop reason)
    // where the next reconcile converged (test/local/two-states.test.ts, under load).
    const vmGone = !creating && !observeOnly && !ctx.target && !(await locate(ctx, vmid, false));
    if (!vmGone) {
      // Back off before looking again (invariant 4); the next observe finds whatever the
      // failed task left: nothing (create again), our VM (complete it), or a placeholder (settle it).
      a.step = 'Failed';
      const msg = withoutSecrets(ctx, done.error.message);
      // Refused for want of quorum (a write to /etc/pve in the worker): not the resource's failure.
      // A move to another site refused there: the source's quorum was checked before its worker
      // began (qemu-server Qemu.pm:5741), the target's mtunnel refuses inside it (:6709).
      if (isNoQuorum(msg)) throw noQuorum(a.siteMove?.upid === task ? a.siteMove.to : ctx.site.name, msg);
      // A worker killed before it ended (a node crash or restart, an OOM kill: PVE reads its task
      // `unexpected status`) was not refused: what it left is looked at again, and `apply` waits,
      // where TaskFailed stopped it. A create's dead worker leaves its placeholder, settled apart.
      if (!creating && workerDied(msg))
        throw reason(
          'TaskDied',
          `${msg}: its worker was killed before it ended (a node crash or restart, an OOM kill); what it left is looked at again`,
          true,
        );
      // A lock held by another (the VM's, or its storage's: many creates on one storage, PVE's
      // cfs_lock "got lock request timeout", which the slot limiter backs off from, limits.ts)
      // refused the task before it changed anything: retried, not the resource's failure.
      const locked = /VM is locked|got timeout/.test(msg) || isLockContention(msg);
      // A resize, start or migration that failed on a VM whose disks are gone (a destroy that
      // freed them and could not remove the config): reported as that, and not sent again
      // (disk-missing.ts). A migration's scan of the volumes fails on them (F94).
      const ran = parseUpid(task);
      if (!locked && ran && (ran.type === 'resize' || ran.type === 'qmstart' || ran.type === 'qmigrate'))
        await checkDisksAfterFailure(ctx, ran.node, vmid);
      const err = reason(locked ? 'Locked' : creating ? 'CreateFailed' : 'TaskFailed', msg, locked);
      if (creating) err.createFailure = true;
      throw err;
    }
    return { endedOk, vmGone };
  }
  return { endedOk, vmGone: false };
}

/**
 * Whether our recorded task `task` ended; once it has, it is cleared from the status, its slot
 * given back and the site's reads invalidated, and its error (if it failed) returned. Undefined
 * while it runs.
 */
export async function recordTaskEnd(
  ctx: StepContext,
  r: ProxmoxVM,
  task: string,
): Promise<{ error?: Error | undefined } | undefined> {
  const done = await taskDone(ctx, task);
  if (!done.finished) return undefined;
  delete atProvider(r).task;
  ctx.site.ownCreateEnded(r.metadata.uid, task);
  ctx.site.releaseCreate(
    r.metadata.uid,
    !done.error ? 'ok' : isLockContention(done.error.message) ? 'contention' : 'failed',
  );
  ctx.site.invalidate(ctx.memory);
  return done;
}

/** A task of ours still running: nothing else is done until it ends (its end wakes the resource). */
export function followRecordedTask(ctx: StepContext, r: ProxmoxVM, task: string): Observed {
  return { obs: { exists: true, upToDate: true, requeueAfterMs: followTask(ctx, r, task) } };
}

/**
 * A power task that failed because the VM already was where it was sent (another runtime of this
 * installation managing the same VM, or a person, got there first): qemu-server's vm_start dies
 * with "VM N already running", vm_shutdown/vm_stop with "VM N not running". Nothing failed.
 */
function alreadyDone(task: string, message: string): boolean {
  const type = parseUpid(task)?.type;
  if (type === 'qmstart') return /already running/.test(message);
  if (type === 'qmshutdown' || type === 'qmstop') return /not running/.test(message);
  return false;
}
