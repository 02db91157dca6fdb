/**
 * The Proxmox VE client for one site: everything else in the provider talks to PVE through this
 * class. It adds the typed API methods (access, cluster, nodes, storage, qemu, tasks) to the
 * request execution of client-core.ts.
 *
 * - Typed methods wrap the builders of requests-cluster.ts and requests-qemu.ts; capability guards
 *   refuse calls the site or the credentials cannot do (import-from on PVE < 7.2, skiplock with a
 *   token...) before anything is sent.
 * - Tasks: `checkTask` takes one non-blocking look (the controller), `waitTask` polls (the CLI).
 */
import type { Capabilities } from './capabilities.ts';
import { type CallOptions, PveClientCore, type TaskWaitOptions } from './client-core.ts';
import {
  type ErrorContext,
  NotFoundError,
  PveError,
  TaskFailedError,
  TimeoutError,
  UnsupportedError,
} from './errors.ts';
import type { Upid } from './requests.ts';
import * as Cluster from './requests-cluster.ts';
import * as Qemu from './requests-qemu.ts';
import { scrub } from './secret.ts';
import type { HttpMethod } from './transport.ts';
import type {
  AgentExecStatus,
  AgentInterface,
  CloudInitPendingEntry,
  ClusterResource,
  ClusterResourceType,
  MigratePrecondition,
  NetworkInterface,
  NodeListEntry,
  NodeStatus,
  PendingEntry,
  Permissions,
  PoolInfo,
  PoolListEntry,
  StorageConfig,
  StorageEntry,
  StorageStatus,
  StorageVolume,
  TaskListEntry,
  TaskLogLine,
  TaskStatus,
  VersionInfo,
  VmConfig,
  VmListEntry,
  VmStatus,
} from './types.ts';
import { exitOutcome, mustParseUpid } from './upid.ts';

export type TaskCheck =
  | { state: 'running'; status: TaskStatus }
  | { state: 'ok'; warnings: number; status: TaskStatus }
  | { state: 'failed'; error: TaskFailedError; status: TaskStatus };

export class PveClient extends PveClientCore {
  private requireRootTicket(what: string, ctx: ErrorContext): void {
    if (this.auth.isRootTicket) return;
    throw new UnsupportedError(
      ctx,
      'root-ticket',
      `${what} is only allowed for root@pam authenticated with a password (PVE: 'Only root may use this option.'); ` +
        `${this.auth.authId} cannot. Wait for the lock to clear, or give the provider root@pam password credentials`,
    );
  }

  /** Refuse `import-from` values the site or the credentials cannot use (see DESIGN "Corrections"). */
  private async checkImports(config: Qemu.QemuConfigInput, ctx: ErrorContext): Promise<void> {
    const sources: Array<{ key: string; src: string }> = [];
    for (const [key, v] of Object.entries(config)) {
      if (typeof v !== 'string') continue;
      const m = /(?:^|,)import-from=([^,]+)/.exec(v);
      if (m) sources.push({ key, src: m[1]! });
    }
    if (!sources.length) return;
    const caps = await this.capabilities();
    for (const { key, src } of sources) {
      if (!caps.importFrom) {
        throw new UnsupportedError(
          ctx,
          'import-from',
          `${key}: PVE ${caps.version.text} has no import-from (needs 7.2 or later): create the VM by cloning a template instead`,
        );
      }
      if (src.startsWith('/')) {
        if (!caps.rootTicket) {
          throw new UnsupportedError(
            ctx,
            'import-from-path',
            `${key}: an absolute import-from path needs root@pam with a password (PVE: 'Only root can pass arbitrary filesystem paths.'); ${caps.authId} cannot`,
          );
        }
        continue;
      }
      const vtype = /^[^:]+:([a-z]+)\//.exec(src)?.[1];
      if (vtype === 'import' && !caps.importContent) {
        throw new UnsupportedError(
          ctx,
          'import-content',
          `${key}: '${src}' is an 'import' volume, usable as import-from source only from PVE 8.3 (site has ${caps.version.text})`,
        );
      }
      if (vtype && vtype !== 'import' && vtype !== 'images') {
        throw new UnsupportedError(
          ctx,
          'import-from-type',
          `${key}: '${src}' has content type '${vtype}'; import-from accepts 'images'${caps.importContent ? " or 'import'" : ''} volumes` +
            ` (move the image to an 'import' storage, use a template, or use root@pam password auth with its absolute path)`,
        );
      }
    }
  }

  // --- access / cluster --------------------------------------------------------------------------

  version(o?: CallOptions): Promise<VersionInfo> {
    return this.call(Cluster.version(), o);
  }

  /** Effective privileges of the client's identity (or `userid`) per ACL path. */
  permissions(opts: { path?: string; userid?: string } = {}): Promise<Permissions> {
    return this.call(Cluster.permissions(opts));
  }

  nextId(): Promise<number> {
    return this.call(Cluster.nextId());
  }

  /** Whether a VMID is free now (advisory: a concurrent create may still take it). */
  async isVmidFree(vmid: number): Promise<boolean> {
    try {
      await this.call(Cluster.nextId(vmid));
      return true;
    } catch (e) {
      if (e instanceof PveError && e.kind === 'already-exists') return false;
      throw e;
    }
  }

  clusterResources(type?: ClusterResourceType): Promise<ClusterResource[]> {
    return this.call(Cluster.clusterResources(type));
  }

  clusterStatus(): Promise<Array<Record<string, unknown>>> {
    return this.call(Cluster.clusterStatus());
  }

  listPools(): Promise<PoolListEntry[]> {
    return this.call(Cluster.listPools());
  }

  getPool(poolid: string): Promise<PoolInfo> {
    return this.call(Cluster.getPool(poolid));
  }

  createPool(poolid: string, comment?: string): Promise<null> {
    return this.call(Cluster.createPool(poolid, comment));
  }

  // --- nodes -------------------------------------------------------------------------------------

  listNodes(): Promise<NodeListEntry[]> {
    return this.call(Cluster.listNodes());
  }

  nodeStatus(node: string): Promise<NodeStatus> {
    return this.call(Cluster.nodeStatus(node));
  }

  nodeNetwork(node: string, type?: Cluster.NetworkTypeFilter): Promise<NetworkInterface[]> {
    return this.call(Cluster.nodeNetwork(node, type));
  }

  /** Bridges of a node (`type=any_bridge`: Linux and OVS bridges). */
  bridges(node: string): Promise<NetworkInterface[]> {
    return this.call(Cluster.nodeNetwork(node, 'any_bridge'));
  }

  nodeStorages(
    node: string,
    opts?: { content?: string; enabled?: boolean; storage?: string },
  ): Promise<StorageEntry[]> {
    return this.call(Cluster.nodeStorages(node, opts));
  }

  storageConfig(storage: string): Promise<StorageConfig> {
    return this.call(Cluster.storageConfig(storage));
  }

  cloudInitPending(node: string, vmid: number): Promise<CloudInitPendingEntry[]> {
    return this.call(Qemu.cloudInitPending(node, vmid));
  }

  /** Start a program in the guest; its PID for agentExecStatus. */
  async agentExec(node: string, vmid: number, command: string[]): Promise<{ pid: number }> {
    const caps = await this.capabilities();
    return this.call(Qemu.agentExec(node, vmid, command, caps.version.major >= 8));
  }

  agentExecStatus(node: string, vmid: number, pid: number): Promise<AgentExecStatus> {
    return this.call(Qemu.agentExecStatus(node, vmid, pid));
  }

  storageStatus(node: string, storage: string): Promise<StorageStatus> {
    return this.call(Cluster.storageStatus(node, storage));
  }

  storageContent(node: string, storage: string, opts?: { content?: string; vmid?: number }): Promise<StorageVolume[]> {
    return this.call(Cluster.storageContent(node, storage, opts));
  }

  /** Start a download of `url` onto a storage of `node` (a `download` task). */
  downloadUrl(node: string, storage: string, opts: Cluster.DownloadUrlOptions): Promise<Upid> {
    return this.call(Cluster.downloadUrl(node, storage, opts));
  }

  /** Remove a volume (an `imgdel` task). */
  deleteVolume(node: string, storage: string, volume: string): Promise<Upid | null> {
    return this.call(Cluster.deleteVolume(node, storage, volume));
  }

  // --- qemu --------------------------------------------------------------------------------------

  listVms(node: string): Promise<VmListEntry[]> {
    return this.call(Qemu.listVms(node));
  }

  async createVm(
    node: string,
    vmid: number,
    config: Qemu.QemuConfigInput,
    opts: Qemu.CreateOptions = {},
  ): Promise<Upid> {
    const r = Qemu.createVm(node, vmid, config, opts);
    await this.checkImports(config, { site: this.site, method: r.method, path: r.path });
    return this.call(r);
  }

  cloneVm(node: string, vmid: number, newid: number, opts?: Qemu.CloneOptions): Promise<Upid> {
    return this.call(Qemu.cloneVm(node, vmid, newid, opts));
  }

  vmConfig(node: string, vmid: number, opts?: { current?: boolean }): Promise<VmConfig> {
    return this.call(Qemu.vmConfig(node, vmid, opts));
  }

  /** `POST .../config` (a `qmconfig` task, or null) or with `sync` `PUT .../config` (null). */
  async updateVmConfig(
    node: string,
    vmid: number,
    change: Qemu.ConfigChange,
    opts: { sync?: boolean } = {},
  ): Promise<Upid | null> {
    const r = opts.sync ? Qemu.updateVmConfigSync(node, vmid, change) : Qemu.updateVmConfigAsync(node, vmid, change);
    const ctx = { site: this.site, method: r.method, path: r.path };
    if (change.skiplock) this.requireRootTicket('skiplock', ctx);
    if (change.set) await this.checkImports(change.set, ctx);
    return this.call(r);
  }

  /** Clear a stale lock (`qm unlock` over the API): root@pam with a ticket only. */
  async unlockVm(node: string, vmid: number): Promise<void> {
    const r = Qemu.unlockVm(node, vmid);
    this.requireRootTicket('unlocking a VM', { site: this.site, method: r.method, path: r.path });
    await this.call(r);
  }

  vmPending(node: string, vmid: number): Promise<PendingEntry[]> {
    return this.call(Qemu.vmPending(node, vmid));
  }

  vmSnapshots(node: string, vmid: number): Promise<Array<{ name: string; parent?: string }>> {
    return this.call(Qemu.vmSnapshots(node, vmid));
  }

  snapshotConfig(node: string, vmid: number, snapname: string): Promise<Record<string, unknown>> {
    return this.call(Qemu.snapshotConfig(node, vmid, snapname));
  }

  /** Grow a disk; a UPID on PVE >= 8.0, null (done) before. */
  async resizeDisk(
    node: string,
    vmid: number,
    disk: string,
    size: string,
    opts: { digest?: string; skiplock?: boolean } = {},
  ) {
    const r = Qemu.resizeDisk(node, vmid, disk, size, opts);
    if (opts.skiplock) this.requireRootTicket('skiplock', { site: this.site, method: r.method, path: r.path });
    this.noteDestroy();
    return this.call(r);
  }

  migratePrecondition(node: string, vmid: number, target?: string): Promise<MigratePrecondition> {
    return this.call(Qemu.migratePrecondition(node, vmid, target));
  }

  migrateVm(node: string, vmid: number, opts: Parameters<typeof Qemu.migrateVm>[2]): Promise<Upid> {
    return this.call(Qemu.migrateVm(node, vmid, opts));
  }

  remoteMigrateVm(node: string, vmid: number, opts: Parameters<typeof Qemu.remoteMigrateVm>[2]): Promise<Upid> {
    return this.call(Qemu.remoteMigrateVm(node, vmid, opts));
  }

  moveDisk(node: string, vmid: number, opts: Parameters<typeof Qemu.moveDisk>[2]): Promise<Upid> {
    return this.call(Qemu.moveDisk(node, vmid, opts));
  }

  vmStatus(node: string, vmid: number): Promise<VmStatus> {
    return this.call(Qemu.vmStatus(node, vmid));
  }

  /** The VM's status, or undefined when its config does not exist on that node. */
  async findVmStatus(node: string, vmid: number): Promise<VmStatus | undefined> {
    try {
      return await this.vmStatus(node, vmid);
    } catch (e) {
      if (e instanceof NotFoundError && e.resource === 'vm') return undefined;
      throw e;
    }
  }

  async powerVm(node: string, vmid: number, action: Qemu.PowerAction, opts: Qemu.PowerOptions = {}): Promise<Upid> {
    const r = Qemu.vmPower(node, vmid, action, opts);
    if (opts.skiplock) this.requireRootTicket('skiplock', { site: this.site, method: r.method, path: r.path });
    this.noteDestroy();
    return this.call(r);
  }

  startVm(node: string, vmid: number, opts?: Qemu.PowerOptions): Promise<Upid> {
    return this.powerVm(node, vmid, 'start', opts);
  }

  stopVm(node: string, vmid: number, opts?: Qemu.PowerOptions): Promise<Upid> {
    return this.powerVm(node, vmid, 'stop', opts);
  }

  shutdownVm(node: string, vmid: number, opts?: Qemu.PowerOptions): Promise<Upid> {
    return this.powerVm(node, vmid, 'shutdown', opts);
  }

  rebootVm(node: string, vmid: number, opts?: Qemu.PowerOptions): Promise<Upid> {
    return this.powerVm(node, vmid, 'reboot', opts);
  }

  async deleteVm(node: string, vmid: number, opts: Qemu.DeleteOptions = {}): Promise<Upid> {
    const r = Qemu.deleteVm(node, vmid, opts);
    if (opts.skiplock) this.requireRootTicket('skiplock', { site: this.site, method: r.method, path: r.path });
    this.noteDestroy();
    return this.call(r);
  }

  templateVm(node: string, vmid: number, opts?: { disk?: string }): Promise<Upid> {
    return this.call(Qemu.templateVm(node, vmid, opts));
  }

  agentNetworkInterfaces(node: string, vmid: number): Promise<AgentInterface[]> {
    return this.call(Qemu.agentNetworkInterfaces(node, vmid));
  }

  agentPing(node: string, vmid: number): Promise<null> {
    return this.call(Qemu.agentPing(node, vmid));
  }

  // --- tasks -------------------------------------------------------------------------------------

  async taskStatus(upid: string, o?: CallOptions): Promise<TaskStatus> {
    return this.call(Cluster.taskStatus(mustParseUpid(upid).node, upid), o);
  }

  async taskLog(upid: string, opts?: { start?: number; limit?: number }): Promise<TaskLogLine[]> {
    return this.call(Cluster.taskLog(mustParseUpid(upid).node, upid, opts));
  }

  async stopTask(upid: string): Promise<null> {
    return this.call(Cluster.stopTask(mustParseUpid(upid).node, upid));
  }

  listTasks(node: string, opts?: Cluster.TaskListOptions): Promise<TaskListEntry[]> {
    return this.call(Cluster.listTasks(node, opts));
  }

  /** Running tasks of a node (one request), optionally for one VM. */
  activeTasks(node: string, opts: { vmid?: number } = {}): Promise<TaskListEntry[]> {
    return this.call(
      Cluster.listTasks(node, { source: 'active', ...(opts.vmid !== undefined ? { vmid: opts.vmid } : {}) }),
    );
  }

  private async lastLogLines(upid: string, n = 10): Promise<string[]> {
    try {
      const lines = await this.taskLog(upid, { start: 0, limit: 5000 });
      return lines.slice(-n).map((l) => l.t);
    } catch {
      return [];
    }
  }

  /**
   * One non-blocking look at a task (for the controller: store the UPID, requeue, look again).
   * A failed task is reported, not thrown.
   */
  async checkTask(upid: string, o?: CallOptions): Promise<TaskCheck> {
    const status = await this.taskStatus(upid, o);
    if (status.status !== 'stopped') return { state: 'running', status };
    const outcome = exitOutcome(status.exitstatus ?? '');
    if (outcome.ok) return { state: 'ok', warnings: outcome.warnings, status };
    const tail = await this.lastLogLines(upid);
    const secrets = this.knownSecrets();
    const error = new TaskFailedError(
      { site: this.site, method: 'GET', path: '/nodes/{node}/tasks/{upid}/status' },
      upid,
      scrub(outcome.error, secrets),
      tail.map((l) => scrub(l, secrets)),
    );
    return { state: 'failed', error, status };
  }

  /**
   * Wait for a task (for the CLI): polls with a growing delay; resolves with the warning count
   * (`WARNINGS: N` is a success), throws TaskFailedError or TimeoutError.
   */
  async waitTask(upid: string, opts: TaskWaitOptions = {}): Promise<{ warnings: number; status: TaskStatus }> {
    const timeoutMs = opts.timeoutMs ?? this.opts.task?.timeoutMs ?? 15 * 60_000;
    const maxDelay = opts.pollMaxMs ?? this.opts.task?.pollMaxMs ?? 5000;
    let delay = opts.pollInitialMs ?? this.opts.task?.pollInitialMs ?? 250;
    const deadline = this.now() + timeoutMs;
    for (;;) {
      const c = await this.checkTask(upid, opts.signal ? { signal: opts.signal } : {});
      if (c.state === 'ok') return { warnings: c.warnings, status: c.status };
      if (c.state === 'failed') throw c.error;
      const left = deadline - this.now();
      if (left <= 0) {
        const u = mustParseUpid(upid);
        throw new TimeoutError(
          { site: this.site },
          `task ${u.type}${u.id ? ` ${u.id}` : ''} on ${u.node} still running after ${Math.round(timeoutMs / 1000)} s (${upid})`,
        );
      }
      await this.sleep(Math.min(delay, left), opts.signal);
      delay = Math.min(maxDelay, Math.ceil(delay * 1.5));
    }
  }
}

export type { Capabilities, HttpMethod };
