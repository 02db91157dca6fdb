/**
 * Placement changes of an existing VM move it with its data, never by a recreate: a node change
 * inside the site is a migration (online for a running VM, local disks copied), a storage change
 * a disk move (the source removed after the copy). The target is checked first (nothing moves
 * when a check fails). A VM moved by someone else is followed, and moved back only with
 * placementPolicy: Enforce. Every VM keeps its VMID and its marker.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Simulator } from '../../src/sim/index.ts';
import { raw, waitTask } from '../helpers/sim.ts';
import { cond, count, Engine, ownedBy, SITE1, startSim, twoNodeTopology, vm } from './harness.ts';

describe('placement changes of an existing VM', () => {
  let sim: Simulator;
  let eng: Engine;
  before(async () => {
    sim = await startSim({ topology: twoNodeTopology('migrate.yaml') });
    // A short poll: the VM moved by hand is seen at the next poll of a Ready resource.
    eng = await new Engine(sim, { pollIntervalMs: 200 }).start();
  });
  after(async () => {
    await eng.stop();
    await sim.close();
  });

  it('node changed: one online migration with its local disks, the same VMID and marker, nothing destroyed', async () => {
    const c = sim.cluster(SITE1);
    const key = eng.apply(vm('mover', { node: 'pve-a', image: 'local:import/ubuntu-22.04-cloud.qcow2' }));
    const r0 = await eng.waitReady(key);
    const vmid = r0.status!.atProvider!.vmId!;
    const marker = c.state.vms.get(vmid)!.config.description;
    eng.apply(vm('mover', { node: 'pve-b', image: 'local:import/ubuntu-22.04-cloud.qcow2' }));
    const r = await eng.waitFor(
      key,
      (x) => x.status?.atProvider?.node === 'pve-b' && x.status?.atProvider?.step === 'Ready',
      'on pve-b',
    );
    const v = c.state.vms.get(vmid)!;
    assert.equal(v.node, 'pve-b');
    assert.equal(v.status, 'running', 'it kept running (online)');
    assert.equal(v.config.description, marker, 'the marker moved with it');
    assert.equal(r.status?.atProvider?.vmId, vmid);
    assert.equal(ownedBy(c, r.metadata.uid).length, 1);
    assert.equal(count(c, 'POST /nodes/{node}/qemu/{vmid}/migrate'), 1);
    assert.equal(count(c, 'DELETE /nodes/{node}/qemu/{vmid}'), 0, 'nothing destroyed');
    assert.ok([...c.state.tasks.values()].some((t) => t.type === 'qmigrate' && t.id === String(vmid)));
  });

  it('storage changed: a disk move to the new storage, the old volume gone', async () => {
    const c = sim.cluster(SITE1);
    const key = eng.apply(vm('mover-disk', { node: 'pve-a', image: 'local:import/ubuntu-22.04-cloud.qcow2' }));
    const r0 = await eng.waitReady(key);
    const vmid = r0.status!.atProvider!.vmId!;
    eng.apply(vm('mover-disk', { node: 'pve-a', storage: 'ceph', image: 'local:import/ubuntu-22.04-cloud.qcow2' }));
    await eng.waitFor(
      key,
      (x) => /^ceph:/.test(c.state.vms.get(vmid)?.config.scsi0 ?? '') && x.status?.atProvider?.step === 'Ready',
      'scsi0 on ceph',
    );
    assert.equal(count(c, 'POST /nodes/{node}/qemu/{vmid}/move_disk'), 1);
    const lvm = c.state.nodes.get('pve-a')!.storages.get('local-lvm')!;
    const left = [...lvm.volumes.values()].filter((v) => v.vmid === vmid).map((v) => v.volname);
    // The cloud-init drive stays on its storage (spec.forProvider.cloudInit.storage, default the disk's at create).
    assert.deepEqual(
      left.filter((n) => !n.includes('cloudinit')),
      [],
      'the source volume was removed',
    );
    assert.equal(c.state.vms.get(vmid)!.config.unused0, undefined, 'removed, not kept as unused0');
  });

  it('a target that cannot take the VM: refused before anything moves, with the reason', async () => {
    const key = eng.apply(
      vm('too-big', { node: 'pve-a', memory: '40Gi', image: 'local:import/ubuntu-22.04-cloud.qcow2' }),
    );
    await eng.waitReady(key);
    // pve-b has 64G; fill it so that the VM's 40G do not fit there.
    const c = sim.cluster(SITE1);
    const filler = eng.apply(
      vm('filler', { node: 'pve-b', memory: '40Gi', image: 'local:import/ubuntu-22.04-cloud.qcow2' }),
    );
    await eng.waitReady(filler);
    const before = count(c, 'POST /nodes/{node}/qemu/{vmid}/migrate');
    eng.apply(vm('too-big', { node: 'pve-b', memory: '40Gi', image: 'local:import/ubuntu-22.04-cloud.qcow2' }));
    const r = await eng.waitSynced(key, 'InsufficientCapacity');
    assert.match(cond(r, 'Synced')?.message ?? '', /pve-b/);
    assert.equal(count(c, 'POST /nodes/{node}/qemu/{vmid}/migrate'), before, 'no migration was sent');
    assert.equal(c.state.vms.get(r.status!.atProvider!.vmId!)!.node, 'pve-a');
  });

  it('moved by someone else: followed and reported (Follow); Enforce migrates it back', async () => {
    const c = sim.cluster(SITE1);
    const key = eng.apply(vm('ha-moved', { node: 'pve-a', image: 'local:import/ubuntu-22.04-cloud.qcow2' }));
    const r0 = await eng.waitReady(key);
    const vmid = r0.status!.atProvider!.vmId!;
    // A person migrates it (as HA would).
    const res = await raw(c.url, 'POST', `/nodes/pve-a/qemu/${vmid}/migrate`, {
      form: { target: 'pve-b', online: '1', 'with-local-disks': '1' },
    });
    assert.equal(res.status, 200, res.text);
    await waitTask(c.url, 'pve-a', (res.json as { data: string }).data);
    const drift = await eng.waitFor(key, (x) => cond(x, 'NodeDrift')?.status === 'True', 'NodeDrift');
    assert.equal(drift.status?.atProvider?.node, 'pve-b', 'followed to its new node');
    assert.match(cond(drift, 'NodeDrift')?.message ?? '', /placementPolicy: Enforce/);
    assert.equal(c.state.vms.get(vmid)!.node, 'pve-b', 'not migrated back');
    eng.apply(
      vm('ha-moved', { node: 'pve-a', placementPolicy: 'Enforce', image: 'local:import/ubuntu-22.04-cloud.qcow2' }),
    );
    await eng.waitFor(
      key,
      (x) => x.status?.atProvider?.node === 'pve-a' && cond(x, 'NodeDrift')?.status === 'False',
      'back on pve-a',
    );
    assert.equal(c.state.vms.get(vmid)!.node, 'pve-a');
  });
});
