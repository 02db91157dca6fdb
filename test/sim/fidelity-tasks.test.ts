/**
 * PVE API fidelity check 21 (../shared/research/pve-api-fidelity.md, section 7): task status
 * and log. A stalled task (fault injection) holds the "running" state under test.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Simulator } from '../../src/sim/index.ts';
import {
  ALL_PROFILES,
  assertError,
  createVmAndWait,
  data,
  finish,
  login,
  NODE,
  taskLog,
  taskStatus,
  ticketHeaders,
} from '../helpers/fidelity.ts';
import { raw, startTestSim } from '../helpers/sim.ts';

type LogLine = { n: number; t: string };
const UPID_RE = /^UPID:ml110-01:[0-9A-F]{8}:[0-9A-F]{8,9}:[0-9A-F]{8}:[^:\s]+:[^:\s]*:[^:\s]+:$/;

for (const profile of ALL_PROFILES) {
  describe(`fidelity #21 tasks, profile ${profile}`, () => {
    let sim: Simulator;
    let url: string;
    before(async () => {
      sim = await startTestSim({ profile });
      url = sim.cluster('site-1').url;
    });
    after(() => sim.close());

    it('#21 exitstatus only once stopped; an empty log answers "no content"', async () => {
      const c = sim.cluster('site-1');
      await createVmAndWait(url, { vmid: '300' });
      const stall = c.addFault({ kind: 'task', type: 'qmstart', id: '300', action: 'stall' });
      const r = await raw(url, 'POST', `/nodes/${NODE}/qemu/300/status/start`);
      const upid = data<string>(r);
      assert.match(upid, UPID_RE);
      const running = await taskStatus(url, upid);
      assert.equal(running.status, 'running');
      assert.equal('exitstatus' in running, false);
      assert.deepEqual(
        Object.keys(running).sort(),
        ['id', 'node', 'pid', 'pstart', 'starttime', 'status', 'tokenid', 'type', 'upid', 'user'].sort(),
      );
      assert.equal(running.upid, upid);
      assert.equal(running.type, 'qmstart');
      assert.equal(running.id, '300');
      assert.equal(typeof running.pid, 'number');
      const empty = await taskLog(url, upid);
      assert.deepEqual(empty.json, { data: [{ n: 1, t: 'no content' }], total: 1 });
      c.faults.remove(stall);
      assert.equal(await finish(url, upid), 'OK');
      const stopped = await taskStatus(url, upid);
      assert.equal(stopped.status, 'stopped');
      assert.equal(stopped.exitstatus, 'OK');
      const log = data<LogLine[]>(await taskLog(url, upid));
      assert.deepEqual(log.at(-1), { n: log.length, t: 'TASK OK' });
    });

    it('#21 the log ends TASK ERROR: <message> for a failed task', async () => {
      const r = await raw(url, 'POST', `/nodes/${NODE}/qemu/9000/status/start`);
      const upid = data<string>(r);
      const msg = "you can't start a vm if it's a template";
      assert.equal(await finish(url, upid), msg);
      const log = data<LogLine[]>(await taskLog(url, upid));
      assert.equal(log.at(-1)?.t, `TASK ERROR: ${msg}`);
      assert.equal((await taskStatus(url, upid)).exitstatus, msg);
    });

    it('#21 log lines: n is 1-based, default limit 50, start/limit, total', async () => {
      // A full clone copies with qemu-img convert, which logs its progress once per percent.
      const r = await raw(url, 'POST', `/nodes/${NODE}/qemu/9000/clone`, { form: { newid: '310', full: '1' } });
      const upid = data<string>(r);
      assert.equal(await finish(url, upid), 'OK');
      const first = await taskLog(url, upid);
      const page = data<LogLine[]>(first);
      const total = (first.json as { total: number }).total;
      assert.ok(total > 50, `total ${total}`);
      assert.equal(page.length, 50);
      assert.deepEqual(
        page.map((l) => l.n),
        page.map((_l, i) => i + 1),
      );
      assert.ok(page.some((l) => /^transferred .+ of .+ \(\d+\.\d\d%\)$/.test(l.t)));
      const all = data<LogLine[]>(await taskLog(url, upid, '?limit=0'));
      assert.equal(all.length, total);
      assert.equal(all.at(-1)?.t, 'TASK OK');
      const mid = await taskLog(url, upid, '?start=1&limit=2');
      assert.deepEqual(data<LogLine[]>(mid), [
        { n: 2, t: all[1]!.t },
        { n: 3, t: all[2]!.t },
      ]);
      assert.equal((mid.json as { total: number }).total, total);
    });

    it('#21 unknown and malformed UPIDs', async () => {
      const unknown = `UPID:${NODE}:00001234:00ABCDEF:6500AB12:qmstart:999:root@pam:`;
      const st = await raw(url, 'GET', `/nodes/${NODE}/tasks/${encodeURIComponent(unknown)}/status`);
      assertError(st, 400, 'Parameter verification failed.');
      assert.deepEqual((st.json as { errors: unknown }).errors, { upid: 'no such task' });
      const bad = await raw(url, 'GET', `/nodes/${NODE}/tasks/not-a-upid/status`);
      assertError(bad, 400, 'Parameter verification failed.');
      assert.deepEqual((bad.json as { errors: unknown }).errors, { upid: 'unable to parse worker upid' });
      // read_task_log has no existence check: the missing file is the answer.
      const log = await taskLog(url, unknown);
      assert.equal(log.status, 200);
      assert.deepEqual(log.json, { data: [{ n: 1, t: 'unable to open file - No such file or directory' }], total: 1 });
    });

    it('#21 a clone UPID carries the source vmid; token tasks report user and tokenid', async () => {
      const r = await raw(url, 'POST', `/nodes/${NODE}/qemu/9000/clone`, { form: { newid: '320' } });
      const upid = data<string>(r);
      assert.match(upid, /^UPID:ml110-01:[0-9A-F]{8}:[0-9A-F]{8,9}:[0-9A-F]{8}:qmclone:9000:root@pam!test:$/);
      assert.equal(await finish(url, upid), 'OK');
      const st = await taskStatus(url, upid);
      assert.equal(st.id, '9000');
      assert.equal(st.type, 'qmclone');
      assert.equal(st.user, 'root@pam');
      assert.equal(st.tokenid, 'test');
      const t = await login(url);
      const byTicket = await raw(url, 'POST', `/nodes/${NODE}/qemu/320/status/start`, { headers: ticketHeaders(t) });
      const tupid = data<string>(byTicket);
      assert.match(tupid, /:qmstart:320:root@pam:$/);
      assert.equal(await finish(url, tupid), 'OK');
      const tst = await taskStatus(url, tupid);
      assert.equal(tst.user, 'root@pam');
      assert.equal('tokenid' in tst, false);
    });
  });
}
