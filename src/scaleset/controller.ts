/**
 * The ProxmoxVMScaleSet controller: a work queue of sets (fed by the Kubernetes controller from
 * the set and replica informers), two workers, and per set: the finalizer, the replicas planned by
 * reconcile.ts (created, updated, deleted through the API server, where the ProxmoxVM controller
 * takes them over), status counts and the Ready/Synced conditions of status.ts, with an event for
 * every replica created or deleted and every condition that changed. Only the leader writes.
 */
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { GROUP, VERSION } from '../api/proxmoxvm.ts';
import type { ProxmoxVMScaleSet } from '../api/scaleset.ts';
import { WorkQueue } from '../engine/workqueue.ts';
import { collectionPath, type KubeApi, KubeError } from '../kube/api.ts';
import type { Informer } from '../kube/informer.ts';
import type { KubeConfigSource } from '../kube/providerconfig.ts';
import type { EventRecorder } from '../kube/store.ts';
import { planScale } from './reconcile.ts';
import { isWarning, readyCondition, type SetCondition, syncedCondition, withConditions } from './status.ts';

export const SCALESET_FINALIZER = 'proxmox.sankofa.io/scaleset';

export interface ScaleSetControllerOptions {
  api: KubeApi;
  sets: Informer<ProxmoxVMScaleSet>;
  vms: Informer<ProxmoxVM>;
  configs: Pick<KubeConfigSource, 'get'>;
  recorder: EventRecorder;
  /** Whether this replica leads (only the leader writes). */
  leading: () => boolean;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
}

export class ScaleSetController {
  private readonly o: ScaleSetControllerOptions;
  private readonly queue = new WorkQueue({ backoff: { baseMs: 500, capMs: 60_000 } });
  private workers: Promise<void>[] = [];

  constructor(o: ScaleSetControllerOptions) {
    this.o = o;
  }

  add(key: string): void {
    this.queue.add(key);
  }

  /** Start the workers once: they outlive a lost leadership (idle), and serve again if it comes back. */
  start(): void {
    if (!this.workers.length) for (let i = 0; i < 2; i++) this.workers.push(this.worker());
  }

  async stop(): Promise<void> {
    this.queue.shutdown();
    await Promise.all(this.workers);
  }

  private async worker(): Promise<void> {
    for (;;) {
      const key = await this.queue.get();
      if (key === undefined) return;
      try {
        // Only the leader writes; keys queued before leadership was lost are dropped (the leader queues every set).
        const requeue = this.o.leading() ? await this.reconcile(key) : undefined;
        this.queue.forget(key);
        if (requeue) this.queue.addAfter(key, requeue);
      } catch (e) {
        this.o.log?.('scale set reconcile failed', { key, error: String(e) });
        await this.markFailed(key, e);
        this.queue.addRateLimited(key);
      } finally {
        this.queue.done(key);
      }
    }
  }

  /** Bring a scale set's replicas to its spec; returns a requeue delay while scaling down. */
  async reconcile(key: string): Promise<number | undefined> {
    const set = this.o.sets.cache.get(key);
    if (!set) return undefined;
    const ns = set.metadata.namespace ?? 'default';
    const setPath = `${collectionPath(GROUP, VERSION, 'proxmoxvmscalesets', ns)}/${set.metadata.name}`;
    const vmPath = collectionPath(GROUP, VERSION, 'proxmoxvms', ns);
    if (!set.metadata.deletionTimestamp && !set.metadata.finalizers?.includes(SCALESET_FINALIZER)) {
      await this.o.api.request('PUT', setPath, {
        body: {
          ...set,
          metadata: { ...set.metadata, finalizers: [...(set.metadata.finalizers ?? []), SCALESET_FINALIZER] },
        },
      });
      return undefined;
    }
    const children = [...this.o.vms.cache.values()].filter(
      (v) =>
        v.metadata.namespace === ns &&
        ((v.metadata as { ownerReferences?: Array<{ uid: string }> }).ownerReferences ?? []).some(
          (x) => x.uid === set.metadata.uid,
        ),
    );
    let nodes: string[] = [];
    try {
      const t = set.spec.template.spec;
      const loaded = await this.o.configs.get(
        t.providerConfigRef ?? { kind: 'ClusterProviderConfig', name: 'default' },
        ns,
      );
      const site = loaded.config.spec.sites.find((s) => s.name === t.forProvider.site) ?? loaded.config.spec.sites[0];
      nodes = site?.nodes ?? [];
    } catch {
      // no config yet: replicas without a node are placed by the VM controller
    }
    const plan = planScale(set, children, nodes);
    for (const vm of plan.create) {
      const made = await this.o.api
        .request('POST', vmPath, { body: vm })
        .then(() => true)
        .catch((e) => (e instanceof KubeError && e.status === 409 ? false : Promise.reject(e)));
      if (made) this.event(set, 'Normal', 'SuccessfulCreate', `Created ProxmoxVM ${vm.metadata.name}`);
    }
    for (const vm of plan.update)
      await this.o.api.request('PUT', `${vmPath}/${vm.metadata.name}`, { body: { ...vm, status: undefined } });
    for (const vm of plan.delete) {
      const gone = await this.o.api
        .request('DELETE', `${vmPath}/${vm.metadata.name}`)
        .then(() => true)
        .catch((e) => (e instanceof KubeError && e.status === 404 ? false : Promise.reject(e)));
      if (gone) this.event(set, 'Normal', 'SuccessfulDelete', `Deleted ProxmoxVM ${vm.metadata.name}`);
    }
    if (set.metadata.deletionTimestamp && children.length === 0) {
      await this.o.api.request('PUT', setPath, {
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
    await this.writeStatus(set, setPath, plan.status, [readyCondition(set, plan), syncedCondition(set)]);
    return set.metadata.deletionTimestamp || plan.delete.length ? 2000 : undefined;
  }

  /**
   * Write a scale set's status (counts and conditions) when it changed, with an event per changed
   * condition; a write that would change nothing is not sent.
   */
  private async writeStatus(
    set: ProxmoxVMScaleSet,
    setPath: string,
    counts: Partial<NonNullable<ProxmoxVMScaleSet['status']>>,
    conditions: SetCondition[],
  ): Promise<void> {
    const cur = set.status ?? {};
    // Against the cached status first: most reconciles change nothing and send nothing.
    const { changed } = withConditions({ ...cur, ...counts }, conditions, Date.now());
    const countsSame = (Object.keys(counts) as Array<keyof typeof counts>).every((k) => cur[k] === counts[k]);
    if (countsSame && !changed.length) return;
    const fresh = await this.o.api.request<ProxmoxVMScaleSet>('GET', setPath);
    const merged = withConditions({ ...fresh.status, ...counts }, conditions, Date.now());
    await this.o.api.request('PUT', `${setPath}/status`, { body: { ...fresh, status: merged.status } });
    for (const c of changed)
      this.event(set, isWarning(c) ? 'Warning' : 'Normal', c.reason, c.message ?? `${c.type} is ${c.status}`);
  }

  /** After a failed reconcile: Synced=False with the error (best effort; the retry follows anyway). */
  private async markFailed(key: string, error: unknown): Promise<void> {
    const set = this.o.sets.cache.get(key);
    if (!set || !this.o.leading()) return;
    const ns = set.metadata.namespace ?? 'default';
    const setPath = `${collectionPath(GROUP, VERSION, 'proxmoxvmscalesets', ns)}/${set.metadata.name}`;
    await this.writeStatus(set, setPath, {}, [syncedCondition(set, error)]).catch(() => undefined);
  }

  private event(set: ProxmoxVMScaleSet, type: 'Normal' | 'Warning', reason: string, message: string): void {
    this.o.recorder.record(
      {
        apiVersion: `${GROUP}/${VERSION}`,
        kind: 'ProxmoxVMScaleSet',
        metadata: {
          name: set.metadata.name,
          ...(set.metadata.namespace ? { namespace: set.metadata.namespace } : {}),
          uid: set.metadata.uid,
        },
      },
      type,
      reason,
      message,
    );
  }
}
