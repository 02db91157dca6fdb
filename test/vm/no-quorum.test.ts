/**
 * A site whose cluster lost quorum (one of its two nodes down, no QDevice: src/sim/quorum.ts).
 * Proxmox refuses creates, starts and config writes until the node is back; the resource says so
 * (Synced False, NoQuorum, retried, nothing of the spec blamed) and converges once it is back.
 * A resize whose config write was refused grew the volume all the same, and a resize to that size
 * again writes nothing (Qemu.pm:6050): the provider reports the stale config (DiskSizeStale, with
 * `qm disk rescan`) instead of resizing for good. A destroy refused at its config write freed the
 * disks all the same: the VM left, ours, is reported (DiskVolumeMissing, with `qm destroy`) instead
 * of started for good (F87). A lock whose worker may run on a node that is down says so (whether a
 * task holds it cannot be seen until the node is back).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { SimCluster, Simulator } from '../../src/sim/index.ts';
import { driveSize } from '../../src/vm/spec.ts';
import { raw, waitTask } from '../helpers/sim.ts';
import { cond, Engine, ownedBy, SITE1, startSim, twoNodeTopology, vm } from './harness.ts';

const GiB = 1024 ** 3;

describe('a site without quorum', () => {
  let sim: Simulator;
  let eng: Engine;
  let c: SimCluster;
  before(async () => {
    sim = await startSim({ topology: twoNodeTopology('no-quorum.yaml') });
    c = sim.cluster(SITE1);
    eng = await new Engine(sim, { pollIntervalMs: 200 }).start();
  });
  after(async () => {
    await eng.stop();
    await sim.close();
  });

  it('a create refused for want of quorum is NoQuorum, retried, and made once, when the node is back', async () => {
    const crash = c.addFault({ kind: 'node-crash', node: 'pve-b' });
    const key = eng.apply(vm('quorum-create', { node: 'pve-a' }));
    const refused = await eng.waitSynced(key, 'NoQuorum');
    assert.equal(cond(refused, 'Synced')?.status, 'False');
    assert.match(cond(refused, 'Synced')?.message ?? '', /cluster not ready - no quorum\?/);
    assert.match(cond(refused, 'Synced')?.message ?? '', /Site site-1's Proxmox cluster has no quorum.*pvecm status/);
    assert.equal(ownedBy(c, refused.metadata.uid).length, 0, 'nothing was made');
    c.removeFault(crash);
    const made = await eng.waitReady(key);
    assert.equal(ownedBy(c, made.metadata.uid).length, 1);
  });

  it('a resize that grew the volume but could not write the config: DiskSizeStale with qm disk rescan, not a resize for good', async () => {
    const key = eng.apply(vm('quorum-resize', { node: 'pve-a', disk: '8Gi' }));
    const vmid = (await eng.waitReady(key)).status!.atProvider!.vmId!;
    const crash = c.addFault({ kind: 'node-crash', node: 'pve-b' });
    eng.apply(vm('quorum-resize', { node: 'pve-a', disk: '16Gi' }));
    const refused = await eng.waitSynced(key, 'NoQuorum');
    assert.match(cond(refused, 'Synced')?.message ?? '', /Permission denied/);
    const guest = c.state.vms.get(vmid)!;
    const volume = c.state.volume('pve-a', guest.config.scsi0!.split(',')[0]!)!;
    assert.equal(volume.size, 16 * GiB, 'the volume grew before the refused write');
    assert.equal(driveSize(guest.config.scsi0!), 8 * GiB);
    c.removeFault(crash);
    const stale = await eng.waitSynced(key, 'DiskSizeStale');
    assert.match(
      cond(stale, 'Synced')?.message ?? '',
      new RegExp(
        `scsi0 of VM ${vmid} is 16G or more on its storage .*Fix: qm disk rescan --vmid ${vmid} on node pve-a`,
      ),
    );
    const resizes = () =>
      [...c.state.tasks.values()].filter((t) => t.type === 'resize' && t.id === String(vmid)).length;
    const sent = resizes();
    assert.equal(sent, 2, 'the refused one, and the one that wrote nothing');
    // What `qm disk rescan` does: the volume's size into the config. The resource converges.
    guest.config.scsi0 = guest.config.scsi0!.replace(/size=[^,]+/, 'size=16G');
    const ready = await eng.waitReady(key);
    assert.equal(cond(ready, 'Synced')?.status, 'True');
    assert.equal(resizes(), sent, 'no resize after the report');
  });

  it('a create that lost the quorum before its final write leaves its placeholder: CreateInterrupted, saying so, with the fix', async () => {
    c.addFault({ kind: 'task', type: 'qmcreate', action: 'stall', step: 1 });
    const key = eng.apply(vm('quorum-placeholder', { node: 'pve-a' }));
    while (![...c.faults.active.values()].some((f) => f.reached)) await new Promise((r) => setTimeout(r, 5));
    const crash = c.addFault({ kind: 'node-crash', node: 'pve-b' });
    for (const [id, f] of c.faults.active) if (f.spec.kind === 'task') c.removeFault(id);
    // The task failed (not died) at its final write, and its cleanup could not unlink the placeholder.
    await eng.waitSynced(key, 'NoQuorum');
    c.removeFault(crash);
    const left = await eng.waitSynced(key, 'CreateInterrupted');
    const message = cond(left, 'Synced')?.message ?? '';
    const vmid = Number(/^observe failed: VM (\d+) /.exec(message)?.[1]);
    assert.equal(c.state.vms.get(vmid)?.config.lock, 'create');
    assert.match(
      message,
      /is left from a create of this resource whose task failed and left it \(its cleanup could not remove the config file, as when the cluster had no quorum\)/,
    );
    assert.match(message, /Permission denied\); Proxmox keeps its 'lock: create'/);
    assert.match(message, new RegExp(`Fix: on node pve-a run 'qm unlock ${vmid} && qm destroy ${vmid} --purge'`));
    // What the report says to run; the provider then makes the VM, once.
    c.state.vms.delete(vmid);
    const made = await eng.waitReady(key);
    assert.equal(ownedBy(c, made.metadata.uid).length, 1);
  });

  it('a VM whose disks a destroy refused for want of quorum freed: DiskVolumeMissing with qm destroy, not a start for good (F87)', async () => {
    const key = eng.apply(vm('quorum-diskless', { node: 'pve-a' }));
    const made = await eng.waitReady(key);
    const vmid = made.status!.atProvider!.vmId!;
    const crash = c.addFault({ kind: 'node-crash', node: 'pve-b' });
    // Another user stops the VM and destroys it: the disks are freed, the config write is refused.
    const call = async (method: 'POST' | 'DELETE', path: string) => {
      const res = await raw(c.url, method, `/nodes/pve-a/qemu/${vmid}${path}`, method === 'POST' ? { form: {} } : {});
      assert.equal(res.status, 200, res.text);
      return waitTask(c.url, 'pve-a', (res.json as { data: string }).data);
    };
    assert.equal((await call('POST', '/status/stop')).exitstatus, 'OK');
    assert.match((await call('DELETE', '')).exitstatus ?? '', /Permission denied/);
    const volume = c.state.vms.get(vmid)!.config.scsi0!.split(',')[0]!;
    assert.equal(c.state.volume('pve-a', volume), undefined, 'the destroy freed the disk before its write');
    c.removeFault(crash);
    const starts = () =>
      [...c.state.tasks.values()].filter((t) => t.type === 'qmstart' && t.id === String(vmid)).length;
    const before = starts();
    const missing = await eng.waitSynced(key, 'DiskVolumeMissing');
    const message = cond(missing, 'Synced')?.message ?? '';
    assert.match(
      message,
      new RegExp(`VM ${vmid} on node pve-a names disks whose volumes its storage does not hold: scsi0 \\(${volume}\\)`),
    );
    assert.match(message, new RegExp(`Fix: .*qm destroy ${vmid} --purge on node pve-a`));
    const sent = starts();
    assert.equal(sent - before, 1, 'one start, which failed');
    // Looked at again, and nothing sent while the disks are gone.
    const n = eng.attemptsOf(key).length;
    await eng.waitFor(key, () => eng.attemptsOf(key).length >= n + 2, 'two more reconciles');
    assert.equal(cond(eng.get(key), 'Synced')?.reason, 'DiskVolumeMissing');
    assert.equal(starts(), sent, 'no start after the report');
    // What the report says to run; the provider then makes the VM again, once.
    assert.equal((await call('DELETE', '')).exitstatus, 'OK');
    const again = await eng.waitReady(key);
    assert.equal(ownedBy(c, again.metadata.uid).length, 1);
  });

  it('a move to the other node of a VM whose disks a destroy freed: DiskVolumeMissing, the migration sent once, not for good (F94)', async () => {
    const key = eng.apply(vm('quorum-diskless-move', { node: 'pve-a', powerState: 'stopped' }));
    const vmid = (await eng.waitFor(key, (x) => x.status?.atProvider?.step === 'Ready', 'Ready')).status!.atProvider!
      .vmId!;
    const crash = c.addFault({ kind: 'node-crash', node: 'pve-b' });
    const res = await raw(c.url, 'DELETE', `/nodes/pve-a/qemu/${vmid}`, {});
    assert.equal(res.status, 200, res.text);
    assert.match(
      (await waitTask(c.url, 'pve-a', (res.json as { data: string }).data)).exitstatus ?? '',
      /Permission denied/,
    );
    c.removeFault(crash);
    const migrations = () =>
      [...c.state.tasks.values()].filter((t) => t.type === 'qmigrate' && t.id === String(vmid)).length;
    eng.apply(vm('quorum-diskless-move', { node: 'pve-b', powerState: 'stopped' }));
    await eng.waitSynced(key, 'DiskVolumeMissing');
    const sent = migrations();
    assert.ok(sent <= 1, `${sent} migrations sent`);
    const n = eng.attemptsOf(key).length;
    await eng.waitFor(key, () => eng.attemptsOf(key).length >= n + 2, 'two more reconciles');
    assert.equal(cond(eng.get(key), 'Synced')?.reason, 'DiskVolumeMissing');
    assert.equal(migrations(), sent, 'no migration after the report');
  });

  it('a lock whose worker may run on a node that is down: Locked, naming that node (LockWithoutTask once it is back: lock-holder.ts)', async () => {
    const key = eng.apply(vm('quorum-lock', { node: 'pve-a' }));
    const vmid = (await eng.waitReady(key)).status!.atProvider!.vmId!;
    // What a `qm migrate` to pve-b whose worker died leaves: the lock, and no task behind it.
    c.state.vms.get(vmid)!.config.lock = 'migrate';
    const crash = c.addFault({ kind: 'node-crash', node: 'pve-b' });
    const locked = await eng.waitFor(key, (r) => cond(r, 'Ready')?.reason === 'Locked', 'Locked');
    assert.match(
      cond(locked, 'Ready')?.message ?? '',
      /whether a task still holds the lock cannot be seen while node pve-b is offline/,
    );
    c.removeFault(crash);
    delete c.state.vms.get(vmid)!.config.lock;
    await eng.waitReady(key);
  });
});
