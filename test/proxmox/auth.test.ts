/** Authentication: token header, tickets (CSRF, renewal, expiry, one re-login), privilege separation, secrecy. */
import assert from 'node:assert/strict';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { inspect } from 'node:util';
import {
  credentialsFromSecretData,
  parseTokenString,
  passwordCredentials,
  type TicketAuth,
  tokenCredentials,
} from '../../src/proxmox/auth.ts';
import { PveClient } from '../../src/proxmox/client.ts';
import { AuthenticationError, PermissionError, PveError, UnsupportedError } from '../../src/proxmox/errors.ts';
import { Secret } from '../../src/proxmox/secret.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { client, deadPort, exposed, NODE, ROOT_PASSWORD, rejection, sim, TOKEN_SECRET } from './helpers.ts';

let s: Simulator;
before(async () => {
  s = await sim('8.4');
});
after(async () => {
  await s.close();
});

/** A plain HTTP server that records what the client sends and answers `{"data": ...}`. */
async function recorder(answer: (method: string, url: string) => unknown = () => null) {
  const seen: Array<{ method: string; url: string; headers: IncomingHttpHeaders; body: string }> = [];
  const srv = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => {
      body += c;
    });
    req.on('end', () => {
      seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body });
      const data =
        req.url === '/api2/json/access/ticket'
          ? {
              username: 'root@pam',
              ticket: 'PVE:root@pam:6650F00D::c2lnbmF0dXJl',
              CSRFPreventionToken: '6650F00D:csrfvalue',
            }
          : answer(req.method ?? '', req.url ?? '');
      const out = JSON.stringify({ data });
      res.writeHead(200, { 'Content-Type': 'application/json;charset=UTF-8' });
      res.end(out);
    });
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  const url = `http://127.0.0.1:${(srv.address() as AddressInfo).port}`;
  return { url, seen, close: () => new Promise<void>((r) => srv.close(() => r())) };
}

describe('what goes on the wire', () => {
  it('an API token is sent as `Authorization: PVEAPIToken=...`, never as a cookie, and without CSRF', async () => {
    const r = await recorder(() => 'UPID:pve:00000001:00000002:00000003:qmstart:100:root@pam!provider:');
    const c = new PveClient({ endpoints: [r.url], credentials: parseTokenString(`root@pam!provider=${TOKEN_SECRET}`) });
    await c.version();
    await c.startVm('pve', 100);
    for (const x of r.seen) {
      assert.equal(x.headers.authorization, `PVEAPIToken=root@pam!provider=${TOKEN_SECRET}`);
      assert.equal(x.headers.cookie, undefined);
      assert.equal(x.headers.csrfpreventiontoken, undefined);
    }
    await c.close();
    await r.close();
  });

  it('a ticket goes in the PVEAuthCookie cookie; CSRF only on writes; forms and query strings', async () => {
    const r = await recorder((m, url) =>
      m === 'GET' ? [] : url.includes('config') ? null : 'UPID:pve:00000001:00000002:00000003:qmdestroy:100:root@pam:',
    );
    const c = new PveClient({ endpoints: [r.url], credentials: passwordCredentials('root@pam', ROOT_PASSWORD) });
    await c.listNodes();
    await c.updateVmConfig(
      'pve',
      100,
      { set: { description: 'a b+c', onboot: true }, delete: ['net1', 'ide2'] },
      { sync: true },
    );
    await c.deleteVm('pve', 100, { purge: true });
    const [login, get, put, del] = r.seen;
    assert.equal(login!.url, '/api2/json/access/ticket');
    assert.equal(login!.headers['content-type'], 'application/x-www-form-urlencoded');
    assert.equal(login!.headers.cookie, undefined);
    assert.equal(new URLSearchParams(login!.body).get('password'), ROOT_PASSWORD);
    assert.equal(get!.headers.cookie, `PVEAuthCookie=${encodeURIComponent('PVE:root@pam:6650F00D::c2lnbmF0dXJl')}`);
    assert.equal(get!.headers.csrfpreventiontoken, undefined);
    assert.equal(get!.headers.authorization, undefined);
    assert.equal(put!.method, 'PUT');
    assert.equal(put!.headers.csrfpreventiontoken, '6650F00D:csrfvalue');
    const form = new URLSearchParams(put!.body);
    assert.equal(form.get('description'), 'a b+c');
    assert.equal(form.get('onboot'), '1');
    assert.equal(form.get('delete'), 'net1,ide2');
    assert.equal(del!.method, 'DELETE');
    assert.equal(del!.body, '', 'DELETE parameters go in the query string (PVE answers 501 to a body)');
    assert.equal(del!.url, '/api2/json/nodes/pve/qemu/100?purge=1');
    assert.equal(del!.headers.csrfpreventiontoken, '6650F00D:csrfvalue');
    await c.close();
    await r.close();
  });
});

describe('tickets against the simulator', () => {
  it('login, CSRF on writes, renewal before the 2 h expiry, full login after it', async () => {
    const { c, rec } = client(s, { password: true });
    const auth = c.auth as TicketAuth;
    await c.version();
    assert.equal(auth.logins, 1);
    // A write needs the CSRF token: it succeeds.
    await c.createPool('ticket-pool', 'created with a ticket');
    assert.ok((await c.listPools()).some((p) => p.poolid === 'ticket-pool'));

    s.clock.advance(61 * 60_000);
    await c.version();
    assert.equal(auth.renewals, 1, 'renewed by re-posting the ticket');
    assert.equal(auth.logins, 1);
    assert.deepEqual(rec.logins.at(-1), { renewal: true, ok: true });

    s.clock.advance(2 * 3600_000 + 1000);
    await c.version();
    assert.equal(auth.logins, 2, 'an expired ticket needs the password again');
    assert.ok(
      rec.events.every((e) => e.status === 200),
      'no request ever failed',
    );
    await c.close();
  });

  it('concurrent first calls share one login', async () => {
    const { c, rec } = client(s, { password: true });
    const all = await Promise.all(Array.from({ length: 8 }, () => c.version()));
    assert.equal(all.length, 8);
    assert.equal(rec.logins.length, 1);
    assert.equal((c.auth as TicketAuth).logins, 1);
    await c.close();
  });

  it('a 401 with a ticket leads to one re-login and one resend', async () => {
    // The client believes its ticket lives 100 h; the server says otherwise.
    const { c, rec } = client(s, {
      password: true,
      ticket: { renewAfterMs: 99 * 3600_000, lifetimeMs: 100 * 3600_000 },
    });
    await c.version();
    s.clock.advance(2 * 3600_000 + 6 * 60_000);
    const v = await c.version();
    assert.equal(v.release, '8.4');
    assert.deepEqual(
      rec.events.map((e) => `${e.path} ${e.status}`),
      ['/access/ticket 200', '/version 200', '/version 401', '/access/ticket 200', '/version 200'],
    );
    await c.close();
  });

  it('a rejected password: AuthenticationError, one login attempt per call, no password anywhere', async () => {
    const { c, rec } = client(s, { credentials: passwordCredentials('root@pam', 'not-the-password-xyz') });
    const e = await rejection(c.version());
    assert.ok(e instanceof AuthenticationError, String(e));
    assert.equal(e.path, '/access/ticket');
    assert.ok(!exposed(e).includes('not-the-password-xyz'));
    assert.equal(rec.events.length, 1);
    assert.deepEqual(rec.logins, [{ renewal: false, ok: false }]);
    await c.close();
  });

  it('unlocking and skiplock are refused before sending for tokens, allowed for root@pam tickets', async () => {
    const { c: tok, rec } = client(s);
    await tok.waitTask(await tok.createVm(NODE, 501, { name: 'lockme', memory: 512 }));
    const e = await rejection(tok.unlockVm(NODE, 501));
    assert.ok(e instanceof UnsupportedError, String(e));
    assert.match(e.message, /root@pam/);
    const e2 = await rejection(tok.deleteVm(NODE, 501, { skiplock: true }));
    assert.ok(e2 instanceof UnsupportedError);
    assert.ok(!rec.events.some((x) => x.method === 'PUT' || x.method === 'DELETE'), 'nothing was sent');

    const fid = s.cluster('site-1').addFault({ kind: 'lock', vmid: 501, lock: 'create', flock: false });
    const { c: root } = client(s, { password: true });
    assert.equal((await root.vmStatus(NODE, 501)).lock, 'create');
    await root.unlockVm(NODE, 501);
    assert.equal((await root.vmStatus(NODE, 501)).lock, undefined);
    s.cluster('site-1').faults.remove(fid);
    await tok.close();
    await root.close();
  });
});

describe('API token privilege separation', () => {
  it("a privsep token has the intersection of its user's and its own ACLs", async () => {
    const site = s.cluster('site-1');
    site.addUser('ops@pve', 'pw');
    site.setAcl('/vms', 'ops@pve', 'PVEVMAdmin');
    const sepSecret = site.addToken('ops@pve', 'sep', { privsep: true });
    site.setAcl('/vms', 'ops@pve!sep', 'PVEAuditor');
    const fullSecret = site.addToken('ops@pve', 'full', { privsep: false });

    const { c: root } = client(s);
    await root.waitTask(await root.createVm(NODE, 502, { name: 'privsep', memory: 512 }));

    const { c: sep } = client(s, { credentials: tokenCredentials('ops@pve!sep', sepSecret) });
    const status = await sep.vmStatus(NODE, 502);
    assert.equal(status.status, 'stopped', 'VM.Audit: in both ACL sets');
    const e = await rejection(sep.startVm(NODE, 502));
    assert.ok(e instanceof PermissionError, String(e));
    assert.equal(e.aclPath, '/vms/502');
    assert.equal(e.privilege, 'VM.PowerMgmt');
    const perms = await sep.permissions({ path: '/vms/502' });
    assert.equal(perms['/vms/502']?.['VM.PowerMgmt'], undefined);
    assert.equal(perms['/vms/502']?.['VM.Audit'], 1);

    const { c: full } = client(s, { credentials: tokenCredentials('ops@pve!full', fullSecret) });
    await full.waitTask(await full.startVm(NODE, 502));
    assert.equal((await full.vmStatus(NODE, 502)).status, 'running');
    for (const c of [root, sep, full]) await c.close();
  });
});

describe('secrets never leak', () => {
  it('Secret hides its value from String, JSON and inspect', () => {
    const sec = new Secret('hunter2-secret');
    assert.equal(String(sec), '[redacted]');
    assert.equal(`${sec}`, '[redacted]');
    assert.equal(JSON.stringify({ sec }), '{"sec":"[redacted]"}');
    assert.ok(!inspect({ sec }, { showHidden: true, depth: 5 }).includes('hunter2'));
    assert.equal(sec.reveal(), 'hunter2-secret');
  });

  it('credential parsing errors never echo the secret', () => {
    for (const bad of ['root@pam=sekrit-value-1', 'nobang@pam!=sekrit-value-1', 'root@pam!1bad=sekrit-value-1']) {
      const e = (() => {
        try {
          parseTokenString(bad);
        } catch (x) {
          return x;
        }
        throw new Error('expected an error');
      })();
      assert.ok(!exposed(e).includes('sekrit-value-1'), String(e));
    }
    assert.throws(
      () => credentialsFromSecretData({ tokenid: 'root@pam!x' }, 'Secret ns/name'),
      /'token' \(the token secret\) is missing/,
    );
    const c = credentialsFromSecretData({ tokenid: 'root@pam!provider', token: 'zzzz-secret' }, 'Secret ns/n');
    assert.ok(!inspect(c, { depth: 5 }).includes('zzzz-secret'));
    assert.ok(!JSON.stringify(c).includes('zzzz-secret'));
    assert.equal(credentialsFromSecretData({ token: 'root@pam!p=abc-def' }, 'x').kind, 'token');
    assert.equal(credentialsFromSecretData({ username: 'root@pam', password: 'p' }, 'x').kind, 'password');
  });

  it('clients, errors, logs and metrics never contain the token secret or the password', async () => {
    const site = s.cluster('site-1');
    const { c: tok, rec: trec } = client(s);
    const { c: pw, rec: prec } = client(s, { password: true });
    await pw.version();
    const tokErrors: unknown[] = [];
    const pwErrors: unknown[] = [];
    // A server that echoes credentials in its error text (worst case): each client scrubs what it knows.
    const fid = site.addFault({
      kind: 'request',
      method: 'GET',
      path: '/cluster/resources',
      status: 500,
      message: `bad value ${TOKEN_SECRET} / ${ROOT_PASSWORD}`,
      count: -1,
    });
    tokErrors.push(await rejection(tok.clusterResources()));
    pwErrors.push(await rejection(pw.clusterResources()));
    site.faults.remove(fid);
    const pid = site.addFault({
      kind: 'request',
      method: 'POST',
      path: '/nodes/{node}/qemu',
      status: 500,
      message: 'cipassword cloud-init-pass-1234 rejected',
      count: -1,
    });
    tokErrors.push(await rejection(tok.createVm(NODE, 777, { cipassword: 'cloud-init-pass-1234' })));
    site.faults.remove(pid);
    // wrong credentials
    const { c: bad } = client(s, { credentials: tokenCredentials('root@pam!provider', `${TOKEN_SECRET}x`) });
    tokErrors.push(await rejection(bad.version()));
    const { c: badpw } = client(s, { credentials: passwordCredentials('root@pam', `${ROOT_PASSWORD}x`) });
    pwErrors.push(await rejection(badpw.version()));
    // network and TLS failures
    const dead = new PveClient({
      endpoints: [`https://127.0.0.1:${await deadPort()}`],
      credentials: parseTokenString(`root@pam!provider=${TOKEN_SECRET}`),
      retry: { attempts: 1 },
    });
    tokErrors.push(await rejection(dead.version()));
    const tls = new PveClient({
      endpoints: [site.url],
      credentials: passwordCredentials('root@pam', ROOT_PASSWORD),
      tls: { fingerprints: ['00'.repeat(32)] },
    });
    pwErrors.push(await rejection(tls.version()));

    const check = (errors: unknown[], secrets: string[]) => {
      for (const e of errors) {
        assert.ok(e instanceof PveError, String(e));
        const text = exposed(e);
        for (const sec of secrets)
          assert.ok(!text.includes(sec), `${e.kind} error exposes a secret: ${text.slice(0, 300)}`);
      }
    };
    check(tokErrors, [TOKEN_SECRET, 'cloud-init-pass-1234']);
    check(pwErrors, [ROOT_PASSWORD, 'PVE:root@pam:']);
    const everything = [
      inspect(tok, { depth: 10, showHidden: true }),
      inspect(pw, { depth: 10, showHidden: true }),
      JSON.stringify(trec),
      JSON.stringify(prec),
    ].join('\n');
    for (const sec of [TOKEN_SECRET, ROOT_PASSWORD, 'cloud-init-pass-1234', 'PVE:root@pam:']) {
      assert.ok(!everything.includes(sec), 'client state / metrics / logs expose a secret');
    }
    for (const c of [tok, pw, bad, badpw, dead, tls]) await c.close();
  });
});
