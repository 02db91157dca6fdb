/**
 * The ProxmoxVM ExternalClient: the seed's 14-step flow, each step a named unit, with the
 * zero-orphan rules of DESIGN.md. One call makes at most one mutation; long tasks are tracked
 * (UPID in status.atProvider.task) and looked at again on the next reconcile.
 */

import type { AtProvider, ProxmoxVM } from '../api/proxmoxvm.ts';
import { GiB, MiB, parseQuantity } from '../api/quantity.ts';
import {
  ANNOTATION_CREATE_PENDING,
  ANNOTATION_EXTERNAL_NAME,
  annotation,
  createIncomplete,
  externalName,
  policyAllows,
  setAnnotation,
  setCondition,
} from '../engine/resource.ts';
import { type EngineHooks, type ExternalClient, type ExternalObservation, ReasonedError } from '../engine/types.ts';
import { AlreadyExistsError, NotFoundError, type PveClient, PveError } from '../proxmox/index.ts';
import type { ClusterResource, StorageEntry, VmConfig } from '../proxmox/types.ts';
import type { SlotLimiter } from './limits.ts';
import {
  desiredDescription,
  desiredIpConfigs,
  desiredNets,
  desiredTags,
  diskBytes,
  diskOptions,
  driveSize,
  hasOwnerTag,
  markerUid,
  memoryBytes,
  parseNetValue,
  parseUserData,
  printNet,
  validateSpec,
  vmName,
} from './spec.ts';

/** Per-site state shared by every VM of that site: bulk observation caches and reservations. */
export class SiteContext {
  readonly name: string;
  readonly client: PveClient;
  readonly limiter: SlotLimiter;
  readonly vmidRange: { min: number; max: number };
  private resources: { at: number; data: Promise<ClusterResource[]> } | undefined;
  private active = new Map<string, { at: number; data: Promise<Set<string>> }>();
  /** VMIDs handed out by prepareCreate (-> resource uid) and not yet visible in Proxmox (the nextid race). */
  readonly reserved = new Map<number, string>();
  /** Memory/CPU promised to creates in flight, per node, for placement. */
  readonly inflight = new Map<string, { memory: number; cpu: number; holders: Set<string> }>();
  readonly ttlMs: number;
  readonly now: () => number;

  constructor(opts: {
    name: string;
    client: PveClient;
    limiter: SlotLimiter;
    vmidRange: { min: number; max: number };
    ttlMs?: number;
    now?: () => number;
  }) {
    this.name = opts.name;
    this.client = opts.client;
    this.limiter = opts.limiter;
    this.vmidRange = opts.vmidRange;
    this.ttlMs = opts.ttlMs ?? 1000;
    this.now = opts.now ?? Date.now;
  }

  /** One `/cluster/resources` per site per TTL serves every resource (invariant 7). */
  clusterResources(fresh = false): Promise<ClusterResource[]> {
    const t = this.now();
    if (!fresh && this.resources && t - this.resources.at < this.ttlMs) return this.resources.data;
    const data = this.client.clusterResources();
    this.resources = { at: t, data };
    data.catch(() => {
      if (this.resources?.data === data) this.resources = undefined;
    });
    return data;
  }

  invalidate(): void {
    this.resources = undefined;
    this.active.clear();
  }

  /** Active task UPIDs on a node, shared by every VM polling a task there. */
  activeTasks(node: string): Promise<Set<string>> {
    const t = this.now();
    const c = this.active.get(node);
    if (c && t - c.at < Math.min(this.ttlMs, 1000)) return c.data;
    const data = this.client.activeTasks(node).then((l) => new Set(l.map((x) => x.upid)));
    this.active.set(node, { at: t, data });
    data.catch(() => this.active.delete(node));
    return data;
  }
}

export interface VmClientOptions {
  hooks?: EngineHooks;
  /** How often a Ready VM's config is read again for drift (default 5 min). */
  driftIntervalMs?: number;
  /** How soon to look at an in-flight task again (default 2 s). */
  taskPollMs?: number;
  /** How soon to ask the guest agent again while a running VM reports no address yet (default 5 s). */
  agentPollMs?: number;
  /** Resolves Secret references (cloud-init password, SSH keys). */
  secret?: (ref: { name: string; key: string; namespace?: string }, r: ProxmoxVM) => Promise<string>;
  /**
   * VMIDs other resources of a site already hold as their external name (VMID -> uid), from the
   * store. After a restart the in-process reservations are gone; this keeps a new VM from picking
   * a VMID that a resource with a not-yet-created VM already owns.
   */
  vmidHolders?: (site: string) => Map<number, string>;
}

function reason(r: string, msg: string, retryable = false): ReasonedError {
  return new ReasonedError(r, msg, retryable);
}

function atp(r: ProxmoxVM): AtProvider {
  r.status ??= {};
  r.status.atProvider ??= {};
  return r.status.atProvider;
}

function setStep(r: ProxmoxVM, step: string): void {
  atp(r).step = step;
}

/** SSH keys as the client sends them (it percent-encodes `sshkeys` itself) and as PVE returns them, decoded. */
function sshKeysValue(keys: string[]): string {
  return keys.join('\n');
}

function decodeSshKeys(v: string | undefined): string {
  if (!v) return '';
  try {
    return decodeURIComponent(v);
  } catch {
    return v;
  }
}

function isReady(r: ProxmoxVM): boolean {
  return r.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
}

function ready(r: ProxmoxVM, status: 'True' | 'False', why: string, message?: string): void {
  setCondition(
    r,
    { type: 'Ready', status, reason: why, ...(message ? { message } : {}), observedGeneration: r.metadata.generation },
    Date.now(),
  );
}

interface ObservedVm {
  vmid: number;
  node: string;
  entry: ClusterResource;
  config?: VmConfig;
}

interface Change {
  kind: 'config' | 'resize' | 'start' | 'stop' | 'wait';
  why: string;
  set?: Record<string, string | number>;
  del?: string[];
  disk?: string;
  size?: string;
}

export class VmExternal implements ExternalClient<ProxmoxVM> {
  private readonly site: SiteContext;
  private readonly o: VmClientOptions;
  /** The change observe() found, for update() (one reconcile = observe then update). */
  private plan: Change | undefined;
  /** What preflight() resolved, for create(). */
  private createPlan:
    | {
        node: string;
        storage: string;
        ciStorage: string;
        source: { kind: 'blank' } | { kind: 'import'; from: string } | { kind: 'template'; vmid: number; node: string };
      }
    | undefined;
  private lastFull = new Map<string, { at: number; generation: number; digest: string }>();

  constructor(site: SiteContext, opts: VmClientOptions = {}) {
    this.site = site;
    this.o = opts;
  }

  /** Cloud-init values from Secret references (never logged, never in conditions). */
  private secrets: { password?: string; sshKeys: string[] } = { sshKeys: [] };

  /** When the Secrets were read, and for which references (re-read after 30 s or a change). */
  private secretsLoaded: { at: number; refs: string } | undefined;

  private async loadSecrets(r: ProxmoxVM): Promise<void> {
    const ci = r.spec.forProvider.cloudInit;
    const refs = [ci?.passwordSecretRef, ci?.sshKeysSecretRef].filter(Boolean);
    const refKey = JSON.stringify(refs);
    if (refs.length && this.secretsLoaded?.refs === refKey && this.site.now() - this.secretsLoaded.at < 30_000) return;
    this.secrets = { sshKeys: [] };
    this.secretsLoaded = undefined;
    if (!refs.length) return;
    if (!this.o.secret)
      throw reason(
        'SecretNotFound',
        "cloudInit Secret references need a Secret source: put the Secret among the manifests (apply) or in the resource's namespace (controller)",
      );
    const read = async (ref: { name: string; key: string; namespace?: string }, field: string) => {
      try {
        return await this.o.secret!(ref, r);
      } catch (e) {
        throw reason(
          'SecretNotFound',
          `${field}: Secret ${ref.namespace ? `${ref.namespace}/` : ''}${ref.name} key ${ref.key}: ${e instanceof Error ? e.message : String(e)}`,
          true,
        );
      }
    };
    if (ci?.passwordSecretRef)
      this.secrets.password = await read(ci.passwordSecretRef, 'spec.forProvider.cloudInit.passwordSecretRef');
    if (ci?.sshKeysSecretRef)
      this.secrets.sshKeys = (await read(ci.sshKeysSecretRef, 'spec.forProvider.cloudInit.sshKeysSecretRef'))
        .split('\n')
        .map((k) => k.trim())
        .filter(Boolean);
    this.secretsLoaded = { at: this.site.now(), refs: refKey };
  }

  /** The SSH keys of the spec, the userData and the Secret reference, in that order. */
  private sshKeys(r: ProxmoxVM, ud: { sshKeys: string[] }): string[] {
    return [...(r.spec.forProvider.cloudInit?.sshKeys ?? []), ...ud.sshKeys, ...this.secrets.sshKeys];
  }

  private get c(): PveClient {
    return this.site.client;
  }

  /** How soon to look at in-flight work again. */
  private get taskPollMs(): number {
    return this.o.taskPollMs ?? 2000;
  }

  private async hook(step: string, r: ProxmoxVM): Promise<void> {
    await this.o.hooks?.at?.(step, `${r.metadata.namespace ?? ''}/${r.metadata.name}`);
  }

  // ---------------------------------------------------------------- observe

  async observe(r: ProxmoxVM): Promise<ExternalObservation> {
    this.plan = undefined;
    const problems = validateSpec(r);
    if (problems.length) {
      throw reason('InvalidSpec', problems.map((p) => `${p.field}: ${p.message}`).join('; '));
    }
    const a = atp(r);
    a.site = this.site.name;
    await this.loadSecrets(r);
    const observeOnly =
      !policyAllows(r.spec.managementPolicies, 'Create') && !policyAllows(r.spec.managementPolicies, 'Update');
    const vmidText = externalName(r);
    if (!vmidText) return { exists: false, upToDate: false };
    let vmid = Number(vmidText);
    if (!Number.isInteger(vmid) || vmid < 100)
      throw reason(
        'InvalidExternalName',
        `crossplane.io/external-name must be a VMID (an integer >= 100); got '${vmidText}'`,
      );

    // In-flight task first: it decides whether anything else is worth looking at.
    const task = a.task;
    if (task) {
      const done = await this.taskDone(task);
      if (!done.finished) return { exists: true, upToDate: true, requeueAfterMs: this.taskPollMs };
      delete a.task;
      this.site.limiter.release(r.metadata.uid);
      this.releaseInflight(r);
      this.site.invalidate();
      if (done.error) {
        // Back off before looking again (invariant 4); the next observe finds whatever the
        // failed task left: nothing (create again), or our VM (complete it), never a stranger.
        a.step = 'Failed';
        const msg = done.error.message;
        const locked = /VM is locked|got timeout/.test(msg);
        const creating = /:(qmcreate|qmclone):/.test(task);
        const err = reason(locked ? 'Locked' : creating ? 'CreateFailed' : 'TaskFailed', msg, locked);
        if (creating) err.createFailure = true;
        throw err;
      }
    }

    // The bulk list (cached per site; our own mutations invalidate it) serves steady-state polls.
    let found = await this.locate(vmid, false);
    if (!found && createIncomplete(r) && !observeOnly) {
      // A create may have happened whose result was never recorded: find our VM by its marker.
      const byMarker = await this.findByMarker(r);
      if (byMarker) {
        setAnnotation(r, ANNOTATION_EXTERNAL_NAME, String(byMarker.vmid));
        vmid = byMarker.vmid;
        found = byMarker;
      }
    }
    if (!found) {
      delete a.vmId;
      a.state = 'absent';
      if (!r.spec.forProvider.vmid) this.site.reserved.set(vmid, r.metadata.uid);
      return { exists: false, upToDate: false };
    }
    this.unreserve(r, vmid);
    a.vmId = vmid;
    a.node = found.node;

    const full = this.needsFullObserve(r, found);
    if (full) found.config = await this.c.vmConfig(found.node, vmid);
    const cfg = found.config?.values;
    const lock = cfg ? cfg.lock : found.entry.lock;
    if (lock) a.lock = lock;
    else delete a.lock;

    // Ownership (invariants 1-2).
    if (!observeOnly && cfg) {
      const owner = markerUid(cfg.description);
      if (!owner) {
        // Locked mid-create, its config not written yet: ours if we issued a create at this VMID, even
        // when the result was recorded and the status holding its task was lost (a restart): wait.
        if ((lock === 'create' || lock === 'clone') && annotation(r, ANNOTATION_CREATE_PENDING)) {
          a.step = lock === 'create' ? 'Creating' : 'Cloning';
          ready(
            r,
            'False',
            'Creating',
            `VM ${vmid} is being ${lock === 'create' ? 'created' : 'cloned'} on ${found.node}`,
          );
          return { exists: true, upToDate: true, requeueAfterMs: this.taskPollMs };
        }
        if (createIncomplete(r) && !r.spec.forProvider.vmid) {
          // Unlocked and unmarked: never ours (our create writes the marker when it ends). Our create
          // never happened at this VMID (a foreign VM took it before a crash): choose another.
          return this.giveUpVmid(r, vmid);
        }
        throw reason(
          'VMIDConflict',
          `VM ${vmid} on node ${found.node} was not created by this resource (no ownership marker); it will never be modified or deleted. Fix: point crossplane.io/external-name at this resource's own VM, or use managementPolicies: [Observe] to watch VM ${vmid} without managing it`,
        );
      }
      if (owner !== r.metadata.uid && createIncomplete(r) && !r.spec.forProvider.vmid) {
        // Our create never happened at this VMID (another VM took it first): choose another.
        return this.giveUpVmid(r, vmid);
      }
      if (owner !== r.metadata.uid) {
        throw reason(
          'VMIDConflict',
          `VM ${vmid} on node ${found.node} belongs to another resource (uid ${owner}); it will never be modified or deleted by this one. Fix: give this resource its own VMID`,
        );
      }
    }

    // Status.
    const status = full ? await this.c.findVmStatus(found.node, vmid) : undefined;
    const state = status?.status ?? found.entry.status ?? 'unknown';
    a.state = state;
    a.qmpStatus = status?.qmpstatus ?? state;
    if (full && cfg) {
      this.lastFull.set(r.metadata.uid, {
        at: this.site.now(),
        generation: r.metadata.generation,
        digest: found.config!.digest,
      });
    }
    if (state === 'running' && cfg && /^(1|enabled=1)/.test(cfg.agent ?? '')) {
      a.ipAddresses = await this.guestAddresses(found.node, vmid);
    } else if (state !== 'running') delete a.ipAddresses;
    if (state === 'running' && full) {
      const pending = await this.c.vmPending(found.node, vmid).catch(() => []);
      const keys = pending.filter((p) => p.pending !== undefined || p.delete).map((p) => p.key);
      if (keys.length) a.pendingChanges = keys;
      else delete a.pendingChanges;
    }

    if (observeOnly) {
      ready(
        r,
        state === 'running' || state === 'stopped' ? 'True' : 'False',
        state === 'running' || state === 'stopped' ? 'Available' : 'Unavailable',
      );
      return { exists: true, upToDate: true };
    }

    if (lock) {
      ready(r, 'False', 'Locked', `VM ${vmid} is locked (${lock}); waiting for the lock to clear`);
      return { exists: true, upToDate: true, requeueAfterMs: this.taskPollMs };
    }

    // Drift (only with a fresh config).
    if (cfg) {
      const change = this.diff(r, found, cfg, state);
      if (change) {
        this.plan = change;
        a.step =
          change.kind === 'start'
            ? 'Starting'
            : change.kind === 'stop'
              ? 'Stopping'
              : change.kind === 'resize'
                ? 'Resizing'
                : 'Configuring';
        ready(r, 'False', isReady(r) ? 'Unavailable' : 'Creating', change.why);
        return { exists: true, upToDate: false, ...this.connection(r, found) };
      }
    }
    const want = r.spec.forProvider.powerState ?? 'running';
    const agentWanted = r.spec.forProvider.agent !== false;
    if (want === 'running' && agentWanted && state === 'running' && !a.ipAddresses?.length) {
      a.step = 'WaitingForAgent';
      ready(r, 'True', 'Available', `VM ${vmid} is running; waiting for the guest agent to report addresses`);
      return { exists: true, upToDate: true, requeueAfterMs: this.o.agentPollMs ?? 5000, ...this.connection(r, found) };
    }
    a.step = 'Ready';
    ready(r, 'True', 'Available');
    return { exists: true, upToDate: true, ...this.connection(r, found) };
  }

  /** Drop a VMID this resource reserved in this process (it is visible in Proxmox now, or given up). */
  private unreserve(r: ProxmoxVM, vmid: number): void {
    if (this.site.reserved.get(vmid) === r.metadata.uid) this.site.reserved.delete(vmid);
  }

  /** Our create never happened at this VMID (another VM holds it): forget it, so that another is chosen. */
  private giveUpVmid(r: ProxmoxVM, vmid: number): ExternalObservation {
    setAnnotation(r, ANNOTATION_EXTERNAL_NAME, undefined);
    delete atp(r).vmId;
    this.unreserve(r, vmid);
    return { exists: false, upToDate: false };
  }

  private connection(r: ProxmoxVM, found: ObservedVm): { connectionDetails: Record<string, string> } {
    const a = atp(r);
    return {
      connectionDetails: {
        // The Proxmox VE API of the site (what a consumer of the Secret connects to), not its name.
        endpoint: this.c.transport.endpoints[0] ?? this.c.site,
        node: found.node,
        vmid: String(found.vmid),
        ...(a.ipAddresses?.length ? { ipAddresses: a.ipAddresses.join(','), ip: a.ipAddresses[0]! } : {}),
        ...(r.spec.forProvider.cloudInit?.user ? { user: r.spec.forProvider.cloudInit.user } : {}),
      },
    };
  }

  private needsFullObserve(r: ProxmoxVM, found: ObservedVm): boolean {
    const last = this.lastFull.get(r.metadata.uid);
    if (!last) return true;
    if (last.generation !== r.metadata.generation) return true;
    if (!isReady(r)) return true;
    if (r.status?.atProvider?.step !== 'Ready') return true;
    if (found.entry.lock) return true;
    if ((found.entry.status ?? '') !== (r.status?.atProvider?.state ?? '')) return true;
    return this.site.now() - last.at > (this.o.driftIntervalMs ?? 300_000);
  }

  private async taskDone(upid: string): Promise<{ finished: boolean; error?: Error }> {
    const node = upid.split(':')[1] ?? '';
    try {
      const active = await this.site.activeTasks(node);
      if (active.has(upid)) return { finished: false };
    } catch {
      // fall through to the per-task check
    }
    const check = await this.c.checkTask(upid);
    if (check.state === 'running') return { finished: false };
    if (check.state === 'failed') return { finished: true, error: check.error };
    return { finished: true };
  }

  private async locate(vmid: number, fresh: boolean): Promise<ObservedVm | undefined> {
    const list = await this.site.clusterResources(fresh);
    const entry = list.find((e) => (e.type === 'qemu' || e.id?.startsWith('qemu/')) && Number(e.vmid) === vmid);
    if (entry?.node) return { vmid, node: entry.node, entry };
    if (list.some((e) => e.type === 'lxc' && Number(e.vmid) === vmid)) {
      throw reason('VMIDConflict', `VMID ${vmid} is used by a container; it will never be modified or deleted`);
    }
    return undefined;
  }

  /** Our VM by ownership marker: candidates tagged `provider-proxmox`, then their descriptions. */
  private async findByMarker(r: ProxmoxVM): Promise<ObservedVm | undefined> {
    const list = await this.site.clusterResources(true);
    for (const e of list) {
      if (e.type !== 'qemu' || !e.node || e.vmid === undefined) continue;
      if (!hasOwnerTag(e.tags) && e.lock !== 'create' && e.lock !== 'clone') continue;
      const cfg = await this.c.vmConfig(e.node, Number(e.vmid)).catch(() => undefined);
      if (cfg && markerUid(cfg.values.description) === r.metadata.uid)
        return { vmid: Number(e.vmid), node: e.node, entry: e, config: cfg };
    }
    return undefined;
  }

  private async guestAddresses(node: string, vmid: number): Promise<string[]> {
    try {
      const ifaces = await this.c.agentNetworkInterfaces(node, vmid);
      const out: string[] = [];
      for (const i of ifaces) {
        if (i.name === 'lo') continue;
        for (const ip of i['ip-addresses'] ?? []) {
          if (ip['ip-address-type'] === 'ipv4' && !ip['ip-address'].startsWith('127.')) out.push(ip['ip-address']);
        }
      }
      for (const i of ifaces) {
        if (i.name === 'lo') continue;
        for (const ip of i['ip-addresses'] ?? [])
          if (ip['ip-address-type'] === 'ipv6' && !ip['ip-address'].startsWith('fe80') && ip['ip-address'] !== '::1')
            out.push(ip['ip-address']);
      }
      return out;
    } catch {
      return []; // agent not up yet: "QEMU guest agent is not running"
    }
  }

  /** The first difference between spec and VM, as one change to make. */
  private diff(r: ProxmoxVM, found: ObservedVm, cfg: Record<string, string>, state: string): Change | undefined {
    const fp = r.spec.forProvider;
    const set: Record<string, string | number> = {};
    const del: string[] = [];
    const want = (k: string, v: string | number | undefined) => {
      if (v === undefined) return;
      if (String(cfg[k] ?? '') !== String(v)) set[k] = v;
    };
    want('name', vmName(r));
    want('cores', fp.cpu ?? 1);
    want('sockets', fp.sockets ?? 1);
    const mem = Math.round((memoryBytes(fp) ?? 2048 * MiB) / MiB);
    if (Number.parseInt(String(cfg.memory ?? '').replace(/^current=/, ''), 10) !== mem) set.memory = mem;
    const tags = desiredTags(r);
    const have = (cfg.tags ?? '')
      .split(/[;,\s]+/)
      .filter(Boolean)
      .sort()
      .join(';');
    if (have !== tags) set.tags = tags;
    want('description', desiredDescription(r));
    if (fp.onBoot !== undefined) want('onboot', fp.onBoot ? 1 : 0);
    if (fp.startup !== undefined) want('startup', fp.startup);
    const agent = fp.agent === false ? '0' : '1';
    if ((cfg.agent ?? '0').replace(/^enabled=/, '').split(',')[0] !== agent) set.agent = agent;
    const nets = desiredNets(fp);
    for (const n of nets) {
      const cur = cfg[n.key];
      const parsed = cur ? parseNetValue(cur) : undefined;
      const value = printNet(n, parsed?.mac);
      if (cur !== value) set[n.key] = value;
    }
    for (const k of Object.keys(cfg)) if (/^net\d+$/.test(k) && !nets.some((n) => n.key === k)) del.push(k);
    // Cloud-init.
    const ci = fp.cloudInit;
    const ud = parseUserData(fp.userData);
    const ciUser = ci?.user ?? ud.user;
    if (ciUser) want('ciuser', ciUser);
    const ips = desiredIpConfigs(fp, nets.length);
    for (const [i, v] of ips.entries()) want(`ipconfig${i}`, v);
    const keys = this.sshKeys(r, ud);
    if (keys.length && decodeSshKeys(cfg.sshkeys) !== sshKeysValue(keys)) set.sshkeys = sshKeysValue(keys);
    // Passwords read back as '**********': set when none is set (rotate by recreating or by hand).
    if (this.secrets.password !== undefined && !cfg.cipassword) set.cipassword = this.secrets.password;
    if (ci?.dns?.servers?.length) want('nameserver', ci.dns.servers.join(' '));
    if (ci?.dns?.searchDomain) want('searchdomain', ci.dns.searchDomain);
    if (ci?.userDataSnippet) want('cicustom', `user=${ci.userDataSnippet}`);
    if (Object.keys(set).length || del.length) {
      return {
        kind: 'config',
        why: `updating ${[...Object.keys(set), ...del].join(', ')}`,
        set,
        ...(del.length ? { del } : {}),
      };
    }
    // Disks: grow scsi0 to the requested size (never shrink).
    const wantDisk = diskBytes(fp);
    const d0 = cfg.scsi0;
    if (wantDisk && d0) {
      const size = driveSize(d0);
      if (size !== undefined && size < wantDisk) {
        return {
          kind: 'resize',
          why: `growing scsi0 to ${Math.round(wantDisk / GiB)}G`,
          disk: 'scsi0',
          size: `${Math.round(wantDisk / GiB)}G`,
        };
      }
      if (size !== undefined && size > wantDisk + GiB / 2) {
        setCondition(
          r,
          {
            type: 'DiskShrinkRefused',
            status: 'True',
            reason: 'ShrinkNotSupported',
            message: `scsi0 is ${Math.round(size / GiB)}G; Proxmox cannot shrink disks, the requested ${Math.round(wantDisk / GiB)}G is ignored`,
            observedGeneration: r.metadata.generation,
          },
          Date.now(),
        );
      }
    }
    for (const [i, d] of (fp.disks ?? []).entries()) {
      const slot = d.slot ?? `scsi${i + 1}`;
      const bytes = parseQuantity(d.size, GiB)!;
      const cur = cfg[slot];
      if (!cur) {
        const storage = d.storage ?? fp.storage ?? 'local-lvm';
        return {
          kind: 'config',
          why: `adding disk ${slot}`,
          set: { [slot]: [`${storage}:${Math.ceil(bytes / GiB)}`, ...diskOptions(d)].join(',') },
        };
      }
      const size = driveSize(cur);
      if (size !== undefined && size < bytes)
        return { kind: 'resize', why: `growing ${slot}`, disk: slot, size: `${Math.ceil(bytes / GiB)}G` };
    }
    // Power state last: the VM starts with its final config.
    const power = fp.powerState ?? 'running';
    if (power === 'running' && state !== 'running') return { kind: 'start', why: `starting VM ${found.vmid}` };
    if (power === 'stopped' && state === 'running') return { kind: 'stop', why: `stopping VM ${found.vmid}` };
    return undefined;
  }

  // ---------------------------------------------------------------- update

  async update(r: ProxmoxVM): Promise<{ requeueAfterMs?: number }> {
    const change = this.plan;
    const a = atp(r);
    const vmid = Number(externalName(r));
    const node = a.node;
    if (!change || !node) return {};
    let upid: string | null = null;
    switch (change.kind) {
      case 'config': {
        const set = { ...change.set } as Record<string, string | number>;
        const digest = this.lastFull.get(r.metadata.uid)?.digest;
        upid = await this.c.updateVmConfig(node, vmid, {
          set,
          ...(change.del ? { delete: change.del } : {}),
          ...(digest ? { digest } : {}),
        });
        break;
      }
      case 'resize': {
        if (!this.site.limiter.tryAcquire(r.metadata.uid, node, [])) {
          a.step = 'WaitingForSlot';
          return { requeueAfterMs: this.taskPollMs };
        }
        upid = (await this.c.resizeDisk(node, vmid, change.disk!, change.size!)) ?? null;
        if (!upid) this.site.limiter.release(r.metadata.uid);
        break;
      }
      case 'start':
        upid = await this.c.startVm(node, vmid);
        break;
      case 'stop':
        upid = await this.c.shutdownVm(node, vmid, { timeout: 60, forceStop: true });
        break;
      default:
        return {};
    }
    this.lastFull.delete(r.metadata.uid);
    this.site.invalidate();
    if (upid) a.task = upid;
    await this.hook(`update-${change.kind}`, r);
    return { requeueAfterMs: this.taskPollMs };
  }

  // ---------------------------------------------------------------- create

  async prepareCreate(r: ProxmoxVM): Promise<{ externalName: string }> {
    const fp = r.spec.forProvider;
    setStep(r, 'ReservingVMID');
    if (fp.vmid !== undefined) return { externalName: String(fp.vmid) };
    const { min, max } = this.site.vmidRange;
    const taken = new Set(
      (await this.site.clusterResources(true)).filter((e) => e.vmid !== undefined).map((e) => Number(e.vmid)),
    );
    let start = min;
    try {
      start = Math.max(min, await this.c.nextId());
    } catch {
      // nextid is advisory; the resource list is enough
    }
    const held = this.o.vmidHolders?.(this.site.name);
    for (let id = start; id <= max; id++) {
      const holder = this.site.reserved.get(id) ?? held?.get(id);
      if (taken.has(id) || (holder !== undefined && holder !== r.metadata.uid)) continue;
      this.site.reserved.set(id, r.metadata.uid);
      return { externalName: String(id) };
    }
    this.site.limiter.release(r.metadata.uid);
    this.releaseInflight(r);
    this.createPlan = undefined;
    throw reason(
      'VMIDRangeExhausted',
      `no free VMID in the configured range ${min}-${max}; widen spec.vmidRange of the ProviderConfig`,
    );
  }

  /** Steps 3-7 and capacity, then a concurrency slot: nothing is reserved or created unless all pass. */
  async preflight(r: ProxmoxVM): Promise<{ waitMs?: number; message?: string }> {
    const fp = r.spec.forProvider;
    const a = atp(r);
    setStep(r, 'CheckingNode');
    const node = await this.resolveNode(r);
    a.node = node;
    setStep(r, 'CheckingBridge');
    await this.checkBridges(r, node);
    setStep(r, 'CheckingStorage');
    const storage = fp.storage ?? 'local-lvm';
    const storages = await this.c.nodeStorages(node);
    this.checkStorage(storages, storage, diskBytes(fp) ?? 0, 'spec.forProvider.storage');
    for (const [i, d] of (fp.disks ?? []).entries()) {
      this.checkStorage(
        storages,
        d.storage ?? storage,
        parseQuantity(d.size, GiB) ?? 0,
        `spec.forProvider.disks[${i}].storage`,
      );
    }
    const ciStorage = fp.cloudInit?.storage ?? storage;
    if (ciStorage !== storage) this.checkStorage(storages, ciStorage, 4 * MiB, 'spec.forProvider.cloudInit.storage');
    setStep(r, 'ResolvingImage');
    const source = await this.resolveSource(r, node, storages);
    await this.checkCapacity(r, node);
    if (!this.site.limiter.tryAcquire(r.metadata.uid, node, [storage])) {
      setStep(r, 'WaitingForSlot');
      return {
        waitMs: this.taskPollMs,
        message: `waiting for a free slot on node ${node} / storage ${storage} (concurrency limits of the ProviderConfig)`,
      };
    }
    this.reserveInflight(r, node);
    this.createPlan = { node, storage, ciStorage, source };
    return {};
  }

  async create(r: ProxmoxVM): Promise<{ requeueAfterMs?: number }> {
    const fp = r.spec.forProvider;
    const a = atp(r);
    const vmid = Number(externalName(r));
    if (!this.createPlan) await this.preflight(r);
    const plan = this.createPlan;
    if (!plan) throw reason('WaitingForSlot', 'no concurrency slot free yet', true);
    this.createPlan = undefined;
    const { node, storage, ciStorage, source } = plan;
    const marker = desiredDescription(r);
    try {
      let upid: string;
      if (source.kind === 'template') {
        setStep(r, 'Cloning');
        upid = await this.c.cloneVm(source.node, source.vmid, vmid, {
          name: vmName(r),
          description: marker,
          full: fp.template?.full ?? true,
          ...(fp.template?.full === false ? {} : { storage }),
          ...(source.node !== node ? { target: node } : {}),
          ...(fp.pool ? { pool: fp.pool } : {}),
        });
      } else {
        setStep(r, source.kind === 'import' ? 'Importing' : 'Creating');
        const config = await this.createConfig(r, storage, ciStorage, source);
        upid = await this.c.createVm(node, vmid, config, { ...(fp.pool ? { pool: fp.pool } : {}) });
      }
      a.task = upid;
      a.vmId = vmid;
      this.site.invalidate();
      return { requeueAfterMs: this.taskPollMs };
    } catch (e) {
      this.site.limiter.release(r.metadata.uid);
      this.releaseInflight(r);
      if (e instanceof AlreadyExistsError || (e instanceof PveError && /already exists/.test(e.message))) {
        // Never retried blindly: is the VM at this VMID ours?
        this.site.invalidate();
        const found = await this.locate(vmid, true);
        const cfg = found ? await this.c.vmConfig(found.node, vmid).catch(() => undefined) : undefined;
        if (cfg && markerUid(cfg.values.description) === r.metadata.uid) return { requeueAfterMs: this.taskPollMs };
        if (!r.spec.forProvider.vmid) {
          // We picked this VMID and someone else took it first (the nextid race): pick another.
          setAnnotation(r, ANNOTATION_EXTERNAL_NAME, undefined);
          this.unreserve(r, vmid);
          throw reason(
            'VMIDTaken',
            `VMID ${vmid} was taken by another VM before this one was created; a new VMID will be chosen`,
            true,
          );
        }
        throw reason(
          'VMIDConflict',
          `VMID ${vmid} (spec.forProvider.vmid) is used by a VM this resource does not own; it will never be modified or deleted`,
        );
      }
      throw this.explain(e);
    }
  }

  private reserveInflight(r: ProxmoxVM, node: string): void {
    const fp = r.spec.forProvider;
    const e = this.site.inflight.get(node) ?? { memory: 0, cpu: 0, holders: new Set<string>() };
    if (!e.holders.has(r.metadata.uid)) {
      e.memory += memoryBytes(fp) ?? 0;
      e.cpu += (fp.cpu ?? 1) * (fp.sockets ?? 1);
      e.holders.add(r.metadata.uid);
    }
    this.site.inflight.set(node, e);
  }

  private releaseInflight(r: ProxmoxVM): void {
    const fp = r.spec.forProvider;
    for (const e of this.site.inflight.values()) {
      if (!e.holders.delete(r.metadata.uid)) continue;
      e.memory -= memoryBytes(fp) ?? 0;
      e.cpu -= (fp.cpu ?? 1) * (fp.sockets ?? 1);
    }
  }

  private explain(e: unknown): Error {
    if (e instanceof ReasonedError) return e;
    if (e instanceof PveError) {
      if (e.kind === 'locked' || e.kind === 'lock-timeout') return reason('Locked', e.message, true);
      if (e.kind === 'unavailable' || e.kind === 'timeout') return reason('Unavailable', e.message, true);
      if (e.kind === 'permission')
        return reason(
          'PermissionDenied',
          `${e.message}. Fix: grant the privilege to the credentials of site ${this.site.name}`,
        );
      if (e.kind === 'authentication')
        return reason(
          'AuthenticationFailed',
          `${e.message}. Fix: check the credentials Secret of site ${this.site.name}`,
        );
      if (e.kind === 'unsupported') return reason('ImageNotImportable', e.message);
    }
    return e instanceof Error ? e : new Error(String(e));
  }

  /** Step 3 (+ placement when no node is given). */
  private async resolveNode(r: ProxmoxVM): Promise<string> {
    const fp = r.spec.forProvider;
    const nodes = (await this.site.clusterResources(true)).filter((e) => e.type === 'node');
    if (fp.node) {
      const n = nodes.find((x) => x.node === fp.node);
      if (!n)
        throw reason(
          'NodeNotFound',
          `node '${fp.node}' is not part of site ${this.site.name} (nodes: ${nodes.map((x) => x.node).join(', ') || 'none'}); fix spec.forProvider.node`,
        );
      await this.checkNodeHealth(fp.node, n);
      return fp.node;
    }
    setStep(r, 'Placing');
    const mem = memoryBytes(fp) ?? 0;
    const candidates = nodes
      .filter((n) => n.status === 'online')
      .map((n) => {
        const inf = this.site.inflight.get(n.node!) ?? { memory: 0, cpu: 0 };
        return { node: n.node!, free: (n.maxmem ?? 0) - (n.mem ?? 0) - inf.memory };
      })
      .filter((n) => n.free >= mem)
      .sort((x, y) => y.free - x.free);
    const best = candidates[0];
    if (!best)
      throw reason(
        'InsufficientCapacity',
        `no online node of site ${this.site.name} has ${Math.round(mem / GiB)} GiB of free memory; free memory or pin spec.forProvider.node`,
        true,
      );
    await this.checkNodeHealth(best.node, nodes.find((x) => x.node === best.node)!);
    return best.node;
  }

  private async checkNodeHealth(node: string, entry: ClusterResource): Promise<void> {
    if (entry.status !== 'online')
      throw reason(
        'NodeUnhealthy',
        `node ${node} is ${entry.status ?? 'unknown'} in the cluster; it must be online before a VM is created there`,
        true,
      );
    try {
      await this.c.nodeStatus(node);
    } catch (e) {
      if (e instanceof PveError && e.kind === 'permission') throw this.explain(e);
      throw reason(
        'NodeUnhealthy',
        `node ${node} does not answer (GET /nodes/${node}/status: ${e instanceof Error ? e.message : String(e)})`,
        true,
      );
    }
  }

  /** Step 4. */
  private async checkBridges(r: ProxmoxVM, node: string): Promise<void> {
    const bridges = new Set((await this.c.bridges(node)).map((i) => i.iface));
    for (const n of desiredNets(r.spec.forProvider)) {
      if (!bridges.has(n.bridge)) {
        throw reason(
          'BridgeNotFound',
          `bridge '${n.bridge}' does not exist on node ${node} (bridges: ${[...bridges].sort().join(', ') || 'none'}); create it in Proxmox or fix the network of spec.forProvider`,
        );
      }
    }
  }

  /** Step 5. */
  private checkStorage(storages: StorageEntry[], id: string, bytes: number, field: string): StorageEntry {
    const s = storages.find((x) => x.storage === id);
    if (!s)
      throw reason(
        'StorageNotFound',
        `storage '${id}' (${field}) does not exist on this node (storages: ${storages.map((x) => x.storage).join(', ')})`,
      );
    if (!s.content.split(',').includes('images')) {
      throw reason(
        'StorageCannotHoldImages',
        `storage '${id}' (${field}) does not hold VM disks (content: ${s.content}); pick a storage with the 'images' content type`,
      );
    }
    if (s.active === 0 || s.enabled === 0)
      throw reason('StorageUnavailable', `storage '${id}' is not active on this node`, true);
    if (s.avail !== undefined && bytes > s.avail) {
      throw reason(
        'StorageFull',
        `storage '${id}' has ${(s.avail / GiB).toFixed(1)} GiB free, ${(bytes / GiB).toFixed(1)} GiB needed; free space or pick another storage for ${field}`,
        true,
      );
    }
    return s;
  }

  private async checkCapacity(r: ProxmoxVM, node: string): Promise<void> {
    const fp = r.spec.forProvider;
    const n = (await this.site.clusterResources()).find((e) => e.type === 'node' && e.node === node);
    if (!n) return;
    const cores = (fp.cpu ?? 1) * (fp.sockets ?? 1);
    if (n.maxcpu !== undefined && cores > n.maxcpu) {
      throw reason(
        'InsufficientCapacity',
        `${cores} vCPUs requested but node ${node} has ${n.maxcpu}; Proxmox will not start a VM with more vCPUs than the host has`,
      );
    }
    const mem = memoryBytes(fp) ?? 0;
    const inf = this.site.inflight.get(node);
    const free = (n.maxmem ?? 0) - (n.mem ?? 0) - (inf && !inf.holders.has(r.metadata.uid) ? inf.memory : 0);
    if (n.maxmem !== undefined && mem > free) {
      throw reason(
        'InsufficientCapacity',
        `${(mem / GiB).toFixed(1)} GiB memory requested but node ${node} has ${(free / GiB).toFixed(1)} GiB free`,
        true,
      );
    }
  }

  /** Step 7: the image (a volume to import) or the template to clone, and whether it can be used. */
  private async resolveSource(
    r: ProxmoxVM,
    node: string,
    storages: StorageEntry[],
  ): Promise<{ kind: 'blank' } | { kind: 'import'; from: string } | { kind: 'template'; vmid: number; node: string }> {
    const fp = r.spec.forProvider;
    if (fp.template) {
      const list = await this.site.clusterResources();
      const t = list.find(
        (e) =>
          e.type === 'qemu' &&
          e.template === 1 &&
          (fp.template!.vmid !== undefined ? Number(e.vmid) === fp.template!.vmid : e.name === fp.template!.name),
      );
      const what = fp.template.vmid !== undefined ? `VMID ${fp.template.vmid}` : `'${fp.template.name}'`;
      if (!t)
        throw reason(
          'TemplateNotFound',
          `no template ${what} on site ${this.site.name}; convert a VM to a template or fix spec.forProvider.template`,
        );
      return { kind: 'template', vmid: Number(t.vmid), node: t.node! };
    }
    if (!fp.image) return { kind: 'blank' };
    const caps = await this.c.capabilities();
    // Before looking for the image: without import-from no image can be imported, wherever it is.
    if (!caps.importFrom) {
      throw reason(
        'ImageNotImportable',
        `PVE ${caps.version.text} on site ${this.site.name} has no import-from (added in 7.2), so ${fp.image} cannot be imported over the API. Fix: create a template VM and set spec.forProvider.template, or upgrade to PVE >= 7.2`,
      );
    }
    let volid: string | undefined;
    let content: string | undefined;
    const searched: string[] = [];
    if (fp.image.includes(':')) {
      const sid = fp.image.slice(0, fp.image.indexOf(':'));
      if (!storages.some((s) => s.storage === sid))
        throw reason('ImageNotFound', `image ${fp.image}: storage '${sid}' does not exist on node ${node}`);
      const vols = await this.c.storageContent(node, sid);
      const v = vols.find((x) => x.volid === fp.image);
      searched.push(sid);
      if (v) {
        volid = v.volid;
        content = v.content;
      }
    } else {
      const file = fp.image;
      const order = (s: StorageEntry) => (s.content.includes('import') ? 0 : s.content.includes('iso') ? 1 : 2);
      for (const s of [...storages].sort((x, y) => order(x) - order(y))) {
        if (!/\b(import|iso|images)\b/.test(s.content)) continue;
        searched.push(s.storage);
        const vols = await this.c.storageContent(node, s.storage);
        const v = vols.find((x) => x.volid.endsWith(`/${file}`));
        if (v) {
          volid = v.volid;
          content = v.content;
          break;
        }
      }
    }
    if (!volid) {
      throw reason(
        'ImageNotFound',
        `image '${fp.image}' was not found on node ${node} (searched: ${searched.join(', ') || 'no storage'}); upload it (content type 'import' on PVE >= 8.3) or fix spec.forProvider.image`,
      );
    }
    const fixes =
      'Fix: (1) put the image in a storage with the `import` content type (PVE >= 8.3), e.g. local:import/<name>.qcow2, and set spec.forProvider.image to it; (2) clone a template with spec.forProvider.template; or (3) use root@pam password credentials';
    if (content === 'import') {
      if (!caps.importContent)
        throw reason(
          'ImageNotImportable',
          `${volid} is an 'import' volume, which PVE ${caps.version.text} cannot import from (needs 8.3). ${fixes}`,
        );
      return { kind: 'import', from: volid };
    }
    if (content === 'images') return { kind: 'import', from: volid };
    if (content === 'iso') {
      if (caps.rootTicket) {
        const sid = volid.slice(0, volid.indexOf(':'));
        const base = sid === 'local' ? '/var/lib/vz' : undefined;
        if (base) return { kind: 'import', from: `${base}/template/${volid.slice(volid.indexOf(':') + 1)}` };
      }
      throw reason(
        'ImageNotImportable',
        `${volid} is an ISO-content volume; Proxmox imports only 'images' or 'import' volumes with ${caps.authKind === 'token' ? 'an API token' : `user ${caps.authId}`}. ${fixes}`,
      );
    }
    throw reason(
      'ImageNotImportable',
      `${volid} has content type '${content}', which cannot be imported as a disk. ${fixes}`,
    );
  }

  private async createConfig(
    r: ProxmoxVM,
    storage: string,
    ciStorage: string,
    source: { kind: 'blank' } | { kind: 'import'; from: string },
  ): Promise<Record<string, string | number>> {
    const fp = r.spec.forProvider;
    const nets = desiredNets(fp);
    const cfg: Record<string, string | number> = {
      name: vmName(r),
      cores: fp.cpu ?? 1,
      sockets: fp.sockets ?? 1,
      memory: Math.round((memoryBytes(fp) ?? 2048 * MiB) / MiB),
      ostype: 'l26',
      scsihw: 'virtio-scsi-single',
      agent: fp.agent === false ? '0' : '1',
      boot: 'order=scsi0',
      serial0: 'socket',
      tags: desiredTags(r),
      description: desiredDescription(r),
    };
    const disk = diskBytes(fp);
    if (source.kind === 'import') cfg.scsi0 = `${storage}:0,import-from=${source.from},iothread=1`;
    else cfg.scsi0 = `${storage}:${Math.max(1, Math.ceil((disk ?? 20 * GiB) / GiB))},iothread=1`;
    for (const [i, d] of (fp.disks ?? []).entries()) {
      const slot = d.slot ?? `scsi${i + 1}`;
      const size = Math.ceil((parseQuantity(d.size, GiB) ?? GiB) / GiB);
      cfg[slot] = [`${d.storage ?? storage}:${size}`, ...diskOptions(d)].join(',');
    }
    for (const n of nets) cfg[n.key] = printNet(n);
    cfg.ide2 = `${ciStorage}:cloudinit`;
    const ud = parseUserData(fp.userData);
    const ci = fp.cloudInit;
    const user = ci?.user ?? ud.user;
    if (user) cfg.ciuser = user;
    desiredIpConfigs(fp, nets.length).forEach((v, i) => {
      cfg[`ipconfig${i}`] = v;
    });
    const keys = this.sshKeys(r, ud);
    if (keys.length) cfg.sshkeys = sshKeysValue(keys);
    if (this.secrets.password !== undefined) cfg.cipassword = this.secrets.password;
    if (ci?.dns?.servers?.length) cfg.nameserver = ci.dns.servers.join(' ');
    if (ci?.dns?.searchDomain) cfg.searchdomain = ci.dns.searchDomain;
    if (ci?.userDataSnippet) cfg.cicustom = `user=${ci.userDataSnippet}`;
    if (fp.onBoot !== undefined) cfg.onboot = fp.onBoot ? 1 : 0;
    if (fp.startup) cfg.startup = fp.startup;
    if (ud.unsupported.length) {
      setCondition(
        r,
        {
          type: 'CloudInit',
          status: 'False',
          reason: 'UserDataPartiallyApplied',
          message: `userData keys ${ud.unsupported.join(', ')} cannot be set through the Proxmox API (it cannot upload snippets); users and SSH keys were applied. Fix: upload the user-data as a snippet and set spec.forProvider.cloudInit.userDataSnippet`,
          observedGeneration: r.metadata.generation,
        },
        Date.now(),
      );
    }
    return cfg;
  }

  // ---------------------------------------------------------------- delete

  async delete(r: ProxmoxVM): Promise<{ requeueAfterMs?: number }> {
    const a = atp(r);
    const vmid = Number(externalName(r));
    if (a.task) return { requeueAfterMs: this.taskPollMs }; // observe clears it once the task ends
    const found = await this.locate(vmid, true);
    if (!found) return {};
    const cfg = await this.c.vmConfig(found.node, vmid).catch((e) => {
      if (e instanceof NotFoundError) return undefined;
      throw e;
    });
    if (!cfg) return {};
    if (markerUid(cfg.values.description) !== r.metadata.uid) {
      throw reason(
        'VMIDConflict',
        `VM ${vmid} is not owned by this resource (ownership marker missing or different); it is not deleted. Remove the finalizer by hand if this resource should go without it`,
      );
    }
    const lock = cfg.values.lock;
    const caps = await this.c.capabilities();
    if (lock) {
      if (caps.rootTicket) {
        setStep(r, 'Unlocking');
        await this.c.unlockVm(found.node, vmid);
        await this.hook('delete-unlocked', r);
        return { requeueAfterMs: 0 };
      }
      throw reason(
        'Locked',
        `VM ${vmid} is locked (${lock}); waiting for the lock to clear before deleting it (only root@pam with a password can unlock over the API)`,
        true,
      );
    }
    const status = await this.c.vmStatus(found.node, vmid);
    if (status.status === 'running') {
      setStep(r, 'Stopping');
      a.task = await this.c.stopVm(found.node, vmid);
      this.site.invalidate();
      await this.hook('delete-stop-issued', r);
      return { requeueAfterMs: this.taskPollMs };
    }
    setStep(r, 'Destroying');
    a.task = await this.c.deleteVm(found.node, vmid, { purge: true, destroyUnreferencedDisks: true });
    this.site.invalidate();
    await this.hook('delete-destroy-issued', r);
    return { requeueAfterMs: this.taskPollMs };
  }
}
