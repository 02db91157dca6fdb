/**
 * ProviderConfigs from the cluster: the config source for the VM connector (credentials read from
 * their Secrets), ProviderConfigUsage tracking (one usage per resource, named by its uid), the
 * `in-use.crossplane.io` finalizer that blocks deleting a ProviderConfig while it is used, and
 * connection Secrets.
 */
import { Value } from 'typebox/value';
import { type ProviderConfig, ProviderConfigSchema } from '../api/provider-config.ts';
import type { LoadedProviderConfig, SecretData } from '../api/provider-config-load.ts';
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { GROUP, VERSION } from '../api/proxmoxvm.ts';
import { FINALIZER_IN_USE, LABEL_PROVIDER_CONFIG } from '../api/usage.ts';
import type { Condition, Managed } from '../engine/resource.ts';
import type { ProviderConfigSource } from '../vm/connector.ts';
import { collectionPath, type KubeApi, KubeError } from './api.ts';
import type { Informer, KubeObject } from './informer.ts';
import type { EventRecorder } from './store.ts';

type PcObject = ProviderConfig &
  KubeObject & { metadata: { finalizers?: string[]; deletionTimestamp?: string; uid?: string } };

interface SecretObject {
  metadata: { name: string; namespace: string; resourceVersion?: string };
  data?: Record<string, string>;
}

export class KubeConfigSource implements ProviderConfigSource {
  private readonly api: KubeApi;
  private readonly pcs: Informer<PcObject>;
  private readonly cpcs: Informer<PcObject>;
  /**
   * Per config: the object returned last, the resourceVersion it was read at, and the fingerprint of
   * what it is made of (spec + credentials). The connector keeps a site's client, VMID reservations
   * and concurrency slots for as long as it gets the same object, so a new object is returned only
   * when the spec or the credentials changed: not for a status or finalizer write (which changes the
   * resourceVersion), and not once per concurrent caller.
   */
  private readonly cache = new Map<
    string,
    { rv: string; fingerprint: string; loaded: LoadedProviderConfig; at: number }
  >();
  private readonly inflight = new Map<string, Promise<LoadedProviderConfig>>();
  /** How long credentials read from a Secret are reused (rotation is picked up after this). */
  secretTtlMs = 30_000;

  constructor(api: KubeApi, pcs: Informer<PcObject>, cpcs: Informer<PcObject>) {
    this.api = api;
    this.pcs = pcs;
    this.cpcs = cpcs;
  }

  async get(ref: { kind?: string; name: string }, namespace: string | undefined): Promise<LoadedProviderConfig> {
    const kind = ref.kind ?? 'ClusterProviderConfig';
    const key = kind === 'ProviderConfig' ? `${namespace ?? 'default'}/${ref.name}` : ref.name;
    const obj = (kind === 'ProviderConfig' ? this.pcs : this.cpcs).cache.get(key);
    if (!obj) throw new Error(`${kind} ${key} not found`);
    const cacheKey = `${kind}/${key}`;
    const cached = this.cache.get(cacheKey);
    if (cached && cached.rv === obj.metadata.resourceVersion && Date.now() - cached.at < this.secretTtlMs)
      return cached.loaded;
    // One load at a time per config: concurrent reconciles share it (and its result).
    let p = this.inflight.get(cacheKey);
    if (!p) {
      p = this.load(kind, key, cacheKey, obj).finally(() => this.inflight.delete(cacheKey));
      this.inflight.set(cacheKey, p);
    }
    return p;
  }

  private async load(kind: string, key: string, cacheKey: string, obj: PcObject): Promise<LoadedProviderConfig> {
    const config = structuredClone(obj) as ProviderConfig;
    const errors = [...Value.Errors(ProviderConfigSchema, config)].slice(0, 5);
    if (errors.length)
      throw new Error(
        `${kind} ${key} is invalid: ${errors.map((e) => `${e.instancePath || '/'} ${e.message}`).join('; ')}`,
      );
    const secrets = new Map<string, SecretData>();
    const refs = [
      config.spec.credentials?.secretRef,
      ...config.spec.sites.map((s) => s.credentialsSecretRef),
      ...config.spec.sites.map((s) => s.ssh?.secretRef),
    ].filter(Boolean) as Array<{ name: string; namespace?: string }>;
    for (const r of refs) {
      // A namespaced ProviderConfig reads Secrets of its own namespace only.
      if (kind === 'ProviderConfig' && r.namespace && r.namespace !== obj.metadata.namespace) {
        throw new Error(
          `${kind} ${key}: Secret ${r.namespace}/${r.name} is in another namespace; a ProviderConfig may only use Secrets of its own namespace (use a ClusterProviderConfig)`,
        );
      }
      const ns =
        kind === 'ProviderConfig' ? (obj.metadata.namespace ?? 'default') : (r.namespace ?? 'crossplane-system');
      try {
        const s = await this.api.request<SecretObject>('GET', `/api/v1/namespaces/${ns}/secrets/${r.name}`);
        const data: Record<string, string> = {};
        for (const [k, v] of Object.entries(s.data ?? {})) data[k] = Buffer.from(v, 'base64').toString('utf8');
        secrets.set(`${ns}/${r.name}`, {
          namespace: ns,
          name: r.name,
          data,
          file: `Secret ${ns}/${r.name}`,
          line: undefined,
        });
      } catch (e) {
        if (e instanceof KubeError && e.status === 404)
          throw new Error(`${kind} ${key}: credentials Secret ${ns}/${r.name} not found`);
        throw e;
      }
    }
    const rv = obj.metadata.resourceVersion ?? '';
    const fingerprint = JSON.stringify([config.spec, [...secrets.values()].map((s) => s.data)]);
    const cached = this.cache.get(cacheKey);
    if (cached && cached.fingerprint === fingerprint) {
      cached.rv = rv;
      cached.at = Date.now();
      return cached.loaded;
    }
    const loaded: LoadedProviderConfig = { file: `${kind} ${key}`, config, secrets, lineOf: () => undefined };
    this.cache.set(cacheKey, { rv, fingerprint, loaded, at: Date.now() });
    return loaded;
  }
}

/** Keep one usage per resource: `ProviderConfigUsage` named by the resource's uid. */
export class UsageTracker {
  private readonly api: KubeApi;
  private readonly known = new Map<string, string>();
  /**
   * Resources whose usage was released (they were deleted; UIDs are never reused): a reconcile still
   * in flight when the resource went must not create its usage again, which would block deleting
   * the ProviderConfig for good.
   */
  private readonly released = new Set<string>();
  /** The usages the informer holds: a usage already there (a restart) is not written again. */
  private readonly existing: () => Iterable<{
    metadata: { name: string };
    providerConfigRef?: { kind?: string; name?: string };
  }>;
  constructor(
    api: KubeApi,
    existing: () => Iterable<{
      metadata: { name: string };
      providerConfigRef?: { kind?: string; name?: string };
    }> = () => [],
  ) {
    this.api = api;
    this.existing = existing;
  }

  /**
   * ProxmoxVMs are namespaced: their usages are namespaced ProviderConfigUsages, whichever kind of
   * config they name (crossplane-runtime v2).
   */
  private path(namespace: string | undefined): string {
    return collectionPath(GROUP, VERSION, 'providerconfigusages', namespace ?? 'default');
  }

  async track(r: Managed): Promise<void> {
    const ref = {
      kind: (r.spec.providerConfigRef?.kind ?? 'ClusterProviderConfig') as 'ProviderConfig' | 'ClusterProviderConfig',
      name: r.spec.providerConfigRef?.name ?? 'default',
    };
    const want = `${ref.kind}/${ref.name}`;
    if (this.known.get(r.metadata.uid) === want || this.released.has(r.metadata.uid)) return;
    // After a restart every usage is in the informer already: one write per resource saved.
    for (const u of this.existing())
      if (u.metadata.name === r.metadata.uid && `${u.providerConfigRef?.kind}/${u.providerConfigRef?.name}` === want) {
        this.known.set(r.metadata.uid, want);
        return;
      }
    const body = {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: 'ProviderConfigUsage',
      metadata: {
        name: r.metadata.uid,
        namespace: r.metadata.namespace ?? 'default',
        labels: { [LABEL_PROVIDER_CONFIG]: ref.name },
        ownerReferences: [{ apiVersion: r.apiVersion, kind: r.kind, name: r.metadata.name, uid: r.metadata.uid }],
      },
      providerConfigRef: ref,
      resourceRef: { apiVersion: r.apiVersion, kind: r.kind, name: r.metadata.name, uid: r.metadata.uid },
    };
    const path = this.path(r.metadata.namespace);
    try {
      await this.api.request('POST', path, { body });
    } catch (e) {
      if (!(e instanceof KubeError && e.status === 409)) throw e;
      const cur = await this.api.request<{ metadata: { resourceVersion: string } }>('GET', `${path}/${r.metadata.uid}`);
      await this.api.request('PUT', `${path}/${r.metadata.uid}`, {
        body: { ...body, metadata: { ...body.metadata, resourceVersion: cur.metadata.resourceVersion } },
      });
    }
    // Released while the write was in flight: undo it.
    if (this.released.has(r.metadata.uid)) return this.remove(r);
    this.known.set(r.metadata.uid, want);
  }

  /** The resource is gone: so is its usage (there may be no garbage collector to do it). */
  async release(r: { metadata: { uid: string; namespace?: string } }): Promise<void> {
    this.known.delete(r.metadata.uid);
    this.released.add(r.metadata.uid);
    if (this.released.size > 10_000) this.released.delete(this.released.values().next().value!);
    await this.remove(r);
  }

  private async remove(r: { metadata: { uid: string; namespace?: string } }): Promise<void> {
    try {
      await this.api.request('DELETE', `${this.path(r.metadata.namespace)}/${r.metadata.uid}`);
    } catch (e) {
      if (!(e instanceof KubeError && e.status === 404)) throw e;
    }
  }
}

/**
 * The ProviderConfig side: while usages point at a (Cluster)ProviderConfig it carries the
 * `in-use.crossplane.io` finalizer (deletion waits); without usages the finalizer goes.
 */
export async function reconcileProviderConfigInUse(
  api: KubeApi,
  pc: PcObject,
  kind: 'ProviderConfig' | 'ClusterProviderConfig',
  usages: Array<{ providerConfigRef?: { kind?: string; name?: string }; metadata: { namespace?: string } }>,
  events?: { record: EventRecorder['record'] },
): Promise<void> {
  const users = usages.filter(
    (u) =>
      u.providerConfigRef?.name === pc.metadata.name &&
      (u.providerConfigRef?.kind ?? 'ClusterProviderConfig') === kind &&
      (kind === 'ClusterProviderConfig' || u.metadata.namespace === pc.metadata.namespace),
  ).length;
  const has = pc.metadata.finalizers?.includes(FINALIZER_IN_USE) ?? false;
  const plural = kind === 'ProviderConfig' ? 'providerconfigs' : 'clusterproviderconfigs';
  const path = `${collectionPath(GROUP, VERSION, plural, kind === 'ProviderConfig' ? pc.metadata.namespace : undefined)}/${pc.metadata.name}`;
  if (users > 0 && !has && !pc.metadata.deletionTimestamp) {
    await api.request('PUT', path, {
      body: { ...pc, metadata: { ...pc.metadata, finalizers: [...(pc.metadata.finalizers ?? []), FINALIZER_IN_USE] } },
    });
  } else if (users === 0 && has) {
    await api.request('PUT', path, {
      body: {
        ...pc,
        metadata: { ...pc.metadata, finalizers: (pc.metadata.finalizers ?? []).filter((f) => f !== FINALIZER_IN_USE) },
      },
    });
  }
  // Deleted while in use: says so, as crossplane-runtime's providerconfig reconciler does (the
  // Terminating condition, reason InUse, and a UsageAccounting warning), with who uses it.
  const blocked = Boolean(pc.metadata.deletionTimestamp) && users > 0;
  const message = `Blocking deletion while usages still exist: ${users} resource(s) use this ${kind}; delete them or point them at another provider config`;
  const status = (pc as { status?: { users?: number; conditions?: Condition[] } }).status;
  const terminating = status?.conditions?.find((c) => c.type === 'Terminating');
  const conditionDue = blocked ? terminating?.message !== message : terminating !== undefined;
  if (blocked && conditionDue && events)
    events.record(
      { apiVersion: `${GROUP}/${VERSION}`, kind, metadata: pc.metadata as never },
      'Warning',
      'UsageAccounting',
      message,
    );
  if ((status?.users ?? -1) !== users || conditionDue) {
    try {
      const fresh = await api.request<PcObject>('GET', path);
      const old = (fresh as { status?: { conditions?: Condition[] } }).status?.conditions ?? [];
      const conditions = old.filter((c) => c.type !== 'Terminating');
      if (blocked)
        conditions.push({
          type: 'Terminating',
          status: 'True',
          reason: 'InUse',
          message,
          lastTransitionTime: terminating?.lastTransitionTime ?? new Date().toISOString().replace(/\.\d{3}Z$/, 'Z'),
        });
      await api.request('PUT', `${path}/status`, {
        body: { ...fresh, status: { ...(fresh as { status?: object }).status, users, conditions } },
      });
    } catch {
      // status is informative; the next event retries
    }
  }
}

/** `writeConnectionSecretToRef`: endpoint, node, vmid, IP addresses, user; owned by the resource. */
export async function publishConnectionSecret(
  api: KubeApi,
  r: ProxmoxVM | Managed,
  details: Record<string, string>,
): Promise<void> {
  const ref = r.spec.writeConnectionSecretToRef;
  if (!ref) return;
  const namespace = r.metadata.namespace ?? 'default';
  const data: Record<string, string> = {};
  for (const [k, v] of Object.entries(details)) data[k] = Buffer.from(v).toString('base64');
  const path = `/api/v1/namespaces/${namespace}/secrets`;
  const body = {
    apiVersion: 'v1',
    kind: 'Secret',
    type: 'connection.crossplane.io/v1alpha1',
    metadata: {
      name: ref.name,
      namespace,
      ownerReferences: [
        { apiVersion: r.apiVersion, kind: r.kind, name: r.metadata.name, uid: r.metadata.uid, controller: true },
      ],
    },
    data,
  };
  let cur:
    | { metadata: { resourceVersion: string; ownerReferences?: Array<{ uid: string }> }; data?: Record<string, string> }
    | undefined;
  try {
    cur = await api.request('GET', `${path}/${ref.name}`);
  } catch (e) {
    if (!(e instanceof KubeError && e.status === 404)) throw e;
  }
  if (!cur) {
    await api.request('POST', path, { body });
    return;
  }
  if (!cur.metadata.ownerReferences?.some((o) => o.uid === r.metadata.uid)) {
    throw new Error(
      `connection Secret ${namespace}/${ref.name} exists and is not owned by this resource; pick another writeConnectionSecretToRef.name`,
    );
  }
  if (JSON.stringify(cur.data ?? {}) === JSON.stringify(data)) return;
  await api.request('PUT', `${path}/${ref.name}`, {
    body: { ...body, metadata: { ...body.metadata, resourceVersion: cur.metadata.resourceVersion } },
  });
}
