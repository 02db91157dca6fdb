/**
 * `provider-proxmox controller`: the engine behind Kubernetes. Informers for the provider's kinds,
 * the managed reconciler for ProxmoxVMs (status subresource, finalizers, events, usages,
 * connection Secrets), the scale-set controller, the ProviderConfig in-use finalizer, leader
 * election on a Lease, health and metrics, and an hourly orphan scan.
 *
 * Safe start (as Crossplane's): the controller starts with the CRDs it finds. An informer whose
 * resource is not served (its CRD is missing) settles as absent, /readyz says which, and the kind
 * is picked up as soon as its CRD appears (informer.ts), with no restart.
 */
import { hostname } from 'node:os';
import { INSTALLATION_RE, installationOf } from '../api/provider-config.ts';
import type { ProxmoxImage } from '../api/proxmoximage.ts';
import type { ProxmoxTemplate } from '../api/proxmoxtemplate.ts';
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { GROUP, VERSION } from '../api/proxmoxvm.ts';
import type { ProxmoxVMScaleSet } from '../api/scaleset.ts';
import { Controller } from '../engine/controller.ts';
import { ManagedReconciler, type ReconcileResult } from '../engine/reconciler.ts';
import type { Managed } from '../engine/resource.ts';
import { type Connector, ReasonedError } from '../engine/types.ts';
import { PRIORITY_LOW } from '../engine/workqueue.ts';
import { collect, knownResources, scanSite } from '../fleet/gc.ts';
import { type Catalog, templateOnNode } from '../image/references.ts';
import { ImageRuntime } from '../image/runtime.ts';
import { countStates, ManagedLifecycle } from '../observability/managed-lifecycle.ts';
import { Metrics } from '../observability/metrics.ts';
import { startHealthServer } from '../observability/server.ts';
import { clientForSite } from '../proxmox/site.ts';
import { ScaleSetController } from '../scaleset/controller.ts';
import { VmConnector } from '../vm/connector.ts';
import { VmidHolderIndex } from '../vm/vmid-holders.ts';
import { collectionPath, type KubeApi, KubeError } from './api.ts';
import { CONTROLLER, foundUpToDate, GVK, readsSeen } from './crossplane.ts';
import { Informer, type KubeObject } from './informer.ts';
import { LeaderElector } from './leader.ts';
import {
  KubeConfigSource,
  publishConnectionSecret,
  reconcileProviderConfigInUse,
  UsageTracker,
} from './providerconfig.ts';
import { EventRecorder, KubeStore } from './store.ts';

export { SCALESET_FINALIZER } from '../scaleset/controller.ts';

/**
 * A poll's jitter, a fraction of the interval: resources observed together (a start, a rollout)
 * come back spread over +-10 % of it, and spread further each round.
 */
const POLL_JITTER = 0.1;

export interface ControllerOptions {
  api: KubeApi;
  namespace: string;
  identity?: string;
  leaseName?: string;
  leaderElection?: boolean;
  leaseDurationMs?: number;
  renewDeadlineMs?: number;
  retryPeriodMs?: number;
  workers?: number;
  pollIntervalMs?: number;
  /** How often a Ready VM's config is read in full for drift (VmClientOptions.driftIntervalMs; default 5 min). */
  driftIntervalMs?: number;
  healthPort?: number;
  /** /metrics on its own port (Crossplane's convention: 8080); default: on the health port. */
  metricsPort?: number;
  healthHost?: string;
  orphanScanMs?: number;
  /** How often every ProxmoxVM is reconciled again, behind any change (default 1 h, Crossplane's `--sync`). */
  resyncMs?: number;
  deleteOrphans?: boolean;
  /**
   * The installation of configs without `spec.installation` (written into every VM's marker; the
   * orphan scan deletes only its own). Default: `k8s-<uid of the kube-system namespace>`, read at
   * start: stable for the cluster's lifetime, distinct between clusters.
   */
  installation?: string;
  /** This process's clock (ms) for the orphan scan's start (tests: the simulator's). */
  now?: () => number;
  taskPollMs?: number;
  backoff?: { baseMs?: number; capMs?: number };
  createFailureScheduleMs?: number[];
  log?: (level: 'info' | 'warn' | 'error' | 'debug', msg: string, fields?: Record<string, unknown>) => void;
  /** Called when leadership is lost (client-go: the process exits). */
  onLostLeadership?: () => void;
  metrics?: Metrics;
}

type Obj = KubeObject & Record<string, unknown>;

/** What the controller reads of a ProviderConfigUsage: whose it is and which config it names. */
function usageEssentials(u: Obj): Obj {
  const m = u.metadata;
  return {
    ...(u.apiVersion ? { apiVersion: u.apiVersion } : {}),
    ...(u.kind ? { kind: u.kind } : {}),
    metadata: {
      name: m.name,
      ...(m.namespace !== undefined ? { namespace: m.namespace } : {}),
      ...(m.uid !== undefined ? { uid: m.uid } : {}),
      ...(m.resourceVersion !== undefined ? { resourceVersion: m.resourceVersion } : {}),
    },
    ...(u.providerConfigRef !== undefined ? { providerConfigRef: u.providerConfigRef } : {}),
    ...(u.resourceRef !== undefined ? { resourceRef: u.resourceRef } : {}),
  };
}

export class ProviderController {
  readonly o: ControllerOptions;
  readonly api: KubeApi;
  readonly metrics: Metrics;
  /** crossplane-runtime's lifecycle histograms, recorded while this replica leads. */
  private readonly lifecycle: ManagedLifecycle;
  readonly vms: Informer<ProxmoxVM>;
  /** The VMIDs the cached ProxmoxVMs hold per site, kept with every change of the cache. */
  private readonly vmidHolders = new VmidHolderIndex();
  readonly sets: Informer<ProxmoxVMScaleSet>;
  readonly pcs: Informer<Obj>;
  readonly cpcs: Informer<Obj>;
  readonly usages: Informer<Obj>;
  readonly images: Informer<ProxmoxImage>;
  readonly templates: Informer<ProxmoxTemplate>;
  readonly store: KubeStore<ProxmoxVM>;
  /** ProxmoxImages and ProxmoxTemplates: their reconcilers run while this replica leads. */
  private imageRuntime: ImageRuntime | undefined;
  /** What the informers hold, for references between images, templates and VMs. */
  private readonly catalog: Catalog;
  readonly connector: VmConnector;
  readonly usage: UsageTracker;
  /** One source for the connector, the scale sets and the orphan scan: it caches configs and their Secrets. */
  private readonly configSource: KubeConfigSource;
  /** One recorder for the whole process, so that a repeated event (each orphan scan's) is counted, not re-created. */
  private readonly recorder: EventRecorder;
  private controller: Controller<ProxmoxVM> | undefined;
  private elector: LeaderElector | undefined;
  private health: Awaited<ReturnType<typeof startHealthServer>> | undefined;
  private metricsServer: Awaited<ReturnType<typeof startHealthServer>> | undefined;
  readonly scaleSets: ScaleSetController;
  private timers: NodeJS.Timeout[] = [];
  private leading = false;
  private stopped = false;
  private installationId: string | undefined;
  private readonly unsubs: Array<() => void> = [];
  private readonly createAttempts = new Map<string, { ok: number; failed: number }>();

  constructor(o: ControllerOptions) {
    this.o = o;
    this.api = o.api;
    this.metrics = o.metrics ?? new Metrics();
    this.lifecycle = new ManagedLifecycle(this.metrics);
    const log = (msg: string, fields?: Record<string, unknown>) => o.log?.('warn', msg, fields);
    const path = (plural: string) => collectionPath(GROUP, VERSION, plural);
    // No informer resync for ProxmoxVMs: the controller resyncs them itself, behind any change
    // (startLeading), where the informer's would reach the work queue as changes.
    this.vms = new Informer<ProxmoxVM>(this.api, path('proxmoxvms'), {
      log,
      resyncMs: 0,
      onCacheChange: (key, vm) => this.vmidHolders.set(key, vm),
    });
    this.sets = new Informer<ProxmoxVMScaleSet>(this.api, path('proxmoxvmscalesets'), { log });
    this.pcs = new Informer<Obj>(this.api, path('providerconfigs'), { log });
    this.cpcs = new Informer<Obj>(this.api, path('clusterproviderconfigs'), { log });
    // One usage per resource, only read (UsageTracker writes new bodies): the cache keeps what the
    // in-use accounting reads, not the owner references and labels of ten thousand objects.
    this.usages = new Informer<Obj>(this.api, path('providerconfigusages'), { log, transform: usageEssentials });
    this.images = new Informer<ProxmoxImage>(this.api, path('proxmoximages'), { log });
    this.templates = new Informer<ProxmoxTemplate>(this.api, path('proxmoxtemplates'), { log });
    this.catalog = {
      images: () => this.images.cache.values(),
      templates: () => this.templates.cache.values(),
      vms: () => this.vms.cache.values(),
    };
    this.api.onRequest = (verb, status) => this.metrics.kubeRequests.inc({ verb, code: String(status) });
    this.recorder = new EventRecorder(this.api);
    this.store = new KubeStore<ProxmoxVM>(
      this.api,
      this.vms,
      { group: GROUP, version: VERSION, plural: 'proxmoxvms', kind: 'ProxmoxVM' },
      this.recorder,
    );
    this.store.onStatusWrite = (result, kind) => this.metrics.kubeStatusWrites.inc({ kind, result });
    this.usage = new UsageTracker(this.api, () => this.usages.cache.values() as never);
    this.configSource = new KubeConfigSource(this.api, this.pcs as never, this.cpcs as never);
    this.scaleSets = new ScaleSetController({
      api: this.api,
      sets: this.sets,
      vms: this.vms,
      configs: this.configSource,
      recorder: this.recorder,
      leading: () => this.leading,
      log: (msg, fields) => o.log?.('warn', msg, fields),
    });
    this.connector = new VmConnector(this.configSource, {
      // ProviderConfig spec.installation wins; this is the cluster's default (resolved in start()).
      installation: () => this.installation,
      // spec.forProvider.templateRef: the ProxmoxTemplate in the VM's namespace, from the informer.
      templateOnNode: (r, node) => templateOnNode(this.catalog, r, node),
      // A task that ended or a slot taken for a resource reconciles it at once (no polling for it).
      wake: (key) => this.controller?.wake(key),
      ...(o.taskPollMs !== undefined ? { taskPollMs: o.taskPollMs } : {}),
      ...(o.driftIntervalMs !== undefined ? { driftIntervalMs: o.driftIntervalMs } : {}),
      siteTtlMs: Math.min(10_000, Math.max(100, (o.pollIntervalMs ?? 60_000) / 2)),
      // Cloud-init Secrets live in the resource's namespace (the CRD forbids other namespaces).
      // VMIDs held by resources whose VM is not created yet (reservations survive a restart).
      vmidHolders: (site) => this.vmidHolders.holdersOf(site),
      secret: async (ref, r) => {
        const ns = r.metadata.namespace ?? 'default';
        const sec = await this.api.request<{ data?: Record<string, string> }>(
          'GET',
          `/api/v1/namespaces/${ns}/secrets/${ref.name}`,
        );
        const v = sec.data?.[ref.key];
        if (v === undefined) throw new Error(`the Secret has no key '${ref.key}'`);
        return Buffer.from(v, 'base64').toString('utf8');
      },
      clientHooks: {
        onRequest: (e) => {
          this.metrics.pveRequests.inc({ site: e.site, method: e.method, path: e.path, class: e.errorKind ?? 'ok' });
          this.metrics.pveSeconds.observe({ site: e.site, method: e.method, path: e.path }, e.durationMs / 1000);
        },
      },
    });
  }

  get isLeader(): boolean {
    return this.leading;
  }

  /** This controller's default installation (known once start() has begun). */
  get installation(): string {
    if (this.installationId === undefined) throw new Error('the controller has not started: no installation yet');
    return this.installationId;
  }

  /**
   * `--installation`, else `k8s-<uid of kube-system>`: the one namespace every cluster has and
   * keeps, so the id survives restarts, reinstalls and a new controller namespace. No fallback
   * when it cannot be read: a guessed id would make this cluster's VMs look like another's.
   */
  private async resolveInstallation(): Promise<string> {
    const given = this.o.installation;
    if (given !== undefined) {
      if (!new RegExp(INSTALLATION_RE).test(given))
        throw new Error(
          `--installation '${given}': lowercase letters, digits, '-' and '.', starting and ending with a letter or digit`,
        );
      return given;
    }
    let uid: string | undefined;
    try {
      uid = (await this.api.request<{ metadata?: { uid?: string } }>('GET', '/api/v1/namespaces/kube-system')).metadata
        ?.uid;
    } catch (e) {
      throw new Error(
        `cannot read the kube-system namespace, whose uid names this cluster's installation (k8s-<uid>): ${e instanceof Error ? e.message : String(e)}. Grant get on namespaces/kube-system (deploy/rbac.yaml does), or pass --installation <id> (the same id on every start of this cluster's controller)`,
      );
    }
    if (!uid) throw new Error('the kube-system namespace has no uid: pass --installation <id>');
    return `k8s-${uid}`;
  }

  async start(): Promise<void> {
    const o = this.o;
    // Before anything runs: every marker written and every orphan scan depends on it.
    this.installationId ??= await this.resolveInstallation();
    o.log?.('info', 'installation', { installation: this.installationId });
    const checks = {
      live: () => !this.stopped,
      ready: () => {
        const informers = this.informers();
        const settled = informers.every((x) => x.hasSynced || x.absent);
        const absent = informers.filter((x) => x.absent).map((x) => x.collection.split('/').pop());
        const role = this.leading ? 'ok (leader)' : 'ok (standby)';
        return {
          ok: settled,
          detail: !settled
            ? 'caches not synced'
            : absent.length
              ? `${role}; waiting for CRDs: ${absent.join(', ')}`
              : role,
        };
      },
    };
    const host = o.healthHost ? { host: o.healthHost } : {};
    if (o.healthPort !== undefined)
      this.health = await startHealthServer({ port: o.healthPort, ...host, metrics: this.metrics, checks });
    if (o.metricsPort !== undefined && o.metricsPort !== o.healthPort) {
      this.metricsServer = await startHealthServer({ port: o.metricsPort, ...host, metrics: this.metrics, checks });
    }
    // Settled, not synced: a missing CRD must not hold back the kinds that are installed.
    await Promise.all(this.informers().map((x) => x.startSettled()));
    if (o.leaderElection === false) {
      this.startLeading();
      return;
    }
    this.elector = new LeaderElector(this.api, {
      namespace: o.namespace,
      name: o.leaseName ?? 'provider-proxmox-leader',
      identity: o.identity ?? `${hostname()}_${process.pid}`,
      ...(o.leaseDurationMs ? { leaseDurationMs: o.leaseDurationMs } : {}),
      ...(o.renewDeadlineMs ? { renewDeadlineMs: o.renewDeadlineMs } : {}),
      ...(o.retryPeriodMs ? { retryPeriodMs: o.retryPeriodMs } : {}),
      onStartedLeading: () => this.startLeading(),
      onStoppedLeading: () => {
        this.metrics.leader.set(0);
        if (!this.stopped) {
          o.log?.('error', 'leadership lost: stopping work');
          void this.stopLeading().then(() => o.onLostLeadership?.());
        }
      },
      log: (msg, fields) => o.log?.('info', msg, fields),
    });
    this.elector.start();
  }

  private informers(): Array<Pick<Informer<KubeObject>, 'hasSynced' | 'absent' | 'collection' | 'startSettled'>> {
    return [this.vms, this.sets, this.pcs, this.cpcs, this.usages, this.images, this.templates];
  }

  /** Wrap the connector: every connected resource has its ProviderConfigUsage. */
  private trackingConnector(): Connector<ProxmoxVM> {
    return {
      connect: async (r, signal) => {
        await this.usage.track(r);
        return this.connector.connect(r, signal);
      },
      forget: (uid) => this.connector.forget(uid),
    };
  }

  private startLeading(): void {
    if (this.leading || this.stopped) return;
    this.leading = true;
    this.metrics.leader.set(1);
    const o = this.o;
    const lifecycle = this.lifecycle;
    const vmStore = readsSeen(this.store, (r) => lifecycle.reconciling(GVK.ProxmoxVM, r));
    const reconciler = new ManagedReconciler<ProxmoxVM>(vmStore, this.trackingConnector(), {
      pollIntervalMs: o.pollIntervalMs ?? 60_000,
      ...(o.taskPollMs !== undefined ? { shortWaitMs: o.taskPollMs } : {}),
      ...(o.createFailureScheduleMs ? { createFailureScheduleMs: o.createFailureScheduleMs } : {}),
      publishConnection: (r, details) => publishConnectionSecret(this.api, r, details),
      // Creates by outcome: ok = Proxmox accepted the create; failed = it refused it, or its task failed.
      hooks: {
        at: (step, key) => {
          if (step === 'create-issued') this.metrics.creates.inc({ outcome: 'ok' });
          else if (step === 'create-failed') this.metrics.creates.inc({ outcome: 'failed' });
          else if (step === 'delete-issued') this.metrics.deletes.inc({ outcome: 'ok' });
          else if (step === 'update-issued') {
            const vm = this.vms.cache.get(key);
            if (vm) lifecycle.updated(GVK.ProxmoxVM, vm);
          }
          this.countCreate(step, key);
        },
      },
      onResult: (key, result, ms) => {
        if (result.kind === 'rateLimited' && result.error instanceof ReasonedError && result.error.createFailure)
          this.metrics.creates.inc({ outcome: 'failed' });
        // (the engine has no delete-failed step: a failed reconcile of a resource being deleted is one)
        if (result.kind === 'rateLimited' && this.vms.cache.get(key)?.metadata.deletionTimestamp)
          this.metrics.deletes.inc({ outcome: 'failed' });
        this.metrics.controllers.reconciled(CONTROLLER.ProxmoxVM, result, ms);
        this.reconciled(GVK.ProxmoxVM, this.vms.cache.get(key), result);
      },
      ...(o.log ? { log: o.log } : {}),
    });
    this.controller = new Controller(this.store, reconciler, {
      workers: o.workers ?? 8,
      ...(o.backoff ? { backoff: o.backoff } : {}),
      // A cluster's whole fleet is listed at start and polled every interval: changes go first.
      listPriority: PRIORITY_LOW,
      pollJitter: POLL_JITTER,
    });
    this.metrics.controllers.instrument(CONTROLLER.ProxmoxVM, this.controller);
    void this.controller.start();
    const gvr = (plural: string, kind: string) => ({ group: GROUP, version: VERSION, plural, kind });
    const imageKube = new KubeStore<ProxmoxImage>(
      this.api,
      this.images,
      gvr('proxmoximages', 'ProxmoxImage'),
      this.recorder,
    );
    const templateKube = new KubeStore<ProxmoxTemplate>(
      this.api,
      this.templates,
      gvr('proxmoxtemplates', 'ProxmoxTemplate'),
      this.recorder,
    );
    for (const s of [imageKube, templateKube])
      s.onStatusWrite = (result, kind) => this.metrics.kubeStatusWrites.inc({ kind, result });
    const imageStore = readsSeen(imageKube, (r) => lifecycle.reconciling(GVK.ProxmoxImage, r));
    const templateStore = readsSeen(templateKube, (r) => lifecycle.reconciling(GVK.ProxmoxTemplate, r));
    this.imageRuntime = new ImageRuntime({
      source: this.configSource,
      images: imageStore,
      templates: templateStore,
      catalog: this.catalog,
      installation: () => this.installation,
      ...(o.taskPollMs !== undefined ? { taskPollMs: o.taskPollMs } : {}),
      pollIntervalMs: o.pollIntervalMs ?? 60_000,
      ...(o.backoff ? { backoff: o.backoff } : {}),
      wakeVms: (t) => {
        for (const vm of this.vms.cache.values())
          if (
            vm.spec.forProvider.templateRef?.name === t.metadata.name &&
            vm.metadata.namespace === t.metadata.namespace
          )
            this.controller?.queue.add(`${vm.metadata.namespace}/${vm.metadata.name}`);
      },
      onReconcile: (kind, _key, result, ms) => this.metrics.controllers.reconciled(CONTROLLER[kind], result, ms),
      onResult: (kind, key, result) => {
        this.reconciled(GVK[kind], (kind === 'ProxmoxImage' ? this.images : this.templates).cache.get(key), result);
      },
      ...(o.log ? { log: o.log } : {}),
    });
    this.metrics.controllers.instrument(CONTROLLER.ProxmoxImage, this.imageRuntime.images);
    this.metrics.controllers.instrument(CONTROLLER.ProxmoxTemplate, this.imageRuntime.templates);
    void this.imageRuntime.start();
    // Deleted resources: release their usage and per-resource caches.
    this.unsubs.push(
      this.vms.on((type, obj) => {
        if (type === 'DELETED') {
          lifecycle.deleted(GVK.ProxmoxVM, obj);
          this.imageRuntime?.vmGone(obj);
          this.createAttempts.delete(`${obj.metadata.namespace}/${obj.metadata.name}`);
          this.connector.forget(obj.metadata.uid);
          this.usage.release(obj).catch((e) => o.log?.('warn', 'cannot delete usage', { error: String(e) }));
        }
        const owner = (
          obj.metadata as { ownerReferences?: Array<{ kind: string; name: string }> }
        ).ownerReferences?.find((x) => x.kind === 'ProxmoxVMScaleSet');
        if (owner) this.scaleSets.add(`${obj.metadata.namespace}/${owner.name}`);
      }),
      this.sets.on((_t, _o, key) => this.scaleSets.add(key)),
      this.images.on((type, obj) => {
        if (type === 'DELETED') lifecycle.deleted(GVK.ProxmoxImage, obj);
      }),
      this.templates.on((type, obj) => {
        if (type === 'DELETED') lifecycle.deleted(GVK.ProxmoxTemplate, obj);
      }),
      this.pcs.on(() => this.schedulePcSync()),
      this.cpcs.on(() => this.schedulePcSync()),
      this.usages.on(() => this.schedulePcSync()),
    );
    for (const k of this.sets.cache.keys()) this.scaleSets.add(k);
    this.scaleSets.start();
    this.schedulePcSync();
    const gauges = setInterval(() => this.updateGauges(), 15_000);
    gauges.unref();
    // The informer's resync, as a safety net should a requeue ever be lost (Crossplane's --sync).
    const resync = setInterval(() => this.controller?.resync(this.vms.cache.keys()), o.resyncMs ?? 3_600_000);
    resync.unref();
    this.timers.push(gauges, resync);
    const scanEvery = o.orphanScanMs ?? 3_600_000;
    if (scanEvery > 0) {
      const first = setTimeout(() => void this.orphanScan(), Math.min(30_000, scanEvery));
      first.unref();
      const every = setInterval(() => void this.orphanScan(), scanEvery);
      every.unref();
      this.timers.push(first, every);
    }
  }

  /** What a reconcile of a managed resource (`r`: as the cache has it now) tells the lifecycle metrics. */
  private reconciled(gvk: string, r: Managed | undefined, result: ReconcileResult): void {
    if (!r) return;
    this.lifecycle.reconciled(gvk, r);
    if (foundUpToDate(result, r)) this.lifecycle.unchanged(r);
  }

  /**
   * Create attempts per resource, for the create-loop alerts: accepted creates (one per resource
   * in a healthy fleet) and failed ones since the last accepted.
   */
  private countCreate(step: string, key: string): void {
    if (step !== 'create-issued' && step !== 'create-failed') return;
    const n = this.createAttempts.get(key) ?? { ok: 0, failed: 0 };
    if (step === 'create-issued') {
      n.ok++;
      n.failed = 0;
    } else n.failed++;
    this.createAttempts.set(key, n);
  }

  private async stopLeading(): Promise<void> {
    this.leading = false;
    for (const name of Object.values(CONTROLLER)) this.metrics.controllers.forget(name);
    for (const u of this.unsubs.splice(0)) u();
    for (const t of this.timers.splice(0)) clearTimeout(t);
    clearTimeout(this.pcTimer);
    this.pcTimer = undefined;
    await Promise.all([this.controller?.stop(), this.imageRuntime?.stop()]);
    await this.imageRuntime?.close();
    this.controller = undefined;
    this.imageRuntime = undefined;
  }

  private pcTimer: NodeJS.Timeout | undefined;
  private schedulePcSync(): void {
    if (this.pcTimer || !this.leading) return;
    // Coalesced: during a start-up with thousands of resources, usages change many times a second.
    this.pcTimer = setTimeout(() => {
      this.pcTimer = undefined;
      void this.syncProviderConfigs();
    }, 1000);
  }

  private async syncProviderConfigs(): Promise<void> {
    // Usages of resources that are gone (deleted while no replica was leading, or with no garbage
    // collector in the cluster) would block their ProviderConfig's deletion for good.
    if (this.vms.hasSynced) {
      const live = new Set([...this.vms.cache.values()].map((v) => v.metadata.uid));
      for (const u of this.usages.cache.values()) {
        const ref = (u as { resourceRef?: { kind?: string; uid?: string } }).resourceRef;
        if (ref?.kind !== 'ProxmoxVM' || !ref.uid || live.has(ref.uid)) continue;
        await this.usage
          .release({ metadata: { uid: ref.uid, ...(u.metadata.namespace ? { namespace: u.metadata.namespace } : {}) } })
          .catch((e) => this.o.log?.('warn', 'cannot delete usage', { error: String(e) }));
      }
    }
    const usages = [...this.usages.cache.values()] as Array<{
      providerConfigRef?: { kind?: string; name?: string };
      metadata: { namespace?: string };
    }>;
    for (const [kind, inf] of [
      ['ProviderConfig', this.pcs],
      ['ClusterProviderConfig', this.cpcs],
    ] as const) {
      for (const pc of inf.cache.values()) {
        try {
          await reconcileProviderConfigInUse(this.api, pc as never, kind, usages, this.recorder);
        } catch (e) {
          if (!(e instanceof KubeError && e.status === 409))
            this.o.log?.('warn', 'provider config in-use sync failed', { error: String(e) });
          this.schedulePcSync();
        }
      }
    }
  }

  private updateGauges(): void {
    this.metrics.byCondition.reset();
    this.metrics.conditionReasons.reset();
    const objects: Array<
      [string, Iterable<{ status?: { conditions?: Array<{ type: string; status: string; reason?: string }> } }>]
    > = [
      ['ProxmoxVM', this.vms.cache.values()],
      ['ProxmoxVMScaleSet', this.sets.cache.values()],
    ];
    for (const [kind, items] of objects) {
      for (const o of items) {
        for (const t of ['Ready', 'Synced']) {
          const c = o.status?.conditions?.find((x) => x.type === t);
          this.metrics.byCondition.inc({ kind, condition: t, status: c?.status ?? 'Unknown' });
          if (c?.status === 'False')
            this.metrics.conditionReasons.inc({ kind, condition: t, reason: c.reason ?? 'Unknown' });
        }
      }
    }
    let ok = 0;
    let failed = 0;
    for (const n of this.createAttempts.values()) {
      ok = Math.max(ok, n.ok);
      failed = Math.max(failed, n.failed);
    }
    this.metrics.createAttemptsMax.set({ outcome: 'ok' }, ok);
    this.metrics.createAttemptsMax.set({ outcome: 'failed' }, failed);
    countStates(this.metrics, GVK.ProxmoxVM, this.vms.cache.values());
    countStates(this.metrics, GVK.ProxmoxImage, this.images.cache.values());
    countStates(this.metrics, GVK.ProxmoxTemplate, this.templates.cache.values());
  }

  /**
   * This installation's VMs with a marker and no ProxmoxVM: metric, event on the ProviderConfig,
   * log; deleted only if configured. The cluster is its installation's only store, so an orphan of
   * its installation is one for sure; other installations' VMs, copies and old markers with a uid
   * no ProxmoxVM has are never deleted. Each deletion re-checks the VM and the informer cache.
   */
  async orphanScan(): Promise<void> {
    // An unsynced cache lists no resources: every VM would look like an orphan.
    if (!this.vms.hasSynced) {
      this.o.log?.('info', 'orphan scan skipped: the ProxmoxVM cache has not synced');
      return;
    }
    const known = () => knownResources(this.vms.cache.values());
    const source = this.configSource;
    const recorder = this.recorder;
    for (const [kind, inf] of [
      ['ProviderConfig', this.pcs],
      ['ClusterProviderConfig', this.cpcs],
    ] as const) {
      for (const pc of inf.cache.values()) {
        try {
          const loaded = await source.get({ kind, name: pc.metadata.name }, pc.metadata.namespace);
          const installation = installationOf(loaded.config, () => this.installation);
          for (const site of loaded.config.spec.sites) {
            const client = clientForSite(loaded, site.name);
            try {
              const all = await scanSite(
                client,
                site.name,
                { installation, known: known(), soleStore: true, storeName: 'this cluster' },
                this.o.now ? { now: this.o.now } : {},
              );
              const found = all.filter((f) => f.kind === 'orphan' && f.deletable);
              this.metrics.orphans.set({ site: site.name }, found.length);
              for (const f of all.filter((x) => x.kind === 'legacy-unknown'))
                this.o.log?.('info', 'VM with an old marker naming no ProxmoxVM of this cluster: never deleted', {
                  site: f.site,
                  vmid: f.vmid,
                  owner: f.owner,
                });
              for (const f of found) {
                this.o.log?.('warn', 'orphaned VM', {
                  site: f.site,
                  node: f.node,
                  vmid: f.vmid,
                  name: f.name,
                  owner: f.owner,
                  installation,
                });
                recorder.record(
                  {
                    apiVersion: `${GROUP}/${VERSION}`,
                    kind,
                    metadata: {
                      name: pc.metadata.name,
                      ...(pc.metadata.namespace ? { namespace: pc.metadata.namespace } : {}),
                      uid: pc.metadata.uid ?? '',
                    },
                  },
                  'Warning',
                  'OrphanedVM',
                  `VM ${f.vmid} (${f.name}) on ${f.site}/${f.node} carries the ownership marker of ${f.owner ?? 'a resource'} that no longer exists${this.o.deleteOrphans ? '; deleting it' : '; run provider-proxmox gc or enable orphan deletion'}`,
                );
              }
              if (this.o.deleteOrphans && found.length) {
                for (const d of await collect(loaded, found, { known }))
                  this.o.log?.(d.action === 'deleted' ? 'info' : 'warn', `orphaned VM ${d.action}`, {
                    site: d.site,
                    vmid: d.vmid,
                    owner: d.owner,
                  });
              }
            } finally {
              await client.close();
            }
          }
        } catch (e) {
          this.o.log?.('warn', 'orphan scan failed', { config: pc.metadata.name, error: String(e) });
        }
      }
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.elector?.stop();
    await this.stopLeading();
    await this.scaleSets.stop();
    await Promise.all([
      this.vms.stop(),
      this.sets.stop(),
      this.pcs.stop(),
      this.cpcs.stop(),
      this.usages.stop(),
      this.images.stop(),
      this.templates.stop(),
    ]);
    await this.connector.close();
    await this.health?.close();
    await this.metricsServer?.close();
  }
}
