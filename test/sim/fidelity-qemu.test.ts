/**
 * PVE API fidelity checks 13-20 and 22-28 (../shared/research/pve-api-fidelity.md, section 7):
 * the create lock and flock, new-disk syntax, import-from rules, sshkeys encoding, config value
 * shapes, digest, config writes, resize, clones, power, guest agent, destroy, unlock, the
 * pvestatd lag and flock timeouts, per version profile.
 *
 * Deterministic: speed 1000, task stalls and lock faults hold the states under test; the two
 * checks that need "the flock is released before the waiter gives up" and "the agent is not up
 * yet" run on a speed-50 simulator (200 ms / 500 ms of margin) and move time with the clock.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it, mock } from 'node:test';
import type { Simulator } from '../../src/sim/index.ts';
import {
  ALL_PROFILES,
  assertError,
  createVm,
  createVmAndWait,
  data,
  finish,
  login,
  NODE,
  power,
  taskLines,
  taskStatus,
  ticketHeaders,
  vmConfig,
} from '../helpers/fidelity.ts';
import { type RawResponse, raw, startTestSim } from '../helpers/sim.ts';

const SSH_KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx3b3JsZC1zaW11bGF0b3Ita2V5LTAx ops@sankofa';
const SSH_KEY_2 = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHNlY29uZC1zaW11bGF0b3Ita2V5LTAy ci@sankofa';
const is8 = (p: string) => p === '8.4' || p === '9.2';

function errors(r: RawResponse): Record<string, string> {
  return (r.json as { errors?: Record<string, string> }).errors ?? {};
}

function mac(net: unknown): string {
  return /=([0-9A-Fa-f:]{17})/.exec(String(net))?.[1] ?? '';
}

for (const profile of ALL_PROFILES) {
  describe(`fidelity qemu checks, profile ${profile}`, () => {
    let sim: Simulator;
    let url: string;
    before(async () => {
      sim = await startTestSim({ profile });
      url = sim.cluster('site-1').url;
    });
    after(() => sim.close());

    it('#13 right after create: lock create, nextid skips it, duplicate 500, config locked, start times out', async () => {
      const c = sim.cluster('site-1');
      const stall = c.addFault({ kind: 'task', type: 'qmcreate', id: '100', action: 'stall' });
      const upid = await createVm(url, { vmid: '100', name: 'locked', scsi0: 'local-lvm:1' });
      assert.match(upid, /^UPID:ml110-01:[0-9A-F]{8}:[0-9A-F]{8,9}:[0-9A-F]{8}:qmcreate:100:root@pam!test:$/);
      const cfg = await vmConfig(url, 100);
      assert.equal(cfg.lock, 'create');
      assert.equal(data(await raw(url, 'GET', '/cluster/nextid')), '101');
      // create_and_lock_config checks the VMID under its flock (5 s), which the running create
      // worker holds: a second create times out on it (the VMID check comes after the flock).
      const dup = await raw(url, 'POST', `/nodes/${NODE}/qemu`, { form: { vmid: '100' } });
      assertError(
        dup,
        500,
        "unable to create VM 100 - can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout",
      );
      const post = await raw(url, 'POST', `/nodes/${NODE}/qemu/100/config`, { form: { description: 'x' } });
      assertError(post, 500, 'VM is locked (create)');
      const put = await raw(url, 'PUT', `/nodes/${NODE}/qemu/100/config`, { form: { description: 'x' } });
      assertError(put, 500, 'VM is locked (create)');
      // The create worker holds the VM's flock: a start waits 10 s for it, then gives up.
      const start = await raw(url, 'POST', `/nodes/${NODE}/qemu/100/status/start`);
      assert.equal(start.status, 200);
      assert.equal(
        await finish(url, data<string>(start)),
        "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout",
      );
      c.faults.remove(stall);
      assert.equal(await finish(url, upid), 'OK');
      const done = await vmConfig(url, 100);
      assert.equal(done.lock, undefined);
      assert.equal(done.scsi0, 'local-lvm:vm-100-disk-0,size=1G');
      const again = await raw(url, 'POST', `/nodes/${NODE}/qemu`, { form: { vmid: '100' } });
      assertError(again, 500, `unable to create VM 100 - VM 100 already exists on node '${NODE}'`);
    });

    it('#14 scsi0=local-lvm:32 is 32 GiB; local-lvm:32G is not the new-disk syntax', async () => {
      await createVmAndWait(url, { vmid: '110', scsi0: 'local-lvm:32' });
      assert.equal((await vmConfig(url, 110)).scsi0, 'local-lvm:vm-110-disk-0,size=32G');
      const withUnit = await raw(url, 'POST', `/nodes/${NODE}/qemu`, { form: { vmid: '111', scsi0: 'local-lvm:32G' } });
      assertError(withUnit, 500, "unable to parse lvm volume name '32G'");
      const gone = await raw(url, 'GET', `/nodes/${NODE}/qemu/111/config`);
      assert.equal(gone.status, 500);
    });

    it(`#15 import-from ${profile === '6.4' ? 'does not exist' : 'rules'}`, async () => {
      const form = (vmid: number, scsi0: string) => ({ form: { vmid: String(vmid), scsi0 } });
      const create = (vmid: number, scsi0: string) => raw(url, 'POST', `/nodes/${NODE}/qemu`, form(vmid, scsi0));
      if (profile === '6.4') {
        // qemu-server 7.1-5 (PVE 7.2) added it: the 6.4 drive schema has no such key.
        const r = await create(120, 'local-lvm:0,import-from=local-lvm:base-9000-disk-0');
        assertError(r, 400, 'Parameter verification failed.');
        assert.match(errors(r).scsi0 ?? '', /import-from/);
        return;
      }
      const nonZero = await create(120, 'local-lvm:8,import-from=local-lvm:base-9000-disk-0');
      assertError(nonZero, 400, 'Parameter verification failed.');
      assert.deepEqual(errors(nonZero), {
        scsi0: "'import-from' requires special syntax - use <storage ID>:0,import-from=<source>",
      });
      const iso = await create(120, 'local-lvm:0,import-from=local:iso/ubuntu-22.04-cloud.img');
      assertError(iso, 400, 'Parameter verification failed.');
      assert.equal(
        errors(iso).scsi0,
        `local:iso/ubuntu-22.04-cloud.img has wrong type 'iso' - ${
          profile === '7.4' ? 'not an image' : "needs to be 'images' or 'import'"
        }`,
      );
      // An `images` volume (the template's base disk) is a valid source from 7.2 on.
      await createVmAndWait(url, { vmid: '121', scsi0: 'local-lvm:0,import-from=local-lvm:base-9000-disk-0' });
      assert.equal((await vmConfig(url, 121)).scsi0, 'local-lvm:vm-121-disk-0,size=2252M');
      // `import` content on dir storages: PVE 8.3.
      const imp = await create(122, 'local-lvm:0,import-from=local:import/ubuntu-22.04-cloud.qcow2');
      if (profile === '7.4') {
        assertError(imp, 500, "unable to parse directory volume name 'import/ubuntu-22.04-cloud.qcow2'");
      } else {
        assert.equal(imp.status, 200, `${imp.reason} ${imp.text}`);
        assert.equal(await finish(url, data<string>(imp)), 'OK');
        assert.equal((await vmConfig(url, 122)).scsi0, 'local-lvm:vm-122-disk-0,size=2252M');
      }
      // Absolute paths are for root@pam (a ticket) only; root's token is not root@pam.
      const path = 'local-lvm:0,import-from=/var/lib/vz/template/iso/ubuntu-22.04-cloud.img';
      const byToken = await create(123, path);
      assertError(byToken, 500, /^Only root can pass arbitrary filesystem paths\./);
      const t = await login(url);
      const byRoot = await raw(url, 'POST', `/nodes/${NODE}/qemu`, { ...form(123, path), headers: ticketHeaders(t) });
      assert.equal(byRoot.status, 200, `${byRoot.reason} ${byRoot.text}`);
      assert.equal(await finish(url, data<string>(byRoot)), 'OK');
      assert.equal((await vmConfig(url, 123)).scsi0, 'local-lvm:vm-123-disk-0,size=2252M');
    });

    it('#16 sshkeys must be urlencoded; double-encoded keys are stored and read back encoded', async () => {
      const rawKeys = await raw(url, 'POST', `/nodes/${NODE}/qemu`, { form: { vmid: '130', sshkeys: SSH_KEY } });
      assertError(rawKeys, 400, 'Parameter verification failed.');
      assert.equal(errors(rawKeys).sshkeys, `invalid format - invalid urlencoded string: ${SSH_KEY}\n`);
      const encoded = encodeURIComponent(`${SSH_KEY}\n${SSH_KEY_2}`);
      assert.match(encoded, /%20/);
      assert.match(encoded, /%0A/);
      await createVmAndWait(url, { vmid: '130', ide2: 'local-lvm:cloudinit', sshkeys: encoded });
      assert.equal((await vmConfig(url, 130)).sshkeys, encoded);
      // `+` for a space (form encoding applied only once) is not valid either.
      const plus = await raw(url, 'PUT', `/nodes/${NODE}/qemu/130/config`, {
        form: { sshkeys: SSH_KEY.replace(/ /g, '+') },
      });
      assertError(plus, 400, 'Parameter verification failed.');
      assert.match(errors(plus).sshkeys ?? '', /^invalid format - invalid urlencoded string: /);
    });

    it(`#17 tags, cipassword and memory as profile ${profile} returns them`, async () => {
      await createVmAndWait(url, {
        vmid: '140',
        memory: '2048',
        tags: 'Prod,web;prod',
        ide2: 'local-lvm:cloudinit',
        ciuser: 'ops',
        cipassword: 's3cret',
      });
      const cfg = await vmConfig(url, 140);
      // create_vm stored tags verbatim until qemu-server 9.1.16 (fix #7480).
      assert.equal(cfg.tags, profile === '9.2' ? 'prod;web' : 'Prod,web;prod');
      assert.equal(cfg.cipassword, '**********');
      assert.equal(cfg.ciuser, 'ops');
      // memory became a property string (qemu-server 8.0.8, PVE 8.1).
      if (is8(profile)) assert.equal(cfg.memory, '2048');
      else assert.equal(cfg.memory, 2048);
      assert.equal(cfg.cores === undefined || typeof cfg.cores === 'number', true);
      // update_vm_api normalises with get_unique_tags since qemu-server 7.3.
      const put = await raw(url, 'PUT', `/nodes/${NODE}/qemu/140/config`, { form: { tags: 'Web,Prod;web' } });
      assert.equal(put.status, 200, put.reason);
      assert.equal((await vmConfig(url, 140)).tags, profile === '6.4' ? 'Web,Prod;web' : 'prod;web');
    });

    it('#18 config: 40-hex digest, no vmid; a stale digest is a checksum mismatch', async () => {
      await createVmAndWait(url, { vmid: '150', name: 'digest', memory: '1024' });
      const cfg = await vmConfig(url, 150);
      assert.match(String(cfg.digest), /^[0-9a-f]{40}$/);
      assert.equal('vmid' in cfg, false);
      const stale = '0'.repeat(40);
      for (const method of ['POST', 'PUT'] as const) {
        const r = await raw(url, method, `/nodes/${NODE}/qemu/150/config`, {
          form: { description: 'x', digest: stale },
        });
        assertError(r, 500, 'checksum mismatch (file change by other user?)');
      }
      const ok = await raw(url, 'PUT', `/nodes/${NODE}/qemu/150/config`, {
        form: { description: 'x', digest: String(cfg.digest) },
      });
      assert.equal(ok.status, 200);
      assert.notEqual((await vmConfig(url, 150)).digest, cfg.digest);
    });

    it('#19 config POST is a qmconfig task, PUT answers null, deleting an unset key warns', async () => {
      await createVmAndWait(url, { vmid: '155', name: 'writes' });
      const post = await raw(url, 'POST', `/nodes/${NODE}/qemu/155/config`, { form: { description: 'hello' } });
      assert.equal(post.status, 200);
      const upid = data<string>(post);
      assert.match(upid, /^UPID:ml110-01:[0-9A-F]{8}:[0-9A-F]{8,9}:[0-9A-F]{8}:qmconfig:155:root@pam!test:$/);
      assert.equal(await finish(url, upid), 'OK');
      assert.equal((await vmConfig(url, 155)).description, 'hello');
      const put = await raw(url, 'PUT', `/nodes/${NODE}/qemu/155/config`, { form: { description: 'again' } });
      assert.equal(put.status, 200);
      assert.equal(put.text, '{"data":null}');
      const del = await raw(url, 'POST', `/nodes/${NODE}/qemu/155/config`, { form: { delete: 'onboot' } });
      const delUpid = data<string>(del);
      assert.equal(await finish(url, delUpid), 'WARNINGS: 1');
      const lines = await taskLines(url, delUpid);
      assert.ok(lines.includes("WARN: cannot delete 'onboot' - not set in current configuration!"), lines.join('\n'));
      assert.equal(lines.at(-1), 'TASK WARNINGS: 1');
      const none = await raw(url, 'PUT', `/nodes/${NODE}/qemu/155/config`, { form: {} });
      assertError(none, 500, 'no options specified');
    });

    it(`#20 shrinking a disk fails ${is8(profile) ? 'in the resize task' : 'synchronously'}`, async () => {
      await createVmAndWait(url, { vmid: '160', scsi0: 'local-lvm:4' });
      const maxdisk = async () =>
        data<{ maxdisk: number }>(await raw(url, 'GET', `/nodes/${NODE}/qemu/160/status/current`)).maxdisk;
      assert.equal(await maxdisk(), 4 * 1024 ** 3);
      const shrink = await raw(url, 'PUT', `/nodes/${NODE}/qemu/160/resize`, { form: { disk: 'scsi0', size: '2G' } });
      const grow = async () =>
        raw(url, 'PUT', `/nodes/${NODE}/qemu/160/resize`, { form: { disk: 'scsi0', size: '+1G' } });
      if (is8(profile)) {
        assert.equal(shrink.status, 200, shrink.reason);
        const upid = data<string>(shrink);
        assert.match(upid, /:resize:160:root@pam!test:$/);
        assert.equal(await finish(url, upid), 'shrinking disks is not supported');
        assert.equal((await taskLines(url, upid)).at(-1), 'TASK ERROR: shrinking disks is not supported');
        const g = await grow();
        assert.equal(await finish(url, data<string>(g)), 'OK');
      } else {
        assertError(shrink, 500, 'shrinking disks is not supported');
        const g = await grow();
        assert.equal(g.status, 200);
        assert.equal(g.text, '{"data":null}');
      }
      assert.equal((await vmConfig(url, 160)).scsi0, 'local-lvm:vm-160-disk-0,size=5G');
      // maxdisk follows the volume (its parse is memoized by the drive's string: vmMaxDisk).
      assert.equal(await maxdisk(), 5 * 1024 ** 3);
    });

    it('#22 clones: linked needs a template, a template clones linked by default, lock clone, new MACs', async () => {
      const c = sim.cluster('site-1');
      await createVmAndWait(url, { vmid: '170', scsi0: 'local-lvm:1', net0: 'virtio,bridge=vmbr0' });
      const linked = await raw(url, 'POST', `/nodes/${NODE}/qemu/170/clone`, { form: { newid: '171', full: '0' } });
      assertError(
        linked,
        500,
        is8(profile)
          ? "Linked clone feature is not supported for 'local-lvm:vm-170-disk-0' (scsi0)"
          : "Linked clone feature is not supported for drive 'scsi0'",
      );
      const withStorage = await raw(url, 'POST', `/nodes/${NODE}/qemu/9000/clone`, {
        form: { newid: '171', storage: 'local-lvm' },
      });
      assertError(withStorage, 500, "parameter 'storage' not allowed for linked clones");

      const stall = c.addFault({ kind: 'task', type: 'qmclone', action: 'stall' });
      const r = await raw(url, 'POST', `/nodes/${NODE}/qemu/9000/clone`, { form: { newid: '172', name: 'linked' } });
      assert.equal(r.status, 200, r.reason);
      const upid = data<string>(r);
      assert.match(upid, /:qmclone:9000:root@pam!test:$/);
      const during = await vmConfig(url, 172);
      assert.equal(during.lock, 'clone');
      c.faults.remove(stall);
      assert.equal(await finish(url, upid), 'OK');
      const lines = await taskLines(url, upid);
      assert.ok(lines.includes('create linked clone of drive scsi0 (local-lvm:base-9000-disk-0)'), lines.join('\n'));
      assert.ok(lines.includes('create full clone of drive ide2 (local-lvm:vm-9000-cloudinit)'), lines.join('\n'));
      const clone = await vmConfig(url, 172);
      const tpl = await vmConfig(url, 9000);
      assert.equal(clone.lock, undefined);
      assert.equal(clone.name, 'linked');
      assert.ok(mac(clone.net0));
      assert.notEqual(mac(clone.net0), mac(tpl.net0));
      assert.equal(String(clone.net0).replace(mac(clone.net0), ''), String(tpl.net0).replace(mac(tpl.net0), ''));
      const exists = await raw(url, 'POST', `/nodes/${NODE}/qemu/9000/clone`, { form: { newid: '170' } });
      assertError(exists, 500, 'unable to create VM 170: config file already exists');
      const full = await raw(url, 'POST', `/nodes/${NODE}/qemu/9000/clone`, { form: { newid: '173', full: '1' } });
      const fullUpid = data<string>(full);
      assert.equal(await finish(url, fullUpid), 'OK');
      assert.ok(
        (await taskLines(url, fullUpid)).includes('create full clone of drive scsi0 (local-lvm:base-9000-disk-0)'),
      );
    });

    it('#23 starting a running VM fails the task; stopping a stopped VM is OK', async () => {
      await createVmAndWait(url, { vmid: '180' });
      assert.equal(await power(url, 180, 'start'), 'OK');
      assert.equal(await power(url, 180, 'start'), 'VM 180 already running');
      assert.equal(await power(url, 180, 'stop'), 'OK');
      assert.equal(await power(url, 180, 'stop'), 'OK');
      assert.equal(await power(url, 9000, 'start'), "you can't start a vm if it's a template");
    });

    it('#24 agent: not configured, then VM not running (the rest on the slow clock below)', async () => {
      await createVmAndWait(url, { vmid: '190', net0: 'virtio,bridge=vmbr0' });
      const none = await raw(url, 'GET', `/nodes/${NODE}/qemu/190/agent/network-get-interfaces`);
      assertError(none, 500, 'No QEMU guest agent configured');
      await createVmAndWait(url, { vmid: '191', agent: '1', net0: 'virtio,bridge=vmbr0' });
      const stopped = await raw(url, 'GET', `/nodes/${NODE}/qemu/191/agent/network-get-interfaces`);
      assertError(stopped, 500, 'VM 191 is not running');
    });

    it('#25 destroy: running VM, HA VM without purge, token skiplock', async () => {
      await createVmAndWait(url, { vmid: '200' });
      assert.equal(await power(url, 200, 'start'), 'OK');
      const running = await raw(url, 'DELETE', `/nodes/${NODE}/qemu/200`);
      assertError(running, 500, 'VM 200 is running - destroy failed');
      assert.equal(await power(url, 200, 'stop'), 'OK');

      if (profile === '9.2') {
        // ha-managed on create: qemu-server 9.0.24.
        await createVmAndWait(url, { vmid: '201', 'ha-managed': '1' });
      } else {
        await createVmAndWait(url, { vmid: '201' });
        sim.cluster('site-1').state.vms.get(201)!.haManaged = true; // ha-manager add vm:201
      }
      const st = await raw(url, 'GET', `/nodes/${NODE}/qemu/201/status/current`);
      assert.deepEqual(data<{ ha: unknown }>(st).ha, { managed: 1 });
      const ha = await raw(url, 'DELETE', `/nodes/${NODE}/qemu/201`);
      assertError(ha, 500, 'unable to remove VM 201 - used in HA resources and purge parameter not set.');
      const purge = await raw(url, 'DELETE', `/nodes/${NODE}/qemu/201?purge=1`);
      assert.equal(purge.status, 200, purge.reason);
      assert.equal(await finish(url, data<string>(purge)), 'OK');

      const skip = await raw(url, 'DELETE', `/nodes/${NODE}/qemu/200?skiplock=1`);
      assertError(skip, 400, 'Parameter verification failed.');
      assert.deepEqual(errors(skip), { skiplock: 'Only root may use this option.' });
      const del = await raw(url, 'DELETE', `/nodes/${NODE}/qemu/200`);
      assert.equal(await finish(url, data<string>(del)), 'OK');
      assert.equal((await raw(url, 'GET', `/nodes/${NODE}/qemu/200/config`)).status, 500);
    });

    it('#26 PUT delete=lock&skiplock=1 unlocks only for a root@pam ticket', async () => {
      const c = sim.cluster('site-1');
      await createVmAndWait(url, { vmid: '210' });
      const fault = c.addFault({ kind: 'lock', vmid: 210, lock: 'backup', flock: false });
      const st = await raw(url, 'GET', `/nodes/${NODE}/qemu/210/status/current`);
      assert.equal(data<{ lock: string }>(st).lock, 'backup');
      const tokenSkip = await raw(url, 'PUT', `/nodes/${NODE}/qemu/210/config`, {
        form: { delete: 'lock', skiplock: '1' },
      });
      assertError(tokenSkip, 400, 'Parameter verification failed.');
      assert.deepEqual(errors(tokenSkip), { skiplock: 'Only root may use this option.' });
      const tokenDel = await raw(url, 'PUT', `/nodes/${NODE}/qemu/210/config`, { form: { delete: 'lock' } });
      assertError(tokenDel, 500, "only root can set 'lock' config");
      const t = await login(url);
      const noSkip = await raw(url, 'PUT', `/nodes/${NODE}/qemu/210/config`, {
        form: { delete: 'lock' },
        headers: ticketHeaders(t),
      });
      assertError(noSkip, 500, 'VM is locked (backup)');
      assert.equal((await vmConfig(url, 210)).lock, 'backup');
      const unlock = await raw(url, 'PUT', `/nodes/${NODE}/qemu/210/config`, {
        form: { delete: 'lock', skiplock: '1' },
        headers: ticketHeaders(t),
      });
      assert.equal(unlock.status, 200, `${unlock.reason} ${unlock.text}`);
      assert.equal(unlock.text, '{"data":null}');
      assert.equal((await vmConfig(url, 210)).lock, undefined);
      c.faults.remove(fault);
    });

    it('#28 a VM flock held over 10 s makes PUT config time out', async () => {
      const c = sim.cluster('site-1');
      await createVmAndWait(url, { vmid: '220' });
      const fault = c.addFault({ kind: 'lock', vmid: 220 });
      const r = await raw(url, 'PUT', `/nodes/${NODE}/qemu/220/config`, { form: { description: 'x' } });
      assertError(r, 500, "can't lock file '/var/lock/qemu-server/lock-220.conf' - got timeout");
      c.faults.remove(fault);
      const ok = await raw(url, 'PUT', `/nodes/${NODE}/qemu/220/config`, { form: { description: 'x' } });
      assert.equal(ok.status, 200, ok.reason);
    });
  });

  describe(`fidelity #27 pvestatd lag, profile ${profile}`, () => {
    let sim: Simulator;
    let url: string;
    before(async () => {
      // The simulated pvestatd ticks on setInterval: mocked, it only ticks when told to.
      mock.timers.enable({ apis: ['setInterval'] });
      sim = await startTestSim({ profile });
      url = sim.cluster('site-1').url;
    });
    after(async () => {
      await sim.close();
      mock.timers.reset();
    });

    it('#27 a new VM is status unknown in /cluster/resources until the next pvestatd tick', async () => {
      await createVmAndWait(url, { vmid: '230', name: 'fresh', memory: '1024', tags: 'new' });
      const before = data<Array<Record<string, unknown>>>(await raw(url, 'GET', '/cluster/resources?type=vm'));
      const fresh = before.find((e) => e.id === 'qemu/230');
      assert.deepEqual(fresh, {
        id: 'qemu/230',
        vmid: 230,
        node: NODE,
        type: 'qemu',
        status: 'unknown',
        tags: 'new',
      });
      // Per-VM status is current at once.
      const st = await raw(url, 'GET', `/nodes/${NODE}/qemu/230/status/current`);
      assert.equal(data<{ status: string }>(st).status, 'stopped');
      mock.timers.tick(10_000 / 1000); // one pvestatd period (10 s) at speed 1000
      const afterTick = data<Array<Record<string, unknown>>>(await raw(url, 'GET', '/cluster/resources?type=vm'));
      const ticked = afterTick.find((e) => e.id === 'qemu/230')!;
      assert.equal(ticked.status, 'stopped');
      assert.equal(ticked.name, 'fresh');
      assert.equal(ticked.maxmem, 1024 * 1024 * 1024);
      if (profile === '9.2') assert.equal(typeof ticked.memhost, 'number');
      else assert.equal('memhost' in ticked, false);
    });
  });

  describe(`fidelity #13/#24 on a slow clock (speed 50), profile ${profile}`, () => {
    let sim: Simulator;
    let url: string;
    before(async () => {
      sim = await startTestSim({ profile, speed: 50 });
      url = sim.cluster('site-1').url;
    });
    after(() => sim.close());

    it('#13 a start waiting on the create flock runs once the create worker releases it', async () => {
      const c = sim.cluster('site-1');
      const stall = c.addFault({ kind: 'task', type: 'qmcreate', id: '100', action: 'stall' });
      const upid = await createVm(url, { vmid: '100', scsi0: 'local-lvm:1' });
      const start = await raw(url, 'POST', `/nodes/${NODE}/qemu/100/status/start`);
      const startUpid = data<string>(start);
      // Blocked on the flock (it may wait 10 s = 200 ms real here).
      assert.equal((await taskStatus(url, startUpid)).status, 'running');
      c.faults.remove(stall);
      assert.equal(await finish(url, upid), 'OK');
      assert.equal(await finish(url, startUpid), 'OK');
      const st = await raw(url, 'GET', `/nodes/${NODE}/qemu/100/status/current`);
      assert.equal(data<{ status: string }>(st).status, 'running');
    });

    it('#24 agent errors in order, then the interfaces with lower-case MACs', async () => {
      await createVmAndWait(url, { vmid: '101', name: 'agent', agent: '1', net0: 'virtio,bridge=vmbr0' });
      const path = `/nodes/${NODE}/qemu/101/agent/network-get-interfaces`;
      assertError(await raw(url, 'GET', path), 500, 'VM 101 is not running');
      assert.equal(await power(url, 101, 'start'), 'OK');
      // The guest agent answers some 25 s (500 ms real at speed 50) after the start.
      assertError(await raw(url, 'GET', path), 500, 'QEMU guest agent is not running');
      sim.clock.advance(60_000);
      const r = await raw(url, 'GET', path);
      assert.equal(r.status, 200, r.reason);
      const body = r.json as {
        data: {
          result: Array<{ name: string; 'hardware-address': string; 'ip-addresses': Array<Record<string, unknown>> }>;
        };
      };
      assert.deepEqual(Object.keys(body), ['data']);
      assert.deepEqual(Object.keys(body.data), ['result']);
      const cfgMac = mac((await vmConfig(url, 101)).net0);
      const nic = body.data.result.find((i) => i.name !== 'lo')!;
      assert.equal(nic['hardware-address'], cfgMac.toLowerCase());
      assert.notEqual(nic['hardware-address'], cfgMac);
      const v4 = nic['ip-addresses'].find((a) => a['ip-address-type'] === 'ipv4')!;
      assert.match(String(v4['ip-address']), /^198\.51\.100\.\d+$/);
      assert.equal(v4.prefix, 24);
    });
  });
}
