/**
 * Steps 2 and 11-13: what is there. The task we track first (it decides whether anything else is
 * worth a look), then the VM at the external name from the site's bulk list, whose it is (see
 * ownership.ts), and — only when something may have changed — its config, status, pending changes
 * and guest addresses. Observe never mutates; what must change is returned as one Change for
 * update (the engine's one-mutation-per-reconcile rule).
 */
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { externalName, policyAllows } from '../engine/resource.ts';
import type { ExternalObservation } from '../engine/types.ts';
import { UnavailableError } from '../proxmox/errors.ts';
import { parseUpid, workerDied } from '../proxmox/upid.ts';
import { adoptElsewhere, adoptOwn } from './adoption.ts';
import { atProvider, isReady, pendingReboot, ready, reason } from './conditions.ts';
import type { StepContext } from './context.ts';
import { type Change, changes } from './drift.ts';
import { retireDuplicates } from './duplicates.ts';
import { retireStrayElsewhere } from './duplicates-elsewhere.ts';
import { guestGate, observeGuest } from './guest.ts';
import { knownOutcome, planAfter, plannedWait } from './known-outcome.ts';
import { lockCleared, reportLock } from './lock-holder.ts';
import { locate, nodeOffline, type ObservedVm } from './lookup.ts';
import { onOfflineNode, onOfflineTaskNode } from './node-offline.ts';
import {
  clearPlaceholder,
  cloneSource,
  manualCleanup,
  type Ownership,
  ourVmNotAt,
  ownershipOf,
  placeholderFate,
  smbiosUuid,
} from './ownership.ts';
import { guestPoll, needsFullObserve } from './read-schedule.ts';
import { discardReplacement, dropRevertedReplacement, retireReplaced } from './replace.ts';
import { loadSecrets } from './secrets.ts';
import { observeSiteMove } from './site-move.ts';
import { noteNode } from './snippet-removal.ts';
import { desiredSnippet } from './snippets.ts';
import { recheckSourceLeft } from './source-left.ts';
import { agentEnabled, validateSpec } from './spec.ts';
import { followRecordedTask, observeTaskEnd, recordTaskEnd } from './task-end.ts';
import { giveUpVmid, lateCreateMayStillApply, noteUnknownCreate, vmidChosenByUs } from './vmid.ts';

/** The step a resource is at while the change drift found is being made. */
const STEP_OF: Partial<Record<Change['kind'], string>> = {
  start: 'Starting',
  stop: 'Stopping',
  resize: 'Resizing',
  migrate: 'Migrating',
  'move-disk': 'MovingDisk',
  'remote-migrate': 'MigratingToSite',
};

export interface Observed {
  obs: ExternalObservation;
  /** The change update() is to make (drift, or the clean-up of an interrupted create of ours). */
  change?: Change;
}

/** The refusal that keeps one resource on one VM: no second VM after a change of VMID. */
function checkPlacement(r: ProxmoxVM, vmid: number | undefined): void {
  const a = r.status?.atProvider;
  const fp = r.spec.forProvider;
  if (a?.vmId === undefined) return;
  if (fp.vmid !== undefined && vmid !== undefined && fp.vmid !== vmid && a.vmId === vmid)
    throw reason(
      'PlacementChangeRefused',
      `spec.forProvider.vmid is now ${fp.vmid} but this resource's VM is ${vmid}; no VM is created at ${fp.vmid}. Fix: a VMID is the identity of a VM: revert the field, or delete this resource (its VM is destroyed) and create a new one`,
    );
}

/** A VM at our VMID that is not ours: give the VMID up if we may, else refuse for good. */
function notOurs(ctx: StepContext, r: ProxmoxVM, found: ObservedVm, own: Ownership): Observed {
  // Deleting, and a VM that is not ours holds the VMID: ours is gone (destroyed, the VMID reused).
  // Nothing of ours is left to delete; the stranger is never touched. Otherwise, where the VM there
  // proves ours is not (ourVmNotAt), ours may be elsewhere: the next reconcile, with no VMID, looks
  // for it by its marker on this site and the others (adoptOwn, adoptElsewhere) before it makes
  // one again at another VMID. Made at once here, a VM another state file had adopted and moved to
  // another site was made a second time (fault search F65). Ours with its description edited
  // stays a VMIDConflict.
  if (r.metadata.deletionTimestamp) return { obs: giveUpVmid(ctx, r, found.vmid) };
  if (ourVmNotAt(r, found.vmid, own, found.config?.values.smbios1)) {
    giveUpVmid(ctx, r, found.vmid);
    ready(
      r,
      'False',
      'Creating',
      `VM ${found.vmid} on node ${found.node} is not this resource's any more; looking for this resource's VM by its marker before making it again`,
    );
    return { obs: { exists: true, upToDate: true, requeueAfterMs: 0 } };
  }
  if (own.kind === 'other')
    throw reason(
      'VMIDConflict',
      `VM ${found.vmid} on node ${found.node} is not this resource's: ${own.why}; it will never be modified or deleted by this one. Fix: give this resource its own VMID`,
    );
  throw reason(
    'VMIDConflict',
    `VM ${found.vmid} on node ${found.node} was not created by this resource (no ownership marker); it will never be modified or deleted. Fix: point crossplane.io/external-name at this resource's own VM, or use managementPolicies: [Observe] to watch VM ${found.vmid} without managing it`,
  );
}

/**
 * A create/clone placeholder at our VMID (no marker yet, or ours still under `lock: create|clone`):
 * wait while its worker runs; once it died, clean it up when it is provably ours and the
 * credentials may (root@pam: unlock, then destroy), or say exactly how to.
 */
async function settlePlaceholder(
  ctx: StepContext,
  r: ProxmoxVM,
  found: ObservedVm,
  lock: 'create' | 'clone',
  own: Ownership,
): Promise<Observed> {
  const a = atProvider(r);
  const vmid = found.vmid;
  const fate = await placeholderFate(
    ctx,
    r,
    vmid,
    found.node,
    lock === 'clone' ? await cloneSource(ctx, r) : undefined,
  );
  if (fate.kind === 'in-progress') {
    a.step = lock === 'create' ? 'Creating' : 'Cloning';
    ready(r, 'False', 'Creating', `VM ${vmid} is being ${lock === 'create' ? 'created' : 'cloned'} on ${found.node}`);
    return { obs: { exists: true, upToDate: true, requeueAfterMs: ctx.taskPollMs } };
  }
  if (fate.kind === 'foreign' && own.kind !== 'ours') return notOurs(ctx, r, found, { kind: 'foreign', lock });
  const manual = `${manualCleanup(found.node, vmid)} (the provider then creates the VM again), or give the provider root@pam password credentials, which may clear a lock it set`;
  if (fate.kind === 'unknown' && own.kind !== 'ours') {
    a.step = 'CreateInterrupted';
    throw reason(
      'CreateInterrupted',
      `VM ${vmid} on node ${found.node} is a '${lock}' placeholder with no task running, and the task history no longer shows who made it; it is left alone. Fix: if nobody else is creating VM ${vmid}, ${manual}`,
      true,
    );
  }
  // Ours, and its worker is gone (node reboot, killed worker): PVE keeps the placeholder and its lock.
  a.step = 'CreateInterrupted';
  if ((await ctx.client.capabilities()).rootTicket) return clearPlaceholder(r, vmid, lock, found.node);
  const task =
    fate.kind === 'ours-interrupted' ? ` (task ${fate.task.upid} ended: ${fate.task.status ?? 'unknown'})` : '';
  // A task that failed removes its placeholder (qemu-server Qemu.pm:1601-1605) unless the unlink
  // fails, as on a read-only /etc/pve (no quorum): it left the placeholder, its worker did not die.
  const status = fate.kind === 'ours-interrupted' ? fate.task.status : undefined;
  const how =
    status && !workerDied(status)
      ? 'whose task failed and left it (its cleanup could not remove the config file, as when the cluster had no quorum)'
      : 'whose worker died';
  // A dead tunnel's placeholder is by these credentials too: a move of a resource to this site.
  const what =
    fate.kind === 'ours-interrupted' && fate.task.type === 'qmtunnel'
      ? 'a move to this site by these credentials (the target of a remote migration)'
      : `a ${lock} of this resource`;
  throw reason(
    'CreateInterrupted',
    `VM ${vmid} on node ${found.node} is left from ${what} ${how}${task}; Proxmox keeps its 'lock: ${lock}' and only root@pam can clear it. Fix: ${manual}`,
    true,
  );
}

export async function observe(ctx: StepContext, r: ProxmoxVM): Promise<Observed> {
  const problems = validateSpec(r);
  if (problems.length) {
    throw reason('InvalidSpec', problems.map((p) => `${p.field}: ${p.message}`).join('; '));
  }
  const a = atProvider(r);
  const wasReady = a.step === 'Ready';
  // (A retirement of this resource's VM for an older twin on another site goes on to its destroy.)
  const lookElsewhere = wasReady || a.step === 'RetiringDuplicate';
  const vmidText = externalName(r);
  checkPlacement(r, vmidText ? Number(vmidText) : undefined);
  a.site = ctx.site.name;
  await loadSecrets(ctx, r);
  const observeOnly =
    !policyAllows(r.spec.managementPolicies, 'Create') && !policyAllows(r.spec.managementPolicies, 'Update');
  // A replacement whose new VM was not made yet, and the spec's site back on the old VM's.
  if (await dropRevertedReplacement(ctx, r)) return { obs: { exists: true, upToDate: true, requeueAfterMs: 0 } };
  let adopted: ObservedVm | undefined;
  if (!vmidText) {
    // Deleting during a replacement before the new VM got its VMID (the old one was given up on the
    // new site, where it names nothing): the old VM still goes first (delete(), replace.ts). Taken
    // for a resource with nothing to delete, it was left behind on the old site.
    if (r.metadata.deletionTimestamp && a.replacing && ctx.previous) return { obs: { exists: true, upToDate: true } };
    // A task still recorded with no VMID (the VMID given up after the task ended, and the status
    // write that cleared the task skipped by the creation grace's wait, or lost): its end is
    // recorded here, on the site it was sent to, before this resource's VM is looked for by its
    // marker. Kept while the resource followed a VM of its marker to another site, it was followed
    // there, on a cluster without its node, at every reconcile (fault search F60). (Deleting: the
    // resource has nothing to delete, and F53's path stands.)
    if (a.task && !observeOnly && !r.metadata.deletionTimestamp) {
      const task = a.task;
      if (!(await recordTaskEnd(ctx, r, task))) return followRecordedTask(ctx, r, task);
    }
    // No VMID recorded (a new resource, or a lost or other state file): Proxmox may already hold
    // this resource's VM, made by this installation. Adopt it rather than make a second one.
    adopted = observeOnly ? undefined : await adoptOwn(ctx, r);
    // Not when deleting (as below, for a VM not at its VMID): another site's VM of this identity
    // is another resource's by now (the manifest applied again there), which the delete would
    // have destroyed (fault search F53).
    if (!adopted)
      return (
        (observeOnly || r.metadata.deletionTimestamp ? undefined : await adoptElsewhere(ctx, r)) ?? {
          obs: { exists: false, upToDate: false },
        }
      );
  }
  let vmid = adopted?.vmid ?? Number(vmidText);
  if (!Number.isInteger(vmid) || vmid < 100)
    throw reason(
      'InvalidExternalName',
      `crossplane.io/external-name must be a VMID (an integer >= 100); got '${vmidText}'`,
    );

  // In-flight task first: it decides whether anything else is worth looking at.
  const task = a.task;
  // A slot is held for a task in flight. With none recorded (another process followed ours to its
  // end), one this process still held was held for good: the node's next resize waited for ever
  // (fault search F50). A create of unknown outcome keeps its slot (architecture.md, invariant 1);
  // a plan changes nothing.
  if (!task && !ctx.readOnly && a.createOutcome !== 'Unknown') ctx.site.releaseIdle(r.metadata.uid);
  // Our task that just ended OK (its outcome is known: known-outcome.ts).
  let endedOk: string | undefined;
  /** Our task failed on a VM that is not there any more (task-end.ts). */
  let vmGone = false;
  if (task) {
    const taskNode = parseUpid(task)?.node;
    // Found offline at the last look: nothing is sent to it while the list still shows it so.
    if (taskNode && ctx.memory.offlineTaskNode === taskNode) {
      if (await nodeOffline(ctx, taskNode)) return onOfflineTaskNode(ctx, r, vmid, taskNode, task);
      ctx.memory.offlineTaskNode = undefined;
    }
    const ended = await observeTaskEnd(ctx, r, vmid, task, observeOnly).catch(async (e: unknown) => {
      // The task's node does not answer: offline (a crash, a partition), its task's end is unknown.
      if (!(e instanceof UnavailableError) || !taskNode || !(await nodeOffline(ctx, taskNode))) throw e;
      ctx.memory.offlineTaskNode = taskNode;
      return { observed: onOfflineTaskNode(ctx, r, vmid, taskNode, task) };
    });
    if ('observed' in ended) return ended.observed;
    ({ endedOk, vmGone } = ended);
    if (ended.adopted) {
      adopted = ended.adopted;
      vmid = adopted.vmid;
    }
  }

  // Deleting while a replacement's old VM is still there: delete() destroys it first (replace.ts).
  if (r.metadata.deletionTimestamp && a.replacing && ctx.previous) return { obs: { exists: true, upToDate: true } };
  // The spec back on a replacement's old site once its new VM was made: that one goes (replace.ts).
  const discard = ctx.target && !observeOnly ? await discardReplacement(ctx, r, vmid) : undefined;
  if (discard) return discard;

  // spec.forProvider.site names another site: the VM moves there (a remote migration, site-move.ts).
  if (ctx.target && !observeOnly && (a.siteMove || !r.metadata.deletionTimestamp)) return observeSiteMove(ctx, r, vmid);

  // No task recorded: no create of ours in flight either (another writer of this state may have
  // seen its end), so its placeholder is not known to be ours any more (snippet-removal.ts namedByTwins).
  if (!a.task) ctx.site.ownCreateEnded(r.metadata.uid);
  // The bulk list (cached per site; our own mutations invalidate it) serves steady-state polls.
  let found = adopted ?? (vmGone ? undefined : await locate(ctx, vmid, false));
  // (Once our VM was confirmed at this VMID, the create's outcome is known: it was made.)
  if (!observeOnly) noteUnknownCreate(r, vmid);
  if (!found && !observeOnly && lateCreateMayStillApply(ctx, r)) {
    // Sent, no answer, nothing there (yet, or any more): PVE may still apply it. Wait before sending
    // it again (at the same VMID, where PVE refuses a second create) or, when deleting, before
    // letting go: a late create after the finalizer went would be a VM nobody owns.
    a.step = 'CreateOutcomeUnknown';
    ready(r, 'False', 'Creating', `the create of VM ${vmid} got no answer; waiting to see whether Proxmox applied it`);
    return { obs: { exists: true, upToDate: true, requeueAfterMs: ctx.taskPollMs } };
  }
  if (!found && !observeOnly) {
    // Not at its VMID (destroyed by hand, retired as a duplicate, a create that never happened):
    // before it is made again, the VM this installation made for the resource elsewhere, if any.
    const own = await adoptOwn(ctx, r);
    if (own) {
      vmid = own.vmid;
      found = own;
    }
  }
  if (!found && !observeOnly && !r.metadata.deletionTimestamp) {
    const elsewhere = await adoptElsewhere(ctx, r);
    if (elsewhere) return elsewhere;
  }
  if (!found) {
    delete a.vmId;
    delete a.smbiosUuid;
    a.state = 'absent';
    if (vmidChosenByUs(r)) ctx.site.reserved.set(vmid, r.metadata.uid);
    return { obs: { exists: false, upToDate: false } };
  }
  ctx.site.unreserve(r.metadata.uid, vmid);
  // Its node is offline (a crash, a power cut, a partition): nothing of the VM can be read or
  // changed until it is back, and the list's last word on it is not its state.
  if (found.entry.status === 'unknown' && (await nodeOffline(ctx, found.node))) return onOfflineNode(ctx, r, found);
  await noteNode(ctx, r, found.node, !observeOnly && !ctx.readOnly, found.entry.lock);
  // Where the spec wants it (or where it is, with no node in the spec): placed (see migrate.ts).
  if (!r.spec.forProvider.node || r.spec.forProvider.node === found.node) a.placedNode = found.node;

  // Our task's outcome, when it tells the VM's state (and, in a plan, what comes next).
  // (A plan's read-only observe neither uses nor changes what the resource's reconciles planned.)
  const plans = !observeOnly && !ctx.readOnly;
  const known = !plans ? undefined : endedOk ? knownOutcome(ctx, r, endedOk, found) : plannedWait(ctx, r, found);
  const guest = !known?.planned && guestPoll(ctx, r, found);
  const full = !known?.planned && !guest && needsFullObserve(ctx, r, found);
  if (full) {
    found.config = await ctx.client.vmConfig(found.node, vmid);
    ctx.configRead?.(found.node, vmid, found.config);
  }
  const cfg = found.config?.values;
  const lock = cfg ? cfg.lock : found.entry.lock;
  if (lock) a.lock = lock;
  else delete a.lock;

  if (observeOnly) a.vmId = vmid;
  // Ownership (invariants 1-2): see ownership.ts.
  if (!observeOnly && cfg) {
    const own = ownershipOf(r, cfg, { installation: ctx.site.installation, vmid });
    if (own.kind === 'other' || own.kind === 'foreign') return notOurs(ctx, r, found, own);
    if (own.kind === 'placeholder') return settlePlaceholder(ctx, r, found, own.lock, own);
    a.vmId = vmid;
    const uuid = smbiosUuid(cfg.smbios1);
    if (uuid) a.smbiosUuid = uuid;
    delete a.createOutcome;
    if (own.lock) return settlePlaceholder(ctx, r, found, own.lock, own);
  }

  // Status: read on a full observe unless our task just told it; a guest poll counts the uptime on.
  const status = full && !known ? await ctx.client.findVmStatus(found.node, vmid) : undefined;
  const state = known?.state ?? status?.status ?? (guest ? a.state : undefined) ?? found.entry.status ?? 'unknown';
  a.state = state;
  a.qmpStatus = status?.qmpstatus ?? state;
  if (full && cfg) {
    ctx.memory.lastFull = {
      at: ctx.site.now(),
      generation: r.metadata.generation,
      digest: found.config!.digest,
      node: found.node,
      agent: agentEnabled(cfg.agent),
      ...(found.entry.name !== undefined ? { name: found.entry.name } : {}),
      ...(found.entry.tags !== undefined ? { tags: found.entry.tags } : {}),
    };
  }
  const asked = await observeGuest(ctx, r, found, cfg, status, state, {
    guestPoll: guest || Boolean(known?.planned),
    started: known?.started === true,
  });
  // The agent says the VM is not running: what it is doing now is read in full at once.
  if (asked === 'vm-not-running') return { obs: { exists: true, upToDate: true, requeueAfterMs: 0 } };
  if (known?.started) delete a.pendingChanges;
  if (state === 'running' && full) {
    const pending = await ctx.client.vmPending(found.node, vmid).catch(() => []);
    const keys = pending.filter((p) => p.pending !== undefined || p.delete).map((p) => p.key);
    // Cloud-init values (a new userData snippet...) reach the guest when the drive is rebuilt, at boot.
    if (cfg && hasCloudInitDrive(cfg)) keys.push(...(await cloudInitPendingKeys(ctx, found.node, vmid)));
    if (keys.length) a.pendingChanges = [...new Set(keys)];
    else delete a.pendingChanges;
  }

  if (observeOnly) {
    const available = state === 'running' || state === 'stopped';
    // Observed, available and (with an agent) its addresses known: steady state, read from the bulk
    // list between drift reads like any Ready VM.
    const agent = agentEnabled(cfg?.agent);
    const settled = available && (state !== 'running' || !agent || Boolean(a.ipAddresses?.length));
    a.step = settled ? 'Ready' : 'Observing';
    ready(r, available ? 'True' : 'False', available ? 'Available' : 'Unavailable');
    return { obs: { exists: true, upToDate: true } };
  }

  if (lock) {
    const waiting = `VM ${vmid} is locked (${lock}); waiting for the lock to clear`;
    const requeueAfterMs = await reportLock(ctx, r, { vmid, node: found.node, lock: String(lock) }, 'Locked', waiting);
    return { obs: { exists: true, upToDate: true, requeueAfterMs } };
  }
  lockCleared(ctx, r, vmid);

  // Two runtimes of this installation made a VM each for this resource (two state files applied
  // at once): the lowest VMID is kept, the others go, and their resources adopt the one kept.
  const retire = await retireDuplicates(ctx, r, found, state, false);
  if (retire) return retire;
  // Its twin on another site, from a create in flight there when the state was lost (fault search
  // F51). Not at the first Ready, which may open a rollout's next phase: a stray shows later anyway.
  const stray = lookElsewhere ? await retireStrayElsewhere(ctx, r, found, state) : undefined;
  if (stray) return stray;

  // The next change our plan holds (known-outcome.ts), else drift (only with a fresh config).
  let change = known?.next;
  if (!change && cfg) {
    await desiredSnippet(ctx, r, found.node);
    const list = changes(ctx, r, found, cfg, state);
    if (plans) planAfter(ctx, r, found, list, state);
    change = list[0];
  }
  if (change) {
    a.step = STEP_OF[change.kind] ?? 'Configuring';
    ready(r, 'False', isReady(r) ? 'Unavailable' : 'Creating', change.why);
    return { obs: { exists: true, upToDate: false, ...connection(ctx, r, found) }, change };
  }
  // Changes Proxmox keeps until the next boot (cores, memory... of a running VM): reboot when the
  // spec says so, else say so in PendingReboot (the VM itself is available).
  const pending = state === 'running' ? (a.pendingChanges ?? []) : [];
  if (pending.length && r.spec.forProvider.rebootPolicy === 'IfNeeded') {
    a.step = 'Rebooting';
    const why = `rebooting VM ${vmid} to apply ${pending.join(', ')} (rebootPolicy: IfNeeded)`;
    ready(r, 'False', 'Unavailable', why);
    return { obs: { exists: true, upToDate: false, ...connection(ctx, r, found) }, change: { kind: 'reboot', why } };
  }
  pendingReboot(
    r,
    pending,
    `Proxmox holds ${pending.join(', ')} of VM ${vmid} until it reboots. Fix: reboot it, or set spec.forProvider.rebootPolicy: IfNeeded (apply --reboot-policy IfNeeded) to let the provider reboot it`,
  );
  const gate = await guestGate(ctx, r, found, state);
  if (gate)
    return {
      obs: {
        exists: true,
        upToDate: true,
        ...(gate.requeueAfterMs !== undefined ? { requeueAfterMs: gate.requeueAfterMs } : {}),
        ...connection(ctx, r, found),
      },
    };
  // Before a VM is first called Ready, once more with a fresh list and fresh markers: of two
  // runtimes racing, the one that gets here later sees the other's VM complete (see duplicatesOf).
  if (!wasReady) {
    const late = await retireDuplicates(ctx, r, found, state, true);
    if (late) return late;
  }
  // A replacement's old VM goes once the new one got here (replace.ts).
  const old = await retireReplaced(ctx, r);
  if (old?.change) return { obs: { exists: true, upToDate: false, ...connection(ctx, r, found) }, change: old.change };
  if (full && cfg) await recheckSourceLeft(ctx, r);
  a.step = 'Ready';
  ready(r, 'True', 'Available');
  return {
    obs: {
      exists: true,
      upToDate: true,
      ...(old?.waitMs !== undefined ? { requeueAfterMs: old.waitMs } : {}),
      ...connection(ctx, r, found),
    },
  };
}

function connection(ctx: StepContext, r: ProxmoxVM, found: ObservedVm): { connectionDetails: Record<string, string> } {
  const a = atProvider(r);
  return {
    connectionDetails: {
      // The Proxmox VE API of the site (what a consumer of the Secret connects to), not its name.
      endpoint: ctx.site.client.transport.endpoints[0] ?? ctx.site.client.site,
      node: found.node,
      vmid: String(found.vmid),
      ...(a.ipAddresses?.length ? { ipAddresses: a.ipAddresses.join(','), ip: a.ipAddresses[0]! } : {}),
      ...(r.spec.forProvider.cloudInit?.user ? { user: r.spec.forProvider.cloudInit.user } : {}),
    },
  };
}

/** Whether the VM has a cloud-init drive (`ide2: local-lvm:vm-100-cloudinit,media=cdrom`). */
function hasCloudInitDrive(cfg: Record<string, string>): boolean {
  return Object.entries(cfg).some(([k, v]) => /^(ide|scsi|sata)\d+$/.test(k) && /cloudinit/.test(v));
}

/** Cloud-init keys whose new value is not on the drive yet (PVE >= 7: GET .../cloudinit). */
async function cloudInitPendingKeys(ctx: StepContext, node: string, vmid: number): Promise<string[]> {
  const caps = await ctx.client.capabilities();
  if (caps.version.major < 7) return [];
  const entries = await ctx.client.cloudInitPending(node, vmid).catch(() => []);
  return entries.filter((e) => e.pending !== undefined || e.delete).map((e) => e.key);
}
