/**
 * Suspend and resume as qemu-server does them: `qmpause` to RAM (`qmpstatus: paused`, still
 * running), `qmsuspend` to disk (a `vm-N-state-suspend-DATE` volume, `lock: suspended`, `vmstate`,
 * the VM stopped), `qmresume` and `qmstart` resuming from it and removing the state; the errors
 * for stopped, locked and paused VMs, and the privileges (VM.PowerMgmt, and for todisk
 * VM.Config.Disk and Datastore.AllocateSpace on the state storage).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { SimCluster, Simulator } from '../../src/sim/index.ts';
import { parseTopology } from '../../src/sim/topology.ts';
import { assertError, data, finish, NODE, power, taskLines, vmConfig } from '../helpers/fidelity.ts';
import { raw, startTestSim } from '../helpers/sim.ts';

const TOPOLOGY = `
clusters:
  - name: site-1
    listen: 127.0.0.1:0
    nodes:
      - name: ${NODE}
        cpus: 8
        memory: 64G
        storages:
          - { id: local, type: dir, content: [iso, backup, images], total: 100G }
          - { id: thin, type: lvmthin, content: [images], total: 500G }
        bridges: [{ name: vmbr0 }]
        vms:
          - { vmid: 120, name: a, disk: { storage: thin, size: 1G }, memory: 1024, running: true }
          - { vmid: 121, name: b, disk: { storage: thin, size: 1G }, memory: 1024, running: true }
          - { vmid: 122, name: off, disk: { storage: thin, size: 1G } }
`;

async function post(url: string, vmid: number, action: string, form?: Record<string, string>) {
  return raw(url, 'POST', `/nodes/${NODE}/qemu/${vmid}/status/${action}`, form ? { form } : {});
}

async function current(url: string, vmid: number): Promise<Record<string, unknown>> {
  return data(await raw(url, 'GET', `/nodes/${NODE}/qemu/${vmid}/status/current`));
}

describe('suspend and resume', () => {
  let sim: Simulator;
  let c: SimCluster;
  let url: string;
  before(async () => {
    sim = await startTestSim({ topology: parseTopology(TOPOLOGY, 'suspend.yaml') });
    c = sim.cluster('site-1');
    url = c.url;
  });
  after(() => sim.close());

  it('to RAM: task qmpause, qmpstatus paused, shutdown refused, resume with qmresume', async () => {
    const r = await post(url, 120, 'suspend');
    assert.equal(r.status, 200);
    assert.match(data<string>(r), /:qmpause:120:/);
    assert.equal(await finish(url, data<string>(r)), 'OK');
    const st = await current(url, 120);
    assert.equal(st.status, 'running');
    assert.equal(st.qmpstatus, 'paused');
    assertError(await post(url, 120, 'shutdown'), 500, 'VM is paused - cannot shutdown');
    assertError(await post(url, 120, 'reboot'), 500, 'VM is paused - cannot shutdown');
    const res = await post(url, 120, 'resume');
    assert.match(data<string>(res), /:qmresume:120:/);
    assert.equal(await finish(url, data<string>(res)), 'OK');
    assert.equal((await current(url, 120)).qmpstatus, 'running');
    // A running VM that is not paused: "job done", no error (RunState.pm vm_resume).
    assert.equal(await finish(url, data<string>(await post(url, 120, 'resume'))), 'OK');
  });

  it('stopped VMs: suspend and resume refused before a task', async () => {
    assertError(await post(url, 122, 'suspend'), 500, 'VM 122 not running');
    assertError(await post(url, 122, 'suspend', { todisk: '1' }), 500, 'VM 122 not running');
    assertError(await post(url, 122, 'resume'), 500, 'VM 122 not running');
    assertError(
      await post(url, 999, 'suspend'),
      500,
      `Configuration file 'nodes/${NODE}/qemu-server/999.conf' does not exist`,
    );
    // statestorage requires todisk (schema).
    const r = await post(url, 120, 'suspend', { statestorage: 'local' });
    assert.equal(r.status, 400);
  });

  it('a locked VM: the worker fails with the lock', async () => {
    const id = c.addFault({ kind: 'lock', vmid: 121, lock: 'snapshot', flock: false });
    assert.equal(await finish(url, data<string>(await post(url, 121, 'suspend'))), 'VM is locked (snapshot)');
    c.removeFault(id);
  });

  it('to disk: qmsuspend writes the state volume, locks suspended and stops; start resumes', async () => {
    const r = await post(url, 121, 'suspend', { todisk: '1', statestorage: 'local' });
    assert.match(data<string>(r), /:qmsuspend:121:/);
    assert.equal(await finish(url, data<string>(r)), 'OK');
    const conf = await vmConfig(url, 121);
    assert.equal(conf.lock, 'suspended');
    const date = new Date(c.state.clock.now()).toISOString().slice(0, 10);
    assert.equal(conf.vmstate, `local:121/vm-121-state-suspend-${date}.raw`);
    assert.equal((await current(url, 121)).status, 'stopped');
    const content = data<Array<{ volid: string; size: number }>>(
      await raw(url, 'GET', `/nodes/${NODE}/storage/local/content?content=images`),
    );
    const vol = content.find((v) => v.volid === conf.vmstate);
    assert.equal(vol?.size, (1024 * 2 + 500) * 1024 * 1024);
    // Other actions see the lock; resume (and start) do not.
    assertError(
      await raw(url, 'PUT', `/nodes/${NODE}/qemu/121/config`, { form: { cores: '2' } }),
      500,
      'VM is locked (suspended)',
    );
    const res = await post(url, 121, 'resume');
    const upid = data<string>(res);
    assert.equal(await finish(url, upid), 'OK');
    const lines = await taskLines(url, upid);
    assert.ok(lines.includes('Resuming suspended VM'), lines.join('\n'));
    assert.ok(lines.includes('Resumed VM, removing state'));
    const after = await vmConfig(url, 121);
    assert.equal(after.lock, undefined);
    assert.equal(after.vmstate, undefined);
    assert.equal((await current(url, 121)).status, 'running');
    const left = data<Array<{ volid: string }>>(await raw(url, 'GET', `/nodes/${NODE}/storage/local/content`));
    assert.ok(!left.some((v) => v.volid === conf.vmstate), 'state volume removed');
    // Hibernate again, then a plain start resumes from the state the same way.
    assert.equal(await finish(url, data<string>(await post(url, 121, 'suspend', { todisk: '1' }))), 'OK');
    // find_vmstate_storage: the VM's only disk storage (thin), no `.raw` on block storage.
    assert.equal((await vmConfig(url, 121)).vmstate, `thin:vm-121-state-suspend-${date}`);
    assert.equal(await power(url, 121, 'start'), 'OK');
    assert.equal((await vmConfig(url, 121)).lock, undefined);
  });

  it('privileges: VM.PowerMgmt; todisk also VM.Config.Disk and Datastore.AllocateSpace', async () => {
    const tok = 'root@pam!pm';
    const r = await raw(url, 'POST', `/access/users/${encodeURIComponent('root@pam')}/token/pm`, {
      form: { privsep: '1' },
    });
    const secret = data<{ value: string }>(r).value;
    const headers = { Authorization: `PVEAPIToken=${tok}=${secret}` };
    const as = (vmid: number, form?: Record<string, string>) =>
      raw(url, 'POST', `/nodes/${NODE}/qemu/${vmid}/status/suspend`, { headers, ...(form ? { form } : {}) });
    assertError(await as(120), 403, 'Permission check failed (/vms/120, VM.PowerMgmt)');
    await raw(url, 'PUT', '/access/acl', { form: { path: '/vms/120', tokens: tok, roles: 'PVEVMUser' } });
    assertError(await as(120, { todisk: '1' }), 403, 'Permission check failed (/vms/120, VM.Config.Disk)');
    await raw(url, 'PUT', '/access/acl', { form: { path: '/vms/120', tokens: tok, roles: 'PVEVMAdmin' } });
    assertError(
      await as(120, { todisk: '1' }),
      403,
      'Permission check failed (/storage/thin, Datastore.AllocateSpace)',
    );
    const ok = await as(120);
    assert.equal(ok.status, 200);
    assert.equal(await finish(url, data<string>(ok)), 'OK');
    // nocheck is root@pam's only (a token of root is not root@pam).
    const nc = await raw(url, 'POST', `/nodes/${NODE}/qemu/120/status/resume`, { headers, form: { nocheck: '1' } });
    assert.equal(nc.status, 400);
    assert.equal(await finish(url, data<string>(await post(url, 120, 'resume'))), 'OK');
  });
});
