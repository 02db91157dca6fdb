/**
 * The target side of a remote migration: qemu-server's `POST /nodes/{node}/qemu/{vmid}/mtunnel`
 * (the checks, the placeholder config with `lock: create`, a `qmtunnel` task on the target) and
 * the tunnel commands the source's worker sends through it (version, bwlimit, disk-import,
 * query-disk-import, disk, config, start, resume, nbdstop, stop, unlock, quit). Each command runs
 * under the target VM's flock, checks that the config still has the tunnel's lock, and is logged
 * in the target's task (`received command '…'`). A command that fails answers
 * `failed to handle '<cmd>' command - <error>`, which the source reports as
 * `error - tunnel command '<json>' failed - …`.
 *
 * The tunnel is in-process (remote-endpoints.ts resolves the target); it breaks when the target
 * becomes unreachable (an `unavailable` fault, its node offline) or its task ends, and the source
 * then gets no reply. Source: qemu-server src/PVE/API2/Qemu.pm:6639-7237 (mtunnel) at e6352be,
 * pve-guest-common src/PVE/StorageTunnel.pm (disk-import) and src/PVE/Tunnel.pm:67-113
 * (write_tunnel's errors) at 4a8f6cb.
 */

import type { AuthInfo } from './auth.ts';
import { requirePriv } from './auth.ts';
import { die, PveHttpError, paramError } from './errors.ts';
import { copyGuestDisk } from './guest-state.ts';
import { allocNamed, storageFormats } from './migration.ts';
import { DRIVE_KEY_RE, isCdrom, parseDrive } from './qemu-config.ts';
import { checkCfsQuorum } from './quorum.ts';
import type { RemoteApi, SimEndpoint } from './remote-endpoints.ts';
import { checkBridges, checkConfigPerms } from './routes/qemu-common.ts';
import { freeVmVolumes } from './routes/qemu-drives.ts';
import { checkStorageAccessMigrate } from './routes/qemu-migrate-post.ts';
import type { ClusterState, VmState } from './state.ts';
import type { Volume } from './storage.ts';
import type { TaskHandle } from './tasks.ts';

/** $PVE::QemuMigrate::WS_TUNNEL_VERSION (2 in 7.4, 8.4 and 9.x). */
export const WS_TUNNEL_VERSION = 2;

/** What the source's worker carries over besides the config text: the guest itself. */
export interface GuestCarry {
  guestAgent: boolean;
  guestDisk: VmState['guestDisk'];
  cloudinitSection: Record<string, string>;
  ciDrive?: VmState['ciDrive'];
  interfaces: VmState['guest']['interfaces'];
  agentReadyAt: number;
}

export class TunnelSession {
  readonly ep: SimEndpoint;
  readonly c: ClusterState;
  readonly auth: AuthInfo;
  readonly node: string;
  readonly vmid: number;
  upid = '';
  private lock: string | undefined = 'create';
  private exit = false;
  private ended = false;
  private t: TaskHandle | undefined;
  private finish: (err?: Error) => void = () => {};
  private readonly cleanupVolumes = new Set<string>();
  private imp: { vol?: Volume; error?: string } | undefined;

  constructor(ep: SimEndpoint, auth: AuthInfo, node: string, vmid: number) {
    this.ep = ep;
    this.c = ep.state;
    this.auth = auth;
    this.node = node;
    this.vmid = vmid;
  }

  /** fork_worker('qmtunnel', …): the task lives until the source disconnects. */
  start(): string {
    const done = new Promise<void>((resolve, reject) => {
      this.finish = (err) => (err ? reject(err) : resolve());
    });
    done.catch(() => {});
    this.upid = this.ep.tasks.start(
      this.node,
      'qmtunnel',
      String(this.vmid),
      this.auth,
      async (t) => {
        this.t = t;
        t.log('mtunnel started');
        // Until the source disconnects, or the worker dies with its node (the abort's reason).
        await Promise.race([
          done,
          new Promise((_, reject) => t.signal.addEventListener('abort', () => reject(t.signal.reason), { once: true })),
        ]);
        t.log('mtunnel exited');
      },
      () => {
        this.ended = true;
      },
    );
    return this.upid;
  }

  private log(line: string): void {
    this.t?.log(line);
  }

  /** Whether the source can still reach the tunnel (task running, endpoint and node up). */
  get reachable(): boolean {
    const { c } = this;
    return !this.ended && this.ep.faults.unavailableUntil <= c.clock.now() && c.nodes.get(this.node)?.online === true;
  }

  /** The source's end of the connection closes (its worker ended, or died). */
  disconnect(): void {
    if (this.ended) return;
    this.finish(this.exit ? undefined : new Error('mtunnel exited unexpectedly'));
  }

  /**
   * One tunnel command: `$run_locked` (the flock, the config, the tunnel's lock) around its
   * handler. Throws the source's error text.
   */
  async command<T>(cmd: string, params: Record<string, unknown>, handler: (vm: VmState) => T | Promise<T>): Promise<T> {
    const json = JSON.stringify({ ...params, cmd });
    if (!this.reachable) throw new Error(`no reply to command '${json}': reading from tunnel failed: got timeout`);
    const fail = (msg: string): never => {
      throw new Error(`error - tunnel command '${json}' failed - ${msg}`);
    };
    if (this.exit) fail(`tunnel is in exit-mode, processing '${cmd}' cmd not possible`);
    this.log(`received command '${cmd}'`);
    let unlock: (() => void) | undefined;
    try {
      unlock = await this.c.flock(this.vmid).acquire(10_000, this.t ? { signal: this.t.signal } : {});
      const vm = this.c.vms.get(this.vmid);
      if (!vm || vm.node !== this.node)
        die(`Configuration file 'nodes/${this.node}/qemu-server/${this.vmid}.conf' does not exist`);
      if (this.lock && vm.config.lock !== this.lock) die('Encountered wrong lock - aborting mtunnel command handling.');
      return await handler(vm);
    } catch (e) {
      return fail(`failed to handle '${cmd}' command - ${e instanceof Error ? e.message : String(e)}`);
    } finally {
      unlock?.();
    }
  }

  /** `disk-import`: pvesm import on the target storage (the allocation happens as data arrives). */
  diskImport(vm: VmState, storage: string, volname: string, format: string, size: number): { format: string } {
    checkStorageAccessMigrate({ c: this.c, auth: this.auth }, storage, this.node, 'storage');
    const s = this.c.storage(this.node, storage)!;
    const formats = storageFormats(s);
    const fmt = formats.valid.includes(format) ? format : formats.default;
    try {
      this.imp = { vol: allocNamed(this.c, s, vm.vmid, size, fmt, volname) };
    } catch (e) {
      this.imp = { error: e instanceof Error ? e.message : String(e) };
    }
    return { format: fmt };
  }

  /** Whether the running import already failed (its process exited). */
  get importFailed(): boolean {
    return this.imp?.error !== undefined;
  }

  /** `query-disk-import`: complete (the new volid) or error (the import's output). */
  queryDiskImport(): { status: 'complete'; volid: string } | { status: 'error'; msg: string } {
    const imp = this.imp;
    if (!imp) die('no disk import running');
    this.imp = undefined;
    if (imp.error !== undefined || !imp.vol) {
      this.log(`disk-import: ${imp.error}`);
      return { status: 'error', msg: `${imp.error}\n` };
    }
    this.log(`disk-import: successfully imported '${imp.vol.volid}'`);
    this.cleanupVolumes.add(imp.vol.volid);
    return { status: 'complete', volid: imp.vol.volid };
  }

  /** `disk`: a volume for a drive-mirror (vm_migrate_alloc_nbd_disks). */
  allocNbd(vm: VmState, storage: string, size: number, format: string): Volume {
    checkStorageAccessMigrate({ c: this.c, auth: this.auth }, storage, this.node, 'storage');
    const s = this.c.storage(this.node, storage)!;
    const formats = storageFormats(s);
    const v = allocNamed(this.c, s, vm.vmid, size, formats.valid.includes(format) ? format : formats.default);
    this.cleanupVolumes.add(v.volid);
    return v;
  }

  /**
   * `config`: the source's config written through update_vm_api as the tunnel's user (its
   * privileges on every key, the storages and the bridges), then `lock: migrate`.
   */
  config(vm: VmState, conf: Record<string, string>, carry: GuestCarry): void {
    const c = this.c;
    const next = { ...conf };
    for (const k of ['lock', 'digest', 'parent']) delete next[k];
    const ctx = { c, auth: this.auth };
    delete vm.config.lock; // remove_lock 'create'
    try {
      checkConfigPerms(
        ctx,
        vm.vmid,
        Object.keys(next).filter((k) => k !== 'vmgenid' && k !== 'meta'),
      );
      for (const [k, v] of Object.entries(next)) {
        if (!DRIVE_KEY_RE.test(k)) continue;
        const d = parseDrive(v);
        if (isCdrom(d) && !d.file.includes(':')) continue;
        const sid = d.file.slice(0, d.file.indexOf(':'));
        requirePriv(c, this.auth, `/storage/${sid}`, ['Datastore.AllocateSpace', 'Datastore.Audit'], { any: true });
        if (!c.volume(this.node, d.file)) die(`volume '${d.file}' does not exist`);
      }
      checkBridges(ctx, next);
    } catch (e) {
      vm.config.lock = 'create'; // "revert to locked previous config"
      throw e;
    }
    vm.config = { ...next, lock: 'migrate' };
    vm.guestAgent = carry.guestAgent;
    vm.guestDisk = copyGuestDisk(carry.guestDisk);
    vm.cloudinitSection = { ...carry.cloudinitSection };
    if (carry.ciDrive) vm.ciDrive = carry.ciDrive;
    this.lock = 'migrate';
  }

  /** `start`: QEMU on the target, waiting for the incoming migration (paused until `resume`). */
  startVm(vm: VmState, carry: GuestCarry): void {
    vm.status = 'running';
    vm.paused = true;
    vm.startedAt = this.c.clock.now();
    vm.agentReadyAt = carry.agentReadyAt;
    vm.guest.interfaces = carry.interfaces.map((i) => ({ ...i }));
  }

  resume(vm: VmState): void {
    if (vm.status !== 'running') die(`VM ${vm.vmid} not running`);
    vm.paused = false;
  }

  stopVm(vm: VmState): void {
    vm.status = 'stopped';
    vm.paused = false;
    vm.guest.interfaces = [];
  }

  unlock(vm: VmState): void {
    if (this.lock && vm.config.lock === this.lock) delete vm.config.lock;
    this.lock = undefined;
  }

  /** `quit`: with `cleanup`, the imported volumes are freed and the VM destroyed; then exit mode. */
  quit(vm: VmState, cleanup: boolean): void {
    if (cleanup) {
      for (const volid of this.cleanupVolumes) {
        this.log(`freeing volume '${volid}' as part of cleanup`);
        const i = volid.indexOf(':');
        this.c.storage(this.node, volid.slice(0, i))?.volumes.delete(volid.slice(i + 1));
      }
      freeVmVolumes(this.c, vm, false);
      if (this.c.vms.get(vm.vmid) === vm) this.c.vms.delete(vm.vmid);
    }
    this.log('switching to exit-mode, waiting for client to disconnect');
    this.exit = true;
  }
}

/**
 * `POST /nodes/{node}/qemu/{vmid}/mtunnel` on the target, as the token: VM.Allocate on the VMID
 * and Sys.Incoming on `/`, every target storage (enabled there, Datastore.AllocateSpace, `images`)
 * and bridge (`bridge 'x' does not exist`), then create_and_lock_config (`unable to create empty
 * VM config - VM N already exists on node 'x'`, a 400 on `vmid`), then the `qmtunnel` worker.
 */
export function openTunnel(
  api: RemoteApi,
  node: string,
  vmid: number,
  storages: string[],
  bridges: string[],
): Promise<TunnelSession> {
  return api.call(async (ep, auth) => {
    const c = ep.state;
    if (c.profile.profile === '6.4')
      throw new PveHttpError(501, `Method 'POST /nodes/${node}/qemu/${vmid}/mtunnel' not implemented`);
    const n = c.nodes.get(node);
    if (!n)
      throw new PveHttpError(
        500,
        `hostname lookup '${node}' failed - failed to get address info for: ${node}: Name or service not known`,
      );
    if (!n.online) throw new PveHttpError(595, 'No route to host');
    requirePriv(c, auth, `/vms/${vmid}`, ['VM.Allocate']);
    requirePriv(c, auth, '/', ['Sys.Incoming']);
    for (const sid of storages) checkStorageAccessMigrate({ c, auth }, sid, node, 'storages');
    for (const b of bridges) if (!n.bridges.has(b)) die(`bridge '${b}' does not exist`);
    checkCfsQuorum(c); // on the target cluster, before create_and_lock_config (:6709)
    let unlock: () => void;
    try {
      unlock = await c.flock(vmid).acquire(5000);
    } catch (e) {
      return paramError({ vmid: `unable to create empty VM config - ${e instanceof Error ? e.message : e}\n` });
    }
    try {
      const vm = c.vms.get(vmid);
      const ct = c.containers.get(vmid);
      if (vm || ct)
        paramError({
          vmid: `unable to create empty VM config - ${ct ? 'CT' : 'VM'} ${vmid} already exists on node '${(vm ?? ct)!.node}'\n`,
        });
      c.newVm(vmid, node, { lock: 'create' });
    } finally {
      unlock();
    }
    const session = new TunnelSession(ep, auth, node, vmid);
    session.start();
    return session;
  });
}
