/**
 * `POST /nodes/{node}/qemu/{vmid}/migrate` inside one cluster, as a client observes it: the
 * synchronous refusals in qemu-server's order, the `qmigrate` task with `lock: migrate` while it
 * runs, local disks copied (shared ones not), a running VM that keeps running on the target,
 * the config and volumes on the target at the end (capacity on both sides), and the failures:
 * a full target storage, an offline target before and during the task, task faults, a held
 * flock. Durations are checked through the log's `(duration …)` (simulated time).
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
  MiB,
  nodeHead,
  post,
  start,
  startSim,
  storageUsed,
  vmRow,
  volumes,
} from './migration-helpers.ts';

const TOPOLOGY = `
clusters:
${clusterHead('site-1', 0)}${nodeHead('n1')}          - { id: local, type: dir, content: [iso, backup, images], total: 100G }
          - { id: thin, type: lvmthin, content: [images], total: 100G, bandwidth: 200 }
          - { id: ceph, type: rbd, content: [images], total: 1T, shared: true, bandwidth: 500 }
        bridges: [{ name: vmbr0 }]
        vms:
          - { vmid: 130, name: offline, disk: { storage: thin, size: 2G }, cloudinit: true }
          - { vmid: 131, name: live-shared, memory: 4096, disk: { storage: ceph, size: 2G }, running: true }
          - { vmid: 132, name: live-local, memory: 2048, disk: { storage: thin, size: 8G }, running: true }
          - { vmid: 133, name: mapped, disk: { storage: thin, size: 2G } }
          - { vmid: 134, name: too-big, disk: { storage: thin, size: 4G } }
          - { vmid: 135, name: ha, disk: { storage: ceph, size: 1G } }
          - { vmid: 136, name: faults, disk: { storage: thin, size: 2G } }
          - { vmid: 137, name: offline-target, disk: { storage: thin, size: 1G } }
          - { vmid: 138, name: live-no-flag, disk: { storage: thin, size: 1G }, running: true }
${nodeHead('n2')}          - { id: local, type: dir, content: [iso, backup, images], total: 100G }
          - { id: thin, type: lvmthin, content: [images], total: 100G }
          - { id: ceph, type: rbd, content: [images], total: 1T, shared: true }
          - { id: small, type: lvmthin, content: [images], total: 1G }
          - { id: isos, type: dir, content: [iso], total: 10G }
        bridges: [{ name: vmbr0 }]
${nodeHead('n3')}          - { id: local, type: dir, content: [iso, backup], total: 100G }
          - { id: ceph, type: rbd, content: [images], total: 1T, shared: true }
        bridges: [{ name: vmbr0 }]
`;

const M = (vmid: number) => `/nodes/n1/qemu/${vmid}/migrate`;

describe('migrate inside a cluster (PVE 9.2)', () => {
  let sim: Simulator;
  let sc: SimCluster;
  let url: string;
  before(async () => {
    ({ sim, sc, url } = await startSim('9.2', TOPOLOGY, 'migrate.yaml'));
  });
  after(() => sim.close());

  it('refuses before the task, in qemu-server order', async () => {
    let r = await post(url, M(130), { target: 'n1' });
    assert.equal(r.status, 400);
    assert.deepEqual((r.json as { errors: unknown }).errors, { target: 'target is local node.' });
    r = await post(url, M(130), { target: 'n9' });
    assert.equal(r.status, 500);
    assert.equal(r.reason, "no such cluster node 'n9'");
    // the test token is not root@pam itself
    r = await post(url, M(130), { target: 'n2', force: '1' });
    assert.deepEqual((r.json as { errors: unknown }).errors, { force: 'Only root may use this option.' });
    r = await post(url, '/nodes/n2/qemu/130/migrate', { target: 'n3' });
    assert.equal(r.reason, "Configuration file 'nodes/n2/qemu-server/130.conf' does not exist");
    r = await post(url, M(131), { target: 'n2' });
    assert.equal(r.reason, "can't migrate running VM without --online");
    // n3 has no `thin`: check_storage_availability
    r = await post(url, M(130), { target: 'n3' });
    assert.equal(r.reason, "storage 'thin' is not available on node 'n3'");
    r = await post(url, M(130), { target: 'n2', targetstorage: 'nope' });
    assert.equal(r.reason, "storage 'nope' does not exist");
    r = await post(url, M(130), { target: 'n2', targetstorage: 'isos' });
    assert.equal(r.reason, "storage 'isos' does not support vm images");
    r = await post(url, M(130), { target: 'n2', targetstorage: 'thin:ceph,thin:local' });
    assert.equal(r.status, 400);
    assert.deepEqual((r.json as { errors: unknown }).errors, {
      targetstorage: "failed to parse storage map: duplicate mapping for source 'thin'\n",
    });
    const id = sc.addFault({ kind: 'lock', vmid: 130, lock: 'backup', flock: false });
    r = await post(url, M(130), { target: 'n2' });
    assert.equal(r.reason, 'VM is locked (backup)');
    sc.removeFault(id);
  });

  it('offline: copies the local disks, holds lock migrate, moves the config and the capacity', async () => {
    const usedN1 = await storageUsed(url, 'n1', 'thin');
    const usedN2 = await storageUsed(url, 'n2', 'thin');
    const before = await config(url, 'n1', 130);
    const stall = sc.addFault({ kind: 'task', type: 'qmigrate', id: '130', action: 'stall', step: 2 });
    const upid = await start(url, M(130), { target: 'n2', 'with-local-disks': '1' });
    assert.match(upid, /^UPID:n1:[0-9A-F]{8}:[0-9A-F]{8}:[0-9A-F]{8}:qmigrate:130:root@pam!test:$/);
    await logUntil(url, 'n1', upid, /copying local disk images/);
    // while it runs: lock migrate (another digest), still on n1
    const during = await config(url, 'n1', 130);
    assert.equal(during.lock, 'migrate');
    assert.notEqual(during.digest, before.digest);
    assert.deepEqual([(await vmRow(url, 130))?.node, (await vmRow(url, 130))?.lock], ['n1', 'migrate']);
    const st = data<Record<string, unknown>>(await raw(url, 'GET', '/nodes/n1/qemu/130/status/current'));
    assert.equal(st.lock, 'migrate');
    assert.equal((await post(url, '/nodes/n1/qemu/130/config', { cores: '2' })).reason, 'VM is locked (migrate)');
    sc.removeFault(stall);
    const { exit, log } = await finish(url, 'n1', upid);
    assert.equal(exit, 'OK');
    const lines = bare(log);
    for (const l of [
      "starting migration of VM 130 to node 'n2' (127.0.0.11)",
      "found generated disk 'thin:vm-130-cloudinit' (in current VM config)",
      "found local disk 'thin:vm-130-disk-0' (attached)",
      'copying local disk images',
      "volume 'thin:vm-130-disk-0' is 'thin:vm-130-disk-0' on the target",
      // 2 GiB at the slower storage (200 MB/s) + 4 MiB + setup 0.3 s + finish 0.5 s
      'migration finished successfully (duration 00:00:11)',
      'TASK OK',
    ])
      assert.ok(lines.includes(l), `missing: ${l}\n${lines.join('\n')}`);
    assert.ok(log.includes('  Logical volume "vm-130-disk-0" successfully removed.'));
    // the VM is on n2 now, unlocked, its volumes with it
    const row = await vmRow(url, 130);
    assert.deepEqual([row?.node, row?.lock], ['n2', undefined]);
    const cfg = await config(url, 'n2', 130);
    assert.equal(cfg.scsi0, 'thin:vm-130-disk-0,size=2G');
    assert.equal(cfg.lock, undefined);
    assert.equal((await raw(url, 'GET', '/nodes/n1/qemu/130/config')).status, 500);
    assert.deepEqual(await volumes(url, 'n2', 'thin'), ['thin:vm-130-cloudinit', 'thin:vm-130-disk-0']);
    assert.ok(!(await volumes(url, 'n1', 'thin')).some((v) => v.includes('vm-130-')));
    assert.equal(await storageUsed(url, 'n1', 'thin'), usedN1 - 2 * GiB - 4 * MiB);
    assert.equal(await storageUsed(url, 'n2', 'thin'), usedN2 + 2 * GiB + 4 * MiB);
  });

  it('online on shared storage: nothing copied, the RAM moves, the VM keeps running', async () => {
    const upid = await start(url, M(131), { target: 'n2', online: '1' });
    const { exit, log } = await finish(url, 'n1', upid);
    assert.equal(exit, 'OK');
    const lines = bare(log);
    assert.ok(!lines.some((l) => l.startsWith('found local disk')));
    assert.ok(lines.includes('start migrate command to unix:/run/qemu-server/131.migrate'));
    assert.ok(lines.includes('migration completed, transferred 4.0 GiB VM-state'));
    // 4 GiB at 1000 MB/s (4.3 s) + the target's start 2.5 s + setup and finish 0.8 s
    assert.ok(lines.includes('migration finished successfully (duration 00:00:07)'), lines.join('\n'));
    const st = data<Record<string, unknown>>(await raw(url, 'GET', '/nodes/n2/qemu/131/status/current'));
    assert.equal(st.status, 'running');
    assert.equal((await config(url, 'n2', 131)).scsi0, 'ceph:vm-131-disk-0,size=2G');
  });

  it('online with local disks: drive-mirror to the target, then the RAM', async () => {
    const upid = await start(url, M(132), { target: 'n2', online: '1', 'with-local-disks': '1' });
    const { exit, log } = await finish(url, 'n1', upid);
    assert.equal(exit, 'OK', log.join('\n'));
    const lines = bare(log);
    for (const l of [
      "starting VM 132 on remote node 'n2'",
      "volume 'thin:vm-132-disk-0' is 'thin:vm-132-disk-0' on the target",
      'drive mirror is starting for drive-scsi0',
      'drive-scsi0: transferred 8.0 GiB of 8.0 GiB (100.00%) in 43s, ready',
      "all 'mirror' jobs are ready",
      'drive-scsi0: mirror-job finished',
      'stopping NBD storage migration server on target.',
    ])
      assert.ok(lines.includes(l), `missing: ${l}\n${lines.join('\n')}`);
    assert.equal(
      data<{ status: string }>(await raw(url, 'GET', '/nodes/n2/qemu/132/status/current')).status,
      'running',
    );
    assert.deepEqual(
      (await volumes(url, 'n2', 'thin')).filter((v) => v.includes('-132-')),
      ['thin:vm-132-disk-0'],
    );
  });

  it('a running VM with local disks but without with-local-disks fails its volume scan', async () => {
    const upid = await start(url, M(138), { target: 'n2', online: '1' });
    const { exit, log } = await finish(url, 'n1', upid);
    assert.equal(exit, 'migration aborted');
    const lines = bare(log);
    assert.ok(
      lines.includes(
        "can't migrate local disk 'thin:vm-138-disk-0': can't live migrate attached local disks without with-local-disks option",
      ),
      lines.join('\n'),
    );
    assert.ok(
      lines.includes(
        "ERROR: migration aborted (duration 00:00:00): Problem found while scanning volumes - can't migrate VM - check log",
      ),
    );
    assert.ok(lines.includes('aborting phase 1 - cleanup resources'));
    const row = await vmRow(url, 138);
    assert.deepEqual([row?.node, row?.lock], ['n1', undefined]);
  });

  it('targetstorage maps the local disk to another storage on the target', async () => {
    const upid = await start(url, M(133), { target: 'n2', targetstorage: 'ceph' });
    assert.equal((await finish(url, 'n1', upid)).exit, 'OK');
    assert.equal((await config(url, 'n2', 133)).scsi0, 'ceph:vm-133-disk-0,size=2G');
    assert.ok(!(await volumes(url, 'n1', 'thin')).includes('thin:vm-133-disk-0'));
  });

  it('a full target storage fails the copy; the VM stays on the source, nothing left on the target', async () => {
    const upid = await start(url, M(134), { target: 'n2', targetstorage: 'small' });
    const { exit, log } = await finish(url, 'n1', upid);
    assert.equal(exit, 'migration aborted');
    const lines = bare(log);
    assert.ok(
      lines.some((l) =>
        /^ERROR: storage migration for 'thin:vm-134-disk-0' to storage 'small' failed - command 'set -o pipefail && pvesm export .*' failed: exit code 255$/.test(
          l,
        ),
      ),
      lines.join('\n'),
    );
    assert.ok(
      lines.includes(
        `lvcreate 'pve/vm-134-disk-0' error:   Volume group "pve" has insufficient free space (256 extents): 1024 required.`,
      ),
    );
    assert.deepEqual(await volumes(url, 'n2', 'small'), []);
    const row = await vmRow(url, 134);
    assert.deepEqual([row?.node, row?.lock], ['n1', undefined]);
    assert.ok((await volumes(url, 'n1', 'thin')).includes('thin:vm-134-disk-0'));
  });

  it('an offline target fails the task at its connection test', async () => {
    const id = sc.addFault({ kind: 'node-offline', node: 'n2' });
    try {
      const upid = await start(url, M(137), { target: 'n2' });
      const { exit, log } = await finish(url, 'n1', upid);
      assert.equal(exit, 'migration aborted');
      assert.ok(
        bare(log).includes(
          "ERROR: migration aborted (duration 00:00:03): Can't connect to destination address using public key",
        ),
        log.join('\n'),
      );
    } finally {
      sc.removeFault(id);
    }
    assert.equal((await vmRow(url, 137))?.node, 'n1');
    // back online: bwlimit (KiB/s) slows the copy (1 GiB at 100 MiB/s instead of thin's 200 MB/s)
    const upid = await start(url, M(137), { target: 'n2', bwlimit: '102400' });
    const { exit, log } = await finish(url, 'n1', upid);
    assert.equal(exit, 'OK');
    assert.ok(bare(log).includes('migration finished successfully (duration 00:00:11)'), log.join('\n'));
  });

  it('a target that goes offline mid-copy fails it; the VM stays, the partial volume stays there', async () => {
    const stall = sc.addFault({ kind: 'task', type: 'qmigrate', id: '136', action: 'stall', step: 3 });
    const upid = await start(url, M(136), { target: 'n2' });
    await logUntil(url, 'n1', upid, /536870912 bytes/);
    const off = sc.addFault({ kind: 'node-offline', node: 'n2' });
    sc.removeFault(stall);
    const { exit, log } = await finish(url, 'n1', upid);
    sc.removeFault(off);
    assert.equal(exit, 'migration aborted');
    assert.ok(
      bare(log).some((l) => /^ERROR: storage migration for 'thin:vm-136-disk-0' to storage 'thin' failed/.test(l)),
    );
    const row = await vmRow(url, 136);
    assert.deepEqual([row?.node, row?.lock], ['n1', undefined]);
    // the import died with its node: its volume is still there when the node is back
    assert.ok((await volumes(url, 'n2', 'thin')).includes('thin:vm-136-disk-0'));
    await raw(url, 'DELETE', `/nodes/n2/storage/thin/content/${encodeURIComponent('thin:vm-136-disk-0')}`);
  });

  it('task faults: fail before the worker, a held flock, a worker that dies mid-copy', async () => {
    sc.addFault({ kind: 'task', type: 'qmigrate', id: '136', action: 'fail', at: 'start', message: 'boom' });
    let upid = await start(url, M(136), { target: 'n2' });
    assert.equal((await finish(url, 'n1', upid)).exit, 'boom');
    assert.equal((await vmRow(url, 136))?.lock, undefined);
    // the config flock held by someone else: lock_vm gives up after 10 s
    const lock = sc.addFault({ kind: 'lock', vmid: 136 });
    upid = await start(url, M(136), { target: 'n2' });
    const held = await finish(url, 'n1', upid);
    sc.removeFault(lock);
    assert.equal(held.exit, 'migration aborted');
    assert.ok(
      bare(held.log).some((l) => l.endsWith("can't lock file '/var/lock/qemu-server/lock-136.conf' - got timeout")),
      held.log.join('\n'),
    );
    // die at the 3rd wait (a quarter copied): no cleanup, exactly one config (on the source, locked)
    sc.addFault({ kind: 'task', type: 'qmigrate', id: '136', action: 'die', step: 3 });
    upid = await start(url, M(136), { target: 'n2' });
    const died = await finish(url, 'n1', upid);
    assert.equal(died.exit, 'unexpected status');
    assert.ok(!died.log.some((l) => l.startsWith('TASK')));
    const row = await vmRow(url, 136);
    assert.deepEqual([row?.node, row?.lock], ['n1', 'migrate']);
    assert.ok((await volumes(url, 'n2', 'thin')).includes('thin:vm-136-disk-0'));
  });

  it('an HA-managed VM: hamigrate, then the resource manager migrates it as root@pam', async () => {
    sc.state.vms.get(135)!.haManaged = true;
    const upid = await start(url, M(135), { target: 'n3' });
    assert.match(upid, /:hamigrate:135:/);
    const { exit, log } = await finish(url, 'n1', upid);
    assert.equal(exit, 'OK');
    assert.ok(log.includes('Requesting HA migration for VM 135 to node n3'));
    const tasks = data<Array<{ upid: string; user: string; type: string }>>(
      await raw(url, 'GET', '/nodes/n1/tasks?typefilter=qmigrate&vmid=135'),
    );
    assert.equal(tasks.length, 1);
    assert.equal(tasks[0]!.user, 'root@pam');
    assert.equal((await finish(url, 'n1', tasks[0]!.upid)).exit, 'OK');
    assert.equal((await vmRow(url, 135))?.node, 'n3');
  });
});

for (const profile of ['6.4', '7.4', '8.4'] as Profile[]) {
  describe(`migrate (PVE ${profile})`, () => {
    let sim: Simulator;
    let url: string;
    before(async () => {
      ({ sim, url } = await startSim(profile, TOPOLOGY, 'migrate.yaml'));
    });
    after(() => sim.close());

    it("offline with a local disk, the release's scan lines", async () => {
      const upid = await start(url, M(130), { target: 'n2' });
      const { exit, log } = await finish(url, 'n1', upid);
      assert.equal(exit, 'OK', log.join('\n'));
      const old = profile === '6.4' || profile === '7.4';
      assert.ok(
        bare(log).includes(`found local disk 'thin:vm-130-disk-0' (${old ? 'in current VM config' : 'attached'})`),
        log.join('\n'),
      );
      assert.equal((await vmRow(url, 130))?.node, 'n2');
    });

    it('a target storage without images', async () => {
      const r = await post(url, M(133), { target: 'n2', targetstorage: 'isos' });
      if (profile === '6.4') {
        assert.equal(r.status, 400);
        assert.deepEqual((r.json as { errors: unknown }).errors, {
          targetstorage: "storage 'isos' does not support vm images",
        });
      } else assert.equal(r.reason, "storage 'isos' does not support vm images");
    });
  });
}
