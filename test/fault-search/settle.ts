/**
 * The settle: once a schedule's commands have run, the faults are cleared, the second writer
 * stopped and the provider restarted; then every resource is reconciled, round after round, with
 * the operator carrying out the reports a person would act on (operator.ts), until a round changes
 * nothing in PVE, every resource is settled (Ready and Synced, or refused as designed), and the
 * creation grace has passed. What it ends with is judged by invariants.ts checkFinal.
 */
import type { ProxmoxVM } from '../../src/api/proxmoxvm.ts';
import { CREATION_GRACE_MS } from '../../src/engine/reconciler.ts';
import { externalName, getCondition } from '../../src/engine/resource.ts';
import { settled } from '../../src/local/resource-view.ts';
import { markerUid } from '../../src/vm/spec.ts';
import { checkAlways, refusedAsDesigned } from './invariants.ts';
import {
  operatorDestroysDiskless,
  operatorDestroysPlaceholders,
  operatorRescans,
  operatorUnlocks,
  operatorUnprotects,
} from './operator.ts';
import { SITE_TTL_MS } from './process.ts';
import type { Name, World } from './world.ts';

function unsettledLine(w: World, r: ProxmoxVM): string {
  const sy = getCondition(r, 'Synced');
  const rd = getCondition(r, 'Ready');
  return `${r.metadata.name}${r.metadata.deletionTimestamp ? ' (deleting)' : ''}: ext=${externalName(r) ?? '-'} step=${r.status?.atProvider?.step ?? '-'} Ready=${rd?.reason ?? '-'} Synced=${sy?.reason ?? '-'} ${(sy?.message ?? rd?.message ?? '').slice(0, 240)}${guestLine(w, r)}`;
}

/** What PVE holds of an unsettled resource's VM that its guest's answers depend on (for a stuck wait). */
function guestLine(w: World, r: ProxmoxVM): string {
  const ext = externalName(r);
  const site = w.siteOf(r);
  const c = w.cluster(site);
  const vm = ext === undefined ? undefined : c.state.vms.get(Number(ext));
  if (!vm) return '';
  const now = c.state.clock.now();
  return ` [PVE ${site}/${vm.vmid}: ${vm.status}, agent=${vm.config.agent ?? '-'} pending=${Object.keys(vm.pending).join(',') || '-'} guestAgent=${vm.guestAgent} agentReadyIn=${vm.agentReadyAt - now}ms lock=${vm.config.lock ?? '-'} marker=${markerUid(vm.config.description) ?? '-'}]`;
}

function roundLine(r: ProxmoxVM): string {
  const sy = getCondition(r, 'Synced');
  return `${r.metadata.name}${r.metadata.deletionTimestamp ? ' (deleting)' : ''} ext=${externalName(r) ?? '-'} step=${r.status?.atProvider?.step ?? '-'} synced=${sy?.reason ?? '-'}${sy?.status === 'False' ? ` "${(sy.message ?? '').slice(0, Number(process.env.FAULT_SEARCH_ROUND_CHARS ?? 100))}"` : ''}`;
}

/** What PVE holds, for telling whether a settle round changed anything: every VM, and the tasks started. */
function pveState(w: World): string {
  return w.sim.clusters
    .map((c) => {
      const vms = [...c.state.vms.values()].map((v) => `${v.vmid}@${v.node}:${v.status}:${v.config.lock ?? ''}`);
      return `${c.name}[${vms.join(',')}] tasks=${c.state.tasks.size}`;
    })
    .join(' ');
}

export interface SettleResult {
  converged: boolean;
  rounds: number;
  unsettled: string[];
}

/**
 * The faults end (outages over, stalled tasks released, backups done), the second writer is
 * gone, and process 0 reconciles every resource round by round until each is Ready or gone.
 * Bounded by rounds and by the engine's simulated time; never by a sleep that decides anything.
 */
export async function settle(w: World, maxRounds = 250, maxEngineMs = 6 * 3600_000): Promise<SettleResult> {
  checkAlways(w);
  for (const c of w.sim.clusters) c.clearFaults();
  w.faultIds.length = 0;
  await w.restart(1);
  w.log('settle: faults cleared, second writer stopped');
  const start = w.clock.elapsedMs;
  let rounds = 0;
  let confirmed = false;
  while (rounds < maxRounds && w.clock.elapsedMs - start < maxEngineMs) {
    const pveBefore = pveState(w);
    // Every resource is reconciled at least once after the faults ended: a status written
    // before that proves nothing.
    for (const r of w.store.listSync()) await w.reconcile(r.metadata.name as Name, 0, undefined, true);
    for (const r of w.otherStore?.listSync() ?? []) await w.reconcile(r.metadata.name as Name, 2, undefined, true);
    operatorUnlocks(w);
    operatorDestroysPlaceholders(w);
    operatorRescans(w);
    operatorDestroysDiskless(w);
    operatorUnprotects(w);
    rounds++;
    // One line per round (identical rounds collapse into one with a count).
    // Both state files' resources on one line: identical rounds collapse, and a failure's journal
    // (its last lines) still shows the schedule that led there.
    const other = w.otherStore && `; other state: ${w.otherStore.listSync().map(roundLine).join('; ') || 'none'}`;
    w.log(`  settle: ${w.store.listSync().map(roundLine).join('; ') || 'no resources'}${other ?? ''}`);
    await w.quiesce();
    checkAlways(w);
    const all = [...w.store.listSync(), ...(w.otherStore?.listSync() ?? [])];
    if (all.every((r) => (!r.metadata.deletionTimestamp && settled(r)) || refusedAsDesigned(w, r))) {
      // Settled on what the bulk list showed; a VM that appeared since (a create that was in
      // flight when the state was lost) shows at the next poll. Converged only if it still holds
      // one more round after the list's cache has expired, as it must a poll interval later.
      // And after the creation grace: within it the reconciler takes a VM not found for a list
      // that lags, and leaves the status as it was (Ready, for a VM another user destroyed moments
      // after it was made: F52).
      // And only if that round changed nothing in PVE: one runtime may act in it on a VM another
      // runtime's resource holds (the twin rule retires one of two state files' VMs), whose status
      // says what it saw before; it sees the change at its next reconcile (fault search F70).
      if (confirmed && pveState(w) === pveBefore) return { converged: true, rounds, unsettled: [] };
      confirmed = true;
      w.clock.tick(Math.max(SITE_TTL_MS, CREATION_GRACE_MS) + 1000);
      // What PVE is still doing ends before the confirmation round looks, as it would within
      // that interval.
      await w.quiesce();
      continue;
    }
    confirmed = false;
    // The guest agent answers a while after a start (simulated time, scaled): give it a moment.
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
  const unsettled = [...w.store.listSync(), ...(w.otherStore?.listSync() ?? [])]
    .filter((r) => (r.metadata.deletionTimestamp || !settled(r)) && !refusedAsDesigned(w, r))
    .map((r) => unsettledLine(w, r));
  return { converged: unsettled.length === 0, rounds, unsettled };
}
