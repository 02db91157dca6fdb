/**
 * The Kubernetes ResourceStore: reads from an informer cache, writes with optimistic concurrency
 * (PUT with resourceVersion; 409 -> ConflictError), status through the status subresource, and
 * Kubernetes Events (aggregated like client-go's recorder: same reason + message -> count++).
 * Watch notifications follow Crossplane's filter: generation, labels, annotations, finalizers or
 * deletion changed; status-only writes do not wake the reconciler. The informer's resync (one
 * round an hour, from its cache) passes the filter: it bounds how long a resource can go without a
 * reconcile should a requeue ever be lost. (ProxmoxVMs' informer has none: the controller queues
 * their resync itself, behind any change; src/kube/runnables.ts.)
 *
 * A status write that would change nothing is not sent: when the status to write is deep-equal
 * (conditions with their lastTransitionTime, atProvider, observedGeneration: the whole status) to
 * the informer's cached copy. The engine compares statuses as JSON text, and the apiserver gives
 * an object's keys back in its own order, so without this check every poll of a steady resource
 * re-sent an identical status.
 */
import { isDeepStrictEqual } from 'node:util';
import { ANNOTATION_EXTERNAL_NAME, keyOf, type Managed } from '../engine/resource.ts';
import type { ResourceStore, WatchEvent } from '../engine/types.ts';
import { collectionPath, type KubeApi } from './api.ts';
import type { Informer } from './informer.ts';
import { TokenBucket } from './ratelimit.ts';

export interface Gvr {
  group: string;
  version: string;
  plural: string;
  kind: string;
}

interface Fingerprint {
  generation: number;
  labels: unknown;
  annotations: unknown;
  finalizers: unknown;
  deletion: unknown;
}

/**
 * Events are best effort, and must never hold back the writes that matter: as client-go's
 * broadcaster (its sink is a client of its own, hence its own rate limit, and it queues at most
 * 1000 events, dropping beyond), they have their own token bucket of the client's QPS and burst,
 * and an event that would be the 1001st waiting is dropped (counted in `dropped`).
 */
export const MAX_PENDING_EVENTS = 1000;

export class EventRecorder {
  private readonly api: KubeApi;
  private readonly component: string;
  private readonly recent = new Map<string, { name: string; namespace: string; count: number }>();
  private readonly limiter: TokenBucket;
  private pending = 0;
  /** Events dropped because MAX_PENDING_EVENTS were waiting already. */
  dropped = 0;
  constructor(api: KubeApi, component = 'provider-proxmox') {
    this.api = api;
    this.component = component;
    this.limiter = new TokenBucket(api.limiter.qps, api.limiter.burst);
  }

  record(
    obj: {
      apiVersion: string;
      kind: string;
      metadata: { name: string; namespace?: string; uid: string; resourceVersion?: string };
    },
    type: 'Normal' | 'Warning',
    reason: string,
    message: string,
    /** The event's own annotations (crossplane-runtime's `external-name`: AnnotatedEventf). */
    annotations?: Record<string, string>,
  ): void {
    const namespace = obj.metadata.namespace ?? 'default';
    const k = `${obj.metadata.uid}|${type}|${reason}|${message}`;
    const now = new Date().toISOString();
    const prev = this.recent.get(k);
    const msg = message.length > 1024 ? `${message.slice(0, 1021)}...` : message;
    if (this.pending >= MAX_PENDING_EVENTS) {
      this.dropped++;
      return;
    }
    this.pending++;
    const limiter = this.limiter;
    const send = prev
      ? this.api.request('PATCH', `/api/v1/namespaces/${prev.namespace}/events/${prev.name}`, {
          body: { count: prev.count + 1, lastTimestamp: now },
          contentType: 'application/merge-patch+json',
          limiter,
        })
      : this.api.request<{ metadata: { name: string } }>('POST', `/api/v1/namespaces/${namespace}/events`, {
          limiter,
          body: {
            apiVersion: 'v1',
            kind: 'Event',
            metadata: { generateName: `${obj.metadata.name}.`, namespace, ...(annotations ? { annotations } : {}) },
            involvedObject: {
              apiVersion: obj.apiVersion,
              kind: obj.kind,
              name: obj.metadata.name,
              namespace,
              uid: obj.metadata.uid,
            },
            reason,
            message: msg,
            type,
            source: { component: this.component },
            reportingComponent: this.component,
            firstTimestamp: now,
            lastTimestamp: now,
            count: 1,
          },
        });
    send
      .then((res) => {
        if (prev) prev.count++;
        else
          this.recent.set(k, {
            name: (res as { metadata: { name: string } }).metadata.name,
            namespace,
            count: 1,
          });
        if (this.recent.size > 5000) this.recent.delete(this.recent.keys().next().value!);
      })
      .catch(() => {
        this.recent.delete(k); // an event is best effort; the next one starts a new series
      })
      .finally(() => {
        this.pending--;
      });
  }
}

/**
 * Whether resourceVersion `a` is newer than `b`. Resource versions are opaque to clients, but the
 * apiserver (etcd3) issues them as increasing integers; anything else is taken as newer.
 */
export function newerVersion(a: string | undefined, b: string | undefined): boolean {
  if (!b) return true;
  if (!a) return false;
  if (!/^\d+$/.test(a) || !/^\d+$/.test(b)) return true;
  return BigInt(a) > BigInt(b);
}

/**
 * What became of a status write: `skipped` (deep-equal to the cache: not sent), `unchanged` (sent;
 * the apiserver kept the object as it was: our cache was behind), `changed`.
 */
export type StatusWriteResult = 'skipped' | 'unchanged' | 'changed';

/** A JSON value as the apiserver would store it: undefined members dropped. */
function stored(v: unknown): unknown {
  return v === undefined ? {} : JSON.parse(JSON.stringify(v));
}

export class KubeStore<R extends Managed> implements ResourceStore<R> {
  private readonly api: KubeApi;
  readonly informer: Informer<R>;
  private readonly gvr: Gvr;
  private readonly recorder: EventRecorder;
  private readonly seen = new Map<string, Fingerprint>();
  /** Status writes by result, since start. */
  readonly statusWrites: Record<StatusWriteResult, number> = { skipped: 0, unchanged: 0, changed: 0 };
  /** Called per status write (metrics: provider_proxmox_kube_status_writes_total). */
  onStatusWrite?: (result: StatusWriteResult, kind: string) => void;

  constructor(api: KubeApi, informer: Informer<R>, gvr: Gvr, recorder: EventRecorder) {
    this.api = api;
    this.informer = informer;
    this.gvr = gvr;
    this.recorder = recorder;
  }

  private path(r: { metadata: { name: string; namespace?: string } }, sub = ''): string {
    return `${collectionPath(this.gvr.group, this.gvr.version, this.gvr.plural, r.metadata.namespace)}/${r.metadata.name}${sub}`;
  }

  async get(key: string): Promise<R | undefined> {
    const o = this.informer.cache.get(key);
    return o ? (structuredClone(o) as R) : undefined;
  }

  async list(): Promise<R[]> {
    return [...this.informer.cache.values()].map((o) => structuredClone(o) as R);
  }

  watch(handler: (key: string, event: WatchEvent, obj: R | undefined) => void): () => void {
    return this.informer.on((type, obj, key, resync) => {
      const fp: Fingerprint = {
        generation: obj.metadata.generation,
        labels: obj.metadata.labels ?? {},
        annotations: obj.metadata.annotations ?? {},
        finalizers: obj.metadata.finalizers ?? [],
        deletion: obj.metadata.deletionTimestamp ?? null,
      };
      if (type === 'DELETED') {
        this.seen.delete(key);
        return handler(key, type, undefined);
      }
      const prev = this.seen.get(key);
      this.seen.set(key, fp);
      if (type === 'MODIFIED' && prev && isDeepStrictEqual(prev, fp) && !resync) return;
      handler(key, type, obj as R);
    });
  }

  /** Metadata and spec (PUT, optimistic concurrency). */
  async update(r: R, signal?: AbortSignal): Promise<R> {
    const body = structuredClone(r) as R & { status?: unknown };
    delete body.status;
    const stored = await this.api.request<R>('PUT', this.path(r), { body, ...(signal ? { signal } : {}) });
    this.remember(stored);
    return stored;
  }

  /** `signal` (once the engine passes its reconcile's) also ends a wait for the rate limit. */
  async updateStatus(r: R, signal?: AbortSignal): Promise<R> {
    const cached = this.informer.cache.get(keyOf(r));
    if (cached && isDeepStrictEqual(stored(r.status), stored(cached.status))) {
      this.count('skipped');
      // r itself, not the cached copy: a later write of this reconcile must carry the version it
      // read, or it could overwrite a spec change it never saw.
      return structuredClone(r);
    }
    const written = await this.api.request<R>('PUT', this.path(r, '/status'), {
      body: r,
      ...(signal ? { signal } : {}),
    });
    this.count(written.metadata.resourceVersion === r.metadata.resourceVersion ? 'unchanged' : 'changed');
    this.remember(written);
    return written;
  }

  private count(result: StatusWriteResult): void {
    this.statusWrites[result]++;
    this.onStatusWrite?.(result, this.gvr.kind);
  }

  /**
   * Put a write's result into the cache (the next reconcile then reads what it wrote, not an older
   * copy that would only conflict), unless the watch already delivered something newer, or the write
   * removed the last finalizer of a deleted object: the apiserver deleted it, and caching the answer
   * would resurrect it (its DELETED event may already have been processed). An object no longer in
   * the cache was deleted meanwhile: it stays out.
   */
  private remember(stored: R): void {
    const key = keyOf(stored);
    if (stored.metadata.deletionTimestamp && !stored.metadata.finalizers?.length) {
      this.informer.cache.delete(key);
      return;
    }
    const cur = this.informer.cache.get(key);
    if (cur && newerVersion(stored.metadata.resourceVersion, cur.metadata.resourceVersion))
      this.informer.cache.set(key, this.informer.trim(stored));
  }

  /** As crossplane-runtime's recorder, every event of a resource with an external name is annotated with it. */
  event(r: R, type: 'Normal' | 'Warning', reason: string, message: string): void {
    const name = r.metadata.annotations?.[ANNOTATION_EXTERNAL_NAME];
    this.recorder.record(
      {
        apiVersion: r.apiVersion,
        kind: r.kind,
        metadata: {
          name: r.metadata.name,
          ...(r.metadata.namespace ? { namespace: r.metadata.namespace } : {}),
          uid: r.metadata.uid,
        },
      },
      type,
      reason,
      message,
      name ? { 'external-name': name } : undefined,
    );
  }
}
