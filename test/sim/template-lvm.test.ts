/**
 * Templates and linked clones per storage type, as PVE does it: `POST .../template` turns a disk
 * into a base volume only where its storage has the `template` feature (lvmthin here), and skips
 * it on LVM (thick), whose plugin has no such feature (qemu-server QemuServer.pm template_create,
 * pve-storage LVMPlugin volume_has_feature); a linked clone of a disk that is no base volume is
 * refused ("Linked clone feature is not supported"), a full clone works.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { SimCluster, Simulator } from '../../src/sim/index.ts';
import { parseTopology } from '../../src/sim/topology.ts';
import { raw, startTestSim, waitTask } from '../helpers/sim.ts';

const NODE = 'pve-t';
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
        bridges: [{ name: vmbr0 }]
        vms:
          - { vmid: 120, name: tpl-thin, disk: { storage: thin, size: 1G } }
          - { vmid: 121, name: tpl-thick, disk: { storage: thick, size: 1G } }
`;

describe('templates and linked clones per storage type', () => {
  let sim: Simulator;
  let c: SimCluster;
  before(async () => {
    sim = await startTestSim({ topology: parseTopology(TOPOLOGY, 'template-lvm.yaml') });
    c = sim.cluster('site-1');
  });
  after(() => sim.close());

  async function task(method: string, path: string, form: Record<string, string> = {}) {
    const r = await raw(c.url, method, path, { form });
    assert.equal(r.status, 200, `${method} ${path}: ${r.text}`);
    return waitTask(c.url, NODE, (r.json as { data: string }).data);
  }

  it('lvmthin: the disk becomes a base volume and a linked clone is made', async () => {
    assert.equal((await task('POST', `/nodes/${NODE}/qemu/120/template`)).exitstatus, 'OK');
    assert.match(c.state.vms.get(120)!.config.scsi0 ?? '', /^thin:base-120-disk-0/);
    const t = await task('POST', `/nodes/${NODE}/qemu/120/clone`, { newid: '130', full: '0' });
    assert.equal(t.exitstatus, 'OK');
    assert.match(c.state.vms.get(130)!.config.scsi0 ?? '', /^thin:base-120-disk-0\/vm-130-disk-0/);
  });

  it('LVM (thick): the conversion skips the disk; a linked clone is refused, a full clone works', async () => {
    assert.equal((await task('POST', `/nodes/${NODE}/qemu/121/template`)).exitstatus, 'OK');
    assert.equal(c.state.vms.get(121)!.config.template, '1');
    assert.match(c.state.vms.get(121)!.config.scsi0 ?? '', /^thick:vm-121-disk-0/, 'no base volume on lvm');
    const linked = await raw(c.url, 'POST', `/nodes/${NODE}/qemu/121/clone`, { form: { newid: '131', full: '0' } });
    assert.equal(linked.status, 500);
    // The text of the profile's qemu-server ("for drive 'scsi0'" before the Proxmox OUI change).
    assert.match(
      linked.text,
      /Linked clone feature is not supported for ('thick:vm-121-disk-0' \(scsi0\)|drive 'scsi0')/,
    );
    assert.equal(c.state.vms.has(131), false);
    const full = await task('POST', `/nodes/${NODE}/qemu/121/clone`, { newid: '132', full: '1' });
    assert.equal(full.exitstatus, 'OK');
  });
});
