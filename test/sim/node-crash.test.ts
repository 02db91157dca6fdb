/**
 * The `node-crash` fault (src/sim/node-power.ts): a node that loses power kills its workers
 * where they stand (a simulated step or a flock wait) without their error paths, stops its VMs
 * without a shutdown, goes offline and cuts its SSH; a request it was handling gets no answer.
 * Its boot runs pve-guests' `startall`: leftover backup locks removed, `onboot` VMs started in
 * `startup` order, a start that fails (a dead migration's lock) logged. A resize killed between
 * its two steps leaves the volume grown and the config at the old size, as PVE's does.
 *
 * Deterministic: stall faults hold workers where the crash finds them; tasks are awaited by
 * polling their status.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { SimCluster, Simulator } from '../../src/sim/index.ts';
import { createVm, createVmAndWait, data, NODE, power, taskLines, vmConfig } from '../helpers/fidelity.ts';
import { raw, startTestSim, waitTask } from '../helpers/sim.ts';
import { connect as sshConnect } from './ssh-client.ts';

/** The newest boot's startall task. */
async function startallTask(c: SimCluster): Promise<string> {
  for (let i = 0; i < 2000; i++) {
    const t = [...c.state.tasks.values()].findLast((x) => x.node === NODE && x.type === 'startall');
    if (t) return t.upid;
    await new Promise((r) => setImmediate(r));
  }
  throw new Error('no startall task');
}

async function vmStatus(url: string, vmid: number): Promise<string> {
  return data<{ status: string }>(await raw(url, 'GET', `/nodes/${NODE}/qemu/${vmid}/status/current`)).status;
}

describe('sim: node-crash', () => {
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
    for (const vmid of [...c.state.vms.keys()]) if (vmid >= 500 && vmid < 600) c.state.vms.delete(vmid);
  });

  it('kills a running worker where it stands: unexpected status, no TASK line, its placeholder stays', async () => {
    c.addFault({ kind: 'task', type: 'qmcreate', id: '501', action: 'stall', step: 1 });
    const upid = await createVm(url, { vmid: '501', name: 'crash-1', scsi0: 'local-lvm:1' });
    while (![...c.faults.active.values()].some((f) => f.reached)) await new Promise((r) => setImmediate(r));
    const crash = c.addFault({ kind: 'node-crash', node: NODE });
    const st = await waitTask(url, NODE, upid).catch(() => undefined);
    // The node is offline: its own API answers 595, so the task is read from the state.
    assert.equal(st, undefined);
    const task = c.state.tasks.get(upid)!;
    await task.done;
    assert.equal(task.exitstatus, 'unexpected status');
    assert.ok(!task.log.some((l) => l.startsWith('TASK ')), task.log.join('\n'));
    c.removeFault(crash);
    assert.deepEqual(Object.keys(await vmConfig(url, 501)).sort(), ['digest', 'lock']);
    assert.equal((await vmConfig(url, 501)).lock, 'create');
  });

  it('a worker waiting for a flock dies at once; the VMs stop, the node and its VMs read offline and unknown', async () => {
    await createVmAndWait(url, { vmid: '502', name: 'crash-2', scsi0: 'local-lvm:1' });
    assert.equal(await power(url, 502, 'start'), 'OK');
    const lock = c.addFault({ kind: 'lock', vmid: 502 });
    const r = await raw(url, 'POST', `/nodes/${NODE}/qemu/502/status/stop`);
    const upid = data<string>(r);
    const crash = c.addFault({ kind: 'node-crash', node: NODE });
    const task = c.state.tasks.get(upid)!;
    await task.done;
    assert.equal(task.exitstatus, 'unexpected status', 'died in its flock wait, not at the 10 s timeout');
    assert.equal((await raw(url, 'GET', `/nodes/${NODE}/qemu/502/status/current`)).status, 595);
    const res = data<Array<{ type: string; node?: string; vmid?: number; status?: string }>>(
      await raw(url, 'GET', '/cluster/resources'),
    );
    assert.equal(res.find((x) => x.type === 'node' && x.node === NODE)?.status, 'offline');
    assert.equal(res.find((x) => x.vmid === 502)?.status, 'unknown');
    c.removeFault(lock);
    c.removeFault(crash);
    assert.equal(await vmStatus(url, 502), 'stopped', 'no shutdown: QEMU went with the node');
    await waitTask(url, NODE, await startallTask(c));
  });

  it('cuts its SSH sessions; after the boot a login works again', async () => {
    const info = c.sshNode(NODE);
    const auth = { privateKey: sim.credentials.sshPrivateKey };
    const session = await sshConnect(info, auth);
    const closed = new Promise((resolve) => session.sftp.once('close', resolve));
    const crash = c.addFault({ kind: 'node-crash', node: NODE });
    await closed;
    c.removeFault(crash);
    (await sshConnect(info, auth)).end();
    await waitTask(url, NODE, await startallTask(c));
  });

  it('a request the node was handling gets no answer', async () => {
    await createVmAndWait(url, { vmid: '503', name: 'crash-3', scsi0: 'local-lvm:1' });
    const lock = c.addFault({ kind: 'lock', vmid: 503 });
    // A synchronous config update waits for the VM's flock in the handler.
    const pending = raw(url, 'PUT', `/nodes/${NODE}/qemu/503/config`, { form: { description: 'x' } }).then(
      (r) => r.status,
      () => 'no answer',
    );
    await new Promise((r) => setTimeout(r, 5));
    const crash = c.addFault({ kind: 'node-crash', node: NODE });
    c.removeFault(lock);
    assert.equal(await pending, 'no answer');
    c.removeFault(crash);
    await waitTask(url, NODE, await startallTask(c));
  });

  it('a resize killed after the volume grew, before the config was written: the volume keeps its size, the config its old one', async () => {
    await createVmAndWait(url, { vmid: '505', name: 'crash-5', scsi0: 'local-lvm:1' });
    // Held in the block resize, after the volume grew (its step is the task's time).
    c.addFault({ kind: 'task', type: 'resize', id: '505', action: 'stall', step: 1 });
    const r = await raw(url, 'PUT', `/nodes/${NODE}/qemu/505/resize`, { form: { disk: 'scsi0', size: '4G' } });
    const task = c.state.tasks.get(data<string>(r))!;
    while (![...c.faults.active.values()].some((f) => f.reached)) await new Promise((res) => setImmediate(res));
    const crash = c.addFault({ kind: 'node-crash', node: NODE });
    await task.done;
    assert.equal(task.exitstatus, 'unexpected status');
    c.removeFault(crash);
    assert.equal(c.state.volume(NODE, 'local-lvm:vm-505-disk-0')?.size, 4 * 1024 ** 3);
    assert.match(String((await vmConfig(url, 505)).scsi0), /size=1G/);
    await waitTask(url, NODE, await startallTask(c));
  });

  it('a lock fault whose worker would run on the crashed node is refused (no vzdump starts there)', async () => {
    await createVmAndWait(url, { vmid: '504', name: 'crash-4', scsi0: 'local-lvm:1' });
    const crash = c.addFault({ kind: 'node-crash', node: NODE });
    assert.throws(
      () => c.addFault({ kind: 'lock', vmid: 504, lock: 'backup' }),
      /node 'ml110-01' is down: no vzdump worker/,
    );
    c.removeFault(crash);
    await waitTask(url, NODE, await startallTask(c));
  });

  it('the boot: a new uptime; startall removes a dead backup lock and starts the onboot VMs in startup order', async () => {
    await createVmAndWait(url, { vmid: '510', name: 'on-late', scsi0: 'local-lvm:1', onboot: '1', startup: 'order=2' });
    await createVmAndWait(url, {
      vmid: '511',
      name: 'on-first',
      scsi0: 'local-lvm:1',
      onboot: '1',
      startup: 'order=1,up=5',
    });
    await createVmAndWait(url, { vmid: '512', name: 'off', scsi0: 'local-lvm:1' });
    await createVmAndWait(url, { vmid: '513', name: 'migrating', scsi0: 'local-lvm:1', onboot: '1' });
    await createVmAndWait(url, { vmid: '514', name: 'backed-up', scsi0: 'local-lvm:1', onboot: '1' });
    for (const vmid of [510, 511, 512, 513, 514]) assert.equal(await power(url, vmid, 'start'), 'OK');
    // Workers that hold a VM's lock when the node dies: a migration and a backup job.
    c.addFault({ kind: 'lock', vmid: 513, lock: 'migrate', flock: false });
    c.addFault({ kind: 'lock', vmid: 514, lock: 'backup', flock: false });
    const crash = c.addFault({ kind: 'node-crash', node: NODE });
    for (const t of c.state.tasks.values()) if (t.node === NODE) await t.done;
    // The lock faults' workers died with the node: their locks stay, whatever becomes of the faults.
    c.removeFault(crash);
    const upid = await startallTask(c);
    assert.equal((await waitTask(url, NODE, upid)).exitstatus, 'OK');
    const lines = await taskLines(url, upid);
    assert.deepEqual(
      lines.filter((l) => /^(Starting|removed|Waiting)/.test(l)),
      [
        "removed left over backup lock from '514'!",
        'Starting VM 511',
        'Waiting for 5 seconds (startup delay)',
        'Starting VM 510',
        'Starting VM 513',
        'Starting VM 514',
        'Starting VM 513 failed: VM is locked (migrate)',
      ],
    );
    assert.equal(await vmStatus(url, 510), 'running');
    assert.equal(await vmStatus(url, 511), 'running');
    assert.equal(await vmStatus(url, 512), 'stopped');
    assert.equal(await vmStatus(url, 513), 'stopped');
    assert.equal(await vmStatus(url, 514), 'running');
    assert.equal((await vmConfig(url, 513)).lock, 'migrate');
    const node = data<{ uptime: number }>(await raw(url, 'GET', `/nodes/${NODE}/status`));
    assert.ok(node.uptime < 3600, `uptime ${node.uptime}`);
  });
});
