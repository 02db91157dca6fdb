/**
 * The informer against a real kube-apiserver (harness.ts) behind a fault-injecting reverse proxy:
 * a cut watch stream resumed without a list (from the last event, and from a real bookmark), an
 * injected 410 Expired, a silent watch, failing lists, paginated lists (and a continue token that
 * expired), and the resync from the cache that sends no request. The proxy speaks plain HTTP on
 * 127.0.0.1 and forwards over TLS (the harness's CA) to the apiserver; the KubeApi under test talks
 * to the proxy with the admin token. Run with `npm run test:kube`.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { after, afterEach, before, describe, it } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { KubeApi } from '../../src/kube/api.ts';
import { Informer, type InformerOptions, type KubeObject } from '../../src/kube/informer.ts';
import { type Kube, startKube } from './harness.ts';
import { create, del, list, waitFor } from './support.ts';

interface WatchEventLine {
  type: string;
  object: { metadata?: { name?: string; resourceVersion?: string } };
}

/** One watch stream passing through the proxy. */
interface ProxiedWatch {
  path: string;
  /** The resourceVersion the client asked to watch from. */
  from: string;
  /** resourceVersions of the BOOKMARK events passed to the client. */
  bookmarks: string[];
  /** Forward nothing more from upstream (the connection stays open). */
  silent: boolean;
  /** Write one raw event line to the client. */
  inject(ev: unknown): void;
  /** Destroy the client's socket and the upstream request. */
  cut(): void;
}

class FaultProxy {
  readonly server: http.Server;
  private readonly kube: Kube;
  /** Plain list requests (GET without watch) seen, failed ones included: one per page. */
  lists = 0;
  /** The `limit` and `continue` of each list request, in order. */
  readonly pages: Array<{ limit: string | null; continue: string | null }> = [];
  /** Watch requests seen, and the resourceVersion each asked for. */
  watches = 0;
  readonly watchFrom: string[] = [];
  /** Statuses to answer the next list requests with instead of forwarding them. */
  listFailures: number[] = [];
  listFailed = 0;
  /** Continued list requests (with a `continue` token) to answer 410 Expired, as after a compaction. */
  expireContinues = 0;
  /** Drop watch events for which this returns true. */
  drop: ((ev: WatchEventLine) => boolean) | undefined;
  readonly active = new Set<ProxiedWatch>();

  constructor(kube: Kube) {
    this.kube = kube;
    this.server = http.createServer((req, res) => this.handle(req, res));
  }

  async listen(): Promise<string> {
    await new Promise<void>((ok) => this.server.listen(0, '127.0.0.1', ok));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async close(): Promise<void> {
    for (const w of this.active) w.cut();
    this.server.closeAllConnections();
    await new Promise<void>((ok) => this.server.close(() => ok()));
  }

  private handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const url = new URL(req.url ?? '/', this.kube.url);
    const isWatch = ['1', 'true'].includes(url.searchParams.get('watch') ?? '');
    if (req.method === 'GET' && !isWatch) {
      this.lists++;
      this.pages.push({ limit: url.searchParams.get('limit'), continue: url.searchParams.get('continue') });
      if (url.searchParams.get('continue') && this.expireContinues > 0) {
        this.expireContinues--;
        this.listFailed++;
        // The apiserver's answer to a continue token whose resourceVersion was compacted.
        res.writeHead(410, { 'Content-Type': 'application/json' });
        res.end(
          JSON.stringify({
            kind: 'Status',
            apiVersion: 'v1',
            status: 'Failure',
            reason: 'Expired',
            message: 'The provided continue parameter is too old to display a consistent list result.',
            code: 410,
          }),
        );
        return;
      }
      const status = this.listFailures.shift();
      if (status !== undefined) {
        this.listFailed++;
        res.writeHead(status, { 'Content-Type': 'application/json' });
        res.end(
          JSON.stringify({
            kind: 'Status',
            apiVersion: 'v1',
            status: 'Failure',
            reason: status === 503 ? 'ServiceUnavailable' : 'InternalError',
            message: 'injected by the test proxy',
            code: status,
          }),
        );
        return;
      }
    }
    if (isWatch) {
      this.watches++;
      this.watchFrom.push(url.searchParams.get('resourceVersion') ?? '');
    }
    const headers = { ...req.headers };
    delete headers.host;
    delete headers.connection;
    const up = https.request(url, { method: req.method, headers, ca: this.kube.caPem }, (ures) => {
      const h = { ...ures.headers };
      for (const k of ['connection', 'keep-alive', 'transfer-encoding']) delete h[k];
      if (!isWatch || ures.statusCode !== 200) {
        res.writeHead(ures.statusCode ?? 502, h);
        ures.pipe(res);
        return;
      }
      delete h['content-length'];
      res.writeHead(200, h);
      res.flushHeaders();
      const w: ProxiedWatch = {
        path: url.pathname,
        from: url.searchParams.get('resourceVersion') ?? '',
        bookmarks: [],
        silent: false,
        inject: (ev) => res.write(`${JSON.stringify(ev)}\n`),
        cut: () => {
          this.active.delete(w);
          req.socket.destroy();
          up.destroy();
        },
      };
      this.active.add(w);
      let buf = '';
      ures.setEncoding('utf8');
      ures.on('data', (chunk: string) => {
        buf += chunk;
        let i = buf.indexOf('\n');
        while (i >= 0) {
          const line = buf.slice(0, i);
          buf = buf.slice(i + 1);
          i = buf.indexOf('\n');
          if (!line.trim() || w.silent) continue;
          const ev = JSON.parse(line) as WatchEventLine;
          if (this.drop?.(ev)) continue;
          if (ev.type === 'BOOKMARK') w.bookmarks.push(ev.object.metadata?.resourceVersion ?? '');
          res.write(`${line}\n`);
        }
      });
      ures.on('end', () => {
        this.active.delete(w);
        res.end();
      });
      ures.on('error', () => w.cut());
      res.on('close', () => {
        this.active.delete(w);
        up.destroy();
      });
    });
    up.on('error', () => {
      if (!res.headersSent) res.writeHead(502).end();
      else res.destroy();
    });
    req.pipe(up);
  }
}

const STATUS_410 = {
  type: 'ERROR',
  object: {
    kind: 'Status',
    apiVersion: 'v1',
    status: 'Failure',
    reason: 'Expired',
    code: 410,
    message: 'too old resource version',
  },
};

describe('informer through a fault-injecting proxy (real kube-apiserver)', () => {
  let kube: Kube;
  let nsCount = 0;
  const cleanups: Array<() => Promise<void> | void> = [];

  before(async () => {
    kube = await startKube();
  });

  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  after(async () => {
    await kube?.stop();
  });

  /** A fresh namespace, a proxy, a KubeApi pointed at it, and an informer on its ConfigMaps. */
  async function setup(opts: InformerOptions) {
    const ns = `informer-${++nsCount}`;
    await create(kube, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } });
    const proxy = new FaultProxy(kube);
    const server = await proxy.listen();
    cleanups.push(() => proxy.close());

    // The harness's admin kubeconfig, with the server swapped for the (plain HTTP) proxy. client-node
    // refuses an http:// server unless skipTLSVerify is set (there is no TLS on this hop to verify).
    const kc = new KubeConfig();
    kc.loadFromFile(kube.kubeconfigPath);
    kc.clusters = kc.clusters.map((c) => ({ ...c, server, skipTLSVerify: true }));
    const api = new KubeApi(kc);
    cleanups.push(() => api.close());

    const logs: string[] = [];
    const path = `/api/v1/namespaces/${ns}/configmaps`;
    const informer = new Informer<KubeObject>(api, path, {
      backoffBaseMs: 50,
      backoffCapMs: 1000,
      ...opts,
      log: (msg, fields) => logs.push(`${msg} ${JSON.stringify(fields ?? {})}`),
    });
    cleanups.push(() => informer.stop());
    const events: string[] = [];
    informer.on((type, obj) => events.push(`${type} ${obj.metadata.name}`));

    const cm = (name: string) =>
      create(kube, { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, namespace: ns }, data: { k: name } });
    const rm = (name: string) => del(kube, `${path}/${name}`);
    const saw = (what: string) =>
      waitFor(`informer emitted "${what}" (events: ${events.join(', ')})`, () => events.includes(what), 15_000, 50);
    const watching = () => waitFor('a watch through the proxy', () => proxy.active.size === 1, 15_000, 20);
    return { ns, proxy, informer, events, logs, cm, rm, saw, watching };
  }

  it('re-watches after the proxy cuts the watch stream, from the last event seen: no list', async () => {
    // A long watchdog: the recovery must come from noticing the cut, not from the watchdog.
    const t = await setup({ watchdogMs: 60_000 });
    await t.cm('before');
    await t.informer.start();
    assert.ok(t.informer.cache.has(`${t.ns}/before`));
    await t.watching();
    await t.cm('seen');
    await t.saw('ADDED seen');
    const watchesBefore = t.proxy.watches;
    const listsBefore = t.proxy.lists;
    const lastSeen = t.informer.cache.get(`${t.ns}/seen`)!.metadata.resourceVersion!;

    for (const w of [...t.proxy.active]) w.cut();
    await t.cm('during-cut');
    await t.saw('ADDED during-cut');
    await waitFor('a new watch went through the proxy', () => t.proxy.watches > watchesBefore, 15_000, 5);
    assert.equal(t.proxy.watchFrom[watchesBefore], lastSeen, 'resumed from the last event');
    assert.equal(t.proxy.lists, listsBefore, 'a dropped watch does not list again');
    assert.equal(t.informer.lists, 1);

    // And again, on the new stream.
    await t.watching();
    await t.cm('after-cut');
    await t.saw('ADDED after-cut');
    assert.ok(t.informer.cache.has(`${t.ns}/after-cut`));
    assert.equal(t.events.filter((e) => e === 'ADDED before').length, 1, `no replay: ${t.events.join(', ')}`);
    assert.ok(!t.logs.some((l) => l.startsWith('watch silent')), `no watchdog restart: ${t.logs.join('\n')}`);
  });

  it("resumes a dropped watch from the apiserver's bookmark, without a list", async () => {
    // A watch with a deadline gets a real bookmark from the apiserver 2 s before it (the watch
    // cache's cacheWatcher.nextBookmarkTime), carrying the cache's newest resourceVersion.
    const t = await setup({ watchdogMs: 60_000, watchTimeoutSeconds: 6 });
    await t.cm('known');
    await t.informer.start();
    await t.watching();
    const listRv = t.informer.cache.get(`${t.ns}/known`)!.metadata.resourceVersion!;
    // Writes elsewhere move the resourceVersion on; this watch sees none of them.
    const other = `${t.ns}-elsewhere`;
    await create(kube, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: other } });
    let newest = '';
    for (const name of ['a', 'b', 'c'])
      newest = (await create(kube, { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, namespace: other } }))
        .metadata.resourceVersion!;
    const w = [...t.proxy.active][0]!;
    const bookmark = await waitFor(
      'a bookmark newer than the writes elsewhere',
      () => w.bookmarks.find((rv) => BigInt(rv) >= BigInt(newest)),
      15_000,
      20,
    );
    assert.ok(BigInt(bookmark) > BigInt(listRv));
    const watchesBefore = t.proxy.watches;
    const listsBefore = t.proxy.lists;
    w.cut();
    await t.cm('after-cut');
    await t.saw('ADDED after-cut');
    assert.equal(t.proxy.watchFrom[watchesBefore], bookmark, "the next watch starts at the bookmark's version");
    assert.equal(t.proxy.lists, listsBefore, 'no list');
    assert.ok(t.informer.bookmarkResumes >= 1);
    assert.deepEqual(t.events, ['ADDED known', 'ADDED after-cut']);
  });

  it('lists in pages of pageSize (limit/continue), one consistent list', async () => {
    const t = await setup({ watchdogMs: 60_000, pageSize: 2 });
    for (const n of ['p1', 'p2', 'p3', 'p4', 'p5']) await t.cm(n);
    await t.informer.start();
    assert.deepEqual(
      t.proxy.pages.map((p) => [p.limit, Boolean(p.continue)]),
      [
        ['2', false],
        ['2', true],
        ['2', true],
      ],
    );
    assert.equal(t.informer.lists, 1);
    assert.deepEqual(t.events.sort(), ['ADDED p1', 'ADDED p2', 'ADDED p3', 'ADDED p4', 'ADDED p5']);
    // The cache keeps no managedFields (the apiserver's copy has them).
    const live = (await list(kube, `/api/v1/namespaces/${t.ns}/configmaps`))[0]!;
    assert.ok((live.metadata as { managedFields?: unknown[] }).managedFields?.length);
    assert.equal(
      (t.informer.cache.get(`${t.ns}/p1`)!.metadata as { managedFields?: unknown }).managedFields,
      undefined,
    );
    await t.watching();
    await t.cm('p6');
    await t.saw('ADDED p6');
  });

  it('a continue token that expired (410) starts the list over; each object is emitted once', async () => {
    const t = await setup({ watchdogMs: 60_000, pageSize: 2 });
    for (const n of ['e1', 'e2', 'e3', 'e4', 'e5']) await t.cm(n);
    t.proxy.expireContinues = 1;
    await t.informer.start();
    assert.deepEqual(
      t.proxy.pages.map((p) => Boolean(p.continue)),
      [false, true, false, true, true],
      'page 1, page 2 expired, then pages 1-3 again',
    );
    assert.equal(t.informer.listRestarts, 1);
    assert.equal(t.informer.lists, 1);
    assert.equal(t.informer.cache.size, 5);
    assert.deepEqual(t.events.sort(), ['ADDED e1', 'ADDED e2', 'ADDED e3', 'ADDED e4', 'ADDED e5']);
    assert.ok(t.logs.some((l) => l.startsWith('list continue token expired')));
  });

  it('re-lists on an injected 410 Expired and emits what changed while the watch was broken', async () => {
    const t = await setup({ watchdogMs: 60_000 });
    await t.cm('doomed');
    await t.cm('kept');
    await t.informer.start();
    await t.watching();
    const listsBefore = t.proxy.lists;

    // Break the stream: upstream events are swallowed from now on, then the apiserver "expires" it.
    for (const w of t.proxy.active) w.silent = true;
    await t.cm('born-while-broken');
    await t.rm('doomed');
    // Let the swallowed events pass through the proxy before injecting (they must not reach the informer).
    await waitFor('upstream deletion visible', async () => !(await listNames(kube, t.ns)).includes('doomed'));
    assert.ok(!t.events.includes('ADDED born-while-broken'));
    assert.ok(!t.events.includes('DELETED doomed'));
    for (const w of t.proxy.active) w.inject(STATUS_410);

    await t.saw('ADDED born-while-broken');
    await t.saw('DELETED doomed');
    assert.ok(t.proxy.lists > listsBefore, 'the 410 made the informer list again');
    assert.deepEqual([...t.informer.cache.keys()].sort(), [`${t.ns}/born-while-broken`, `${t.ns}/kept`]);
    assert.ok(!t.events.includes('DELETED kept'));

    // The watch resumes from the new list.
    await t.watching();
    await t.cm('after-relist');
    await t.saw('ADDED after-relist');
  });

  it('restarts a silent watch (no events, no bookmarks) via the watchdog', async () => {
    const t = await setup({ watchdogMs: 1500 });
    await t.informer.start();
    await t.watching();
    const watchesBefore = t.proxy.watches;
    const listsBefore = t.proxy.lists;
    const silenced = [...t.proxy.active];
    for (const w of silenced) w.silent = true;

    await t.cm('while-silent');
    await t.saw('ADDED while-silent');
    assert.ok(t.proxy.watches > watchesBefore, 'the watchdog opened a new watch');
    assert.ok(
      t.logs.some((l) => l.startsWith('watch silent')),
      `watchdog logged: ${t.logs.join('\n')}`,
    );
    assert.equal(t.proxy.lists, listsBefore, 'the new watch resumed where the silent one stopped: no list');
    // The silenced connection was dropped by the client.
    await waitFor('silenced watch closed', () => silenced.every((w) => !t.proxy.active.has(w)), 15_000, 50);

    await t.watching();
    await t.cm('after-silence');
    await t.saw('ADDED after-silence');
  });

  it('backs off through failing lists (500/503) and then syncs', async () => {
    const t = await setup({ watchdogMs: 60_000 });
    await t.cm('present');
    t.proxy.listFailures = [500, 503, 500, 503];
    await t.informer.start();
    assert.equal(t.proxy.listFailed, 4);
    assert.equal(t.proxy.lists, 5);
    assert.ok(t.informer.hasSynced);
    assert.ok(t.informer.restarts >= 4, `restarts: ${t.informer.restarts}`);
    assert.ok(t.informer.cache.has(`${t.ns}/present`));
    assert.equal(t.logs.filter((l) => l.startsWith('informer restarting')).length, 4, t.logs.join('\n'));
    assert.deepEqual(t.events, ['ADDED present']);

    await t.watching();
    await t.cm('after-sync');
    await t.saw('ADDED after-sync');
  });

  it('resyncs from the cache: every object handed again each period, no request sent', async () => {
    const t = await setup({ watchdogMs: 60_000, resyncMs: 300 });
    await t.cm('r1');
    await t.cm('r2');
    const resynced: string[] = [];
    t.informer.on((type, obj, _key, resync) => {
      if (resync) resynced.push(`${type} ${obj.metadata.name}`);
    });
    await t.informer.start();
    await t.watching();
    const [lists, watches] = [t.proxy.lists, t.proxy.watches];
    await waitFor('two resync rounds', () => t.informer.resyncs >= 2, 15_000, 20);
    assert.deepEqual(resynced.slice(0, 4).sort(), ['MODIFIED r1', 'MODIFIED r1', 'MODIFIED r2', 'MODIFIED r2']);
    assert.equal(t.proxy.lists, lists, 'a resync lists nothing');
    assert.equal(t.proxy.watches, watches, 'nor restarts the watch');
    assert.equal(t.informer.lists, 1);
  });
});

async function listNames(kube: Kube, ns: string): Promise<string[]> {
  return (await list(kube, `/api/v1/namespaces/${ns}/configmaps`)).map((o) => o.metadata.name);
}
