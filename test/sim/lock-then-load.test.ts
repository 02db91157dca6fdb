/**
 * qemu-server's workers take a VM's config lock, then load its config under it (vm_start:
 * src/PVE/QemuServer.pm:5504-5510 at e6352be; update_vm and the cloud-init update alike). A start
 * sent while a destroy held the lock therefore fails with "does not exist" once the destroy ends.
 * The simulator's start carried on with the VM it saw before the wait and regenerated the
 * destroyed VM's cloud-init drive: a volume of a VM that no longer exists, which real PVE cannot
 * leave (found by the fault search: "orphan disk ... vm-100-cloudinit").
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Simulator } from '../../src/sim/index.ts';
import { createVmAndWait, data, finish, NODE } from '../helpers/fidelity.ts';
import { raw, startTestSim } from '../helpers/sim.ts';

describe('a worker that waited for the lock of a VM destroyed meanwhile', () => {
  let sim: Simulator;
  let url: string;
  before(async () => {
    sim = await startTestSim();
    url = sim.cluster('site-1').url;
  });
  after(() => sim.close());

  /** VM `vmid` with a cloud-init drive, its destroy holding the lock until the returned release. */
  async function destroying(vmid: number): Promise<{ destroyed: Promise<string | undefined>; release: () => void }> {
    const c = sim.cluster('site-1');
    await createVmAndWait(url, { vmid: String(vmid), ide2: 'local-lvm:cloudinit', scsi0: 'local-lvm:1' });
    assert.ok(c.state.volume(NODE, `local-lvm:vm-${vmid}-cloudinit`), 'the cloud-init volume');
    const stall = c.addFault({ kind: 'task', type: 'qmdestroy', id: String(vmid), action: 'stall' });
    const upid = data<string>(await raw(url, 'DELETE', `/nodes/${NODE}/qemu/${vmid}`));
    return { destroyed: finish(url, upid), release: () => c.removeFault(stall) };
  }

  it('a start fails with "does not exist" and makes no volume', async () => {
    const c = sim.cluster('site-1');
    const { destroyed, release } = await destroying(330);
    const start = data<string>(await raw(url, 'POST', `/nodes/${NODE}/qemu/330/status/start`));
    release();
    assert.equal(await destroyed, 'OK');
    assert.equal(await finish(url, start), "Configuration file 'nodes/ml110-01/qemu-server/330.conf' does not exist");
    assert.equal(c.state.vms.get(330), undefined);
    assert.equal(c.state.volume(NODE, 'local-lvm:vm-330-cloudinit'), undefined, 'no cloud-init volume of VM 330');
  });

  it('a config update (a task) fails alike', async () => {
    const { destroyed, release } = await destroying(331);
    const update = data<string>(await raw(url, 'POST', `/nodes/${NODE}/qemu/331/config`, { form: { cores: '2' } }));
    release();
    assert.equal(await destroyed, 'OK');
    assert.equal(await finish(url, update), "Configuration file 'nodes/ml110-01/qemu-server/331.conf' does not exist");
  });
});
