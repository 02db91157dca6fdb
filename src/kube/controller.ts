/**
 * `provider-proxmox controller`: the engine behind Kubernetes, as controller-runtime's manager.
 * Informers for the provider's kinds, the KubeStore of ProxmoxVMs (status subresource,
 * finalizers, events), the VM connector, the scale-set controller, the installation id, health
 * and metrics, and leader election on a Lease. What runs only while this replica leads (the
 * managed reconcilers, usages, the ProviderConfig in-use finalizer, gauges, the resync and the
 * orphan-scan timers) is runnables.ts; the orphan scan itself, orphans.ts.
 *
 * Safe start (as Crossplane's): the controller starts with the CRDs it finds. An informer whose
 * resource is not served (its CRD is missing) settles as absent, /readyz says which, and the kind
 * is picked up as soon as its CRD appears (informer.ts), with no restart.
 */
import { hostname } from 'node:os';
import { INSTALLATION_RE } from '../api/provider-config.ts';
import type { ProxmoxImage } from '../api/proxmoximage.ts';
import type { ProxmoxTemplate } from '../api/proxmoxtemplate.ts';
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { GROUP, VERSION } from '../api/proxmoxvm.ts';
import { decimalSizes } from '../api/quantity.ts';
import type { ProxmoxVMScaleSet } from '../api/scaleset.ts';
import { type Catalog, templateOnNode } from '../image/references.ts';
import { Metrics } from '../observability/metrics.ts';
import { startHealthServer } from '../observability/server.ts';
import { ScaleSetController } from '../scaleset/controller.ts';
import { VmConnector } from '../vm/connector.ts';
import { VmidHolderIndex } from '../vm/vmid-holders.ts';
import { collectionPath, type KubeApi } from './api.ts';
import { Informer, type KubeObject } from './informer.ts';
import { LeaderElector } from './leader.ts';
import { scanOrphans } from './orphans.ts';
import { KubeConfigSource, UsageTracker } from './providerconfig.ts';
import { LeaderRunnables, type Obj } from './runnables.ts';
import { EventRecorder, KubeStore } from './store.ts';

export { SCALESET_FINALIZER } from '../scaleset/controller.ts';

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
  /** What the informers hold, for references between images, templates and VMs. */
  private readonly catalog: Catalog;
  readonly connector: VmConnector;
  readonly usage: UsageTracker;
  /** One source for the connector, the scale sets and the orphan scan: it caches configs and their Secrets. */
  private readonly configSource: KubeConfigSource;
  /** One recorder for the whole process, so that a repeated event (each orphan scan's) is counted, not re-created. */
  private readonly recorder: EventRecorder;
  /** uid -> the generation whose decimal sizes an event named (warnOfDecimalSizes): once each. */
  private readonly sizesWarned = new Map<string, number>();
  private elector: LeaderElector | undefined;
  private health: Awaited<ReturnType<typeof startHealthServer>> | undefined;
  private metricsServer: Awaited<ReturnType<typeof startHealthServer>> | undefined;
  readonly scaleSets: ScaleSetController;
  /** What runs while this replica leads: the managed reconcilers and their timers (runnables.ts). */
  private readonly runnables: LeaderRunnables;
  private leading = false;
  private stopped = false;
  private installationId: string | undefined;

  constructor(o: ControllerOptions) {
    this.o = o;
    this.api = o.api;
    this.metrics = o.metrics ?? new Metrics();
    const log = (msg: string, fields?: Record<string, unknown>) => o.log?.('warn', msg, fields);
    const path = (plural: string) => collectionPath(GROUP, VERSION, plural);
    // No informer resync for ProxmoxVMs: the controller resyncs them itself, behind any change
    // (runnables.ts, while leading), where the informer's would reach the work queue as changes.
    this.vms = new Informer<ProxmoxVM>(this.api, path('proxmoxvms'), {
      log,
      resyncMs: 0,
      onCacheChange: (key, vm) => {
        this.vmidHolders.set(key, vm);
        if (vm) this.warnOfDecimalSizes(vm);
      },
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
      wake: (key) => this.runnables.controller?.wake(key),
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
    this.runnables = new LeaderRunnables({
      o,
      api: this.api,
      metrics: this.metrics,
      vms: this.vms,
      sets: this.sets,
      pcs: this.pcs,
      cpcs: this.cpcs,
      usages: this.usages,
      images: this.images,
      templates: this.templates,
      store: this.store,
      catalog: this.catalog,
      configSource: this.configSource,
      recorder: this.recorder,
      usage: this.usage,
      connector: this.connector,
      scaleSets: this.scaleSets,
      installation: () => this.installation,
      leading: () => this.leading,
      orphanScan: () => this.orphanScan(),
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

  /**
   * A Warning event for the sizes of a ProxmoxVM in decimal units (`memory: 4G` is 4,000,000,000
   * bytes, not 4 GiB), once per generation: what `validate`, `plan` and `apply` say at the line,
   * for a manifest applied with kubectl (a CRD's rules can refuse, not warn). Only VMs with such a
   * size are remembered.
   */
  private warnOfDecimalSizes(vm: ProxmoxVM): void {
    const generation = vm.metadata.generation ?? 0;
    if (this.sizesWarned.get(vm.metadata.uid) === generation) return;
    const sizes = decimalSizes(vm.spec?.forProvider ?? {});
    if (!sizes.length) {
      this.sizesWarned.delete(vm.metadata.uid);
      return;
    }
    this.sizesWarned.set(vm.metadata.uid, generation);
    this.recorder.record(vm, 'Warning', 'DecimalSizeUnits', sizes.map((x) => `${x.field}: ${x.message}`).join('; '));
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

  private startLeading(): void {
    if (this.leading || this.stopped) return;
    this.leading = true;
    this.metrics.leader.set(1);
    this.runnables.start();
  }

  private async stopLeading(): Promise<void> {
    this.leading = false;
    await this.runnables.stop();
  }

  /**
   * This installation's VMs with a marker and no ProxmoxVM, reported and deleted if configured
   * (orphans.ts). Every orphan-scan timer of the leader runs it; tests call it directly.
   */
  async orphanScan(): Promise<void> {
    await scanOrphans({
      o: this.o,
      vms: this.vms,
      pcs: this.pcs,
      cpcs: this.cpcs,
      configSource: this.configSource,
      recorder: this.recorder,
      metrics: this.metrics,
      installation: () => this.installation,
    });
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
