/**
 * A list+watch cache that survives, with client-go's reflector behaviour:
 * - lists are paginated (`limit`/`continue`, `pageSize` objects a page, default 500), so neither
 *   the apiserver nor this process builds one response of the whole collection; a continue token
 *   that expired (410 on a continued page: its snapshot was compacted) starts the list over;
 * - watches ask for bookmarks (`allowWatchBookmarks`), and a watch that ends or drops (a server
 *   timeout, a cut connection, an error, the watchdog) is resumed from the last resourceVersion
 *   seen, a bookmark's included; only 410 Gone (that version was compacted away) lists again;
 * - every `resyncMs` the cached objects are handed to the handlers again (MODIFIED, `resync`
 *   true), from the cache, as client-go's resync: no request, so a steady state lists nothing;
 * - a watchdog restarts a watch that went silent (bookmarks count as life);
 * - `metadata.managedFields` is dropped from every cached object (controller-runtime's
 *   TransformStripManagedFields): nothing here reads it, and it is the larger part of a small
 *   object. A PUT of a cached copy is safe without it: the apiserver keeps the live object's
 *   managedFields when an update carries none. A `transform` (client-go's SetTransform) can
 *   keep less still of objects that are only read, never written back;
 * - the string values of every cached object are interned (`internStrings`): JSON.parse makes a
 *   copy of each value, so ten thousand objects held ten thousand copies of the same kind, site,
 *   condition type, reason and timestamp of the second they were written in. The values stay
 *   equal, only the copies go.
 *
 * Safe start: a list answered 404 means the resource is not served (its CRD is not installed).
 * The informer then counts as settled but `absent`, so that the controller starts with the kinds
 * it has, and it lists again every `absentRetryMs` until the CRD appears (a GET per period: no
 * right to watch CRDs is needed). Its first successful list emits every object as ADDED.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { internStrings } from '../engine/intern.ts';
import { keyOf } from '../engine/resource.ts';
import { type KubeApi, KubeError, type WatchEvent } from './api.ts';

export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata: { name: string; namespace?: string; resourceVersion?: string; uid?: string };
}

/** `resync`: the object is handed again from the cache (nothing changed), once per resync period. */
export type InformerHandler<T> = (
  type: 'ADDED' | 'MODIFIED' | 'DELETED',
  obj: T,
  key: string,
  resync?: boolean,
) => void;

export interface InformerOptions<T = KubeObject> {
  /** How often the cached objects are handed to the handlers again (default 1 h, Crossplane's `--sync`; 0: never). */
  resyncMs?: number;
  /** Objects per list page (default 500, client-go's pager; 0: one unpaginated list). */
  pageSize?: number;
  /** The server-side timeout of a watch (default 5-10 min at random, as client-go's reflector). */
  watchTimeoutSeconds?: number;
  /** Restart a watch with no event for this long (default 3 min; bookmarks arrive every minute). */
  watchdogMs?: number;
  backoffBaseMs?: number;
  backoffCapMs?: number;
  labelSelector?: string;
  /** Keep `metadata.managedFields` in the cache (default: dropped). */
  keepManagedFields?: boolean;
  /**
   * What the cache keeps of each object (after managedFields are dropped), as client-go's
   * SetTransform: only for objects nobody writes back from the cache.
   */
  transform?: (o: T) => T;
  /**
   * Told of every change of the cache (an object set, or deleted: undefined), before the handlers;
   * what keeps an index of the cache (src/vm/vmid-holders.ts) true to it.
   */
  onCacheChange?: (key: string, obj: T | undefined) => void;
  /** How often to look again for a resource that is not served (404: CRD missing). Default 5 s. */
  absentRetryMs?: number;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
}

/** A Map that tells `changed` of every set and delete (Informer's cache with onCacheChange). */
class TrackedMap<T> extends Map<string, T> {
  private readonly changed: (key: string, obj: T | undefined) => void;
  constructor(changed: (key: string, obj: T | undefined) => void) {
    super();
    this.changed = changed;
  }
  override set(key: string, obj: T): this {
    super.set(key, obj);
    this.changed(key, obj);
    return this;
  }
  override delete(key: string): boolean {
    const had = super.delete(key);
    if (had) this.changed(key, undefined);
    return had;
  }
  override clear(): void {
    const keys = [...this.keys()];
    super.clear();
    for (const k of keys) this.changed(k, undefined);
  }
}

/** The cache's key of an object: the engine's resource key (keyOf), `namespace/name`, interned. */
export function objectKey(o: KubeObject): string {
  return keyOf(o);
}

export class Informer<T extends KubeObject> {
  /**
   * The objects by key. Every change of it (the informer's lists and watch events, and a store's
   * write results) goes through set and delete, which tell `onCacheChange`.
   */
  readonly cache: Map<string, T>;
  private readonly api: KubeApi;
  private readonly path: string;
  private readonly o: Required<
    Omit<
      InformerOptions<T>,
      'labelSelector' | 'log' | 'watchTimeoutSeconds' | 'keepManagedFields' | 'transform' | 'onCacheChange'
    >
  > &
    InformerOptions<T>;
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
  /** Complete lists (the first one and one per 410 Gone). */
  lists = 0;
  /** Lists started over because a continue token expired. */
  listRestarts = 0;
  /** Watches opened, and how many of them resumed from a bookmark's resourceVersion. */
  watches = 0;
  bookmarkResumes = 0;
  /** Resync rounds run. */
  resyncs = 0;
  private rvFromBookmark = false;
  private resyncTimer: NodeJS.Timeout | undefined;

  constructor(api: KubeApi, path: string, opts: InformerOptions<T> = {}) {
    this.cache = opts.onCacheChange ? new TrackedMap(opts.onCacheChange) : new Map();
    this.api = api;
    this.path = path;
    this.o = {
      resyncMs: 3_600_000,
      pageSize: 500,
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

  private emit(type: 'ADDED' | 'MODIFIED' | 'DELETED', obj: T, resync = false): void {
    const key = objectKey(obj);
    for (const h of this.handlers) {
      try {
        h(type, obj, key, resync);
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
    this.begin();
    return this.synced;
  }

  /** Start, and resolve once synced or known to be absent (safe start). */
  startSettled(): Promise<void> {
    this.begin();
    return this.settled;
  }

  private begin(): void {
    if (this.loop) return;
    this.loop = this.run();
    if (this.o.resyncMs > 0) {
      this.resyncTimer = setInterval(() => this.resync(), this.o.resyncMs);
      this.resyncTimer.unref();
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.resyncTimer);
    this.stopping.abort();
    this.abort?.abort();
    await this.loop;
  }

  /** Hand every cached object to the handlers again (client-go's resync): from memory, no request. */
  resync(): void {
    if (!this.hasSynced || this.stopped) return;
    this.resyncs++;
    for (const obj of [...this.cache.values()]) this.emit('MODIFIED', obj, true);
  }

  /**
   * `o` as the cache keeps it (without managedFields, its strings interned); writers that cache
   * their answers use it too.
   */
  trim(o: T): T {
    if (!this.o.keepManagedFields && o.metadata) delete (o.metadata as { managedFields?: unknown }).managedFields;
    return internStrings(this.o.transform && o.metadata ? this.o.transform(o) : o);
  }

  /** Every page of the collection at one resourceVersion (a continue token keeps the first page's snapshot). */
  private async listPages(): Promise<{ items: T[]; resourceVersion: string }> {
    type Page = { metadata: { resourceVersion: string; continue?: string }; items: T[] };
    let items: T[] = [];
    let cont: string | undefined;
    let limit: number | undefined = this.o.pageSize > 0 ? this.o.pageSize : undefined;
    let expired = 0;
    for (;;) {
      let page: Page;
      try {
        page = await this.api.request<Page>('GET', this.path, {
          query: { labelSelector: this.o.labelSelector, limit, continue: cont },
          signal: this.stopping.signal,
          verb: 'LIST',
        });
      } catch (e) {
        if (!(cont && e instanceof KubeError && e.status === 410)) throw e;
        // The snapshot the token points into was compacted (etcd keeps ~5 min): start over. After
        // two expiries in one list, the pages are too slow to read within the compaction window,
        // and the list goes unpaginated, as client-go's pager falls back to a full list.
        this.listRestarts++;
        items = [];
        cont = undefined;
        if (++expired >= 2) limit = undefined;
        this.o.log?.('list continue token expired: listing again from the start', { path: this.path });
        continue;
      }
      for (const item of page.items) items.push(this.trim(item));
      cont = page.metadata.continue || undefined;
      if (!cont) return { items, resourceVersion: page.metadata.resourceVersion };
    }
  }

  private async list(): Promise<void> {
    const res = await this.listPages();
    this.lists++;
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
    this.rv = res.resourceVersion;
    this.rvFromBookmark = false;
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
    while (!this.stopped) {
      try {
        if (needList) {
          await this.list();
          needList = false;
        }
        const began = Date.now();
        const events = await this.watchOnce();
        // A watch the server ends at once with nothing in it would otherwise be a hot loop
        // (client-go's reflector treats a watch under a second with no event as an error).
        if (events === 0 && Date.now() - began < 1000 && !this.stopped) throw new Error('watch closed at once');
        failures = 0;
      } catch (e) {
        if (this.stopped) break;
        this.restarts++;
        if (e instanceof KubeError && e.status === 410) {
          // Our resourceVersion is older than etcd keeps: only a list can tell what changed since.
          needList = true;
          continue;
        }
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
        // Anything else (a cut connection, a 5xx, a failed list): back off, then resume. A failed
        // list is tried again; after a failed watch the next one starts from the last version seen.
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

  /**
   * One watch from the current resource version, until the server ends it, it drops, or it goes
   * silent. Returns the events it carried (bookmarks included); throws on a watch error.
   */
  private async watchOnce(): Promise<number> {
    const abort = new AbortController();
    this.abort = abort;
    this.lastEventAt = Date.now();
    const dog = setInterval(
      () => {
        const silent = Date.now() - this.lastEventAt > this.o.watchdogMs;
        if (silent || this.stopped) abort.abort();
        if (silent) this.o.log?.('watch silent, restarting', { path: this.path });
      },
      Math.min(5000, this.o.watchdogMs / 3),
    );
    this.watches++;
    if (this.rvFromBookmark) this.bookmarkResumes++;
    let failure: KubeError | undefined;
    let events = 0;
    try {
      await this.api.watch<T | { code?: number; reason?: string; message?: string }>(
        this.path,
        {
          resourceVersion: this.rv,
          allowWatchBookmarks: true,
          timeoutSeconds: this.o.watchTimeoutSeconds ?? 300 + Math.floor(Math.random() * 300),
          labelSelector: this.o.labelSelector,
        },
        (e: WatchEvent<T | { code?: number; reason?: string; message?: string }>) => {
          this.lastEventAt = Date.now();
          events++;
          if (e.type === 'ERROR') {
            const st = e.object as { code?: number; reason?: string; message?: string };
            failure = new KubeError(st.code ?? 500, st.reason ?? 'WatchError', `watch: ${st.message ?? 'error event'}`);
            abort.abort();
            return;
          }
          const obj = this.trim(e.object as T);
          if (obj.metadata?.resourceVersion) {
            this.rv = obj.metadata.resourceVersion;
            this.rvFromBookmark = e.type === 'BOOKMARK';
          }
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
    if (failure) throw failure;
    return events;
  }
}
