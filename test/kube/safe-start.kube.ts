/**
 * Safe start, as Crossplane's: the controller starts with the CRDs it finds. With the scale set's
 * CRD missing it is ready (/readyz says which CRD it waits for) and reconciles ProxmoxVMs; once
 * the CRD is installed, with no restart, it reconciles scale sets too. The controller runs as a
 * process with deploy/'s ServiceAccount, as in controller-processes.kube.ts.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { stringify } from 'yaml';
import { type Simulator, startSimulator } from '../../src/sim/index.ts';
import { type Kube, startKube } from './harness.ts';
import {
  applyCrds,
  type ChildController,
  createProviderConfig,
  httpGet,
  installRbac,
  killAllControllers,
  kreq,
  ROOT,
  serviceAccountKubeconfig,
  spawnController,
  waitFor,
} from './support.ts';
import { kubectl, kubectlWait } from './tools.ts';

const FOR_PROVIDER = {
  site: 'site-1',
  cpu: 1,
  memory: '512Mi',
  disk: '4Gi',
  storage: 'local-lvm',
  network: 'vmbr0',
  image: 'local:import/ubuntu-22.04-cloud.qcow2',
};

describe('safe start: a missing CRD holds back only its own kind', () => {
  let kube: Kube;
  let sim: Simulator;
  let dir: string;
  let controller: ChildController;

  before(async () => {
    [kube, sim] = await Promise.all([
      startKube(),
      startSimulator({
        ephemeralPorts: true,
        speed: 1000,
        authFailDelayMs: 0,
        tokens: ['root@pam!safe=5e1f0c7a-0000-4000-8000-000000005afe'],
        seed: 29,
      }),
    ]);
    dir = await mkdtemp(join(tmpdir(), 'pp-safe-start-'));
    await applyCrds(kube, (plural) => plural !== 'proxmoxvmscalesets');
    await installRbac(kube);
    await createProviderConfig(kube, sim);
  });

  after(async () => {
    await killAllControllers();
    await sim?.close();
    await kube?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('starts without the scale-set CRD, reconciles ProxmoxVMs, then picks the scale sets up when the CRD appears', async () => {
    assert.equal(
      (await kreq(kube, 'GET', '/apis/proxmox.sankofa.io/v1alpha1/proxmoxvmscalesets')).status,
      404,
      'the scale-set CRD is not installed',
    );
    const kubeconfig = await serviceAccountKubeconfig(kube, join(dir, 'sa.kubeconfig'));
    // spawnController waits for /readyz 200.
    controller = await spawnController(kubeconfig, join(dir, 'controller.log'), ['--leader-election', 'false']);
    const ready = await httpGet(controller.healthPort, '/readyz');
    assert.equal(ready.status, 200);
    assert.match(ready.text, /waiting for CRDs: proxmoxvmscalesets/);

    await kubectl(kube, ['apply', '-f', '-'], {
      input: stringify({
        apiVersion: 'proxmox.sankofa.io/v1alpha1',
        kind: 'ProxmoxVM',
        metadata: { name: 'early', namespace: 'default' },
        spec: { forProvider: FOR_PROVIDER, providerConfigRef: { kind: 'ClusterProviderConfig', name: 'default' } },
      }),
    });
    await kubectlWait(kube, ['proxmoxvm/early'], 'condition=Ready', '60s');

    await kubectl(kube, ['apply', '-f', join(ROOT, 'deploy/crds/proxmox.sankofa.io_proxmoxvmscalesets.yaml')]);
    await kubectl(kube, [
      'wait',
      '--for=condition=Established',
      'crd/proxmoxvmscalesets.proxmox.sankofa.io',
      '--timeout=30s',
    ]);
    // The informer looks again every 5 s: /readyz stops naming the CRD, and a scale set is served.
    await waitFor(
      '/readyz without the missing CRD',
      async () => !/waiting for CRDs/.test((await httpGet(controller.healthPort, '/readyz')).text),
      30_000,
      500,
    );
    await kubectl(kube, ['apply', '-f', '-'], {
      input: stringify({
        apiVersion: 'proxmox.sankofa.io/v1alpha1',
        kind: 'ProxmoxVMScaleSet',
        metadata: { name: 'late', namespace: 'default' },
        spec: {
          replicas: 2,
          template: {
            spec: { forProvider: FOR_PROVIDER, providerConfigRef: { kind: 'ClusterProviderConfig', name: 'default' } },
          },
        },
      }),
    });
    await kubectlWait(kube, ['proxmoxvmscaleset/late'], 'condition=Ready', '60s');
    const replicas = (await kubectl(kube, ['get', 'proxmoxvm', '-l', 'proxmox.sankofa.io/scaleset=late', '-o', 'name']))
      .trim()
      .split('\n');
    assert.equal(replicas.length, 2);
    assert.match(controller.log(), /resource not served \(CRD not installed\?\): waiting for it/);
    assert.match(controller.log(), /resource served now: watching it/);
  });
});
