/**
 * `provider-proxmox controller`: the engine behind Kubernetes. Informers for the provider's kinds,
 * the managed reconciler for ProxmoxVMs (status subresource, finalizers, events, usages,
 * connection Secrets), the scale-set controller, the ProviderConfig in-use finalizer, leader
 * election on a Lease, health and metrics, and an hourly orphan scan.
 */
import { hostname } from 'node:os';
import { INSTALLATION_RE, installationOf } from '../api/provider-config.ts';
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { GROUP, VERSION } from '../api/proxmoxvm.ts';
import type { ProxmoxVMScaleSet } from '../api/scaleset.ts';
import { Controller } from '../engine/controller.ts';
import { ManagedReconciler } from '../engine/reconciler.ts';
import { type Connector, ReasonedError } from '../engine/types.ts';
import { WorkQueue } from '../engine/workqueue.ts';
import { collect, knownResources, scanSite } from '../fleet/gc.ts';
import { Metrics } from '../observability/metrics.ts';
import { startHealthServer } from '../observability/server.ts';
import { clientForSite } from '../proxmox/site.ts';
import { planScale } from '../scaleset/reconcile.ts';
import { VmConnector, vmidHoldersOf } from '../vm/connector.ts';
import { collectionPath, type KubeApi, KubeError } from './api.ts';
import { Informer, type KubeObject } from './informer.ts';
import { LeaderElector } from './leader.ts';
import {
  KubeConfigSource,
  publishConnectionSecret,
  reconcileProviderConfigInUse,
  UsageTracker,
} from './providerconfig.ts';
import { EventRecorder, KubeStore } from './store.ts';

export const SCALESET_FINALIZER = 'proxmox.sankofa.io/scaleset';

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
  healthPort?: number;
  /** /metrics on its own port (Crossplane's convention: 8080); default: on the health port. */
  metricsPort?: number;
  healthHost?: string;
  orphanScanMs?: number;
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

export class ProviderController {
  readonly o: ControllerOptions;
  readonly api: KubeApi;
  readonly metrics: Metrics;
  readonly vms: Informer<ProxmoxVM>;
  readonly sets: Informer<ProxmoxVMScaleSet>;
  readonly pcs: Informer<Obj>;
  readonly cpcs: Informer<Obj>;
  readonly usages: Informer<Obj>;
  readonly store: KubeStore<ProxmoxVM>;
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
  private readonly setQueue = new WorkQueue({ backoff: { baseMs: 500, capMs: 60_000 } });
  private setWorkers: Promise<void>[] = [];
  private timers: NodeJS.Timeout[] = [];
  private leading = false;
  private stopped = false;
  private installationId: string | undefined;
  private readonly unsubs: Array<() => void> = [];

  constructor(o: ControllerOptions) {
    this.o = o;
    this.api = o.api;
    this.metrics = o.metrics ?? new Metrics();
    const log = (msg: string, fields?: Record<string, unknown>) => o.log?.('warn', msg, fields);
    const path = (plural: string) => collectionPath(GROUP, VERSION, plural);
    this.vms = new Informer<ProxmoxVM>(this.api, path('proxmoxvms'), { log });
    this.sets = new Informer<ProxmoxVMScaleSet>(this.api, path('proxmoxvmscalesets'), { log });
    this.pcs = new Informer<Obj>(this.api, path('providerconfigs'), { log });
    this.cpcs = new Informer<Obj>(this.api, path('clusterproviderconfigs'), { log });
    this.usages = new Informer<Obj>(this.api, path('providerconfigusages'), { log });
    this.api.onRequest = (verb, status) => this.metrics.kubeRequests.inc({ verb, code: String(status) });
    this.recorder = new EventRecorder(this.api);
    this.store = new KubeStore<ProxmoxVM>(
      this.api,
      this.vms,
      { group: GROUP, version: VERSION, plural: 'proxmoxvms', kind: 'ProxmoxVM' },
      this.recorder,
    );
    this.usage = new UsageTracker(this.api);
    this.configSource = new KubeConfigSource(this.api, this.pcs as never, this.cpcs as never);
    this.connector = new VmConnector(this.configSource, {
      // ProviderConfig spec.installation wins; this is the cluster's default (resolved in start()).
      installation: () => this.installation,
      ...(o.taskPollMs !== undefined ? { taskPollMs: o.taskPollMs } : {}),
      siteTtlMs: Math.min(10_000, Math.max(100, (o.pollIntervalMs ?? 60_000) / 2)),
      // Cloud-init Secrets live in the resource's namespace (the CRD forbids other namespaces).
      // VMIDs held by resources whose VM is not created yet (reservations survive a restart).
      vmidHolders: (site) => vmidHoldersOf(this.vms.cache.values(), site, undefined),
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
        const synced = [this.vms, this.sets, this.pcs, this.cpcs, this.usages].every((x) => x.hasSynced);
        return { ok: synced, detail: synced ? (this.leading ? 'ok (leader)' : 'ok (standby)') : 'caches not synced' };
      },
    };
    const host = o.healthHost ? { host: o.healthHost } : {};
    if (o.healthPort !== undefined)
      this.health = await startHealthServer({ port: o.healthPort, ...host, metrics: this.metrics, checks });
    if (o.metricsPort !== undefined && o.metricsPort !== o.healthPort) {
      this.metricsServer = await startHealthServer({ port: o.metricsPort, ...host, metrics: this.metrics, checks });
    }
    await Promise.all([this.vms.start(), this.sets.start(), this.pcs.start(), this.cpcs.start(), this.usages.start()]);
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
    const reconciler = new ManagedReconciler<ProxmoxVM>(this.store, this.trackingConnector(), {
      pollIntervalMs: o.pollIntervalMs ?? 60_000,
      ...(o.taskPollMs !== undefined ? { shortWaitMs: o.taskPollMs } : {}),
      ...(o.createFailureScheduleMs ? { createFailureScheduleMs: o.createFailureScheduleMs } : {}),
      publishConnection: (r, details) => publishConnectionSecret(this.api, r, details),
      // Creates by outcome: ok = Proxmox accepted the create; failed = it refused it, or its task failed.
      hooks: {
        at: (step) => {
          if (step === 'create-issued') this.metrics.creates.inc({ outcome: 'ok' });
          else if (step === 'create-failed') this.metrics.creates.inc({ outcome: 'failed' });
        },
      },
      onResult: (_key, result, ms) => {
        if (result.kind === 'rateLimited' && result.error instanceof ReasonedError && result.error.createFailure)
          this.metrics.creates.inc({ outcome: 'failed' });
        this.metrics.reconciles.inc({
          kind: 'ProxmoxVM',
          result: result.kind === 'rateLimited' ? 'error' : result.kind === 'done' ? 'done' : 'requeue',
        });
        this.metrics.reconcileSeconds.observe({ kind: 'ProxmoxVM' }, ms / 1000);
      },
      ...(o.log ? { log: o.log } : {}),
    });
    this.controller = new Controller(this.store, reconciler, {
      workers: o.workers ?? 8,
      ...(o.backoff ? { backoff: o.backoff } : {}),
    });
    this.controller.queue.onLatency = (ms) => this.metrics.queueLatency.observe({ kind: 'ProxmoxVM' }, ms / 1000);
    void this.controller.start();
    // Deleted resources: release their usage and per-resource caches.
    this.unsubs.push(
      this.vms.on((type, obj) => {
        if (type === 'DELETED') {
          this.connector.forget(obj.metadata.uid);
          this.usage.release(obj).catch((e) => o.log?.('warn', 'cannot delete usage', { error: String(e) }));
        }
        const owner = (
          obj.metadata as { ownerReferences?: Array<{ kind: string; name: string }> }
        ).ownerReferences?.find((x) => x.kind === 'ProxmoxVMScaleSet');
        if (owner) this.setQueue.add(`${obj.metadata.namespace}/${owner.name}`);
      }),
      this.sets.on((_t, _o, key) => this.setQueue.add(key)),
      this.pcs.on(() => this.schedulePcSync()),
      this.cpcs.on(() => this.schedulePcSync()),
      this.usages.on(() => this.schedulePcSync()),
    );
    for (const k of this.sets.cache.keys()) this.setQueue.add(k);
    // Started once: they outlive a lost leadership (idle), and serve again if it comes back.
    if (!this.setWorkers.length) for (let i = 0; i < 2; i++) this.setWorkers.push(this.setWorker());
    this.schedulePcSync();
    const gauges = setInterval(() => this.updateGauges(), 15_000);
    gauges.unref();
    this.timers.push(gauges);
    const scanEvery = o.orphanScanMs ?? 3_600_000;
    if (scanEvery > 0) {
      const first = setTimeout(() => void this.orphanScan(), Math.min(30_000, scanEvery));
      first.unref();
      const every = setInterval(() => void this.orphanScan(), scanEvery);
      every.unref();
      this.timers.push(first, every);
    }
  }

  private async stopLeading(): Promise<void> {
    this.leading = false;
    for (const u of this.unsubs.splice(0)) u();
    for (const t of this.timers.splice(0)) clearTimeout(t);
    clearTimeout(this.pcTimer);
    this.pcTimer = undefined;
    await this.controller?.stop();
    this.controller = undefined;
  }

  private pcTimer: NodeJS.Timeout | undefined;
  private schedulePcSync(): void {
    if (this.pcTimer || !this.leading) return;
    this.pcTimer = setTimeout(() => {
      this.pcTimer = undefined;
      void this.syncProviderConfigs();
    }, 100);
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
          await reconcileProviderConfigInUse(this.api, pc as never, kind, usages);
        } catch (e) {
          if (!(e instanceof KubeError && e.status === 409))
            this.o.log?.('warn', 'provider config in-use sync failed', { error: String(e) });
          this.schedulePcSync();
        }
      }
    }
  }

  private async setWorker(): Promise<void> {
    for (;;) {
      const key = await this.setQueue.get();
      if (key === undefined) return;
      try {
        // Only the leader writes; keys queued before leadership was lost are dropped (startLeading queues every set).
        const requeue = this.leading ? await this.reconcileSet(key) : undefined;
        this.setQueue.forget(key);
        if (requeue) this.setQueue.addAfter(key, requeue);
      } catch (e) {
        this.o.log?.('warn', 'scale set reconcile failed', { key, error: String(e) });
        this.setQueue.addRateLimited(key);
      } finally {
        this.setQueue.done(key);
      }
    }
  }

  /** Bring a scale set's replicas to its spec; returns a requeue delay while scaling down. */
  async reconcileSet(key: string): Promise<number | undefined> {
    const set = this.sets.cache.get(key);
    if (!set) return undefined;
    const ns = set.metadata.namespace ?? 'default';
    const setPath = `${collectionPath(GROUP, VERSION, 'proxmoxvmscalesets', ns)}/${set.metadata.name}`;
    const vmPath = collectionPath(GROUP, VERSION, 'proxmoxvms', ns);
    if (!set.metadata.deletionTimestamp && !set.metadata.finalizers?.includes(SCALESET_FINALIZER)) {
      await this.api.request('PUT', setPath, {
        body: {
          ...set,
          metadata: { ...set.metadata, finalizers: [...(set.metadata.finalizers ?? []), SCALESET_FINALIZER] },
        },
      });
      return undefined;
    }
    const children = [...this.vms.cache.values()].filter(
      (v) =>
        v.metadata.namespace === ns &&
        ((v.metadata as { ownerReferences?: Array<{ uid: string }> }).ownerReferences ?? []).some(
          (x) => x.uid === set.metadata.uid,
        ),
    );
    let nodes: string[] = [];
    try {
      const t = set.spec.template.spec;
      const loaded = await this.configSource.get(
        t.providerConfigRef ?? { kind: 'ClusterProviderConfig', name: 'default' },
        ns,
      );
      const site = loaded.config.spec.sites.find((s) => s.name === t.forProvider.site) ?? loaded.config.spec.sites[0];
      nodes = site?.nodes ?? [];
    } catch {
      // no config yet: replicas without a node are placed by the VM controller
    }
    const plan = planScale(set, children, nodes);
    for (const vm of plan.create)
      await this.api
        .request('POST', vmPath, { body: vm })
        .catch((e) => (e instanceof KubeError && e.status === 409 ? undefined : Promise.reject(e)));
    for (const vm of plan.update)
      await this.api.request('PUT', `${vmPath}/${vm.metadata.name}`, { body: { ...vm, status: undefined } });
    for (const vm of plan.delete)
      await this.api
        .request('DELETE', `${vmPath}/${vm.metadata.name}`)
        .catch((e) => (e instanceof KubeError && e.status === 404 ? undefined : Promise.reject(e)));
    if (set.metadata.deletionTimestamp) {
      if (children.length === 0) {
        await this.api.request('PUT', setPath, {
          body: {
            ...set,
            metadata: {
              ...set.metadata,
              finalizers: (set.metadata.finalizers ?? []).filter((f) => f !== SCALESET_FINALIZER),
            },
          },
        });
        return undefined;
      }
      return 2000;
    }
    const st = set.status ?? {};
    if (
      st.replicas !== plan.status.replicas ||
      st.readyReplicas !== plan.status.readyReplicas ||
      st.updatedReplicas !== plan.status.updatedReplicas ||
      st.observedGeneration !== plan.status.observedGeneration
    ) {
      const fresh = await this.api.request<ProxmoxVMScaleSet>('GET', setPath);
      await this.api.request('PUT', `${setPath}/status`, {
        body: { ...fresh, status: { ...fresh.status, ...plan.status } },
      });
    }
    return plan.delete.length ? 2000 : undefined;
  }

  private updateGauges(): void {
    this.metrics.byCondition.reset();
    for (const vm of this.vms.cache.values()) {
      for (const t of ['Ready', 'Synced']) {
        const c = vm.status?.conditions?.find((x) => x.type === t);
        this.metrics.byCondition.inc({ kind: 'ProxmoxVM', condition: t, status: c?.status ?? 'Unknown' });
      }
    }
    this.metrics.queueDepth.set({ kind: 'ProxmoxVM' }, this.controller?.queue.length ?? 0);
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
    this.setQueue.shutdown();
    await Promise.all(this.setWorkers);
    await Promise.all([this.vms.stop(), this.sets.stop(), this.pcs.stop(), this.cpcs.stop(), this.usages.stop()]);
    await this.connector.close();
    await this.health?.close();
    await this.metricsServer?.close();
  }
}
