/**
 * When observe reads what: a Ready VM from the bulk list alone until something the list shows
 * differs (its generation, state, lock, node, name, tags, or memory, CPUs and disk size against the
 * spec) or its periodic drift read is due, spread over the drift interval by its uid; a booting
 * guest through its agent alone (guestPoll). Everything else is read in full.
 */
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { policyAllows } from '../engine/resource.ts';
import { isReady } from './conditions.ts';
import type { StepContext } from './context.ts';
import type { ObservedVm } from './lookup.ts';
import { diskBytes, memoryBytes, vcpus } from './spec.ts';

/** The drift interval when the options name none: a Ready VM's config is read this often. */
const DRIFT_INTERVAL_MS = 300_000;

/**
 * A poll of a booting guest (waiting for its agent or cloud-init): the agent only, not the VM's
 * config, status, pending changes and cloud-init drive, which the full observe of this generation
 * read less than a drift interval ago (as for a Ready VM), on a VM last seen running that the bulk
 * list shows on the same node and unlocked. Its uptime counts on from the last one known, and an
 * agent that says the VM is not running sends it to a full observe (guest.ts). guest-timing.ts
 * asks often while a guest is expected to answer soon.
 */
export function guestPoll(ctx: StepContext, r: ProxmoxVM, found: ObservedVm): boolean {
  const last = ctx.memory.lastFull;
  const step = r.status?.atProvider?.step;
  if (!last || last.agent === undefined || (step !== 'WaitingForAgent' && step !== 'WaitingForCloudInit')) return false;
  if (last.generation !== r.metadata.generation || last.node !== found.node) return false;
  // (The VM's state as last read or known: the bulk list's lags a start by up to a status cycle of
  // PVE, pvestatd's; a stopped VM shows in the agent's answer.)
  if (found.entry.lock || r.status?.atProvider?.state !== 'running') return false;
  // Another VM at our VMID (ours destroyed by someone else) is read in full, not asked about (F58).
  if (!listShowsSameVm(last, found.entry)) return false;
  return ctx.site.now() - last.at < (ctx.options.driftIntervalMs ?? DRIFT_INTERVAL_MS);
}

/**
 * Whether the bulk list's entry at our VMID still shows the VM that the full read `last` saw: the
 * same tags (the list takes them from the live config, pve-manager `PVE/API2/Cluster.pm`; ours
 * carry the owner tag) and the same name, unless either name is pvestatd's stand-in for a VM it
 * has not ticked over yet (`VM <vmid>`: the name is from the RRD, `PVE/API2Tools.pm`
 * extract_vm_stats). A VM made at our VMID since ours was destroyed by someone else shows other
 * tags or none: what was learned of ours (a plan's next change, a guest being polled) is not its.
 */
export function listShowsSameVm(last: { name?: string; tags?: string }, entry: ObservedVm['entry']): boolean {
  if ((entry.tags ?? '') !== (last.tags ?? '')) return false;
  const standIn = (name: string | undefined) => name === undefined || /^VM \d+$/.test(name);
  return standIn(entry.name) || standIn(last.name) || entry.name === last.name;
}

export function needsFullObserve(ctx: StepContext, r: ProxmoxVM, found: ObservedVm): boolean {
  const last = ctx.memory.lastFull;
  if (!last) return true;
  if (last.generation !== r.metadata.generation) return true;
  if (!isReady(r)) return true;
  if (r.status?.atProvider?.step !== 'Ready') return true;
  const e = found.entry;
  if (e.lock) return true;
  if ((e.status ?? '') !== (r.status?.atProvider?.state ?? '')) return true;
  // Migrated by someone else (HA, a person): followed, and compared with the spec's node.
  if (found.node !== last.node) return true;
  // Renamed or re-tagged (by hand), or another VM at our VMID: the bulk list shows it at once.
  if (!listShowsSameVm(last, e)) return true;
  // Memory, CPUs and the boot disk changed by hand: the bulk list carries them too.
  if (bulkDrift(r, e)) return true;
  return driftDue(r.metadata.uid, last.at, ctx.site.now(), ctx.options.driftIntervalMs ?? DRIFT_INTERVAL_MS);
}

/** What /cluster/resources shows of a VM that differs from the spec (maxmem, maxcpu, maxdisk). */
function bulkDrift(r: ProxmoxVM, e: ObservedVm['entry']): boolean {
  // Observe-only: nothing is put back, so nothing is worth an early read.
  if (!policyAllows(r.spec.managementPolicies, 'Update')) return false;
  const fp = r.spec.forProvider;
  const mem = memoryBytes(fp);
  // A running VM shows its running memory and CPUs: a pending change shows up after the reboot.
  if (e.status !== 'running') {
    if (mem !== undefined && e.maxmem !== undefined && e.maxmem !== mem) return true;
    if (fp.cpu !== undefined && e.maxcpu !== undefined && e.maxcpu !== vcpus(fp)) return true;
  }
  const disk = diskBytes(fp);
  return disk !== undefined && e.maxdisk !== undefined && e.maxdisk > 0 && e.maxdisk < disk;
}

/**
 * A full read made for another reason (a change, `apply`'s plan) this share of a drift interval or
 * less before the resource's moment in the interval stands for that moment's read: the next one
 * comes at its moment in the next interval. Without it, the plan of a second `apply` read a VM
 * whose moment fell between that read and the reconcile a second later, and its reconcile read it
 * in full again (31 reads for 30 VMs, about one run in ten under load; 31-33 in four runs of four
 * with a 1.5 s interval). Two full reads are then at most 1.25 drift intervals apart.
 */
const DRIFT_READ_STANDS = 0.25;

/**
 * The periodic full read (config, status, pending: what only the config holds) comes once per
 * drift interval, at a moment of its own in the interval (from the resource's uid): VMs that
 * became Ready together are read at moments spread over the interval, never in one burst. A read
 * shortly before that moment stands for it (DRIFT_READ_STANDS).
 */
export function driftDue(uid: string, lastAt: number, now: number, intervalMs: number): boolean {
  if (intervalMs <= 0) return true;
  let h = 0x811c9dc5;
  for (let i = 0; i < uid.length; i++) h = Math.imul(h ^ uid.charCodeAt(i), 0x01000193) >>> 0;
  const phase = h % intervalMs;
  const interval = (t: number) => Math.floor((t - phase) / intervalMs);
  return interval(now) > interval(lastAt + intervalMs * DRIFT_READ_STANDS);
}
