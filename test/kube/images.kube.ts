/**
 * ProxmoxImage, ProxmoxTemplate and templateRef in the controller, against a real kube-apiserver
 * and the simulator: the CRDs install (CEL rules included) and refuse a VM with both templateRef
 * and image; the image (adopting the file the simulator's storage holds) becomes Ready, the
 * template is built, a VM with templateRef is a linked clone of it; deleting the image while the
 * template refers to it waits (ImageInUse) with the image still there.
 *
 * The controller runs in-process with the admin's credentials: deploy/rbac.yaml does not grant the
 * two new kinds yet (see the report of issue 15). Run alone:
 * `node_modules/.bin/node --test test/kube/images.kube.ts`.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { KubeApi, loadKubeConfig } from '../../src/kube/api.ts';
import { ProviderController } from '../../src/kube/controller.ts';
import { type Simulator, startSimulator } from '../../src/sim/index.ts';
import { type Kube, startKube } from './harness.ts';
import {
  API,
  applyCrds,
  condition,
  createProviderConfig,
  get,
  isReady,
  kok,
  kreq,
  list,
  type Obj,
  waitFor,
} from './support.ts';

const NS = 'default';
/** support.ts knows the plurals of the older kinds only. */
const PLURALS: Record<string, string> = {
  ProxmoxImage: 'proxmoximages',
  ProxmoxTemplate: 'proxmoxtemplates',
  ProxmoxVM: 'proxmoxvms',
};
const coll = (kind: string) => `/apis/${API}/namespaces/${NS}/${PLURALS[kind]}`;
const path = (kind: string, name: string) => `${coll(kind)}/${name}`;
const post = (kube: Kube, o: Obj) => kok(kube, 'POST', coll(o.kind), { body: o });

describe('images and templates in the controller', () => {
  let kube: Kube;
  let sim: Simulator;
  let api: KubeApi;
  let ctl: ProviderController;

  before(async () => {
    [kube, sim] = await Promise.all([
      startKube(),
      startSimulator({
        ephemeralPorts: true,
        speed: 100,
        authFailDelayMs: 0,
        tokens: ['root@pam!kube=5e1f0c7a-0000-4000-8000-00000000c0de'],
        seed: 7,
      }),
    ]);
    await applyCrds(kube);
    await createProviderConfig(kube, sim);
    api = new KubeApi(loadKubeConfig(kube.kubeconfigPath));
    ctl = new ProviderController({
      api,
      namespace: NS,
      identity: 'images',
      leaderElection: false,
      taskPollMs: 50,
      orphanScanMs: 0,
      backoff: { baseMs: 100, capMs: 2000 },
      installation: 'kube-images-test',
    });
    await ctl.start();
  });

  after(async () => {
    await ctl?.stop();
    api?.close();
    await sim?.close();
    await kube?.stop();
  });

  it('the CRD refuses templateRef together with image', async () => {
    const res = await kreq(kube, 'POST', coll('ProxmoxVM'), {
      body: {
        apiVersion: API,
        kind: 'ProxmoxVM',
        metadata: { name: 'both', namespace: NS },
        spec: { forProvider: { templateRef: { name: 't' }, image: 'local:import/x.qcow2' } },
      },
    });
    assert.equal(res.status, 422, res.text);
    assert.match(res.text, /set at most one of image .*template .*templateRef/);
  });

  it('an image is adopted, a template built from it, and a VM with templateRef is its linked clone', async () => {
    const image: Obj = {
      apiVersion: API,
      kind: 'ProxmoxImage',
      metadata: { name: 'ubuntu', namespace: NS },
      spec: {
        forProvider: {
          site: 'site-1',
          url: 'http://127.0.0.1:1/ubuntu-22.04-cloud.qcow2',
          checksum: { algorithm: 'sha256', value: '0'.repeat(64) },
          content: 'import',
        },
      },
    };
    await post(kube, image);
    const img = await waitFor('the image Ready', async () => {
      const o = await get(kube, path('ProxmoxImage', 'ubuntu'));
      return isReady(o) ? o : undefined;
    });
    assert.equal(img.status.atProvider.volid, 'local:import/ubuntu-22.04-cloud.qcow2');
    assert.deepEqual(img.status.atProvider.adopted, ['ml110-01']);
    await post(kube, {
      apiVersion: API,
      kind: 'ProxmoxTemplate',
      metadata: { name: 'ubuntu', namespace: NS },
      spec: { forProvider: { site: 'site-1', imageRef: { name: 'ubuntu' } } },
    });
    await post(kube, {
      apiVersion: API,
      kind: 'ProxmoxVM',
      metadata: { name: 'clone-1', namespace: NS },
      spec: {
        forProvider: { site: 'site-1', node: 'ml110-01', cpu: 1, memory: '1Gi', templateRef: { name: 'ubuntu' } },
      },
    });
    const t = await waitFor(
      'the template Ready',
      async () => {
        const o = await get(kube, path('ProxmoxTemplate', 'ubuntu'));
        return isReady(o) ? o : undefined;
      },
      120_000,
    );
    const tvmid = t.status.atProvider.nodes[0].vmid as number;
    assert.equal(sim.cluster('site-1').state.vms.get(tvmid)?.config.template, '1');
    // A template's create is recorded as crossplane-runtime records any managed resource's.
    const created = await waitFor('the template creation event', async () => {
      const items = await list(kube, `/api/v1/namespaces/${NS}/events`, {
        fieldSelector: `involvedObject.uid=${t.metadata.uid}`,
      });
      return items.find((e) => e.reason === 'CreatedExternalResource');
    });
    assert.equal(created.involvedObject.kind, 'ProxmoxTemplate');
    assert.equal(
      created.metadata.annotations?.['external-name'],
      t.metadata.annotations?.['crossplane.io/external-name'],
    );
    const vm = await waitFor(
      'the VM Ready',
      async () => {
        const o = await get(kube, path('ProxmoxVM', 'clone-1'));
        return o && isReady(o) && o.status.atProvider.step === 'Ready' ? o : undefined;
      },
      120_000,
    );
    const vmid = vm.status.atProvider.vmId as number;
    const vols = [...sim.cluster('site-1').state.storage('ml110-01', 'local-lvm')!.volumes.values()];
    const disk = vols.find((v) => v.vmid === vmid && !v.volid.includes('cloudinit'));
    assert.equal(disk?.parent, `local-lvm:base-${tvmid}-disk-0`, disk?.volid);
  });

  it('an image in use is not deleted: ImageInUse, the file stays', async () => {
    await kreq(kube, 'DELETE', path('ProxmoxImage', 'ubuntu'));
    const o = await waitFor('ImageInUse', async () => {
      const x = await get(kube, path('ProxmoxImage', 'ubuntu'));
      return condition(x, 'Synced')?.reason === 'ImageInUse' ? x : undefined;
    });
    assert.ok(o.metadata.deletionTimestamp);
    assert.match(condition(o, 'Synced')!.message!, /ProxmoxTemplate default\/ubuntu still refer to this image/);
    const vols = sim.cluster('site-1').state.storage('ml110-01', 'local')!.volumes;
    assert.ok(vols.has('import/ubuntu-22.04-cloud.qcow2'));
  });
});
