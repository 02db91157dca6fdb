/**
 * The cloud-init "pending" bookkeeping of qemu-server 7.2-8 on: on a running VM a cloud-init
 * option is applied to the config at once (fast-plug) and the value the drive was generated from
 * is kept in `[special:cloudinit]`; GET .../cloudinit lists it (src/PVE/API2/Qemu.pm:1966-2010,
 * with its quirks: only `$cloudinitoptions` are shown with their values, so an `ipconfigN` or
 * `name` change is recorded but not listed), PUT .../cloudinit regenerates the drive and clears
 * the section, as a start does. Under 6.4 the options stay pending and GET .../cloudinit is 501.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Simulator } from '../../src/sim/index.ts';
import { data, finish, NODE, power } from '../helpers/fidelity.ts';
import { raw, startTestSim } from '../helpers/sim.ts';

const KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMq one@example';
const KEY2 = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMq two@example';

async function put(url: string, vmid: number, form: Record<string, string>) {
  const r = await raw(url, 'PUT', `/nodes/${NODE}/qemu/${vmid}/config`, { form });
  assert.equal(r.status, 200, `${r.status} ${r.reason}`);
}

async function pendingCi(url: string, vmid: number) {
  const r = await raw(url, 'GET', `/nodes/${NODE}/qemu/${vmid}/cloudinit`);
  assert.equal(r.status, 200, r.reason);
  return data<Array<Record<string, unknown>>>(r).sort((a, b) => String(a.key).localeCompare(String(b.key)));
}

describe('cloud-init pending values (PVE 8.4)', () => {
  let sim: Simulator;
  let url: string;
  before(async () => {
    sim = await startTestSim({ profile: '8.4' });
    url = sim.cluster('site-1').url;
    const r = await raw(url, 'POST', `/nodes/${NODE}/qemu/9000/clone`, { form: { newid: '150' } });
    assert.equal(await finish(url, data<string>(r)), 'OK');
    await put(url, 150, { sshkeys: encodeURIComponent(KEY), ciuser: 'ops' });
    assert.equal(await power(url, 150, 'start'), 'OK');
  });
  after(() => sim.close());

  it('after the start the drive matches the config: only current values', async () => {
    assert.deepEqual(await pendingCi(url, 150), [
      { key: 'ciuser', value: 'ops' },
      { key: 'sshkeys', value: encodeURIComponent(KEY) },
    ]);
  });

  it('changes on the running VM: in the config at once, the old values in the special section', async () => {
    const digest = data<{ digest: string }>(await raw(url, 'GET', `/nodes/${NODE}/qemu/150/config`)).digest;
    await put(url, 150, {
      sshkeys: encodeURIComponent(KEY2),
      searchdomain: 'lab.example',
      ipconfig0: 'ip=192.0.2.50/24',
    });
    await put(url, 150, { delete: 'ciuser' });
    const cfg = data<Record<string, string>>(await raw(url, 'GET', `/nodes/${NODE}/qemu/150/config`));
    assert.equal(cfg.sshkeys, encodeURIComponent(KEY2));
    assert.equal(cfg.ciuser, undefined);
    assert.notEqual(cfg.digest, digest);
    // Nothing is pending in the config's sense.
    const pend = data<Array<{ key: string; pending?: unknown }>>(
      await raw(url, 'GET', `/nodes/${NODE}/qemu/150/pending`),
    );
    assert.deepEqual(
      pend.filter((p) => p.pending !== undefined),
      [],
    );
    // ipconfig0 is recorded too, but the existing-values loop lists $cloudinitoptions only.
    assert.deepEqual(await pendingCi(url, 150), [
      { key: 'ciuser', delete: 1 },
      { key: 'searchdomain', pending: 'lab.example' },
      { key: 'sshkeys', value: encodeURIComponent(KEY), pending: encodeURIComponent(KEY2) },
    ]);
    assert.equal(sim.cluster('site-1').state.vms.get(150)!.cloudinitSection.ipconfig0, 'ip=dhcp');
    // Reverting a value to the drive's drops it from the section.
    await put(url, 150, { sshkeys: encodeURIComponent(KEY) });
    assert.ok(!(await pendingCi(url, 150)).some((e) => e.key === 'sshkeys' && 'pending' in e));
  });

  it('PUT .../cloudinit regenerates the drive: the section is gone', async () => {
    const r = await raw(url, 'PUT', `/nodes/${NODE}/qemu/150/cloudinit`);
    assert.equal(r.status, 200, r.reason);
    assert.equal(data(r), null);
    assert.deepEqual(await pendingCi(url, 150), [
      { key: 'searchdomain', value: 'lab.example' },
      { key: 'sshkeys', value: encodeURIComponent(KEY) },
    ]);
    const drive = sim.cluster('site-1').state.vms.get(150)!.ciDrive!;
    assert.match(drive.networkData, /address: '192\.0\.2\.50'\n\s+netmask: '255\.255\.255\.0'/);
    assert.match(drive.userData, /^fqdn: Copy-of-VM-ubuntu-2204-cloudinit\.lab\.example$/m);
  });

  it('the password is masked in GET .../cloudinit and in a dump for a user without VM.Config.Cloudinit', async () => {
    await put(url, 150, { cipassword: 'secret-pw-1' });
    const ci = await pendingCi(url, 150);
    assert.deepEqual(
      ci.find((e) => e.key === 'cipassword'),
      { key: 'cipassword', pending: '**********' },
    );
    const site = sim.cluster('site-1');
    const secret = site.addToken('auditor@pve', 'ro', { privsep: false });
    site.setAcl('/', 'auditor@pve', 'PVEAuditor');
    const dump = await raw(url, 'GET', `/nodes/${NODE}/qemu/150/cloudinit/dump?type=user`, {
      headers: { Authorization: `PVEAPIToken=auditor@pve!ro=${secret}` },
    });
    assert.equal(dump.status, 200, dump.reason);
    assert.match(data<string>(dump), /^password: \*{10}$/m);
    const full = data<string>(await raw(url, 'GET', `/nodes/${NODE}/qemu/150/cloudinit/dump?type=user`));
    assert.match(full, /^password: \$5\$/m);
  });
});

describe('cloud-init options on a running VM under PVE 6.4', () => {
  let sim: Simulator;
  let url: string;
  before(async () => {
    sim = await startTestSim({ profile: '6.4' });
    url = sim.cluster('site-1').url;
    const r = await raw(url, 'POST', `/nodes/${NODE}/qemu/9000/clone`, { form: { newid: '150' } });
    assert.equal(await finish(url, data<string>(r)), 'OK');
    assert.equal(await power(url, 150, 'start'), 'OK');
  });
  after(() => sim.close());

  it('stay pending until the next start; GET .../cloudinit does not exist', async () => {
    await put(url, 150, { ciuser: 'ops' });
    const pend = data<Array<{ key: string; pending?: unknown }>>(
      await raw(url, 'GET', `/nodes/${NODE}/qemu/150/pending`),
    );
    assert.deepEqual(
      pend.find((p) => p.key === 'ciuser'),
      { key: 'ciuser', pending: 'ops' },
    );
    const r = await raw(url, 'GET', `/nodes/${NODE}/qemu/150/cloudinit`);
    assert.equal(r.status, 501);
    assert.equal((await raw(url, 'GET', `/nodes/${NODE}/qemu/150/cloudinit/dump?type=network`)).status, 200);
  });
});
