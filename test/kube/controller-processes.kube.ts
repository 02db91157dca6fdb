/**
 * `provider-proxmox controller` as real processes against a real kube-apiserver + etcd and the
 * in-process simulator: SIGKILLed mid-rollout and restarted (no duplicate VM), and two replicas with
 * leader election (one leader, failover after the leader is SIGKILLed, no VM touched by both,
 * graceful shutdown releases the Lease). The processes run with deploy/'s ServiceAccount token.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { KubeApi, loadKubeConfig } from '../../src/kube/api.ts';
import { type Simulator, startSimulator } from '../../src/sim/index.ts';
import { type Kube, startKube } from './harness.ts';
import {
  API,
  applyCrds,
  assertOneVmPerResource,
  type ChildController,
  create,
  createProviderConfig,
  createTasks,
  get,
  httpGet,
  installRbac,
  killAllControllers,
  kreq,
  metric,
  type Obj,
  ROOT,
  readYaml,
  SYSTEM_NS,
  serviceAccountKubeconfig,
  simVms,
  spawnController,
  vmPath,
  waitAllReady,
  waitFor,
  yamlFiles,
} from './support.ts';

const LEASE = `/apis/coordination.k8s.io/v1/namespaces/${SYSTEM_NS}/leases/provider-proxmox-leader`;
/** Short leases: 4 s, renew deadline 3 s, retry 1 s. */
const ELECTION = ['--lease-duration', '4s', '--renew-deadline', '3s', '--retry-period', '1s'];

interface Lease {
  spec: { holderIdentity?: string; leaseTransitions?: number; leaseDurationSeconds?: number };
}

describe('controller processes: SIGKILL mid-rollout, two replicas with leader election', () => {
  let kube: Kube;
  let sim: Simulator;
  let dir: string;
  let kubeconfig: string;
  let n = 0;
  let survivor: ChildController | undefined;

  const spawn = () => spawnController(kubeconfig, join(dir, `controller-${++n}.log`), ELECTION);
  /** The controller's default identity: `<hostname>_<pid>`. */
  const identity = (c: ChildController) => `${hostname()}_${c.child.pid}`;
  const lease = async () => (await get(kube, LEASE)) as (Obj & Lease) | undefined;
  const holder = async () => (await lease())?.spec.holderIdentity ?? '';
  const waitLeader = (c: ChildController) =>
    waitFor(`${c.logFile} leads`, async () => (await holder()) === identity(c), 30_000);

  before(async () => {
    [kube, sim] = await Promise.all([
      startKube(),
      startSimulator({
        ephemeralPorts: true,
        speed: 1000,
        authFailDelayMs: 0,
        tokens: ['root@pam!kube=5e1f0c7a-0000-4000-8000-00000000beef'],
        seed: 11,
      }),
    ]);
    dir = await mkdtemp(join(tmpdir(), 'pp-kube-proc-'));
    await applyCrds(kube);
    await installRbac(kube);
    await createProviderConfig(kube, sim);
    kubeconfig = await serviceAccountKubeconfig(kube, join(dir, 'sa.kubeconfig'));
  });

  after(async () => {
    await killAllControllers();
    // The controllers' errors (pino level 50+), for a failure's post-mortem; their logs go with `dir`.
    for (let i = 1; i <= n; i++) {
      const file = join(dir, `controller-${i}.log`);
      const errors = existsSync(file)
        ? readFileSync(file, 'utf8')
            .split('\n')
            // (losing the lease in the last test is expected)
            .filter((l) => /"level":(5|6)\d/.test(l) && !/leadership lost/.test(l))
        : [];
      if (errors.length) console.log(`controller-${i} errors:\n${errors.slice(-20).join('\n')}`);
    }
    await sim?.close();
    await kube?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('SIGKILLed mid-rollout (twice) and restarted: every resource Ready with exactly one VM', async (t) => {
    const admin = new KubeApi(loadKubeConfig(kube.kubeconfigPath));
    // Watch for the moment the first create is pending (external name + pending mark written,
    // the Proxmox create not yet recorded): the first kill lands right there.
    let pendingSeen = false;
    const abort = new AbortController();
    const watching = admin
      .watch<Obj>(
        vmPath('default'),
        {},
        (e) => {
          const a = e.object.metadata.annotations ?? {};
          if (a['crossplane.io/external-create-pending'] && !a['crossplane.io/external-create-succeeded'])
            pendingSeen = true;
        },
        abort.signal,
      )
      .catch(() => {});

    const fleet = yamlFiles(join(ROOT, 'examples/production')).flatMap(readYaml);
    try {
      const a = await spawn();
      await waitLeader(a);
      for (const o of fleet) await create(kube, o);
      await waitFor('a create pending', () => pendingSeen, 60_000, 5);
      await a.kill('SIGKILL');
      t.diagnostic(`first kill: ${createTasks(sim).size} VMs created so far`);

      const b = await spawn();
      await waitLeader(b);
      await waitFor('a third of the fleet created', () => createTasks(sim).size >= 10, 60_000, 20);
      const ready = (await kreq(kube, 'GET', vmPath('default'))).json.items.filter((o: Obj) =>
        o.status?.conditions?.some((c: { type: string; status: string }) => c.type === 'Ready' && c.status === 'True'),
      ).length;
      await b.kill('SIGKILL');
      t.diagnostic(`second kill: ${createTasks(sim).size} VMs created, ${ready} Ready`);
      assert.ok(ready < 30, 'the second kill landed mid-rollout');
    } finally {
      abort.abort();
      await watching;
      admin.close();
    }

    const c = await spawn();
    await waitLeader(c);
    const objs = await waitAllReady(kube, 'default', undefined, 120_000);
    assert.equal(objs.length, 30);
    assertOneVmPerResource(sim, objs);
    const others = simVms(sim).filter((v) => !v.template && !objs.some((o) => o.metadata.uid === v.uid));
    assert.deepEqual(others, [], 'no VM without its resource');
    assert.ok((await lease())!.spec.leaseTransitions! >= 2, 'the lease changed hands twice');

    // Graceful shutdown: SIGTERM, exit 0, the lease is released at once.
    await c.kill('SIGTERM');
    assert.deepEqual(await c.exited, { code: 0, signal: null });
    assert.equal(await holder(), '');
  });

  it('two replicas: one leader, failover after the leader is SIGKILLed, no VM touched by both', async (t) => {
    await create(kube, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'ha' } });
    const r1 = await spawn();
    const r2 = await spawn();
    const first = await waitFor('a leader', async () => {
      const h = await holder();
      return h ? h : undefined;
    });
    assert.ok([identity(r1), identity(r2)].includes(first), `holder ${first} is one of the replicas`);
    const leader = first === identity(r1) ? r1 : r2;
    const standby = leader === r1 ? r2 : r1;
    // Exactly one leads: the Lease, the gauge and /readyz agree.
    await waitFor('leader gauge', async () => {
      const l = (await httpGet(leader.metricsPort, '/metrics')).text;
      return metric(l, 'provider_proxmox_leader') === 1;
    });
    const sm = (await httpGet(standby.metricsPort, '/metrics')).text;
    assert.equal(metric(sm, 'provider_proxmox_leader'), 0, 'the standby does not lead');
    assert.match((await httpGet(leader.healthPort, '/readyz')).text, /\(leader\)/);
    const standbyReady = await httpGet(standby.healthPort, '/readyz');
    assert.equal(standbyReady.status, 200, 'a standby is ready (a failover target)');
    assert.match(standbyReady.text, /standby/);

    // A rollout, and the leader is killed while it runs.
    const names = Array.from({ length: 8 }, (_, i) => `ha-${i}`);
    const before = new Set(createTasks(sim).keys());
    for (const name of names) {
      await create(kube, {
        apiVersion: API,
        kind: 'ProxmoxVM',
        metadata: { name, namespace: 'ha' },
        spec: {
          forProvider: {
            site: 'site-2',
            node: 'r630-01',
            cpu: 1,
            memory: '512Mi',
            disk: '4Gi',
            storage: 'local-lvm',
            network: 'vmbr0',
            image: 'local:import/ubuntu-22.04-cloud.qcow2',
          },
          providerConfigRef: { name: 'default' },
        },
      });
    }
    await waitFor(
      'the leader creates',
      () => [...createTasks(sim).keys()].filter((k) => !before.has(k)).length >= 2,
      60_000,
      10,
    );
    // Until now the standby has not talked to Proxmox at all.
    const standbyBefore = (await httpGet(standby.metricsPort, '/metrics')).text;
    assert.ok(
      Number.isNaN(metric(standbyBefore, 'provider_proxmox_pve_requests_total')),
      'the standby made no Proxmox request',
    );
    assert.ok(
      Number.isNaN(metric(standbyBefore, 'controller_runtime_reconcile_total')),
      'the standby reconciled nothing',
    );
    await leader.kill('SIGKILL');
    t.diagnostic(`leader killed after ${[...createTasks(sim).keys()].filter((k) => !before.has(k)).length} creates`);

    // The standby takes over once the lease expired (judged by its own clock), and finishes the job.
    await waitLeader(standby);
    await waitFor('standby leader gauge', async () => {
      const l = (await httpGet(standby.metricsPort, '/metrics')).text;
      return metric(l, 'provider_proxmox_leader') === 1;
    });
    const objs = await waitAllReady(kube, 'ha', names, 120_000);
    assertOneVmPerResource(sim, objs);
    for (const [k, count] of createTasks(sim)) assert.equal(count, 1, `VM ${k} created ${count} times`);
    assert.ok(metric((await httpGet(standby.metricsPort, '/metrics')).text, 'provider_proxmox_pve_requests_total') > 0);
    survivor = standby;
  });

  it('a leader whose Lease is taken over stops working and exits', async () => {
    assert.ok(survivor, 'the new leader of the previous test');
    const c = survivor;
    assert.equal(await holder(), identity(c));
    // Someone else holds the Lease now, and keeps renewing it: the leader cannot renew within its
    // renew deadline, steps down and exits (client-go: the process exits, a fresh one rejoins).
    let stop = false;
    const intruder = (async () => {
      while (!stop) {
        const l = (await lease())!;
        const now = new Date().toISOString().replace('Z', '000Z');
        await kreq(kube, 'PUT', LEASE, {
          body: { ...l, spec: { ...l.spec, holderIdentity: 'intruder', renewTime: now, leaseDurationSeconds: 4 } },
        });
        await new Promise((r) => setTimeout(r, 500));
      }
    })();
    try {
      const exit = await Promise.race([c.exited, new Promise<undefined>((r) => setTimeout(r, 30_000, undefined))]);
      assert.deepEqual(exit, { code: 1, signal: null }, 'the controller exited after losing its lease');
    } finally {
      stop = true;
      await intruder;
    }
    assert.match(c.log(), /leadership lost/);
  });
});
