/**
 * The worker of a remote migration (`qmigrate` on the source cluster): QemuMigrate with
 * `opts.remote`, talking to the target cluster through the websocket tunnel (mtunnel.ts). Every
 * volume is copied (shared storages too, mapped through `target-storage`) with `disk-import`,
 * the config is sent with bridges and volumes mapped (`config`), a running VM is started on the
 * target (`start`), mirrored and its RAM moved, then resumed there (`resume`).
 *
 * Afterwards the source VM is stopped and, without `delete`, stays with `lock: migrate`: phase 1
 * writes the lock into the source config (QemuMigrate.pm:835-837) and phase3_cleanup never
 * writes the source config again for a remote migration (:1701-1722 skip the volume update and
 * the config move; its `unlock` at :1896-1903 goes through the tunnel to the *target* VM; the
 * local `qm unlock` is only the non-tunnel path). With `delete`, destroy_vm removes the source
 * (:1906-1909; a failure only warns `Failed to remove source VM - …`). The API's description of
 * `delete` says "By default the original VM is kept on the source cluster in a stopped state."
 * On a failure in phase 1 the source is unlocked and the target cleaned up through the tunnel
 * (`quit` with cleanup: the imported volumes freed, the target VM destroyed; :948-977, :785-790).
 *
 * Sources: qemu-server src/PVE/QemuMigrate.pm at e6352be (prepare :183-365, phase1 :828-850,
 * phase1_remote :876-946, phase2 :1150-1591, phase3_cleanup :1690-1910), pve-guest-common
 * src/PVE/StorageTunnel.pm:13-133 (storage_migrate through the tunnel) and
 * src/PVE/AbstractMigrate.pm:104-251 (the phases and their log) at 4a8f6cb. The run of the
 * phases and the progress lines are shared with the in-cluster worker (migration.ts).
 */
import { die } from './errors.ts';
import { powerOff } from './guest-cloudinit.ts';
import { baseName } from './migrate-local.ts';
import { checkLocalResources, type LocalVolume, scanVolumes } from './migrate-scan.ts';
import { AbstractMigration, type IdMap, mapId, message, storageCheckEnabled } from './migration.ts';
import { migrationLinks, sharedCopyProgress, sharedMirrorProgress, sharedRamProgress } from './migration-copy.ts';
import { type GuestCarry, openTunnel, type TunnelSession, WS_TUNNEL_VERSION } from './mtunnel.ts';
import {
  configMemoryMiB,
  DRIVE_KEY_RE,
  getOpt,
  isCdrom,
  NET_KEY_RE,
  parseDrive,
  parseNic,
  printNic,
  setOpt,
  UNUSED_KEY_RE,
} from './qemu-config.ts';
import type { RemoteApi } from './remote-endpoints.ts';
import { checkLock, DURATIONS, loadVm } from './routes/qemu-common.ts';
import { freeVmVolumes, printDrive } from './routes/qemu-drives.ts';
import type { VmState } from './state.ts';
import { MiB } from './storage.ts';
import { isWorkerDeath } from './tasks.ts';

export interface RemoteMigrateOpts {
  node: string;
  vmid: number;
  online: boolean;
  delete: boolean;
  storagemap: IdMap;
  bridgemap?: IdMap | undefined;
  bwlimit?: number | undefined;
  api: RemoteApi;
  targetNode: string;
  targetVmid: number;
}

export class RemoteMigration extends AbstractMigration<RemoteMigrateOpts> {
  private vm!: VmState;
  private tunnel: TunnelSession | undefined;
  private local = new Map<string, LocalVolume>();
  private readonly volumeMap = new Map<string, string>();
  /** Drive key -> the target's NBD volume (online local disks). */
  private readonly nbd = new Map<string, { volid: string; lv: LocalVolume }>();
  private forwarded = false;

  override async run(): Promise<void> {
    try {
      await super.run();
    } finally {
      // The websocket goes with the worker (also when it dies): the target's task ends.
      this.tunnel?.disconnect();
    }
  }

  /** The links a stream crosses: the source node's network out, the target's in, and a volume's two storages. */
  private links(lv?: LocalVolume) {
    const tunnel = this.tunnel!;
    const target = lv ? tunnel.c.storage(this.o.targetNode, lv.targetsid) : undefined;
    return migrationLinks(
      { c: this.c, node: this.o.node, ...(lv ? { storage: lv.source } : {}) },
      { c: tunnel.c, node: this.o.targetNode, ...(target ? { storage: target } : {}) },
    );
  }

  /** write_tunnel, with the websocket tunnel helper's own lines. */
  private async cmd<T>(name: string, params: Record<string, unknown>, fn: (vm: VmState) => T | Promise<T>): Promise<T> {
    const tunnel = this.tunnel!;
    this.log.print(`tunnel: -> sending command "${name}" to remote`);
    await this.log.step(DURATIONS.tunnelCommand);
    const res = await tunnel.command(name, params, fn);
    this.log.print('tunnel: <- got reply');
    return res;
  }

  private carry(): GuestCarry {
    const vm = this.vm;
    return {
      guestAgent: vm.guestAgent,
      guestDisk: vm.guestDisk,
      cloudinitSection: vm.cloudinitSection,
      ...(vm.ciDrive ? { ciDrive: vm.ciDrive } : {}),
      interfaces: vm.guest.interfaces,
      agentReadyAt: vm.agentReadyAt,
    };
  }

  /** prepare: the checks, then fork_websocket_tunnel (the target's mtunnel) and its version. */
  protected override async prepare(): Promise<boolean> {
    const { c, o, log } = this;
    const vm = loadVm(c, o.node, o.vmid);
    this.vm = vm;
    checkLock(vm, false);
    const running = vm.status === 'running';
    if (running && !o.online) die("can't migrate running VM without --online");
    if (running && c.profile.profile === '9.2')
      log.log('warn', 'conntrack state migration not supported or disabled, active connections might get dropped');
    checkLocalResources(c, vm, o.targetNode, false, log);
    const storages = new Set<string>();
    for (const volid of volumeIds(vm)) {
      const sid = volid.slice(0, volid.indexOf(':'));
      storageCheckEnabled(c, sid);
      storages.add(mapId(o.storagemap, sid));
    }
    const bridges = new Set<string>();
    for (const [k, v] of Object.entries(vm.config)) {
      if (!NET_KEY_RE.test(k)) continue;
      const b = getOpt(parseNic(v).p, 'bridge');
      if (b) bridges.add(mapId(o.bridgemap, b));
    }
    this.tunnel = await openTunnel(o.api, o.targetNode, o.targetVmid, [...storages].sort(), [...bridges].sort());
    await log.step(DURATIONS.tunnelCommand);
    log.info(`remote: started tunnel worker '${this.tunnel.upid}'`);
    await this.cmd('version', {}, () => ({ api: WS_TUNNEL_VERSION, age: 0 }));
    log.info(`local WS tunnel version: ${WS_TUNNEL_VERSION}`);
    log.info(`remote WS tunnel version: ${WS_TUNNEL_VERSION}`);
    log.info(`minimum required WS tunnel version: ${WS_TUNNEL_VERSION}`);
    log.print('websocket tunnel started');
    return running;
  }

  protected override async phase1(): Promise<void> {
    const { c, o, log, vm } = this;
    log.info(`starting migration of VM ${o.vmid} to node '${o.targetNode}' (${o.api.spec.host})`);
    vm.config.lock = 'migrate';
    // get_bwlimit asks the target for each volume (scan_local_volumes, before it logs them).
    for (const _ of volumeIds(vm))
      await this.cmd('bwlimit', { operation: 'migration', storages: [], bwlimit: o.bwlimit }, () => ({}));
    this.local = scanVolumes(c, vm, {
      target: o.targetNode,
      storagemap: o.storagemap,
      remote: true,
      running: this.running,
      withLocalDisks: true,
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
    await this.phase1Remote();
  }

  /** PVE::StorageTunnel::storage_migrate: disk-import, the stream, query-disk-import. */
  private async storageMigrate(lv: LocalVolume): Promise<string> {
    const { o, log, vm } = this;
    const tunnel = this.tunnel!;
    const owner = vm.vmid;
    const name = baseName(lv.vol).replace(`-${owner}-`, `-${o.targetVmid}-`);
    await this.cmd('disk-import', { storage: lv.targetsid, volname: name, format: lv.vol.format }, (tvm) =>
      tunnel.diskImport(tvm, lv.targetsid, name, lv.vol.format, lv.vol.size),
    );
    if (!this.forwarded) {
      this.forwarded = true;
      log.print(`tunnel: accepted new connection on '/run/pve/${o.vmid}.storage'`);
      log.print('tunnel: requesting WS ticket via tunnel');
      log.print(`tunnel: established new WS for forwarding '/run/pve/${o.vmid}.storage'`);
    }
    if (!tunnel.importFailed) {
      // The stream shares the source storage, both clusters' node networks and the target storage
      // with every other copy (bandwidth.ts); it stops when the tunnel goes (query-disk-import tells).
      await sharedCopyProgress(this.c, log, lv.vol.size, this.links(lv), lv.bwlimit, () => tunnel.reachable);
    }
    const res = await this.cmd('query-disk-import', {}, () => tunnel.queryDiskImport());
    if (res.status !== 'complete') {
      log.log('err', `unknown query-disk-import result: ${res.status}`);
      die('disk import failed - see log above');
    }
    return res.volid;
  }

  /** phase1_remote: the config for the target (volumes and bridges mapped), NBD disks, `config`. */
  private async phase1Remote(): Promise<void> {
    const { o, log, vm } = this;
    const tunnel = this.tunnel!;
    const conf = mapVolumes(vm.config, this.volumeMap);
    for (const k of Object.keys(conf)
      .filter((x) => NET_KEY_RE.test(x))
      .sort()) {
      const nic = parseNic(conf[k]!);
      const b = getOpt(nic.p, 'bridge');
      if (!b) continue;
      const tb = mapId(o.bridgemap, b);
      setOpt(nic.p, 'bridge', tb);
      conf[k] = printNic(nic);
      log.info(`mapped: ${k} from ${b} to ${tb}`);
    }
    for (const [ds, v] of Object.entries(conf)) {
      if (!DRIVE_KEY_RE.test(ds)) continue;
      const d = parseDrive(v);
      if (isCdrom(d)) continue;
      const lv = this.local.get(d.file);
      if (lv?.mode !== 'online') continue;
      log.info(`Allocating volume for drive '${ds}' on remote storage '${lv.targetsid}'..`);
      const nv = await this.cmd('disk', { storage: lv.targetsid, format: lv.vol.format }, (tvm) =>
        tunnel.allocNbd(tvm, lv.targetsid, lv.vol.size, lv.vol.format),
      );
      log.info(`volume '${d.file}' is '${nv.volid}' on the target`);
      conf[ds] = printDrive(nv.volid, d);
      this.nbd.set(ds, { volid: nv.volid, lv });
    }
    delete conf.lock;
    await this.cmd('config', { conf: '…' }, (tvm) => tunnel.config(tvm, conf, this.carry()));
  }

  /** phase1_cleanup: the source unlocked; the tunnel quits with cleanup (the target's copy goes). */
  protected override async phase1Cleanup(): Promise<void> {
    const { log, vm } = this;
    log.info('aborting phase 1 - cleanup resources');
    delete vm.config.lock;
    await this.finishTunnel(true);
  }

  /** finish_tunnel: `quit`, errors logged (the target keeps what it had if the tunnel is gone). */
  private async finishTunnel(cleanup: boolean): Promise<void> {
    const tunnel = this.tunnel;
    if (!tunnel) return;
    try {
      await this.cmd('quit', { cleanup: cleanup ? 1 : 0 }, (tvm) => tunnel.quit(tvm, cleanup));
    } catch (e) {
      if (isWorkerDeath(e)) throw e;
      this.log.log('err', message(e));
      this.errors = true;
    }
    tunnel.disconnect();
  }

  /** phase2: QEMU started on the target, the mirrors to its NBD volumes, the RAM. */
  protected override async phase2(): Promise<void> {
    const { o, log, vm } = this;
    const tunnel = this.tunnel!;
    await this.cmd('start', { start_params: { statefile: 'unix', skiplock: 1 } }, (tvm) =>
      tunnel.startVm(tvm, this.carry()),
    );
    await log.step(DURATIONS.start);
    log.info('start remote tunnel');
    if (this.nbd.size) {
      log.info('starting storage migration');
      for (const [ds, { lv }] of this.nbd) {
        const d = `drive-${ds}`;
        log.info(`${ds}: start migration to nbd:unix:/run/qemu-server/${o.vmid}_nbd.migrate:exportname=${d}`);
        log.info(`drive mirror is starting for ${d}${lv.bwlimit ? ` with bandwidth limit: ${lv.bwlimit} KiB/s` : ''}`);
        await sharedMirrorProgress(this.c, log, d, lv.vol.size, this.links(lv), lv.bwlimit, () => tunnel.reachable);
      }
      log.info("all 'mirror' jobs are ready");
    }
    const uri = `unix:/run/qemu-server/${o.vmid}.migrate`;
    const mem = configMemoryMiB(vm.config) * MiB;
    log.info(`starting online/live migration on ${uri}`);
    log.info('set migration capabilities');
    log.info('migration downtime limit: 100 ms');
    log.info('set migration parameters');
    log.info(`start migrate command to ${uri}`);
    await sharedRamProgress(this.c, log, mem, this.links(), o.bwlimit, () => tunnel.reachable);
    for (const ds of this.nbd.keys()) log.info(`drive-${ds}: mirror-job finished`);
  }

  protected override async phase2Cleanup(): Promise<void> {
    const { log, vm } = this;
    this.phase2errors = true;
    log.info('aborting phase 2 - cleanup resources');
    log.info('migrate_cancel');
    delete vm.config.lock;
    for (const ds of this.nbd.keys()) {
      log.info(`drive-${ds}: Cancelling block job`);
      log.info(`drive-${ds}: Done.`);
    }
    const tunnel = this.tunnel!;
    try {
      await this.cmd('stop', {}, (tvm) => tunnel.stopVm(tvm));
    } catch (e) {
      if (isWorkerDeath(e)) throw e;
      log.log('err', message(e));
      this.errors = true;
    }
    await this.finishTunnel(true);
  }

  /** phase3_cleanup for a remote migration: the target resumed and unlocked, the source stopped. */
  protected override async phase3Cleanup(): Promise<void> {
    const { c, o, log, vm } = this;
    const tunnel = this.tunnel!;
    await log.step(DURATIONS.migrateFinish);
    if (this.running) {
      const step = async (name: string, fn: (tvm: VmState) => void) => {
        try {
          await this.cmd(name, {}, fn);
        } catch (e) {
          if (isWorkerDeath(e)) throw e;
          log.log('err', message(e));
          this.errors = true;
        }
      };
      if (this.nbd.size) {
        log.info('stopping NBD storage migration server on target.');
        await step('nbdstop', () => {});
      }
      await step('resume', (tvm) => tunnel.resume(tvm));
    }
    // "always stop local VM with nocheck, since config is moved already"
    if (vm.status === 'running') {
      powerOff(c, vm);
    }
    try {
      await this.cmd('unlock', {}, (tvm) => tunnel.unlock(tvm));
    } catch (e) {
      if (isWorkerDeath(e)) throw e;
      log.log('err', message(e));
      this.errors = true;
    }
    await this.finishTunnel(false);
    if (o.delete) {
      // destroy_vm($storecfg, $vmid, 1): the config and its volumes.
      freeVmVolumes(c, vm, false);
      if (c.vms.get(o.vmid) === vm) c.vms.delete(o.vmid);
    }
  }
}

/** The storage volumes of a VM (get_vm_volumes: every volid of foreach_volid with a storage). */
function volumeIds(vm: VmState): string[] {
  const out = new Set<string>();
  const visit = (conf: Record<string, string>) => {
    for (const [k, v] of Object.entries(conf)) {
      if (!DRIVE_KEY_RE.test(k) && !UNUSED_KEY_RE.test(k) && k !== 'vmstate') continue;
      const f = k === 'vmstate' || UNUSED_KEY_RE.test(k) ? v : parseDrive(v).file;
      if (f.indexOf(':') > 0 && !f.startsWith('/')) out.add(f);
    }
  };
  visit(vm.config);
  visit(vm.pending);
  for (const s of vm.snapshots.values()) visit(s.config);
  return [...out];
}

/** A copy of a config with its volumes mapped (update_volume_ids on the remote config). */
function mapVolumes(config: Record<string, string>, map: ReadonlyMap<string, string>): Record<string, string> {
  const conf = { ...config };
  for (const [k, v] of Object.entries(conf)) {
    if (!DRIVE_KEY_RE.test(k) && !UNUSED_KEY_RE.test(k)) continue;
    const d = parseDrive(v);
    const nv = map.get(d.file);
    if (nv) conf[k] = UNUSED_KEY_RE.test(k) ? nv : printDrive(nv, d);
  }
  return conf;
}
