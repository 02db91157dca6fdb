/**
 * The fault machinery itself: the `/_sim/` control API (root@pam only) that takes every fault kind
 * with the same effect as in-process, counts requests per route, faults of several kinds acting
 * on one request, and determinism (the same faults and seed give the same results).
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { FaultSpec, SimCluster, Simulator } from '../../src/sim/index.ts';
import { raw, startTestSim, waitTask } from '../helpers/sim.ts';
import { createVm, data, NODE, power, simApi, startFaultSim, TOKEN_AUTH } from './faults-fixtures.ts';

describe('fault injection', () => {
  let sim: Simulator;
  let c: SimCluster;
  let url: string;
  before(async () => {
    ({ sim, c, url } = await startFaultSim());
  });
  after(() => sim.close());
  beforeEach(() => {
    c.clearFaults();
    c.resetCounters();
  });

  describe('control API over HTTP', () => {
    it('is root@pam only: ticket or token of root@pam; other users get 403, no credentials 401', async () => {
      c.addUser('alice@pve', 'alice-pw');
      c.setAcl('/', 'alice@pve', 'Administrator');
      const aliceSecret = c.addToken('alice@pve', 'ops', { privsep: false });
      const spec: FaultSpec = { kind: 'request', path: '/version', status: 500, message: 'x' };

      const anon = await simApi(c, 'POST', '/_sim/faults', spec, {});
      assert.equal(anon.status, 401);
      const alice = await simApi(c, 'POST', '/_sim/faults', spec, {
        Authorization: `PVEAPIToken=alice@pve!ops=${aliceSecret}`,
      });
      assert.equal(alice.status, 403);
      assert.equal(alice.reason, 'Permission check failed (/_sim, root@pam only)');
      const login = await raw(url, 'POST', '/access/ticket', {
        form: { username: 'alice@pve', password: 'alice-pw' },
        headers: { Authorization: null },
      });
      const aliceTicket = data<{ ticket: string }>(login).ticket;
      assert.equal(
        (await simApi(c, 'GET', '/_sim/counters', undefined, { Cookie: `PVEAuthCookie=${aliceTicket}` })).status,
        403,
      );
      assert.deepEqual(c.faults.list(), []);

      const rootLogin = await raw(url, 'POST', '/access/ticket', {
        form: { username: 'root@pam', password: sim.credentials.rootPassword },
        headers: { Authorization: null },
      });
      const rootTicket = data<{ ticket: string }>(rootLogin).ticket;
      const added = await simApi(c, 'POST', '/_sim/faults', spec, { Cookie: `PVEAuthCookie=${rootTicket}` });
      assert.equal(added.status, 200);
      assert.equal(typeof (added.json.data as { id: number }).id, 'number');
      assert.equal((await raw(url, 'GET', '/version')).status, 500);
    });

    it('adds, lists and deletes faults; rejects bad specs with 400', async () => {
      const a = (await simApi(c, 'POST', '/_sim/faults', { kind: 'node-offline', node: NODE })).json.data as {
        id: number;
      };
      const b = (
        await simApi(c, 'POST', '/_sim/faults', { kind: 'request', path: '/cluster/nextid', status: 500, message: 'm' })
      ).json.data as { id: number };
      assert.equal((await raw(url, 'GET', `/nodes/${NODE}/qemu`)).status, 595);
      const list = (await simApi(c, 'GET', '/_sim/faults')).json.data as Array<{ id: number; spec: FaultSpec }>;
      assert.deepEqual(
        list.map((f) => [f.id, f.spec.kind]),
        [
          [a.id, 'node-offline'],
          [b.id, 'request'],
        ],
      );
      assert.equal((await simApi(c, 'DELETE', `/_sim/faults/${a.id}`)).status, 200);
      assert.equal((await simApi(c, 'DELETE', `/_sim/faults/${a.id}`)).status, 404);
      assert.equal((await raw(url, 'GET', `/nodes/${NODE}/qemu`)).status, 200);
      assert.equal((await simApi(c, 'DELETE', '/_sim/faults')).status, 200);
      assert.deepEqual((await simApi(c, 'GET', '/_sim/faults')).json.data, []);
      assert.equal((await raw(url, 'GET', '/cluster/nextid')).status, 200);

      for (const bad of [
        { kind: 'nope' },
        { kind: 'request', path: '/version', status: 200, message: 'x' },
        { kind: 'lock', vmid: 99999 },
        { kind: 'node-offline', node: 'no-such-node' },
        { kind: 'storage-full', node: NODE, storage: 'nope' },
        { kind: 'unavailable', ms: 0 },
      ]) {
        const r = await simApi(c, 'POST', '/_sim/faults', bad);
        assert.equal(r.status, 400, JSON.stringify(bad));
        assert.equal(r.reason, 'Parameter verification failed.');
        assert.equal(typeof r.json.errors?.fault, 'string');
      }
      const notJson = await fetch(`${url}/_sim/faults`, {
        method: 'POST',
        headers: { Authorization: TOKEN_AUTH },
        body: '{',
      });
      assert.equal(notJson.status, 400);
    });

    it('takes every fault kind over HTTP, with the same effect as in-process', async () => {
      const add = async (spec: FaultSpec): Promise<number> => {
        const r = await simApi(c, 'POST', '/_sim/faults', spec);
        assert.equal(r.status, 200, JSON.stringify(r.json));
        return (r.json.data as { id: number }).id;
      };
      const del = async (id: number) => assert.equal((await simApi(c, 'DELETE', `/_sim/faults/${id}`)).status, 200);

      let id = await add({ kind: 'request', path: '/cluster/nextid', status: 502, message: 'over http' });
      assert.equal((await raw(url, 'GET', '/cluster/nextid')).reason, 'over http');
      await del(id);

      id = await add({ kind: 'task', type: 'qmstart', id: '150', action: 'fail', at: 'start', message: 'http fail' });
      assert.equal((await waitTask(url, NODE, await power(url, 150, 'start'))).exitstatus, 'http fail');
      await del(id);

      id = await add({ kind: 'latency', ms: 1000, path: '/version', count: 1 });
      assert.equal((await raw(url, 'GET', '/version')).status, 200);
      assert.deepEqual(
        ((await simApi(c, 'GET', '/_sim/faults')).json.data as Array<{ fired: number }>).map((f) => f.fired),
        [1],
      );
      await del(id);

      id = await add({ kind: 'lock', vmid: 151, lock: 'snapshot', flock: false });
      assert.equal(
        (await raw(url, 'PUT', `/nodes/${NODE}/qemu/151/config`, { form: { description: 'h' } })).reason,
        'VM is locked (snapshot)',
      );
      await del(id);

      id = await add({ kind: 'node-offline', node: NODE });
      assert.equal((await raw(url, 'GET', `/nodes/${NODE}/qemu`)).status, 595);
      await del(id);

      id = await add({ kind: 'storage-full', node: NODE, storage: 'local-lvm' });
      assert.match(
        (await waitTask(url, NODE, await createVm(url, 178))).exitstatus ?? '',
        /^unable to create VM 178 - /,
      );
      await del(id);

      id = await add({ kind: 'unavailable', ms: 3_600_000, mode: '503' });
      assert.equal((await raw(url, 'GET', '/version')).status, 503);
      await del(id);
      assert.equal((await raw(url, 'GET', '/version')).status, 200);
    });

    it('counts requests per "METHOD /template"; DELETE resets the counters', async () => {
      await raw(url, 'GET', `/nodes/${NODE}/qemu/150/config`);
      await raw(url, 'GET', `/nodes/${NODE}/qemu/151/config`);
      await raw(url, 'GET', '/version');
      await raw(url, 'POST', `/nodes/${NODE}/qemu/150/importdisk`);
      const counters = (await simApi(c, 'GET', '/_sim/counters')).json.data as Record<string, number>;
      assert.deepEqual(counters, {
        'GET /nodes/{node}/qemu/{vmid}/config': 2,
        'GET /version': 1,
        // A method that does not exist is counted by its path.
        [`POST /nodes/${NODE}/qemu/150/importdisk`]: 1,
      });
      assert.equal((await simApi(c, 'DELETE', '/_sim/counters')).status, 200);
      assert.deepEqual((await simApi(c, 'GET', '/_sim/counters')).json.data, {});
      assert.deepEqual(c.counters(), {});
    });
  });

  describe('composition', () => {
    it('latency, a request fault and a lock apply together to one request', async () => {
      c.addFault({ kind: 'latency', ms: 5000, path: '/nodes/{node}/qemu/{vmid}/config', count: 1 });
      c.addFault({
        kind: 'request',
        method: 'PUT',
        path: '/nodes/{node}/qemu/{vmid}/config',
        status: 500,
        message: 'first PUT fails',
      });
      const lock = c.addFault({ kind: 'lock', vmid: 150, lock: 'migrate', flock: false });
      const first = await raw(url, 'PUT', `/nodes/${NODE}/qemu/150/config`, { form: { description: 'c' } });
      assert.equal(first.reason, 'first PUT fails');
      const second = await raw(url, 'PUT', `/nodes/${NODE}/qemu/150/config`, { form: { description: 'c' } });
      assert.equal(second.reason, 'VM is locked (migrate)');
      c.removeFault(lock);
      assert.equal(
        (await raw(url, 'PUT', `/nodes/${NODE}/qemu/150/config`, { form: { description: 'c' } })).status,
        200,
      );
      assert.equal(c.counters()['PUT /nodes/{node}/qemu/{vmid}/config'], 3);
      assert.deepEqual(
        c.faults.list().map((f) => [f.spec.kind, f.seen, f.fired]),
        [
          ['latency', 3, 1],
          ['request', 3, 1],
        ],
      );
    });
  });
});

describe('fault determinism', () => {
  /** A fixed sequence of requests under faults; returns everything a client can observe. */
  async function scenario(): Promise<unknown[]> {
    const sim = await startTestSim({ seed: 7 });
    try {
      const c = sim.cluster('site-1');
      const url = c.url;
      const out: unknown[] = [];
      const mask = (upid: string) => upid.replace(/^(UPID:[^:]+:[0-9A-F]+:[0-9A-F]+:)[0-9A-F]+:/, '$1*:');
      c.addFault({ kind: 'request', method: 'POST', path: '/nodes/{node}/qemu', nth: 2, status: 500, message: 'no' });
      c.addFault({ kind: 'task', type: 'qmcreate', nth: 3, action: 'fail', message: 'third create fails' });
      c.addFault({ kind: 'task', type: 'qmstart', nth: 2, action: 'fail', at: 'start', message: 'second start' });
      for (const vmid of [200, 201, 202, 203, 204]) {
        const r = await raw(url, 'POST', `/nodes/${NODE}/qemu`, {
          form: { vmid: String(vmid), scsi0: 'local-lvm:1', net0: 'virtio,bridge=vmbr0', agent: '1', start: '1' },
        });
        if (r.status !== 200) {
          out.push([vmid, r.status, r.reason]);
          continue;
        }
        const upid = data<string>(r);
        out.push([vmid, mask(upid), (await waitTask(url, NODE, upid)).exitstatus]);
      }
      for (const vmid of [200, 201, 202, 203, 204]) {
        const cfg = await raw(url, 'GET', `/nodes/${NODE}/qemu/${vmid}/config`);
        const d = cfg.status === 200 ? data<Record<string, unknown>>(cfg) : undefined;
        out.push([vmid, cfg.status, d?.net0, d?.smbios1, d?.digest === undefined]);
      }
      for (const t of c.state.tasks.values()) await t.done;
      const tasks = data<Array<{ upid: string; type: string; status?: string }>>(
        await raw(url, 'GET', `/nodes/${NODE}/tasks?limit=100&source=all`),
      );
      out.push(tasks.map((t) => `${t.type} ${mask(t.upid)} ${t.status}`).sort());
      // How often a client polls a task depends on timing; everything else must not.
      const { 'GET /nodes/{node}/tasks/{upid}/status': polls, ...counters } = c.counters();
      assert.ok(polls !== undefined && polls >= 4);
      out.push(counters);
      out.push(c.faults.list().map((f) => [f.seen, f.fired]));
      return out;
    } finally {
      await sim.close();
    }
  }

  it('the same sequence under the same faults and seed gives the same results', async () => {
    const a = await scenario();
    const b = await scenario();
    assert.deepEqual(a, b);
    // The faults did fire: one synchronous failure, one failed create, one failed start.
    const flat = JSON.stringify(a);
    assert.match(flat, /"no"/);
    assert.match(flat, /third create fails/);
    assert.match(flat, /second start/);
  });
});
