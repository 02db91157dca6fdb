/** Tasks (UPIDs, non-blocking checks, waits, warnings, active lists) and per-site capabilities. */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { atLeast, capabilitiesFrom, parseVersion } from '../../src/proxmox/capabilities.ts';
import { TaskFailedError, TimeoutError, UnsupportedError } from '../../src/proxmox/errors.ts';
import { exitOutcome, mustParseUpid, parseUpid } from '../../src/proxmox/upid.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { client, counters, NODE, rejection, sim } from './helpers.ts';

describe('UPIDs', () => {
  it('parses node, pid, times, type, id, user and token', () => {
    const u = parseUpid('UPID:ml110-01:00001002:02001007:6B0CDA9D:qmclone:9000:root@pam!provider:');
    assert.deepEqual(u, {
      upid: 'UPID:ml110-01:00001002:02001007:6B0CDA9D:qmclone:9000:root@pam!provider:',
      node: 'ml110-01',
      pid: 0x1002,
      pstart: 0x2001007,
      starttime: 0x6b0cda9d,
      type: 'qmclone',
      id: '9000',
      user: 'root@pam',
      tokenId: 'provider',
    });
    assert.equal(parseUpid('UPID:pve:00000001:123456789:00000003:vzdump::root@pam:')?.id, '');
    assert.equal(parseUpid('not a upid'), undefined);
    assert.throws(() => mustParseUpid('UPID:broken'), /not a Proxmox VE task id/);
  });

  it('exit status: OK and WARNINGS: N are successes', () => {
    assert.deepEqual(exitOutcome('OK'), { ok: true, warnings: 0 });
    assert.deepEqual(exitOutcome('WARNINGS: 3'), { ok: true, warnings: 3 });
    assert.deepEqual(exitOutcome('VM is locked (create)'), { ok: false, error: 'VM is locked (create)' });
  });
});

describe('tasks against the simulator', () => {
  let s: Simulator;
  before(async () => {
    s = await sim('8.4');
  });
  after(async () => {
    await s.close();
  });

  it('create, clone (UPID carries the source vmid), start: waited to OK', async () => {
    const { c } = client(s);
    const created = mustParseUpid(await c.createVm(NODE, 700, { name: 't700', memory: 512, scsi0: 'local-lvm:1' }));
    assert.equal(created.type, 'qmcreate');
    assert.equal(created.id, '700');
    assert.equal(created.tokenId, 'provider');
    assert.deepEqual((await c.waitTask(created.upid)).warnings, 0);
    const clone = mustParseUpid(await c.cloneVm(NODE, 9000, 701, { name: 't701' }));
    assert.equal(clone.type, 'qmclone');
    assert.equal(clone.id, '9000', 'a clone task is named after its source');
    await c.waitTask(clone.upid);
    const cfg = await c.vmConfig(NODE, 701);
    assert.equal(cfg.values.name, 't701');
    assert.match(cfg.digest, /^[0-9a-f]{40}$/);
    assert.equal(cfg.values.memory, '2048', 'memory decoded to a string on every version');
    await c.waitTask(await c.startVm(NODE, 701));
    assert.equal((await c.vmStatus(NODE, 701)).status, 'running');
    await c.close();
  });

  it('WARNINGS: N is a success with warnings', async () => {
    const { c } = client(s);
    await c.waitTask(await c.createVm(NODE, 702, { name: 't702', memory: 512 }));
    const upid = await c.updateVmConfig(NODE, 702, { delete: ['description'] });
    assert.ok(upid, 'POST config answers a qmconfig UPID');
    assert.equal(mustParseUpid(upid).type, 'qmconfig');
    const r = await c.waitTask(upid);
    assert.equal(r.warnings, 1);
    assert.equal(r.status.exitstatus, 'WARNINGS: 1');
    const check = await c.checkTask(upid);
    assert.equal(check.state, 'ok');
    await c.close();
  });

  it('non-blocking check: running while stalled, then the failure is reported (not thrown)', async () => {
    const site = s.cluster('site-1');
    const fid = site.addFault({ kind: 'task', type: 'qmstart', action: 'stall' });
    const { c } = client(s);
    await c.waitTask(await c.createVm(NODE, 703, { name: 't703', memory: 512 }));
    const upid = await c.startVm(NODE, 703);
    const first = await c.checkTask(upid);
    assert.equal(first.state, 'running');
    const active = await c.activeTasks(NODE);
    assert.ok(
      active.some((t) => t.upid === upid),
      'listed among the active tasks of the node',
    );
    assert.ok((await c.activeTasks(NODE, { vmid: 703 })).every((t) => t.id === '703'));
    // A wait with a short deadline gives up without killing the task.
    const t = await rejection(c.waitTask(upid, { timeoutMs: 30 }));
    assert.ok(t instanceof TimeoutError, String(t));
    assert.match(t.message, /qmstart 703 on ml110-01 still running/);
    assert.equal((await c.checkTask(upid)).state, 'running');
    // Release the stall: the same UPID then completes.
    site.faults.remove(fid);
    assert.equal((await c.waitTask(upid)).warnings, 0);
    assert.equal(
      (await c.activeTasks(NODE)).some((x) => x.upid === upid),
      false,
    );

    // A failing task: checkTask reports it, it does not throw.
    const ff = site.addFault({ kind: 'task', type: 'qmstop', action: 'fail', message: 'stop failed: qmp timeout' });
    const stop = await c.stopVm(NODE, 703);
    let check = await c.checkTask(stop);
    while (check.state === 'running') check = await c.checkTask(stop);
    assert.equal(check.state, 'failed');
    assert.ok(check.state === 'failed' && check.error instanceof TaskFailedError);
    assert.equal(check.state === 'failed' && check.error.exitStatus, 'stop failed: qmp timeout');
    site.faults.remove(ff);
    await c.close();
  });

  it('a wait can be aborted', async () => {
    const site = s.cluster('site-1');
    const fid = site.addFault({ kind: 'task', type: 'qmstop', action: 'stall' });
    const { c } = client(s);
    await c.waitTask(await c.createVm(NODE, 704, { name: 't704', memory: 512 }));
    const upid = await c.stopVm(NODE, 704);
    const ac = new AbortController();
    const p = c.waitTask(upid, { signal: ac.signal, pollInitialMs: 5 });
    ac.abort(new Error('shutting down'));
    await assert.rejects(p, /shutting down/);
    site.faults.remove(fid);
    await c.close();
  });

  it('resize: a task on 8.x', async () => {
    const { c } = client(s);
    await c.waitTask(await c.createVm(NODE, 705, { name: 't705', memory: 512, scsi0: 'local-lvm:1' }));
    const upid = await c.resizeDisk(NODE, 705, 'scsi0', '+1G');
    assert.ok(upid);
    await c.waitTask(upid);
    assert.match((await c.vmConfig(NODE, 705)).values.scsi0 ?? '', /size=2G/);
    const shrink = await c.resizeDisk(NODE, 705, 'scsi0', '1G');
    const e = await rejection(c.waitTask(shrink!));
    assert.ok(e instanceof TaskFailedError);
    assert.match(e.exitStatus, /shrinking disks is not supported/);
    await c.close();
  });

  it('template + destroy, agent interfaces after boot', async () => {
    const { c } = client(s);
    await c.waitTask(
      await c.createVm(NODE, 706, {
        name: 't706',
        memory: 512,
        scsi0: 'local-lvm:1',
        agent: 1,
        net0: 'virtio,bridge=vmbr0',
      }),
    );
    await c.waitTask(await c.startVm(NODE, 706));
    s.clock.advance(60_000);
    const ifaces = await c.agentNetworkInterfaces(NODE, 706);
    assert.ok(ifaces.some((i) => i.name === 'lo'));
    await c.waitTask(await c.stopVm(NODE, 706));
    await c.waitTask(await c.templateVm(NODE, 706));
    assert.equal((await c.vmStatus(NODE, 706)).template, 1);
    await c.waitTask(await c.deleteVm(NODE, 706, { purge: true }));
    assert.equal(await c.findVmStatus(NODE, 706), undefined);
    await c.close();
  });
});

describe('capabilities', () => {
  it('version parsing and comparison', () => {
    assert.deepEqual(parseVersion('7.4-16'), { major: 7, minor: 4, patch: 16, text: '7.4-16' });
    assert.deepEqual(parseVersion('8.4.5'), { major: 8, minor: 4, patch: 5, text: '8.4.5' });
    assert.ok(atLeast(parseVersion('9.1.5'), 9, 1, 5));
    assert.ok(!atLeast(parseVersion('9.1.4'), 9, 1, 5));
    assert.ok(atLeast(parseVersion('7.2-1'), 7, 2));
    assert.throws(() => parseVersion('x'));
  });

  it('feature flags per version', () => {
    const id = { authId: 'root@pam!p', kind: 'token' as const, isRootTicket: false };
    const at = (version: string) => capabilitiesFrom({ version, release: version.slice(0, 3), repoid: 'x' }, id, 0);
    const c64 = at('6.4-15');
    assert.deepEqual(
      [c64.importFrom, c64.importContent, c64.asyncResize, c64.memoryString],
      [false, false, false, false],
    );
    const c72 = at('7.2-3');
    assert.deepEqual([c72.importFrom, c72.importContent], [true, false]);
    const c81 = at('8.1.4');
    assert.deepEqual([c81.asyncResize, c81.memoryString, c81.importContent], [true, true, false]);
    const c83 = at('8.3.0');
    assert.equal(c83.importContent, true);
    assert.equal(at('8.4.5').agentAuditPrivilege, 'VM.Monitor');
    const c9 = at('9.2.3');
    assert.equal(c9.agentAuditPrivilege, 'VM.GuestAgent.Audit');
    assert.equal(c9.genericAuthFailure, true);
  });

  for (const profile of ['6.4', '7.4', '8.4', '9.2'] as const) {
    it(`discovered from the simulator (${profile}), cached with a TTL`, async () => {
      const s = await sim(profile);
      const { c } = client(s, { capabilitiesTtlMs: 60_000 });
      const caps = await c.capabilities();
      assert.equal(caps.release, profile);
      assert.equal(caps.importFrom, profile !== '6.4');
      assert.equal(caps.importContent, profile === '8.4' || profile === '9.2');
      assert.equal(caps.asyncResize, profile === '8.4' || profile === '9.2');
      assert.equal(caps.rootTicket, false);
      const n = counters(s).get('GET /version');
      await c.capabilities();
      await Promise.all([c.capabilities(), c.capabilities()]);
      assert.equal(counters(s).get('GET /version'), n, 'cached');
      s.clock.advance(61_000);
      await c.capabilities();
      assert.equal(counters(s).get('GET /version'), (n ?? 0) + 1, 'rediscovered after the TTL');
      const { c: root } = client(s, { password: true });
      assert.equal((await root.capabilities()).rootTicket, true);
      await c.close();
      await root.close();
      await s.close();
    });
  }

  it('import guards: no import-from on 6.4; ISO sources; import volumes before 8.3; absolute paths need root', async () => {
    const s64 = await sim('6.4');
    const { c: c64, rec } = client(s64);
    const e = await rejection(c64.createVm(NODE, 800, { scsi0: 'local-lvm:0,import-from=local-lvm:base-9000-disk-0' }));
    assert.ok(e instanceof UnsupportedError, String(e));
    assert.equal(e.capability, 'import-from');
    assert.match(e.message, /clon/);
    assert.ok(!rec.events.some((x) => x.method === 'POST'), 'nothing was sent');
    await c64.close();
    await s64.close();

    const s74 = await sim('7.4');
    const { c: c74 } = client(s74);
    const e2 = await rejection(c74.createVm(NODE, 801, { scsi0: 'local-lvm:0,import-from=local:import/ubuntu.qcow2' }));
    assert.ok(e2 instanceof UnsupportedError);
    assert.equal(e2.capability, 'import-content');
    await c74.close();
    await s74.close();

    const s84 = await sim('8.4');
    const { c: c84 } = client(s84);
    const e3 = await rejection(
      c84.createVm(NODE, 802, { scsi0: 'local-lvm:0,import-from=local:iso/ubuntu-22.04-cloud.img' }),
    );
    assert.ok(e3 instanceof UnsupportedError);
    assert.equal(e3.capability, 'import-from-type');
    assert.match(e3.message, /'iso'/);
    const e4 = await rejection(
      c84.createVm(NODE, 803, { scsi0: 'local-lvm:0,import-from=/var/lib/vz/template/iso/ubuntu-22.04-cloud.img' }),
    );
    assert.ok(e4 instanceof UnsupportedError);
    assert.equal(e4.capability, 'import-from-path');
    // The supported ways go through.
    await c84.waitTask(
      await c84.createVm(NODE, 804, {
        name: 'imp',
        memory: 512,
        scsi0: 'local-lvm:0,import-from=local:import/ubuntu-22.04-cloud.qcow2',
      }),
    );
    const { c: root } = client(s84, { password: true });
    await root.waitTask(
      await root.createVm(NODE, 805, {
        name: 'imp2',
        memory: 512,
        scsi0: 'local-lvm:0,import-from=/var/lib/vz/template/iso/ubuntu-22.04-cloud.img',
      }),
    );
    assert.match((await root.vmConfig(NODE, 805)).values.scsi0 ?? '', /^local-lvm:vm-805-disk-0/);
    await c84.close();
    await root.close();
    await s84.close();
  });
});
