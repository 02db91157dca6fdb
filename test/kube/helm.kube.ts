/**
 * The Helm chart (deploy/helm/provider-proxmox) with the real `helm` (built from Go modules by
 * harness/build.sh) against the real kube-apiserver: lint, template with the common values
 * (replicas, leader election, resources, the ProviderConfig and its Secret, monitoring), install,
 * upgrade and uninstall. The apiserver has no kubelet, so the Deployment's pods never run: the
 * controller runs as a process with the Deployment's own arguments and the chart's ServiceAccount
 * token, which proves that the chart's RBAC and flags work, and makes a ProxmoxVM Ready.
 */
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parse, parseAllDocuments, stringify } from 'yaml';
import { type Simulator, startSimulator } from '../../src/sim/index.ts';
import { type Kube, startKube } from './harness.ts';
import {
  type ChildController,
  killAllControllers,
  kok,
  kreq,
  type Obj,
  ROOT,
  spawnController,
  waitFor,
} from './support.ts';
import { helm, kubectl, kubectlWait, ok, run, tokenKubeconfig } from './tools.ts';

const CHART = join(ROOT, 'deploy/helm/provider-proxmox');
const RELEASE = 'pp';
const NS = 'pp-system';
/** The chart's full name for release `pp`: `<release>-<chart>`. */
const FULL = `${RELEASE}-provider-proxmox`;
const KUBE_VERSION = '1.36.3';

/** A small ProxmoxVM of the default ClusterProviderConfig (the chart's). */
const SMALL_VM = stringify({
  apiVersion: 'proxmox.sankofa.io/v1alpha1',
  kind: 'ProxmoxVM',
  metadata: { name: 'helm-vm', namespace: 'default' },
  spec: {
    forProvider: {
      site: 'site-1',
      cpu: 1,
      memory: '512Mi',
      disk: '4Gi',
      storage: 'local-lvm',
      network: 'vmbr0',
      image: 'local:import/ubuntu-22.04-cloud.qcow2',
    },
    providerConfigRef: { kind: 'ClusterProviderConfig', name: 'default' },
  },
});

/** Every object the chart makes with these values (kind, namespace or '' for cluster scope, name). */
const RELEASE_OBJECTS: Array<[string, string, string]> = [
  ['serviceaccount', NS, FULL],
  ['secret', NS, `${FULL}-credentials`],
  ['clusterrole', '', FULL],
  ['clusterrolebinding', '', FULL],
  ['role', NS, `${FULL}-leader-election`],
  ['rolebinding', NS, `${FULL}-leader-election`],
  ['service', NS, `${FULL}-metrics`],
  ['deployment', NS, FULL],
  ['configmap', NS, `${FULL}-dashboard`],
  ['clusterproviderconfig', '', 'default'],
];

function docs(text: string): Obj[] {
  return parseAllDocuments(text)
    .map((d) => d.toJS() as Obj | null)
    .filter((d): d is Obj => Boolean(d));
}

/** The Deployment's container arguments without the ports (the test's processes get free ones). */
function controllerArgs(deployment: Obj): string[] {
  const args = [...(deployment.spec.template.spec.containers[0].args as string[])];
  for (const flag of ['--metrics-port', '--health-port']) {
    const i = args.indexOf(flag);
    if (i >= 0) args.splice(i, 2);
  }
  return args;
}

describe('Helm chart with the real helm: lint, template, install, upgrade, uninstall', () => {
  let kube: Kube;
  let sim: Simulator;
  let dir: string;
  let valuesFile: string;
  let controller: ChildController | undefined;

  before(async () => {
    [kube, sim] = await Promise.all([
      startKube(),
      startSimulator({
        ephemeralPorts: true,
        speed: 1000,
        authFailDelayMs: 0,
        tokens: ['root@pam!helm=5e1f0c7a-0000-4000-8000-00000000cafe'],
        seed: 17,
      }),
    ]);
    dir = await mkdtemp(join(tmpdir(), 'pp-helm-'));
    const token = sim.credentials.tokens[0]!;
    // The common settings a platform team sets, and a ProviderConfig pointing at the simulator.
    valuesFile = join(dir, 'values.yaml');
    writeFileSync(
      valuesFile,
      stringify({
        replicaCount: 2,
        leaderElection: { enabled: true, leaseDuration: '6s', renewDeadline: '4s', retryPeriod: '1s' },
        resources: { requests: { cpu: '50m', memory: '96Mi' }, limits: { cpu: '500m', memory: '256Mi' } },
        controller: { pollInterval: '30s', driftInterval: '10m', orphanScan: '0' },
        extraArgs: ['--task-poll', '50ms'],
        providerConfig: {
          create: true,
          name: 'default',
          sites: sim.clusters.map((c) => ({
            name: c.name,
            endpoints: [c.url],
            nodes: c.nodes,
            ...(c.tls ? { tls: { fingerprint: c.fingerprint } } : {}),
          })),
          credentials: { tokenId: token.tokenid, token: token.secret },
        },
        metrics: { grafanaDashboard: { enabled: true } },
      }),
    );
  });

  after(async () => {
    await killAllControllers();
    if (controller) {
      const errors = controller
        .log()
        .split('\n')
        .filter((l) => /"level":(5|6)\d/.test(l));
      if (errors.length) console.log(`controller errors:\n${errors.slice(-20).join('\n')}`);
    }
    await sim?.close();
    await kube?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('helm lint passes, with the defaults and with these values', async () => {
    for (const extra of [[], ['-f', valuesFile]]) {
      const out = await ok('helm', ['lint', '--strict', CHART, ...extra]);
      assert.match(out, /1 chart\(s\) linted, 0 chart\(s\) failed/);
    }
  });

  it('helm template renders replicas, leader election, resources, the ProviderConfig and its Secret', async () => {
    const rendered = docs(
      await ok('helm', ['template', RELEASE, CHART, '-n', NS, '--kube-version', KUBE_VERSION, '-f', valuesFile]),
    );
    const find = (kind: string) => rendered.find((o) => o.kind === kind);
    const dep = find('Deployment')!;
    assert.equal(dep.spec.replicas, 2);
    const c = dep.spec.template.spec.containers[0];
    assert.deepEqual(c.resources, {
      requests: { cpu: '50m', memory: '96Mi' },
      limits: { cpu: '500m', memory: '256Mi' },
    });
    const args = (c.args as string[]).join(' ');
    assert.match(args, /--lease-duration 6s --renew-deadline 4s --retry-period 1s/);
    assert.match(args, /--metrics-port 8080 --health-port 8081/);
    assert.match(args, /--poll 30s --drift-interval 10m --orphan-scan 0 --task-poll 50ms$/);
    const secret = find('Secret')!;
    assert.equal(secret.metadata.namespace, NS);
    assert.deepEqual(Object.keys(secret.stringData).sort(), ['token', 'tokenid']);
    const pc = find('ClusterProviderConfig')!;
    assert.deepEqual(pc.spec.credentials, {
      source: 'Secret',
      secretRef: { name: `${FULL}-credentials`, namespace: NS },
    });
    assert.equal(pc.spec.sites.length, sim.clusters.length);
    // The dashboard ConfigMap carries deploy/monitoring's JSON.
    const dash = find('ConfigMap')!;
    assert.deepEqual(
      JSON.parse(dash.data['provider-proxmox.json']),
      JSON.parse(readFileSync(join(ROOT, 'deploy/monitoring/grafana-dashboard.json'), 'utf8')),
    );
    assert.equal(find('PrometheusRule'), undefined, 'the PrometheusRule is off by default');

    // Leader election off: one flag, no lease timings. The PrometheusRule holds the rules file's groups.
    const single = docs(
      await ok('helm', [
        'template',
        RELEASE,
        CHART,
        '--kube-version',
        KUBE_VERSION,
        '--set',
        'leaderElection.enabled=false,metrics.prometheusRule.enabled=true,metrics.serviceMonitor.enabled=true',
      ]),
    );
    const singleArgs = (
      single.find((o) => o.kind === 'Deployment')!.spec.template.spec.containers[0].args as string[]
    ).join(' ');
    assert.match(singleArgs, /--leader-election false/);
    assert.doesNotMatch(singleArgs, /--lease-duration/);
    assert.equal(
      single.find((o) => o.kind === 'ClusterProviderConfig'),
      undefined,
      'no ProviderConfig unless asked',
    );
    const rule = single.find((o) => o.kind === 'PrometheusRule')!;
    assert.deepEqual(rule.spec, parse(readFileSync(join(ROOT, 'deploy/monitoring/prometheus-rules.yaml'), 'utf8')));
    assert.equal(single.find((o) => o.kind === 'ServiceMonitor')!.spec.endpoints[0].port, 'metrics');

    // A ProviderConfig without credentials is refused with a message that says what is missing.
    const bad = await run('helm', [
      'template',
      RELEASE,
      CHART,
      '--kube-version',
      KUBE_VERSION,
      '--set',
      'providerConfig.create=true,providerConfig.sites[0].name=s,providerConfig.sites[0].endpoints[0]=https://x:8006',
    ]);
    assert.notEqual(bad.code, 0);
    assert.match(
      bad.stderr,
      /providerConfig.credentials: tokenId \+ token, or username \+ password, or existingSecret/,
    );
  });

  it('helm install: CRDs and every object exist; the controller with its arguments and ServiceAccount makes a VM Ready', async (t) => {
    await helm(kube, ['install', RELEASE, CHART, '-n', NS, '--create-namespace', '-f', valuesFile]);
    assert.match(await helm(kube, ['status', RELEASE, '-n', NS]), /STATUS: deployed/);
    await kubectl(kube, ['wait', '--for=condition=Established', 'crd', '--all', '--timeout=60s']);
    for (const [kind, ns, name] of RELEASE_OBJECTS)
      await kubectl(kube, ['get', kind, name, ...(ns ? ['-n', ns] : []), '-o', 'name']);
    const dep = JSON.parse(await kubectl(kube, ['get', 'deployment', FULL, '-n', NS, '-o', 'json'])) as Obj;
    assert.equal(dep.spec.replicas, 2);
    assert.equal(dep.spec.template.spec.serviceAccountName, FULL);

    // What the pod would run: the Deployment's arguments, the chart's ServiceAccount token, POD_NAMESPACE.
    const tr = await kok(kube, 'POST', `/api/v1/namespaces/${NS}/serviceaccounts/${FULL}/token`, {
      body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: { expirationSeconds: 3600 } },
    });
    const kubeconfig = tokenKubeconfig(kube, tr.status.token, join(dir, 'sa.kubeconfig'));
    controller = await spawnController(kubeconfig, join(dir, 'controller.log'), [
      ...controllerArgs(dep),
      '--namespace',
      NS,
    ]);
    await kubectl(kube, ['apply', '-f', '-'], { input: SMALL_VM });
    await kubectlWait(kube, ['proxmoxvm/helm-vm'], 'condition=Ready');
    // It took the Lease in the release namespace (the chart's Role allows exactly that).
    const lease = await kok(
      kube,
      'GET',
      `/apis/coordination.k8s.io/v1/namespaces/${NS}/leases/provider-proxmox-leader`,
    );
    assert.equal(lease.spec.leaseDurationSeconds, 6);
    t.diagnostic(`leader ${lease.spec.holderIdentity}`);
  });

  it('helm upgrade changes replicas, leader election and resources in place', async () => {
    await helm(kube, [
      'upgrade',
      RELEASE,
      CHART,
      '-n',
      NS,
      '-f',
      valuesFile,
      '--set',
      'replicaCount=3,leaderElection.leaseDuration=8s,resources.limits.memory=384Mi',
    ]);
    const dep = JSON.parse(await kubectl(kube, ['get', 'deployment', FULL, '-n', NS, '-o', 'json'])) as Obj;
    assert.equal(dep.spec.replicas, 3);
    assert.equal(dep.spec.template.spec.containers[0].resources.limits.memory, '384Mi');
    assert.match((dep.spec.template.spec.containers[0].args as string[]).join(' '), /--lease-duration 8s/);
    assert.match(await helm(kube, ['history', RELEASE, '-n', NS]), /\n2\s.*deployed/);
  });

  it('helm uninstall (after the ProxmoxVMs are gone) leaves nothing of the release behind', async () => {
    // The ClusterProviderConfig keeps Crossplane's in-use finalizer while a ProxmoxVM uses it: delete
    // the VMs first, and let the controller release the config before the chart goes.
    await kubectl(kube, ['delete', 'proxmoxvm', '--all', '--timeout=90s']);
    await waitFor(
      'the in-use finalizer released',
      async () => {
        const pc = await kok(kube, 'GET', '/apis/proxmox.sankofa.io/v1alpha1/clusterproviderconfigs/default');
        return !(pc.metadata.finalizers ?? []).includes('in-use.crossplane.io');
      },
      30_000,
    );
    await controller!.kill('SIGTERM');
    await helm(kube, ['uninstall', RELEASE, '-n', NS, '--wait', '--timeout', '60s']);
    for (const [kind, ns, name] of RELEASE_OBJECTS) {
      await waitFor(`${kind} ${name} gone`, async () => {
        const r = await run('kubectl', ['get', kind, name, ...(ns ? ['-n', ns] : [])], { kube });
        return r.code !== 0 && /NotFound|not found/.test(r.stderr);
      });
    }
    // Nothing else carries the release's label either; the CRDs stay (Helm never deletes crds/).
    const left = await kubectl(kube, [
      'get',
      'all,secrets,configmaps,serviceaccounts,roles,rolebindings,clusterroles,clusterrolebindings,clusterproviderconfigs',
      '-A',
      '-l',
      `app.kubernetes.io/instance=${RELEASE}`,
      '-o',
      'name',
    ]);
    assert.equal(left.trim(), '');
    assert.equal((await helm(kube, ['list', '-A', '-q'])).trim(), '');
    assert.equal(
      (await kreq(kube, 'GET', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/proxmoxvms.proxmox.sankofa.io'))
        .status,
      200,
    );
  });
});
