/**
 * ProxmoxTemplate and ProxmoxVM.templateRef against the simulator: a cloud-init-ready template VM
 * per node built from a ProxmoxImage (import-from, cloud-init drive, agent, serial console, the
 * marker, `POST .../template`), VMs that wait for it (ReferenceNotReady) and then are linked
 * clones of it (full clones where the storage cannot link), one template for the site on a shared
 * storage, a new version next to the old one when the image changes (the old one removed once no
 * linked clone depends on it), and a deletion that waits while VMs clone the template.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { getCondition } from '../../src/engine/resource.ts';
import { parseMarker } from '../../src/vm/spec.ts';
import { cloneVm, image, isReady, NODES, syncedReason, template, World } from './harness.ts';

describe('ProxmoxTemplate and templateRef', () => {
  let w: World;
  let sha: string;
  before(async () => {
    w = await World.start();
    const f = w.files.add('/jammy.img', Buffer.alloc(200_000, 4));
    sha = f.sha256;
    w.applyImage(
      image('ubuntu', { url: f.url, checksum: { algorithm: 'sha256', value: f.sha256 }, fileName: 'jammy.qcow2' }),
    );
  });
  after(() => w.stop());

  it('a VM waits for its template (ReferenceNotReady), then the template is built per node and the VM is a linked clone', async () => {
    const vkey = w.applyVm(cloneVm('web-1', { node: 'pve2' }));
    let v = await w.waitVm(vkey, (o) => syncedReason(o) === 'ReferenceNotReady', 'ReferenceNotReady');
    assert.match(getCondition(v, 'Synced')!.message!, /no ProxmoxTemplate default\/ubuntu/);
    const tkey = w.applyTemplate(template('ubuntu'));
    const t = await w.waitTemplate(tkey, isReady, 'the template Ready');
    const a = t.status!.atProvider!;
    assert.match(a.version!, /^[0-9a-f]{8}$/);
    assert.deepEqual(
      a.nodes!.map((n) => [n.node, n.host, n.ready, n.linkedClone, n.storage]),
      NODES.map((n) => [n, n, true, true, 'local-lvm']),
    );
    for (const n of a.nodes!) {
      const sv = w.cluster.state.vms.get(n.vmid)!;
      assert.equal(sv.node, n.node);
      assert.equal(sv.config.template, '1');
      assert.equal(sv.config.name, `ubuntu-${a.version}`);
      assert.equal(sv.config.agent, '1');
      assert.equal(sv.config.serial0, 'socket');
      assert.equal(sv.config.vga, 'serial0');
      assert.match(sv.config.ide2 ?? '', /^local-lvm:vm-\d+-cloudinit/);
      assert.match(sv.config.scsi0 ?? '', new RegExp(`^local-lvm:base-${n.vmid}-disk-0`));
      const m = parseMarker(sv.config.description);
      assert.deepEqual(
        [m?.namespace, m?.name, m?.vmid, m?.installation],
        ['default', 'ubuntu', n.vmid, 'cli-default'],
        sv.config.description,
      );
      assert.match(sv.config.description ?? '', new RegExp(`sha256 ${sha}`));
    }
    v = await w.waitVm(vkey, (o) => isReady(o) && o.status?.atProvider?.step === 'Ready', 'the VM Ready');
    const vmid = v.status!.atProvider!.vmId!;
    const onPve2 = a.nodes!.find((n) => n.node === 'pve2')!;
    const disk = w.volumes('pve2', 'local-lvm').find((x) => x.vmid === vmid && !x.volid.includes('cloudinit'));
    assert.ok(disk, 'the clone has a disk');
    assert.equal(
      disk.parent,
      `local-lvm:base-${onPve2.vmid}-disk-0`,
      `a linked clone of ${onPve2.vmid}: ${disk.volid}`,
    );
  });

  it('a VM whose storage differs from the template’s is a full clone', async () => {
    const vkey = w.applyVm(cloneVm('full-1', { node: 'pve1', storage: 'thick' }));
    const v = await w.waitVm(vkey, (o) => isReady(o) && o.status?.atProvider?.step === 'Ready', 'the VM Ready');
    const vmid = v.status!.atProvider!.vmId!;
    const disk = w.volumes('pve1', 'thick').find((x) => x.vmid === vmid);
    assert.ok(disk, 'a disk on thick');
    assert.equal(disk.parent, undefined, 'a full copy');
  });

  it('on lvm (thick) no template is built: Proxmox VE cannot make base volumes there', async () => {
    const before = w.count('POST /nodes/{node}/qemu');
    const tkey = w.applyTemplate(template('thick-tpl', { storage: 'thick', nodes: ['pve1'] }));
    const t = await w.waitTemplate(tkey, (o) => syncedReason(o) === 'StorageCannotHoldTemplates', 'refused');
    assert.match(
      getCondition(t, 'Synced')!.message!,
      /storage 'thick' .* is of type lvm: .*can't create base images in lvm storage/,
    );
    assert.equal(w.count('POST /nodes/{node}/qemu'), before, 'nothing created');
    w.rt.templates.markDeleted(tkey);
  });

  it('on a shared storage one template serves every node', async () => {
    const tkey = w.applyTemplate(template('ceph-tpl', { storage: 'ceph' }));
    const t = await w.waitTemplate(tkey, isReady, 'the template Ready');
    const nodes = t.status!.atProvider!.nodes!;
    assert.equal(new Set(nodes.map((n) => n.vmid)).size, 1, 'one template VM');
    assert.deepEqual(
      nodes.map((n) => [n.node, n.host]),
      [
        ['pve1', 'pve1'],
        ['pve2', 'pve1'],
      ],
    );
    const vkey = w.applyVm(cloneVm('ceph-1', { node: 'pve2', storage: 'ceph', templateRef: { name: 'ceph-tpl' } }));
    const v = await w.waitVm(vkey, (o) => isReady(o) && o.status?.atProvider?.step === 'Ready', 'the VM Ready');
    assert.equal(v.status!.atProvider!.node, 'pve2');
    const disk = w
      .volumes('pve1', 'ceph')
      .find((x) => x.vmid === v.status!.atProvider!.vmId && !x.volid.includes('cloudinit'));
    assert.ok(disk?.parent?.startsWith(`ceph:base-${nodes[0]!.vmid}-`), `linked on the shared pool: ${disk?.volid}`);
  });

  it('a changed image builds a new version next to the old one, which goes once no linked clone depends on it', async () => {
    const tkey = 'default/ubuntu';
    const old = w.template(tkey).status!.atProvider!;
    const f2 = w.files.add('/jammy-2.img', Buffer.alloc(210_000, 5));
    w.applyImage(
      image('ubuntu', { url: f2.url, checksum: { algorithm: 'sha256', value: f2.sha256 }, fileName: 'jammy-2.qcow2' }),
    );
    const t = await w.waitTemplate(
      tkey,
      (o) =>
        isReady(o) &&
        o.status?.atProvider?.version !== old.version &&
        o.status?.atProvider?.image === 'local:import/jammy-2.qcow2',
      'the new version Ready',
    );
    const a = t.status!.atProvider!;
    for (const n of a.nodes!) assert.ok(!old.nodes!.some((o) => o.vmid === n.vmid), 'new VMIDs');
    // web-1 (pve2) and full-1's template on pve1: the old pve2 template has a linked clone.
    const oldPve2 = old.nodes!.find((n) => n.node === 'pve2')!.vmid;
    const oldPve1 = old.nodes!.find((n) => n.node === 'pve1')!.vmid;
    await w.waitTemplate(tkey, () => !w.cluster.state.vms.has(oldPve1), 'the unused old template destroyed');
    const who = (vmid: number) => `${vmid}: ${w.cluster.state.vms.get(vmid)?.config.name}`;
    const held = await w.waitTemplate(
      tkey,
      (o) => o.status?.atProvider?.retiring?.some((r) => r.vmid === oldPve2 && r.blockedBy?.length === 1) ?? false,
      'the old pve2 template kept for its linked clone',
    );
    assert.match(
      getCondition(held, 'Ready')!.message!,
      new RegExp(`old template VM ${oldPve2} stays while linked clones`),
    );
    assert.ok(w.cluster.state.vms.has(oldPve2));
    assert.deepEqual(held.status!.atProvider!.retiring!.find((r) => r.vmid === oldPve2)!.blockedBy!.map(who), [
      who(w.vm('default/web-1').status!.atProvider!.vmId!),
    ]);
    w.rt.markDeleted(['default/web-1']);
    await w.waitTemplate(tkey, () => !w.cluster.state.vms.has(oldPve2), 'the old template destroyed after its clone');
  });

  it('a template is not deleted while VMs clone it', async () => {
    const tkey = w.applyTemplate(template('del-tpl', { nodes: ['pve1'] }));
    await w.waitTemplate(tkey, isReady, 'the template Ready');
    const vkey = w.applyVm(cloneVm('del-1', { templateRef: { name: 'del-tpl' } }));
    await w.waitVm(vkey, (o) => isReady(o) && o.status?.atProvider?.step === 'Ready', 'the VM Ready');
    w.rt.templates.markDeleted(tkey);
    const t = await w.waitTemplate(tkey, (o) => syncedReason(o) === 'TemplateInUse', 'TemplateInUse');
    assert.match(getCondition(t, 'Synced')!.message!, /ProxmoxVMs default\/del-1 clone this template/);
    const vmid = t.status!.atProvider!.nodes![0]!.vmid;
    assert.ok(w.cluster.state.vms.has(vmid));
    w.rt.markDeleted([vkey]);
    await w.waitFor(
      () => w.rt.templates.getSync(tkey) ?? ({} as never),
      (o) => !o.metadata,
      'the template gone',
    );
    assert.ok(!w.cluster.state.vms.has(vmid), 'its template VM destroyed');
  });
});
