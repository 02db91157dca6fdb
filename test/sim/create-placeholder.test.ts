/**
 * The intermediate states of a create, as PVE shows and leaves them (src/sim/routes/qemu-create.ts
 * cites qemu-server): the `lock: create` placeholder in GET config, status/current and
 * /cluster/resources while the worker runs; the final write that ends the lock; the error path
 * that frees the disks and removes the config; and a worker that dies (task fault `die`), which
 * leaves the placeholder and its disks behind with the exit status `unexpected status`.
 *
 * Deterministic: stall faults hold the states under test, `step` places a stall or a death at a
 * given simulated wait, and pvestatd ticks are awaited by polling their effect.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { SimCluster, Simulator } from '../../src/sim/index.ts';
import {
  assertError,
  createVm,
  data,
  finish,
  login,
  NODE,
  taskLines,
  taskLog,
  ticketHeaders,
  vmConfig,
} from '../helpers/fidelity.ts';
import { raw, startTestSim } from '../helpers/sim.ts';

const sha1 = (text: string) => createHash('sha1').update(text).digest('hex');

type Resource = Record<string, unknown> & { vmid?: number; status?: string };

async function resource(url: string, vmid: number): Promise<Resource | undefined> {
  return data<Resource[]>(await raw(url, 'GET', '/cluster/resources?type=vm')).find((r) => r.vmid === vmid);
}

async function volumesOf(url: string, vmid: number): Promise<string[]> {
  const r = await raw(url, 'GET', `/nodes/${NODE}/storage/local-lvm/content?vmid=${vmid}`);
  return data<Array<{ volid: string }>>(r).map((v) => v.volid);
}

/** Wait (polling, bounded) until a condition holds: the pvestatd tick runs on its own timer. */
async function until(what: string, cond: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 2000; i++) {
    if (await cond()) return;
    await new Promise((r) => setTimeout(r, 1));
  }
  throw new Error(`timed out waiting for ${what}`);
}

describe('create: the lock-create placeholder', () => {
  let sim: Simulator;
  let c: SimCluster;
  let url: string;
  before(async () => {
    sim = await startTestSim();
    c = sim.cluster('site-1');
    url = c.url;
  });
  after(() => sim.close());
  beforeEach(() => c.clearFaults());

  it('mid-create: config is only `lock: create`; status/current and /cluster/resources as PVE shows them', async () => {
    const stall = c.addFault({ kind: 'task', type: 'qmcreate', id: '400', action: 'stall' });
    const upid = await createVm(url, { vmid: '400', name: 'web-1', scsi0: 'local-lvm:1', description: 'owner=x' });

    // The file create_and_lock_config wrote: `lock: create\n`, nothing else (no name, no marker).
    assert.deepEqual(await vmConfig(url, 400), { lock: 'create', digest: sha1('lock: create\n') });
    const st = data<Record<string, unknown>>(await raw(url, 'GET', `/nodes/${NODE}/qemu/400/status/current`));
    assert.equal(st.name, 'VM 400', 'vmstatus names a nameless config "VM <vmid>"');
    assert.equal(st.status, 'stopped');
    assert.equal(st.lock, 'create');
    assert.equal(st.cpus, 1);
    assert.equal(st.maxmem, 512 * 1024 ** 2);
    assert.equal(st.maxdisk, 0);
    assert.equal('agent' in st, false);

    // /cluster/resources: the lock at once (a config property), the rest from a pvestatd tick
    // (fidelity #27 shows the `status: unknown` before the first one).
    assert.equal((await resource(url, 400))?.lock, 'create');
    await until('a pvestatd tick', async () => (await resource(url, 400))?.status !== 'unknown');
    const ticked = (await resource(url, 400))!;
    assert.equal(ticked.name, 'VM 400');
    assert.equal(ticked.status, 'stopped');
    assert.equal(ticked.lock, 'create');
    assert.equal(ticked.template, 0);

    c.removeFault(stall);
    assert.equal(await finish(url, upid), 'OK');
    // The final write replaces the file with the parameters' config: no lock any more.
    const done = await vmConfig(url, 400);
    assert.equal(done.lock, undefined);
    assert.equal(done.name, 'web-1');
    assert.equal(done.description, 'owner=x');
    assert.equal((await resource(url, 400))?.lock, undefined);
    // The RRD still has the placeholder's name until the next tick.
    await until('the next tick', async () => (await resource(url, 400))?.name === 'web-1');
  });

  it('pvestatd hung on the node (stats-stalled): a create that ended is still listed as `VM <vmid>`; the lock follows the config', async () => {
    const stall = c.addFault({ kind: 'task', type: 'qmcreate', id: '403', action: 'stall' });
    const upid = await createVm(url, { vmid: '403', name: 'web-3', scsi0: 'local-lvm:1' });
    await until('a pvestatd tick', async () => (await resource(url, 403))?.status !== 'unknown');
    const hung = c.addFault({ kind: 'stats-stalled', node: NODE });
    c.removeFault(stall);
    assert.equal(await finish(url, upid), 'OK');
    assert.equal((await vmConfig(url, 403)).name, 'web-3');
    const listed = (await resource(url, 403))!;
    assert.equal(listed.name, 'VM 403', 'the name of the last tick, before the config was written');
    assert.equal(listed.lock, undefined, 'the lock from the live config: gone with the final write');
    // A VM made while pvestatd hangs has no statistics at all.
    assert.equal(await finish(url, await createVm(url, { vmid: '404', name: 'web-4' })), 'OK');
    assert.equal((await resource(url, 404))?.status, 'unknown');
    assert.equal((await resource(url, 404))?.name, undefined);
    assert.throws(() => c.addFault({ kind: 'stats-stalled', node: 'nope' }), /no node 'nope'/);
    c.removeFault(hung);
    await until('the next tick', async () => (await resource(url, 403))?.name === 'web-3');
    await until('the next tick', async () => (await resource(url, 404))?.name === 'web-4');
    for (const vmid of [403, 404]) {
      const res = await raw(url, 'DELETE', `/nodes/${NODE}/qemu/${vmid}`);
      assert.equal(await finish(url, data<string>(res)), 'OK');
    }
  });

  it('a create error after the first disk frees every new volume and removes the config', async () => {
    // scsi0 is allocated, then scsi1 (far beyond the thin pool) fails.
    const upid = await createVm(url, { vmid: '401', scsi0: 'local-lvm:1', scsi1: 'local-lvm:100000' });
    const status = await finish(url, upid);
    assert.match(String(status), /^unable to create VM 401 - lvcreate 'pve\/vm-401-disk-1' error: /);
    assertError(
      await raw(url, 'GET', `/nodes/${NODE}/qemu/401/config`),
      500,
      `Configuration file 'nodes/${NODE}/qemu-server/401.conf' does not exist`,
    );
    assert.deepEqual(await volumesOf(url, 401), []);
  });

  it('a second create of the VMID waits on the worker flock, then PVE answers "already exists"', async () => {
    const stall = c.addFault({ kind: 'task', type: 'qmcreate', id: '402', action: 'stall' });
    const upid = await createVm(url, { vmid: '402', scsi0: 'local-lvm:1' });
    assertError(
      await raw(url, 'POST', `/nodes/${NODE}/qemu`, { form: { vmid: '402' } }),
      500,
      "unable to create VM 402 - can't lock file '/var/lock/qemu-server/lock-402.conf' - got timeout",
    );
    c.removeFault(stall);
    assert.equal(await finish(url, upid), 'OK');
    assertError(
      await raw(url, 'POST', `/nodes/${NODE}/qemu`, { form: { vmid: '402' } }),
      500,
      `unable to create VM 402 - VM 402 already exists on node '${NODE}'`,
    );
  });
});

describe('create: a worker that dies leaves its placeholder', () => {
  let sim: Simulator;
  let c: SimCluster;
  let url: string;
  before(async () => {
    sim = await startTestSim();
    c = sim.cluster('site-1');
    url = c.url;
  });
  after(() => sim.close());
  beforeEach(() => c.clearFaults());

  it('die at start: `unexpected status`, no TASK line, the placeholder stays, the flock is free', async () => {
    c.addFault({ kind: 'task', type: 'qmcreate', id: '410', action: 'die', at: 'start' });
    const upid = await createVm(url, { vmid: '410', scsi0: 'local-lvm:1' });
    assert.equal(await finish(url, upid), 'unexpected status');
    assert.deepEqual(data(await taskLog(url, upid)), [{ n: 1, t: 'no content' }]);
    assert.deepEqual(await vmConfig(url, 410), { lock: 'create', digest: sha1('lock: create\n') });
    assert.deepEqual(await volumesOf(url, 410), []);
    // The process took its flock with it: writes fail on the lock at once, not on a flock timeout.
    assertError(
      await raw(url, 'PUT', `/nodes/${NODE}/qemu/410/config`, { form: { description: 'x' } }),
      500,
      'VM is locked (create)',
    );
    assert.notEqual(data(await raw(url, 'GET', '/cluster/nextid')), '410');
    // Only root@pam with a ticket can clear it; then the orphan can be destroyed.
    const t = await login(url);
    const unlock = await raw(url, 'PUT', `/nodes/${NODE}/qemu/410/config`, {
      form: { delete: 'lock', skiplock: '1' },
      headers: ticketHeaders(t),
    });
    assert.equal(unlock.status, 200, unlock.reason);
    assert.equal(await finish(url, data<string>(await raw(url, 'DELETE', `/nodes/${NODE}/qemu/410`))), 'OK');
  });

  it('die at end: every disk allocated, the config still the placeholder (orphan volumes)', async () => {
    c.addFault({ kind: 'task', type: 'qmcreate', id: '411', action: 'die', at: 'end' });
    const upid = await createVm(url, {
      vmid: '411',
      name: 'late',
      scsi0: 'local-lvm:1',
      ide2: 'local-lvm:cloudinit',
      description: 'owner=y',
    });
    assert.equal(await finish(url, upid), 'unexpected status');
    const lines = await taskLines(url, upid);
    assert.ok(lines.includes('  Logical volume "vm-411-disk-0" created.'), lines.join('\n'));
    assert.equal(
      lines.some((l) => l.startsWith('TASK ')),
      false,
      lines.join('\n'),
    );
    assert.deepEqual(await vmConfig(url, 411), { lock: 'create', digest: sha1('lock: create\n') });
    assert.deepEqual(await volumesOf(url, 411), ['local-lvm:vm-411-cloudinit', 'local-lvm:vm-411-disk-0']);
  });

  it('die at step 3 of an import (step 1 allocates): the target volume exists, half copied; over /_sim/faults', async () => {
    const add = await fetch(`${url}/_sim/faults`, {
      method: 'POST',
      headers: { Authorization: 'PVEAPIToken=root@pam!test=c0ffee00-0000-4000-8000-000000000001' },
      body: JSON.stringify({ kind: 'task', type: 'qmcreate', id: '412', action: 'die', step: 3 }),
    });
    assert.equal(add.status, 200);
    const upid = await createVm(url, {
      vmid: '412',
      scsi0: 'local-lvm:0,import-from=local:import/ubuntu-22.04-cloud.qcow2',
    });
    assert.equal(await finish(url, upid), 'unexpected status');
    const lines = await taskLines(url, upid);
    assert.ok(lines.includes('transferred 563.0 MiB of 2.2 GiB (25.00%)'), lines.join('\n'));
    assert.equal(
      lines.some((l) => l.includes('26.00%') || l.startsWith('TASK ')),
      false,
    );
    assert.deepEqual(await volumesOf(url, 412), ['local-lvm:vm-412-disk-0']);
    assert.equal((await vmConfig(url, 412)).lock, 'create');
  });

  it('a bad die or stall step is refused', async () => {
    assert.throws(
      () => c.addFault({ kind: 'task', action: 'die', step: 0 }),
      /task fault step must be an integer >= 1/,
    );
    assert.throws(() => c.addFault({ kind: 'task', action: 'fail', step: 2 }), /applies to 'stall' and 'die' only/);
  });
});
