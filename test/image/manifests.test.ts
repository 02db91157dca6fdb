/**
 * ProxmoxImage and ProxmoxTemplate manifests: schema and spec problems with file, line and field,
 * references checked by validate (an imageRef or templateRef must name an object among the
 * manifests, in the referring object's namespace), templateRef exclusive with image and template,
 * and the example fleet (examples/templates) valid.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { validateManifests } from '../../src/fleet/validate.ts';
import { loadManifests } from '../../src/workspace/manifests.ts';

const dir = mkdtempSync(join(tmpdir(), 'image-manifests-'));
after(() => rmSync(dir, { recursive: true, force: true }));

function write(name: string, text: string): string {
  const f = join(dir, name);
  writeFileSync(f, text);
  return f;
}

const IMAGE = `apiVersion: proxmox.sankofa.io/v1alpha1
kind: ProxmoxImage
metadata: { name: ubuntu }
spec:
  forProvider:
    url: https://example.org/jammy.img
    checksum: { algorithm: sha256, value: ${'a'.repeat(64)} }
    fileName: jammy.qcow2
    content: import
`;

describe('ProxmoxImage and ProxmoxTemplate manifests', () => {
  it('loads both kinds apart from the VMs', () => {
    const f = write(
      'ok.yaml',
      `${IMAGE}---
apiVersion: proxmox.sankofa.io/v1alpha1
kind: ProxmoxTemplate
metadata: { name: ubuntu }
spec:
  forProvider: { imageRef: { name: ubuntu } }
`,
    );
    const m = loadManifests([f]);
    assert.deepEqual(m.problems, []);
    assert.equal(m.images.length, 1);
    assert.equal(m.templates.length, 1);
    assert.equal(m.images[0]!.obj.metadata.namespace, 'default');
    assert.equal(m.vms.length, 0);
  });

  it('reports a short checksum, a wrong extension and an unknown field with their lines', () => {
    const f = write(
      'bad.yaml',
      `apiVersion: proxmox.sankofa.io/v1alpha1
kind: ProxmoxImage
metadata: { name: bad }
spec:
  forProvider:
    url: https://example.org/jammy.img
    checksum: { algorithm: sha512, value: abcd }
    content: import
---
apiVersion: proxmox.sankofa.io/v1alpha1
kind: ProxmoxTemplate
metadata: { name: t }
spec:
  forProvider: { imageRef: { name: x }, storag: local-lvm }
`,
    );
    const m = loadManifests([f]);
    const by = Object.fromEntries(m.problems.map((p) => [p.field, p]));
    assert.match(by['spec.forProvider.checksum.value']!.message, /a sha512 checksum has 128 hex digits, found 4/);
    assert.equal(by['spec.forProvider.checksum.value']!.line, 7);
    assert.match(by['spec.forProvider.url']!.message, /file name 'jammy\.img' is not allowed for import content/);
    assert.match(by['spec.forProvider.storag']!.message, /unknown field 'storag' \(did you mean 'storage'\?\)/);
    assert.equal(by['spec.forProvider.storag']!.line, 14);
  });

  it('validate: references must name objects among the manifests, in the same namespace', () => {
    const f = write(
      'refs.yaml',
      `${IMAGE}---
apiVersion: proxmox.sankofa.io/v1alpha1
kind: ProxmoxTemplate
metadata: { name: tpl }
spec:
  forProvider: { imageRef: { name: ubunt } }
---
apiVersion: proxmox.sankofa.io/v1alpha1
kind: ProxmoxVM
metadata: { name: web, namespace: other }
spec:
  forProvider: { templateRef: { name: tpl } }
---
apiVersion: proxmox.sankofa.io/v1alpha1
kind: ProxmoxVM
metadata: { name: both }
spec:
  forProvider: { templateRef: { name: tpl }, image: local:import/x.qcow2 }
`,
    );
    const r = validateManifests([f]);
    const msgs = r.problems.map((p) => `${p.field}: ${p.message}`);
    assert.ok(
      msgs.some((m) =>
        /^spec\.forProvider\.imageRef\.name: names no ProxmoxImage among the manifests \(default\/ubunt.*did you mean 'ubuntu'/.test(
          m,
        ),
      ),
      msgs.join('\n'),
    );
    assert.ok(
      msgs.some((m) =>
        /^spec\.forProvider\.templateRef\.name: names no ProxmoxTemplate among the manifests \(other\/tpl/.test(m),
      ),
      msgs.join('\n'),
    );
    assert.ok(
      msgs.some((m) =>
        /^spec\.forProvider\.templateRef: set one of image, template and templateRef, not image and templateRef/.test(
          m,
        ),
      ),
      msgs.join('\n'),
    );
  });

  it('the example fleet with templates is valid', () => {
    const r = validateManifests(['examples/templates']);
    assert.deepEqual(r.problems, []);
    assert.equal(r.resources, 30);
    const m = loadManifests(['examples/templates']);
    assert.equal(m.images.length, 2);
    assert.equal(m.templates.length, 3);
    assert.ok(m.vms.every((x) => x.vm.spec.forProvider.templateRef && !x.vm.spec.forProvider.image));
  });
});
