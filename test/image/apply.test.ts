/**
 * `apply` with images and templates: the ProxmoxImages first, then the ProxmoxTemplates, then the
 * VMs (linked clones); and a failed image stops the run (exit 1, the reason named) before any VM
 * is created. Against the simulator on the two-node site of harness.ts.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { applyCommand } from '../../src/local/apply.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { startTestSim } from '../helpers/sim.ts';
import { simConfig } from '../vm/harness.ts';
import { FileServer, topology } from './harness.ts';

function sink(): { stream: NodeJS.WriteStream; text: () => string } {
  let text = '';
  const w = new Writable({
    write(chunk, _enc, cb) {
      text += String(chunk);
      cb();
    },
  });
  return { stream: w as unknown as NodeJS.WriteStream, text: () => text };
}

const IMAGE = (checksum: string, url: string, name = 'ubuntu') => `apiVersion: proxmox.sankofa.io/v1alpha1
kind: ProxmoxImage
metadata: { name: ${name} }
spec:
  forProvider:
    site: site-1
    url: ${url}
    checksum: { algorithm: sha256, value: "${checksum}" }
    content: import
    fileName: ${name}.qcow2
  providerConfigRef: { name: default }
`;

const TEMPLATE = `apiVersion: proxmox.sankofa.io/v1alpha1
kind: ProxmoxTemplate
metadata: { name: ubuntu }
spec:
  forProvider: { site: site-1, imageRef: { name: ubuntu } }
  providerConfigRef: { name: default }
`;

const VM = (name: string) => `apiVersion: proxmox.sankofa.io/v1alpha1
kind: ProxmoxVM
metadata: { name: ${name} }
spec:
  forProvider: { site: site-1, node: pve1, cpu: 1, memory: 1Gi, agent: false, templateRef: { name: ubuntu } }
  providerConfigRef: { name: default }
`;

describe('apply with images and templates', () => {
  let sim: Simulator;
  let files: FileServer;
  const dir = mkdtempSync(join(tmpdir(), 'apply-images-'));
  before(async () => {
    // The two-node topology of harness.ts (1 MB/s storages: see its note on the copy model).
    sim = await startTestSim({ topology: topology(), ssh: false, speed: 100 });
    files = await new FileServer().start();
  });
  after(async () => {
    await files.close();
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  });

  async function apply(sub: string, docs: string[]) {
    const d = join(dir, sub);
    rmSync(d, { recursive: true, force: true });
    mkdirSync(d, { recursive: true });
    for (const [i, t] of docs.entries()) writeFileSync(join(d, `${i}.yaml`), t);
    const out = sink();
    const err = sink();
    const code = await applyCommand({
      files: [d],
      loadedConfig: simConfig(sim),
      state: join(dir, `${sub}.db`),
      out: out.stream,
      err: err.stream,
      quiet: true,
      taskPollMs: 20,
      agentPollMs: 20,
      creationGraceMs: 2000,
      timeoutMs: 60_000,
    });
    return { code, text: out.text() + err.text() };
  }

  it('downloads the image, builds the template, then makes the VMs linked clones', async () => {
    const f = files.add('/ubuntu.img', Buffer.alloc(100_000, 8));
    const c = sim.cluster('site-1');
    const clonesBefore = c.counters()['POST /nodes/{node}/qemu/{vmid}/clone'] ?? 0;
    const r = await apply('ok', [IMAGE(f.sha256, f.url), TEMPLATE, VM('web-a'), VM('web-b')]);
    assert.equal(r.code, 0, r.text);
    assert.equal((c.counters()['POST /nodes/{node}/qemu/{vmid}/clone'] ?? 0) - clonesBefore, 2);
    const tpl = [...c.state.vms.values()].filter(
      (v) => v.config.template === '1' && /^ubuntu-[0-9a-f]{8}$/.test(v.config.name ?? ''),
    );
    assert.deepEqual(tpl.map((v) => v.node).sort(), ['pve1', 'pve2'], 'a template VM per node');
    const onPve1 = tpl.find((v) => v.node === 'pve1')!;
    for (const name of ['web-a', 'web-b']) {
      const vm = [...c.state.vms.values()].find((v) => v.config.name === name)!;
      const disk = [...c.state.storage('pve1', 'local-lvm')!.volumes.values()].find(
        (v) => v.vmid === vm.vmid && !v.volid.includes('cloudinit'),
      );
      assert.equal(disk?.parent, `local-lvm:base-${onPve1.vmid}-disk-0`, `${name}: ${disk?.volid}`);
    }
  });

  it('a checksum mismatch fails the run before any VM is created, naming the reason', async () => {
    const f = files.add('/bad.img', Buffer.alloc(1000, 9));
    const c = sim.cluster('site-1');
    const creates = () =>
      (c.counters()['POST /nodes/{node}/qemu'] ?? 0) + (c.counters()['POST /nodes/{node}/qemu/{vmid}/clone'] ?? 0);
    const before = creates();
    const r = await apply('bad', [
      IMAGE('ab'.repeat(32), f.url, 'bad'),
      TEMPLATE.replace('name: ubuntu }', 'name: bad }').replace(
        'imageRef: { name: ubuntu }',
        'imageRef: { name: bad }',
      ),
      VM('web-c').replace('name: ubuntu }', 'name: bad }'),
    ]);
    assert.equal(r.code, 1, r.text);
    assert.match(r.text, /ProxmoxImage default\/bad failed: ChecksumMismatch: .*checksum mismatch/);
    assert.equal(creates(), before, 'no template built, no VM created');
  });
});
