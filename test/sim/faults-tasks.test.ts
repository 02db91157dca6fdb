/**
 * Fault injection on the workers and what they hold, observed from a client: tasks that fail at
 * start or at the end or stall, config locks and held flocks, and full storage. Deterministic:
 * faults fire on counted tasks, waits are ordered against other tasks, never against wall-clock
 * bounds.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { SimCluster, Simulator } from '../../src/sim/index.ts';
import { outOfSpaceMessage } from '../../src/sim/storage.ts';
import { raw, waitTask } from '../helpers/sim.ts';
import {
  createVm,
  createVmOk,
  data,
  NODE,
  power,
  simApi,
  startFaultSim,
  taskLog,
  taskStatus,
} from './faults-fixtures.ts';

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
});
