/**
 * A list+watch cache that survives: any error restarts it with backoff, a 410 (resource version
 * too old) re-lists, a full re-list runs periodically (resync, emitting what changed), and a
 * watchdog restarts a watch that went silent (bookmarks count as life).
 *
 * Safe start: a list answered 404 means the resource is not served (its CRD is not installed).
 * The informer then counts as settled but `absent`, so that the controller starts with the kinds
 * it has, and it lists again every `absentRetryMs` until the CRD appears (a GET per period: no
 * right to watch CRDs is needed). Its first successful list emits every object as ADDED.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { type KubeApi, KubeError, type WatchEvent } from './api.ts';

export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata: { name: string; namespace?: string; resourceVersion?: string; uid?: string };
}

export type InformerHandler<T> = (type: 'ADDED' | 'MODIFIED' | 'DELETED', obj: T, key: string) => void;

export interface InformerOptions {
  /** Full re-list period (default 10 min). */
  resyncMs?: number;
  /** Restart a watch with no event for this long (default 3 min; bookmarks arrive every minute). */
  watchdogMs?: number;
  backoffBaseMs?: number;
  backoffCapMs?: number;
  labelSelector?: string;
  /** How often to look again for a resource that is not served (404: CRD missing). Default 5 s. */
  absentRetryMs?: number;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
}

export function objectKey(o: KubeObject): string {
  return o.metadata.namespace ? `${o.metadata.namespace}/${o.metadata.name}` : o.metadata.name;
}

export class Informer<T extends KubeObject> {
  readonly cache = new Map<string, T>();
  private readonly api: KubeApi;
  private readonly path: string;
  private readonly o: Required<Omit<InformerOptions, 'labelSelector' | 'log'>> & InformerOptions;
  private readonly handlers = new Set<InformerHandler<T>>();
  private rv = '';
  private stopped = false;
  /** Aborted by stop(): ends a backoff wait at once. */
  private readonly stopping = new AbortController();
  private abort: AbortController | undefined;
  private loop: Promise<void> | undefined;
  private syncedResolve: (() => void) | undefined;
  private settledResolve: (() => void) | undefined;
  /** Resolves on the first successful list. */
  readonly synced: Promise<void>;
  /** Resolves on the first successful list, or on the first 404 (the resource is not served). */
  readonly settled: Promise<void>;
  /** A list has succeeded: the cache holds the collection (false while `absent`). */
  hasSynced = false;
  /** The last list was answered 404: the resource is not served (CRD not installed). */
  absent = false;
  lastEventAt = 0;
  restarts = 0;

  constructor(api: KubeApi, path: string, opts: InformerOptions = {}) {
    this.api = api;
    this.path = path;
    this.o = {
      resyncMs: 600_000,
      watchdogMs: 180_000,
      backoffBaseMs: 500,
      backoffCapMs: 30_000,
      absentRetryMs: 5000,
      ...opts,
    };
    this.synced = new Promise((r) => {
      this.syncedResolve = r;
    });
    this.settled = new Promise((r) => {
      this.settledResolve = r;
    });
  }

  on(h: InformerHandler<T>): () => void {
    this.handlers.add(h);
    return () => this.handlers.delete(h);
  }

  private emit(type: 'ADDED' | 'MODIFIED' | 'DELETED', obj: T): void {
    const key = objectKey(obj);
    for (const h of this.handlers) {
      try {
        h(type, obj, key);
      } catch (e) {
        this.o.log?.('informer handler failed', { error: String(e) });
      }
    }
  }

  /** The API path this informer lists and watches. */
  get collection(): string {
    return this.path;
  }

  start(): Promise<void> {
    this.loop ??= this.run();
    return this.synced;
  }

  /** Start, and resolve once synced or known to be absent (safe start). */
  startSettled(): Promise<void> {
    this.loop ??= this.run();
    return this.settled;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.stopping.abort();
    this.abort?.abort();
    await this.loop;
  }

  private async list(): Promise<void> {
    const res = await this.api.request<{ metadata: { resourceVersion: string }; items: T[] }>('GET', this.path, {
      query: { labelSelector: this.o.labelSelector },
    });
    const seen = new Set<string>();
    for (const item of res.items) {
      const key = objectKey(item);
      seen.add(key);
      const prev = this.cache.get(key);
      this.cache.set(key, item);
      if (!prev) this.emit('ADDED', item);
      else if (prev.metadata.resourceVersion !== item.metadata.resourceVersion) this.emit('MODIFIED', item);
    }
    for (const [key, prev] of [...this.cache]) {
      if (!seen.has(key)) {
        this.cache.delete(key);
        this.emit('DELETED', prev);
      }
    }
    this.rv = res.metadata.resourceVersion;
    if (this.absent) this.o.log?.('resource served now: watching it', { path: this.path });
    this.absent = false;
    if (!this.hasSynced) {
      this.hasSynced = true;
      this.syncedResolve?.();
      this.settledResolve?.();
    }
  }

  private async run(): Promise<void> {
    let failures = 0;
    let needList = true;
    let lastList = 0;
    while (!this.stopped) {
      try {
        if (needList || Date.now() - lastList > this.o.resyncMs) {
          await this.list();
          lastList = Date.now();
          needList = false;
        }
        await this.watchOnce(lastList);
        failures = 0;
      } catch (e) {
        if (this.stopped) break;
        this.restarts++;
        needList = true;
        if (e instanceof KubeError && e.status === 410) continue;
        if (e instanceof KubeError && e.status === 404 && !this.hasSynced) {
          // Not served (yet): settle as absent and look again at a steady pace, without backoff
          // growth or a warning per try. (Once synced, a 404 is an outage like any other.)
          if (!this.absent)
            this.o.log?.('resource not served (CRD not installed?): waiting for it', { path: this.path });
          this.absent = true;
          this.settledResolve?.();
          await sleep(this.o.absentRetryMs, undefined, { signal: this.stopping.signal }).catch(() => undefined);
          continue;
        }
        failures++;
        const delay =
          Math.min(this.o.backoffCapMs, this.o.backoffBaseMs * 2 ** (failures - 1)) * (0.8 + Math.random() * 0.4);
        this.o.log?.('informer restarting', {
          path: this.path,
          error: e instanceof Error ? e.message : String(e),
          delayMs: Math.round(delay),
        });
        await sleep(delay, undefined, { signal: this.stopping.signal }).catch(() => undefined);
      }
    }
  }

  /** One watch from the current resource version, until it ends, goes silent, or it is time to resync. */
  private async watchOnce(lastList: number): Promise<void> {
    const abort = new AbortController();
    this.abort = abort;
    this.lastEventAt = Date.now();
    const dog = setInterval(
      () => {
        const silent = Date.now() - this.lastEventAt > this.o.watchdogMs;
        const resync = Date.now() - lastList > this.o.resyncMs;
        if (silent || resync || this.stopped) abort.abort();
        if (silent) this.o.log?.('watch silent, restarting', { path: this.path });
      },
      Math.min(5000, this.o.watchdogMs / 3),
    );
    let gone = false;
    try {
      await this.api.watch<T | { code?: number; message?: string }>(
        this.path,
        {
          resourceVersion: this.rv,
          allowWatchBookmarks: true,
          timeoutSeconds: 300 + Math.floor(Math.random() * 300),
          labelSelector: this.o.labelSelector,
        },
        (e: WatchEvent<T | { code?: number; message?: string }>) => {
          this.lastEventAt = Date.now();
          if (e.type === 'ERROR') {
            const st = e.object as { code?: number; message?: string };
            if (st.code === 410) gone = true;
            abort.abort();
            return;
          }
          const obj = e.object as T;
          if (obj.metadata?.resourceVersion) this.rv = obj.metadata.resourceVersion;
          if (e.type === 'BOOKMARK') return;
          const key = objectKey(obj);
          if (e.type === 'DELETED') this.cache.delete(key);
          else this.cache.set(key, obj);
          this.emit(e.type, obj);
        },
        abort.signal,
      );
    } finally {
      clearInterval(dog);
    }
    if (gone) throw new KubeError(410, 'Expired', 'watch: resource version too old');
  }
}
