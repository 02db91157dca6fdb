/**
 * Fault injection, every kind observed from a client: in-process (`SimCluster.addFault`) and over
 * the `/_sim/` control API (root@pam only). Deterministic: faults fire on counted requests and
 * tasks, waits are ordered against other tasks, never against wall-clock bounds.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { FaultSpec, SimCluster, Simulator } from '../../src/sim/index.ts';
import { outOfSpaceMessage } from '../../src/sim/storage.ts';
import { type RawResponse, raw, startTestSim, TOKEN, waitTask } from '../helpers/sim.ts';

const NODE = 'ml110-01';
const TOKEN_AUTH = `PVEAPIToken=${TOKEN}`;

interface SimApiResponse {
  status: number;
  reason: string;
  /** `{ data: null }` when the body is empty (401). */
  json: { data: unknown; message?: string; errors?: Record<string, string> };
}

/** A call to the `/_sim/` control API (JSON in, JSON out). */
async function simApi(
  cluster: SimCluster,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = { Authorization: TOKEN_AUTH },
): Promise<SimApiResponse> {
  const res = await fetch(`${cluster.url}${path}`, {
    method,
    headers: { ...headers, ...(body !== undefined ? { 'Content-Type': 'application/json' } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  return { status: res.status, reason: res.statusText, json: text ? JSON.parse(text) : { data: null } };
}

function data<T>(r: RawResponse): T {
  return (r.json as { data: T }).data;
}

async function createVm(url: string, vmid: number, extra: Record<string, string> = {}, node = NODE): Promise<string> {
  const r = await raw(url, 'POST', `/nodes/${node}/qemu`, {
    form: {
      vmid: String(vmid),
      name: `f-${vmid}`,
      memory: '512',
      scsi0: 'local-lvm:1',
      net0: 'virtio,bridge=vmbr0',
      agent: '1',
      ...extra,
    },
  });
  assert.equal(r.status, 200, `${r.status} ${r.reason}`);
  return data<string>(r);
}

async function createVmOk(url: string, vmid: number): Promise<void> {
  assert.equal((await waitTask(url, NODE, await createVm(url, vmid))).exitstatus, 'OK');
}

async function taskStatus(url: string, upid: string, node = NODE): Promise<{ status: string; exitstatus?: string }> {
  return data(await raw(url, 'GET', `/nodes/${node}/tasks/${encodeURIComponent(upid)}/status`));
}

async function taskLog(url: string, upid: string, node = NODE): Promise<string[]> {
  const r = await raw(url, 'GET', `/nodes/${node}/tasks/${encodeURIComponent(upid)}/log?limit=500`);
  return data<Array<{ t: string }>>(r).map((l) => l.t);
}

async function power(url: string, vmid: number, action: 'start' | 'stop'): Promise<string> {
  const r = await raw(url, 'POST', `/nodes/${NODE}/qemu/${vmid}/status/${action}`);
  assert.equal(r.status, 200, `${r.status} ${r.reason}`);
  return data<string>(r);
}

describe('fault injection', () => {
  let sim: Simulator;
  let c: SimCluster;
  let url: string;
  before(async () => {
    sim = await startTestSim();
    c = sim.cluster('site-1');
    url = c.url;
    await createVmOk(url, 150);
    await createVmOk(url, 151);
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

  describe('task faults', () => {
    it('fail at start: the worker never runs; a failed create leaves no VM and no lock', async () => {
      c.addFault({ kind: 'task', type: 'qmstart', id: '150', action: 'fail', at: 'start', message: 'QEMU exited' });
      const upid = await power(url, 150, 'start');
      assert.equal((await waitTask(url, NODE, upid)).exitstatus, 'QEMU exited');
      assert.deepEqual(await taskLog(url, upid), ['TASK ERROR: QEMU exited']);
      assert.equal(
        data<{ status: string }>(await raw(url, 'GET', `/nodes/${NODE}/qemu/150/status/current`)).status,
        'stopped',
      );

      c.addFault({ kind: 'task', type: 'qmcreate', action: 'fail', at: 'start', message: 'injected create failure' });
      const create = await createVm(url, 170);
      assert.equal((await waitTask(url, NODE, create)).exitstatus, 'injected create failure');
      const gone = await raw(url, 'GET', `/nodes/${NODE}/qemu/170/config`);
      assert.equal(gone.status, 500);
      assert.equal(gone.reason, `Configuration file 'nodes/${NODE}/qemu-server/170.conf' does not exist`);
      assert.deepEqual(data(await raw(url, 'GET', `/nodes/${NODE}/storage/local-lvm/content?vmid=170`)), []);
      // The flock was released: the same VMID can be created right away (the fault fired once).
      assert.equal((await waitTask(url, NODE, await createVm(url, 170))).exitstatus, 'OK');

      // A clone that fails at start leaves no target VM and releases the template's flock.
      c.addFault({ kind: 'task', type: 'qmclone', id: '9000', action: 'fail', at: 'start', message: 'no clone' });
      const clone = async () =>
        data<string>(await raw(url, 'POST', `/nodes/${NODE}/qemu/9000/clone`, { form: { newid: '177' } }));
      assert.equal((await waitTask(url, NODE, await clone())).exitstatus, 'no clone');
      assert.equal((await raw(url, 'GET', `/nodes/${NODE}/qemu/177/config`)).status, 500);
      assert.equal((await waitTask(url, NODE, await clone())).exitstatus, 'OK');
    });

    it('fail at end: the work is done, then the task fails (a create leaves its VM behind)', async () => {
      c.addFault({ kind: 'task', type: 'qmcreate', id: '171', action: 'fail', message: 'injected late failure' });
      const upid = await createVm(url, 171);
      assert.equal((await waitTask(url, NODE, upid)).exitstatus, 'injected late failure');
      const log = await taskLog(url, upid);
      assert.ok(
        log.some((l) => l.includes('vm-171-disk-0')),
        log.join('\n'),
      );
      assert.equal(log.at(-1), 'TASK ERROR: injected late failure');
      // The partial create the engine has to adopt or clean up: the VM exists, unlocked.
      const cfg = data<Record<string, unknown>>(await raw(url, 'GET', `/nodes/${NODE}/qemu/171/config`));
      assert.equal(cfg.name, 'f-171');
      assert.equal(cfg.lock, undefined);
    });

    it('stall: held until the fault is removed (over HTTP), while other tasks go on', async () => {
      const id = c.addFault({ kind: 'task', type: 'qmstart', id: '150', action: 'stall' });
      const stalled = await power(url, 150, 'start');
      // A longer task started later finishes while the stalled start is still running.
      await createVmOk(url, 172);
      assert.equal((await taskStatus(url, stalled)).status, 'running');
      assert.equal((await simApi(c, 'DELETE', `/_sim/faults/${id}`)).status, 200);
      assert.equal((await waitTask(url, NODE, stalled)).exitstatus, 'OK');
      assert.equal(
        data<{ status: string }>(await raw(url, 'GET', `/nodes/${NODE}/qemu/150/status/current`)).status,
        'running',
      );
      assert.equal((await waitTask(url, NODE, await power(url, 150, 'stop'))).exitstatus, 'OK');
    });

    it('stall with durationMs releases by itself; a stall and a fail compose on one task', async () => {
      c.addFault({ kind: 'task', type: 'qmstart', id: '151', action: 'stall', durationMs: 1000 });
      assert.equal((await waitTask(url, NODE, await power(url, 151, 'start'))).exitstatus, 'OK');
      assert.equal((await waitTask(url, NODE, await power(url, 151, 'stop'))).exitstatus, 'OK');

      const stall = c.addFault({ kind: 'task', type: 'qmstart', id: '151', action: 'stall' });
      c.addFault({ kind: 'task', type: 'qmstart', id: '151', action: 'fail', message: 'start failed after a hang' });
      const upid = await power(url, 151, 'start');
      await createVmOk(url, 173);
      assert.equal((await taskStatus(url, upid)).status, 'running');
      assert.ok(c.removeFault(stall));
      assert.equal((await waitTask(url, NODE, upid)).exitstatus, 'start failed after a hang');
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

  describe('lock faults', () => {
    it('a config lock shows everywhere and blocks writes and tasks with `VM is locked (x)`', async () => {
      const id = c.addFault({ kind: 'lock', vmid: 150, lock: 'backup', flock: false });
      const cfg = data<Record<string, unknown>>(await raw(url, 'GET', `/nodes/${NODE}/qemu/150/config`));
      assert.equal(cfg.lock, 'backup');
      assert.equal(
        data<{ lock?: string }>(await raw(url, 'GET', `/nodes/${NODE}/qemu/150/status/current`)).lock,
        'backup',
      );
      const res = data<Array<{ vmid: number; lock?: string }>>(await raw(url, 'GET', '/cluster/resources?type=vm'));
      assert.equal(res.find((r) => r.vmid === 150)?.lock, 'backup');
      for (const method of ['PUT', 'POST']) {
        const r = await raw(url, method, `/nodes/${NODE}/qemu/150/config`, { form: { description: 'x' } });
        assert.equal(r.status, 500);
        assert.equal(r.reason, 'VM is locked (backup)');
      }
      assert.equal((await waitTask(url, NODE, await power(url, 150, 'start'))).exitstatus, 'VM is locked (backup)');
      assert.equal((await simApi(c, 'DELETE', `/_sim/faults/${id}`)).status, 200);
      assert.equal(
        data<Record<string, unknown>>(await raw(url, 'GET', `/nodes/${NODE}/qemu/150/config`)).lock,
        undefined,
      );
      assert.equal(
        (await raw(url, 'PUT', `/nodes/${NODE}/qemu/150/config`, { form: { description: 'x' } })).status,
        200,
      );
    });

    it("a held flock makes a config PUT time out with `can't lock file ... - got timeout`", async () => {
      const id = c.addFault({ kind: 'lock', vmid: 151 });
      assert.equal(
        data<Record<string, unknown>>(await raw(url, 'GET', `/nodes/${NODE}/qemu/151/config`)).lock,
        undefined,
      );
      const r = await raw(url, 'PUT', `/nodes/${NODE}/qemu/151/config`, { form: { description: 'y' } });
      assert.equal(r.status, 500);
      assert.equal(r.reason, "can't lock file '/var/lock/qemu-server/lock-151.conf' - got timeout");
      const start = await power(url, 151, 'start');
      assert.equal(
        (await waitTask(url, NODE, start)).exitstatus,
        "can't lock file '/var/lock/qemu-server/lock-151.conf' - got timeout",
      );
      c.removeFault(id);
      assert.equal(
        (await raw(url, 'PUT', `/nodes/${NODE}/qemu/151/config`, { form: { description: 'y' } })).status,
        200,
      );
    });

    it('a lock fault on a VM whose flock a worker holds takes it when the worker lets go', async () => {
      const upid = await createVm(url, 174, { scsi0: 'local-lvm:0,import-from=local:import/ubuntu-22.04-cloud.qcow2' });
      const id = c.addFault({ kind: 'lock', vmid: 174 });
      assert.equal((await waitTask(url, NODE, upid)).exitstatus, 'OK');
      const r = await raw(url, 'PUT', `/nodes/${NODE}/qemu/174/config`, { form: { description: 'z' } });
      assert.equal(r.reason, "can't lock file '/var/lock/qemu-server/lock-174.conf' - got timeout");
      c.removeFault(id);
      assert.equal(
        (await raw(url, 'PUT', `/nodes/${NODE}/qemu/174/config`, { form: { description: 'z' } })).status,
        200,
      );
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

  describe('storage full', () => {
    it('a create fails in its task with the storage out-of-space message and leaves no VM', async () => {
      const id = c.addFault({ kind: 'storage-full', node: NODE, storage: 'local-lvm' });
      const status = data<{ avail: number; total: number }>(
        await raw(url, 'GET', `/nodes/${NODE}/storage/local-lvm/status`),
      );
      assert.equal(status.avail, 0);
      const upid = await createVm(url, 175, { scsi0: 'local-lvm:8' });
      const expected = outOfSpaceMessage(c.state.storage(NODE, 'local-lvm')!, 'vm-175-disk-0', 8 * 1024 ** 3);
      assert.match(expected, /insufficient free space/);
      assert.equal((await waitTask(url, NODE, upid)).exitstatus, `unable to create VM 175 - ${expected}`);
      assert.equal((await raw(url, 'GET', `/nodes/${NODE}/qemu/175/config`)).status, 500);
      assert.deepEqual(data(await raw(url, 'GET', `/nodes/${NODE}/storage/local-lvm/content?vmid=175`)), []);
      assert.equal(data(await raw(url, 'GET', '/cluster/nextid?vmid=175')), '175');
      c.removeFault(id);
      assert.equal((await waitTask(url, NODE, await createVm(url, 175, { scsi0: 'local-lvm:8' }))).exitstatus, 'OK');
    });

    it('an RBD pool says so its own way (site-2 ceph-fs)', async () => {
      const s2 = sim.cluster('site-2');
      const id = s2.addFault({ kind: 'storage-full', node: 'r630-01', storage: 'ceph-fs' });
      try {
        const upid = await createVm(s2.url, 176, { scsi0: 'ceph-fs:16' }, 'r630-01');
        const st = await waitTask(s2.url, 'r630-01', upid);
        assert.match(
          st.exitstatus ?? '',
          /^unable to create VM 176 - rbd create 'vm-176-disk-0' error: .*No space left on device/,
        );
        assert.equal((await raw(s2.url, 'GET', '/nodes/r630-01/qemu/176/config')).status, 500);
      } finally {
        s2.removeFault(id);
      }
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
