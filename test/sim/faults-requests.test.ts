/**
 * Fault injection on the API path, observed from a client (`SimCluster.addFault`): requests that
 * fail with a status and reason phrase, latency, a site that is unavailable (connections reset, or
 * 503) and a node that is offline (595). Deterministic: faults fire on counted requests, waits are
 * ordered against other requests, never against wall-clock bounds.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { SimCluster, Simulator } from '../../src/sim/index.ts';
import { type RawResponse, raw, waitTask } from '../helpers/sim.ts';
import { createVm, createVmOk, data, NODE, simApi, startFaultSim } from './faults-fixtures.ts';

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

  describe('request faults', () => {
    it('fail the Nth matching request for `count` requests, status and message as reason phrase', async () => {
      const id = c.addFault({
        kind: 'request',
        method: 'GET',
        path: '/nodes/{node}/qemu/{vmid}/config',
        nth: 2,
        count: 2,
        status: 503,
        message: 'injected: proxy loop detected\nsecond line',
      });
      const results: RawResponse[] = [];
      for (let i = 0; i < 4; i++) results.push(await raw(url, 'GET', `/nodes/${NODE}/qemu/150/config`));
      assert.deepEqual(
        results.map((r) => r.status),
        [200, 503, 503, 200],
      );
      const failed = results[1]!;
      assert.equal(failed.reason, 'injected: proxy loop detected');
      assert.equal(failed.headers.get('content-type'), 'application/json;charset=UTF-8');
      assert.equal(failed.headers.get('connection'), 'close');
      assert.deepEqual(failed.json, { data: null, message: 'injected: proxy loop detected\nsecond line\n' });
      // Other methods and paths are untouched.
      assert.equal((await raw(url, 'GET', `/nodes/${NODE}/qemu/150/status/current`)).status, 200);
      const listed = (await simApi(c, 'GET', '/_sim/faults')).json.data as Array<{
        id: number;
        seen: number;
        fired: number;
      }>;
      assert.deepEqual(
        listed.map(({ id, seen, fired }) => ({ id, seen, fired })),
        [{ id, seen: 4, fired: 2 }],
      );
    });

    it('match a parameter (name, or name and value), a concrete path and a regex path', async () => {
      c.addFault({
        kind: 'request',
        method: 'POST',
        path: `/nodes/${NODE}/qemu`,
        param: { name: 'vmid', value: '161' },
        status: 500,
        message: "unable to create VM 161 - can't lock file '/var/lock/qemu-server/lock-161.conf' - got timeout",
      });
      c.addFault({
        kind: 'request',
        path: '/nodes/{node}/qemu/{vmid}/config',
        method: 'PUT',
        param: { name: 'delete' },
        count: -1,
        status: 500,
        message: 'injected delete failure',
      });
      c.addFault({ kind: 'request', path: 're:^/cluster/next', status: 500, message: 'injected nextid failure' });

      // vmid 160 does not match; the first 161 fails synchronously, the retry passes (count 1).
      await createVmOk(url, 160);
      const first = await raw(url, 'POST', `/nodes/${NODE}/qemu`, {
        form: { vmid: '161', scsi0: 'local-lvm:1' },
      });
      assert.equal(first.status, 500);
      assert.equal(
        first.reason,
        "unable to create VM 161 - can't lock file '/var/lock/qemu-server/lock-161.conf' - got timeout",
      );
      assert.equal((await raw(url, 'GET', '/cluster/resources?type=vm')).status, 200);
      assert.equal((await waitTask(url, NODE, await createVm(url, 161))).exitstatus, 'OK');

      // Only PUTs that carry `delete` fail, every time (count -1).
      for (let i = 0; i < 2; i++) {
        const r = await raw(url, 'PUT', `/nodes/${NODE}/qemu/160/config`, { form: { delete: 'agent' } });
        assert.equal(r.status, 500);
        assert.equal(r.reason, 'injected delete failure');
      }
      assert.equal(
        (await raw(url, 'PUT', `/nodes/${NODE}/qemu/160/config`, { form: { description: 'x' } })).status,
        200,
      );

      const nextid = await raw(url, 'GET', '/cluster/nextid');
      assert.equal(nextid.status, 500);
      assert.equal(nextid.reason, 'injected nextid failure');
      assert.equal((await raw(url, 'GET', '/cluster/nextid')).status, 200);
    });
  });

  describe('latency', () => {
    it('delays matching requests (observed by counters and ordering), `count` of them', async () => {
      c.addFault({ kind: 'latency', ms: 200_000, method: 'GET', path: '/version', count: 1 });
      let slowDone = false;
      const slow = raw(url, 'GET', '/version').then((r) => {
        slowDone = true;
        return r;
      });
      // The request has arrived (counted) and is held; other requests pass it.
      while (c.counters()['GET /version'] !== 1) await raw(url, 'GET', '/nodes');
      assert.equal((await raw(url, 'GET', `/nodes/${NODE}/qemu/150/config`)).status, 200);
      assert.equal(slowDone, false);
      assert.equal((await slow).status, 200);
      // count: 1: the next matching request is seen but not delayed.
      assert.equal((await raw(url, 'GET', '/version')).status, 200);
      assert.deepEqual(
        c.faults.list().map((f) => [f.seen, f.fired]),
        [[2, 1]],
      );
    });

    it('has a lower bound of the scaled duration', async () => {
      c.addFault({ kind: 'latency', ms: 30_000, path: '/version' });
      const t0 = performance.now();
      assert.equal((await raw(url, 'GET', '/version')).status, 200);
      // 30 s simulated at speed 1000 = 30 ms real; a loose lower bound only.
      assert.ok(performance.now() - t0 >= 25);
    });
  });

  describe('node offline', () => {
    it("answers 595 on the node's paths and shows the node offline", async () => {
      const id = c.addFault({ kind: 'node-offline', node: NODE });
      for (const path of [`/nodes/${NODE}/qemu`, `/nodes/${NODE}/qemu/150/config`, `/nodes/${NODE}/status`]) {
        const r = await raw(url, 'GET', path);
        assert.equal(r.status, 595, path);
      }
      const nodes = data<Array<{ node: string; status: string; maxcpu?: number }>>(await raw(url, 'GET', '/nodes'));
      assert.deepEqual(
        nodes.map((n) => [n.node, n.status, n.maxcpu]),
        [[NODE, 'offline', undefined]],
      );
      const res = data<Array<{ id: string; status: string }>>(await raw(url, 'GET', '/cluster/resources?type=node'));
      assert.equal(res.find((n) => n.id === `node/${NODE}`)?.status, 'offline');
      assert.equal((await raw(url, 'GET', '/version')).status, 200);
      c.removeFault(id);
      assert.equal((await raw(url, 'GET', `/nodes/${NODE}/qemu`)).status, 200);
      assert.equal(data<Array<{ status: string }>>(await raw(url, 'GET', '/nodes'))[0]?.status, 'online');
    });
  });

  describe('unavailable', () => {
    it('resets connections (default) until removed; /_sim stays reachable', async () => {
      const id = c.addFault({ kind: 'unavailable', ms: 3_600_000 });
      await assert.rejects(raw(url, 'GET', '/version'), (e: Error) => {
        assert.equal(e.name, 'TypeError');
        return true;
      });
      assert.equal(((await simApi(c, 'GET', '/_sim/counters')).json.data as Record<string, number>).unavailable, 1);
      assert.equal((await simApi(c, 'DELETE', `/_sim/faults/${id}`)).status, 200);
      assert.equal((await raw(url, 'GET', '/version')).status, 200);
    });

    it("mode '503' answers 503 Service Unavailable, and ends after `ms` of simulated time", async () => {
      c.addFault({ kind: 'unavailable', ms: 3_600_000, mode: '503' });
      const r = await raw(url, 'GET', '/version');
      assert.equal(r.status, 503);
      assert.equal(r.reason, 'Service Unavailable');
      // One simulated hour at speed 1000 is 3.6 s: move the simulated clock past it instead of waiting.
      const adv = await simApi(c, 'POST', '/_sim/clock', { advanceMs: 3600 });
      assert.equal(adv.status, 200);
      assert.equal((await raw(url, 'GET', '/version')).status, 200);
    });
  });
});
