/**
 * PVE API fidelity checks 1-8 (../shared/research/pve-api-fidelity.md, section 7): the 401 shape
 * and delay, the envelope, login, CSRF, credential lookup order, ticket lifetime and renewal,
 * the version-dependent auth-failure reason, and privilege separation of API tokens.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { type Simulator, startSimulator } from '../../src/sim/index.ts';
import {
  ALL_PROFILES,
  assertError,
  createVmAndWait,
  data,
  JSON_CT,
  login,
  NODE,
  ticketHeaders,
} from '../helpers/fidelity.ts';
import { raw, startTestSim, TOKEN, TOKEN_SECRET } from '../helpers/sim.ts';

/** The reason a bad ticket or token gets: the raw error until pve-manager 9.1.5. */
function authFailure(profile: string, raw: string): string {
  return profile === '9.2' ? 'Authentication failed!' : raw;
}

describe('fidelity #1: 401 delay is configurable', () => {
  it('#1 authFailDelayMs delays the 401 answer (lower bound only)', async () => {
    const sim = await startTestSim({ authFailDelayMs: 200 });
    try {
      const t0 = performance.now();
      const r = await raw(sim.cluster('site-1').url, 'GET', '/version', { headers: { Authorization: null } });
      const took = performance.now() - t0;
      assertError(r, 401, 'No ticket');
      assert.ok(took >= 150, `401 answered after ${took.toFixed(0)} ms, expected the configured 200 ms delay`);
    } finally {
      await sim.close();
    }
  });

  it('#1 the default delay is PVE 3 s divided by the speed factor', async () => {
    // speed 10: 3000 ms / 10 = 300 ms (no authFailDelayMs given).
    const sim = await startSimulator({ http: true, ephemeralPorts: true, speed: 10, seed: 1 });
    try {
      const t0 = performance.now();
      const r = await raw(sim.cluster('site-1').url, 'GET', '/version', { headers: { Authorization: null } });
      const took = performance.now() - t0;
      assertError(r, 401, 'No ticket');
      assert.ok(took >= 250, `401 answered after ${took.toFixed(0)} ms, expected 3000/speed = 300 ms`);
    } finally {
      await sim.close();
    }
  });
});

for (const profile of ALL_PROFILES) {
  describe(`fidelity auth checks 1-8, profile ${profile}`, () => {
    let sim: Simulator;
    let url: string;
    before(async () => {
      sim = await startTestSim({ profile });
      url = sim.cluster('site-1').url;
    });
    after(() => sim.close());

    it('#1 GET /version without credentials: 401 No ticket, empty body, no Content-Type', async () => {
      const r = await raw(url, 'GET', '/version', { headers: { Authorization: null } });
      assertError(r, 401, 'No ticket');
      assert.equal(r.text, '');
      assert.equal(r.headers.get('content-type'), null);
    });

    it('#2 success: exact Content-Type and the {"data":...} envelope', async () => {
      const r = await raw(url, 'GET', '/version');
      assert.equal(r.status, 200);
      assert.equal(r.headers.get('content-type'), JSON_CT);
      const body = r.json as Record<string, unknown>;
      assert.deepEqual(Object.keys(body), ['data']);
      const v = body.data as { version: string; release: string; repoid: string };
      assert.equal(v.release, profile);
      if (profile === '6.4' || profile === '7.4') {
        assert.match(v.version, /^\d\.\d-\d+$/);
        assert.match(v.repoid, /^[0-9a-f]{8}$/);
      } else {
        assert.match(v.version, /^\d\.\d\.\d+$/);
        assert.match(v.repoid, /^[0-9a-f]{16}$/);
      }
    });

    it('#3 login: bad credentials give 401 authentication failure', async () => {
      const r = await raw(url, 'POST', '/access/ticket', {
        form: { username: 'root@pam', password: 'wrong' },
        headers: { Authorization: null },
      });
      assertError(r, 401, 'authentication failure');
      // A handler error (not an auth_handler one): JSON body, delayed like every 401.
      assert.equal((r.json as { data: unknown }).data, null);
      const unknown = await raw(url, 'POST', '/access/ticket', {
        form: { username: 'nobody', password: 'x', realm: 'pve' },
        headers: { Authorization: null },
      });
      assertError(unknown, 401, 'authentication failure');
    });

    it('#3 login: ticket, CSRF token and cap, no Set-Cookie', async () => {
      const r = await raw(url, 'POST', '/access/ticket', {
        form: { username: 'root@pam', password: 'test-root-pw' },
        headers: { Authorization: null },
      });
      assert.equal(r.status, 200);
      assert.equal(r.headers.get('set-cookie'), null);
      assert.equal(r.headers.get('content-type'), JSON_CT);
      const d = data<Record<string, unknown>>(r);
      assert.match(String(d.ticket), /^PVE:[^:]+:[0-9A-F]{8}::/);
      assert.match(String(d.ticket), /^PVE:root@pam:/);
      assert.match(String(d.CSRFPreventionToken), /^[0-9A-F]{8}:/);
      assert.equal(typeof d.cap, 'object');
      assert.equal(d.username, 'root@pam');
    });

    it('#4 CSRF: ticket POST without the header is 401, token POST without it is fine', async () => {
      const t = await login(url);
      const noCsrf = await raw(url, 'POST', '/pools', { form: { poolid: 'csrf-a' }, headers: ticketHeaders(t, false) });
      assertError(noCsrf, 401, 'Permission denied - invalid csrf token');
      assert.equal(noCsrf.text, '');
      const badCsrf = await raw(url, 'POST', '/pools', {
        form: { poolid: 'csrf-a' },
        headers: { ...ticketHeaders(t, false), CSRFPreventionToken: '00000000:bogus' },
      });
      assertError(badCsrf, 401, 'Permission denied - invalid csrf token');
      // The CSRF check is part of authentication: it comes before routing (no 501 here).
      const unknownPath = await raw(url, 'POST', `/nodes/${NODE}/qemu/100/importdisk`, {
        form: { disk: 'x' },
        headers: ticketHeaders(t, false),
      });
      assertError(unknownPath, 401, 'Permission denied - invalid csrf token');
      const withCsrf = await raw(url, 'POST', '/pools', { form: { poolid: 'csrf-a' }, headers: ticketHeaders(t) });
      assert.equal(withCsrf.status, 200, withCsrf.reason);
      const token = await raw(url, 'POST', '/pools', { form: { poolid: 'csrf-b' } });
      assert.equal(token.status, 200, token.reason);
      // GET with a ticket needs no CSRF token.
      const get = await raw(url, 'GET', '/version', { headers: ticketHeaders(t, false) });
      assert.equal(get.status, 200);
    });

    it('#5 a token in the PVEAuthCookie cookie is 401; Authorization: PVEAuthCookie=<ticket> works', async () => {
      const asCookie = await raw(url, 'GET', '/version', {
        headers: { Authorization: null, Cookie: `PVEAuthCookie=${TOKEN}` },
      });
      assertError(asCookie, 401, authFailure(profile, 'permission denied - invalid PVE ticket'));
      assert.equal(asCookie.text, '');
      const t = await login(url);
      const viaAuthHeader = await raw(url, 'GET', '/version', {
        headers: { Authorization: `PVEAuthCookie=${t.ticket}` },
      });
      assert.equal(viaAuthHeader.status, 200, viaAuthHeader.reason);
      // A stale cookie shadows a valid token: the token is only looked at without a ticket.
      const shadowed = await raw(url, 'GET', '/version', {
        headers: { Authorization: `PVEAPIToken=${TOKEN}`, Cookie: 'PVEAuthCookie=PVE:root@pam:00000000::stale' },
      });
      assertError(shadowed, 401, authFailure(profile, 'permission denied - invalid PVE ticket'));
    });

    it('#7 a bad token secret gives the version-dependent 401 reason', async () => {
      const bad = await raw(url, 'GET', '/version', {
        headers: { Authorization: 'PVEAPIToken=root@pam!test=00000000-0000-0000-0000-000000000000' },
      });
      assertError(bad, 401, authFailure(profile, 'invalid token value!'));
      assert.equal(bad.text, '');
      assert.equal(bad.headers.get('content-type'), null);
      const unknown = await raw(url, 'GET', '/version', {
        headers: { Authorization: `PVEAPIToken=root@pam!nope=${TOKEN_SECRET}` },
      });
      assertError(unknown, 401, authFailure(profile, "no such token 'nope' for user 'root@pam'"));
    });

    it('#8 a privsep token without ACLs: 403 on start, filtered /cluster/resources', async () => {
      await createVmAndWait(url, { vmid: '100', name: 'perm-target', memory: '512' });
      const secret = sim.cluster('site-1').addToken('root@pam', 'limited', { privsep: true });
      const auth = { Authorization: `PVEAPIToken=root@pam!limited=${secret}` };
      const start = await raw(url, 'POST', `/nodes/${NODE}/qemu/100/status/start`, { headers: auth });
      assertError(start, 403, 'Permission check failed (/vms/100, VM.PowerMgmt)');
      assert.equal((start.json as { data: unknown }).data, null);
      // Permission checks run before parameter validation.
      const invalid = await raw(url, 'POST', `/nodes/${NODE}/qemu/100/status/start`, {
        form: { bogus: '1' },
        headers: auth,
      });
      assertError(invalid, 403, 'Permission check failed (/vms/100, VM.PowerMgmt)');
      // Lists filter silently instead of answering 403.
      const res = await raw(url, 'GET', '/cluster/resources', { headers: auth });
      assert.equal(res.status, 200);
      assert.deepEqual(data(res), []);
      const vms = await raw(url, 'GET', '/cluster/resources?type=vm', { headers: auth });
      assert.deepEqual(data(vms), []);
      // The token's own ACL opens exactly its path (intersection with root@pam's rights).
      sim.cluster('site-1').setAcl('/vms/100', 'root@pam!limited', 'PVEVMUser');
      const some = await raw(url, 'GET', '/cluster/resources?type=vm', { headers: auth });
      assert.deepEqual(
        data<Array<{ id: string }>>(some).map((e) => e.id),
        ['qemu/100'],
      );
      // The same token with privsep=0 has root@pam's rights.
      const full = sim.cluster('site-1').addToken('root@pam', 'full', { privsep: false });
      const all = await raw(url, 'GET', '/cluster/resources?type=vm', {
        headers: { Authorization: `PVEAPIToken=root@pam!full=${full}` },
      });
      assert.deepEqual(
        data<Array<{ id: string }>>(all).map((e) => e.id),
        ['qemu/100', 'qemu/9000'],
      );
    });
  });

  describe(`fidelity #6 ticket lifetime, profile ${profile}`, () => {
    let sim: Simulator;
    let url: string;
    before(async () => {
      sim = await startTestSim({ profile });
      url = sim.cluster('site-1').url;
    });
    after(() => sim.close());

    it('#6 a ticket older than 2 h is 401; re-POSTing it as password renews it', async () => {
      const first = await login(url);
      sim.clock.advance(3600_000); // 1 h later: still valid, renew it
      const ok = await raw(url, 'GET', '/version', { headers: ticketHeaders(first, false) });
      assert.equal(ok.status, 200);
      const renewed = await login(url, first.ticket);
      assert.notEqual(renewed.ticket, first.ticket);
      sim.clock.advance(3600_000 + 1000); // 2 h + 1 s after the first login
      const expired = await raw(url, 'GET', '/version', { headers: ticketHeaders(first, false) });
      assertError(expired, 401, authFailure(profile, 'permission denied - invalid PVE ticket'));
      assert.equal(expired.text, '');
      const fresh = await raw(url, 'GET', '/version', { headers: ticketHeaders(renewed, false) });
      assert.equal(fresh.status, 200);
      // An expired ticket cannot be renewed.
      const renewExpired = await raw(url, 'POST', '/access/ticket', {
        form: { username: 'root@pam', password: first.ticket },
        headers: { Authorization: null },
      });
      assertError(renewExpired, 401, 'authentication failure');
      // Exactly 2 h is already too old (PVE checks age < lifetime).
      const edge = await login(url);
      sim.clock.advance(7200_000);
      const atLimit = await raw(url, 'GET', '/version', { headers: ticketHeaders(edge, false) });
      assert.equal(atLimit.status, 401);
    });
  });
}
