/**
 * What runs only while this replica holds the leader Lease (controller-runtime's runnables that
 * need leader election): the managed reconciler of ProxmoxVMs on the engine's Controller (its
 * KubeStore, the connector that tracks ProviderConfigUsages, connection Secrets, create and
 * delete metrics), the ProxmoxImage and ProxmoxTemplate reconcilers, the informer handlers that
 * feed the scale-set queue and release the usages of deleted resources, the ProviderConfig in-use
 * finalizer's sync, the condition gauges, the hourly resync and the orphan-scan timers. Started
 * and stopped by ProviderController (controller.ts) as leadership is won and lost; everything
 * that every replica holds (informers, the connector, the stores) is the controller's, handed in.
 */
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
import type { Catalog } from '../image/references.ts';
import { ImageRuntime } from '../image/runtime.ts';
import { countStates, ManagedLifecycle } from '../observability/managed-lifecycle.ts';
import type { Metrics } from '../observability/metrics.ts';
import type { ScaleSetController } from '../scaleset/controller.ts';
import type { VmConnector } from '../vm/connector.ts';
import { type KubeApi, KubeError } from './api.ts';
import { CONTROLLER, foundUpToDate, GVK, readsSeen } from './crossplane.ts';
import type { Informer, KubeObject } from './informer.ts';
import {
  type KubeConfigSource,
  publishConnectionSecret,
  reconcileProviderConfigInUse,
  type UsageTracker,
} from './providerconfig.ts';
import { type EventRecorder, KubeStore } from './store.ts';

/**
 * A poll's jitter, a fraction of the interval: resources observed together (a start, a rollout)
 * come back spread over +-10 % of it, and spread further each round.
 */
const POLL_JITTER = 0.1;

/** A kind read without a typed shape: ProviderConfigs, ClusterProviderConfigs, their usages. */
export type Obj = KubeObject & Record<string, unknown>;

/** The options of the controller (ControllerOptions, controller.ts) that the leader's work reads. */
export interface LeaderOptions {
  workers?: number;
  pollIntervalMs?: number;
  orphanScanMs?: number;
  resyncMs?: number;
  taskPollMs?: number;
  backoff?: { baseMs?: number; capMs?: number };
  createFailureScheduleMs?: number[];
  log?: (level: 'info' | 'warn' | 'error' | 'debug', msg: string, fields?: Record<string, unknown>) => void;
}

/** What the leader's work uses of the controller: its options, informers, stores and clients. */
export interface LeaderContext {
  o: LeaderOptions;
  api: KubeApi;
  metrics: Metrics;
  vms: Informer<ProxmoxVM>;
  sets: Informer<ProxmoxVMScaleSet>;
  pcs: Informer<Obj>;
  cpcs: Informer<Obj>;
  usages: Informer<Obj>;
  images: Informer<ProxmoxImage>;
  templates: Informer<ProxmoxTemplate>;
  store: KubeStore<ProxmoxVM>;
  catalog: Catalog;
  configSource: KubeConfigSource;
  recorder: EventRecorder;
  usage: UsageTracker;
  connector: VmConnector;
  scaleSets: ScaleSetController;
  /** The controller's default installation (ProviderController.installation). */
  installation: () => string;
  /** Whether this replica leads now. */
  leading: () => boolean;
  orphanScan: () => Promise<void>;
}

export class LeaderRunnables {
  private readonly c: LeaderContext;
  /** crossplane-runtime's lifecycle histograms, recorded while this replica leads. */
  private readonly lifecycle: ManagedLifecycle;
  /** The ProxmoxVMs' Controller while this replica leads (the connector wakes resources through it). */
  controller: Controller<ProxmoxVM> | undefined;
  /** ProxmoxImages and ProxmoxTemplates: their reconcilers run while this replica leads. */
  private imageRuntime: ImageRuntime | undefined;
  private timers: NodeJS.Timeout[] = [];
  private readonly unsubs: Array<() => void> = [];
  private readonly createAttempts = new Map<string, { ok: number; failed: number }>();

  constructor(c: LeaderContext) {
    this.c = c;
    this.lifecycle = new ManagedLifecycle(c.metrics);
  }

  /** Wrap the connector: every connected resource has its ProviderConfigUsage. */
  private trackingConnector(): Connector<ProxmoxVM> {
    return {
      connect: async (r, signal) => {
        await this.c.usage.track(r);
        return this.c.connector.connect(r, signal);
      },
      forget: (uid) => this.c.connector.forget(uid),
    };
  }

  /** Starts the leader's work: called once this replica leads (ProviderController.startLeading). */
  start(): void {
    const o = this.c.o;
    const lifecycle = this.lifecycle;
    const vmStore = readsSeen(this.c.store, (r) => lifecycle.reconciling(GVK.ProxmoxVM, r));
    const reconciler = new ManagedReconciler<ProxmoxVM>(vmStore, this.trackingConnector(), {
      pollIntervalMs: o.pollIntervalMs ?? 60_000,
      ...(o.taskPollMs !== undefined ? { shortWaitMs: o.taskPollMs } : {}),
      ...(o.createFailureScheduleMs ? { createFailureScheduleMs: o.createFailureScheduleMs } : {}),
      publishConnection: (r, details) => publishConnectionSecret(this.c.api, r, details),
      // Creates by outcome: ok = Proxmox accepted the create; failed = it refused it, or its task failed.
      hooks: {
        at: (step, key) => {
          if (step === 'create-issued') this.c.metrics.creates.inc({ outcome: 'ok' });
          else if (step === 'create-failed') this.c.metrics.creates.inc({ outcome: 'failed' });
          else if (step === 'delete-issued') this.c.metrics.deletes.inc({ outcome: 'ok' });
          else if (step === 'update-issued') {
            const vm = this.c.vms.cache.get(key);
            if (vm) lifecycle.updated(GVK.ProxmoxVM, vm);
          }
          this.countCreate(step, key);
        },
      },
      onResult: (key, result, ms) => {
        // A create refused for a lock (PVE's storage lock under many creates: task-end.ts) is sent
        // again and is not the resource's failure: `retried`, apart from `failed`, which the
        // ProxmoxVMCreateFailureRate alert reads.
        if (result.kind === 'rateLimited' && result.error instanceof ReasonedError && result.error.createFailure)
          this.c.metrics.creates.inc({ outcome: result.error.reason === 'Locked' ? 'retried' : 'failed' });
        // (the engine has no delete-failed step: a failed reconcile of a resource being deleted is one)
        if (result.kind === 'rateLimited' && this.c.vms.cache.get(key)?.metadata.deletionTimestamp)
          this.c.metrics.deletes.inc({ outcome: 'failed' });
        this.c.metrics.controllers.reconciled(CONTROLLER.ProxmoxVM, result, ms);
        this.reconciled(GVK.ProxmoxVM, this.c.vms.cache.get(key), result);
      },
      ...(o.log ? { log: o.log } : {}),
    });
    this.controller = new Controller(this.c.store, reconciler, {
      workers: o.workers ?? 8,
      ...(o.backoff ? { backoff: o.backoff } : {}),
      // A cluster's whole fleet is listed at start and polled every interval: changes go first.
      listPriority: PRIORITY_LOW,
      pollJitter: POLL_JITTER,
    });
    this.c.metrics.controllers.instrument(CONTROLLER.ProxmoxVM, this.controller);
    void this.controller.start();
    const gvr = (plural: string, kind: string) => ({ group: GROUP, version: VERSION, plural, kind });
    const imageKube = new KubeStore<ProxmoxImage>(
      this.c.api,
      this.c.images,
      gvr('proxmoximages', 'ProxmoxImage'),
      this.c.recorder,
    );
    const templateKube = new KubeStore<ProxmoxTemplate>(
      this.c.api,
      this.c.templates,
      gvr('proxmoxtemplates', 'ProxmoxTemplate'),
      this.c.recorder,
    );
    for (const s of [imageKube, templateKube])
      s.onStatusWrite = (result, kind) => this.c.metrics.kubeStatusWrites.inc({ kind, result });
    const imageStore = readsSeen(imageKube, (r) => lifecycle.reconciling(GVK.ProxmoxImage, r));
    const templateStore = readsSeen(templateKube, (r) => lifecycle.reconciling(GVK.ProxmoxTemplate, r));
    this.imageRuntime = new ImageRuntime({
      source: this.c.configSource,
      images: imageStore,
      templates: templateStore,
      catalog: this.c.catalog,
      installation: this.c.installation,
      ...(o.taskPollMs !== undefined ? { taskPollMs: o.taskPollMs } : {}),
      pollIntervalMs: o.pollIntervalMs ?? 60_000,
      ...(o.backoff ? { backoff: o.backoff } : {}),
      wakeVms: (t) => {
        for (const vm of this.c.vms.cache.values())
          if (
            vm.spec.forProvider.templateRef?.name === t.metadata.name &&
            vm.metadata.namespace === t.metadata.namespace
          )
            this.controller?.queue.add(`${vm.metadata.namespace}/${vm.metadata.name}`);
      },
      onReconcile: (kind, _key, result, ms) => this.c.metrics.controllers.reconciled(CONTROLLER[kind], result, ms),
      onResult: (kind, key, result) => {
        this.reconciled(GVK[kind], (kind === 'ProxmoxImage' ? this.c.images : this.c.templates).cache.get(key), result);
      },
      ...(o.log ? { log: o.log } : {}),
    });
    this.c.metrics.controllers.instrument(CONTROLLER.ProxmoxImage, this.imageRuntime.images);
    this.c.metrics.controllers.instrument(CONTROLLER.ProxmoxTemplate, this.imageRuntime.templates);
    void this.imageRuntime.start();
    // Deleted resources: release their usage and per-resource caches.
    this.unsubs.push(
      this.c.vms.on((type, obj) => {
        if (type === 'DELETED') {
          lifecycle.deleted(GVK.ProxmoxVM, obj);
          this.imageRuntime?.vmGone(obj);
          this.createAttempts.delete(`${obj.metadata.namespace}/${obj.metadata.name}`);
          this.c.connector.forget(obj.metadata.uid);
          this.c.usage.release(obj).catch((e) => o.log?.('warn', 'cannot delete usage', { error: String(e) }));
        }
        const owner = (
          obj.metadata as { ownerReferences?: Array<{ kind: string; name: string }> }
        ).ownerReferences?.find((x) => x.kind === 'ProxmoxVMScaleSet');
        if (owner) this.c.scaleSets.add(`${obj.metadata.namespace}/${owner.name}`);
      }),
      this.c.sets.on((_t, _o, key) => this.c.scaleSets.add(key)),
      this.c.images.on((type, obj) => {
        if (type === 'DELETED') lifecycle.deleted(GVK.ProxmoxImage, obj);
      }),
      this.c.templates.on((type, obj) => {
        if (type === 'DELETED') lifecycle.deleted(GVK.ProxmoxTemplate, obj);
      }),
      this.c.pcs.on(() => this.schedulePcSync()),
      this.c.cpcs.on(() => this.schedulePcSync()),
      this.c.usages.on(() => this.schedulePcSync()),
    );
    for (const k of this.c.sets.cache.keys()) this.c.scaleSets.add(k);
    this.c.scaleSets.start();
    this.schedulePcSync();
    const gauges = setInterval(() => this.updateGauges(), 15_000);
    gauges.unref();
    // The informer's resync, as a safety net should a requeue ever be lost (Crossplane's --sync).
    const resync = setInterval(() => this.controller?.resync(this.c.vms.cache.keys()), o.resyncMs ?? 3_600_000);
    resync.unref();
    this.timers.push(gauges, resync);
    const scanEvery = o.orphanScanMs ?? 3_600_000;
    if (scanEvery > 0) {
      const first = setTimeout(() => void this.c.orphanScan(), Math.min(30_000, scanEvery));
      first.unref();
      const every = setInterval(() => void this.c.orphanScan(), scanEvery);
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

  /** Stops the leader's work: leadership lost, or the controller stopping. */
  async stop(): Promise<void> {
    for (const name of Object.values(CONTROLLER)) this.c.metrics.controllers.forget(name);
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
    if (this.pcTimer || !this.c.leading()) return;
    // Coalesced: during a start-up with thousands of resources, usages change many times a second.
    this.pcTimer = setTimeout(() => {
      this.pcTimer = undefined;
      void this.syncProviderConfigs();
    }, 1000);
  }

  private async syncProviderConfigs(): Promise<void> {
    // Usages of resources that are gone (deleted while no replica was leading, or with no garbage
    // collector in the cluster) would block their ProviderConfig's deletion for good.
    if (this.c.vms.hasSynced) {
      const live = new Set([...this.c.vms.cache.values()].map((v) => v.metadata.uid));
      for (const u of this.c.usages.cache.values()) {
        const ref = (u as { resourceRef?: { kind?: string; uid?: string } }).resourceRef;
        if (ref?.kind !== 'ProxmoxVM' || !ref.uid || live.has(ref.uid)) continue;
        await this.c.usage
          .release({ metadata: { uid: ref.uid, ...(u.metadata.namespace ? { namespace: u.metadata.namespace } : {}) } })
          .catch((e) => this.c.o.log?.('warn', 'cannot delete usage', { error: String(e) }));
      }
    }
    const usages = [...this.c.usages.cache.values()] as Array<{
      providerConfigRef?: { kind?: string; name?: string };
      metadata: { namespace?: string };
    }>;
    for (const [kind, inf] of [
      ['ProviderConfig', this.c.pcs],
      ['ClusterProviderConfig', this.c.cpcs],
    ] as const) {
      for (const pc of inf.cache.values()) {
        try {
          await reconcileProviderConfigInUse(this.c.api, pc as never, kind, usages, this.c.recorder);
        } catch (e) {
          if (!(e instanceof KubeError && e.status === 409))
            this.c.o.log?.('warn', 'provider config in-use sync failed', { error: String(e) });
          this.schedulePcSync();
        }
      }
    }
  }

  private updateGauges(): void {
    this.c.metrics.byCondition.reset();
    this.c.metrics.conditionReasons.reset();
    const objects: Array<
      [string, Iterable<{ status?: { conditions?: Array<{ type: string; status: string; reason?: string }> } }>]
    > = [
      ['ProxmoxVM', this.c.vms.cache.values()],
      ['ProxmoxVMScaleSet', this.c.sets.cache.values()],
    ];
    for (const [kind, items] of objects) {
      for (const o of items) {
        for (const t of ['Ready', 'Synced']) {
          const c = o.status?.conditions?.find((x) => x.type === t);
          this.c.metrics.byCondition.inc({ kind, condition: t, status: c?.status ?? 'Unknown' });
          if (c?.status === 'False')
            this.c.metrics.conditionReasons.inc({ kind, condition: t, reason: c.reason ?? 'Unknown' });
        }
      }
    }
    let ok = 0;
    let failed = 0;
    for (const n of this.createAttempts.values()) {
      ok = Math.max(ok, n.ok);
      failed = Math.max(failed, n.failed);
    }
    this.c.metrics.createAttemptsMax.set({ outcome: 'ok' }, ok);
    this.c.metrics.createAttemptsMax.set({ outcome: 'failed' }, failed);
    countStates(this.c.metrics, GVK.ProxmoxVM, this.c.vms.cache.values());
    countStates(this.c.metrics, GVK.ProxmoxImage, this.c.images.cache.values());
    countStates(this.c.metrics, GVK.ProxmoxTemplate, this.c.templates.cache.values());
  }
}
