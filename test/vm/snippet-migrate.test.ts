/**
 * A VM whose userData is a snippet on a node's own storage (`local`) moves to another node of its
 * site: PVE migrates its disks, not the files `cicustom` names (qemu-server QemuMigrate.pm
 * scan_local_volumes walks drives only), so the snippet follows it: written on the target before
 * the provider's own migration is sent, or once a VM moved by someone else (HA, a person) is seen
 * there, and removed from the node left (fault search F67).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Simulator } from '../../src/sim/index.ts';
import { providerConfigYaml } from '../../src/sim/provider-config.ts';
import { raw, waitTask } from '../helpers/sim.ts';
import { connect, upload } from '../sim/ssh-client.ts';
import { cond, Engine, SITE1, startSim, twoNodeTopology, vm } from './harness.ts';

const USER_DATA = `#cloud-config
packages: [jq]
runcmd:
  - echo hello
`;

/** Put a file of the user's on a node's `local` snippets directory, as they would over SSH. */
async function userSnippet(sim: Simulator, node: string, name: string): Promise<void> {
  const s = await connect(sim.cluster(SITE1).sshNode(node), { privateKey: sim.credentials.sshPrivateKey });
  try {
    await upload(s.sftp, `/var/lib/vz/snippets/${name}`, USER_DATA);
  } finally {
    s.end();
  }
}

async function snippetsOn(sim: Simulator, node: string): Promise<string[]> {
  const res = await raw(sim.cluster(SITE1).url, 'GET', `/nodes/${node}/storage/local/content?content=snippets`);
  return ((res.json as { data: Array<{ volid: string }> }).data ?? []).map((v) => v.volid).sort();
}

describe('a snippet follows its VM to another node', () => {
  let sim: Simulator;
  let eng: Engine;
  before(async () => {
    sim = await startSim({ topology: twoNodeTopology('snippet-migrate.yaml') });
    eng = await new Engine(sim, {
      configYaml: () => providerConfigYaml(sim, { ssh: true }),
      pollIntervalMs: 200,
      driftIntervalMs: 400,
    }).start();
  });
  after(async () => {
    await eng.stop();
    await sim.close();
  });

  it('spec.forProvider.node changed: written on the target before the migration, gone from the node left', async () => {
    const spec = { node: 'pve-a', userData: USER_DATA, image: 'local:import/ubuntu-22.04-cloud.qcow2' };
    const key = eng.apply(vm('follows', spec));
    const r0 = await eng.waitReady(key);
    const file = r0.status!.atProvider!.userDataSnippet!;
    assert.deepEqual(await snippetsOn(sim, 'pve-a'), [file]);
    assert.deepEqual(await snippetsOn(sim, 'pve-b'), []);
    eng.apply(vm('follows', { ...spec, node: 'pve-b' }));
    // The copy on pve-a goes at a reconcile after the status naming pve-b was written (snippetLeftOn).
    const r1 = await eng.waitFor(
      key,
      (x) =>
        x.status?.atProvider?.node === 'pve-b' &&
        x.status?.atProvider?.step === 'Ready' &&
        x.status?.atProvider?.snippetLeftOn === undefined,
      'migrated to pve-b, Ready, the copy on pve-a removed',
    );
    const vmid = r1.status!.atProvider!.vmId!;
    assert.equal(sim.cluster(SITE1).state.vms.get(vmid)!.config.cicustom, `user=${file}`);
    assert.deepEqual(await snippetsOn(sim, 'pve-b'), [file]);
    assert.deepEqual(await snippetsOn(sim, 'pve-a'), []);
  });

  it('moved by someone else (HA, a person): followed, its snippet written on the new node, then gone from the old', async () => {
    const c = sim.cluster(SITE1);
    const key = 'default/follows';
    const r0 = eng.get(key);
    const vmid = r0.status!.atProvider!.vmId!;
    const file = r0.status!.atProvider!.userDataSnippet!;
    const res = await raw(c.url, 'POST', `/nodes/pve-b/qemu/${vmid}/migrate`, {
      form: { target: 'pve-a', online: '1', 'with-local-disks': '1' },
    });
    assert.equal(res.status, 200, res.text);
    await waitTask(c.url, 'pve-b', (res.json as { data: string }).data);
    assert.deepEqual(await snippetsOn(sim, 'pve-a'), [], 'PVE moved the disks, not the snippet');
    await eng.waitFor(key, (x) => x.status?.atProvider?.snippetLeftOn === 'pve-b', 'followed to pve-a');
    assert.deepEqual(await snippetsOn(sim, 'pve-a'), [file], 'written on the node it is on');
    assert.deepEqual(await snippetsOn(sim, 'pve-b'), [file], 'kept on the node left until that status is written');
    await eng.waitFor(
      key,
      (x) => x.status?.atProvider?.node === 'pve-a' && x.status?.atProvider?.snippetLeftOn === undefined,
      'the copy on pve-b removed',
    );
    assert.deepEqual(await snippetsOn(sim, 'pve-a'), [file]);
    assert.deepEqual(await snippetsOn(sim, 'pve-b'), []);
    assert.equal(c.state.vms.get(vmid)!.node, 'pve-a', 'followed, not moved back (placementPolicy Follow)');
  });

  it("the user's own snippet (cloudInit.userDataSnippet) on a node-local storage: no migration until it is on the target", async () => {
    const c = sim.cluster(SITE1);
    await userSnippet(sim, 'pve-a', 'mine.yaml');
    const spec = {
      node: 'pve-a',
      image: 'local:import/ubuntu-22.04-cloud.qcow2',
      cloudInit: { userDataSnippet: 'local:snippets/mine.yaml' },
    };
    const key = eng.apply(vm('own-snippet', spec));
    const vmid = (await eng.waitReady(key)).status!.atProvider!.vmId!;
    const migrations = () => c.counters()['POST /nodes/{node}/qemu/{vmid}/migrate'] ?? 0;
    const before = migrations();
    eng.apply(vm('own-snippet', { ...spec, node: 'pve-b' }));
    const refused = await eng.waitFor(key, (x) => cond(x, 'Synced')?.reason === 'MigrationRefused', 'refused');
    assert.match(
      cond(refused, 'Synced')!.message!,
      /userDataSnippet local:snippets\/mine\.yaml is not on node pve-b \(storage 'local' is not shared\).*Copy the file to pve-b/,
    );
    assert.equal(migrations(), before, 'nothing was sent');
    assert.equal(c.state.vms.get(vmid)!.node, 'pve-a');
    // The user copies it; the retried migration goes.
    await userSnippet(sim, 'pve-b', 'mine.yaml');
    await eng.waitFor(
      key,
      (x) => x.status?.atProvider?.node === 'pve-b' && x.status?.atProvider?.step === 'Ready',
      'migrated once the file is there',
    );
    assert.equal(c.state.vms.get(vmid)!.node, 'pve-b');
  });
});
