/**
 * Quorum (src/sim/quorum.ts): a two-node cluster without a QDevice loses quorum with either node
 * (crashed or cut off), and then refuses what PVE refuses: the handlers that check quorum die at
 * once ("cluster not ready - no quorum?"), every other config write fails where it is written, with
 * pmxcfs' EACCES, after what the worker did before it (a grown volume, freed disks, a create's
 * placeholder it could not unlink). Reads, stops and shutdowns go on. A QDevice keeps the quorum.
 *
 * Deterministic: stall faults hold a worker where the quorum loss finds it; tasks are awaited by
 * polling their status.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { SimCluster, Simulator } from '../../src/sim/index.ts';
import type { TaskState } from '../../src/sim/state.ts';
import { raw } from '../helpers/sim.ts';
import { clusterHead, data, finish, nodeHead, post, start, startSim } from './migration-helpers.ts';

const NO_QUORUM = 'cluster not ready - no quorum?';
const READ_ONLY =
  /^unable to open file '\/etc\/pve\/nodes\/pve1\/qemu-server\/(\d+)\.conf\.tmp\.\d+' - Permission denied$/;

function topology(qdevice: boolean): string {
  const node = (name: string) =>
    `${nodeHead(name)}          - { id: local-lvm, type: lvmthin, content: [images], total: 100G }\n        bridges:\n          - { name: vmbr0, cidr: 10.0.0.1/24 }\n`;
  return `clusters:\n${clusterHead('site-1', 0)}${node('pve1')}${node('pve2')}${qdevice ? '    qdevice: true\n' : ''}`;
}

/** PUT that must answer a UPID (a resize). */
async function putTask(url: string, path: string, form: Record<string, string>): Promise<string> {
  const r = await raw(url, 'PUT', path, { form });
  assert.equal(r.status, 200, r.text);
  return data<string>(r);
}

async function quorate(url: string): Promise<number> {
  const rows = data<Array<{ type: string; quorate?: number }>>(await raw(url, 'GET', '/cluster/status'));
  return rows.find((r) => r.type === 'cluster')!.quorate!;
}

async function config(url: string, vmid: number): Promise<Record<string, string>> {
  const r = await raw(url, 'GET', `/nodes/pve1/qemu/${vmid}/config`);
  assert.equal(r.status, 200, r.text);
  return data<Record<string, string>>(r);
}

/** A stopped VM on pve1 with a 1 GiB disk. */
async function makeVm(url: string, vmid: number): Promise<void> {
  const upid = await start(url, '/nodes/pve1/qemu', { vmid: String(vmid), name: `q-${vmid}`, scsi0: 'local-lvm:1' });
  assert.equal((await finish(url, 'pve1', upid)).exit, 'OK');
}

describe('sim: quorum', () => {
  let sim: Simulator;
  let sc: SimCluster;
  let url: string;
  before(async () => {
    ({ sim, sc, url } = await startSim('9.2', topology(false), 'two-nodes.yaml'));
  });
  after(() => sim.close());
  beforeEach(() => sc.clearFaults());

  it('a crash of one of two nodes takes the quorum: the quorum-checking handlers refuse at once', async () => {
    await makeVm(url, 100);
    assert.equal(await quorate(url), 1);
    sc.addFault({ kind: 'node-crash', node: 'pve2' });
    assert.equal(await quorate(url), 0);
    const refused = [
      await post(url, '/nodes/pve1/qemu', { vmid: '101', name: 'q-101', scsi0: 'local-lvm:1' }),
      await post(url, '/nodes/pve1/qemu/100/status/start', {}),
      await post(url, '/nodes/pve1/qemu/100/clone', { newid: '102' }),
      await raw(url, 'GET', '/nodes/pve1/qemu/100/migrate'),
    ];
    for (const r of refused) assert.deepEqual([r.status, r.reason], [500, NO_QUORUM], r.text);
    assert.equal(sc.state.vms.has(101), false, 'nothing was written');
    // Reads go on.
    assert.equal((await config(url, 100)).name, 'q-100');
    sc.clearFaults(); // pve2 boots
    assert.equal(await quorate(url), 1);
    assert.equal((await finish(url, 'pve1', await start(url, '/nodes/pve1/qemu/100/status/start', {}))).exit, 'OK');
    // A stop writes no config: it works without quorum.
    sc.addFault({ kind: 'node-offline', node: 'pve2' });
    assert.equal(await quorate(url), 0, 'a node cut off takes its vote away too');
    assert.equal((await finish(url, 'pve1', await start(url, '/nodes/pve1/qemu/100/status/stop', {}))).exit, 'OK');
  });

  it('config writes fail where they are written: PUT config, a resize after the volume grew, a destroy after the disks went', async () => {
    await makeVm(url, 110);
    sc.addFault({ kind: 'node-crash', node: 'pve2' });
    const put = await raw(url, 'PUT', '/nodes/pve1/qemu/110/config', { form: { memory: '4096' } });
    assert.equal(put.status, 500);
    assert.match(put.reason, READ_ONLY);
    assert.equal((await config(url, 110)).memory, undefined, 'unchanged');

    const resize = await finish(
      url,
      'pve1',
      await putTask(url, '/nodes/pve1/qemu/110/resize', { disk: 'scsi0', size: '4G' }),
    );
    assert.match(resize.exit, READ_ONLY);
    const volume = sc.state.volume('pve1', 'local-lvm:vm-110-disk-0')!;
    assert.equal(volume.size, 4 * 1024 ** 3, 'the volume grew before the write');
    assert.match((await config(url, 110)).scsi0!, /size=1G/);
    sc.clearFaults();
    // The same size again: PVE compares with the volume's size and returns (Qemu.pm:6050), the config stays stale.
    const again = await finish(
      url,
      'pve1',
      await putTask(url, '/nodes/pve1/qemu/110/resize', { disk: 'scsi0', size: '4G' }),
    );
    assert.equal(again.exit, 'OK');
    assert.match((await config(url, 110)).scsi0!, /size=1G/);

    sc.addFault({ kind: 'node-crash', node: 'pve2' });
    const destroy = await raw(url, 'DELETE', '/nodes/pve1/qemu/110');
    assert.equal(destroy.status, 200, destroy.text);
    const gone = await finish(url, 'pve1', data<string>(destroy));
    assert.match(gone.exit, READ_ONLY);
    assert.equal(sc.state.volume('pve1', 'local-lvm:vm-110-disk-0'), undefined, 'the disk was freed first');
    assert.match((await config(url, 110)).scsi0!, /vm-110-disk-0/, 'the config stays, naming it');
    sc.clearFaults();
    // What is left fails every resize and start as activate_volumes does on lvm-thin (LvmThinPlugin.pm:247).
    const resizeGone = await finish(
      url,
      'pve1',
      await putTask(url, '/nodes/pve1/qemu/110/resize', { disk: 'scsi0', size: '8G' }),
    );
    assert.equal(resizeGone.exit, 'no such logical volume pve/vm-110-disk-0');
    const startGone = await finish(url, 'pve1', await start(url, '/nodes/pve1/qemu/110/status/start', {}));
    assert.equal(startGone.exit, 'no such logical volume pve/vm-110-disk-0');
    const retry = await finish(url, 'pve1', data<string>(await raw(url, 'DELETE', '/nodes/pve1/qemu/110')));
    assert.equal(retry.exit, 'OK');
    assert.equal(sc.state.vms.has(110), false);
  });

  it('a create whose worker runs on when the quorum goes fails and leaves its placeholder (the unlink fails too)', async () => {
    sc.addFault({ kind: 'task', type: 'qmcreate', id: '120', action: 'stall', step: 1 });
    const upid = await start(url, '/nodes/pve1/qemu', { vmid: '120', name: 'q-120', scsi0: 'local-lvm:1' });
    while (![...sc.faults.active.values()].some((f) => f.reached)) await new Promise((r) => setImmediate(r));
    sc.addFault({ kind: 'node-crash', node: 'pve2' });
    for (const [id, f] of sc.faults.active) if (f.spec.kind === 'task') sc.removeFault(id);
    const created = await finish(url, 'pve1', upid);
    assert.match(created.exit, /^unable to create VM 120 - unable to open file .* - Permission denied$/);
    assert.ok(created.log.includes('WARN: failed to remove config file: Permission denied'), created.log.join('\n'));
    assert.equal((await config(url, 120)).lock, 'create');
    assert.equal(sc.state.volume('pve1', 'local-lvm:vm-120-disk-0'), undefined, 'its disk was freed');
  });

  it('a node that boots while the other is still down: its startall waits for the quorum, then starts its onboot VMs', async () => {
    await makeVm(url, 140);
    assert.equal((await raw(url, 'PUT', '/nodes/pve1/qemu/140/config', { form: { onboot: '1' } })).status, 200);
    const a = sc.addFault({ kind: 'node-crash', node: 'pve1' });
    sc.addFault({ kind: 'node-crash', node: 'pve2' });
    sc.removeFault(a); // pve1 boots; pve2 is still down
    let startall: TaskState | undefined;
    while (!startall?.log.includes('waiting for quorum ...')) {
      startall = [...sc.state.tasks.values()].findLast((t) => t.node === 'pve1' && t.type === 'startall');
      await new Promise((r) => setImmediate(r));
    }
    assert.equal(startall.status, 'running');
    assert.equal(sc.state.vms.get(140)?.status, 'stopped', 'nothing started without quorum');
    sc.clearFaults(); // pve2 boots: quorum
    await startall.done;
    assert.equal(startall.exitstatus, 'OK', startall.log.join('\n'));
    assert.ok(startall.log.includes('got quorum'), startall.log.join('\n'));
    assert.ok(startall.log.includes('Starting VM 140'), startall.log.join('\n'));
  });

  it('with a QDevice, one node down keeps the quorum', async () => {
    const q = await startSim('9.2', topology(true), 'qdevice.yaml');
    try {
      q.sc.addFault({ kind: 'node-crash', node: 'pve2' });
      assert.equal(await quorate(q.url), 1);
      const upid = await start(q.url, '/nodes/pve1/qemu', { vmid: '130', name: 'q-130', scsi0: 'local-lvm:1' });
      assert.equal((await finish(q.url, 'pve1', upid)).exit, 'OK');
    } finally {
      await q.sim.close();
    }
  });
});
