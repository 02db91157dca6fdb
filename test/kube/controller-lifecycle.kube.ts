/**
 * The controller in-process against a real kube-apiserver + etcd (harness.ts) and the in-process
 * Proxmox VE simulator, after a create: status conflicts, paused resources, failures as events,
 * deletion policies, the orphan scan, ProviderConfig in-use protection and scale sets.
 *
 * As in controller-fleet.kube.ts, the controller runs with the token of deploy/'s ServiceAccount
 * (these tests prove deploy/rbac.yaml grants deletion, events, usages and scale sets too), in a
 * cluster and simulator of its own: without the seed fleet, which none of these tests needs.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { KubeApi, loadKubeConfig } from '../../src/kube/api.ts';
import { ProviderController } from '../../src/kube/controller.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { controllerOptions, IMAGE, keepLog, NS, smallVm, startControllerSim } from './controller-fixtures.ts';
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
  installRbac,
  isReady,
  kreq,
  list,
  mergePatch,
  metric,
  type Obj,
  serviceAccountKubeconfig,
  simVms,
  vmPath,
  waitAllReady,
  waitFor,
} from './support.ts';

describe('controller (in-process) on a real kube-apiserver with the simulator', () => {
  let kube: Kube;
  let sim: Simulator;
  let dir: string;
  let api: KubeApi;
  let ctl: ProviderController;
  let metricsPort: number;
  const logs: string[] = [];

  before(async () => {
    [kube, sim] = await Promise.all([startKube(), startControllerSim()]);
    dir = await mkdtemp(join(tmpdir(), 'pp-kube-ctl-'));
    await applyCrds(kube);
    await installRbac(kube);
    await create(kube, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
    await createProviderConfig(kube, sim);

    const healthPort = await freePort();
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
    keepLog(logs, 'lifecycle');
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

  it('memory: 1G (decimal, 953.7 MiB) applied with kubectl: one Warning event naming 1Gi, and the VM made all the same', async () => {
    const created = await create(kube, smallVm('decimal-1', { spec: { forProvider: { memory: '1G' } } }));
    const [ready] = await waitAllReady(kube, NS, ['decimal-1']);
    const warnings = await waitFor('the DecimalSizeUnits event', async () => {
      const items = await list(kube, `/api/v1/namespaces/${NS}/events`, {
        fieldSelector: `involvedObject.uid=${created.metadata.uid}`,
      });
      const w = items.filter((e) => e.reason === 'DecimalSizeUnits');
      return w.length ? w : undefined;
    });
    assert.deepEqual(
      warnings.map((e) => [e.type, e.message, e.count ?? 1]),
      [
        [
          'Warning',
          "spec.forProvider.memory: '1G' is 1,000,000,000 bytes, 953.7 MiB (G is a power of 1000, as in Kubernetes); for 1 GiB write '1Gi'",
          1,
        ],
      ],
      'once, though its status was written many times since',
    );
    assert.equal(condition(ready, 'Ready')?.status, 'True');
    assert.equal(simVms(sim).find((v) => v.uid === created.metadata.uid)?.config.memory, '954');
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
