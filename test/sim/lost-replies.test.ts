/**
 * Requests whose outcome the client cannot know: `reply-lost` (applied in full, then the
 * connection is reset before any byte of the answer) and `applied-late` (never answered; processed
 * after a delay, after the client gave up). Both in-process and through `/_sim/faults`.
 *
 * Deterministic: "the request has arrived" is read from the request counters, "it was applied"
 * from the simulator's state, and an applied-late request is released by removing its fault
 * (its delay is far beyond the test) or by a short delay the client waits out.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { SimCluster, Simulator } from '../../src/sim/index.ts';
import { data, finish, NODE } from '../helpers/fidelity.ts';
import { raw, startTestSim, TOKEN } from '../helpers/sim.ts';

const AUTH = { Authorization: `PVEAPIToken=${TOKEN}` };

/** The error a request ends with (fetch wraps the socket error in `cause`). */
async function failure(p: Promise<unknown>): Promise<{ message: string; code?: string }> {
  try {
    await p;
  } catch (e) {
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    return { message: String((e as Error).message), ...(cause?.code ? { code: cause.code } : {}) };
  }
  throw new Error('the request was answered');
}

async function simApi(c: SimCluster, method: string, path: string, body?: unknown) {
  const res = await fetch(`${c.url}${path}`, {
    method,
    headers: AUTH,
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return { status: res.status, json: (await res.json()) as { data: unknown; errors?: Record<string, string> } };
}

async function until(what: string, cond: () => boolean | Promise<boolean>): Promise<void> {
  for (let i = 0; i < 5000; i++) {
    if (await cond()) return;
    await new Promise((r) => setTimeout(r, 1));
  }
  throw new Error(`timed out waiting for ${what}`);
}

function createForm(vmid: number): Record<string, string> {
  return { vmid: String(vmid), name: `lost-${vmid}`, scsi0: 'local-lvm:1', net0: 'virtio,bridge=vmbr0' };
}

describe('lost replies', () => {
  let sim: Simulator;
  let c: SimCluster;
  let url: string;
  before(async () => {
    sim = await startTestSim();
    c = sim.cluster('site-1');
    url = c.url;
  });
  after(() => sim.close());
  beforeEach(() => {
    c.clearFaults();
    c.resetCounters();
  });

  describe('reply-lost', () => {
    it('a create is applied (config, worker task) but the client sees ECONNRESET', async () => {
      c.addFault({
        kind: 'reply-lost',
        method: 'POST',
        path: '/nodes/{node}/qemu',
        param: { name: 'vmid', value: '600' },
      });
      const err = await failure(raw(url, 'POST', `/nodes/${NODE}/qemu`, { form: createForm(600) }));
      assert.equal(err.code, 'ECONNRESET', err.message);
      // Applied: the VM exists and its qmcreate task ran; the client has to look for it.
      const tasks = data<Array<{ upid: string; type: string }>>(
        await raw(url, 'GET', `/nodes/${NODE}/tasks?source=all&vmid=600&typefilter=qmcreate`),
      );
      assert.equal(tasks.length, 1);
      assert.equal(await finish(url, tasks[0]!.upid), 'OK');
      assert.equal(data<{ name: string }>(await raw(url, 'GET', `/nodes/${NODE}/qemu/600/config`)).name, 'lost-600');
      // count 1 (default): the next request is answered.
      assert.equal((await raw(url, 'GET', '/version')).status, 200);
      assert.deepEqual(
        c.faults.list().map((f) => [f.seen, f.fired]),
        [[1, 1]],
      );
    });

    it('over /_sim/faults: the nth matching request loses its answer, error answers too', async () => {
      const add = await simApi(c, 'POST', '/_sim/faults', {
        kind: 'reply-lost',
        method: 'GET',
        path: '/nodes/{node}/qemu/{vmid}/config',
        nth: 2,
        count: 2,
      });
      assert.equal(add.status, 200);
      assert.equal((await raw(url, 'GET', `/nodes/${NODE}/qemu/9000/config`)).status, 200);
      assert.equal((await failure(raw(url, 'GET', `/nodes/${NODE}/qemu/9000/config`))).code, 'ECONNRESET');
      // A request that fails (500, no such VM) loses its answer the same way.
      assert.equal((await failure(raw(url, 'GET', `/nodes/${NODE}/qemu/4242/config`))).code, 'ECONNRESET');
      assert.equal((await raw(url, 'GET', `/nodes/${NODE}/qemu/9000/config`)).status, 200);
      const bad = await simApi(c, 'POST', '/_sim/faults', { kind: 'reply-lost', method: 'GET' });
      assert.equal(bad.status, 400);
      assert.deepEqual(bad.json.errors, { fault: 'reply-lost fault needs a path' });
    });
  });

  describe('applied-late', () => {
    it('held without an answer; applied after the client gave up, when released', async () => {
      const id = c.addFault({
        kind: 'applied-late',
        method: 'POST',
        path: '/nodes/{node}/qemu',
        delayMs: 24 * 3600 * 1000,
      });
      const giveUp = new AbortController();
      const pending = fetch(`${url}/api2/json/nodes/${NODE}/qemu`, {
        method: 'POST',
        headers: { ...AUTH, 'Content-Type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams(createForm(610)).toString(),
        signal: giveUp.signal,
      });
      await until('the request to arrive', () => c.counters()['POST /nodes/{node}/qemu'] === 1);
      // Other requests are served meanwhile; the held one is not applied yet.
      assert.equal((await raw(url, 'GET', `/nodes/${NODE}/qemu/610/config`)).status, 500);
      giveUp.abort();
      assert.match((await failure(pending)).message, /abort/i);
      assert.equal(c.state.vms.has(610), false, 'not applied while held');
      // Released (the delay would end the same way): the handler runs with nobody listening.
      assert.ok(c.removeFault(id));
      await until('the late create', () => c.state.vms.has(610));
      const tasks = data<Array<{ upid: string }>>(await raw(url, 'GET', `/nodes/${NODE}/tasks?source=all&vmid=610`));
      assert.equal(tasks.length, 1);
      assert.equal(await finish(url, tasks[0]!.upid), 'OK');
    });

    it('after delayMs the connection closes unanswered, and the request was applied', async () => {
      const add = await simApi(c, 'POST', '/_sim/faults', {
        kind: 'applied-late',
        method: 'POST',
        path: '/nodes/{node}/qemu/{vmid}/status/start',
        delayMs: 2000,
      });
      assert.equal(add.status, 200);
      const err = await failure(raw(url, 'POST', `/nodes/${NODE}/qemu/600/status/start`));
      assert.equal(err.code, 'ECONNRESET', err.message);
      const tasks = data<Array<{ upid: string }>>(
        await raw(url, 'GET', `/nodes/${NODE}/tasks?source=all&vmid=600&typefilter=qmstart`),
      );
      assert.equal(tasks.length, 1);
      assert.equal(await finish(url, tasks[0]!.upid), 'OK');
      const bad = await simApi(c, 'POST', '/_sim/faults', { kind: 'applied-late', path: '/version' });
      assert.deepEqual(bad.json.errors, { fault: 'applied-late fault needs delayMs >= 0' });
    });

    it('a simulator that closes drops held requests instead of running them', async () => {
      const other = await startTestSim();
      const oc = other.cluster('site-1');
      oc.addFault({ kind: 'applied-late', path: '/nodes/{node}/qemu', delayMs: 3600_000 });
      const pending = raw(oc.url, 'POST', `/nodes/${NODE}/qemu`, { form: createForm(620) });
      await until('the request to arrive', () => oc.counters()['POST /nodes/{node}/qemu'] === 1);
      await other.close();
      await failure(pending);
      assert.equal(oc.state.vms.has(620), false);
    });
  });
});
