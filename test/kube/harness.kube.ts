/**
 * The test harness itself: a real kube-apiserver + etcd answers through @kubernetes/client-node,
 * serves a CRD and its objects, and enforces RBAC. Run with `npm run test:kube`.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import {
  ApiException,
  ApiextensionsV1Api,
  CoreV1Api,
  CustomObjectsApi,
  KubeConfig,
  type V1CustomResourceDefinition,
} from '@kubernetes/client-node';
import { type Kube, startKube } from './harness.ts';

const GROUP = 'harness.test.provider-proxmox.io';
const VERSION = 'v1alpha1';
const PLURAL = 'widgets';
const NS = 'default';

const crd: V1CustomResourceDefinition = {
  apiVersion: 'apiextensions.k8s.io/v1',
  kind: 'CustomResourceDefinition',
  metadata: { name: `${PLURAL}.${GROUP}` },
  spec: {
    group: GROUP,
    scope: 'Namespaced',
    names: { plural: PLURAL, singular: 'widget', kind: 'Widget', listKind: 'WidgetList' },
    versions: [
      {
        name: VERSION,
        served: true,
        storage: true,
        schema: {
          openAPIV3Schema: {
            type: 'object',
            properties: {
              spec: {
                type: 'object',
                required: ['size'],
                properties: { size: { type: 'integer', minimum: 1 } },
              },
            },
          },
        },
      },
    ],
  },
};

function adminConfig(kube: Kube): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromFile(kube.kubeconfigPath);
  return kc;
}

function tokenConfig(kube: Kube, token: string): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [
      { name: 'h', server: kube.url, caData: Buffer.from(kube.caPem).toString('base64'), skipTLSVerify: false },
    ],
    users: [{ name: 'u', token }],
    contexts: [{ name: 'c', cluster: 'h', user: 'u' }],
    currentContext: 'c',
  });
  return kc;
}

async function statusOf(p: Promise<unknown>): Promise<number> {
  try {
    await p;
    return 200;
  } catch (err) {
    if (err instanceof ApiException) return err.code;
    throw err;
  }
}

async function eventually<T>(what: string, fn: () => Promise<T>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await fn();
    } catch (err) {
      if (Date.now() > deadline) throw new Error(`${what}: still failing after ${timeoutMs} ms`, { cause: err });
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}

describe('kube harness (real kube-apiserver + etcd)', () => {
  let kube: Kube;

  before(async () => {
    kube = await startKube();
  });

  after(async () => {
    await kube?.stop();
  });

  it('serves /readyz and the admin kubeconfig', async () => {
    assert.match(kube.url, /^https:\/\/127\.0\.0\.1:\d+$/);
    const core = adminConfig(kube).makeApiClient(CoreV1Api);
    const ns = await core.readNamespace({ name: NS });
    assert.equal(ns.metadata?.name, NS);
  });

  it('applies a CRD, then creates, validates and reads a custom object', async () => {
    const kc = adminConfig(kube);
    const ext = kc.makeApiClient(ApiextensionsV1Api);
    await ext.createCustomResourceDefinition({ body: crd });
    await eventually('CRD Established', async () => {
      const got = await ext.readCustomResourceDefinition({ name: crd.metadata!.name! });
      const established = got.status?.conditions?.find((c) => c.type === 'Established');
      assert.equal(established?.status, 'True');
    });

    const objs = kc.makeApiClient(CustomObjectsApi);
    const body = { apiVersion: `${GROUP}/${VERSION}`, kind: 'Widget', metadata: { name: 'w1' }, spec: { size: 3 } };
    // Right after Established the new resource can still be missing from the handler chain for a moment.
    await eventually('create Widget', () =>
      objs.createNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: NS, plural: PLURAL, body }),
    );
    const got = (await objs.getNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: NS,
      plural: PLURAL,
      name: 'w1',
    })) as { spec: { size: number }; metadata: { uid: string } };
    assert.equal(got.spec.size, 3);
    assert.ok(got.metadata.uid);

    // The OpenAPI schema is enforced by the real server.
    const bad = { ...body, metadata: { name: 'w2' }, spec: { size: 0 } };
    const code = await statusOf(
      objs.createNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: NS, plural: PLURAL, body: bad }),
    );
    assert.equal(code, 422);
  });

  it('RBAC denies an unprivileged service-account token', async () => {
    const core = adminConfig(kube).makeApiClient(CoreV1Api);
    await core.createNamespacedServiceAccount({ namespace: NS, body: { metadata: { name: 'nobody' } } });
    const tr = await core.createNamespacedServiceAccountToken({
      name: 'nobody',
      namespace: NS,
      body: { spec: { audiences: [], expirationSeconds: 600 } },
    });
    const token = tr.status?.token;
    assert.ok(token, 'TokenRequest returned no token');

    const kc = tokenConfig(kube, token);
    // Authenticated (not 401) but not authorized (403).
    assert.equal(await statusOf(kc.makeApiClient(CoreV1Api).listNamespacedSecret({ namespace: NS })), 403);
    assert.equal(
      await statusOf(
        kc
          .makeApiClient(CustomObjectsApi)
          .listNamespacedCustomObject({ group: GROUP, version: VERSION, namespace: NS, plural: PLURAL }),
      ),
      403,
    );
    // A garbage token is not authenticated at all.
    assert.equal(await statusOf(tokenConfig(kube, 'not-a-token').makeApiClient(CoreV1Api).listNamespace()), 401);
    // The admin still can.
    assert.equal(await statusOf(core.listNamespacedSecret({ namespace: NS })), 200);
  });
});
