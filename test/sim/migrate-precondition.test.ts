/**
 * `GET /nodes/{node}/qemu/{vmid}/migrate` from the simulated topology: a storage that another
 * node lacks makes it `not_allowed` (`unavailable_storages`), disks on shared storages are not
 * `local_disks`, host ports are `local_resources`, and the answer's fields per release (6.4/7.4:
 * the node lists only for a stopped VM; 8.4: `mapped-resources`; 9.2: `has-dbus-vmstate`).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Profile, Simulator } from '../../src/sim/index.ts';
import { assertError, data } from '../helpers/fidelity.ts';
import { raw } from '../helpers/sim.ts';
import { clusterHead, nodeHead, startSim } from './migration-helpers.ts';

const TOPOLOGY = `
clusters:
${clusterHead('site-1', 0)}${nodeHead('n1')}          - { id: local, type: dir, content: [iso, backup], total: 100G }
          - { id: thin, type: lvmthin, content: [images], total: 500G }
          - { id: ceph, type: rbd, content: [images], total: 1T, shared: true }
        bridges: [{ name: vmbr0 }]
        vms:
          - { vmid: 130, name: local-disk, disk: { storage: thin, size: 2G } }
          - { vmid: 131, name: shared-disk, disk: { storage: ceph, size: 2G }, running: true }
${nodeHead('n2')}          - { id: local, type: dir, content: [iso, backup], total: 100G }
          - { id: ceph, type: rbd, content: [images], total: 1T, shared: true }
        bridges: [{ name: vmbr0 }]
${nodeHead('n3')}          - { id: local, type: dir, content: [iso, backup], total: 100G }
          - { id: thin, type: lvmthin, content: [images], total: 500G }
          - { id: ceph, type: rbd, content: [images], total: 1T, shared: true }
        bridges: [{ name: vmbr0 }]
`;

async function pre(url: string, vmid: number): Promise<Record<string, unknown>> {
  const r = await raw(url, 'GET', `/nodes/n1/qemu/${vmid}/migrate`);
  assert.equal(r.status, 200, r.reason);
  return data(r);
}

for (const profile of ['7.4', '8.4', '9.2'] as Profile[]) {
  describe(`migrate precondition (PVE ${profile})`, () => {
    let sim: Simulator;
    let url: string;
    const modern = profile !== '7.4';
    before(async () => {
      ({ sim, url } = await startSim(profile, TOPOLOGY, 'mig.yaml'));
    });
    after(() => sim.close());

    it('a disk on a storage n2 lacks: n2 not allowed, n3 allowed, the disk local', async () => {
      const r = await pre(url, 130);
      assert.equal(r.running, 0);
      assert.deepEqual(r.allowed_nodes, ['n3']);
      assert.deepEqual(r.not_allowed_nodes, { n2: { unavailable_storages: ['thin'] }, n3: {} });
      const disks = r.local_disks as Array<Record<string, unknown>>;
      assert.deepEqual(
        disks.map((d) => [d.volid, d.size, d.cdrom, d.is_unused, d.drivename]),
        [['thin:vm-130-disk-0', 2 * 1024 ** 3, 0, 0, 'scsi0']],
      );
      assert.deepEqual(r.local_resources, []);
      assert.equal('mapped-resources' in r, modern);
      assert.equal('has-dbus-vmstate' in r, profile === '9.2');
    });

    it('a running VM on shared storage: no local disks; node lists from 8.x on only', async () => {
      const r = await pre(url, 131);
      assert.equal(r.running, 1);
      assert.deepEqual(r.local_disks, []);
      if (modern) assert.deepEqual(r.allowed_nodes, ['n2', 'n3']);
      else {
        assert.equal(r.allowed_nodes, undefined);
        assert.equal(r.not_allowed_nodes, undefined);
      }
    });

    it('a serial port is a local resource, a socket is not; a locked VM fails early', async () => {
      const set = await raw(url, 'PUT', '/nodes/n1/qemu/130/config', {
        form: { serial0: '/dev/ttyS0', serial1: 'socket' },
      });
      assert.equal(set.status, 200, set.reason);
      assert.deepEqual((await pre(url, 130)).local_resources, ['serial0']);
      const id = sim.cluster('site-1').addFault({ kind: 'lock', vmid: 130, lock: 'backup', flock: false });
      assertError(await raw(url, 'GET', '/nodes/n1/qemu/130/migrate'), 500, 'VM is locked (backup)');
      sim.cluster('site-1').removeFault(id);
    });
  });
}
