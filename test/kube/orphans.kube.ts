/**
 * The controller's installation and its orphan scan with --delete-orphans, against a real
 * kube-apiserver (harness.ts) and the in-process simulator, on one site shared the way production
 * shares one: another cluster's VM, a CLI user's VM, an operator's clone of one of our VMs and an
 * old-format marker of an unknown resource sit next to our fleet. Only our own orphan (its
 * ProxmoxVM deleted with deletionPolicy Orphan) is deleted, and only once it is older than the
 * scan by more than the clock-skew margin. The installation is `k8s-<uid of kube-system>`, read
 * with deploy/'s ServiceAccount (whose RBAC must allow exactly that); without the right, start-up
 * fails saying to pass --installation.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { KubeApi, loadKubeConfig } from '../../src/kube/api.ts';
import { ProviderController } from '../../src/kube/controller.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { parseMarker } from '../../src/vm/spec.ts';
import { raw, startTestSim, waitTask } from '../helpers/sim.ts';
import { type Kube, startKube } from './harness.ts';
import {
  API,
  applyCrds,
  collection,
  create,
  createProviderConfig,
  del,
  get,
  installRbac,
  list,
  NODE,
  type Obj,
  ROOT,
  SYSTEM_NS,
  serviceAccountKubeconfig,
  simVms,
  vmPath,
  waitAllReady,
  waitFor,
} from './support.ts';

const NS = 'orphans';
const PVE_NODE = 'ml110-01';

function vm(name: string, spec: Record<string, unknown> = {}): Obj {
  return {
    apiVersion: API,
    kind: 'ProxmoxVM',
    metadata: { name, namespace: NS },
    spec: {
      forProvider: { site: 'site-1', node: PVE_NODE, cpu: 1, memory: '512Mi', template: { vmid: 9000 } },
      ...spec,
    },
  };
}

describe('controller: installation and orphan scan with --delete-orphans', () => {
  let kube: Kube;
  let sim: Simulator;
  let dir: string;
  let api: KubeApi;
  let ctl: ProviderController;
  let installation: string;
  const logs: string[] = [];

  const vmOf = (name: string) => simVms(sim).find((v) => v.site === 'site-1' && v.name === name);
  async function pve(method: string, path: string, form?: Record<string, string>) {
    const c = sim.cluster('site-1');
    const r = await raw(c.url, method, path, form ? { form } : {});
    assert.equal(r.status, 200, r.text);
    const upid = (r.json as { data: unknown }).data;
    if (typeof upid === 'string' && upid.startsWith('UPID:'))
      assert.equal((await waitTask(c.url, PVE_NODE, upid)).exitstatus, 'OK');
  }
  /** A VM made straight through the API with this description (another runtime's, a person's). */
  const plant = (vmid: number, name: string, description: string) =>
    pve('POST', `/nodes/${PVE_NODE}/qemu`, {
      vmid: String(vmid),
      name,
      memory: '512',
      tags: 'provider-proxmox',
      description,
    });
  /** A ProxmoxVM made Ready, then deleted with deletionPolicy Orphan: its VM is our orphan. */
  async function orphan(name: string): Promise<number> {
    await create(kube, vm(name, { deletionPolicy: 'Orphan' }));
    const [o] = await waitAllReady(kube, NS, [name]);
    await del(kube, vmPath(NS, name));
    await waitFor(`${name} gone`, async () => !(await get(kube, vmPath(NS, name))));
    // The informer must have seen the deletion, or the scan would still know the resource.
    await waitFor(`${name} out of the cache`, () => ![...ctl.vms.cache.values()].some((x) => x.metadata.name === name));
    return Number(o!.metadata.annotations!['crossplane.io/external-name']);
  }
  const orphanEvents = async () => {
    const pc = (await get(kube, `${collection(API, 'ClusterProviderConfig')}/default`))!;
    return list(kube, '/api/v1/namespaces/default/events', {
      fieldSelector: `involvedObject.uid=${pc.metadata.uid},reason=OrphanedVM`,
    });
  };
  const orphanGauge = async () =>
    (await ctl.metrics.orphans.get()).values.find((v) => v.labels.site === 'site-1')?.value;

  before(async () => {
    [kube, sim] = await Promise.all([startKube(), startTestSim()]);
    dir = await mkdtemp(join(tmpdir(), 'pp-kube-orphans-'));
    await applyCrds(kube);
    await installRbac(kube);
    await create(kube, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
    await createProviderConfig(kube, sim);
    api = new KubeApi(loadKubeConfig(await serviceAccountKubeconfig(kube, join(dir, 'sa.kubeconfig'))));
    ctl = new ProviderController({
      api,
      namespace: SYSTEM_NS,
      leaderElection: false,
      taskPollMs: 50,
      orphanScanMs: 0,
      deleteOrphans: true,
      // The scan's clock is the simulator's, so that advancing it ages the VMs past the margin.
      now: () => sim.clock.now(),
      workers: 4,
      backoff: { baseMs: 100, capMs: 2000 },
      log: (level, msg, fields) => {
        if (level !== 'debug') logs.push(`${level} ${msg} ${JSON.stringify(fields ?? {})}`);
      },
    });
    await ctl.start();
  });
  after(async () => {
    await ctl?.stop();
    api?.close();
    await sim?.close();
    await kube?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("the installation is k8s-<uid of kube-system> (read with deploy/'s RBAC), in the markers of the VMs it creates", async () => {
    const ks = (await get(kube, '/api/v1/namespaces/kube-system'))!;
    installation = `k8s-${ks.metadata.uid}`;
    assert.equal(ctl.installation, installation);
    await create(kube, vm('mine'));
    const [o] = await waitAllReady(kube, NS, ['mine']);
    const m = parseMarker(vmOf('mine')!.config.description);
    assert.deepEqual(m, {
      namespace: NS,
      name: 'mine',
      uid: o!.metadata.uid,
      vmid: Number(o!.metadata.annotations!['crossplane.io/external-name']),
      installation,
    });
  });

  it("deletes this installation's orphan only once it is older than the scan (clock skew), never the others' VMs", async () => {
    const ours = await orphan('left-behind');
    // Another cluster's VM, a CLI user's, an old marker of a resource this cluster never had: on
    // the same site, tagged and marked like ours. Same namespace/name as our orphan for the first
    // two: only the installation tells them apart.
    await plant(
      760,
      'other-cluster',
      `provider-proxmox.owner: ${NS}/left-behind uid=${randomUUID()} vmid=760 installation=k8s-7d3c0e5e-another-cluster`,
    );
    await plant(
      761,
      'cli-user',
      `provider-proxmox.owner: ${NS}/left-behind uid=${randomUUID()} vmid=761 installation=cli-default`,
    );
    await plant(762, 'old-marker', `provider-proxmox.owner: ${NS}/long-gone uid=${randomUUID()}`);
    // An operator's clone of our VM 'mine' (it copies the description, marker included).
    await pve('POST', `/nodes/${PVE_NODE}/qemu/${vmOf('mine')!.vmid}/clone`, {
      newid: '763',
      name: 'mine-by-hand',
      full: '1',
    });
    assert.equal(parseMarker(vmOf('mine-by-hand')!.config.description)?.installation, installation);
    const stays = ['mine', 'other-cluster', 'cli-user', 'old-marker', 'mine-by-hand'];

    // Right away: reported (metric, event), but created within the margin before the scan: kept.
    await ctl.orphanScan();
    assert.equal(await orphanGauge(), 1);
    const events = await waitFor('OrphanedVM event', async () => {
      const items = await orphanEvents();
      return items.length ? items : undefined;
    });
    assert.equal(events.length, 1, JSON.stringify(events.map((e: Obj) => e.message)));
    assert.match(
      events[0]!.message,
      new RegExp(
        `^VM ${ours} \\(left-behind\\) on site-1/${PVE_NODE} carries the ownership marker of ${NS}/left-behind that no longer exists; deleting it$`,
      ),
    );
    assert.ok(vmOf('left-behind'), 'too young to be deleted by this scan');
    assert.ok(
      logs.some((l) => /orphaned VM skipped: created .*clock skew/.test(l)),
      logs.slice(-5).join('\n'),
    );

    // Ten minutes on: our orphan goes, nothing else does.
    sim.clock.advance(10 * 60_000);
    await ctl.orphanScan();
    assert.equal(vmOf('left-behind'), undefined, 'our orphan is deleted');
    for (const name of stays) assert.ok(vmOf(name), `${name} is not deleted`);
    // One event, counted twice: no event ever named the other VMs.
    // (The recorder writes in the background: wait for the count.)
    const after = await waitFor('the event counted twice', async () => {
      const items = await orphanEvents();
      return items.length === 1 && items[0]!.count === 2 ? items : undefined;
    });
    assert.equal(after.length, 1);
    await ctl.orphanScan();
    assert.equal(await orphanGauge(), 0);
    for (const name of stays) assert.ok(vmOf(name), `${name} is not deleted`);
  });

  it('without the right to read kube-system, start-up fails and says to pass --installation', async () => {
    await create(kube, {
      apiVersion: 'v1',
      kind: 'ServiceAccount',
      metadata: { name: 'no-rights', namespace: SYSTEM_NS },
    });
    const bare = new KubeApi(
      loadKubeConfig(await serviceAccountKubeconfig(kube, join(dir, 'bare.kubeconfig'), 'no-rights')),
    );
    const c = new ProviderController({ api: bare, namespace: SYSTEM_NS, leaderElection: false, orphanScanMs: 0 });
    try {
      await assert.rejects(c.start(), (e: Error) =>
        /^cannot read the kube-system namespace, whose uid names this cluster's installation \(k8s-<uid>\): .*forbidden.*Grant get on namespaces\/kube-system \(deploy\/rbac\.yaml does\), or pass --installation <id>/s.test(
          e.message,
        ),
      );
      assert.throws(() => c.installation, /has not started/);
    } finally {
      await c.stop();
      bare.close();
    }
    // An invalid --installation is refused before anything connects.
    const res = spawnSync(NODE, [join(ROOT, 'src/cli/main.ts'), 'controller', '--installation', 'Team_X'], {
      cwd: ROOT,
      encoding: 'utf8',
      timeout: 60_000,
    });
    assert.equal(res.status, 2, res.stdout + res.stderr);
    assert.match(res.stderr, /option '--installation <id>' argument 'Team_X' is invalid\. expected lowercase letters/);
  });
});
