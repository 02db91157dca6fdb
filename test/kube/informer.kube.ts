/**
 * The informer against a real kube-apiserver (harness.ts) behind a fault-injecting reverse proxy:
 * a cut watch stream, an injected 410 Expired, a silent watch, failing lists, and a resync that
 * repairs a swallowed DELETED event. The proxy speaks plain HTTP on 127.0.0.1 and forwards over TLS
 * (the harness's CA) to the apiserver; the KubeApi under test talks to the proxy with the admin token.
 * Run with `npm run test:kube`.
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
  object: { metadata?: { name?: string } };
}

/** One watch stream passing through the proxy. */
interface ProxiedWatch {
  path: string;
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
  /** Plain list requests (GET without watch) seen, failed ones included. */
  lists = 0;
  /** Watch requests seen. */
  watches = 0;
  /** Statuses to answer the next list requests with instead of forwarding them. */
  listFailures: number[] = [];
  listFailed = 0;
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
    if (isWatch) this.watches++;
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
          if (this.drop?.(JSON.parse(line) as WatchEventLine)) continue;
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

  it('re-watches after the proxy cuts the watch stream, and keeps delivering events', async () => {
    // A long watchdog: the recovery must come from noticing the cut, not from the watchdog.
    const t = await setup({ watchdogMs: 60_000 });
    await t.cm('before');
    await t.informer.start();
    assert.ok(t.informer.cache.has(`${t.ns}/before`));
    await t.watching();
    const watchesBefore = t.proxy.watches;

    for (const w of [...t.proxy.active]) w.cut();
    await t.cm('during-cut');
    await t.saw('ADDED during-cut');
    // The re-list after the cut may deliver the object a moment (under a millisecond) before the
    // new watch request reaches the proxy: wait for it rather than sample the counter.
    await waitFor('a new watch went through the proxy', () => t.proxy.watches > watchesBefore, 15_000, 5);

    // And again, on the new stream.
    await t.watching();
    await t.cm('after-cut');
    await t.saw('ADDED after-cut');
    assert.ok(t.informer.cache.has(`${t.ns}/after-cut`));
    assert.ok(!t.logs.some((l) => l.startsWith('watch silent')), `no watchdog restart: ${t.logs.join('\n')}`);
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
    const silenced = [...t.proxy.active];
    for (const w of silenced) w.silent = true;

    await t.cm('while-silent');
    await t.saw('ADDED while-silent');
    assert.ok(t.proxy.watches > watchesBefore, 'the watchdog opened a new watch');
    assert.ok(
      t.logs.some((l) => l.startsWith('watch silent')),
      `watchdog logged: ${t.logs.join('\n')}`,
    );
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

  it('a periodic resync removes an object whose DELETED event was swallowed', async () => {
    const t = await setup({ watchdogMs: 1500, resyncMs: 1500 });
    await t.cm('ghost');
    await t.cm('stays');
    await t.informer.start();
    await t.watching();
    assert.ok(t.informer.cache.has(`${t.ns}/ghost`));
    t.proxy.drop = (ev) => ev.type === 'DELETED' && ev.object.metadata?.name === 'ghost';
    const listsBefore = t.proxy.lists;

    await t.rm('ghost');
    await t.saw('DELETED ghost');
    assert.ok(t.proxy.lists > listsBefore, 'the DELETED came from a re-list');
    assert.ok(!t.informer.cache.has(`${t.ns}/ghost`));
    assert.ok(t.informer.cache.has(`${t.ns}/stays`));
    assert.ok(!t.events.includes('DELETED stays'));
  });
});

async function listNames(kube: Kube, ns: string): Promise<string[]> {
  return (await list(kube, `/api/v1/namespaces/${ns}/configmaps`)).map((o) => o.metadata.name);
}
