/**
 * VM snapshots as qemu-server and pve-storage allow them: which storages can snapshot (lvmthin,
 * zfspool, rbd, qcow2 files; not plain LVM), templates and reserved names refused, the locks and
 * `snapstate` a dead worker leaves, ZFS rolling back only to the most recent snapshot, the RAM
 * state volume of a snapshot with `vmstate`, and the parent chain on delete.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { SimCluster, Simulator } from '../../src/sim/index.ts';
import { parseTopology } from '../../src/sim/topology.ts';
import { assertError, data, finish, NODE, power, taskStatus, vmConfig } from '../helpers/fidelity.ts';
import { raw, startTestSim } from '../helpers/sim.ts';

const TOPOLOGY = `
clusters:
  - name: site-1
    listen: 127.0.0.1:0
    nodes:
      - name: ${NODE}
        cpus: 8
        memory: 64G
        storages:
          - { id: thin, type: lvmthin, content: [images], total: 500G }
          - { id: thick, type: lvm, content: [images], total: 500G }
          - { id: files, type: dir, content: [images], total: 500G }
          - { id: tank, type: zfspool, content: [images], total: 500G }
        bridges: [{ name: vmbr0 }]
        vms:
          - { vmid: 9000, name: tpl, template: true, disk: { storage: thin, size: 1G } }
          - { vmid: 110, name: on-thin, disk: { storage: thin, size: 1G }, memory: 1024 }
          - { vmid: 111, name: on-lvm, disk: { storage: thick, size: 1G } }
          - { vmid: 112, name: on-dir, disk: { storage: files, size: 1G } }
          - { vmid: 113, name: on-zfs, disk: { storage: tank, size: 1G } }
`;

async function snap(url: string, vmid: number, form: Record<string, string>): Promise<string | undefined> {
  const r = await raw(url, 'POST', `/nodes/${NODE}/qemu/${vmid}/snapshot`, { form });
  assert.equal(r.status, 200, r.reason);
  return finish(url, data<string>(r));
}

async function list(url: string, vmid: number): Promise<Array<Record<string, unknown>>> {
  return data(await raw(url, 'GET', `/nodes/${NODE}/qemu/${vmid}/snapshot`));
}

describe('snapshots', () => {
  let sim: Simulator;
  let c: SimCluster;
  let url: string;
  before(async () => {
    sim = await startTestSim({ topology: parseTopology(TOPOLOGY, 'snap.yaml') });
    c = sim.cluster('site-1');
    url = c.url;
  });
  after(() => sim.close());

  it('storages: lvmthin, zfs and qcow2 on dir snapshot; plain LVM does not', async () => {
    for (const vmid of [110, 112, 113]) assert.equal(await snap(url, vmid, { snapname: 's1' }), 'OK', `VM ${vmid}`);
    assert.equal(await snap(url, 111, { snapname: 's1' }), 'snapshot feature is not available');
    // The failed prepare wrote nothing: no lock, no section.
    assert.equal((await vmConfig(url, 111)).lock, undefined);
    assert.deepEqual(
      (await list(url, 111)).map((s) => s.name),
      ['current'],
    );
  });

  it('templates, reserved and used names are refused', async () => {
    assert.equal(await snap(url, 9000, { snapname: 'tx' }), "you can't take a snapshot if it's a template");
    assertError(
      await raw(url, 'POST', `/nodes/${NODE}/qemu/110/snapshot`, { form: { snapname: 'current' } }),
      500,
      "unable to use snapshot name 'current' (reserved name)",
    );
    assert.equal(await snap(url, 110, { snapname: 's1' }), "snapshot name 's1' already used");
    // A template cannot be made of a VM with snapshots.
    assertError(
      await raw(url, 'POST', `/nodes/${NODE}/qemu/110/template`),
      500,
      'unable to create template, because VM contains snapshots',
    );
  });

  it('a worker that dies before the commit leaves `lock: snapshot` and `snapstate: prepare`', async () => {
    const id = c.addFault({ kind: 'task', type: 'qmsnapshot', action: 'die', at: 'end', count: 1 });
    assert.equal(await snap(url, 112, { snapname: 'half' }), 'unexpected status');
    c.removeFault(id);
    assert.equal((await vmConfig(url, 112)).lock, 'snapshot');
    const half = (await list(url, 112)).find((s) => s.name === 'half');
    assert.equal(half?.snapstate, 'prepare');
    assert.equal(await snap(url, 112, { snapname: 'again' }), 'VM is locked (snapshot)');
    // Rollback to an incomplete snapshot is refused.
    const r = await raw(url, 'POST', `/nodes/${NODE}/qemu/112/snapshot/half/rollback`);
    assert.equal(await finish(url, data<string>(r)), 'unable to rollback to incomplete snapshot (snapstate = prepare)');
  });

  it('ZFS rolls back only to the most recent snapshot; lvmthin to any', async () => {
    assert.equal(await snap(url, 113, { snapname: 's2' }), 'OK');
    const z = await raw(url, 'POST', `/nodes/${NODE}/qemu/113/snapshot/s1/rollback`);
    assert.equal(
      await finish(url, data<string>(z)),
      "can't rollback, 's1' is not most recent snapshot on 'tank:vm-113-disk-0'",
    );
    assert.equal(await snap(url, 110, { snapname: 's2' }), 'OK');
    const t = await raw(url, 'POST', `/nodes/${NODE}/qemu/110/snapshot/s1/rollback`);
    assert.equal(await finish(url, data<string>(t)), 'OK');
    assert.equal((await vmConfig(url, 110)).parent, 's1');
  });

  it('vmstate: the RAM goes into vm-N-state-NAME; rollback starts the VM; delete frees it', async () => {
    assert.equal(await power(url, 110, 'start'), 'OK');
    assert.equal(await snap(url, 110, { snapname: 'ram', vmstate: '1', description: 'with RAM' }), 'OK');
    const vol = c.state.volume(NODE, 'thin:vm-110-state-ram');
    assert.ok(vol, 'state volume');
    // find_vmstate_storage's size: 2 x memory + 500 MiB.
    assert.equal(vol.size, (2 * 1024 + 500) * 1024 ** 2);
    const cfg = data<Record<string, unknown>>(await raw(url, 'GET', `/nodes/${NODE}/qemu/110/snapshot/ram/config`));
    assert.equal(cfg.vmstate, 'thin:vm-110-state-ram');
    assert.equal(cfg.parent, 's1');
    assert.equal(await power(url, 110, 'stop'), 'OK');
    const rb = await raw(url, 'POST', `/nodes/${NODE}/qemu/110/snapshot/ram/rollback`);
    const upid = data<string>(rb);
    assert.equal(await finish(url, upid), 'OK');
    assert.equal((await taskStatus(url, upid)).type, 'qmrollback');
    assert.equal(
      data<{ status: string }>(await raw(url, 'GET', `/nodes/${NODE}/qemu/110/status/current`)).status,
      'running',
    );
    assert.equal(await power(url, 110, 'stop'), 'OK');
    // Deleting s1 moves its children up: s2 and ram had s1 as parent.
    const d = await raw(url, 'DELETE', `/nodes/${NODE}/qemu/110/snapshot/s1`);
    assert.equal(await finish(url, data<string>(d)), 'OK');
    const after1 = await list(url, 110);
    assert.deepEqual(
      after1.map((s) => [s.name, s.parent ?? null]),
      [
        ['s2', null],
        ['ram', null],
        ['current', 'ram'],
      ],
    );
    const d2 = await raw(url, 'DELETE', `/nodes/${NODE}/qemu/110/snapshot/ram`);
    assert.equal(await finish(url, data<string>(d2)), 'OK');
    assert.equal(c.state.volume(NODE, 'thin:vm-110-state-ram'), undefined);
    assert.equal((await vmConfig(url, 110)).parent, undefined);
  });

  it('config?snapshot= gives the section with the file digest; an unknown one is a 500', async () => {
    const s = data<Record<string, unknown>>(await raw(url, 'GET', `/nodes/${NODE}/qemu/113/config?snapshot=s2`));
    assert.equal(s.name, 'on-zfs');
    assert.equal(s.parent, 's1');
    assert.equal(s.digest, (await vmConfig(url, 113)).digest);
    assertError(
      await raw(url, 'GET', `/nodes/${NODE}/qemu/113/config?snapshot=nope`),
      500,
      "snapshot 'nope' does not exist",
    );
  });
});
