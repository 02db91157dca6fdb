/**
 * Changes Proxmox keeps pending until a running VM reboots (cores, memory): before, status said
 * Ready/Synced True and the pending values were visible only in the state file. Now the
 * `PendingReboot` condition says which keys wait and how to apply them, and `rebootPolicy:
 * IfNeeded` reboots the VM to apply them.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Simulator } from '../../src/sim/index.ts';
import { cond, Engine, NODE1, SITE1, startSim, vm } from './harness.ts';

describe('pending changes and rebootPolicy', () => {
  let sim: Simulator;
  let eng: Engine;
  before(async () => {
    sim = await startSim();
    eng = await new Engine(sim).start();
  });
  after(async () => {
    await eng.stop();
    await sim.close();
  });

  it('memory raised on a running VM: Ready, PendingReboot True naming memory; IfNeeded reboots and applies it', async () => {
    const c = sim.cluster(SITE1);
    const key = eng.apply(vm('pending-1'));
    const r = await eng.waitReady(key);
    const vmid = r.status!.atProvider!.vmId!;
    assert.equal(cond(r, 'PendingReboot')?.status, 'False');

    eng.apply(vm('pending-1', { memory: '2Gi' }));
    const pending = await eng.waitFor(
      key,
      (x) => cond(x, 'PendingReboot')?.status === 'True' && x.status?.atProvider?.step === 'Ready',
      'PendingReboot True',
    );
    assert.deepEqual(pending.status?.atProvider?.pendingChanges, ['memory']);
    assert.equal(cond(pending, 'Ready')?.status, 'True', 'the VM itself is available');
    assert.match(cond(pending, 'PendingReboot')?.message ?? '', /memory.*rebootPolicy: IfNeeded/);
    assert.equal(c.state.vms.get(vmid)!.config.memory, '1024', 'still the old value until a reboot');

    eng.apply(vm('pending-1', { memory: '2Gi', rebootPolicy: 'IfNeeded' }));
    const applied = await eng.waitFor(
      key,
      (x) => cond(x, 'PendingReboot')?.status === 'False' && x.status?.atProvider?.step === 'Ready',
      'rebooted',
    );
    assert.equal(applied.status?.atProvider?.pendingChanges, undefined);
    assert.equal(c.state.vms.get(vmid)!.config.memory, '2048');
    assert.equal(c.state.vms.get(vmid)!.status, 'running');
    assert.ok(
      [...c.state.tasks.values()].some((t) => t.type === 'qmreboot' && t.id === String(vmid)),
      'a reboot task ran',
    );
    assert.equal(c.state.vms.get(vmid)!.node, NODE1);
  });
});
