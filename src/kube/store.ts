/**
 * The Kubernetes ResourceStore: reads from an informer cache, writes with optimistic concurrency
 * (PUT with resourceVersion; 409 -> ConflictError), status through the status subresource, and
 * Kubernetes Events (aggregated like client-go's recorder: same reason + message -> count++).
 * Watch notifications follow Crossplane's filter: generation, labels, annotations, finalizers or
 * deletion changed; status-only writes do not wake the reconciler.
 */
import { isDeepStrictEqual } from 'node:util';
import { keyOf, type Managed } from '../engine/resource.ts';
import type { ResourceStore, WatchEvent } from '../engine/types.ts';
import { collectionPath, type KubeApi } from './api.ts';
import type { Informer } from './informer.ts';

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

export class EventRecorder {
  private readonly api: KubeApi;
  private readonly component: string;
  private readonly recent = new Map<string, { name: string; namespace: string; count: number }>();
  constructor(api: KubeApi, component = 'provider-proxmox') {
    this.api = api;
    this.component = component;
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
  ): void {
    const namespace = obj.metadata.namespace ?? 'default';
    const k = `${obj.metadata.uid}|${type}|${reason}|${message}`;
    const now = new Date().toISOString();
    const prev = this.recent.get(k);
    const msg = message.length > 1024 ? `${message.slice(0, 1021)}...` : message;
    const send = prev
      ? this.api.request('PATCH', `/api/v1/namespaces/${prev.namespace}/events/${prev.name}`, {
          body: { count: prev.count + 1, lastTimestamp: now },
          contentType: 'application/merge-patch+json',
        })
      : this.api.request<{ metadata: { name: string } }>('POST', `/api/v1/namespaces/${namespace}/events`, {
          body: {
            apiVersion: 'v1',
            kind: 'Event',
            metadata: { generateName: `${obj.metadata.name}.`, namespace },
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

export class KubeStore<R extends Managed> implements ResourceStore<R> {
  private readonly api: KubeApi;
  readonly informer: Informer<R>;
  private readonly gvr: Gvr;
  private readonly recorder: EventRecorder;
  private readonly seen = new Map<string, Fingerprint>();

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
    return this.informer.on((type, obj, key) => {
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
      if (type === 'MODIFIED' && prev && isDeepStrictEqual(prev, fp)) return;
      handler(key, type, obj as R);
    });
  }

  /** Metadata and spec (PUT, optimistic concurrency). */
  async update(r: R): Promise<R> {
    const body = structuredClone(r) as R & { status?: unknown };
    delete body.status;
    const stored = await this.api.request<R>('PUT', this.path(r), { body });
    this.remember(stored);
    return stored;
  }

  async updateStatus(r: R): Promise<R> {
    const stored = await this.api.request<R>('PUT', this.path(r, '/status'), { body: r });
    this.remember(stored);
    return stored;
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
      this.informer.cache.set(key, stored);
  }

  event(r: R, type: 'Normal' | 'Warning', reason: string, message: string): void {
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
    );
  }
}
