/**
 * The product's invariants (DESIGN.md 1-3), checked against the simulator's own state, never
 * against what the engine says about itself. Some hold at every moment (never two VMs for one
 * resource, other users' VMs and locks untouched); the rest hold once the faults are gone and
 * the engine has been given time to finish: exactly one VM per live resource, at its external
 * name, unlocked; zero orphans, half-created placeholders included; and every resource got there.
 */
import type { ProxmoxVM } from '../../src/api/proxmoxvm.ts';
import { externalName, getCondition } from '../../src/engine/resource.ts';
import { settled } from '../../src/local/runtime.ts';
import type { VmState } from '../../src/sim/state.ts';
import { markerUid, ownerKey, parseMarker } from '../../src/vm/spec.ts';
import { SITE_TTL_MS } from './process.ts';
import { FOREIGN_USER, type Name, type World } from './world.ts';

export class InvariantViolation extends Error {
  readonly invariant: string;
  constructor(invariant: string, details: string) {
    super(`${invariant}: ${details}`);
    this.name = 'InvariantViolation';
    this.invariant = invariant;
  }
}

function violated(invariant: string, details: string): never {
  throw new InvariantViolation(invariant, details);
}

function describeVm(vm: VmState): string {
  const c = vm.config;
  return `VM ${vm.vmid} (name=${c.name ?? '-'} lock=${c.lock ?? '-'} owner=${markerUid(c.description) ?? 'none'} status=${vm.status})`;
}

/**
 * `namespace/name` -> the VMs whose marker names that resource and was written for their own VMID
 * (a resource's identity: its uid changes when the state is lost, its VM stays the same).
 */
function vmsByIdentity(w: World): Map<string, VmState[]> {
  const out = new Map<string, VmState[]>();
  for (const c of w.sim.clusters) {
    for (const vm of c.state.vms.values()) {
      const m = parseMarker(vm.config.description);
      if (!m || (m.vmid !== undefined && m.vmid !== vm.vmid)) continue;
      const id = ownerKey(m);
      out.set(id, [...(out.get(id) ?? []), vm]);
    }
  }
  return out;
}

/** Resource uid -> the VMs whose description carries its ownership marker. */
function markedVms(w: World): Map<string, VmState[]> {
  const out = new Map<string, VmState[]>();
  for (const c of w.sim.clusters) {
    for (const vm of c.state.vms.values()) {
      const uid = markerUid(vm.config.description);
      if (!uid) continue;
      out.set(uid, [...(out.get(uid) ?? []), vm]);
    }
  }
  return out;
}

function changedKeys(a: Record<string, string>, b: Record<string, string>): string[] {
  return [...new Set([...Object.keys(a), ...Object.keys(b)])].filter((k) => a[k] !== b[k]).sort();
}

/** What must hold after every single command, faults or not. */
export function checkAlways(w: World): void {
  for (const [uid, vms] of markedVms(w)) {
    if (vms.length > 1) {
      violated('two VMs for one resource', `uid ${uid} is carried by ${vms.map(describeVm).join(' and ')}`);
    }
  }
  // A config never names a snippet that is not there (it would not start: "can't find file").
  for (const c of w.sim.clusters)
    for (const vm of c.state.vms.values()) {
      const volid = /(?:^|,)user=([^,]+)/.exec(vm.config.cicustom ?? '')?.[1];
      if (!volid) continue;
      const storage = c.state.nodes.get(vm.node)?.storages.get(volid.split(':')[0]!);
      if (![...(storage?.volumes.values() ?? [])].some((v) => v.volid === volid))
        violated('snippet missing', `${describeVm(vm)} names ${volid}, which is not on node ${vm.node}`);
    }
  for (const f of w.foreignBaselines()) {
    const vm = w.site.state.vms.get(f.vmid);
    if (!vm) violated('foreign VM deleted', `VM ${f.vmid} of ${FOREIGN_USER} (or the template) is gone`);
    const digest = w.site.state.digest(vm);
    if (digest !== f.digest) {
      violated(
        'foreign VM modified',
        `${describeVm(vm)}: config keys changed: ${changedKeys(f.config, { ...vm.config, ...vm.pending }).join(', ')}`,
      );
    }
    if (vm.status !== f.status) violated('foreign VM modified', `${describeVm(vm)} was ${f.status}`);
  }
  // Another user's operation (a backup) holds a lock on one of our VMs: it must outlive our reconciles.
  for (const f of w.site.faults.active.values()) {
    const s = f.spec;
    if (s.kind !== 'lock' || !s.lock) continue;
    const vm = w.site.state.vms.get(s.vmid);
    if (!vm) violated('VM destroyed under a foreign lock', `VM ${s.vmid} was destroyed while ${s.lock} held it`);
    if (vm.config.lock !== s.lock) {
      violated('foreign lock cleared', `the ${s.lock} lock on VM ${s.vmid} was replaced by '${vm.config.lock ?? ''}'`);
    }
  }
}

function unsettledLine(r: ProxmoxVM): string {
  const sy = getCondition(r, 'Synced');
  const rd = getCondition(r, 'Ready');
  return `${r.metadata.name}${r.metadata.deletionTimestamp ? ' (deleting)' : ''}: ext=${externalName(r) ?? '-'} step=${r.status?.atProvider?.step ?? '-'} Ready=${rd?.reason ?? '-'} Synced=${sy?.reason ?? '-'} ${(sy?.message ?? rd?.message ?? '').slice(0, 240)}`;
}

function roundLine(r: ProxmoxVM): string {
  const sy = getCondition(r, 'Synced');
  return `${r.metadata.name}${r.metadata.deletionTimestamp ? ' (deleting)' : ''} ext=${externalName(r) ?? '-'} step=${r.status?.atProvider?.step ?? '-'} synced=${sy?.reason ?? '-'}${sy?.status === 'False' ? ` "${(sy.message ?? '').slice(0, 100)}"` : ''}`;
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
    // Every resource is reconciled at least once after the faults ended: a status written
    // before that proves nothing.
    for (const r of w.store.listSync()) await w.reconcile(r.metadata.name as Name, 0, undefined, true);
    for (const r of w.otherStore?.listSync() ?? []) await w.reconcile(r.metadata.name as Name, 2, undefined, true);
    rounds++;
    // One line per round (identical rounds collapse into one with a count).
    w.log(`  settle: ${w.store.listSync().map(roundLine).join('; ') || 'no resources'}`);
    if (w.otherStore) w.log(`  settle (other state): ${w.otherStore.listSync().map(roundLine).join('; ') || 'none'}`);
    await w.quiesce();
    checkAlways(w);
    const all = [...w.store.listSync(), ...(w.otherStore?.listSync() ?? [])];
    if (all.every((r) => !r.metadata.deletionTimestamp && settled(r))) {
      // Settled on what the bulk list showed; a VM that appeared since (a create that was in
      // flight when the state was lost) shows at the next poll. Converged only if it still holds
      // one more round after the list's cache has expired, as it must a poll interval later.
      if (confirmed) return { converged: true, rounds, unsettled: [] };
      confirmed = true;
      w.clock.tick(SITE_TTL_MS + 1000);
      continue;
    }
    confirmed = false;
    // The guest agent answers a while after a start (simulated time, scaled): give it a moment.
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
  const unsettled = [...w.store.listSync(), ...(w.otherStore?.listSync() ?? [])]
    .filter((r) => r.metadata.deletionTimestamp || !settled(r))
    .map(unsettledLine);
  return { converged: unsettled.length === 0, rounds, unsettled };
}

/**
 * Once settled: one VM per live resource at its external name, no orphan, no placeholder, no lock.
 * Resources are told apart by namespace/name: after a lost state they have new uids, and the VM
 * they adopted keeps the marker (and uid) it was made with.
 */
export function checkFinal(w: World, s: SettleResult): void {
  checkAlways(w);
  const live = new Map(w.store.listSync().map((r) => [ownerKey(r.metadata), r]));
  // The other state file's resources are the same resources: they must hold the same VM.
  const others = w.otherStore?.listSync() ?? [];
  for (const r of others) if (!live.has(ownerKey(r.metadata))) live.set(ownerKey(r.metadata), r);
  const marked = vmsByIdentity(w);
  for (const [id, vms] of marked) {
    if (live.has(id)) continue;
    // One case is beyond any runtime: the state was lost while a create was in flight (its
    // placeholder names nobody yet), and the resource was deleted before the create wrote its
    // marker. That VM must be left where gc finds it: this installation's marker, and a uid only the
    // lost state knew.
    const leftToGc = vms.every((vm) => {
      const m = parseMarker(vm.config.description);
      return m !== undefined && w.lostUids.has(m.uid) && m.installation === w.installation && !vm.config.lock;
    });
    if (leftToGc) {
      w.log(`  ${vms.map(describeVm).join(', ')}: made by a create in flight when the state was lost; left to gc`);
      continue;
    }
    violated('orphan VM', `${vms.map(describeVm).join(', ')} carries the marker of ${id}, which is gone`);
  }
  for (const vm of w.site.state.vms.values()) {
    const lock = vm.config.lock;
    if (markerUid(vm.config.description) || (lock !== 'create' && lock !== 'clone')) continue;
    // The other user never clones; a create placeholder is ours unless its qmcreate task was theirs.
    const creator = lock === 'clone' ? 'the provider' : (w.creatorOf(vm.vmid) ?? 'unknown');
    if (creator === FOREIGN_USER) continue;
    // A dead create's placeholder names nobody; once the state that held its VMID is lost, no
    // runtime can tell it is ours (F9). gc lists it for the operator; nothing may delete it.
    if (w.lostVmids.has(vm.vmid) && ![...live.values()].some((r) => externalName(r) === String(vm.vmid))) {
      w.log(`  ${describeVm(vm)}: a dead placeholder at a VMID only a lost state held; left to the operator`);
      continue;
    }
    violated('orphan placeholder', `${describeVm(vm)}: a half-created VM left behind (created by ${creator})`);
  }
  // A disk is an orphan too: every VM disk (or cloud-init drive) on a storage belongs to a VM that
  // exists. PVE frees them with the VM (`destroy-unreferenced-disks`) or when a create fails.
  const seenVolumes = new Set<string>();
  for (const n of w.site.state.nodes.values()) {
    for (const st of n.storages.values()) {
      for (const v of st.volumes.values()) {
        if (v.vmid === undefined || w.site.state.vms.has(v.vmid) || seenVolumes.has(v.volid)) continue;
        seenVolumes.add(v.volid);
        violated('orphan disk', `${v.volid} (${v.content}) belongs to VM ${v.vmid}, which does not exist`);
      }
    }
  }
  if (!s.converged) {
    violated('did not converge', `after ${s.rounds} settle rounds: ${s.unsettled.join(' | ')}`);
  }
  for (const [id, r] of live) {
    const vms = marked.get(id) ?? [];
    const ext = externalName(r);
    if (vms.length !== 1)
      violated('exactly one VM per resource', `${r.metadata.name} has ${vms.length} VMs (ext=${ext ?? '-'})`);
    const vm = vms[0]!;
    if (String(vm.vmid) !== ext)
      violated('VM at the external name', `${r.metadata.name}: ext=${ext ?? '-'} but ${describeVm(vm)}`);
    if (vm.config.lock) violated('lock left behind', `${r.metadata.name}: ${describeVm(vm)}`);
  }
  for (const r of others) {
    const vm = marked.get(ownerKey(r.metadata))?.[0];
    if (vm && String(vm.vmid) !== externalName(r))
      violated(
        'VM at the external name',
        `${r.metadata.name} (other state): ext=${externalName(r) ?? '-'} but ${describeVm(vm)}`,
      );
  }
}
