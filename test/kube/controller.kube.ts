/**
 * The controller in-process against a real kube-apiserver + etcd (harness.ts) and the in-process
 * Proxmox VE simulator: install manifests (server-side dry run), CRD validation, the seed fleet,
 * printer columns, events, health and metrics, connection Secrets, status conflicts, paused
 * resources, deletion policies, ProviderConfig in-use protection and scale sets.
 *
 * The controller runs with the token of deploy/'s ServiceAccount, so every test here also proves
 * that deploy/rbac.yaml grants what the controller needs. Killing the controller and running two
 * replicas are in controller-processes.kube.ts.
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { MESSAGES } from '../../src/api/proxmoxvm.ts';
import { KubeApi, loadKubeConfig } from '../../src/kube/api.ts';
import { ProviderController } from '../../src/kube/controller.ts';
import { statusCommand } from '../../src/local/commands.ts';
import { parseStatusList } from '../../src/local/status-list.ts';
import { type Simulator, startSimulator } from '../../src/sim/index.ts';
import { type Kube, startKube } from './harness.ts';
import {
  API,
  applyCrds,
  assertOneVmPerResource,
  collection,
  condition,
  create,
  createProviderConfig,
  createTasks,
  del,
  freePort,
  get,
  httpGet,
  installManifests,
  installRbac,
  isReady,
  kreq,
  list,
  mergePatch,
  metric,
  type Obj,
  type Res,
  ROOT,
  readYaml,
  SYSTEM_NS,
  serviceAccountKubeconfig,
  simVms,
  vmPath,
  waitAllReady,
  waitFor,
  yamlFiles,
} from './support.ts';

const NS = 'tests';
const IMAGE = 'local:import/ubuntu-22.04-cloud.qcow2';

/** A small ProxmoxVM on site-1 (1 vCPU, 512 MiB, 4 GiB). */
function smallVm(
  name: string,
  extra: { spec?: Record<string, unknown>; metadata?: Record<string, unknown> } = {},
): Obj {
  const { forProvider, ...specRest } = (extra.spec ?? {}) as { forProvider?: Record<string, unknown> };
  return {
    apiVersion: API,
    kind: 'ProxmoxVM',
    metadata: { name, namespace: NS, ...extra.metadata },
    spec: {
      forProvider: {
        site: 'site-1',
        node: 'ml110-01',
        cpu: 1,
        memory: '512Mi',
        disk: '4Gi',
        storage: 'local-lvm',
        network: 'vmbr0',
        image: IMAGE,
        ...forProvider,
      },
      providerConfigRef: { name: 'default' },
      ...specRest,
    },
  };
}

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
    [kube, sim] = await Promise.all([
      startKube(),
      startSimulator({
        ephemeralPorts: true,
        speed: 1000,
        authFailDelayMs: 0,
        tokens: ['root@pam!kube=5e1f0c7a-0000-4000-8000-00000000c0de'],
        seed: 7,
      }),
    ]);
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
    ctl = new ProviderController({
      api,
      namespace: SYSTEM_NS,
      identity: 'in-process',
      leaderElection: true,
      leaseDurationMs: 4000,
      renewDeadlineMs: 3000,
      retryPeriodMs: 1000,
      taskPollMs: 50,
      orphanScanMs: 0,
      workers: 8,
      backoff: { baseMs: 100, capMs: 5000 },
      createFailureScheduleMs: [1000, 2000, 5000],
      healthPort,
      metricsPort,
      healthHost: '127.0.0.1',
      log: (level, msg, fields) => {
        if (level !== 'debug') logs.push(`${level} ${msg} ${JSON.stringify(fields ?? {})}`);
      },
    });
    await ctl.start();
    await waitFor('leadership', () => ctl.isLeader, 30_000);
  });

  after(async () => {
    await ctl?.stop();
    api?.close();
    await sim?.close();
    await kube?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
    // KUBE_TEST_LOG=file keeps the controller's log (info and up) for a closer look.
    if (process.env.KUBE_TEST_LOG) writeFileSync(process.env.KUBE_TEST_LOG, logs.join('\n'));
    const problems = logs.filter((l) => l.startsWith('error'));
    if (problems.length) console.log(`controller errors:\n${problems.slice(-30).join('\n')}`);
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

  it('status conflicts: the object changes while the controller writes status -> it retries, no error left', async () => {
    const before = metric((await httpGet(metricsPort, '/metrics')).text, 'provider_proxmox_kube_requests_total', {
      code: '409',
    });
    await create(kube, smallVm('conflict-1'));
    // Change the object (labels: a new resourceVersion, no new generation) as fast as the apiserver
    // allows while the controller reconciles it: its status and metadata writes carry the
    // resourceVersion it read, so they conflict.
    const seen: string[] = [];
    for (let i = 0; i < 150; i++) {
      const o = await mergePatch(kube, vmPath(NS, 'conflict-1'), { metadata: { labels: { hammer: String(i) } } });
      const s = condition(o, 'Synced');
      if (s) seen.push(`${s.status}/${s.reason}: ${s.message ?? ''}`);
      if (isReady(o) && i > 50) break;
    }
    const after = metric((await httpGet(metricsPort, '/metrics')).text, 'provider_proxmox_kube_requests_total', {
      code: '409',
    });
    assert.ok((Number.isNaN(after) ? 0 : after) > (Number.isNaN(before) ? 0 : before), 'the controller saw conflicts');
    const [o] = await waitAllReady(kube, NS, ['conflict-1']);
    assert.equal(condition(o, 'Synced')?.reason, 'ReconcileSuccess');
    assert.equal(condition(o, 'Synced')?.message, undefined);
    // A conflict is a plain requeue: never an error condition, never a Warning event.
    assert.ok(!seen.some((s) => /conflict|modified|409/i.test(s)), `no conflict surfaced: ${seen.join('\n')}`);
    const events = await list(kube, `/api/v1/namespaces/${NS}/events`, {
      fieldSelector: `involvedObject.uid=${o!.metadata.uid}`,
    });
    assert.deepEqual(
      events.filter((e) => e.type === 'Warning').map((e) => e.message),
      [],
      'no Warning events',
    );
    assertOneVmPerResource(sim, [o!]);
  });

  it('paused resources: Synced False ReconcilePaused, nothing created, no change applied', async () => {
    const paused = { 'crossplane.io/paused': 'true' };
    const created = await create(kube, smallVm('paused-1', { metadata: { annotations: paused } }));
    const p = await waitFor('paused-1 ReconcilePaused', async () => {
      const o = await get(kube, vmPath(NS, 'paused-1'));
      return condition(o, 'Synced')?.reason === 'ReconcilePaused' ? o : undefined;
    });
    assert.equal(condition(p, 'Synced')?.status, 'False');
    assert.equal(p.metadata.annotations?.['crossplane.io/external-name'], undefined, 'no VMID chosen');
    assert.equal(simVms(sim).filter((v) => v.uid === created.metadata.uid).length, 0, 'no VM created');
    const pausedEvents = await waitFor('the event of paused-1', async () => {
      const items = await list(kube, `/api/v1/namespaces/${NS}/events`, {
        fieldSelector: `involvedObject.uid=${created.metadata.uid}`,
      });
      return items.length ? items : undefined;
    });
    assert.deepEqual(
      pausedEvents.map((e) => `${e.type} ${e.reason}`),
      ['Normal ReconciliationPaused'],
      "crossplane-runtime's reason, once",
    );

    // Unpaused: it is created.
    await mergePatch(kube, vmPath(NS, 'paused-1'), { metadata: { annotations: { 'crossplane.io/paused': null } } });
    const [ready] = await waitAllReady(kube, NS, ['paused-1']);
    const vmid = Number(ready!.metadata.annotations!['crossplane.io/external-name']);

    // Paused again together with a spec change: the change is not applied.
    const changed = await mergePatch(kube, vmPath(NS, 'paused-1'), {
      metadata: { annotations: paused },
      spec: { forProvider: { description: 'changed while paused' } },
    });
    await waitFor('paused-1 paused at the new generation', async () => {
      const o = await get(kube, vmPath(NS, 'paused-1'));
      const s = condition(o, 'Synced') as { reason: string; observedGeneration?: number } | undefined;
      return s?.reason === 'ReconcilePaused' && s.observedGeneration === changed.metadata.generation;
    });
    const cfg = () => sim.cluster('site-1').state.vms.get(vmid)!.config;
    assert.ok(!cfg().description?.includes('changed while paused'), 'the paused change was not applied');

    // Unpaused: the change lands.
    await mergePatch(kube, vmPath(NS, 'paused-1'), { metadata: { annotations: { 'crossplane.io/paused': null } } });
    await waitFor('description applied after unpause', () => cfg().description?.includes('changed while paused'));
    await waitFor('paused-1 Synced at the new generation', async () => {
      const o = await get(kube, vmPath(NS, 'paused-1'));
      const s = condition(o, 'Synced') as { status: string; observedGeneration?: number } | undefined;
      return isReady(o) && s?.observedGeneration === changed.metadata.generation;
    });
  });

  it("a failure is one Warning event with crossplane-runtime's reason, the provider's reason leading the message", async () => {
    const bad = await create(kube, smallVm('bad-bridge', { spec: { forProvider: { network: 'vmbr9' } } }));
    const byReason = (reason: string) =>
      list(kube, `/api/v1/namespaces/${NS}/events`, {
        fieldSelector: `involvedObject.uid=${bad.metadata.uid},reason=${reason}`,
      });
    const [e] = await waitFor('CannotCreateExternalResource of bad-bridge', async () => {
      const items = await byReason('CannotCreateExternalResource');
      return items.length ? items : undefined;
    });
    assert.equal(e!.type, 'Warning');
    assert.match(
      e!.message as string,
      /^BridgeNotFound: cannot create: bridge 'vmbr9' does not exist on node ml110-01/,
    );
    assert.equal(condition(await get(kube, vmPath(NS, 'bad-bridge')), 'Synced')?.reason, 'BridgeNotFound');
    assert.deepEqual(await byReason('BridgeNotFound'), [], 'not a second event for the same failure');
    await del(kube, vmPath(NS, 'bad-bridge'));
    await waitFor('bad-bridge gone', async () => !(await get(kube, vmPath(NS, 'bad-bridge'))));
  });

  it('deletion with the Delete policy: VM destroyed, finalizer removed, object gone', async () => {
    await create(kube, smallVm('del-delete'));
    const [o] = await waitAllReady(kube, NS, ['del-delete']);
    const uid = o!.metadata.uid!;
    assert.equal(simVms(sim).filter((v) => v.uid === uid).length, 1);
    await waitFor('usage of del-delete', () => get(kube, `${collection(API, 'ProviderConfigUsage', NS)}/${uid}`));
    const res = await kreq(kube, 'DELETE', vmPath(NS, 'del-delete'));
    assert.equal(res.status, 200);
    assert.ok(res.json.metadata.deletionTimestamp, 'the finalizer holds the object while the VM is destroyed');
    assert.deepEqual(res.json.metadata.finalizers, ['finalizer.managedresource.crossplane.io']);
    await waitFor('del-delete gone', async () => !(await get(kube, vmPath(NS, 'del-delete'))));
    assert.equal(simVms(sim).filter((v) => v.uid === uid).length, 0, 'the VM is gone from Proxmox');
    const deletions = metric(
      (await httpGet(metricsPort, '/metrics')).text,
      'crossplane_managed_resource_deletion_seconds_count',
      { gvk: 'proxmox.sankofa.io/v1alpha1, Kind=ProxmoxVM' },
    );
    assert.ok(deletions >= 1, `crossplane_managed_resource_deletion_seconds_count ${deletions}`);
    await waitFor(
      'usage of del-delete gone',
      async () => !(await get(kube, `${collection(API, 'ProviderConfigUsage', NS)}/${uid}`)),
    );
  });

  it('deletion with deletionPolicy Orphan: the VM stays, the object goes', async () => {
    await create(kube, smallVm('del-orphan', { spec: { deletionPolicy: 'Orphan' } }));
    const [o] = await waitAllReady(kube, NS, ['del-orphan']);
    const uid = o!.metadata.uid!;
    const vmid = Number(o!.metadata.annotations!['crossplane.io/external-name']);
    await del(kube, vmPath(NS, 'del-orphan'));
    await waitFor('del-orphan gone', async () => !(await get(kube, vmPath(NS, 'del-orphan'))));
    const vm = simVms(sim).find((v) => v.uid === uid);
    assert.ok(vm, 'the VM is still in Proxmox');
    assert.equal(vm.vmid, vmid);
    assert.equal(vm.status, 'running');
    await waitFor(
      'usage of del-orphan gone',
      async () => !(await get(kube, `${collection(API, 'ProviderConfigUsage', NS)}/${uid}`)),
    );
  });

  it('the orphan scan reports the orphaned VM (metric, Warning event on the ProviderConfig), and deletes nothing', async () => {
    const orphan = simVms(sim).filter((v) => v.uid && v.name === 'del-orphan');
    assert.equal(orphan.length, 1, 'the VM left by the Orphan policy');
    await ctl.orphanScan();
    const m = (await httpGet(metricsPort, '/metrics')).text;
    assert.equal(metric(m, 'provider_proxmox_orphan_vms', { site: 'site-1' }), 1);
    assert.equal(metric(m, 'provider_proxmox_orphan_vms', { site: 'site-2' }), 0);
    const pc = (await get(kube, `${collection(API, 'ClusterProviderConfig')}/default`))!;
    const events = await waitFor('OrphanedVM event', async () => {
      const items = await list(kube, '/api/v1/namespaces/default/events', {
        fieldSelector: `involvedObject.uid=${pc.metadata.uid},reason=OrphanedVM`,
      });
      return items.length ? items : undefined;
    });
    assert.equal(events[0]!.type, 'Warning');
    assert.match(events[0]!.message, new RegExp(`VM ${orphan[0]!.vmid} \\(del-orphan\\)`));
    assert.equal(simVms(sim).filter((v) => v.name === 'del-orphan').length, 1, 'reported, not deleted');
  });

  it('a ProviderConfig in use cannot be deleted until its resources are gone', async () => {
    const pcPath = `${collection(API, 'ClusterProviderConfig')}/pc-inuse`;
    await createProviderConfig(kube, sim, 'pc-inuse');
    const ref = { providerConfigRef: { kind: 'ClusterProviderConfig', name: 'pc-inuse' } };
    const vms = [
      await create(kube, smallVm('inuse-1', { spec: ref })),
      await create(kube, smallVm('inuse-2', { spec: ref })),
    ];
    await waitAllReady(kube, NS, ['inuse-1', 'inuse-2']);
    const usages = await waitFor('two usages of pc-inuse', async () => {
      const items = await list(kube, collection(API, 'ProviderConfigUsage', NS), {
        labelSelector: 'crossplane.io/provider-config=pc-inuse',
      });
      return items.length === 2 ? items : undefined;
    });
    assert.deepEqual(usages.map((u) => u.metadata.name).sort(), vms.map((v) => v.metadata.uid).sort());
    for (const u of usages) {
      assert.deepEqual(u.providerConfigRef, { kind: 'ClusterProviderConfig', name: 'pc-inuse' });
      assert.equal(u.resourceRef.kind, 'ProxmoxVM');
      assert.equal(u.resourceRef.uid, u.metadata.name);
      assert.equal(u.metadata.ownerReferences?.[0]?.uid, u.metadata.name);
    }
    const pc = await waitFor('pc-inuse has the in-use finalizer and 2 users', async () => {
      const o = await get(kube, pcPath);
      return o?.metadata.finalizers?.includes('in-use.crossplane.io') && o.status?.users === 2 ? o : undefined;
    });
    assert.ok(pc);

    // Delete it: it stays, terminating, while it is used.
    const res = await kreq(kube, 'DELETE', pcPath);
    assert.equal(res.status, 200, res.text);
    assert.ok(res.json.metadata.deletionTimestamp);
    await new Promise((r) => setTimeout(r, 1500)); // give the controller every chance to drop the finalizer wrongly
    const terminating = await get(kube, pcPath);
    assert.ok(terminating?.metadata.deletionTimestamp, 'still there, terminating');
    assert.ok(terminating.metadata.finalizers?.includes('in-use.crossplane.io'));

    // The resources can still be deleted through it (their VMs are destroyed) ...
    for (const v of vms) await del(kube, vmPath(NS, v.metadata.name));
    await waitFor('inuse VMs gone', async () => {
      const items = await list(kube, vmPath(NS));
      return !items.some((o) => o.metadata.name.startsWith('inuse-'));
    });
    for (const v of vms) assert.equal(simVms(sim).filter((x) => x.uid === v.metadata.uid).length, 0);
    // ... and then the ProviderConfig goes.
    await waitFor('pc-inuse gone', async () => !(await get(kube, pcPath)));
  });

  it('scale set: up to 3 replicas (Ready, status counts), down to 1 (highest index first, VMs destroyed)', async () => {
    const setPath = `${collection(API, 'ProxmoxVMScaleSet', NS)}/web`;
    const set = await create(kube, {
      apiVersion: API,
      kind: 'ProxmoxVMScaleSet',
      metadata: { name: 'web', namespace: NS },
      spec: {
        replicas: 3,
        template: {
          metadata: { labels: { app: 'web' } },
          spec: {
            forProvider: {
              site: 'site-1',
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
    });
    const names = ['web-0', 'web-1', 'web-2'];
    const replicas = await waitAllReady(kube, NS, names, 120_000);
    for (const r of replicas) {
      assert.deepEqual(
        r.metadata.ownerReferences?.map((o) => [o.kind, o.name, o.uid]),
        [['ProxmoxVMScaleSet', 'web', set.metadata.uid]],
      );
      assert.equal(r.metadata.labels?.app, 'web');
      assert.equal(r.spec.forProvider.node, 'ml110-01');
    }
    assertOneVmPerResource(sim, replicas);
    await waitFor('scale set status 3/3/3', async () => {
      const s = (await get(kube, setPath))!;
      const st = s.status ?? {};
      return (
        st.replicas === 3 &&
        st.readyReplicas === 3 &&
        st.updatedReplicas === 3 &&
        st.observedGeneration === s.metadata.generation
      );
    });

    // Scale down to 1, watching the order in which replicas start deleting.
    const admin = new KubeApi(loadKubeConfig(kube.kubeconfigPath));
    const order: string[] = [];
    const abort = new AbortController();
    const watching = admin
      .watch<Obj>(
        vmPath(NS),
        { resourceVersion: (await kreq(kube, 'GET', vmPath(NS))).json.metadata.resourceVersion },
        (e) => {
          const o = e.object;
          if ((o.metadata.deletionTimestamp || e.type === 'DELETED') && !order.includes(o.metadata.name))
            order.push(o.metadata.name);
        },
        abort.signal,
      )
      .catch(() => {});
    try {
      await mergePatch(kube, setPath, { spec: { replicas: 1 } });
      await waitFor(
        'web-1 and web-2 gone',
        async () => {
          const items = await list(kube, vmPath(NS), { labelSelector: 'proxmox.sankofa.io/scaleset=web' });
          return items.length === 1 && items[0]!.metadata.name === 'web-0';
        },
        60_000,
      );
    } finally {
      abort.abort();
      await watching;
      admin.close();
    }
    assert.deepEqual(
      order.filter((n) => n.startsWith('web-')),
      ['web-2', 'web-1'],
      'highest index first',
    );
    for (const r of replicas) {
      const n = simVms(sim).filter((v) => v.uid === r.metadata.uid).length;
      assert.equal(n, r.metadata.name === 'web-0' ? 1 : 0, `${r.metadata.name}'s VM`);
    }
    await waitFor('scale set status 1/1/1', async () => {
      const st = (await get(kube, setPath))!.status ?? {};
      return st.replicas === 1 && st.readyReplicas === 1 && st.updatedReplicas === 1;
    });
    assert.ok(isReady(await get(kube, vmPath(NS, 'web-0'))));

    // Deleting the set deletes its replicas (and their VMs), then the set.
    await del(kube, setPath);
    await waitFor(
      'web gone',
      async () => !(await get(kube, setPath)) && !(await get(kube, vmPath(NS, 'web-0'))),
      60_000,
    );
    assert.equal(simVms(sim).filter((v) => replicas.some((r) => r.metadata.uid === v.uid)).length, 0);
  });

  it('no VM was created twice anywhere', () => {
    for (const [k, n] of createTasks(sim)) assert.equal(n, 1, `VM ${k}: ${n} create tasks`);
  });
});
