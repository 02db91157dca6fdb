/**
 * `POST /nodes/{node}/qemu/{vmid}/move_disk`: a `qmmove` task that copies one disk (offline with
 * qemu-img, online with drive-mirror at the slower storage's bandwidth), points the drive at the
 * new volume, keeps the old one as `unusedN` or frees it with `delete=1`, accounts both storages,
 * holds the VM's flock (not a config lock) while it runs, and refuses or fails as qemu-server
 * does per release; `target-vmid` reassigns a disk to another VM (7.4 on).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Profile, SimCluster, Simulator } from '../../src/sim/index.ts';
import { raw } from '../helpers/sim.ts';
import {
  bare,
  clusterHead,
  config,
  data,
  finish,
  GiB,
  logUntil,
  nodeHead,
  post,
  start,
  startSim,
  storageUsed,
  volumes,
} from './migration-helpers.ts';

const TOPOLOGY = `
clusters:
${clusterHead('site-1', 0)}${nodeHead('n1')}          - { id: local, type: dir, content: [iso, backup, images], total: 100G, bandwidth: 1000,
              volumes: [{ name: iso/ubuntu.iso, size: 1G }] }
          - { id: thin, type: lvmthin, content: [images], total: 100G, bandwidth: 200 }
          - { id: ceph, type: rbd, content: [images], total: 1T, shared: true, bandwidth: 500 }
          - { id: tiny, type: lvmthin, content: [images], total: 1G }
          - { id: isos, type: dir, content: [iso], total: 10G }
        bridges: [{ name: vmbr0 }]
        vms:
          - { vmid: 140, name: offline, disk: { storage: thin, size: 2G } }
          - { vmid: 141, name: online, disk: { storage: thin, size: 2G }, running: true }
          - { vmid: 142, name: errors, disk: { storage: thin, size: 2G } }
          - { vmid: 143, name: donor, disk: { storage: thin, size: 1G } }
          - { vmid: 144, name: receiver, disk: { storage: thin, size: 1G } }
`;

const MD = (vmid: number) => `/nodes/n1/qemu/${vmid}/move_disk`;

describe('move_disk (PVE 9.2)', () => {
  let sim: Simulator;
  let sc: SimCluster;
  let url: string;
  before(async () => {
    ({ sim, sc, url } = await startSim('9.2', TOPOLOGY, 'move.yaml'));
  });
  after(() => sim.close());

  it('offline: the drive on the new volume, the old one kept as unused0, both storages accounted', async () => {
    const thin = await storageUsed(url, 'n1', 'thin');
    const ceph = await storageUsed(url, 'n1', 'ceph');
    const upid = await start(url, MD(140), { disk: 'scsi0', storage: 'ceph' });
    assert.match(upid, /:qmmove:140:root@pam!test:$/);
    const { exit, log } = await finish(url, 'n1', upid);
    assert.equal(exit, 'OK');
    for (const l of [
      "copying volume 'thin:vm-140-disk-0' from current storage 'thin' to target storage 'ceph'",
      'create full clone of drive scsi0 (thin:vm-140-disk-0)',
      "allocated target volume 'ceph:vm-140-disk-0'",
      'transferred 2.0 GiB of 2.0 GiB (100.00%)',
      "adding source volume 'thin:vm-140-disk-0' as 'unused0' to config",
      'TASK OK',
    ])
      assert.ok(log.includes(l), `missing: ${l}\n${log.join('\n')}`);
    const cfg = await config(url, 'n1', 140);
    assert.equal(cfg.scsi0, 'ceph:vm-140-disk-0,size=2G');
    assert.equal(cfg.unused0, 'thin:vm-140-disk-0');
    assert.equal(await storageUsed(url, 'n1', 'thin'), thin);
    assert.equal(await storageUsed(url, 'n1', 'ceph'), ceph + 2 * GiB);
    // the unused disk can move too (8.4 on), with delete=1 it is freed afterwards
    const u = await start(url, MD(140), { disk: 'unused0', storage: 'local', delete: '1' });
    assert.equal((await finish(url, 'n1', u)).exit, 'OK');
    assert.equal((await config(url, 'n1', 140)).unused0, 'local:140/vm-140-disk-0.raw');
    assert.equal(await storageUsed(url, 'n1', 'thin'), thin - 2 * GiB);
  });

  it('online with delete=1: drive-mirror at the slower storage, the source freed after the copy', async () => {
    const thin = await storageUsed(url, 'n1', 'thin');
    const upid = await start(url, MD(141), { disk: 'scsi0', storage: 'local', delete: '1' });
    const { exit, log } = await finish(url, 'n1', upid);
    assert.equal(exit, 'OK');
    for (const l of [
      'drive mirror is starting for drive-scsi0',
      // 2 GiB at thin's 200 MB/s (local: 1000 MB/s)
      'drive-scsi0: transferred 2.0 GiB of 2.0 GiB (100.00%) in 11s, ready',
      'drive-scsi0: Completing block job...',
      'drive-scsi0: Completed successfully.',
      "removing source volume 'thin:vm-141-disk-0' after successful copy",
    ])
      assert.ok(log.includes(l), `missing: ${l}\n${log.join('\n')}`);
    const cfg = await config(url, 'n1', 141);
    assert.equal(cfg.scsi0, 'local:141/vm-141-disk-0.raw,size=2G');
    assert.equal(cfg.unused0, undefined);
    assert.equal(await storageUsed(url, 'n1', 'thin'), thin - 2 * GiB);
    assert.equal(
      data<{ status: string }>(await raw(url, 'GET', '/nodes/n1/qemu/141/status/current')).status,
      'running',
    );
  });

  it('holds the flock, not a config lock: others wait and time out', async () => {
    const stall = sc.addFault({ kind: 'task', type: 'qmmove', id: '142', action: 'stall', step: 2 });
    const upid = await start(url, MD(142), { disk: 'scsi0', storage: 'ceph' });
    await logUntil(url, 'n1', upid, /transferred 0\.0 B/);
    const cfg = await config(url, 'n1', 142);
    assert.equal(cfg.lock, undefined);
    const r = await raw(url, 'PUT', '/nodes/n1/qemu/142/config', { form: { description: 'x' } });
    assert.equal(r.reason, "can't lock file '/var/lock/qemu-server/lock-142.conf' - got timeout");
    sc.removeFault(stall);
    assert.equal((await finish(url, 'n1', upid)).exit, 'OK');
  });

  it('refusals before the task', async () => {
    const cases: Array<[Record<string, string>, number, string, Record<string, string>?]> = [
      [
        { disk: 'scsi0' },
        400,
        'Parameter verification failed.',
        {
          'target-vmid': "both 'storage' and 'target-vmid' missing, either needs to be set",
          storage: "both 'storage' and 'target-vmid' missing, either needs to be set",
        },
      ],
      [
        { disk: 'scsi0', storage: 'thin', 'target-vmid': '143' },
        400,
        'Parameter verification failed.',
        {
          'target-vmid': "either set 'storage' or 'target-vmid', but not both",
          storage: "either set 'storage' or 'target-vmid', but not both",
        },
      ],
      [{ disk: 'scsi3', storage: 'thin' }, 500, "disk 'scsi3' does not exist"],
      [{ disk: 'scsi0', storage: 'ceph' }, 500, "you can't move to the same storage with same format"],
      [{ disk: 'scsi0', storage: 'nope' }, 500, "storage 'nope' does not exist"],
      [
        { disk: 'scsi0', storage: 'isos' },
        400,
        'Parameter verification failed.',
        {
          storage: "storage 'isos' does not support vm images",
        },
      ],
      [
        { disk: 'scsi0', storage: 'thin', digest: '0'.repeat(40) },
        500,
        'detected modified configuration - file changed by other user? Try again.',
      ],
    ];
    for (const [form, status, reason, errors] of cases) {
      const r = await post(url, MD(142), form);
      assert.equal(r.status, status, JSON.stringify(form));
      assert.equal(r.reason, reason, JSON.stringify(form));
      if (errors) assert.deepEqual((r.json as { errors: unknown }).errors, errors);
    }
    // a CD-ROM
    await raw(url, 'PUT', '/nodes/n1/qemu/142/config', { form: { ide2: 'local:iso/ubuntu.iso,media=cdrom' } });
    assert.equal((await post(url, MD(142), { disk: 'ide2', storage: 'thin' })).reason, "you can't move a cdrom");
    const id = sc.addFault({ kind: 'lock', vmid: 142, lock: 'backup', flock: false });
    assert.equal((await post(url, MD(142), { disk: 'scsi0', storage: 'thin' })).reason, 'VM is locked (backup)');
    sc.removeFault(id);
  });

  it('a full target fails the task; no volume is left and the drive is unchanged', async () => {
    const upid = await start(url, MD(142), { disk: 'scsi0', storage: 'tiny' });
    const { exit } = await finish(url, 'n1', upid);
    assert.match(
      exit,
      /^storage migration failed: lvcreate 'pve\/vm-142-disk-0' error: {3}Volume group "pve" has insufficient free space/,
    );
    assert.deepEqual(await volumes(url, 'n1', 'tiny'), []);
    assert.equal((await config(url, 'n1', 142)).scsi0, 'ceph:vm-142-disk-0,size=2G');
  });

  it('with snapshots: no delete; without delete a warning', async () => {
    await finish(url, 'n1', await start(url, '/nodes/n1/qemu/143/snapshot', { snapname: 's1' }));
    const r = await post(url, MD(143), { disk: 'scsi0', storage: 'ceph', delete: '1' });
    assert.equal(r.reason, "you can't move a disk with snapshots and delete the source");
    const { exit, log } = await finish(url, 'n1', await start(url, MD(143), { disk: 'scsi0', storage: 'ceph' }));
    assert.equal(exit, 'WARNINGS: 1');
    assert.ok(log.includes('WARN: moving disk with snapshots, snapshots will not be moved!'));
  });

  it('target-vmid reassigns the volume to another VM on the node', async () => {
    await finish(url, 'n1', await start(url, MD(144), { disk: 'scsi0', storage: 'local' }));
    const upid = await start(url, MD(144), { disk: 'unused0', 'target-vmid': '143', 'target-disk': 'scsi1' });
    assert.match(upid, /:qmmove:144-unused0>143-scsi1:/);
    const { exit, log } = await finish(url, 'n1', upid);
    assert.equal(exit, 'OK');
    assert.ok(log.includes("reassign disk 'unused0' from VM '144' as 'scsi1' to VM '143'"));
    assert.equal((await config(url, 'n1', 144)).unused0, undefined);
    assert.equal((await config(url, 'n1', 143)).scsi1, 'thin:vm-143-disk-1');
    const r = await post(url, MD(143), { disk: 'scsi1', 'target-vmid': '143' });
    assert.deepEqual((r.json as { errors: unknown }).errors, {
      'target-vmid': 'must be different than source VMID to reassign disk',
    });
    assert.equal(
      (await post(url, MD(141), { disk: 'scsi0', 'target-vmid': '143', 'target-disk': 'scsi5' })).reason,
      'Cannot move disk to another VM while the source VM is running - detach first',
    );
  });
});

for (const profile of ['6.4', '7.4'] as Profile[]) {
  describe(`move_disk (PVE ${profile})`, () => {
    let sim: Simulator;
    let url: string;
    before(async () => {
      ({ sim, url } = await startSim(profile, TOPOLOGY, 'move.yaml'));
    });
    after(() => sim.close());

    it("moves without the 9.x log lines; the release's refusals", async () => {
      const { exit, log } = await finish(url, 'n1', await start(url, MD(140), { disk: 'scsi0', storage: 'ceph' }));
      assert.equal(exit, 'OK');
      assert.ok(!bare(log).some((l) => l.startsWith('copying volume')));
      assert.equal((await config(url, 'n1', 140)).unused0, 'thin:vm-140-disk-0');
      const r = await post(url, MD(142), { disk: 'scsi0', storage: 'thin', digest: '0'.repeat(40) });
      assert.equal(
        r.reason,
        profile === '6.4'
          ? 'VM config checksum missmatch (file change by other user?)'
          : 'detected modified configuration - file changed by other user? Try again.',
      );
      if (profile === '7.4')
        assert.equal(
          (await post(url, MD(140), { disk: 'unused0', storage: 'local' })).reason,
          "cannot move disk 'unused0', only configured disks can be moved to another storage",
        );
      // before 8.x the target storage is not checked before the copy: a missing one fails the task
      const t = await start(url, MD(142), { disk: 'scsi0', storage: 'nope' });
      assert.equal((await finish(url, 'n1', t)).exit, "storage migration failed: storage 'nope' does not exist");
    });
  });
}
