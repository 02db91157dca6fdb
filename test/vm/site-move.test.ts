/**
 * A change of spec.forProvider.site moves the VM to the other cluster by a remote migration: the
 * move is recorded before it is sent, the VM keeps its VMID and marker (or gets the next free VMID
 * there, with the marker rewritten), the resource follows it, nothing is destroyed but the source
 * after the copy. Where the move is impossible (password credentials on the target) it is refused
 * with the fix, and nothing is created. The simulator's two default sites are separate clusters.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { parseAllDocuments, stringify } from 'yaml';
import type { ForProvider } from '../../src/api/proxmoxvm.ts';
import { keyOf } from '../../src/engine/resource.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { planResources } from '../../src/vm/plan.ts';
import { raw } from '../helpers/sim.ts';
import { cond, count, Engine, NODE1, ownedBy, putConfig, SITE1, startSim, vm } from './harness.ts';

const SITE2 = 'site-2';
const NODE2 = 'r630-01';
const USER_DATA = '#cloud-config\nruncmd:\n  - echo moved\n';

/** The snippet volumes on `node` of `site`, in `storage`. */
async function snippetsOn(sim: Simulator, site: string, node: string, storage = 'local'): Promise<string[]> {
  const res = await raw(sim.cluster(site).url, 'GET', `/nodes/${node}/storage/${storage}/content?content=snippets`);
  return ((res.json as { data?: Array<{ volid: string }> }).data ?? []).map((v) => v.volid).sort();
}

/** The snippet volumes on every storage of `node` of `site` that holds snippets. */
async function allSnippetsOn(sim: Simulator, site: string, node: string): Promise<string[]> {
  const res = await raw(sim.cluster(site).url, 'GET', `/nodes/${node}/storage`);
  const storages = ((res.json as { data?: Array<{ storage: string; content?: string }> }).data ?? []).filter((x) =>
    (x.content ?? '').split(',').includes('snippets'),
  );
  return (await Promise.all(storages.map((x) => snippetsOn(sim, site, node, x.storage)))).flat().sort();
}

/** A VM with userData moved to site-2 (by a migration or a replacement): its snippet leaves site-1 with it. */
async function snippetFollows(sim: Simulator, eng: Engine, name: string, fp: Partial<ForProvider>): Promise<void> {
  const key = eng.apply(vm(name, { vmid: 160, userData: USER_DATA }));
  const volid = (await eng.waitReady(key)).status!.atProvider!.userDataSnippet!;
  assert.deepEqual(await snippetsOn(sim, SITE1, NODE1), [volid], 'the snippet on site-1');
  eng.apply(vm(name, { vmid: 160, userData: USER_DATA, site: SITE2, node: NODE2, ...fp }));
  const r = await eng.waitFor(
    key,
    (x) =>
      x.status?.atProvider?.site === SITE2 && x.status?.atProvider?.step === 'Ready' && !x.status.atProvider.replacing,
    'Ready on site-2, nothing left on site-1',
  );
  const now = r.status!.atProvider!.userDataSnippet!;
  const vmid = r.status!.atProvider!.vmId!;
  assert.equal(sim.cluster(SITE2).state.vms.get(vmid)?.config.cicustom, `user=${now}`);
  assert.ok((await snippetsOn(sim, SITE2, NODE2, now.split(':')[0])).includes(now), 'the snippet on site-2');
  // Left on site-1's node (a storage of its own), the file was read by nothing any more.
  assert.deepEqual(await snippetsOn(sim, SITE1, NODE1), [], 'nothing left on site-1');
}

describe('a site change: remote migration', () => {
  let sim: Simulator;
  let eng: Engine;
  before(async () => {
    sim = await startSim();
    eng = await new Engine(sim, { pollIntervalMs: 200 }).start();
  });
  after(async () => {
    await eng.stop();
    await sim.close();
  });

  it('moves a running VM with its disk to site-2 and ceph-fs: same VMID and marker, the source gone', async () => {
    const c1 = sim.cluster(SITE1);
    const c2 = sim.cluster(SITE2);
    const key = eng.apply(vm('traveller'));
    const r0 = await eng.waitReady(key);
    const vmid = r0.status!.atProvider!.vmId!;
    const marker = c1.state.vms.get(vmid)!.config.description;
    eng.apply(vm('traveller', { site: SITE2, node: NODE2, storage: 'ceph-fs' }));
    const r = await eng.waitFor(
      key,
      (x) => x.status?.atProvider?.site === SITE2 && x.status?.atProvider?.step === 'Ready',
      'Ready on site-2',
    );
    assert.equal(r.status?.atProvider?.vmId, vmid, 'the VMID stayed');
    assert.equal(r.metadata.annotations?.['crossplane.io/external-name'], String(vmid));
    assert.equal(r.status?.atProvider?.node, NODE2);
    assert.equal(r.status?.atProvider?.siteMove, undefined, 'the record is cleared once it arrived');
    const moved = c2.state.vms.get(vmid)!;
    assert.equal(moved.config.description, marker, 'the marker moved with it');
    assert.equal(moved.status, 'running', 'an online migration: it runs there');
    assert.match(moved.config.scsi0 ?? '', /^ceph-fs:/, 'its disk is on ceph-fs');
    assert.equal(c1.state.vms.get(vmid), undefined, 'the source was removed after the copy (delete=1)');
    assert.equal(ownedBy(c1, r.metadata.uid).length + ownedBy(c2, r.metadata.uid).length, 1, 'exactly one VM');
    assert.equal(count(c1, 'POST /nodes/{node}/qemu/{vmid}/remote_migrate'), 1, 'one migration sent');
    assert.equal(count(c2, 'POST /nodes/{node}/qemu'), 0, 'nothing created on site-2');
    assert.equal(count(c1, 'DELETE /nodes/{node}/qemu/{vmid}'), 0, 'nothing destroyed by the provider');
  });

  it('a VM older than the creation grace moves as one: nothing made on the target while the migration arrives', async () => {
    // No grace: "not found" is never taken for a listing that lags, as for any VM half a minute
    // after its create. A list of the target a moment old predated the arrival, the VM was taken
    // for gone and made again there, then retired as the moved VM's twin.
    const aged = await new Engine(sim, { pollIntervalMs: 200, creationGraceMs: 0 }).start();
    try {
      const c2 = sim.cluster(SITE2);
      const key = aged.apply(vm('seasoned', { vmid: 150 }));
      const r0 = await aged.waitReady(key);
      const created = count(c2, 'POST /nodes/{node}/qemu');
      const destroyed = count(c2, 'DELETE /nodes/{node}/qemu/{vmid}');
      aged.apply(vm('seasoned', { vmid: 150, site: SITE2, node: NODE2 }));
      const r = await aged.waitFor(
        key,
        (x) => x.status?.atProvider?.site === SITE2 && x.status?.atProvider?.step === 'Ready',
        'Ready on site-2',
      );
      assert.equal(r.status?.atProvider?.vmId, r0.status?.atProvider?.vmId, 'the VMID stayed');
      assert.equal(count(c2, 'POST /nodes/{node}/qemu'), created, 'nothing created on site-2');
      assert.equal(count(c2, 'DELETE /nodes/{node}/qemu/{vmid}'), destroyed, 'nothing destroyed on site-2');
      assert.equal(ownedBy(sim.cluster(SITE1), r.metadata.uid).length + ownedBy(c2, r.metadata.uid).length, 1);
    } finally {
      await aged.stop();
    }
  });

  it('keeps its VMID or does not move: a VMID taken on the target refuses the move with the fix', async () => {
    const c1 = sim.cluster(SITE1);
    const c2 = sim.cluster(SITE2);
    const key = eng.apply(vm('crowded'));
    const r0 = await eng.waitReady(key);
    const vmid = r0.status!.atProvider!.vmId!;
    // The VM moved by the test before holds the same VMID on site-2 (site-1 gave it out again).
    const other = c2.state.vms.get(vmid);
    assert.ok(other, `VMID ${vmid} is taken on site-2`);
    const otherMarker = other.config.description;
    const sent = count(c1, 'POST /nodes/{node}/qemu/{vmid}/remote_migrate');
    eng.apply(vm('crowded', { site: SITE2, node: NODE2 }));
    const r = await eng.waitSynced(key, 'MigrationRefused');
    assert.match(cond(r, 'Synced')?.message ?? '', new RegExp(`VMID ${vmid} is in use on site site-2.*vmidRange`));
    assert.equal(count(c1, 'POST /nodes/{node}/qemu/{vmid}/remote_migrate'), sent, 'nothing was sent');
    assert.ok(c1.state.vms.get(vmid), 'the VM stays where it is');
    assert.equal(ownedBy(c2, r.metadata.uid).length, 0);
    assert.equal(c2.state.vms.get(vmid)!.config.description, otherMarker, 'the other VM was not touched');
  });

  it("a moved VM's snippet leaves site-1's node with it; the VM reads its own on site-2", () =>
    snippetFollows(sim, eng, 'carrier', {}));
});

describe('a site change that cannot be a remote migration', () => {
  let sim: Simulator;
  let eng: Engine;
  before(async () => {
    sim = await startSim();
    // site-2 with root@pam password credentials: remote_migrate needs a token for the target.
    eng = await new Engine(sim, {
      pollIntervalMs: 200,
      configYaml: (y) => {
        const docs = parseAllDocuments(y).map((d) => d.toJS() as Record<string, any>);
        const config = docs.find((d) => d.kind === 'ClusterProviderConfig')!;
        const site2 = config.spec.sites.find((s: { name: string }) => s.name === SITE2);
        site2.credentialsSecretRef = { name: 'site-2-password', namespace: 'crossplane-system' };
        docs.push({
          apiVersion: 'v1',
          kind: 'Secret',
          metadata: { name: 'site-2-password', namespace: 'crossplane-system' },
          stringData: { username: 'root@pam', password: sim.credentials.rootPassword },
        });
        return docs.map((d) => stringify(d)).join('---\n');
      },
    }).start();
  });
  after(async () => {
    await eng.stop();
    await sim.close();
  });

  it('is refused with the fix, and nothing is moved or created', async () => {
    const c1 = sim.cluster(SITE1);
    const c2 = sim.cluster(SITE2);
    const key = eng.apply(vm('stayer'));
    const r0 = await eng.waitReady(key);
    const vmid = r0.status!.atProvider!.vmId!;
    eng.apply(vm('stayer', { site: SITE2, node: NODE2 }));
    const r = await eng.waitSynced(key, 'PlacementChangeRefused');
    assert.match(cond(r, 'Synced')?.message ?? '', /API token.*tokenid and token/);
    assert.ok(c1.state.vms.get(vmid), 'the VM stayed where it was');
    assert.equal(count(c1, 'POST /nodes/{node}/qemu/{vmid}/remote_migrate'), 0);
    assert.equal(count(c2, 'POST /nodes/{node}/qemu'), 0, 'nothing created on site-2');
    assert.doesNotMatch(JSON.stringify(r), new RegExp(sim.credentials.rootPassword), 'no secret in the status');
  });

  it('with replacePolicy CreateThenDelete: a new VM on site-2, then the old one destroyed (shown as a replacement first)', async () => {
    const c1 = sim.cluster(SITE1);
    const c2 = sim.cluster(SITE2);
    const key = eng.apply(vm('replaced'));
    const r0 = await eng.waitReady(key);
    const old = r0.status!.atProvider!.vmId!;
    const moved = vm('replaced', { site: SITE2, node: NODE2, replacePolicy: 'CreateThenDelete' });
    const [p] = await planResources([{ ...eng.get(key), spec: moved.spec }], (x) => eng.connector.connect(x), keyOf);
    assert.equal(p!.action, 'replace');
    assert.match(
      p!.changes[0]!.detail ?? '',
      /^replace \(data loss\): a new VM on site-2, then VM \d+ on site-1 is destroyed$/,
    );
    assert.ok(c1.state.vms.get(old), 'planning changed nothing');
    eng.apply(moved);
    const r = await eng.waitFor(
      key,
      (x) =>
        x.status?.atProvider?.site === SITE2 &&
        x.status?.atProvider?.step === 'Ready' &&
        !x.status.atProvider.replacing,
      'Ready on site-2, the old VM retired',
    );
    assert.equal(ownedBy(c2, r.metadata.uid).length, 1, 'one new VM on site-2');
    assert.equal(c1.state.vms.get(old), undefined, 'the old VM was destroyed after the new one was Ready');
    assert.equal(count(c1, 'POST /nodes/{node}/qemu/{vmid}/remote_migrate'), 0);
  });

  it('a replaced VM an operator protected: VMProtected with the fix, left running; destroyed once unprotected', async () => {
    const c1 = sim.cluster(SITE1);
    const c2 = sim.cluster(SITE2);
    const key = eng.apply(vm('replaced-protected'));
    const old = (await eng.waitReady(key)).status!.atProvider!.vmId!;
    await putConfig(c1, NODE1, old, { protection: '1' });
    const stops = count(c1, 'POST /nodes/{node}/qemu/{vmid}/status/stop');
    eng.apply(vm('replaced-protected', { site: SITE2, node: NODE2, replacePolicy: 'CreateThenDelete' }));
    const r = await eng.waitSynced(key, 'VMProtected');
    assert.match(
      cond(r, 'Synced')?.message ?? '',
      new RegExp(
        `replaced VM ${old} on node ${NODE1} of site site-1 is protected .*not Ready until it goes. Fix: on node ${NODE1} of site site-1 run 'qm set ${old} --protection 0'`,
      ),
    );
    assert.equal(ownedBy(c2, r.metadata.uid).length, 1, 'the new VM is there');
    assert.equal(c1.state.vms.get(old)?.status, 'running', 'the old one left running');
    assert.equal(count(c1, 'POST /nodes/{node}/qemu/{vmid}/status/stop'), stops);
    await putConfig(c1, NODE1, old, { protection: '0' });
    await eng.waitFor(
      key,
      (x) => x.status?.atProvider?.step === 'Ready' && !x.status.atProvider.replacing,
      'the old VM retired',
    );
    assert.equal(c1.state.vms.get(old), undefined);
  });

  it("a replaced VM's snippet goes with it once it is destroyed; the new VM reads its own on site-2", () =>
    snippetFollows(sim, eng, 'replaced-carrier', { replacePolicy: 'CreateThenDelete' }));

  it('a replacement reverted once its new VM was made: the new VM and its snippet on site-2 go, the old VM stays', async () => {
    const c2 = sim.cluster(SITE2);
    const key = eng.apply(vm('turned-back', { vmid: 161, userData: USER_DATA }));
    const volid = (await eng.waitReady(key)).status!.atProvider!.userDataSnippet!;
    const uid = eng.get(key).metadata.uid;
    eng.apply(
      vm('turned-back', {
        vmid: 161,
        userData: USER_DATA,
        site: SITE2,
        node: NODE2,
        replacePolicy: 'CreateThenDelete',
      }),
    );
    await eng.waitFor(key, () => ownedBy(c2, uid).length === 1, 'the new VM made on site-2');
    assert.ok(
      (await allSnippetsOn(sim, SITE2, NODE2)).some((v) => v.includes('-turned-back-')),
      'its snippet went up on site-2',
    );
    eng.apply(vm('turned-back', { vmid: 161, userData: USER_DATA, replacePolicy: 'CreateThenDelete' }));
    const r = await eng.waitFor(
      key,
      (x) =>
        x.status?.atProvider?.site === SITE1 &&
        x.status?.atProvider?.step === 'Ready' &&
        !x.status.atProvider.replacing,
      'Ready on site-1 again',
    );
    assert.equal(ownedBy(c2, uid).length + ownedBy(sim.cluster(SITE1), uid).length, 1, 'one VM');
    const mine = (await allSnippetsOn(sim, SITE2, NODE2)).filter((v) => v.includes('-turned-back-'));
    assert.deepEqual(mine, [], 'nothing of it left on site-2');
    assert.deepEqual(await snippetsOn(sim, SITE1, NODE1), [r.status!.atProvider!.userDataSnippet ?? volid]);
  });

  it('deleting during a replacement destroys both VMs', async () => {
    const c1 = sim.cluster(SITE1);
    const c2 = sim.cluster(SITE2);
    const key = eng.apply(vm('replaced-then-deleted'));
    const r0 = await eng.waitReady(key);
    const old = r0.status!.atProvider!.vmId!;
    eng.apply(vm('replaced-then-deleted', { site: SITE2, node: NODE2, replacePolicy: 'CreateThenDelete' }));
    await eng.waitFor(key, (x) => x.status?.atProvider?.replacing !== undefined, 'the replacement recorded');
    eng.delete(key);
    await eng.waitGone(key);
    assert.equal(c1.state.vms.get(old), undefined, 'the old VM is gone');
    assert.equal(ownedBy(c1, r0.metadata.uid).length + ownedBy(c2, r0.metadata.uid).length, 0, 'nothing left');
  });
});
