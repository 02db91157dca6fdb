/**
 * The worker of an in-cluster migration (`qmigrate`), as pve-guest-common AbstractMigrate::migrate
 * runs qemu-server's QemuMigrate: prepare, phase 1 (the `migrate` lock, the local volumes found,
 * offline copies), phase 2 for a running VM (QEMU started on the target, drive mirrors, the RAM),
 * phase 3 (the config moved, the source's copies freed, the lock cleared), each with its cleanup.
 * The phases' log lines are here; the run of the phases and the progress lines are shared with
 * the remote worker (migrate-remote.ts) in migration.ts, the volume scan in migrate-scan.ts.
 *
 * Sources (qemu-server e6352be for 9.x; 8.4 = c2287c17 and 7.4 = 47cf3044 say the same where it
 * matters here): src/PVE/QemuMigrate.pm prepare :183-365, phase1 :828-850, sync_offline_local_volumes
 * :713-783, cleanup_remotedisks :785-812, phase1_cleanup :948-977, phase2_start_local_cluster
 * :979-1148, phase2 :1214-1591, phase2_cleanup :1593-1682, phase3_cleanup :1690-1910;
 * pve-guest-common src/PVE/AbstractMigrate.pm:104-251; pve-storage src/PVE/Storage.pm:917-1040
 * (storage_migrate: the same name on a storage of the same type, `successfully imported`).
 *
 * Durations: setup `migrateConnect`; each offline copy and each drive mirror a flow through the
 * two storages and the two nodes' networks (MIGRATION_NETWORK_MBPS each way), shared with the
 * other copies on them (bandwidth.ts, migration-copy.ts), at most `bwlimit`; the target QEMU's
 * start `start`; the RAM (the configured memory) through the two networks likewise; the finish
 * `migrateFinish`. A target node that goes offline fails the step in progress.
 */
import { die } from './errors.ts';
import { checkLocalResources, type LocalVolume, scanVolumes } from './migrate-scan.ts';
import { AbstractMigration, allocNamed, freedLine, type IdMap, type LinkStep, message } from './migration.ts';
import { migrationLinks, sharedCopyProgress, sharedMirrorProgress, sharedRamProgress } from './migration-copy.ts';
import { configMemoryMiB, DRIVE_KEY_RE, parseDrive, UNUSED_KEY_RE } from './qemu-config.ts';
import { checkLock, DURATIONS, loadVm } from './routes/qemu-common.ts';
import { printDrive, renderBytes } from './routes/qemu-drives.ts';
import type { VmState } from './state.ts';
import { MiB, type Volume } from './storage.ts';
import { underStorageLock } from './storage-lock.ts';
import { isWorkerDeath } from './tasks.ts';

export interface LocalMigrateOpts {
  node: string;
  target: string;
  vmid: number;
  online: boolean;
  withLocalDisks: boolean;
  force: boolean;
  storagemap?: IdMap | undefined;
  bwlimit?: number | undefined;
  withConntrackState?: boolean;
}

/** Thrown by a step when the target node went away (its ssh pipe broke). */
class TargetGone extends Error {}

export class LocalMigration extends AbstractMigration<LocalMigrateOpts> {
  private vm!: VmState;
  private local = new Map<string, LocalVolume>();
  /** Source volid -> target volid (the offline copies and the target's NBD volumes). */
  private readonly volumeMap = new Map<string, string>();
  /** Volumes made on the target, for the cleanups. */
  private readonly created: Volume[] = [];
  /** Drives were mirrored to the target's NBD server (phase 3 stops it). */
  private mirrored = false;

  private get targetOnline(): boolean {
    return this.c.nodes.get(this.o.target)?.online === true;
  }
  private get targetIp(): string {
    return this.c.nodes.get(this.o.target)?.ip ?? '';
  }
  private ssh(cmd: string): string {
    return `/usr/bin/ssh -e none -o 'BatchMode=yes' -o 'HostKeyAlias=${this.o.target}' -o 'UserKnownHostsFile=/etc/pve/nodes/${this.o.target}/ssh_known_hosts' -o 'GlobalKnownHostsFile=none' root@${this.targetIp} ${cmd}`;
  }

  /** A wait over the ssh pipe to the target: not started, or failed, when the node is gone. */
  private readonly linkStep: LinkStep = async (ms) => {
    if (!this.targetOnline) return false;
    await this.log.step(ms);
    return this.targetOnline;
  };

  /** A step of work that needs the target node: fails the moment it is gone. */
  private async remoteStep(ms: number): Promise<void> {
    if (!(await this.linkStep(ms))) throw new TargetGone();
  }

  /** QemuMigrate::prepare: the VM as it is now, the target's storages, the ssh connection. */
  protected override async prepare(): Promise<boolean> {
    const { c, o, log } = this;
    const vm = loadVm(c, o.node, o.vmid);
    this.vm = vm;
    checkLock(vm, false);
    const running = vm.status === 'running';
    if (running && !o.online) die("can't migrate running VM without --online");
    if (running && c.profile.profile === '9.2' && !o.withConntrackState)
      log.log('warn', 'conntrack state migration not supported or disabled, active connections might get dropped');
    checkLocalResources(c, vm, o.target, o.force, log);
    // Every storage the VM's volumes use must exist on the target (the scan checks each volume).
    this.local = scanVolumes(c, vm, { target: o.target, storagemap: o.storagemap, checkOnly: true });
    // "test ssh connection": a node that is down does not answer (AbstractMigrate's ssh has no timeout
    // option; the simulator waits `migrateConnectTimeout`).
    if (!this.targetOnline) {
      await log.step(DURATIONS.migrateConnectTimeout);
      die("Can't connect to destination address using public key");
    }
    await log.step(DURATIONS.migrateConnect);
    return running;
  }

  protected override async phase1(): Promise<void> {
    const { c, o, log, vm } = this;
    log.info(`starting migration of VM ${o.vmid} to node '${o.target}' (${this.targetIp})`);
    vm.config.lock = 'migrate';
    this.local = scanVolumes(c, vm, {
      target: o.target,
      storagemap: o.storagemap,
      running: this.running,
      withLocalDisks: o.withLocalDisks,
      bwlimit: o.bwlimit,
      log,
    });
    const offline = [...this.local.values()].filter((v) => v.mode === 'offline');
    if (offline.length) log.info('copying local disk images');
    for (const lv of offline) {
      const newVolid = await this.storageMigrate(lv);
      this.volumeMap.set(lv.volid, newVolid);
      log.info(`volume '${lv.volid}' is '${newVolid}' on the target`);
    }
  }

  /** PVE::Storage::storage_migrate: `pvesm export | ssh target pvesm import`, dd's progress lines. */
  private async storageMigrate(lv: LocalVolume): Promise<string> {
    const { c, o, log } = this;
    const ts = c.storage(o.target, lv.targetsid)!;
    const fmt = ts.isFileBased && lv.source.isFileBased ? lv.vol.format : 'raw';
    const stream = `${fmt}+size`;
    const cmd = `set -o pipefail && pvesm export ${lv.volid} ${stream} - -with-snapshots ${lv.snapshots ? 1 : 0} | ${this.ssh(`-- pvesm import ${lv.targetsid}:${lv.vol.volname} ${stream} - -with-snapshots ${lv.snapshots ? 1 : 0} -allow-rename ${lv.preserveName ? 0 : 1}`)}`;
    const failed = new Error(
      `storage migration for '${lv.volid}' to storage '${lv.targetsid}' failed - command '${cmd}' failed: exit code 255`,
    );
    if (!this.targetOnline) throw failed;
    let nv: Volume;
    try {
      // pvesm import allocates with vdisk_alloc, under the target storage's lock.
      nv = await underStorageLock(ts, c.clock, () => allocNamed(c, ts, o.vmid, lv.vol.size, fmt, baseName(lv.vol)));
    } catch (e) {
      // pvesm import on the target fails before it reads anything: nothing to clean up there.
      log.info(message(e));
      throw failed;
    }
    if (lv.vol.snapshots?.length) nv.snapshots = [...lv.vol.snapshots];
    if (ts.type === 'lvm' || ts.type === 'lvmthin') log.info(`  Logical volume "${nv.volname}" created.`);
    try {
      // The copy fails (TargetGone) the moment the target is gone.
      const links = migrationLinks({ c, node: o.node, storage: lv.source }, { c, node: o.target, storage: ts });
      if (!(await sharedCopyProgress(c, log, lv.vol.size, links, lv.bwlimit, () => this.targetOnline)))
        throw new TargetGone();
    } catch (e) {
      if (isWorkerDeath(e)) throw e;
      // The import dies with the stream; on a node that went away its volume stays behind.
      if (!(e instanceof TargetGone)) ts.volumes.delete(nv.volname);
      throw failed;
    }
    this.created.push(nv);
    log.info(`successfully imported '${nv.volid}'`);
    return nv.volid;
  }

  /** phase1_cleanup: the lock goes, the copies made so far are freed on the target (over ssh). */
  protected override async phase1Cleanup(): Promise<void> {
    const { log, vm } = this;
    log.info('aborting phase 1 - cleanup resources');
    delete vm.config.lock;
    this.cleanupRemoteDisks();
  }

  /** cleanup_remotedisks: `pvesm free` on the target for every volume in the volume map. */
  private cleanupRemoteDisks(): void {
    const { c, o, log } = this;
    for (const v of this.created) {
      if (!this.targetOnline) {
        log.log('err', `command '${this.ssh(`pvesm free ${v.volid}`)}' failed: exit code 255`);
        this.errors = true;
        continue;
      }
      c.storage(o.target, v.storage)?.volumes.delete(v.volname);
    }
    this.created.length = 0;
  }

  /** phase2: QEMU waits on the target, the local disks are mirrored, then the RAM moves. */
  protected override async phase2(): Promise<void> {
    const { c, o, log } = this;
    log.info(`starting VM ${o.vmid} on remote node '${o.target}'`);
    await this.remoteStep(DURATIONS.start);
    const online = [...this.local.values()].filter((v) => v.mode === 'online');
    // vm_start --targetstorage on the target allocates the NBD volumes (its stderr is logged).
    const drives: Array<{ lv: LocalVolume; nv: Volume }> = [];
    for (const lv of online) {
      const ts = c.storage(o.target, lv.targetsid)!;
      let nv: Volume;
      try {
        // vm_migrate_alloc_nbd_disks: the source's format where the target takes it.
        const fmt = ts.isFileBased && lv.source.isFileBased ? lv.vol.format : 'raw';
        nv = await underStorageLock(ts, c.clock, () => allocNamed(c, ts, o.vmid, lv.vol.size, fmt, baseName(lv.vol)));
      } catch (e) {
        log.info(`[${o.target}] ${message(e)}`);
        throw new Error('remote command failed with exit code 255');
      }
      this.created.push(nv);
      drives.push({ lv, nv });
      this.volumeMap.set(lv.volid, nv.volid);
      log.info(`volume '${lv.volid}' is '${nv.volid}' on the target`);
    }
    log.info('start remote tunnel');
    log.info('ssh tunnel ver 1');
    if (drives.length) {
      log.info('starting storage migration');
      for (const { lv } of drives) await this.mirror(lv);
      log.info("all 'mirror' jobs are ready");
      if (c.profile.profile === '8.4' || c.profile.profile === '9.2') {
        log.info('switching mirror jobs to actively synced mode');
        for (const { lv } of drives) {
          log.info(`drive-${lv.drivename}: switching to actively synced mode`);
          log.info(`drive-${lv.drivename}: successfully switched to actively synced mode`);
        }
      }
    }
    await this.ram(`unix:/run/qemu-server/${o.vmid}.migrate`);
    for (const { lv } of drives) {
      log.info(`drive-${lv.drivename}: Completing block job...`);
      log.info(`drive-${lv.drivename}: Completed successfully.`);
    }
    for (const { lv } of drives) log.info(`drive-${lv.drivename}: mirror-job finished`);
    this.mirrored = drives.length > 0;
  }

  /** One drive-mirror to the target's NBD export, with qemu-server's progress lines. */
  private async mirror(lv: LocalVolume): Promise<void> {
    const { c, o, log } = this;
    const d = `drive-${lv.drivename}`;
    log.info(`${lv.drivename}: start migration to nbd:unix:/run/qemu-server/${o.vmid}_nbd.migrate:exportname=${d}`);
    log.info(`drive mirror is starting for ${d}${lv.bwlimit ? ` with bandwidth limit: ${lv.bwlimit} KiB/s` : ''}`);
    const ts = c.storage(o.target, lv.targetsid)!;
    log.info(`${d}: transferred 0.0 B of ${renderBytes(lv.vol.size)} (0.00%) in 0s`);
    const links = migrationLinks({ c, node: o.node, storage: lv.source }, { c, node: o.target, storage: ts });
    await sharedMirrorProgress(c, log, d, lv.vol.size, links, lv.bwlimit, () => this.targetOnline);
  }

  /** The RAM: QEMU's migrate to the target and qemu-server's query-migrate lines. */
  private async ram(uri: string): Promise<void> {
    const { o, log, vm } = this;
    const mem = configMemoryMiB(vm.config) * MiB;
    log.info(`starting online/live migration on ${uri}`);
    log.info('set migration capabilities');
    if (o.bwlimit) log.info(`migration speed limit: ${renderBytes(o.bwlimit * 1024)}/s`);
    log.info('migration downtime limit: 100 ms');
    log.info(`migration cachesize: ${renderBytes(roundPow2(Math.floor(mem / 10)))}`);
    log.info('set migration parameters');
    log.info(`start migrate command to ${uri}`);
    const links = migrationLinks({ c: this.c, node: o.node }, { c: this.c, node: o.target });
    await sharedRamProgress(this.c, log, mem, links, o.bwlimit, () => this.targetOnline);
  }

  /** phase2_cleanup: cancel, unlock, stop the target's QEMU, free what was made there. */
  protected override async phase2Cleanup(): Promise<void> {
    const { log, vm, o } = this;
    this.phase2errors = true;
    log.info('aborting phase 2 - cleanup resources');
    log.info('migrate_cancel');
    delete vm.config.lock;
    for (const lv of this.local.values())
      if (lv.mode === 'online') {
        log.info(`drive-${lv.drivename}: Cancelling block job`);
        log.info(`drive-${lv.drivename}: Done.`);
      }
    if (!this.targetOnline) {
      log.log(
        'err',
        `command '${this.ssh(`qm stop ${o.vmid} --skiplock --migratedfrom ${o.node}`)}' failed: exit code 255`,
      );
      this.errors = true;
    }
    this.cleanupRemoteDisks();
  }

  /**
   * phase3_cleanup: the config points at the target's volumes and moves to the target node; a
   * running VM continues there; the source's copies are freed; `qm unlock` on the target.
   */
  protected override async phase3Cleanup(): Promise<void> {
    const { o, log, vm } = this;
    await log.step(DURATIONS.migrateFinish);
    updateVolumeIds(vm, this.volumeMap);
    // move_config_to_node: from here the VM is on the target (still `lock: migrate`).
    vm.node = o.target;
    if (this.mirrored) log.info('stopping NBD storage migration server on target.');
    // A running VM continues in the target's QEMU (resumed); the source's QEMU is stopped.
    for (const lv of this.local.values()) {
      const s = lv.source;
      if (!s.volumes.delete(lv.vol.volname)) continue;
      const line = freedLine(s, lv.vol.volname);
      if (line) log.print(line);
    }
    delete vm.config.lock;
  }
}

/** A volume's name without its directory and extension (`100/vm-100-disk-0.qcow2` -> `vm-100-disk-0`). */
export function baseName(v: Volume): string {
  return v.volname.replace(/^.*\//, '').replace(/\.[a-z0-9]+$/, '');
}

/** AbstractConfig::update_volume_ids: the config, its pending section and snapshots, mapped. */
export function updateVolumeIds(vm: VmState, map: ReadonlyMap<string, string>): void {
  const update = (conf: Record<string, string>) => {
    for (const [k, v] of Object.entries(conf)) {
      if (!DRIVE_KEY_RE.test(k) && !UNUSED_KEY_RE.test(k) && k !== 'vmstate') continue;
      const d = parseDrive(v);
      const nv = map.get(d.file);
      if (!nv) continue;
      conf[k] = UNUSED_KEY_RE.test(k) || k === 'vmstate' ? nv : printDrive(nv, d);
    }
  };
  update(vm.config);
  update(vm.pending);
  for (const s of vm.snapshots.values()) {
    update(s.config);
    if (s.vmstate && map.has(s.vmstate)) s.vmstate = map.get(s.vmstate);
  }
}

function roundPow2(n: number): number {
  if (n < 2) return 1;
  return 2 << Math.floor(Math.log2(n - 1));
}
