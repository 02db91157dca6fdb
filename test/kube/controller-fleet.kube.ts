/**
 * The controller in-process against a real kube-apiserver + etcd (harness.ts) and the in-process
 * Proxmox VE simulator, installed and rolling out: install manifests (server-side dry run), CRD
 * validation, the seed fleet, printer columns, events, health and metrics, connection Secrets.
 *
 * The controller runs with the token of deploy/'s ServiceAccount, so every test here also proves
 * that deploy/rbac.yaml grants what the controller needs. What follows a create (conflicts, pausing,
 * failures, deletion, scale sets) is in controller-lifecycle.kube.ts; killing the controller and
 * running two replicas are in controller-processes.kube.ts.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { MESSAGES } from '../../src/api/proxmoxvm.ts';
import { KubeApi, loadKubeConfig } from '../../src/kube/api.ts';
import { ProviderController } from '../../src/kube/controller.ts';
import { statusCommand } from '../../src/local/commands.ts';
import { parseStatusList } from '../../src/local/status-list.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { controllerOptions, keepLog, NS, smallVm, startControllerSim } from './controller-fixtures.ts';
import { type Kube, startKube } from './harness.ts';
import {
  applyCrds,
  assertOneVmPerResource,
  collection,
  create,
  createProviderConfig,
  createTasks,
  freePort,
  get,
  httpGet,
  installManifests,
  installRbac,
  kreq,
  list,
  metric,
  type Obj,
  type Res,
  ROOT,
  readYaml,
  serviceAccountKubeconfig,
  simVms,
  vmPath,
  waitAllReady,
  waitFor,
  yamlFiles,
} from './support.ts';

describe('controller (in-process) on a real kube-apiserver with the simulator', () => {
  let kube: Kube;
  let sim: Simulator;
  let dir: string;
  let api: KubeApi;
  let ctl: ProviderController;
  let healthPort: number;
  let metricsPort: number;
  const dryRuns: Array<{ what: string; res: Res }> = [];
  const logs: string[] = [];

  before(async () => {
    [kube, sim] = await Promise.all([startKube(), startControllerSim()]);
    dir = await mkdtemp(join(tmpdir(), 'pp-kube-ctl-'));

    // The install manifests, POSTed with ?dryRun=All on the empty cluster: the cluster-scoped objects
    // first; the namespaced ones need their namespace to exist (as with `kubectl apply --dry-run=server`),
    // so it is created for real in between.
    const crds = yamlFiles(join(ROOT, 'deploy/crds')).flatMap(readYaml);
    const install = installManifests();
    const dryRun = async (o: Obj) =>
      dryRuns.push({
        what: `${o.kind} ${o.metadata.name}`,
        res: await kreq(kube, 'POST', collection(o.apiVersion, o.kind, o.metadata.namespace), {
          body: o,
          query: { dryRun: 'All', fieldValidation: 'Strict' },
        }),
      });
    const clusterScoped = (o: Obj) => !o.metadata.namespace;
    for (const o of [...install.filter(clusterScoped), ...crds]) await dryRun(o);
    await create(kube, install.find((o) => o.kind === 'Namespace')!);
    for (const o of install.filter((o) => !clusterScoped(o))) await dryRun(o);

    // Now for real: CRDs, the ServiceAccount and its RBAC, the simulator's ProviderConfig.
    await applyCrds(kube);
    await installRbac(kube);
    await create(kube, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
    await createProviderConfig(kube, sim);

    healthPort = await freePort();
    metricsPort = await freePort();
    api = new KubeApi(loadKubeConfig(await serviceAccountKubeconfig(kube, join(dir, 'sa.kubeconfig'))));
    ctl = new ProviderController(controllerOptions({ api, healthPort, metricsPort, logs }));
    await ctl.start();
    await waitFor('leadership', () => ctl.isLeader, 30_000);
  });

  after(async () => {
    await ctl?.stop();
    api?.close();
    await sim?.close();
    await kube?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
    keepLog(logs, 'fleet');
  });

  it('the install manifests apply cleanly (POST ?dryRun=All of every object in deploy/)', () => {
    const kinds = dryRuns.map((d) => d.what.split(' ')[0]);
    for (const k of [
      'Namespace',
      'ServiceAccount',
      'ClusterRole',
      'ClusterRoleBinding',
      'Role',
      'RoleBinding',
      'Deployment',
      'CustomResourceDefinition',
    ])
      assert.ok(kinds.includes(k), `deploy/ has a ${k}`);
    assert.equal(kinds.filter((k) => k === 'CustomResourceDefinition').length, 8);
    for (const d of dryRuns) {
      assert.ok(d.res.status === 201 || d.res.status === 200, `${d.what}: ${d.res.status} ${d.res.text.slice(0, 500)}`);
      // No warnings either: unknown fields, deprecated APIs, or a pod that violates the namespace's
      // "restricted" Pod Security Standard would show up here.
      assert.equal(d.res.headers.warning, undefined, `${d.what}: ${d.res.headers.warning}`);
    }
  });

  it("CRD validation rejects bad specs with the seed's messages (422)", async () => {
    const cases: Array<[string, Record<string, unknown>, string]> = [
      ['cpu 0', { cpu: 0 }, MESSAGES.cpu],
      ['cpu 2048', { cpu: 2048 }, MESSAGES.cpu],
      ['memory 64Mi', { memory: '64Mi' }, MESSAGES.memory],
      ['memory 3Ti', { memory: '3Ti' }, MESSAGES.memory],
      ['disk 512Mi', { disk: '512Mi' }, MESSAGES.disk],
      ['name too long', { name: `vm-${'x'.repeat(100)}` }, MESSAGES.name],
    ];
    for (const [what, fp, message] of cases) {
      const vm = smallVm(`invalid-${what.replace(/\W+/g, '-')}`, { spec: { forProvider: fp } });
      const res = await kreq(kube, 'POST', vmPath(NS), { body: vm });
      assert.equal(res.status, 422, `${what}: ${res.status} ${res.text.slice(0, 300)}`);
      assert.ok(res.json.message.includes(message), `${what}: the 422 names the seed's message: ${res.json.message}`);
    }
    // The same limits in range are accepted (dry run: nothing is created).
    const ok = smallVm('valid-limits', {
      spec: { forProvider: { cpu: 1024, memory: '2Ti', disk: '1Gi', name: 'x'.repeat(100) } },
    });
    const res = await kreq(kube, 'POST', vmPath(NS), { body: ok, query: { dryRun: 'All' } });
    assert.equal(res.status, 201, res.text);
  });

  it('the seed fleet (examples/production, 30 VMs) becomes Ready; kubectl get shows the printer columns', async (t) => {
    const fleet = yamlFiles(join(ROOT, 'examples/production')).flatMap(readYaml);
    assert.equal(fleet.length, 30);
    // The first create on site-2 is refused for contention on its storage's lock, as PVE's create
    // dies under many at once (pve-cluster Cluster.pm cfs_lock): sent again, and counted
    // `retried`, not `failed` (the metrics test below). (Not on site-1: the events test reads
    // basic-vm's clean create there.)
    sim.cluster('site-2').addFault({
      kind: 'task',
      type: 'qmcreate',
      action: 'fail',
      at: 'start',
      message: "unable to create VM 0 - cfs-lock 'storage-ceph-fs' error: got lock request timeout",
      count: 1,
    });
    for (const o of fleet) await create(kube, o);
    const ready = await waitAllReady(kube, 'default', undefined, 180_000);
    assert.equal(ready.length, 30);
    assertOneVmPerResource(sim, ready);
    for (const o of ready) {
      const vm = simVms(sim).find((v) => v.uid === o.metadata.uid)!;
      assert.equal(vm.status, 'running', `${o.metadata.name} runs`);
      assert.equal(vm.node, o.spec.forProvider.node);
      assert.equal(o.status.atProvider.state, 'running');
      assert.ok(o.metadata.finalizers?.includes('finalizer.managedresource.crossplane.io'));
    }

    // `kubectl get proxmoxvms`: the server-side Table.
    const table = await waitFor('a table with every IP', async () => {
      const t = (await kreq(kube, 'GET', vmPath('default'), { accept: 'application/json;as=Table;v=v1;g=meta.k8s.io' }))
        .json as {
        kind: string;
        columnDefinitions: Array<{ name: string }>;
        rows: Array<{ cells: string[] }>;
      };
      const ip = t.columnDefinitions.findIndex((c) => c.name === 'IP');
      return t.rows.length === 30 && t.rows.every((r) => r.cells[ip]) ? t : undefined;
    });
    assert.equal(table.kind, 'Table');
    const cols = table.columnDefinitions.map((c) => c.name);
    assert.deepEqual(cols, [
      'Name',
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
    const printed = [cols, ...table.rows.map((r) => r.cells.map(String))];
    const widths = cols.map((_, i) => Math.max(...printed.map((row) => row[i]!.length)));
    const text = printed.map((row) => row.map((c, i) => c.padEnd(widths[i]!)).join('   ')).join('\n');
    t.diagnostic(`kubectl get proxmoxvms (first rows):\n${text.split('\n').slice(0, 6).join('\n')}`);
    for (const row of table.rows) {
      const [name, readyCell, synced, ext, site, node, state, ip, pendingReboot, age] = row.cells as string[];
      const o = ready.find((x) => x.metadata.name === name)!;
      assert.ok(o, `row ${name}`);
      assert.equal(readyCell, 'True');
      assert.equal(synced, 'True');
      assert.equal(ext, o.metadata.annotations!['crossplane.io/external-name']);
      assert.match(ext!, /^\d+$/);
      assert.equal(site, o.status.atProvider.site, 'the site the VMID is unique in');
      assert.equal(node, o.spec.forProvider.node);
      assert.equal(state, 'running');
      assert.match(ip!, /^\d+\.\d+\.\d+\.\d+$/, `${name} IP in\n${text}`);
      assert.equal(pendingReboot, 'False', `${name} PENDING-REBOOT in\n${text}`);
      assert.match(age!, /^\d+[smhd]/, `${name} AGE in\n${text}`);
    }

    // `provider-proxmox status --kubeconfig`: the same VMs with phase, site and IP in one table.
    const chunks: string[] = [];
    const out = { write: (s: string) => chunks.push(s), isTTY: false } as unknown as NodeJS.WriteStream;
    assert.equal(
      await statusCommand({ kubeconfig: kube.kubeconfigPath, namespace: 'default', output: 'json', out }),
      0,
    );
    const rows = parseStatusList(chunks.join('')).items;
    assert.equal(rows.length, 30);
    for (const r of rows) {
      assert.equal(r.ready, true, r.name);
      assert.match(r.ipAddresses[0] ?? '', /^\d+\.\d+\.\d+\.\d+$/);
      assert.ok(r.phase && r.site, r.name);
    }
  });

  it('records Events for condition changes', async () => {
    const vm = (await get(kube, vmPath('default', 'basic-vm')))!;
    const events = await waitFor('events of basic-vm', async () => {
      const items = await list(kube, '/api/v1/namespaces/default/events', {
        fieldSelector: `involvedObject.uid=${vm.metadata.uid}`,
      });
      const reasons = new Set(items.map((e) => e.reason as string));
      return ['Creating', 'CreatedExternalResource', 'Available'].every((r) => reasons.has(r)) ? items : undefined;
    });
    // As crossplane-runtime: an event is for a change or an error, not for a successful observe.
    assert.ok(
      !events.some((e) => e.reason === 'ReconcileSuccess'),
      JSON.stringify(events.map((e) => [e.type, e.reason, e.message])),
    );
    // Its writes name their field manager: managedFields say what the provider wrote.
    const managers = (
      (vm.metadata as { managedFields?: Array<{ manager: string; subresource?: string }> }).managedFields ?? []
    ).map((m) => `${m.manager}${m.subresource ? `/${m.subresource}` : ''}`);
    // (`unknown` is this test's own create, sent without a user agent.)
    assert.ok(managers.includes('provider-proxmox'), managers.join(', '));
    assert.ok(managers.includes('provider-proxmox/status'), managers.join(', '));
    // crossplane-runtime annotates every event of a reconcile with the external name (AnnotatedEventf).
    const vmid = vm.metadata.annotations?.['crossplane.io/external-name'];
    const created = events.find((e) => e.reason === 'CreatedExternalResource')!;
    assert.equal(created.metadata.annotations?.['external-name'], vmid);
    assert.equal(created.message, `Successfully requested creation of external resource (external name ${vmid})`);
    for (const e of events) {
      assert.equal(e.involvedObject.kind, 'ProxmoxVM');
      assert.equal(e.involvedObject.name, 'basic-vm');
      assert.equal(e.source.component, 'provider-proxmox');
      assert.ok(e.message);
    }
    // A clean create warns about nothing: the seed's whole userData (its `packages` too) went into a
    // snippet over SSH, and cloud-init said done.
    assert.deepEqual(
      events.filter((e) => e.type === 'Warning').map((e) => e.reason),
      [],
      JSON.stringify(events.map((e) => [e.type, e.reason, e.message])),
    );
    assert.ok(
      events.some((e) => e.reason === 'Done' && /cloud-init: done/.test(e.message as string)),
      'the CloudInit condition turned True',
    );
  });

  it('serves /healthz, /readyz and /metrics', async () => {
    assert.deepEqual(await httpGet(healthPort, '/healthz'), { status: 200, text: 'ok\n' });
    const ready = await httpGet(healthPort, '/readyz');
    assert.equal(ready.status, 200);
    assert.match(ready.text, /leader/);
    const m = await waitFor(
      'metrics with resources by condition',
      async () => {
        const r = await httpGet(metricsPort, '/metrics');
        return metric(r.text, 'provider_proxmox_resources', { condition: 'Ready', status: 'True' }) >= 30
          ? r
          : undefined;
      },
      30_000,
    );
    assert.equal(m.status, 200);
    // controller-runtime's controller and workqueue metrics, named as crossplane-runtime names a controller.
    const controller = { controller: 'managed/proxmoxvm.proxmox.sankofa.io' };
    assert.ok(metric(m.text, 'controller_runtime_reconcile_total', { ...controller, result: 'requeue_after' }) >= 30);
    assert.ok(metric(m.text, 'controller_runtime_reconcile_time_seconds_count', controller) >= 30);
    assert.equal(metric(m.text, 'controller_runtime_max_concurrent_reconciles', controller), 8);
    assert.ok(!Number.isNaN(metric(m.text, 'controller_runtime_active_workers', controller)));
    assert.ok(metric(m.text, 'workqueue_adds_total', { name: controller.controller }) >= 30);
    assert.ok(metric(m.text, 'provider_proxmox_pve_requests_total', { class: 'ok' }) > 0, 'PVE calls by class');
    assert.ok(metric(m.text, 'provider_proxmox_vm_creates_total', { outcome: 'ok' }) >= 30, 'creates counted');
    assert.ok(metric(m.text, 'provider_proxmox_vm_creates_total', { outcome: 'retried' }) >= 1, 'refused for a lock');
    assert.ok(
      Number.isNaN(metric(m.text, 'provider_proxmox_vm_creates_total', { outcome: 'failed' })),
      'no failed create',
    );
    assert.equal(metric(m.text, 'provider_proxmox_leader'), 1);
    assert.ok(metric(m.text, 'provider_proxmox_kube_requests_total') > 0);
    assert.ok(!Number.isNaN(metric(m.text, 'workqueue_depth', { name: controller.controller })));
    assert.ok(metric(m.text, 'workqueue_queue_duration_seconds_count', { name: controller.controller }) > 0);
    assert.ok(metric(m.text, 'workqueue_work_duration_seconds_count', { name: controller.controller }) > 0);
    assert.ok(metric(m.text, 'workqueue_retries_total', { name: controller.controller }) > 0);
    assert.ok(!Number.isNaN(metric(m.text, 'workqueue_longest_running_processor_seconds', controller)));
    // crossplane-runtime's managed-resource metrics, with its gvk label.
    const gvk = { gvk: 'proxmox.sankofa.io/v1alpha1, Kind=ProxmoxVM' };
    assert.ok(metric(m.text, 'crossplane_managed_resource_exists', gvk) >= 30);
    assert.ok(metric(m.text, 'crossplane_managed_resource_ready', gvk) >= 30);
    assert.ok(metric(m.text, 'crossplane_managed_resource_synced', gvk) >= 30);
    assert.ok(metric(m.text, 'crossplane_managed_resource_first_time_to_reconcile_seconds_count', gvk) >= 30);
    assert.ok(metric(m.text, 'crossplane_managed_resource_first_time_to_readiness_seconds_count', gvk) >= 30);
    // Metrics on their own port; health answers there too, and nothing else is served.
    assert.equal((await httpGet(metricsPort, '/healthz')).status, 200);
    assert.equal((await httpGet(healthPort, '/nope')).status, 404);
  });

  it('writes the connection Secret (writeConnectionSecretToRef): endpoint, node, vmid, ip', async () => {
    const vm = await create(
      kube,
      smallVm('conn-1', {
        spec: { forProvider: { cloudInit: { user: 'ops' } }, writeConnectionSecretToRef: { name: 'conn-1-details' } },
      }),
    );
    await waitAllReady(kube, NS, ['conn-1']);
    // (Ready comes with the VM running; its address once the guest agent answered.)
    const secret = await waitFor('connection Secret with an IP', async () => {
      const s = await get(kube, `/api/v1/namespaces/${NS}/secrets/conn-1-details`);
      return s?.data?.ip ? s : undefined;
    });
    const ready = await waitFor('the address in status', async () => {
      const o = await get(kube, `/apis/proxmox.sankofa.io/v1alpha1/namespaces/${NS}/proxmoxvms/conn-1`);
      return o?.status?.atProvider?.ipAddresses?.length ? o : undefined;
    });
    assert.equal(secret.type, 'connection.crossplane.io/v1alpha1');
    assert.deepEqual(
      secret.metadata.ownerReferences?.map((o) => [o.kind, o.name, o.uid]),
      [['ProxmoxVM', 'conn-1', vm.metadata.uid]],
    );
    const data = Object.fromEntries(
      Object.entries(secret.data as Record<string, string>).map(([k, v]) => [k, Buffer.from(v, 'base64').toString()]),
    );
    assert.equal(data.vmid, ready!.metadata.annotations!['crossplane.io/external-name']);
    assert.equal(data.node, 'ml110-01');
    assert.equal(data.ip, ready!.status.atProvider.ipAddresses[0]);
    assert.equal(data.user, 'ops');
    assert.ok(data.endpoint, 'endpoint');
    const site = sim.cluster('site-1');
    assert.equal(data.endpoint, site.url, "endpoint: the site's Proxmox API");
  });

  it('no VM was created twice anywhere', () => {
    for (const [k, n] of createTasks(sim)) assert.equal(n, 1, `VM ${k}: ${n} create tasks`);
  });
});
