/**
 * The intermediate configs of a clone, as qemu-server writes them (src/sim/routes/qemu-clone.ts
 * cites the lines): the `# qmclone temporary file` config (GET config: description
 * " qmclone temporary file", `lock: clone`), the rewrite after each disk (name, the new
 * description, the disks so far, still `lock: clone`), the final write without the lock, the pool
 * joined only after it; a worker that dies keeps what it wrote. 6.4 writes the temporary config in
 * the handler, later versions in the worker. Clones of one stopped template run side by side
 * (shared flock on the source).
 *
 * Deterministic: stall faults with `step` hold the clone at a chosen simulated wait; template 9000
 * has two disks, ide2 (cloud-init, wait 1) and scsi0 (linked clone, wait 2).
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { SimCluster, Simulator } from '../../src/sim/index.ts';
import { ALL_PROFILES, assertError, data, finish, NODE, taskLines, vmConfig } from '../helpers/fidelity.ts';
import { raw, startTestSim } from '../helpers/sim.ts';

const sha1 = (text: string) => createHash('sha1').update(text).digest('hex');
const TEMP = {
  description: ' qmclone temporary file',
  lock: 'clone',
  digest: sha1('# qmclone temporary file\nlock: clone\n'),
};

async function clone(url: string, newid: number, form: Record<string, string> = {}): Promise<string> {
  const r = await raw(url, 'POST', `/nodes/${NODE}/qemu/9000/clone`, { form: { newid: String(newid), ...form } });
  assert.equal(r.status, 200, `${r.status} ${r.reason}`);
  return data<string>(r);
}

async function configOrNull(url: string, vmid: number): Promise<Record<string, unknown> | null> {
  const r = await raw(url, 'GET', `/nodes/${NODE}/qemu/${vmid}/config`);
  return r.status === 200 ? data<Record<string, unknown>>(r) : null;
}

/** Poll until the clone's config changes (the worker moves on once a stall is removed). */
async function configWith(url: string, vmid: number, key: string): Promise<Record<string, unknown>> {
  for (let i = 0; i < 2000; i++) {
    const cfg = await configOrNull(url, vmid);
    if (cfg && key in cfg) return cfg;
    await new Promise((r) => setImmediate(r));
  }
  throw new Error(`config of ${vmid} never got ${key}`);
}

for (const profile of ALL_PROFILES) {
  const handlerWrites = profile === '6.4';
  describe(`clone intermediate configs, profile ${profile}`, () => {
    let sim: Simulator;
    let c: SimCluster;
    let url: string;
    before(async () => {
      sim = await startTestSim({ profile });
      c = sim.cluster('site-1');
      url = c.url;
    });
    after(() => sim.close());
    beforeEach(() => c.clearFaults());

    it('the temporary config, then after the first disk the new description, then no lock', async () => {
      const first = c.addFault({ kind: 'task', type: 'qmclone', action: 'stall', step: 1 });
      const second = c.addFault({ kind: 'task', type: 'qmclone', action: 'stall', step: 2 });
      const upid = await clone(url, 500, { name: 'web-1', description: 'owned-by: ns/web-1' });
      assert.deepEqual(await vmConfig(url, 500), TEMP);
      const st = data<Record<string, unknown>>(await raw(url, 'GET', `/nodes/${NODE}/qemu/500/status/current`));
      assert.equal(st.lock, 'clone');
      assert.equal(st.name, 'VM 500');

      c.removeFault(first);
      const mid = await configWith(url, 500, 'ide2');
      const tpl = await vmConfig(url, 9000);
      assert.equal(mid.lock, 'clone');
      assert.equal(mid.name, 'web-1');
      assert.equal(mid.description, 'owned-by: ns/web-1');
      assert.equal(mid.ide2, 'local-lvm:vm-500-cloudinit,media=cdrom');
      assert.equal(mid.scsi0, undefined, 'scsi0 is not cloned yet');
      assert.equal(mid.template, undefined);
      assert.equal(mid.cores, tpl.cores);
      assert.notEqual(mid.net0, tpl.net0, 'a new MAC');
      assert.notEqual(mid.smbios1, tpl.smbios1);

      c.removeFault(second);
      assert.equal(await finish(url, upid), 'OK');
      const done = await vmConfig(url, 500);
      assert.equal(done.lock, undefined);
      assert.equal(done.scsi0, 'local-lvm:base-9000-disk-0/vm-500-disk-0,size=2252M');
      assert.equal(done.description, 'owned-by: ns/web-1');
      const lines = await taskLines(url, upid);
      assert.equal(lines[0] === 'creating a clone of VM 9000 with ID 500', profile === '9.2', lines.join('\n'));
    });

    it('an empty description keeps the source one; the default name is Copy-of-VM-<name>', async () => {
      await vmConfig(url, 9000);
      const upid = await clone(url, 501, { description: '' });
      assert.equal(await finish(url, upid), 'OK');
      const cfg = await vmConfig(url, 501);
      assert.equal(cfg.name, 'Copy-of-VM-ubuntu-2204-cloudinit');
      assert.equal(cfg.description, undefined);
    });

    it(`die at start: ${handlerWrites ? 'the handler already wrote the temporary config' : 'nothing was written yet'}`, async () => {
      c.addFault({ kind: 'task', type: 'qmclone', action: 'die', at: 'start' });
      const upid = await clone(url, 502);
      assert.equal(await finish(url, upid), 'unexpected status');
      if (handlerWrites) assert.deepEqual(await vmConfig(url, 502), TEMP);
      else assert.equal(await configOrNull(url, 502), null);
      // The dead worker's flocks are gone: the template clones again at once.
      const again = await clone(url, 503);
      assert.equal(await finish(url, again), 'OK');
    });

    it('die at end: all disks cloned, `lock: clone` kept, the pool not joined, no cleanup', async () => {
      const pools = await raw(url, 'POST', '/pools', { form: { poolid: `p${profile.replace('.', '')}` } });
      assert.equal(pools.status, 200);
      const pool = `p${profile.replace('.', '')}`;
      c.addFault({ kind: 'task', type: 'qmclone', action: 'die', at: 'end' });
      const upid = await clone(url, 504, { name: 'dies', description: 'marker', pool });
      assert.equal(await finish(url, upid), 'unexpected status');
      assert.equal(
        (await taskLines(url, upid)).some((l) => l.startsWith('TASK ')),
        false,
      );
      const cfg = await vmConfig(url, 504);
      assert.equal(cfg.lock, 'clone');
      assert.equal(cfg.description, 'marker');
      assert.equal(cfg.scsi0, 'local-lvm:base-9000-disk-0/vm-504-disk-0,size=2252M');
      const members = data<{ members: Array<{ vmid: number }> }>(await raw(url, 'GET', `/pools/${pool}`)).members;
      assert.deepEqual(members, []);
      assertError(
        await raw(url, 'POST', `/nodes/${NODE}/qemu/504/config`, { form: { description: 'x' } }),
        500,
        'VM is locked (clone)',
      );
    });

    it('clones of one stopped template run side by side (shared source flock)', async () => {
      const stall = c.addFault({ kind: 'task', type: 'qmclone', action: 'stall', step: 1, count: 2 });
      const a = await clone(url, 505);
      const b = await clone(url, 506);
      assert.deepEqual(await vmConfig(url, 505), TEMP);
      assert.deepEqual(await vmConfig(url, 506), TEMP);
      c.removeFault(stall);
      assert.equal(await finish(url, a), 'OK');
      assert.equal(await finish(url, b), 'OK');
    });

    it('a clone to a VMID that a create is making fails on the flock or the existing config', async () => {
      const stall = c.addFault({ kind: 'task', type: 'qmcreate', id: '507', action: 'stall' });
      const create = await raw(url, 'POST', `/nodes/${NODE}/qemu`, { form: { vmid: '507' } });
      assert.equal(create.status, 200);
      // The placeholder exists: the early check refuses at once.
      assertError(
        await raw(url, 'POST', `/nodes/${NODE}/qemu/9000/clone`, { form: { newid: '507' } }),
        500,
        'unable to create VM 507: config file already exists',
      );
      c.removeFault(stall);
      assert.equal(await finish(url, data<string>(create)), 'OK');
    });
  });
}
