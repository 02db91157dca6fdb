/**
 * The provider as a platform engineer meets it, with the real `kubectl` (built from Go modules by
 * harness/build.sh) against the real kube-apiserver and the controller as a process (deploy/'s
 * ServiceAccount): `kubectl apply -f` the CRDs, the RBAC, a ProviderConfig of the simulator and
 * examples/production, then `kubectl wait`, `get` (printer columns, the managed/proxmox
 * categories), `explain` (field descriptions), `describe` (events with crossplane-runtime's
 * reasons), `scale` (the scale set's scale subresource and its Ready condition), `annotate`
 * crossplane.io/paused, and the real /metrics against the names the alerts use.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { stringify } from 'yaml';
import { type Simulator, startSimulator } from '../../src/sim/index.ts';
import { providerConfigYaml } from '../../src/sim/provider-config.ts';
import { type Kube, startKube } from './harness.ts';
import {
  type ChildController,
  httpGet,
  killAllControllers,
  ROOT,
  serviceAccountKubeconfig,
  spawnController,
  waitFor,
} from './support.ts';
import { kubectl, kubectlWait, table } from './tools.ts';

const IMAGE = 'local:import/ubuntu-22.04-cloud.qcow2';

/** The metric names an expression file uses (histogram series map to their family). */
export function metricNames(text: string): Set<string> {
  return new Set(
    [...text.matchAll(/(?:provider_proxmox|crossplane_managed_resource)_[a-z_]+/g)].map((m) =>
      m[0].replace(/_(bucket|sum|count)$/, ''),
    ),
  );
}

describe('kubectl against the provider: apply, wait, get, explain, describe, scale, annotate', () => {
  let kube: Kube;
  let sim: Simulator;
  let dir: string;
  let controller: ChildController;
  /** `kubectl apply -f DIR` takes the files of DIR, not of its subdirectories. */
  const production = readdirSync(join(ROOT, 'examples/production')).filter((f) => f.endsWith('.yaml'));

  before(async () => {
    [kube, sim] = await Promise.all([
      startKube(),
      startSimulator({
        ephemeralPorts: true,
        speed: 1000,
        authFailDelayMs: 0,
        tokens: ['root@pam!kubectl=5e1f0c7a-0000-4000-8000-00000000f00d'],
        seed: 23,
      }),
    ]);
    dir = await mkdtemp(join(tmpdir(), 'pp-kubectl-'));
    await kubectl(kube, ['apply', '-f', join(ROOT, 'deploy/crds')]);
    await kubectl(kube, ['wait', '--for=condition=Established', 'crd', '--all', '--timeout=60s']);
    for (const f of ['namespace.yaml', 'serviceaccount.yaml', 'rbac.yaml'])
      await kubectl(kube, ['apply', '-f', join(ROOT, 'deploy', f)]);
    await kubectl(kube, ['create', 'namespace', 'crossplane-system']);
    const pc = join(dir, 'providerconfig.yaml');
    writeFileSync(pc, providerConfigYaml(sim, { name: 'default' }));
    await kubectl(kube, ['apply', '-f', pc]);
    const kubeconfig = await serviceAccountKubeconfig(kube, join(dir, 'sa.kubeconfig'));
    // One replica, the default lease (15 s, renew deadline 10 s): nothing here is about failover,
    // and a 3 s renew deadline was missed on a loaded CI machine (the controller then exits by design).
    controller = await spawnController(kubeconfig, join(dir, 'controller.log'));
  });

  after(async () => {
    await killAllControllers();
    const errors = (controller?.log() ?? '').split('\n').filter((l) => /"level":(5|6)\d/.test(l));
    if (errors.length) console.log(`controller errors:\n${errors.slice(-20).join('\n')}`);
    await sim?.close();
    await kube?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('kubectl apply -f examples/production, then kubectl wait --for=condition=Ready proxmoxvm --all', async () => {
    const out = await kubectl(kube, ['apply', '-f', join(ROOT, 'examples/production')]);
    const created = out.trim().split('\n');
    assert.equal(created.length, production.length, out);
    for (const l of created) assert.match(l, /^proxmoxvm\.proxmox\.sankofa\.io\/\S+ created$/);
    // The examples' userData installs packages, which takes a cloud-init snippet uploaded over SSH;
    // the simulated sites have no SSH in their ProviderConfig, so apply the users and keys only.
    // (A CRD without the field prunes it: the patch is then a no-op.)
    const names = created.map((l) => l.split(' ')[0]!.split('/')[1]!);
    await kubectl(kube, [
      'patch',
      'proxmoxvm',
      ...names,
      '--type=merge',
      '-p',
      '{"spec":{"forProvider":{"cloudInit":{"userDataMode":"NativeOnly"}}}}',
    ]);
    await kubectlWait(kube, ['proxmoxvm', '--all'], 'condition=Ready', '120s');
    await kubectlWait(kube, ['proxmoxvm', '--all'], 'condition=Synced', '30s');
  });

  it('kubectl get proxmoxvm shows the documented columns; get managed / get proxmox list through the categories', async () => {
    const rows = table(await kubectl(kube, ['get', 'proxmoxvm']));
    assert.equal(rows.length, production.length);
    assert.deepEqual(Object.keys(rows[0]!), [
      'NAME',
      'READY',
      'SYNCED',
      'EXTERNAL-NAME',
      'SITE',
      'NODE',
      'STATE',
      'IP',
      'PENDING-REBOOT',
      'AGE',
    ]);
    for (const r of rows) {
      assert.equal(r.READY, 'True', JSON.stringify(r));
      assert.equal(r.SYNCED, 'True');
      assert.match(r['EXTERNAL-NAME']!, /^\d+$/, 'the VMID');
      assert.match(r.SITE!, /^site-\d$/, 'the site the VMID is unique in');
      assert.ok(r.NODE, 'a node');
      assert.equal(r.STATE, 'running');
    }
    const managed = (await kubectl(kube, ['get', 'managed', '-o', 'name'])).trim().split('\n');
    assert.equal(managed.filter((n) => n.startsWith('proxmoxvm.proxmox.sankofa.io/')).length, production.length);
    const proxmox = (await kubectl(kube, ['get', 'proxmox', '-A', '-o', 'name'])).trim().split('\n');
    assert.ok(proxmox.includes('clusterproviderconfig.proxmox.sankofa.io/default'), proxmox.join('\n'));
    assert.ok(proxmox.some((n) => n.startsWith('proxmoxvm.proxmox.sankofa.io/')));
  });

  it('kubectl explain prints a description for the fields of a ProxmoxVM', async () => {
    const memory = await kubectl(kube, ['explain', 'proxmoxvm.spec.forProvider.memory']);
    assert.match(memory, /DESCRIPTION:\s+Memory: a quantity \(4Gi, 512Mi\)/);
    for (const path of [
      'proxmoxvm.spec.forProvider',
      'proxmoxvm.spec.forProvider.cloudInit',
      'proxmoxvm.spec.forProvider.disks',
      'proxmoxvm.spec.providerConfigRef',
      'proxmoxvm.status.atProvider',
      'proxmoxvmscaleset.spec',
      'proxmoxvmscaleset.spec.template.spec.forProvider',
    ]) {
      const out = await kubectl(kube, ['explain', path]);
      assert.doesNotMatch(out, /<no description>|<empty>/, `${path}:\n${out}`);
      assert.match(out, /FIELDS:/, path);
    }
  });

  it('kubectl describe shows the events, with crossplane-runtime reasons beside the conditions', async () => {
    const out = await kubectl(kube, ['describe', 'proxmoxvm', 'basic-vm']);
    const events = out.slice(out.indexOf('Events:'));
    assert.match(events, /Normal\s+CreatedExternalResource\s.*Successfully requested creation of external resource/);
    assert.match(events, /Normal\s+UpdatedExternalResource\s/);
    assert.match(events, /Normal\s+Available\s/);
    // Deleting: DeletedExternalResource, on the events of the object (it is gone afterwards).
    await kubectl(kube, ['delete', 'proxmoxvm', 'vm-100', '--timeout=60s']);
    const ev = await kubectl(kube, [
      'get',
      'events',
      '--field-selector',
      'involvedObject.kind=ProxmoxVM,involvedObject.name=vm-100',
      '-o',
      'jsonpath={range .items[*]}{.reason}{"\\n"}{end}',
    ]);
    assert.ok(ev.split('\n').includes('DeletedExternalResource'), ev);
  });

  it('kubectl annotate crossplane.io/paused=true pauses: a spec change waits until the annotation goes', async () => {
    const vmid = Number(
      (
        await kubectl(kube, [
          'get',
          'proxmoxvm',
          'medium-vm',
          '-o',
          'jsonpath={.metadata.annotations.crossplane\\.io/external-name}',
        ])
      ).trim(),
    );
    // A CPU change of a running VM may wait for a reboot (Proxmox's pending section): either counts.
    const cores = () => {
      for (const c of sim.clusters) {
        const vm = [...c.state.vms.values()].find((v) => v.vmid === vmid && v.config.name === 'medium-vm');
        if (vm) return vm.pending.cores ?? vm.config.cores;
      }
      return undefined;
    };
    const before = cores();
    assert.ok(before, 'the VM exists');
    await kubectl(kube, ['annotate', 'proxmoxvm', 'medium-vm', 'crossplane.io/paused=true']);
    await kubectlWait(
      kube,
      ['proxmoxvm/medium-vm'],
      'jsonpath={.status.conditions[?(@.type=="Synced")].reason}=ReconcilePaused',
      '30s',
    );
    await kubectl(kube, [
      'patch',
      'proxmoxvm',
      'medium-vm',
      '--type=merge',
      '-p',
      '{"spec":{"forProvider":{"cpu":3}}}',
    ]);
    await new Promise((r) => setTimeout(r, 3000));
    assert.equal(cores(), before, 'paused: the VM is left as it was');
    await kubectl(kube, ['annotate', 'proxmoxvm', 'medium-vm', 'crossplane.io/paused-']);
    await waitFor('the change applied after unpausing', () => cores() === '3', 60_000);
    await kubectlWait(kube, ['proxmoxvm/medium-vm'], 'condition=Synced', '30s');
  });

  it('kubectl scale proxmoxvmscaleset through the scale subresource; kubectl wait for its Ready condition', async () => {
    await kubectl(kube, ['apply', '-f', '-'], {
      input: stringify({
        apiVersion: 'proxmox.sankofa.io/v1alpha1',
        kind: 'ProxmoxVMScaleSet',
        metadata: { name: 'web', namespace: 'default' },
        spec: {
          replicas: 2,
          template: {
            metadata: { labels: { app: 'web' } },
            spec: {
              forProvider: {
                site: 'site-2',
                cpu: 1,
                memory: '512Mi',
                disk: '4Gi',
                storage: 'local-lvm',
                network: 'vmbr0',
                image: IMAGE,
              },
              providerConfigRef: { kind: 'ClusterProviderConfig', name: 'default' },
            },
          },
        },
      }),
    });
    await kubectlWait(kube, ['proxmoxvmscaleset/web'], 'condition=Ready', '90s');
    await kubectlWait(kube, ['proxmoxvmscaleset/web'], 'condition=Synced', '10s');
    await kubectl(kube, ['scale', 'proxmoxvmscaleset/web', '--replicas=3']);
    // Ready goes False while the third replica is created, then True again with 3 of 3.
    await kubectlWait(kube, ['proxmoxvmscaleset/web'], 'jsonpath={.status.readyReplicas}=3', '90s');
    await kubectlWait(kube, ['proxmoxvmscaleset/web'], 'condition=Ready', '30s');
    const row = table(await kubectl(kube, ['get', 'proxmoxvmscaleset', 'web']))[0]!;
    assert.deepEqual(
      {
        READY: row.READY,
        SYNCED: row.SYNCED,
        DESIRED: row.DESIRED,
        CURRENT: row.CURRENT,
        'READY-REPLICAS': row['READY-REPLICAS'],
      },
      { READY: 'True', SYNCED: 'True', DESIRED: '3', CURRENT: '3', 'READY-REPLICAS': '3' },
    );
    const scale = JSON.parse(
      await kubectl(kube, [
        'get',
        '--raw',
        '/apis/proxmox.sankofa.io/v1alpha1/namespaces/default/proxmoxvmscalesets/web/scale',
      ]),
    );
    assert.deepEqual([scale.spec.replicas, scale.status.replicas], [3, 3]);
    assert.equal(scale.status.selector, 'proxmox.sankofa.io/scaleset=web');
    assert.equal(
      (await kubectl(kube, ['get', 'proxmoxvm', '-l', scale.status.selector, '-o', 'name'])).trim().split('\n').length,
      3,
    );

    await kubectl(kube, ['scale', 'proxmoxvmscaleset/web', '--replicas=1']);
    await kubectlWait(kube, ['proxmoxvmscaleset/web'], 'jsonpath={.status.replicas}=1', '90s');
    await kubectlWait(kube, ['proxmoxvmscaleset/web'], 'condition=Ready', '30s');
    const described = await kubectl(kube, ['describe', 'proxmoxvmscaleset', 'web']);
    for (const reason of ['SuccessfulCreate', 'SuccessfulDelete', 'Available', 'Creating'])
      assert.match(described, new RegExp(`Normal\\s+${reason}\\s`), `${reason} in\n${described}`);
  });

  it('the real /metrics exports every metric the alerts and the dashboard use', async () => {
    const rules = readFileSync(join(ROOT, 'deploy/monitoring/prometheus-rules.yaml'), 'utf8');
    const dashboard = readFileSync(join(ROOT, 'deploy/monitoring/grafana-dashboard.json'), 'utf8');
    const used = new Set([...metricNames(rules), ...metricNames(dashboard)]);
    // The gauges are refreshed every 15 s: wait for the first refresh.
    const text = await waitFor(
      'gauges refreshed',
      async () => {
        const t = (await httpGet(controller.metricsPort, '/metrics')).text;
        return /provider_proxmox_resources\{kind="ProxmoxVMScaleSet"/.test(t) ? t : undefined;
      },
      30_000,
      1000,
    );
    const exported = new Set([...text.matchAll(/^# TYPE (\S+)/gm)].map((m) => m[1]!));
    const missing = [...used].filter((n) => !exported.has(n));
    assert.deepEqual(missing, [], 'every name is exported');
    // The labels the rules select on are there too.
    for (const series of [
      /provider_proxmox_vm_creates_total\{outcome="ok"\} \d/,
      /provider_proxmox_vm_deletes_total\{outcome="ok"\} \d/,
      /provider_proxmox_vm_create_attempts_max\{outcome="ok"\} 1\b/,
      /provider_proxmox_resources\{kind="ProxmoxVM",condition="Ready",status="True"\} \d/,
      /provider_proxmox_pve_requests_total\{site="site-1",method="[A-Z]+",path="[^"]+",class="ok"\} \d/,
      /controller_runtime_reconcile_total\{controller="managed\/proxmoxvm\.proxmox\.sankofa\.io",result="requeue_after"\} \d/,
      /provider_proxmox_leader 1/,
      // crossplane-runtime's names and gvk label: the VMs applied here were first reconciled and
      // first Ready on this leader, and vm-100 was deleted.
      /crossplane_managed_resource_exists\{gvk="proxmox\.sankofa\.io\/v1alpha1, Kind=ProxmoxVM"\} [1-9]/,
      /crossplane_managed_resource_ready\{gvk="proxmox\.sankofa\.io\/v1alpha1, Kind=ProxmoxVM"\} [1-9]/,
      /crossplane_managed_resource_first_time_to_reconcile_seconds_count\{gvk="[^"]+, Kind=ProxmoxVM"\} [1-9]/,
      /crossplane_managed_resource_first_time_to_readiness_seconds_count\{gvk="[^"]+, Kind=ProxmoxVM"\} [1-9]/,
      /crossplane_managed_resource_deletion_seconds_count\{gvk="[^"]+, Kind=ProxmoxVM"\} [1-9]/,
    ])
      assert.match(text, series);
  });
});
