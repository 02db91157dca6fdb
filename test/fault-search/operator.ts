/**
 * The settle's operator and what it is told: LockWithoutTask reports (src/vm/lock-holder.ts) and
 * CreateInterrupted reports of this resource's own dead create or clone (src/vm/observe.ts
 * settlePlaceholder, with token credentials, which may not clear such a lock), each checked against
 * PVE after every command, and what an operator runs for them in the settle (settle.ts): the
 * `qm unlock`, with the migration's leftovers freed first, and the report's
 * `qm unlock && qm destroy --purge` of the placeholder. And DiskSizeStale reports (src/vm/disk-size.ts:
 * a resize grew the volume but its config write failed, no quorum or a dead worker), each checked
 * against PVE too, for which the operator runs `qm disk rescan`; and DiskVolumeMissing reports
 * (src/vm/disk-missing.ts: a VM whose disks a destroy freed, its config left), for which it runs
 * `qm destroy --purge`. And VMProtected reports (a protected VM a delete or a replacement left as
 * it is), for which it runs `qm set N --protection 0`.
 */
import type { ProxmoxVM } from '../../src/api/proxmoxvm.ts';
import { externalName, getCondition } from '../../src/engine/resource.ts';
import type { SimCluster } from '../../src/sim/index.ts';
import { freeVmVolumes } from '../../src/sim/routes/qemu-drives.ts';
import type { VmState } from '../../src/sim/state.ts';
import { formatSize } from '../../src/sim/storage.ts';
import { violated } from './violation.ts';
import type { World } from './world.ts';

/** Per world: resources whose VM the operator unlocked or destroyed -> how often they had been reconciled then. */
const unlockedAt = new WeakMap<World, Map<string, number>>();

/** The resources of both state files, each with its key in World.reconciles. */
function everyResource(w: World): Array<{ r: ProxmoxVM; counted: string }> {
  return [
    ...w.store.listSync().map((r) => ({ r, counted: `main:${r.metadata.name}` })),
    ...(w.otherStore?.listSync() ?? []).map((r) => ({ r, counted: `other:${r.metadata.name}` })),
  ];
}

/** Each resource (of both state files) not reconciled since the operator acted on it: a report it shows now was written since. */
function unacted(w: World): Array<{ r: ProxmoxVM; counted: string }> {
  const acted = unlockedAt.get(w) ?? new Map<string, number>();
  unlockedAt.set(w, acted);
  return everyResource(w).filter(({ counted }) => acted.get(counted) !== (w.reconciles.get(counted) ?? 0));
}

/** The operator acted on the VM of `r` (or, given `vmid`, of every resource with that VMID): their reports are stale until reconciled. */
function acted(w: World, r: ProxmoxVM, vmid?: number): void {
  for (const { r: other, counted } of everyResource(w))
    if (vmid !== undefined ? Number(externalName(other)) === vmid : other.metadata.name === r.metadata.name)
      unlockedAt.get(w)?.set(counted, w.reconciles.get(counted) ?? 0);
}

/**
 * The LockWithoutTask reports (src/vm/lock-holder.ts) whose VM still has the lock reported, each
 * checked against PVE: no task of the VM runs on its cluster (for `backup`, no vzdump at all). A
 * report while a worker lives would have an operator unlock under a running migration or backup.
 * A report not written again since the operator unlocked its VM is left out: what the VM holds now
 * (another lock taken since by a live worker) is not what it reported on; reconciled since, a
 * resource whose report stands is checked again (one kept from before the unlock is a false one).
 */
export function lockReports(w: World): Array<{ r: ProxmoxVM; c: SimCluster; vm: VmState; lock: string }> {
  const out: Array<{ r: ProxmoxVM; c: SimCluster; vm: VmState; lock: string }> = [];
  for (const { r } of unacted(w)) {
    const rd = getCondition(r, 'Ready');
    const sy = getCondition(r, 'Synced');
    const report =
      rd?.reason === 'LockWithoutTask' && rd.status === 'False'
        ? rd
        : sy?.reason === 'LockWithoutTask'
          ? sy
          : undefined;
    if (!report) continue;
    const c = w.cluster(w.siteOf(r));
    const vmid = Number(externalName(r));
    const vm = c.state.vms.get(vmid);
    const lock = vm?.config.lock;
    if (!vm || !lock || !report.message?.includes(`locked (${lock})`)) continue; // unlocked since
    const holder = [...c.state.tasks.values()].find(
      (t) => t.status === 'running' && (t.id === String(vmid) || (lock === 'backup' && t.type === 'vzdump')),
    );
    if (holder)
      violated(
        'lock reported without a task while one holds it',
        `${r.metadata.name}: VM ${vmid} (lock: ${lock}) reported LockWithoutTask while ${holder.upid} runs`,
      );
    out.push({ r, c, vm, lock });
  }
  return out;
}

/**
 * What an operator does with a LockWithoutTask report: `qm unlock` once the worker that took the
 * lock is known dead (lockReports). A dead worker's lock that is never reported keeps its resource
 * Locked for good: the settle does not converge, and the search fails.
 */
export function operatorUnlocks(w: World): void {
  for (const { r, c, vm, lock } of lockReports(w)) {
    const vmid = vm.vmid;
    // What the report says to do first for a migration: the copies it left on the other nodes'
    // own storages go (the VM's disks on such a storage are on its own node; a cloud-init volume
    // keeps its name on the target, and a second migration there would find it taken).
    const removed: string[] = [];
    if (lock === 'migrate')
      for (const [node, n] of c.state.nodes) {
        if (node === vm.node) continue;
        for (const st of n.storages.values()) {
          if (st.shared) continue;
          for (const [name, v] of st.volumes)
            if (v.vmid === vmid) {
              st.volumes.delete(name);
              removed.push(`${node}:${v.volid}`);
            }
        }
      }
    delete vm.config.lock;
    acted(w, r, vmid);
    w.log(
      `  operator: ${removed.length ? `pvesm free ${removed.join(' ')}; ` : ''}qm unlock ${vmid} on ${vm.node} (${r.metadata.name} reported its lock '${lock}' held by no task)`,
    );
  }
}

/** A report of this resource's own create or clone whose worker died (or whose task failed and left it): the VM, its node and its lock. */
const DEAD_PLACEHOLDER =
  /VM (\d+) on node (\S+?)(?: of site (\S+))? is left from a (create|clone|remote migration) of this resource whose (?:worker died|task failed and left it)/;

/**
 * The CreateInterrupted reports of a placeholder of the resource's own create or clone whose worker
 * died (with token credentials the provider may not clear its lock), each checked against PVE: the
 * VM is still that placeholder, and no task of it runs (else the operator would destroy a VM under
 * a live create). A report not written again since the operator acted is left out (the VMID may
 * hold the provider's next create by then).
 */
export function placeholderReports(
  w: World,
): Array<{ r: ProxmoxVM; c: SimCluster; vm: VmState; what: string; keep: boolean }> {
  const out: Array<{ r: ProxmoxVM; c: SimCluster; vm: VmState; what: string; keep: boolean }> = [];
  for (const { r } of unacted(w)) {
    const report = [getCondition(r, 'Ready'), getCondition(r, 'Synced')].find(
      (cond) => cond?.reason === 'CreateInterrupted' && DEAD_PLACEHOLDER.test(cond.message ?? ''),
    );
    if (!report) continue;
    const [, vmidText, node, site, what = ''] = DEAD_PLACEHOLDER.exec(report.message ?? '')!;
    // A remote migration's target: `lock: create` from its mtunnel call, `migrate` once its config came.
    const locks = what === 'remote migration' ? ['create', 'migrate'] : [what];
    const c = w.cluster((site as ReturnType<World['siteOf']> | undefined) ?? w.siteOf(r));
    const vmid = Number(vmidText);
    const vm = c.state.vms.get(vmid);
    const lock = vm?.config.lock;
    if (!vm || vm.node !== node || !lock || !locks.includes(lock)) continue; // gone or finished since
    const worker = [...c.state.tasks.values()].find((t) => t.status === 'running' && t.id === String(vmid));
    if (worker)
      violated(
        'placeholder reported dead while its worker runs',
        `${r.metadata.name}: VM ${vmid} (lock: ${lock}) reported CreateInterrupted while ${worker.upid} runs`,
      );
    // What the report says to run must work: `qm destroy` refuses a running VM.
    if (vm.status === 'running' && !/qm stop/.test(report.message ?? ''))
      violated(
        "a report's fix that cannot work",
        `${r.metadata.name}: VM ${vmid} runs, and the fix it reports does not stop it: ${report.message}`,
      );
    // A remote migration's copy whose config arrived, its source gone: the report keeps it.
    out.push({ r, c, vm, what, keep: /may be all that is left of it/.test(report.message ?? '') });
  }
  return out;
}

/**
 * What an operator does with such a report: what it says, `qm unlock <vmid> && [qm stop <vmid> &&]
 * qm destroy <vmid> --purge`; or, for a copy that may be all that is left of the VM, `qm unlock`.
 */
export function operatorDestroysPlaceholders(w: World): void {
  for (const { r, c, vm, what, keep } of placeholderReports(w)) {
    if (keep) {
      const lock = vm.config.lock;
      delete vm.config.lock;
      acted(w, r);
      w.log(
        `  operator: qm unlock ${vm.vmid} on ${vm.node} (${r.metadata.name} reported its ${what}'s copy left, lock: ${lock}, its source gone)`,
      );
      continue;
    }
    vm.status = 'stopped';
    const freed = freeVmVolumes(c.state, vm, true);
    c.state.vms.delete(vm.vmid);
    acted(w, r);
    w.log(
      `  operator: qm unlock ${vm.vmid} && qm destroy ${vm.vmid} --purge on ${vm.node}${freed.length ? ` (freed ${freed.join(' ')})` : ''} (${r.metadata.name} reported its ${what}'s worker dead, lock: ${vm.config.lock})`,
    );
  }
}

/** A DiskSizeStale report: the disk, its VM, the size its volume has, the volume and the node. */
const STALE_SIZE =
  /(\S+) of VM (\d+) is (\S+) or more on its storage \(([^)]+)\), but its config still shows .*Fix: qm disk rescan --vmid \d+ on node (\S+),/;

/**
 * The DiskSizeStale reports whose VM's config still shows less than its volume holds, each checked
 * against PVE: the volume is as large as reported, and no resize of the VM runs (one running would
 * write the config itself). A report not written again since the operator acted is left out.
 */
export function diskSizeReports(w: World): Array<{ r: ProxmoxVM; c: SimCluster; vm: VmState; disk: string }> {
  const out: Array<{ r: ProxmoxVM; c: SimCluster; vm: VmState; disk: string }> = [];
  for (const { r } of unacted(w)) {
    const report = getCondition(r, 'Synced');
    if (report?.reason !== 'DiskSizeStale') continue;
    const m = STALE_SIZE.exec(report.message ?? '');
    if (!m) {
      violated('a DiskSizeStale report without its fix', `${r.metadata.name}: ${report.message}`);
      continue;
    }
    const [, disk = '', vmidText, , volid = '', node = ''] = m;
    const c = w.cluster(w.siteOf(r));
    const vm = c.state.vms.get(Number(vmidText));
    const drive = vm?.config[disk];
    if (!vm || vm.node !== node || !drive?.startsWith(`${volid},`)) continue; // gone or moved since
    const volume = c.state.volume(node, volid);
    const configured = /(?:^|,)size=([^,]+)/.exec(drive)?.[1];
    if (!volume || configured === formatSize(volume.size)) continue; // rescanned or resized since
    const resize = [...c.state.tasks.values()].find(
      (t) => t.status === 'running' && t.type === 'resize' && t.id === String(vm.vmid),
    );
    if (resize)
      violated(
        'disk size reported stale while a resize runs',
        `${r.metadata.name}: VM ${vm.vmid} ${disk} reported DiskSizeStale while ${resize.upid} runs`,
      );
    out.push({ r, c, vm, disk });
  }
  return out;
}

/** What an operator does with such a report: `qm disk rescan --vmid <vmid>`, the volume's size into the config. */
export function operatorRescans(w: World): void {
  for (const { r, c, vm, disk } of diskSizeReports(w)) {
    const drive = vm.config[disk]!;
    const volume = c.state.volume(vm.node, drive.split(',')[0]!)!;
    vm.config[disk] = drive.replace(/(^|,)size=[^,]+/, `$1size=${formatSize(volume.size)}`);
    acted(w, r);
    w.log(
      `  operator: qm disk rescan --vmid ${vm.vmid} on ${vm.node} (${r.metadata.name} reported ${disk}'s size stale)`,
    );
  }
}

/** A DiskVolumeMissing report (src/vm/disk-missing.ts): its VM, node and the disks it names. */
const MISSING_DISKS = /VM (\d+) on node (\S+) names disks whose volumes its storage does not hold: (.+?)\. Its disks/;

/**
 * The DiskVolumeMissing reports, each checked against PVE: the VM is still there on its node, no
 * task of it runs, and every volume it names is gone while its config still names it (a volume the
 * storage holds, reported gone, would have an operator destroy a VM with its disks). A report not
 * written again since the operator acted is left out.
 */
export function missingDiskReports(w: World): Array<{ r: ProxmoxVM; c: SimCluster; vm: VmState }> {
  const out: Array<{ r: ProxmoxVM; c: SimCluster; vm: VmState }> = [];
  for (const { r } of unacted(w)) {
    const report = getCondition(r, 'Synced');
    if (report?.reason !== 'DiskVolumeMissing') continue;
    const m = MISSING_DISKS.exec(report.message ?? '');
    if (!m || !/Fix: .*qm destroy \d+ --purge on node/.test(report.message ?? '')) {
      violated('a DiskVolumeMissing report without its fix', `${r.metadata.name}: ${report.message}`);
      continue;
    }
    const [, vmidText, node = '', named = ''] = m;
    const c = w.cluster(w.siteOf(r));
    const vm = c.state.vms.get(Number(vmidText));
    if (!vm || vm.node !== node) continue; // destroyed or moved since
    for (const [, disk, volid] of named.matchAll(/(\S+) \(([^)]+)\)/g)) {
      if (!vm.config[disk!]?.startsWith(`${volid},`)) continue; // changed since
      if (c.state.volume(node, volid!))
        violated('a disk reported missing that its storage holds', `${r.metadata.name}: ${volid} of VM ${vm.vmid}`);
    }
    const worker = [...c.state.tasks.values()].find((t) => t.status === 'running' && t.id === String(vm.vmid));
    if (worker) continue; // the next look decides
    if (vm.status === 'running')
      violated("a report's fix that cannot work", `${r.metadata.name}: VM ${vm.vmid} runs: ${report.message}`);
    out.push({ r, c, vm });
  }
  return out;
}

/** What an operator does with such a report: `qm destroy <vmid> --purge` (its volumes that are left go with it). */
export function operatorDestroysDiskless(w: World): void {
  for (const { r, c, vm } of missingDiskReports(w)) {
    const freed = freeVmVolumes(c.state, vm, true);
    c.state.vms.delete(vm.vmid);
    acted(w, r);
    w.log(
      `  operator: qm destroy ${vm.vmid} --purge on ${vm.node}${freed.length ? ` (freed ${freed.join(' ')})` : ''} (${r.metadata.name} reported its disks gone)`,
    );
  }
}

/** A VMProtected report (src/vm/ownership.ts protectedVm): which VM, where. */
const PROTECTED = /VM (\d+) on node (\S+) of site (\S+) is protected \(protection: 1\)/;

/**
 * The VMProtected reports (a delete, a replacement or a twin's retirement left a protected VM as
 * it is), each checked against PVE: the VM named is there and protected. A VM since gone (a site
 * move's source) or moved is no report to act on; one there and unprotected, never lifted by the
 * operator, is a false report. A report not written again since the operator acted is left out.
 */
export function protectionReports(w: World): Array<{ r: ProxmoxVM; c: SimCluster; vm: VmState }> {
  const out: Array<{ r: ProxmoxVM; c: SimCluster; vm: VmState }> = [];
  for (const { r } of unacted(w)) {
    // (Synced of a delete, a replacement or a duplicate's retirement; DuplicateElsewhere of a twin on another site.)
    const report = r.status?.conditions?.find((c) => c.reason === 'VMProtected');
    if (!report) continue;
    const m = PROTECTED.exec(report.message ?? '');
    if (!m || !/qm set \d+ --protection 0/.test(report.message ?? '')) {
      violated('a VMProtected report without its fix', `${r.metadata.name}: ${report.message}`);
      continue;
    }
    const [, vmidText, node, site] = m;
    const c = w.cluster(site as ReturnType<World['siteOf']>);
    const vm = c.state.vms.get(Number(vmidText));
    if (!vm || vm.node !== node) continue; // gone or moved since
    if (vm.config.protection !== '1') {
      // (DuplicateElsewhere is written only at a Ready resource's polls, and stays as it was while
      // the resource is deleted, moved or replaced: it may be older than the operator's act.)
      if (report.type !== 'DuplicateElsewhere')
        violated(
          'a VM reported protected that is not',
          `${r.metadata.name}: VM ${c.name}/${vm.vmid}: ${report.message}`,
        );
      continue;
    }
    out.push({ r, c, vm });
  }
  return out;
}

/** What an operator does with such a report: `qm set <vmid> --protection 0`, so that it may go. */
export function operatorUnprotects(w: World): void {
  for (const { r, vm } of protectionReports(w)) {
    delete vm.config.protection;
    // (By name: the report may name another VM than the resource's external name, the one a
    // replacement retires.)
    acted(w, r);
    w.log(`  operator: qm set ${vm.vmid} --protection 0 on ${vm.node} (${r.metadata.name} reported it protected)`);
  }
}
