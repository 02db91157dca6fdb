/**
 * `GET /nodes/{node}/tasks` as pve-manager PVE/API2/Tasks.pm lists tasks (src/sim/routes/tasks.ts
 * cites the lines): every entry has `user`; running tasks (from the active file) are `RUNNING`,
 * `saved: "0"`, with the UPID's unsplit `user@realm!token`; archived tasks have `user` and
 * `tokenid` split; the filters (`vmid`, `source`, `typefilter`, case-insensitive `userfilter`,
 * `errors`, `statusfilter`), `total`, the order (running first), who sees what; `/cluster/tasks`.
 *
 * Deterministic: stall faults keep tasks running; a `die` fault gives an `unexpected status`.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { AuthInfo } from '../../src/sim/auth.ts';
import type { SimCluster, Simulator } from '../../src/sim/index.ts';
import { MAX_TASKS } from '../../src/sim/tasks.ts';
import { createVmAndWait, data, finish, login, NODE, ticketHeaders } from '../helpers/fidelity.ts';
import { type RawResponse, raw, startTestSim } from '../helpers/sim.ts';

type Entry = Record<string, unknown> & { upid: string; user: string; status?: string };

async function list(url: string, query: string, headers?: Record<string, string | null>): Promise<RawResponse> {
  const r = await raw(url, 'GET', `/nodes/${NODE}/tasks${query}`, headers ? { headers } : {});
  assert.equal(r.status, 200, `${r.status} ${r.reason}`);
  return r;
}

async function entries(url: string, query: string, headers?: Record<string, string | null>): Promise<Entry[]> {
  return data<Entry[]>(await list(url, query, headers));
}

async function start(url: string, vmid: number, headers?: Record<string, string | null>): Promise<string> {
  const r = await raw(url, 'POST', `/nodes/${NODE}/qemu/${vmid}/status/start`, headers ? { headers } : {});
  assert.equal(r.status, 200, `${r.status} ${r.reason}`);
  return data<string>(r);
}

const UPID_FIELDS = ['id', 'node', 'pid', 'pstart', 'starttime', 'type', 'upid', 'user'];

describe('task history: GET /nodes/{node}/tasks', () => {
  let sim: Simulator;
  let c: SimCluster;
  let url: string;
  before(async () => {
    sim = await startTestSim({ profile: '8.4' });
    c = sim.cluster('site-1');
    url = c.url;
    await createVmAndWait(url, { vmid: '800' });
    await createVmAndWait(url, { vmid: '801' });
  });
  after(() => sim.close());

  it('running: RUNNING, saved "0", the token unsplit in `user`; finished: user and tokenid split', async () => {
    const stall = c.addFault({ kind: 'task', type: 'qmstart', id: '800', action: 'stall' });
    const upid = await start(url, 800);
    const active = await entries(url, '?source=active&vmid=800');
    assert.equal(active.length, 1);
    assert.deepEqual(Object.keys(active[0]!).sort(), [...UPID_FIELDS, 'saved', 'status'].sort());
    assert.equal(active[0]!.upid, upid);
    assert.equal(active[0]!.status, 'RUNNING');
    assert.equal(active[0]!.saved, '0');
    assert.equal(active[0]!.user, 'root@pam!test');
    // Not in the archive while it runs.
    assert.equal((await entries(url, '?vmid=800&typefilter=qmstart')).length, 0);
    c.removeFault(stall);
    assert.equal(await finish(url, upid), 'OK');
    const [archived] = await entries(url, '?vmid=800&typefilter=qmstart');
    assert.deepEqual(Object.keys(archived!).sort(), [...UPID_FIELDS, 'endtime', 'status', 'tokenid'].sort());
    assert.equal(archived!.user, 'root@pam');
    assert.equal(archived!.tokenid, 'test');
    assert.equal(archived!.status, 'OK');
    assert.equal(typeof archived!.endtime, 'number');
    assert.equal((await entries(url, '?source=active&vmid=800')).length, 0);
    // A ticket's task: user only.
    const t = await login(url);
    const byTicket = await start(url, 801, ticketHeaders(t));
    assert.equal(await finish(url, byTicket), 'OK');
    const [mine] = await entries(url, '?vmid=801&typefilter=qmstart');
    assert.equal(mine!.user, 'root@pam');
    assert.equal('tokenid' in mine!, false);
  });

  it('every entry lists user; filters, total, and running tasks first with source=all', async () => {
    const stall = c.addFault({ kind: 'task', type: 'qmstop', id: '800', action: 'stall' });
    const stop = await raw(url, 'POST', `/nodes/${NODE}/qemu/800/status/stop`);
    const running = data<string>(stop);
    const all = await list(url, '?source=all&limit=500');
    const rows = data<Entry[]>(all);
    assert.ok(rows.length >= 5);
    assert.ok(rows.every((r) => typeof r.user === 'string' && r.user.length > 0));
    assert.equal(rows[0]!.upid, running, 'running tasks come first');
    assert.equal((all.json as { total: number }).total, rows.length);
    // `total` counts every match, `limit` cuts the page.
    const page = await list(url, '?source=all&limit=2');
    assert.equal(data<Entry[]>(page).length, 2);
    assert.equal((page.json as { total: number }).total, rows.length);
    // userfilter: a case-insensitive substring of `user` (the split user for archived tasks).
    assert.equal((await entries(url, '?source=all&limit=500&userfilter=ROOT@PAM')).length, rows.length);
    assert.equal((await entries(url, '?userfilter=nobody')).length, 0);
    // typefilter + vmid.
    const creates = await entries(url, '?typefilter=qmcreate');
    assert.deepEqual(creates.map((e) => e.id).sort(), ['800', '801']);
    c.removeFault(stall);
    assert.equal(await finish(url, running), 'OK');
  });

  it('errors=1 keeps running, failed, warned and vanished tasks, drops OK; statusfilter', async () => {
    const fail = await start(url, 9000); // a template: the start fails
    assert.equal(await finish(url, fail), "you can't start a vm if it's a template");
    c.addFault({ kind: 'task', type: 'qmstop', id: '801', action: 'die' });
    const vanished = await raw(url, 'POST', `/nodes/${NODE}/qemu/801/status/stop`);
    assert.equal(await finish(url, data<string>(vanished)), 'unexpected status');
    const stall = c.addFault({ kind: 'task', type: 'qmstart', id: '801', action: 'stall' });
    const running = await start(url, 801);
    const errs = await entries(url, '?source=all&errors=1&limit=500');
    assert.ok(errs.every((e) => e.status !== 'OK'));
    const statuses = new Set(errs.map((e) => e.status));
    for (const s of ['RUNNING', "you can't start a vm if it's a template", 'unexpected status']) {
      assert.ok(statuses.has(s), `${s} in ${[...statuses].join(' | ')}`);
    }
    // unexpected status (and running) are type "unknown".
    const unknown = await entries(url, '?source=all&statusfilter=unknown&limit=500');
    assert.deepEqual(new Set(unknown.map((e) => e.status)), new Set(['RUNNING', 'unexpected status']));
    c.removeFault(stall);
    assert.equal(await finish(url, running), 'OK');
  });

  it("who sees what: a user sees its tokens' finished tasks, a running one only the token sees", async () => {
    c.addUser('alice@pve', 'alice-pw');
    const secret = c.addToken('alice@pve', 'tok', { privsep: false });
    c.setAcl('/vms/801', 'alice@pve', 'PVEVMUser');
    const token = { Authorization: `PVEAPIToken=alice@pve!tok=${secret}` };
    assert.equal(await finish(url, data<string>(await raw(url, 'POST', `/nodes/${NODE}/qemu/801/status/stop`))), 'OK');
    const stall = c.addFault({ kind: 'task', type: 'qmstart', id: '801', action: 'stall' });
    const upid = await start(url, 801, token);
    const alice = ticketHeaders(await login(url, 'alice-pw', 'alice@pve'));
    assert.deepEqual(
      (await entries(url, '?source=active', token)).map((e) => [e.upid, e.user]),
      [[upid, 'alice@pve!tok']],
    );
    assert.deepEqual(await entries(url, '?source=active', alice), []);
    c.removeFault(stall);
    assert.equal(await finish(url, upid), 'OK');
    const seen = await entries(url, '', alice);
    assert.deepEqual(
      seen.map((e) => [e.upid, e.user, e.tokenid]),
      [[upid, 'alice@pve', 'tok']],
    );
    // /cluster/tasks: without Sys.Audit on / only tasks whose split user is the caller.
    const cluster = data<Entry[]>(await raw(url, 'GET', '/cluster/tasks', { headers: alice }));
    assert.deepEqual(
      cluster.map((e) => e.upid),
      [upid],
    );
    assert.deepEqual(data<Entry[]>(await raw(url, 'GET', '/cluster/tasks', { headers: token })), []);
  });

  it('the archive lists tasks newest-ended first, and the ones rotated out (MAX_TASKS) are gone from it', async () => {
    const root: AuthInfo = { authid: 'root@pam', userid: 'root@pam', kind: 'ticket' };
    // Two tasks that end in the other order than they began: the archive follows the end.
    let endFirst = () => {};
    let endSecond = () => {};
    const first = c.tasks.start(NODE, 'rotatetest', 'a', root, () => new Promise<void>((r) => (endSecond = r)));
    const second = c.tasks.start(NODE, 'rotatetest', 'b', root, () => new Promise<void>((r) => (endFirst = r)));
    endFirst();
    await finish(url, second);
    endSecond();
    await finish(url, first);
    assert.deepEqual(
      (await entries(url, '?typefilter=rotatetest')).map((e) => e.upid),
      [first, second],
    );
    // Enough quick tasks to rotate those two (and every task before them) out of the archive.
    let last = '';
    for (let i = 0; i < MAX_TASKS; i++) last = c.tasks.start(NODE, 'filler', String(i), root, async () => {});
    await finish(url, last);
    assert.equal(c.state.tasks.has(first) || c.state.tasks.has(second), false);
    assert.deepEqual(await entries(url, '?typefilter=rotatetest'), []);
    const page = await list(url, '?typefilter=filler&limit=3');
    assert.equal(data<Entry[]>(page).length, 3);
    assert.equal(data<Entry[]>(page)[0]!.upid, last);
    const fillers = [...c.state.tasks.values()].filter((t) => t.type === 'filler').length;
    assert.equal((page.json as { total: number }).total, fillers);
  });
});
