/**
 * The cluster-less runtime: the engine over a FileStore (state file + lock), the ProxmoxVM
 * connector over a ProviderConfig file, and a loop that runs until every resource is Ready or
 * has failed for a reason that retrying will not fix — as observed by a reconcile of this run:
 * the state file only remembers what Proxmox held when it was written. A resource's row and what
 * its object alone says (settled, failed for good) are src/local/resource-view.ts.
 */

import { cliInstallation, installationOf } from '../api/provider-config.ts';
import type { LoadedProviderConfig } from '../api/provider-config-load.ts';
import type { ProxmoxImage } from '../api/proxmoximage.ts';
import type { ProxmoxTemplate } from '../api/proxmoxtemplate.ts';
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { Controller } from '../engine/controller.ts';
import { ManagedReconciler, type ReconcileResult } from '../engine/reconciler.ts';
import { FINALIZER, getCondition, keyOf } from '../engine/resource.ts';
import type { EngineHooks } from '../engine/types.ts';
import { type Catalog, planImages, templateOnNode } from '../image/references.ts';
import { ImageRuntime } from '../image/runtime.ts';
import { PERMANENT_REASONS } from '../vm/conditions.ts';
import { VmConnector } from '../vm/connector.ts';
import { planResources, type ResourcePlan } from '../vm/plan.ts';
import { VmidHolderIndex } from '../vm/vmid-holders.ts';
import { FileConfigSource } from './config-source.ts';
import { MemoryStore } from './memory-store.ts';
import {
  failedPermanently,
  isSettled,
  READY_STOP_REASONS,
  type Row,
  STOP_REASONS,
  StoreRows,
  settled,
} from './resource-view.ts';
import { FileStore } from './store.ts';

export interface RuntimeOptions {
  config: LoadedProviderConfig;
  /** State file; in memory when undefined. */
  stateFile?: string;
  workers?: number;
  pollIntervalMs?: number;
  /** How often a Ready VM's config is read in full for drift (VmClientOptions.driftIntervalMs; default 5 min). */
  driftIntervalMs?: number;
  hooks?: EngineHooks;
  backoff?: { baseMs?: number; capMs?: number };
  createFailureScheduleMs?: number[];
  /** After a create succeeded, "not found" within this window is Proxmox's listing lagging (default 30 s). */
  creationGraceMs?: number;
  /** Secrets for cloud-init references (\`namespace/name\` -> data), e.g. from the manifests. */
  secrets?: Map<string, Record<string, string>>;
  taskPollMs?: number;
  /** How soon to ask the guest agent again while a running VM has no address yet (default 5 s). */
  agentPollMs?: number;
  /**
   * Whether a VM a reconcile of this runtime found Ready is polled again (every pollIntervalMs).
   * apply says no: its run ends once every VM is Ready, and a poll of each Ready VM every minute
   * made an apply of N VMs cost O(N x its duration), O(N^2). Default true.
   */
  pollReady?: boolean;
  /**
   * How long a VM may stay `NodeOffline` (Ready False, or Synced False while deleted), as this
   * runtime's reconciles saw it, before apply and delete count it failed (`--offline-grace`);
   * default: waited for as long as the run lasts.
   */
  offlineGraceMs?: number;
  /** Called after every reconcile. */
  onResult?: (key: string, result: ReconcileResult, failures: number) => void;
}

/** The kinds besides ProxmoxVM that apply runs (images, then templates, then VMs). */
export type ImageKind = 'ProxmoxImage' | 'ProxmoxTemplate';

/** The longest wait between two checks, however much one costs (a gate opens at most this late). */
const CHECK_WAIT_CAP_MS = 5000;
/** The least time between two checks brought forward by a resource that settled. */
const MIN_CHECK_GAP_MS = 1;

export class LocalRuntime {
  readonly store: MemoryStore<ProxmoxVM>;
  /**
   * ProxmoxImages and ProxmoxTemplates of this run. In memory: Proxmox holds what they stand for
   * (a file found by its name, template VMs by name and marker), so a new run finds it again.
   */
  readonly images = new MemoryStore<ProxmoxImage>();
  readonly templates = new MemoryStore<ProxmoxTemplate>();
  readonly imageRuntime: ImageRuntime;
  readonly connector: VmConnector;
  readonly controller: Controller<ProxmoxVM>;
  /** The installation the VMs of this runtime belong to (the ProviderConfig's; see installationOf). */
  readonly installation: string;
  /** The VMIDs the store's resources hold per site (the connector's vmidHolders). */
  private readonly vmidHolders: VmidHolderIndex;
  /** Failures in a row of the resources whose last reconcile failed (none: not here). */
  private readonly failures = new Map<string, number>();
  private noteFailures(key: string, failures: number): void {
    if (failures) this.failures.set(key, failures);
    else this.failures.delete(key);
  }
  /**
   * The last reconcile result of each resource in this runtime. What the store says about a
   * resource nobody reconciled yet is the state file's memory of an earlier run, not what Proxmox
   * holds now (a VM may have been stopped, changed or destroyed by hand since).
   */
  private readonly lastResult = new Map<string, ReconcileResult>();
  /** See RuntimeOptions.offlineGraceMs. */
  private readonly offlineGraceMs: number | undefined;
  /** The site of a manifest that names none: the config's only one (undefined with several). */
  private readonly defaultSite: string | undefined;

  constructor(opts: RuntimeOptions) {
    this.offlineGraceMs = opts.offlineGraceMs;
    const sites = opts.config.config.spec.sites;
    this.defaultSite = sites.length === 1 ? sites[0]!.name : undefined;
    this.installation = installationOf(opts.config.config, cliInstallation);
    if (opts.stateFile) {
      const fs = new FileStore<ProxmoxVM>(opts.stateFile);
      fs.open(this.installation);
      this.store = fs;
    } else this.store = new MemoryStore<ProxmoxVM>();
    this.vmidHolders = new VmidHolderIndex(opts.config.config.spec.sites.map((s) => s.name));
    this.store.addIndex((key, r) => this.vmidHolders.set(key, r));
    const catalog: Catalog = {
      images: () => this.images.listSync(),
      templates: () => this.templates.listSync(),
      vms: () => this.store.listSync(),
    };
    this.connector = new VmConnector(new FileConfigSource(opts.config), {
      templateOnNode: (r, node) => templateOnNode(catalog, r, node),
      // A task that ended or a slot taken for a resource reconciles it at once (no polling for it).
      wake: (key) => this.controller?.wake(key),
      // /cluster/resources refreshes every 10 s in PVE (pvestatd): no point in reading it more often.
      siteTtlMs: Math.min(10_000, Math.max(100, (opts.pollIntervalMs ?? 60_000) / 2)),
      ...(opts.hooks ? { hooks: opts.hooks } : {}),
      ...(opts.taskPollMs !== undefined ? { taskPollMs: opts.taskPollMs } : {}),
      ...(opts.driftIntervalMs !== undefined ? { driftIntervalMs: opts.driftIntervalMs } : {}),
      ...(opts.agentPollMs !== undefined ? { agentPollMs: opts.agentPollMs } : {}),
      // An index the store keeps up to date, not a scan of every resource per VMID choice.
      vmidHolders: (site) => this.vmidHolders.holdersOf(site),
      secret: async (ref, r) => {
        const ns = ref.namespace ?? r.metadata.namespace ?? 'default';
        const data = opts.secrets?.get(`${ns}/${ref.name}`) ?? opts.config.secrets.get(`${ns}/${ref.name}`)?.data;
        if (!data) throw new Error('not found among the manifests (add a v1 Secret with that name)');
        const v = data[ref.key];
        if (v === undefined) throw new Error(`the Secret has no key '${ref.key}'`);
        return v;
      },
    });
    const reconciler = new ManagedReconciler<ProxmoxVM>(this.store, this.connector, {
      pollIntervalMs: opts.pollIntervalMs ?? 60_000,
      ...(opts.taskPollMs !== undefined ? { shortWaitMs: opts.taskPollMs } : {}),
      ...(opts.hooks ? { hooks: opts.hooks } : {}),
      ...(opts.createFailureScheduleMs ? { createFailureScheduleMs: opts.createFailureScheduleMs } : {}),
      ...(opts.creationGraceMs !== undefined ? { creationGraceMs: opts.creationGraceMs } : {}),
    });
    // A resource that left the store takes its per-resource client (drift bookkeeping) with it, and
    // wakes the template it cloned. Only that much of each resource is remembered here (not a copy
    // of every resource: the store holds them).
    const present = new Map<string, { uid: string; gone: Parameters<ImageRuntime['vmGone']>[0] | undefined }>();
    this.store.addIndex((key, obj) => {
      if (obj) {
        const templateRef = obj.spec.forProvider.templateRef;
        const gone = templateRef
          ? {
              metadata: { ...(obj.metadata.namespace ? { namespace: obj.metadata.namespace } : {}) },
              spec: { forProvider: { templateRef } },
            }
          : undefined;
        present.set(key, { uid: obj.metadata.uid, gone });
        return;
      }
      const last = present.get(key);
      present.delete(key);
      if (last?.gone) this.imageRuntime.vmGone(last.gone);
      if (last?.uid) this.connector.forget(last.uid);
    });
    this.controller = new Controller(this.store, reconciler, {
      workers: opts.workers ?? 8,
      ...(opts.backoff ? { backoff: opts.backoff } : {}),
      // A reconcile without work in flight that left the VM Ready (settled): stateOf's 'ready'.
      ...(opts.pollReady === false
        ? { pollOf: (key: string, ms: number) => (isSettled(this.store.getSync(key)) ? undefined : ms) }
        : {}),
      onResult: (key, result, failures) => {
        this.noteFailures(key, failures);
        this.lastResult.set(key, result);
        this.noteOffline(key);
        this.settledNow(key);
        opts.onResult?.(key, result, failures);
      },
    });
    this.imageRuntime = new ImageRuntime({
      source: new FileConfigSource(opts.config),
      images: this.images,
      templates: this.templates,
      catalog,
      ...(opts.taskPollMs !== undefined ? { taskPollMs: opts.taskPollMs } : {}),
      pollIntervalMs: opts.pollIntervalMs ?? 60_000,
      ...(opts.creationGraceMs !== undefined ? { creationGraceMs: opts.creationGraceMs } : {}),
      ...(opts.backoff ? { backoff: opts.backoff } : {}),
      ...(opts.hooks ? { hooks: opts.hooks } : {}),
      wakeVms: (t) => {
        for (const vm of this.store.listSync())
          if (
            vm.spec.forProvider.templateRef?.name === t.metadata.name &&
            vm.metadata.namespace === t.metadata.namespace
          )
            this.controller.queue.add(keyOf(vm));
      },
      onResult: (kind, key, result, failures) => {
        this.noteFailures(`${kind}/${key}`, failures);
        this.lastResult.set(`${kind}/${key}`, result);
      },
    });
  }

  /** Put ProxmoxImage or ProxmoxTemplate manifests into their store (as applyManifests does for VMs). */
  applyImages(kind: ImageKind, objs: Array<ProxmoxImage | ProxmoxTemplate>): void {
    const store = (kind === 'ProxmoxImage' ? this.images : this.templates) as MemoryStore<
      ProxmoxImage | ProxmoxTemplate
    >;
    this.admit(store, objs);
  }

  /** Where an image or template stands, as stateOf says for VMs (Ready and Synced, observed so in this run). */
  stateOfImage(kind: ImageKind, key: string): 'absent' | 'progressing' | 'ready' | 'failed' {
    const o = (kind === 'ProxmoxImage' ? this.images : this.templates).getSync(key);
    if (!o) return 'absent';
    const last = this.lastResult.get(`${kind}/${key}`);
    if (!last) return 'progressing';
    const readyNow = getCondition(o, 'Ready')?.status === 'True' && getCondition(o, 'Synced')?.status === 'True';
    if (readyNow && last.kind === 'requeueAfter' && !last.progress) return 'ready';
    const s = getCondition(o, 'Synced');
    if (s?.status === 'False' && STOP_REASONS.has(s.reason) && (this.failures.get(`${kind}/${key}`) ?? 0) >= 1)
      return 'failed';
    return 'progressing';
  }

  /** Put the manifests into the store (a new uid the first time, kept in the state file after). */
  applyManifests(vms: ProxmoxVM[]): void {
    this.admit(this.store, vms);
  }

  /** Copies of `objs` into `store`, in the default namespace, keeping the uid a stored one has. */
  private admit<R extends ProxmoxVM | ProxmoxImage | ProxmoxTemplate>(store: MemoryStore<R>, objs: R[]): void {
    const t0 = performance.now();
    // One copy at a time (a generator): an unphased apply admits every resource at once.
    store.applyAll(
      (function* () {
        for (const o of objs) {
          const copy = structuredClone(o);
          copy.metadata.namespace ??= 'default';
          copy.metadata.uid = store.getSync(keyOf(copy))?.metadata.uid ?? '';
          yield copy;
        }
      })(),
    );
    this.admittedMs += performance.now() - t0;
  }

  /**
   * Time spent putting manifests into the store (admit), which runUntil
   * leaves out of a check's cost: a check that admits a phase writes it once, and the first write
   * opens the state database. Counted in, a check of 2 VMs that took 35 ms spaced the next one
   * 665 ms later, and the seed fleet's second phase opened 15 simulated seconds (speed 100) after
   * its first was Ready.
   */
  private admittedMs = 0;
  /** What runUntil's last check cost (ms), which spaces the next one: for the tests. */
  lastCheckCostMs = 0;

  /**
   * What reconciling each target would do, read from Proxmox through this runtime's connector;
   * `readAhead`: the ones carried out at once (apply), see planResource.
   */
  async plan(
    targets: ProxmoxVM[],
    opts: { readAhead?: (key: string) => boolean; images?: readonly ProxmoxImage[] } = {},
  ): Promise<ResourcePlan[]> {
    // A file a ProxmoxImage of the manifests brings first is planned as there (references.ts).
    const images = opts.images?.length ? planImages(opts.images, this.defaultSite, keyOf) : undefined;
    const plans = await planResources(targets, (r) => this.connector.connect(r), keyOf, undefined, {
      ...(opts.readAhead ? { readAhead: opts.readAhead } : {}),
      ...(images ? { imageToCome: images.imageToCome } : {}),
    });
    return plans.map((p) => {
      const img = p.action === 'create' ? images?.waitsFor.get(p.key) : undefined;
      if (!img) return p;
      return {
        ...p,
        message: `after ProxmoxImage ${img.metadata.namespace ?? 'default'}/${img.metadata.name} downloads it`,
      };
    });
  }

  /**
   * Do ahead for `targets`, resources not in the store yet that will be created once a gate opens,
   * what needs no gate (src/vm/preflight.ts prepareCreate: their snippets). Apply does not wait
   * for it (the promise is for the tests), and what fails here is met again by the create.
   */
  async prepare(targets: ProxmoxVM[]): Promise<void> {
    await Promise.all(
      targets.map((r) =>
        this.connector
          .connect(r)
          .then((external) => external.prepareFor(r))
          .catch(() => {}),
      ),
    );
  }

  markDeleted(keys: string[]): void {
    for (const k of keys) this.store.markDeleted(k);
  }

  /**
   * Delete resources this state does not hold (a lost or another state file): each enters the
   * store under its finalizer and is marked deleted at once, so the engine looks for its VM by
   * marker, adopts and destroys it, or finds none and lets go. It never creates one.
   */
  deleteUnknown(vms: ProxmoxVM[]): void {
    for (const vm of vms) {
      const copy = structuredClone(vm);
      copy.metadata.namespace ??= 'default';
      if (this.store.getSync(keyOf(copy))) continue;
      copy.metadata.uid = '';
      copy.metadata.finalizers = [FINALIZER];
      this.store.apply(copy);
      this.store.markDeleted(keyOf(copy));
    }
  }

  /**
   * The rows of every resource, in rollout order; each made again only when its resource was
   * written since or its AGE reads differently (see StoreRows).
   */
  rows(now = Date.now()): Row[] {
    return this.storeRows.rows(this.store.listSync(), now);
  }
  private readonly storeRows = new StoreRows();

  /**
   * Whether a reconcile of `key` finished in this runtime and found nothing left to do: it observed
   * the VM as the spec wants it (the engine's quiet requeue after "up to date"). A reconcile that
   * issued a change, waits for a task or for Proxmox's listing to show a VM is progress, not this.
   */
  observedSettled(key: string): boolean {
    const r = this.lastResult.get(key);
    return r?.kind === 'requeueAfter' && !r.progress;
  }

  /**
   * Where a resource stands, for rollout gates and for apply's end: only what a reconcile of this
   * runtime saw counts (ready: settled in the store and observed so; failed: failed for good and
   * retried at least once here).
   */
  stateOf(key: string): 'absent' | 'progressing' | 'ready' | 'failed' {
    const o = this.store.getSync(key);
    if (!o) return 'absent';
    if (!this.lastResult.has(key)) return 'progressing';
    if (settled(o) && this.observedSettled(key)) return 'ready';
    // A reason the engine backs off to the cap counts once it was confirmed (a second failure,
    // a backoff base later); the others at the first.
    const confirmations = PERMANENT_REASONS.has(getCondition(o, 'Synced')?.reason ?? '') ? 2 : 1;
    if (failedPermanently(o) && (this.failures.get(key) ?? 0) >= confirmations) return 'failed';
    // A guest that did not come up (observed so by this runtime): no wait in this run fixes it.
    const ready = getCondition(o, 'Ready');
    if (ready?.status === 'False' && READY_STOP_REASONS.has(ready.reason)) return 'failed';
    if (this.offlineTooLong(key)) return 'failed';
    return 'progressing';
  }

  /** Whether a resource's VM is made and started, its guest still booting (apply's phaseToPrepare). */
  booting(key: string): boolean {
    const step = this.store.getSync(key)?.status?.atProvider?.step;
    return step === 'WaitingForAgent' || step === 'WaitingForCloudInit' || step === 'Ready';
  }

  /** Per resource whose node is offline (Ready or Synced False NodeOffline): when a reconcile of this run first saw it so. */
  private readonly offlineSince = new Map<string, number>();

  private noteOffline(key: string): void {
    const r = this.store.getSync(key);
    // (Ready while it is made or kept; Synced while it is deleted, Ready then saying Deleting.)
    const offline =
      r &&
      ['Ready', 'Synced'].some((t) => {
        const c = getCondition(r, t);
        return c?.status === 'False' && c.reason === 'NodeOffline';
      });
    if (offline) {
      if (!this.offlineSince.has(key)) this.offlineSince.set(key, Date.now());
    } else this.offlineSince.delete(key);
  }

  /**
   * The resources whose node has been offline for longer than offlineGraceMs (stateOf's 'failed'):
   * a node that reboots is back within minutes, one that stays down is a person's to mend.
   */
  offlineTooLong(key: string): boolean {
    const since = this.offlineSince.get(key);
    return since !== undefined && this.offlineGraceMs !== undefined && Date.now() - since >= this.offlineGraceMs;
  }

  /** Resources whose last reconcile left them ready or failed (what ends a wait or opens a gate). */
  private readonly settledKeys = new Set<string>();
  /** Whether a resource that begins to boot wakes the check (runUntil's `wakeWhenBooting`). */
  private wakeWhenBooting = false;
  /** Resources seen booting (see settledNow), each waking a check once. */
  private readonly bootingKeys = new Set<string>();
  /** Run the next check of runUntil soon: a resource became ready or failed, or began to boot. */
  private wakeCheck: (() => void) | undefined;

  private settledNow(key: string): void {
    const state = this.stateOf(key);
    if (state !== 'ready' && state !== 'failed') {
      this.settledKeys.delete(key);
      // A VM whose guest began to boot may complete what a phase needs to be prepared (apply's
      // phaseToPrepare): a check then, not a tick later (a guest boots in 25 ms at speed 1000).
      if (this.wakeWhenBooting && this.booting(key) && !this.bootingKeys.has(key)) {
        this.bootingKeys.add(key);
        this.wakeCheck?.();
      }
      return;
    }
    this.bootingKeys.delete(key);
    if (this.settledKeys.has(key)) return;
    this.settledKeys.add(key);
    this.wakeCheck?.();
  }

  /**
   * Reconcile until `check` says ok or fail (it also admits new resources: rollout gates), or the
   * timeout / the signal. `check` runs every `tickMs`, or less often when it costs more than a
   * twentieth of that: a check looks at every resource, and at a fixed rate its cost over an apply
   * would grow as N x the apply's duration (N^2); this keeps it at about 5% of the time. A
   * resource that becomes ready or failed (with `wakeWhenBooting`, also one whose guest begins to
   * boot) brings the next check forward, to no sooner than that
   * same share of time after the last: the VM that completes a phase opens the next at once, not
   * a tick later (at speed 100, a 200 ms tick is 20 simulated seconds per phase).
   */
  async runUntil(opts: {
    check: () => 'continue' | 'ok' | 'fail';
    timeoutMs: number;
    tickMs?: number;
    signal?: AbortSignal;
    /** A resource whose guest begins to boot brings the check forward too (a phased apply's). */
    wakeWhenBooting?: boolean;
  }): Promise<{ ok: boolean; timedOut: boolean }> {
    this.wakeWhenBooting = opts.wakeWhenBooting ?? false;
    await this.controller.start();
    await this.imageRuntime.start();
    const deadline = Date.now() + opts.timeoutMs;
    try {
      for (;;) {
        const t0 = performance.now();
        const admitted = this.admittedMs;
        const c = opts.check();
        const cost = performance.now() - t0 - (this.admittedMs - admitted);
        this.lastCheckCostMs = cost;
        if (c !== 'continue') return { ok: c === 'ok', timedOut: false };
        if (Date.now() > deadline || opts.signal?.aborted) return { ok: false, timedOut: !opts.signal?.aborted };
        const gap = Math.min(CHECK_WAIT_CAP_MS, Math.round(cost * 19));
        const wait = Math.max(opts.tickMs ?? 200, gap);
        const checked = performance.now();
        await new Promise<void>((resolve) => {
          let timer = setTimeout(resolve, wait);
          this.wakeCheck = () => {
            this.wakeCheck = undefined;
            clearTimeout(timer);
            timer = setTimeout(resolve, Math.max(0, checked + Math.max(MIN_CHECK_GAP_MS, gap) - performance.now()));
          };
        });
        this.wakeCheck = undefined;
      }
    } finally {
      this.wakeCheck = undefined;
      await Promise.all([this.controller.stop(), this.imageRuntime.stop()]);
    }
  }

  /** Reconcile until every resource of `keys` is Ready (or failed for good) / gone. */
  run(opts: {
    keys: string[];
    until: 'ready' | 'gone';
    timeoutMs: number;
    tick?: () => void;
    tickMs?: number;
    signal?: AbortSignal;
  }): Promise<{ ok: boolean; timedOut: boolean }> {
    return this.runUntil({
      timeoutMs: opts.timeoutMs,
      ...(opts.tickMs !== undefined ? { tickMs: opts.tickMs } : {}),
      ...(opts.signal ? { signal: opts.signal } : {}),
      check: () => {
        opts.tick?.();
        if (opts.until === 'gone') {
          const objs = opts.keys.map((k) => this.store.getSync(k));
          if (objs.every((o) => !o)) return 'ok';
          return objs.every((o, i) => !o || failedPermanently(o) || this.offlineTooLong(opts.keys[i]!))
            ? 'fail'
            : 'continue';
        }
        const states = opts.keys.map((k) => this.stateOf(k));
        if (states.every((x) => x === 'ready')) return 'ok';
        return states.every((x) => x === 'ready' || x === 'failed') ? 'fail' : 'continue';
      },
    });
  }

  async close(): Promise<void> {
    await this.connector.close();
    await this.imageRuntime.close();
    if (this.store instanceof FileStore) this.store.close();
  }
}
