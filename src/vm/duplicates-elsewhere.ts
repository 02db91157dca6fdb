/**
 * A VM of this resource on another site of the ProviderConfig, made by this installation for a
 * uid that no resource of this runtime holds: the state was lost while a create was still in
 * flight on a site the manifest has left since, and that create ended after the new resource had
 * made its VM where the manifest says (fault search F51). Until then PVE showed only a `lock:
 * create` placeholder there, which carries no marker, so nothing could tell it was this
 * resource's; no site's own duplicate check (duplicates.ts) sees two VMs on two sites.
 *
 * Looked for at a Ready resource's polls (not its first Ready: that is a phase gate of a rollout,
 * and a stray shows only later), in the other sites' bulk lists as the site caches them, read
 * again when older than a minute; a marker is read only for a VM listed under this
 * resource's name. Which VM stays follows from what Proxmox shows alone, as duplicates.ts's rule
 * does (keepsStray): the one that may hold data the other cannot.
 */
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { getCondition, setCondition } from '../engine/resource.ts';
import type { ExternalObservation } from '../engine/types.ts';
import type { ClusterResource } from '../proxmox/types.ts';
import { atProvider, ready } from './conditions.ts';
import type { StepContext } from './context.ts';
import type { Change } from './drift.ts';
import { classify, type MarkedVm, mayBeMarked } from './inventory.ts';
import { listIndex } from './list-index.ts';
import { isOwnVm, type ObservedVm } from './lookup.ts';
import { protectedNow, protectedVm, unprotect } from './ownership.ts';
import type { SiteContext } from './site-cache.ts';
import { vmName } from './spec.ts';

/**
 * How long a site's cached bulk list serves this look: a minute (the default poll interval, not
 * scaled with it). A site that none of this process's resources polls is then read once a minute,
 * not once per TTL; a site its own resources poll is read at their pace anyway. (Scaled with the
 * drift interval, a phased rollout at speed 100 read the lists of the sites idle between phases
 * every 3 s of real time: 0.27 lists more per VM.)
 */
const LIST_MAX_AGE_MS = 60_000;

/** A VM of this resource's identity on another site, and that site. */
interface Stray {
  site: SiteContext;
  vm: MarkedVm;
}

/**
 * This resource's VM `found` is Ready on its site (or being retired for a twin elsewhere, or about
 * to move to another site: `moving`, where a twin elsewhere is settled first): which
 * of it and its strays on other sites stays (see keepsStray). A stray that goes is sent its
 * retirement and not followed (its tasks are on another site than the resource's): a stop, then
 * at a later poll the destroy, each read again from PVE first. When a stray stays, this
 * resource's own VM is the duplicate: the change that retires it (the resource then adopts the
 * stray, which moves where the spec says).
 */
export async function retireStrayElsewhere(
  ctx: StepContext,
  r: ProxmoxVM,
  found: ObservedVm,
  state: string,
  moving = false,
): Promise<{ obs: ExternalObservation; change?: Change } | undefined> {
  const a = atProvider(r);
  if (!ctx.elsewhere || a.siteMove || a.replacing || r.metadata.deletionTimestamp) return undefined;
  const listed = await straysOf(ctx, r);
  const [self] = listed.length ? await ctx.site.markedVms([found.entry], ctx.signal) : [];
  // The same VM on two sites is no twin: a remote migration's source and target carry one marker
  // and one creation time (the config is copied), while the migration runs and after it left its
  // source behind (source-left.ts). Taken for twins, the tie-break (the site named first) had the
  // target destroyed under the migration, which then removed its source: no VM left (fault search F69).
  const strays = listed.filter((s) => !sameVm(self, s.vm));
  if (!strays.length) {
    if (getCondition(r, DUPLICATE)?.status === 'True')
      duplicateCondition(r, 'False', 'DuplicateRetired', 'no VM of this resource is left on another site');
    return undefined;
  }
  const own: Candidate = { running: state === 'running', ctime: self?.ctime, vmid: found.vmid, site: ctx.site.name };
  const kept = strays.find((s) => keepsStray(own, candidate(s)) === true);
  if (kept) {
    const why = `VM ${found.vmid} duplicates VM ${kept.vm.vmid} of site ${kept.site.name}, made for this resource too by a create whose state was lost, and ${lesser(candidate(kept), own)}: VM ${kept.vm.vmid} is kept and moves here, VM ${found.vmid} is ${own.running ? 'stopped, then ' : ''}destroyed`;
    a.step = 'RetiringDuplicate';
    ready(r, 'False', 'Unavailable', why);
    return {
      obs: { exists: true, upToDate: false },
      change: { kind: 'retire-duplicate', why, node: found.node, vmid: found.vmid, running: own.running },
    };
  }
  const going = strays.filter((s) => keepsStray(own, candidate(s)) === false);
  if (!going.length) return undefined;
  // A twin an operator protected is left as it is and said to be (ownership.ts isProtected): stopped
  // first, it would be left stopped by a destroy PVE refuses, at every poll.
  const why = going
    .map((s) => {
      const what = `VM ${s.vm.vmid} on node ${s.vm.node} of site ${s.site.name}`;
      const twin = `made for this resource too by a create whose state was lost, duplicates VM ${found.vmid} and ${lesser(own, candidate(s))}`;
      return s.vm.protected
        ? `${protectedVm(what)}; it ${twin}. Fix: if it is to go, ${unprotect(s.vm.vmid, s.vm.node, s.site.name)}`
        : `${what}, ${twin}: ${s.vm.status === 'running' ? 'stopped, then destroyed at a later poll' : 'destroyed'}`;
    })
    .join('; ');
  // A plan shows the first twin's retirement (the why names them all) and sends nothing.
  // (A protected twin is not said to go: apply leaves it.)
  const shown = going.find((s) => !s.vm.protected);
  if (ctx.readOnly && !shown) return undefined;
  if (ctx.readOnly && shown) {
    const s = shown;
    return {
      obs: { exists: true, upToDate: false },
      change: {
        kind: 'retire-duplicate',
        why,
        node: s.vm.node,
        vmid: s.vm.vmid,
        running: s.vm.status === 'running',
        site: s.site.name,
      },
    };
  }
  // (A protected twin's config is read again at the next poll: the marker cache would keep its protection.)
  for (const s of going)
    if (s.vm.protected) s.site.forgetMarked(s.vm.vmid);
    else await retire(ctx, s);
  duplicateCondition(r, 'True', going.some((s) => s.vm.protected) ? 'VMProtected' : 'RetiringDuplicate', why);
  if (!moving) return undefined;
  // Before a move to another site, the move waits until they are gone: one at the VMID the VM
  // carries would refuse it (fault search F59).
  a.step = 'RetiringDuplicate';
  ready(r, 'False', 'Unavailable', `${why}; the move to site ${ctx.target?.name ?? '?'} waits for that`);
  return { obs: { exists: true, upToDate: true, requeueAfterMs: ctx.taskPollMs } };
}

/** The condition that says a twin on another site is being retired (and, once gone, that it was). */
const DUPLICATE = 'DuplicateElsewhere';

function duplicateCondition(r: ProxmoxVM, status: 'True' | 'False', reasonText: string, message: string): void {
  setCondition(
    r,
    { type: DUPLICATE, status, reason: reasonText, message, observedGeneration: r.metadata.generation },
    Date.now(),
  );
}

/**
 * Whether the stray stays and this resource's VM goes: the one that runs, when only one does (a
 * VM made by a create whose resource was lost was never started by anyone; one that booted may
 * hold its guest's data); else the older (the config's `meta` ctime, written by the create's
 * worker); else the lower VMID, then the site first by name. Every runtime that holds one of them
 * reads the same facts and keeps the same VM (two runtimes keeping their own would destroy both).
 * Undefined when neither is known to be the later (a config from before PVE wrote a ctime):
 * nothing goes.
 */
function keepsStray(own: Candidate, stray: Candidate): boolean | undefined {
  if (stray.running !== own.running) return stray.running;
  if (own.ctime === undefined || stray.ctime === undefined) return undefined;
  if (stray.ctime !== own.ctime) return stray.ctime < own.ctime;
  if (stray.vmid !== own.vmid) return stray.vmid < own.vmid;
  return stray.site < own.site;
}

/** Why `goes` is the one that goes (keepsStray's order), for a condition's message. */
function lesser(stays: Candidate, goes: Candidate): string {
  if (stays.running !== goes.running) return 'does not run where the other does';
  if (stays.ctime !== goes.ctime) return 'was made later';
  return stays.vmid !== goes.vmid ? 'has the higher VMID' : 'is on the site named later';
}

/** One VM seen on two sites (a remote migration's source and target): the same marker and creation time. */
function sameVm(self: MarkedVm | undefined, other: MarkedVm): boolean {
  return (
    self?.marker !== undefined &&
    other.marker?.uid === self.marker.uid &&
    self.ctime !== undefined &&
    other.ctime === self.ctime
  );
}

/** What keepsStray compares of a VM. */
interface Candidate {
  running: boolean;
  ctime: number | undefined;
  vmid: number;
  site: string;
}

function candidate(s: Stray): Candidate {
  return { running: s.vm.status === 'running', ctime: s.vm.ctime, vmid: s.vm.vmid, site: s.site.name };
}

/** This resource's VMs on the other sites that no resource of this runtime holds (see above). */
async function straysOf(ctx: StepContext, r: ProxmoxVM): Promise<Stray[]> {
  const name = vmName(r);
  const left = atProvider(r).sourceLeft;
  const out: Stray[] = [];
  for (const site of (await ctx.elsewhere?.()) ?? []) {
    let named: ClusterResource[] | undefined;
    try {
      named = listIndex(await site.recentResources(LIST_MAX_AGE_MS, ctx.signal)).byName.get(name);
    } catch (e) {
      // A site that cannot be read now is looked at again at the next poll.
      if (ctx.signal?.aborted) throw e;
      continue;
    }
    if (!named) continue;
    const held = ctx.options.vmidHolders?.(site.name);
    const candidates = named.filter(
      (e) =>
        mayBeMarked(e, name) &&
        e.template !== 1 &&
        !e.lock &&
        held?.get(Number(e.vmid)) === undefined &&
        !(left?.site === site.name && left.vmid === Number(e.vmid)),
    );
    if (!candidates.length) continue;
    const installation = site.installation;
    for (const vm of await site.markedVms(candidates, ctx.signal)) {
      if (classify(vm, installation) !== 'ours' || !isOwnVm(vm, r, installation)) continue;
      if (vm.marker?.uid === r.metadata.uid || vm.lock || vm.template || vm.templateBuild) continue;
      out.push({ site, vm });
    }
  }
  return out.sort((x, y) => (x.vm.ctime ?? 0) - (y.vm.ctime ?? 0) || x.vm.vmid - y.vm.vmid);
}

/** One step of a stray's retirement: a hard stop while it runs, else its destroy with its disks. */
async function retire(ctx: StepContext, s: Stray): Promise<void> {
  const client = s.site.client.withSignal(ctx.signal);
  const { vmid, node } = s.vm;
  try {
    // Read again right before: the marker read may be 30 s old (site-cache.ts MARKER_TTL_MS), and
    // a protection set since would have it stopped for a destroy PVE refuses. Left for the next
    // poll, which reads its config afresh (finally) and reports it.
    if (await protectedNow(client, node, vmid)) return;
    if (s.vm.status === 'running') await client.stopVm(node, vmid);
    else await client.deleteVm(node, vmid, { purge: true, destroyUnreferencedDisks: true });
  } catch (e) {
    // Refused (locked by now, gone, the site down): the resource's own VM is fine; the stray is
    // read again at the next poll.
    if (ctx.signal?.aborted) throw e;
  } finally {
    s.site.forgetMarked(vmid);
    s.site.invalidate();
  }
}
