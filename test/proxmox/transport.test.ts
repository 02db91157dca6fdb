/** TLS modes, endpoint failover, retries of reads, no blind resend of mutations, metrics hooks. */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Registry } from 'prom-client';
import { parseTokenString } from '../../src/proxmox/auth.ts';
import { PveClient } from '../../src/proxmox/client.ts';
import { TlsError, UnavailableError } from '../../src/proxmox/errors.ts';
import { promClientHooks } from '../../src/proxmox/metrics.ts';
import { backoffDelay } from '../../src/proxmox/retry.ts';
import { normalizeFingerprint, probeCertificate, tlsMode } from '../../src/proxmox/tls.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { client, counters, deadPort, fetchCertPem, NODE, rejection, sim, TOKEN_SECRET } from './helpers.ts';

let s: Simulator;
before(async () => {
  s = await sim('8.4');
});
after(async () => {
  await s.close();
});

const token = () => parseTokenString(`root@pam!provider=${TOKEN_SECRET}`);

describe('TLS', () => {
  it('fingerprint pinning accepts the pinned certificate, in any spelling', async () => {
    const fp = s.cluster('site-1').fingerprint;
    for (const spelling of [fp, fp.toLowerCase(), fp.replace(/:/g, ''), `sha256:${fp}`]) {
      const c = new PveClient({
        endpoints: [s.cluster('site-1').url],
        credentials: token(),
        tls: { fingerprints: [spelling] },
      });
      assert.equal((await c.version()).release, '8.4');
      // a second request on a new connection is checked as well
      assert.equal((await c.listNodes()).length, 1);
      await c.close();
    }
  });

  it('a fingerprint mismatch is refused before any request is sent, and names the presented fingerprint', async () => {
    const site = s.cluster('site-1');
    const before = counters(s).get('GET /version') ?? 0;
    const wrong = 'AA:'.repeat(31) + 'AA';
    const c = new PveClient({ endpoints: [site.url], credentials: token(), tls: { fingerprints: [wrong] } });
    const e = await rejection(c.version());
    assert.ok(e instanceof TlsError, String(e));
    assert.equal(e.kind, 'tls');
    assert.equal(e.retryable, false);
    assert.equal(e.presentedFingerprint, site.fingerprint);
    assert.match(e.message, /fingerprint mismatch/);
    assert.equal(counters(s).get('GET /version') ?? 0, before, 'the simulator saw no request');
    await c.close();
  });

  it('system CAs (the default) refuse a self-signed node certificate', async () => {
    const c = new PveClient({ endpoints: [s.cluster('site-1').url], credentials: token() });
    const e = await rejection(c.version());
    assert.ok(e instanceof TlsError, String(e));
    assert.match(e.message, /not trusted/);
    await c.close();
  });

  it('a custom CA bundle verifies the certificate (here: the self-signed one itself)', async () => {
    const pem = await fetchCertPem(s.cluster('site-1').url);
    const c = new PveClient({ endpoints: [s.cluster('site-1').url], credentials: token(), tls: { caBundle: pem } });
    assert.equal((await c.version()).release, '8.4');
    await c.close();
  });

  it('insecure mode connects and logs a warning', async () => {
    const warnings: string[] = [];
    const c = new PveClient({
      endpoints: [s.cluster('site-1').url],
      credentials: token(),
      tls: { insecureSkipVerify: true },
      logger: { warn: (_o, m) => warnings.push(m ?? '') },
    });
    assert.equal((await c.version()).release, '8.4');
    assert.equal(warnings.length, 1);
    assert.match(warnings[0]!, /TLS verification is disabled/);
    await c.close();
  });

  it('helpers: normalizeFingerprint, tlsMode, probeCertificate', async () => {
    assert.equal(normalizeFingerprint('ab'.repeat(32)), 'AB:'.repeat(31) + 'AB');
    assert.equal(normalizeFingerprint('not-a-fingerprint'), undefined);
    assert.equal(tlsMode({}), 'system-ca');
    assert.equal(tlsMode({ fingerprints: ['x'] }), 'fingerprint');
    assert.equal(tlsMode({ caBundle: 'x' }), 'ca-bundle');
    assert.equal(tlsMode({ insecureSkipVerify: true, fingerprints: ['x'] }), 'insecure');
    const cert = await probeCertificate(s.cluster('site-1').url);
    assert.equal(cert.fingerprint256, s.cluster('site-1').fingerprint);
    assert.equal(cert.selfSigned, true);
  });
});

describe('failover between endpoints', () => {
  it('a dead first endpoint: the request moves to the second; the good one is preferred afterwards', async () => {
    const dead = `https://127.0.0.1:${await deadPort()}`;
    const { c, rec } = client(s, { endpoints: [dead, s.cluster('site-1').url] });
    assert.equal((await c.version()).release, '8.4');
    // A mutation also fails over when the first endpoint refused the connection (nothing was sent).
    const upid = await c.createVm(NODE, 601, { name: 'failover', memory: 512 });
    await c.waitTask(upid);
    assert.deepEqual(
      rec.endpointFailures,
      [{ endpoint: dead, cause: 'connection refused', sent: false }],
      'only the first request tried the dead endpoint',
    );
    assert.ok(rec.events.every((e) => e.status === 200));
    await c.close();
  });

  it('all endpoints dead: UnavailableError listing each', async () => {
    const a = `https://127.0.0.1:${await deadPort()}`;
    const b = `https://127.0.0.1:${await deadPort()}`;
    const { c } = client(s, { endpoints: [a, b] });
    const e = await rejection(c.version());
    assert.ok(e instanceof UnavailableError, String(e));
    assert.equal(e.failures.length, 2);
    assert.equal(e.requestSent, false);
    assert.match(e.message, /all 2 endpoints failed: .*connection refused.*connection refused/);
    await c.close();
  });

  it('a connection broken after a mutation was sent is not resent anywhere', async () => {
    const site = s.cluster('site-1');
    const { c, rec } = client(s, { endpoints: [site.url, site.url.replace('127.0.0.1', 'localhost')] });
    await c.version();
    const fid = site.addFault({ kind: 'unavailable', ms: 3_600_000, mode: 'reset' });
    const n = rec.events.length;
    const e = await rejection(c.createVm(NODE, 602, { name: 'maybe' }));
    assert.ok(e instanceof UnavailableError, String(e));
    assert.equal(e.requestSent, true);
    assert.match(e.message, /may have been applied/);
    assert.equal(rec.events.length - n, 1, 'one attempt');
    assert.equal(e.failures.length, 1, 'the second endpoint was not tried');
    site.faults.remove(fid);
    await c.close();
  });
});

describe('timeouts', () => {
  it('a read without an answer in time is unavailable (retried), a mutation says it may have been applied', async () => {
    const site = s.cluster('site-1');
    // 400 simulated seconds at speed 1000 = 400 ms real; the client waits 40 ms.
    const fid = site.addFault({ kind: 'latency', ms: 400_000, path: '/cluster/resources' });
    const { c } = client(s, { requestTimeoutMs: 40, retry: { attempts: 2, baseMs: 1, capMs: 1 } });
    const e = await rejection(c.clusterResources());
    assert.ok(e instanceof UnavailableError, String(e));
    assert.match(e.message, /no answer within the request timeout/);
    site.faults.remove(fid);
    const f2 = site.addFault({ kind: 'latency', ms: 400_000, method: 'POST', path: '/pools' });
    const e2 = await rejection(c.createPool('slow-pool'));
    assert.ok(e2 instanceof UnavailableError, String(e2));
    assert.equal(e2.requestSent, true);
    site.faults.remove(f2);
    await c.close();
  });
});

describe('retries', () => {
  it('idempotent reads are retried on transient errors', async () => {
    const site = s.cluster('site-1');
    const { c, rec } = client(s, { retry: { attempts: 4, baseMs: 1, capMs: 2 } });
    const fid = site.addFault({
      kind: 'request',
      method: 'GET',
      path: '/cluster/resources',
      status: 503,
      message: 'Service Unavailable',
      nth: 1,
      count: 2,
    });
    const before = counters(s).get('GET /cluster/resources') ?? 0;
    const list = await c.clusterResources('vm');
    assert.ok(Array.isArray(list));
    assert.equal((counters(s).get('GET /cluster/resources') ?? 0) - before, 3, 'two failures, then success');
    assert.deepEqual(
      rec.events.filter((e) => e.path === '/cluster/resources').map((e) => [e.status, e.attempt, e.errorKind]),
      [
        [503, 1, 'unavailable'],
        [503, 2, 'unavailable'],
        [200, 3, undefined],
      ],
    );
    site.faults.remove(fid);
    await c.close();
  });

  it('reads give up after the attempts; permanent errors are not retried', async () => {
    const site = s.cluster('site-1');
    const { c } = client(s, { retry: { attempts: 3, baseMs: 1, capMs: 2 } });
    const fid = site.addFault({
      kind: 'request',
      method: 'GET',
      path: '/cluster/resources',
      status: 503,
      message: 'down',
      count: -1,
    });
    const before = counters(s).get('GET /cluster/resources') ?? 0;
    await rejection(c.clusterResources());
    assert.equal((counters(s).get('GET /cluster/resources') ?? 0) - before, 3);
    site.faults.remove(fid);
    const b2 = counters(s).get('GET /nodes/{node}/qemu/{vmid}/status/current') ?? 0;
    await rejection(c.vmStatus(NODE, 9999));
    assert.equal((counters(s).get('GET /nodes/{node}/qemu/{vmid}/status/current') ?? 0) - b2, 1, 'not-found is final');
    await c.close();
  });

  it('mutations are never retried, even on a retryable error', async () => {
    const site = s.cluster('site-1');
    const { c } = client(s, { retry: { attempts: 5, baseMs: 1, capMs: 2 } });
    const fid = site.addFault({
      kind: 'request',
      method: 'POST',
      path: '/nodes/{node}/qemu',
      status: 503,
      message: 'busy',
      count: -1,
    });
    const before = counters(s).get('POST /nodes/{node}/qemu') ?? 0;
    const e = await rejection(c.createVm(NODE, 603, { name: 'once' }));
    assert.ok(e instanceof UnavailableError);
    assert.equal((counters(s).get('POST /nodes/{node}/qemu') ?? 0) - before, 1);
    site.faults.remove(fid);
    await c.close();
  });

  it('backoff is jittered and capped', () => {
    assert.equal(backoffDelay(0, { baseMs: 100, capMs: 1000, random: () => 0.999 }), 99);
    assert.equal(backoffDelay(3, { baseMs: 100, capMs: 1000, random: () => 0.5 }), 400);
    assert.equal(backoffDelay(20, { baseMs: 100, capMs: 1000, random: () => 0.999 }), 999);
    assert.equal(backoffDelay(5, { baseMs: 100, capMs: 1000, random: () => 0 }), 0);
  });
});

describe('metrics hooks', () => {
  it('prom-client: requests by method + path template + status, latency, errors by class', async () => {
    const registry = new Registry();
    const hooks = await promClientHooks({ registry });
    const { c } = client(s, { hooks });
    await c.vmStatus(NODE, 9000);
    await rejection(c.vmStatus(NODE, 9999));
    const text = await registry.metrics();
    assert.match(
      text,
      /proxmox_api_requests_total\{site="site-1",method="GET",path="\/nodes\/\{node\}\/qemu\/\{vmid\}\/status\/current",status="200"\} 1/,
    );
    assert.match(text, /status="500"\} 1/);
    assert.match(text, /proxmox_api_errors_total\{site="site-1",class="not-found"\} 1/);
    assert.match(
      text,
      /proxmox_api_request_duration_seconds_count\{site="site-1",method="GET",path="\/nodes\/\{node\}\/qemu\/\{vmid\}\/status\/current"\} 2/,
    );
    assert.ok(!/\/9999\b|"9999"/.test(text), 'no concrete ids in labels');
    await c.close();
  });

  it('a throwing hook never breaks a call', async () => {
    const { c } = client(s, {
      hooks: {
        onRequest: () => {
          throw new Error('hook bug');
        },
      },
    });
    assert.equal((await c.version()).release, '8.4');
    await c.close();
  });
});
