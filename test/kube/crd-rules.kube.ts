/**
 * Rules of the generated CRDs that only a real API server can show, against kube-apiserver (the
 * harness applies deploy/crds, so an invalid rule or one over the CEL cost budget fails here):
 * - the placement of a ProxmoxVM (spec.forProvider.site, vmid) is immutable while its VM
 *   exists (status.atProvider.vmId set), with a message that says why and what to do;
 * - references to Secrets are Kubernetes names, so that no `../` in a name can make the controller
 *   read an object of another namespace (the REST layer refuses such a path as well).
 * Run with `npm run test:kube`.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { PLACEMENT_MESSAGE } from '../../src/api/crd-rules.ts';
import { KubeApi, KubeError, loadKubeConfig } from '../../src/kube/api.ts';
import { type Kube, startKube } from './harness.ts';
import { API, applyCrds, create, kok, kreq, type Obj, vmPath } from './support.ts';

const NS = 'default';

function vm(name: string, forProvider: Record<string, unknown> = {}, spec: Record<string, unknown> = {}): Obj {
  return {
    apiVersion: API,
    kind: 'ProxmoxVM',
    metadata: { name, namespace: NS },
    spec: {
      forProvider: { site: 'site-1', node: 'ml110-01', cpu: 1, memory: '512Mi', disk: '4Gi', ...forProvider },
      providerConfigRef: { name: 'default' },
      ...spec,
    },
  };
}

function patch(kube: Kube, name: string, body: unknown, sub = '') {
  return kreq(kube, 'PATCH', `${vmPath(NS, name)}${sub}`, { body, contentType: 'application/merge-patch+json' });
}

/** The VM exists: what the controller writes after the create, through the status subresource. */
async function vmCreated(kube: Kube, name: string, vmId = 100): Promise<void> {
  await kok(kube, 'PATCH', `${vmPath(NS, name)}/status`, {
    body: { status: { atProvider: { vmId, node: 'ml110-01', state: 'running' } } },
    contentType: 'application/merge-patch+json',
  });
}

describe('CRD rules on a real kube-apiserver', () => {
  let kube: Kube;

  before(async () => {
    kube = await startKube();
    await applyCrds(kube);
  });

  after(async () => {
    await kube?.stop();
  });

  it('before the VM exists, site, node and vmid may change', async () => {
    await create(kube, vm('placement-free'));
    for (const fp of [{ site: 'site-2' }, { node: 'r630-01' }, { vmid: 4242 }, { vmid: null }, { node: null }]) {
      const res = await patch(kube, 'placement-free', { spec: { forProvider: fp } });
      assert.equal(res.status, 200, `${JSON.stringify(fp)}: ${res.text.slice(0, 400)}`);
    }
  });

  it('while status.atProvider.vmId is set: vmid is refused with why and the fix; node and site (migrations) and other fields change', async () => {
    await create(kube, vm('placement-fixed', { vmid: 200 }));
    await vmCreated(kube, 'placement-fixed', 200);
    const refused: Array<[string, Record<string, unknown>]> = [
      ['vmid', { vmid: 201 }],
      ['vmid', { vmid: null }], // unsetting is a change too
    ];
    for (const [field, fp] of refused) {
      const res = await patch(kube, 'placement-fixed', { spec: { forProvider: fp } });
      assert.equal(res.status, 422, `${JSON.stringify(fp)}: ${res.status} ${res.text.slice(0, 400)}`);
      const cause = (res.json.details?.causes ?? []) as Array<{ field: string; message: string; reason: string }>;
      assert.deepEqual(
        cause.map((c) => [c.field, c.reason]),
        [[`spec.forProvider.${field}`, 'FieldValueForbidden']],
        res.text,
      );
      assert.ok(
        res.json.message.includes(`spec.forProvider.${field}: Forbidden: ${PLACEMENT_MESSAGE}`),
        res.json.message,
      );
      assert.match(
        res.json.message,
        /a VMID is the identity of a VM; revert the field, or delete and recreate the resource/,
      );
    }
    // Memory (and anything else) still changes; an unchanged placement in the same patch is fine.
    const ok = await patch(kube, 'placement-fixed', { spec: { forProvider: { memory: '1Gi', site: 'site-1' } } });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.json.spec.forProvider.memory, '1Gi');
    // A node change is a migration, a site change a remote migration: accepted.
    const node = await patch(kube, 'placement-fixed', { spec: { forProvider: { node: 'r630-01' } } });
    assert.equal(node.status, 200, node.text);
    const site = await patch(kube, 'placement-fixed', { spec: { forProvider: { site: 'site-2' } } });
    assert.equal(site.status, 200, site.text);
    // The controller's own writes pass: status, annotations and finalizers (a whole-object PUT too).
    await vmCreated(kube, 'placement-fixed', 200);
    const meta = await patch(kube, 'placement-fixed', {
      metadata: { annotations: { 'crossplane.io/external-name': '200' }, finalizers: ['test.example/keep'] },
    });
    assert.equal(meta.status, 200, meta.text);
    const cur = await kok(kube, 'GET', vmPath(NS, 'placement-fixed'));
    const put = await kreq(kube, 'PUT', vmPath(NS, 'placement-fixed'), { body: { ...cur, status: undefined } });
    assert.equal(put.status, 200, put.text);
    await patch(kube, 'placement-fixed', { metadata: { finalizers: null } });
  });

  it('Secret references are Kubernetes names: a ../ path into another namespace is refused at admission', async () => {
    const traversal = '../../kube-system/secrets/x';
    const cases: Array<[string, Obj]> = [
      [
        'spec.forProvider.cloudInit.passwordSecretRef.name',
        vm('ref-password', { cloudInit: { passwordSecretRef: { name: traversal, key: 'password' } } }),
      ],
      [
        'spec.forProvider.cloudInit.sshKeysSecretRef.name',
        vm('ref-ssh', { cloudInit: { sshKeysSecretRef: { name: traversal, key: 'keys' } } }),
      ],
      ['spec.writeConnectionSecretToRef.name', vm('ref-conn', {}, { writeConnectionSecretToRef: { name: traversal } })],
      ['spec.providerConfigRef.name', vm('ref-pc', {}, { providerConfigRef: { name: 'Default Config' } })],
    ];
    for (const [field, body] of cases) {
      const res = await kreq(kube, 'POST', vmPath(NS), { body, query: { dryRun: 'All' } });
      assert.equal(res.status, 422, `${field}: ${res.status} ${res.text.slice(0, 400)}`);
      const fields = ((res.json.details?.causes ?? []) as Array<{ field: string }>).map((c) => c.field);
      assert.ok(fields.includes(field), `${field}: ${JSON.stringify(fields)}`);
    }
    const good = vm('ref-ok', { cloudInit: { passwordSecretRef: { name: 'vm-passwords.v2', key: 'password' } } });
    const res = await kreq(kube, 'POST', vmPath(NS), { body: good, query: { dryRun: 'All' } });
    assert.equal(res.status, 201, res.text);
  });

  it('the REST layer refuses a path whose name would leave its namespace (URL dot segments)', async () => {
    const api = new KubeApi(loadKubeConfig(kube.kubeconfigPath));
    await create(kube, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'victim' } });
    await create(kube, { apiVersion: 'v1', kind: 'Secret', metadata: { name: 'creds', namespace: 'victim' } });
    // What a name like '../../victim/secrets/creds' would reach if the path went out as is:
    const sneaky = '/api/v1/namespaces/default/secrets/../../victim/secrets/creds';
    assert.equal((await kreq(kube, 'GET', sneaky)).status, 200, 'the URL resolves the dot segments');
    for (const path of [
      sneaky,
      '/api/v1/namespaces/default/secrets/%2E%2E/x',
      '/api/v1/namespaces/default/secrets/a b',
    ]) {
      await assert.rejects(
        api.request('GET', path),
        (e: unknown) => e instanceof KubeError && e.reason === 'InvalidPath',
        path,
      );
    }
    assert.equal(
      (await api.request<{ metadata: { name: string } }>('GET', '/api/v1/namespaces/victim/secrets/creds')).metadata
        .name,
      'creds',
    );
    api.close();
  });
});
