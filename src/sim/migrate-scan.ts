/**
 * The checks a migration worker makes before it moves anything: the local resources that block
 * it, every volume's storage on the target (prepare), and QemuMigrate::scan_local_volumes, which
 * decides which volumes are copied, how (offline copy or drive-mirror), and which ones make the
 * migration impossible (`can't migrate local disk '…': …`, then `can't migrate VM - check log`).
 *
 * Sources: qemu-server src/PVE/QemuMigrate.pm:296-365 (prepare's local resources and storages)
 * and :367-606 (scan_local_volumes) at e6352be; 8.4 (c2287c17) logs the same; 7.4 (47cf3044,
 * PVE/QemuMigrate.pm:296-524) and 6.4 also list the VM's volumes found on each local storage
 * (`(via storage)`), call a disk in the config `(in current VM config)` and check the target's
 * `images` content per storage.
 */
import { die, PveHttpError } from './errors.ts';
import { type IdMap, type MigrationLog, mapId, storageCheckEnabled, volumeOwner } from './migration.ts';
import { isShared, localResources, volumeAttrs } from './routes/qemu-migrate.ts';
import type { ClusterState, VmState } from './state.ts';
import type { StorageState, Volume } from './storage.ts';

export type VolumeRef = 'attached' | 'unused' | 'snapshot' | 'pending' | 'generated' | 'config' | 'storage';

export interface LocalVolume {
  volid: string;
  vol: Volume;
  /** The source node's copy of the volume's storage. */
  source: StorageState;
  targetsid: string;
  ref: VolumeRef;
  drivename?: string;
  isCloudinit: boolean;
  isVmstate: boolean;
  /** With snapshots (qcow2/vmdk): the stream carries them. */
  snapshots: boolean;
  /** vmstate and cloud-init volumes keep their name on the target (no `allow_rename`). */
  preserveName: boolean;
  mode: 'online' | 'offline';
  bwlimit?: number | undefined;
}

export interface ScanOpts {
  target: string;
  storagemap?: IdMap | undefined;
  /** A remote migration: shared storages are copied (and mapped) too; the target checks itself. */
  remote?: boolean;
  running?: boolean;
  withLocalDisks?: boolean;
  bwlimit?: number | undefined;
  log?: MigrationLog;
  /** prepare(): only check that every volume's storage is usable on the target. */
  checkOnly?: boolean;
}

function messageOf(e: unknown): string {
  return (e instanceof Error ? e.message : String(e)).replace(/\n+$/, '');
}

/** target_storage_check_available (in-cluster migrations only). */
function targetStorageCheck(c: ClusterState, targetsid: string, volid: string, target: string): void {
  const ts = storageCheckEnabled(c, targetsid, target);
  const vtype = /:(iso|vztmpl|backup|snippets|import)\//.exec(volid)?.[1] ?? 'images';
  if (!ts.content.has(vtype)) die(`${volid}: content type '${vtype}' is not available on storage '${targetsid}'`);
}

/**
 * prepare(): `can't migrate VM which uses local devices: …` unless `force` (even for a running VM:
 * `$self->{running}` is not set yet when prepare runs); mapped devices have no mapping on any
 * simulated node.
 */
export function checkLocalResources(
  c: ClusterState,
  vm: VmState,
  target: string,
  force: boolean,
  log: MigrationLog,
): void {
  const { local, mapped } = localResources(c, vm, vm.status === 'running');
  const blocking = local.filter((r) => !(r in mapped));
  if (blocking.length) {
    if (!force) die(`can't migrate VM which uses local devices: ${blocking.join(', ')}`);
    log.info('migrating VM which uses local devices');
  }
  const keys = Object.keys(mapped).sort();
  if (keys.length)
    die(
      `can't migrate to '${target}': missing mapped devices ${keys.map((k) => `${k}:${mapped[k]!.name}`).join(', ')}`,
    );
}

/** The scan; throws `Problem found while scanning volumes - …` (or, checkOnly, prepare's error). */
export function scanVolumes(c: ClusterState, vm: VmState, o: ScanOpts): Map<string, LocalVolume> {
  const attrs = volumeAttrs(c, vm);
  const old = c.profile.profile === '6.4' || c.profile.profile === '7.4';
  if (o.checkOnly) {
    for (const volid of attrs.keys()) {
      const i = volid.indexOf(':');
      if (i <= 0 || volid.startsWith('/')) continue;
      const sid = volid.slice(0, i);
      const scfg = storageCheckEnabled(c, sid);
      const targetsid = !isShared(scfg) || o.remote ? mapId(o.storagemap, sid) : sid;
      if (!o.remote) targetStorageCheck(c, targetsid, volid, o.target);
    }
    return new Map();
  }
  const local = new Map<string, LocalVolume>();
  const volErrors = new Map<string, string>();
  const other: string[] = [];
  try {
    if (old) scanStorages(c, vm, o, local);
    for (const [volid, a] of attrs) {
      try {
        testVolid(c, vm, o, old, local, other, volid, a);
      } catch (e) {
        if (!(e instanceof Error)) throw e;
        volErrors.set(volid, messageOf(e));
      }
    }
    for (const volid of [...local.keys()].sort()) {
      const lv = local.get(volid)!;
      const ref = lv.ref;
      if (ref === 'attached' || ref === 'config') {
        if (o.running && !o.withLocalDisks)
          volErrors.set(volid, "can't live migrate attached local disks without with-local-disks option");
        o.log?.info(`found local disk '${volid}' (${ref === 'config' ? 'in current VM config' : 'attached'})`);
      } else if (ref === 'unused') o.log?.info(`found local disk '${volid}' (unused)`);
      else if (ref === 'storage') o.log?.info(`found local disk '${volid}' (via storage)`);
      else if (ref === 'snapshot') o.log?.info(`found local disk '${volid}' (referenced by snapshot(s))`);
      else if (ref === 'pending') o.log?.info(`found local disk '${volid}' (pending change)`);
      else if (ref === 'generated') o.log?.info(`found generated disk '${volid}' (in current VM config)`);
    }
    for (const volid of [...volErrors.keys()].sort())
      o.log?.log('warn', `can't migrate local disk '${volid}': ${volErrors.get(volid)}`);
    for (const e of other) o.log?.log('warn', e);
    if (volErrors.size || other.length) die("can't migrate VM - check log");
    for (const lv of local.values()) {
      const type = lv.source.type;
      if (!o.remote && !/^(dir|btrfs|zfspool|lvmthin|lvm)$/.test(type))
        die(`can't migrate '${lv.volid}' - storage type '${type}' not supported`);
      if (lv.vol.parent) {
        // A die without "\n": Perl appends where it happened.
        const base = /(base-\d+-disk-\d+(?:\.\w+)?)\//.exec(lv.vol.volname)?.[1] ?? lv.vol.parent;
        const at = { '6.4': 563, '7.4': 505, '8.4': 521, '9.2': 586 }[c.profile.profile];
        die(
          `can't migrate '${lv.volid}' as it's a clone of '${base}' at /usr/share/perl5/PVE/QemuMigrate.pm line ${at}.`,
        );
      }
    }
    for (const lv of local.values())
      lv.mode = o.running && (lv.ref === 'attached' || lv.ref === 'config') ? 'online' : 'offline';
  } catch (e) {
    if (e instanceof PveHttpError || e instanceof Error)
      throw new Error(`Problem found while scanning volumes - ${messageOf(e)}`);
    throw e;
  }
  return new Map([...local.entries()].sort(([a], [b]) => a.localeCompare(b)));
}

/** 6.4/7.4: every volume of the VM on a local storage of the source node (`vdisk_list`). */
function scanStorages(c: ClusterState, vm: VmState, o: ScanOpts, local: Map<string, LocalVolume>): void {
  for (const s of c.nodes.get(vm.node)?.storages.values() ?? []) {
    if ((isShared(s) && !o.remote) || !s.enabled || !s.content.has('images')) continue;
    const vols = [...s.volumes.values()].filter((v) => v.content === 'images' && volumeOwner(v.volname) === vm.vmid);
    if (!vols.length) continue;
    const targetsid = mapId(o.storagemap, s.id);
    if (!o.remote) {
      const ts = storageCheckEnabled(c, targetsid, o.target);
      if (!ts.content.has('images')) die(`content type 'images' is not available on storage '${targetsid}'`);
    }
    for (const vol of vols)
      local.set(vol.volid, entry(vol, s, targetsid, 'storage', o, { isCloudinit: /-cloudinit/.test(vol.volname) }));
  }
}

function entry(
  vol: Volume,
  source: StorageState,
  targetsid: string,
  ref: VolumeRef,
  o: ScanOpts,
  extra: { drivename?: string; isCloudinit?: boolean; isVmstate?: boolean },
): LocalVolume {
  const isCloudinit = extra.isCloudinit ?? false;
  const isVmstate = extra.isVmstate ?? false;
  return {
    volid: vol.volid,
    vol,
    source,
    targetsid,
    ref,
    ...(extra.drivename ? { drivename: extra.drivename } : {}),
    isCloudinit,
    isVmstate,
    snapshots: vol.format === 'qcow2' || vol.format === 'vmdk',
    preserveName: isCloudinit || isVmstate,
    mode: 'offline',
    bwlimit: o.bwlimit,
  };
}

/** `$test_volid` for one volume of foreach_volid. */
function testVolid(
  c: ClusterState,
  vm: VmState,
  o: ScanOpts,
  old: boolean,
  local: Map<string, LocalVolume>,
  other: string[],
  volid: string,
  a: Record<string, unknown>,
): void {
  if (volid.startsWith('/')) {
    if (a.shared) return;
    die('local file/device');
  }
  const snaprefs = a.referenced_in_snapshot as Record<string, unknown> | undefined;
  if (a.cdrom) {
    if (volid === 'cdrom') {
      let msg = "can't migrate local cdrom drive";
      if (snaprefs && !a.is_attached) msg += ` (referenced in snapshot - ${Object.keys(snaprefs).sort().join(', ')})`;
      other.push(msg);
      return;
    }
    if (volid === 'none') return;
  }
  const i = volid.indexOf(':');
  if (i <= 0) die(`unable to parse volume ID '${volid}'`);
  const sid = volid.slice(0, i);
  const scfg = storageCheckEnabled(c, sid);
  const targetsid = !isShared(scfg) || o.remote ? mapId(o.storagemap, sid) : sid;
  if (!o.remote) targetStorageCheck(c, targetsid, volid, o.target);
  if (isShared(scfg) && !o.remote) return;
  let ref: VolumeRef | undefined = local.get(volid)?.ref;
  if (old) {
    ref = a.referenced_in_config ? 'config' : 'snapshot';
    if (a.is_unused) ref = 'storage';
  } else {
    if (a.referenced_in_pending) ref = 'pending';
    if (snaprefs) ref = 'snapshot';
    if (a.is_unused) ref = 'unused';
    if (a.is_attached) ref = 'attached';
  }
  if (a.is_tpmstate) ref = 'generated';
  const source = c.storage(vm.node, sid)!;
  const vol = source.volumes.get(volid.slice(i + 1));
  if (!vol) die(`unable to determine size for volume '${volid}'`);
  const lv = entry(vol, source, targetsid, ref ?? 'config', o, {
    ...(typeof a.drivename === 'string' ? { drivename: a.drivename } : {}),
    isCloudinit: a.is_cloudinit === 1 || /vm-\d+-cloudinit/.test(volid),
    isVmstate: a.is_vmstate === 1,
  });
  local.set(volid, lv);
  if (a.cdrom) {
    if (/vm-\d+-cloudinit/.test(volid)) {
      lv.ref = 'generated';
      return;
    }
    die('local cdrom image');
  }
  const owner = volumeOwner(vol.volname);
  if (owner !== vm.vmid) die(`owned by other VM (owner = VM ${owner ?? '?'})`);
  if (a.is_vmstate) return;
  if (snaprefs) {
    lv.snapshots = true;
    if (o.running) die('online storage migration not possible if non-replicated snapshot exists');
    if (o.remote) die('remote migration with snapshots not supported yet');
    if (!(source.type === 'zfspool' || vol.format === 'qcow2')) die('non-migratable snapshot exists');
  }
  if (/(^|\/)base-\d+-/.test(vol.volname) && [...source.volumes.values()].some((v) => v.parent === vol.volid))
    die('referenced by linked clone(s)');
}
