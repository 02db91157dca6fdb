/**
 * A template on one node's local storage, a VM asked for on another node with a node-local storage:
 * PVE clones to another node only onto a shared storage (qemu-server clone_vm: "can't clone to
 * non-shared storage"), so the clone is made on the template's node and migrated to the VM's node
 * before it is configured and started; with no storage of that name on the template's node, a
 * clear error says what to change, and nothing is made.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Simulator } from '../../src/sim/index.ts';
import { PERMANENT_REASONS } from '../../src/vm/conditions.ts';
import { cond, Engine, SITE1, startSim, twoNodeTopology, vm } from './harness.ts';

/** pve-b also has a `fast` lvm-thin pool; the template is on pve-a's local-lvm. */
const TOPOLOGY = twoNodeTopology('clone-across-nodes.yaml', (n) =>
  n === 'pve-b'
    ? '          - { id: fast, type: lvmthin, content: [images, rootdir], total: 500G }\n'
    : `        vms:
          - { vmid: 9000, name: tmpl, template: true, cores: 1, memory: 1024, disk: { storage: local-lvm, size: 2G }, cloudinit: true, agent: true, guestAgent: true }
`,
);

describe('a clone onto another node with local storage', () => {
  let sim: Simulator;
  let eng: Engine;
  before(async () => {
    sim = await startSim({ topology: TOPOLOGY });
    eng = await new Engine(sim).start();
  });
  after(async () => {
    await eng.stop();
    await sim.close();
  });

  it('is cloned on the template node, then migrated: Ready on its node, one VM, its disk on that node', async () => {
    const c = sim.cluster(SITE1);
    const key = eng.apply(
      vm('across', { node: 'pve-b', storage: 'local-lvm', image: undefined, template: { vmid: 9000 } }),
    );
    const r = await eng.waitReady(key);
    const vmid = r.status!.atProvider!.vmId!;
    const made = c.state.vms.get(vmid)!;
    assert.equal(made.node, 'pve-b');
    assert.match(made.config.scsi0 ?? '', /^local-lvm:/);
    assert.equal(r.status!.atProvider!.placedNode, 'pve-b');
    // One clone (on pve-a, no target) and one migration; nothing else was made.
    assert.deepEqual(
      [...c.state.tasks.values()]
        .filter((t) => t.type === 'qmclone' || t.type === 'qmigrate')
        .map((t) => `${t.type}@${t.node}:${t.exitstatus}`),
      ['qmclone@pve-a:OK', 'qmigrate@pve-a:OK'],
    );
    assert.equal([...c.state.vms.values()].filter((v) => !v.config.template).length, 1);
  });

  it('no storage of that name on the template node: CloneAcrossNodes names the fix, and nothing is made', async () => {
    const c = sim.cluster(SITE1);
    const before = c.state.vms.size;
    const key = eng.apply(
      vm('nowhere', { node: 'pve-b', storage: 'fast', image: undefined, template: { vmid: 9000 } }),
    );
    const r = await eng.waitFor(
      key,
      (x) => cond(x, 'Synced')?.reason === 'CloneAcrossNodes',
      'Synced CloneAcrossNodes',
    );
    assert.match(cond(r, 'Synced')!.message!, /storage 'fast' on node pve-b is not shared.*Fix: a shared storage/);
    assert.equal(c.state.vms.size, before);
    // Only a change of the spec or the cluster helps: `apply` stops waiting, the controller backs off to its cap.
    assert.ok(PERMANENT_REASONS.has('CloneAcrossNodes'));
  });
});
