/**
 * The product's invariants (DESIGN.md 1-3), checked against the simulator's own state on both
 * clusters, never against what the engine says about itself. Some hold at every moment (never two
 * VMs for one resource but while a remote migration copies it, other users' VMs and locks
 * untouched, a resource's data never destroyed unless it was deleted); the rest hold once the
 * faults are gone and the engine has been given time to finish: exactly one VM per live resource
 * across both sites, on its site, at its external name, unlocked; zero orphans on either site,
 * half-created placeholders and a migration's leftovers included; and every resource got there.
 */
import type { ProxmoxVM } from '../../src/api/proxmoxvm.ts';
import { externalName, getCondition, keyOf } from '../../src/engine/resource.ts';
import type { SimCluster } from '../../src/sim/index.ts';
import { DRIVE_KEY_RE, isCdrom, isCloudinit, parseDrive } from '../../src/sim/qemu-config.ts';
import type { VmState } from '../../src/sim/state.ts';
import { heldVmids } from '../../src/vm/connector.ts';
import { markerUid, ownerKey, parseMarker } from '../../src/vm/spec.ts';
import { creatorOf, foreignBaselines } from './foreign.ts';
import { diskSizeReports, lockReports, missingDiskReports, placeholderReports, protectionReports } from './operator.ts';
import type { SettleResult } from './settle.ts';
import { violated } from './violation.ts';
import { FOREIGN_USER, type Name, type SiteName, type World } from './world.ts';

export { InvariantViolation } from './violation.ts';

/** A VM and the cluster it is on. */
interface Placed {
  site: SiteName;
  c: SimCluster;
  vm: VmState;
}

function describeVm(p: Placed): string {
  const c = p.vm.config;
  return `VM ${p.site}/${p.vm.vmid} (name=${c.name ?? '-'} lock=${c.lock ?? '-'} owner=${markerUid(c.description) ?? 'none'} status=${p.vm.status})`;
}

function* allVms(w: World): Generator<Placed> {
  for (const c of w.sim.clusters) for (const vm of c.state.vms.values()) yield { site: c.name as SiteName, c, vm };
}

/**
 * Another user migrated this VM inside its site (the fourth search's `migrate` act: HA, a person)
 * and no reconcile of its resource has seen it on its new node yet (its status names another):
 * PVE migrates disks, not the snippet `cicustom` names, which follows the VM only once the
 * provider sees it there. Our own migrations are not excused: they write it first.
 */
function movedByAnotherUnseen(w: World, p: Placed): boolean {
  const migrations = [...p.c.state.tasks.values()].filter((t) => t.type === 'qmigrate' && t.id === String(p.vm.vmid));
  if (migrations.at(-1)?.user !== FOREIGN_USER) return false;
  const uid = markerUid(p.vm.config.description);
  const stores = [w.store, w.otherStore].filter((s) => s !== undefined);
  return !stores.some((s) =>
    s.listSync().some((r) => r.metadata.uid === uid && r.status?.atProvider?.node === p.vm.node),
  );
}

/** A task of `type` for `vmid` runs on the cluster. */
function taskRuns(c: SimCluster, type: string, vmid: number): boolean {
  return [...c.state.tasks.values()].some((t) => t.type === type && t.id === String(vmid) && t.status === 'running');
}

/**
 * A remote migration made this VM (a `qmtunnel` task on its cluster for its VMID): its config is
 * the source's, so its marker names the source's VMID until drift rewrites it.
 */
function tunnelled(c: SimCluster, vmid: number): boolean {
  return [...c.state.tasks.values()].some((t) => t.type === 'qmtunnel' && t.id === String(vmid));
}

/**
 * `namespace/name` -> the VMs whose marker names that resource and was written for their own VMID,
 * or that a remote migration brought with the source's marker (a resource's identity: its uid
 * changes when the state is lost, its VM stays the same).
 */
function vmsByIdentity(w: World): Map<string, Placed[]> {
  const out = new Map<string, Placed[]>();
  for (const p of allVms(w)) {
    const m = parseMarker(p.vm.config.description);
    if (!m || (m.vmid !== undefined && m.vmid !== p.vm.vmid && !tunnelled(p.c, p.vm.vmid))) continue;
    const id = ownerKey(m);
    out.set(id, [...(out.get(id) ?? []), p]);
  }
  return out;
}

/** Resource uid -> the VMs whose description carries its ownership marker, on either cluster. */
function markedVms(w: World): Map<string, Placed[]> {
  const out = new Map<string, Placed[]>();
  for (const p of allVms(w)) {
    const uid = markerUid(p.vm.config.description);
    if (!uid) continue;
    out.set(uid, [...(out.get(uid) ?? []), p]);
  }
  return out;
}

/**
 * When one resource may show two VMs: while a remote migration copies it. PVE's worker locks the
 * source `migrate` in phase 1, before the target gets the config with the marker
 * (QemuMigrate.pm:835-837, phase1_remote), and keeps that lock until it destroys the source
 * (`delete`, :1906-1909) or unlocks it in phase 1/2 cleanup, where it also destroys what the
 * target got (:948-977). The target is a `lock: create` placeholder, then `lock: migrate`, then
 * unlocked just before the source goes. So: exactly two, on the two clusters, one of them locked
 * `migrate` with its `qmigrate` task still running. Once that task ends the window is closed: one
 * VM is left (the target, or the source).
 */
function migrating(w: World, vms: Placed[]): boolean {
  if (vms.length !== 2 || vms[0]!.site === vms[1]!.site) return false;
  return (
    vms.some((s) => s.vm.config.lock === 'migrate' && taskRuns(s.c, 'qmigrate', s.vm.vmid)) ||
    vms.some((t) => deadTunnelLeftover(w, t))
  );
}

/**
 * A migration that died (its source's node crashed under it) leaves the window open: the target,
 * locked `create` or `migrate`, made by a `qmtunnel` that ended "mtunnel exited unexpectedly" with
 * nothing cleaned up (qemu-server API2/Qemu.pm:7217-7222), until a person removes it. The provider
 * reports it (site-move.ts tunnelLeftover) and the settle's operator removes it; the final check
 * still wants one VM.
 */
function deadTunnelLeftover(w: World, t: Placed): boolean {
  const lock = t.vm.config.lock;
  return (
    (lock === 'create' || lock === 'migrate') &&
    !taskRuns(t.c, 'qmtunnel', t.vm.vmid) &&
    creatorOf(w, t.site, t.vm.vmid)?.type === 'qmtunnel'
  );
}

/**
 * F21 (open, FINDINGS.md): the second of two VMs of one resource uid, made by a create (not a
 * migration) on a site that the resource's status never named; the create's crash-safe record
 * (the external name) does not say which site it was sent to. Accepted, journalled, unless strict.
 */
function unrecordedCreate(w: World, uid: string, vms: Placed[]): Placed | undefined {
  if (w.strict || vms.length !== 2 || vms[0]!.site === vms[1]!.site) return undefined;
  const sites = w.statusSites.get(uid);
  const extra = vms.filter((p) => !sites?.has(p.site));
  if (extra.length !== 1) return undefined;
  const p = extra[0]!;
  // Made for this very resource (the other one may be another incarnation's, which it adopted).
  if (markerUid(p.vm.config.description) !== uid) return undefined;
  const by = creatorOf(w, p.site, p.vm.vmid);
  return !p.vm.config.lock && (by?.type === 'qmcreate' || by?.type === 'qmclone') ? p : undefined;
}

/**
 * F24 (open, FINDINGS.md): the migration's result on the move's target site, while the resource's
 * spec went back to the source site before the arrival was seen: the reconcile then runs on the
 * source alone (no target), never reads the recorded move, and makes the VM again there. Accepted,
 * journalled, unless strict.
 */
function revertedMove(w: World, uid: string, vms: Placed[]): Placed | undefined {
  if (w.strict || vms.length !== 2 || vms[0]!.site === vms[1]!.site) return undefined;
  const r = [...w.store.listSync(), ...(w.otherStore?.listSync() ?? [])].find((x) => x.metadata.uid === uid);
  const move = r?.status?.atProvider?.siteMove;
  if (!r || !move || (r.spec.forProvider.site ?? 'site-1') !== move.from) return undefined;
  return vms.find((p) => p.site === move.to && p.vm.vmid === move.vmid && !p.vm.config.lock);
}

/**
 * A VM that holds a resource's data: marked, not a create/clone placeholder (which holds none yet),
 * and not one whose disks are all gone (a destroy that freed them and could not remove its config:
 * the destroy took the data, and the operator's `qm destroy` of what is left takes none).
 */
function holdsData(p: Placed): boolean {
  const lock = p.vm.config.lock;
  return lock !== 'create' && lock !== 'clone' && !disksGone(p.c, p.vm);
}

/** A VM with disks whose volumes are all gone from their storages. */
function disksGone(c: SimCluster, vm: VmState): boolean {
  const disks = Object.entries(vm.config)
    .filter(([k]) => DRIVE_KEY_RE.test(k))
    .map(([, v]) => parseDrive(v))
    .filter((d) => !isCdrom(d) && !isCloudinit(d) && d.file.includes(':'));
  return disks.length > 0 && !disks.some((d) => c.state.volume(vm.node, d.file));
}

/**
 * A replacement under way (src/vm/replace.ts): the resource records the VM it replaces, which stays
 * until its successor is Ready; the two carry one marker meanwhile.
 */
function replacing(w: World, uid: string, vms: Placed[]): boolean {
  if (vms.length !== 2) return false;
  return [...w.store.listSync(), ...(w.otherStore?.listSync() ?? [])].some((r) => {
    const old = r.metadata.uid === uid ? r.status?.atProvider?.replacing : undefined;
    return old !== undefined && vms.some((p) => p.site === old.site && p.vm.vmid === old.vmid);
  });
}

function changedKeys(a: Record<string, string>, b: Record<string, string>): string[] {
  return [...new Set([...Object.keys(a), ...Object.keys(b)])].filter((k) => a[k] !== b[k]).sort();
}

/** What must hold after every single command, faults or not. */
export function checkAlways(w: World): void {
  lockReports(w);
  placeholderReports(w);
  diskSizeReports(w);
  missingDiskReports(w);
  protectionReports(w);
  for (const r of [...w.store.listSync(), ...(w.otherStore?.listSync() ?? [])]) {
    const site = r.status?.atProvider?.site as SiteName | undefined;
    if (!site) continue;
    const seen = w.statusSites.get(r.metadata.uid) ?? new Set<SiteName>();
    seen.add(site);
    w.statusSites.set(r.metadata.uid, seen);
  }
  for (const [uid, vms] of markedVms(w)) {
    const unrecorded = unrecordedCreate(w, uid, vms);
    if (unrecorded) {
      w.log(`  ${describeVm(unrecorded)}: made by a create on a site the resource never recorded (F21, open)`);
      continue;
    }
    const reverted = revertedMove(w, uid, vms);
    if (reverted) {
      w.log(`  ${describeVm(reverted)}: migrated there, the spec back on the source site meanwhile (F24, open)`);
      continue;
    }
    if (vms.length > 1 && !migrating(w, vms) && !replacing(w, uid, vms)) {
      const tasks = vms
        .map((p) => `${p.site} qmigrate ${taskRuns(p.c, 'qmigrate', p.vm.vmid) ? 'running' : 'not running'}`)
        .join(', ');
      violated('two VMs for one resource', `uid ${uid} is carried by ${vms.map(describeVm).join(' and ')} (${tasks})`);
    }
  }
  readyOnTwoVms(w);
  // A config never names a snippet that is not there (it would not start: "can't find file").
  for (const p of allVms(w)) {
    const volid = /(?:^|,)user=([^,]+)/.exec(p.vm.config.cicustom ?? '')?.[1];
    if (!volid || movedByAnotherUnseen(w, p)) continue;
    const storage = p.c.state.nodes.get(p.vm.node)?.storages.get(volid.split(':')[0]!);
    if (![...(storage?.volumes.values() ?? [])].some((v) => v.volid === volid))
      violated('snippet missing', `${describeVm(p)} names ${volid}, which is not on node ${p.vm.node}`);
  }
  for (const f of foreignBaselines(w)) {
    const c = w.cluster(f.site);
    const vm = c.state.vms.get(f.vmid);
    if (!vm) violated('foreign VM deleted', `VM ${f.site}/${f.vmid} of ${FOREIGN_USER} (or the template) is gone`);
    const p = { site: f.site, c, vm };
    if (c.state.digest(vm) !== f.digest) {
      violated(
        'foreign VM modified',
        `${describeVm(p)}: config keys changed: ${changedKeys(f.config, { ...vm.config, ...vm.pending }).join(', ')}`,
      );
    }
    if (vm.status !== f.status) violated('foreign VM modified', `${describeVm(p)} was ${f.status}`);
  }
  // Another user's operation (a backup) holds a lock on one of our VMs: it must outlive our reconciles.
  for (const c of w.sim.clusters)
    for (const f of c.faults.active.values()) {
      const s = f.spec;
      // (A lock whose worker died with its node is no live operation's: startall drops a backup's.)
      if (s.kind !== 'lock' || !s.lock || f.holderDied) continue;
      const vm = c.state.vms.get(s.vmid);
      if (!vm)
        violated('VM destroyed under a foreign lock', `VM ${c.name}/${s.vmid} was destroyed while ${s.lock} held it`);
      if (vm.config.lock !== s.lock) {
        violated(
          'foreign lock cleared',
          `the ${s.lock} lock on VM ${c.name}/${s.vmid} was replaced by '${vm.config.lock ?? ''}'`,
        );
      }
    }
  checkData(w);
}

/**
 * Two state files' resources of one manifest are never both Ready on two VMs that are both there,
 * unlocked and carrying its marker: a CLI apply ends once its resources are Ready, so both applies
 * would end and leave a duplicate. Before a VM is first called Ready, its runtime looks once more
 * for the other's (duplicates.ts); of two racing, the later one sees the earlier one's VM, even
 * while pvestatd has not named it yet (a CI run of test/local/two-states.test.ts, F97).
 */
function readyOnTwoVms(w: World): void {
  for (const b of w.otherStore?.listSync() ?? []) {
    const a = w.store.getSync(keyOf(b));
    if (!a || [a, b].some((r) => r.metadata.deletionTimestamp || getCondition(r, 'Ready')?.status !== 'True')) continue;
    const at = [a, b].map((r) => {
      const site = r.status?.atProvider?.site as SiteName | undefined;
      const vmid = r.status?.atProvider?.vmId;
      const vm = site && vmid !== undefined ? w.cluster(site).state.vms.get(vmid) : undefined;
      const m = parseMarker(vm?.config.description);
      const marked =
        vm && !vm.config.lock && m && ownerKey(m) === ownerKey(r.metadata) && (m.vmid ?? vm.vmid) === vm.vmid;
      return marked ? { site: site!, c: w.cluster(site!), vm } : undefined;
    });
    const [pa, pb] = at;
    if (!pa || !pb || (pa.site === pb.site && pa.vm.vmid === pb.vm.vmid)) continue;
    violated(
      'two state files Ready on two VMs',
      `${ownerKey(b.metadata)} is Ready on ${describeVm(pa)} in the main state and on ${describeVm(pb)} in the other`,
    );
  }
}

/**
 * No VM that held a resource's data is destroyed unless the resource was deleted: between two
 * checks, an identity that had such a VM (on either site) still has one. A move hands the data from
 * the source to the target (both exist while it is copied), a retired duplicate leaves the one kept.
 */
function checkData(w: World): void {
  const now = new Map<string, Set<string>>();
  for (const [id, vms] of vmsByIdentity(w)) {
    const held = vms.filter(holdsData).map((p) => `${p.site}/${p.vm.vmid}`);
    if (held.length) now.set(id, new Set(held));
  }
  for (const [id, before] of w.dataVms) {
    if (now.has(id)) continue;
    const name = id.slice(id.lastIndexOf('/') + 1) as Name;
    if (w.deleted.has(name)) continue;
    if ([...before].some((vm) => destroyedByOther(w, vm))) continue;
    violated(
      'VM with data destroyed',
      `${[...before].join(', ')} held the data of ${id}, which was never deleted, and no VM of it is left on either site`,
    );
  }
  w.dataVms.clear();
  for (const [id, vms] of now) w.dataVms.set(id, vms);
}

/**
 * Whether the other user destroyed `vm` (`site/vmid`; a destroy of theirs that ended OK, or that
 * failed once it had freed the disks, its config left: a write refused for want of quorum; or one
 * still running whose VM is gone: its worker removes the config last, then ends, and a check may
 * come between the two, as the soak of the twenty-fourth session's found): then it took the VM's
 * data, not we.
 */
function destroyedByOther(w: World, vm: string): boolean {
  const [site, vmid] = vm.split('/') as [SiteName, string];
  const c = w.cluster(site);
  const left = c.state.vms.get(Number(vmid));
  for (const t of c.state.tasks.values()) {
    if (t.type !== 'qmdestroy' || t.id !== vmid || t.user !== FOREIGN_USER) continue;
    if (t.status !== 'stopped' ? left !== undefined : t.exitstatus !== 'OK' && !(left && disksGone(c, left))) continue;
    if (w.destroysSeen.has(t.upid)) continue;
    w.destroysSeen.add(t.upid);
    return true;
  }
  return false;
}

/**
 * A site change that no remote migration can make, refused as designed: with password
 * credentials on site-1 (the `password` world) a move to site-1 has no API token for the target.
 * The resource stays where it is with PlacementChangeRefused naming the fix; nothing moves.
 */
export function refusedAsDesigned(w: World, r: ProxmoxVM): boolean {
  const sy = getCondition(r, 'Synced');
  const at = r.status?.atProvider?.site;
  if (r.metadata.deletionTimestamp || !at || at === r.spec.forProvider.site || sy?.status !== 'False') return false;
  // No token for site-1 in the password world.
  if (
    w.auth === 'password' &&
    r.spec.forProvider.site === 'site-1' &&
    at === 'site-2' &&
    sy.reason === 'PlacementChangeRefused' &&
    /API token/.test(sy.message ?? '')
  )
    return true;
  // Both sites hand out VMIDs from one range here: a VM keeps its VMID when it moves, and a VMID
  // taken on the target refuses the move (fault search F26: moves to another VMID made duplicates).
  return sy.reason === 'MigrationRefused' && /is in use on site .*keeps its VMID/.test(sy.message ?? '');
}

/**
 * A VM of ours, unlocked, made for another incarnation of the resource than `r`: one whose uid
 * only a lost state knew, or the other state file's.
 */
function anotherIncarnation(w: World, r: ProxmoxVM, p: Placed): boolean {
  const m = parseMarker(p.vm.config.description);
  if (!m || m.installation !== w.installation || p.vm.config.lock || m.uid === r.metadata.uid) return false;
  const other = w.otherStore?.getSync(`${r.metadata.namespace}/${r.metadata.name}`);
  return w.lostUids.has(m.uid) || m.uid === other?.metadata.uid;
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
    const leftToGc = vms.every((p) => {
      const m = parseMarker(p.vm.config.description);
      return m !== undefined && w.lostUids.has(m.uid) && m.installation === w.installation && !p.vm.config.lock;
    });
    if (leftToGc) {
      w.log(`  ${vms.map(describeVm).join(', ')}: made by a create in flight when the state was lost; left to gc`);
      continue;
    }
    violated('orphan VM', `${vms.map(describeVm).join(', ')} carries the marker of ${id}, which is gone`);
  }
  for (const p of allVms(w)) {
    const vm = p.vm;
    const lock = vm.config.lock;
    // A migration target is `lock: create` until its config arrives, then `lock: migrate`.
    if (markerUid(vm.config.description) || (lock !== 'create' && lock !== 'clone' && lock !== 'migrate')) continue;
    // The other user never clones nor migrates; a create placeholder is ours unless its qmcreate task was theirs.
    const by = creatorOf(w, p.site, vm.vmid);
    if (by?.user === FOREIGN_USER && by.type === 'qmcreate') continue;
    if (lock === 'migrate' && by?.type !== 'qmtunnel') continue;
    const creator =
      lock === 'clone'
        ? 'the provider'
        : by?.type === 'qmtunnel'
          ? "a remote migration's tunnel"
          : (by?.user ?? 'unknown');
    // A dead create's placeholder names nobody; once the state that held its VMID is lost, no
    // runtime can tell it is ours (F9). gc lists it for the operator; nothing may delete it.
    // (VMIDs by site: a resource that holds the VMID on the other site does not hold this one.)
    const heldHere = (r: ProxmoxVM) => heldVmids(r, undefined).some((h) => h.site === p.site && h.vmid === vm.vmid);
    if (w.lostVmids.has(`${p.site}/${vm.vmid}`) && ![...live.values()].some(heldHere)) {
      w.log(`  ${describeVm(p)}: a dead placeholder at a VMID only a lost state held; left to the operator`);
      continue;
    }
    violated('orphan placeholder', `${describeVm(p)}: a half-created VM left behind (created by ${creator})`);
  }
  // A disk is an orphan too: every VM disk (or cloud-init drive) on a storage belongs to a VM that
  // exists. PVE frees them with the VM (`destroy-unreferenced-disks`), when a create fails, and
  // on both sides of a remote migration (the source's with `delete`, the target's in cleanup).
  for (const c of w.sim.clusters) {
    const seenVolumes = new Set<string>();
    for (const n of c.state.nodes.values()) {
      for (const st of n.storages.values()) {
        for (const v of st.volumes.values()) {
          if (v.vmid === undefined || c.state.vms.has(v.vmid) || seenVolumes.has(v.volid)) continue;
          seenVolumes.add(v.volid);
          violated('orphan disk', `${c.name}: ${v.volid} (${v.content}) belongs to VM ${v.vmid}, which does not exist`);
        }
      }
    }
  }
  if (!s.converged) {
    violated('did not converge', `after ${s.rounds} settle rounds: ${s.unsettled.join(' | ')}`);
  }
  for (const [id, r] of live) {
    let vms = marked.get(id) ?? [];
    const ext = externalName(r);
    // On the spec's site (or, refused as designed, still on the one it was on), and the status says so.
    const want = refusedAsDesigned(w, r)
      ? (r.status?.atProvider?.site ?? 'site-1')
      : (r.spec.forProvider.site ?? 'site-1');
    const elsewhere = vms.filter((p) => p.site !== want);
    if (
      !w.strict &&
      elsewhere.length &&
      vms.length - elsewhere.length === 1 &&
      elsewhere.every((p) => anotherIncarnation(w, r, p))
    ) {
      // F19 (open, FINDINGS.md): a resource with no recorded VMID looks for its VM on its spec's
      // site only; its VM made for a lost state or the other state file, on the other site, is
      // left there with its marker (and the other state file's resource may hold it).
      w.log(
        `  ${elsewhere.map(describeVm).join(', ')}: ${r.metadata.name}'s VM made for another incarnation (a lost state, the other state file) on another site (F19, open)`,
      );
      vms = vms.filter((p) => p.site === want);
    }
    const unrecorded = unrecordedCreate(w, r.metadata.uid, vms) ?? revertedMove(w, r.metadata.uid, vms);
    if (unrecorded) vms = vms.filter((p) => p !== unrecorded);
    if (vms.length !== 1)
      violated(
        'exactly one VM per resource',
        `${r.metadata.name} has ${vms.length} VMs across both sites (ext=${ext ?? '-'}): ${vms.map(describeVm).join(', ')}`,
      );
    const p = vms[0]!;
    if (String(p.vm.vmid) !== ext)
      violated('VM at the external name', `${r.metadata.name}: ext=${ext ?? '-'} but ${describeVm(p)}`);
    if (p.site !== want || r.status?.atProvider?.site !== p.site)
      violated(
        'VM on its site',
        `${r.metadata.name}: spec site ${r.spec.forProvider.site}, status site ${r.status?.atProvider?.site ?? '-'}, but ${describeVm(p)}`,
      );
    if (p.vm.config.lock) violated('lock left behind', `${r.metadata.name}: ${describeVm(p)}`);
  }
  for (const r of [...live.values(), ...others]) checkSourceLeft(w, r);
  for (const r of others) {
    const vms = marked.get(ownerKey(r.metadata)) ?? [];
    const p = vms.find((x) => String(x.vm.vmid) === externalName(r) && r.status?.atProvider?.site === x.site) ?? vms[0];
    if (p && (String(p.vm.vmid) !== externalName(r) || r.status?.atProvider?.site !== p.site))
      violated(
        'VM at the external name',
        `${r.metadata.name} (other state): ext=${externalName(r) ?? '-'} site=${r.status?.atProvider?.site ?? '-'} but ${describeVm(p)}`,
      );
  }
}

/**
 * A resource that says its migration's source was left behind (SourceVmLeft, with the `qm`
 * commands to destroy it) names a VM that is that source: on that site, its own marker, locked
 * `migrate` as PVE leaves it. Telling the operator to destroy any other VM would destroy someone's.
 */
function checkSourceLeft(w: World, r: ProxmoxVM): void {
  const c = getCondition(r, 'SourceVmLeft');
  if (c?.status !== 'True') return;
  const m = /VM (\d+) is still on node \S+ of site (\S+) /.exec(c.message ?? '');
  const site = m?.[2] as SiteName | undefined;
  const vm = m && site ? w.cluster(site).state.vms.get(Number(m[1])) : undefined;
  const marker = parseMarker(vm?.config.description);
  if (!vm || !marker || ownerKey(marker) !== ownerKey(r.metadata) || vm.config.lock !== 'migrate')
    violated(
      'SourceVmLeft names another VM',
      `${r.metadata.name}: "${c.message?.slice(0, 200)}" but ${vm && site ? describeVm({ site, c: w.cluster(site), vm }) : 'no such VM'}`,
    );
}
