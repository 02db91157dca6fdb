/**
 * `POST /nodes/{node}/qemu/{vmid}/remote_migrate`: the source cluster's task reaches the target
 * cluster through `target-endpoint` (its token, its TLS fingerprint), copies the disks, creates
 * the VM there under `target-vmid` with the config mapped to the target's storages and bridges,
 * and leaves the source stopped with `lock: migrate` (or destroys it with `delete=1`). Failures:
 * a wrong token (the target's 401), an unknown endpoint, a wrong fingerprint, missing privileges
 * on the target, a taken target VMID, a full target storage, a target that becomes unreachable.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Agent, fetch as undiciFetch } from 'undici';
import type { Profile, SimCluster, Simulator } from '../../src/sim/index.ts';
import { parseTopology } from '../../src/sim/topology.ts';
import { raw, startTestSim, TOKEN } from '../helpers/sim.ts';
import {
  bare,
  clusterHead,
  config,
  data,
  finish,
  GiB,
  logUntil,
  MiB,
  nodeHead,
  post,
  start,
  storageUsed,
  until,
  vmRow,
  volumes,
} from './migration-helpers.ts';

const TOPOLOGY = `
clusters:
${clusterHead('site-1', 0)}${nodeHead('n1')}          - { id: local, type: dir, content: [iso, backup, images], total: 100G }
          - { id: thin, type: lvmthin, content: [images], total: 100G, bandwidth: 200 }
        bridges: [{ name: vmbr0 }]
        vms:
          - { vmid: 150, name: web, disk: { storage: thin, size: 2G }, cloudinit: true, tags: prod;web,
              description: "managed-by: provider-proxmox" }
          - { vmid: 151, name: live, memory: 1024, disk: { storage: thin, size: 1G }, running: true }
          - { vmid: 152, name: spare, disk: { storage: thin, size: 1G } }
          - { vmid: 153, name: big, disk: { storage: thin, size: 4G }, cloudinit: true }
${clusterHead('site-2', 1)}${nodeHead('r1')}          - { id: cephfs, type: cephfs, content: [images, iso], total: 1T, shared: true, bandwidth: 300 }
          - { id: small, type: lvmthin, content: [images], total: 1G }
        bridges: [{ name: vmbr1 }]
        vms:
          - { vmid: 1152, name: occupant }
${nodeHead('r2')}          - { id: cephfs, type: cephfs, content: [images, iso], total: 1T, shared: true, bandwidth: 300 }
        bridges: [{ name: vmbr1 }]
`;

const RM = (vmid: number) => `/nodes/n1/qemu/${vmid}/remote_migrate`;

function endpoint(
  target: SimCluster,
  opts: { token?: string; fingerprint?: string; host?: string; port?: string } = {},
) {
  const u = new URL(target.url);
  const fp = opts.fingerprint ? `,fingerprint=${opts.fingerprint}` : '';
  return `apitoken=PVEAPIToken=${opts.token ?? TOKEN},host=${opts.host ?? u.hostname},port=${opts.port ?? u.port}${fp}`;
}

describe('remote_migrate between simulated clusters (PVE 9.2)', () => {
  let sim: Simulator;
  let src: SimCluster;
  let dst: SimCluster;
  let url: string;
  let url2: string;
  before(async () => {
    sim = await startTestSim({ profile: '9.2', topology: parseTopology(TOPOLOGY, 'remote.yaml') });
    src = sim.cluster('site-1');
    dst = sim.cluster('site-2');
    url = src.url;
    url2 = dst.url;
  });
  after(() => sim.close());

  const form = (extra: Record<string, string> = {}) => ({
    'target-endpoint': endpoint(dst),
    'target-storage': 'cephfs',
    'target-bridge': 'vmbr1',
    ...extra,
  });

  it('refusals in the handler: token, endpoint, maps, a running VM without online', async () => {
    let r = await post(url, RM(150), form({ 'target-endpoint': endpoint(dst, { token: 'root@pam!test=wrong' }) }));
    assert.equal(r.status, 500);
    assert.equal(r.reason, '401 Authentication failed!');
    r = await post(url, RM(150), form({ 'target-endpoint': endpoint(dst, { port: '1' }) }));
    assert.equal(r.reason, "500 Can't connect to 127.0.0.1:1 (Connection refused)");
    r = await post(url, RM(150), form({ 'target-endpoint': endpoint(dst, { host: 'nowhere.invalid' }) }));
    assert.match(r.reason, /^500 Can't connect to nowhere\.invalid:\d+ \(Name or service not known\)$/);
    r = await post(url, RM(150), form({ 'target-storage': '1' }));
    assert.equal(r.reason, 'remote migration requires explicit storage mapping!');
    r = await post(url, RM(151), form());
    assert.equal(r.reason, "can't migrate running VM without --online");
    r = await post(url, RM(150), form({ 'target-endpoint': 'host=127.0.0.1' }));
    assert.equal(r.status, 400);
    assert.match(
      (r.json as { errors: Record<string, string> }).errors['target-endpoint']!,
      /apitoken: property is missing/,
    );
    // the token needs Sys.Audit on / for the target's /cluster/status
    const secret = dst.addToken('root@pam', 'nothing', { privsep: true });
    r = await post(url, RM(150), form({ 'target-endpoint': endpoint(dst, { token: `root@pam!nothing=${secret}` }) }));
    assert.equal(r.reason, '403 Permission check failed (/, Sys.Audit)');
  });

  it('offline: the VM appears on the target under target-vmid; the source stays, stopped and locked', async () => {
    const cephfs = await storageUsed(url2, 'r1', 'cephfs');
    const upid = await start(url, RM(150), form({ 'target-vmid': '1150' }));
    assert.match(upid, /^UPID:n1:.*:qmigrate:150:root@pam!test:$/);
    const { exit, log } = await finish(url, 'n1', upid);
    assert.equal(exit, 'OK', log.join('\n'));
    const lines = bare(log);
    for (const l of [
      'local WS tunnel version: 2',
      'websocket tunnel started',
      "starting migration of VM 150 to node 'r1' (127.0.0.1)",
      "found local disk 'thin:vm-150-disk-0' (attached)",
      "volume 'thin:vm-150-disk-0' is 'cephfs:1150/vm-1150-disk-0.raw' on the target",
      "volume 'thin:vm-150-cloudinit' is 'cephfs:1150/vm-1150-cloudinit.raw' on the target",
      'mapped: net0 from vmbr0 to vmbr1',
      'tunnel: -> sending command "config" to remote',
      'tunnel: -> sending command "unlock" to remote',
      // 2 GiB at the slower storage (thin, 200 MB/s) and 4 MiB, plus the tunnel's commands
      'migration finished successfully (duration 00:00:12)',
    ])
      assert.ok(lines.includes(l), `missing: ${l}\n${lines.join('\n')}`);
    const tunnel = /remote: started tunnel worker '(UPID:r1:[^']+:qmtunnel:1150:root@pam!test:)'/.exec(
      lines.join('\n'),
    )?.[1];
    assert.ok(tunnel, 'tunnel worker UPID logged');
    // the target: the same config, storages and bridges mapped, unlocked
    const cfg = await config(url2, 'r1', 1150);
    const srcCfg = await config(url, 'n1', 150);
    assert.equal(cfg.name, 'web');
    assert.equal(cfg.tags, 'prod;web');
    assert.equal(cfg.description, 'managed-by: provider-proxmox');
    assert.equal(cfg.scsi0, 'cephfs:1150/vm-1150-disk-0.raw,size=2G');
    assert.equal(cfg.ide2, 'cephfs:1150/vm-1150-cloudinit.raw,media=cdrom');
    assert.equal(cfg.net0, srcCfg.net0!.replace('bridge=vmbr0', 'bridge=vmbr1'));
    assert.equal(cfg.smbios1, srcCfg.smbios1);
    assert.equal(cfg.lock, undefined);
    assert.deepEqual([(await vmRow(url2, 1150))?.node, (await vmRow(url2, 1150))?.lock], ['r1', undefined]);
    assert.equal(await storageUsed(url2, 'r1', 'cephfs'), cephfs + 2 * GiB + 4 * MiB);
    const tlog = data<Array<{ t: string }>>(
      await raw(url2, 'GET', `/nodes/r1/tasks/${encodeURIComponent(tunnel!)}/log?limit=0`),
    ).map((l) => l.t);
    assert.deepEqual(tlog.slice(0, 2), ['mtunnel started', "received command 'version'"]);
    assert.ok(tlog.includes("disk-import: successfully imported 'cephfs:1150/vm-1150-disk-0.raw'"));
    assert.deepEqual(tlog.slice(-3), [
      'switching to exit-mode, waiting for client to disconnect',
      'mtunnel exited',
      'TASK OK',
    ]);
    // the source: kept, stopped, `lock: migrate` (QemuMigrate never unlocks it), its disks still there
    assert.equal(srcCfg.lock, 'migrate');
    const row = await vmRow(url, 150);
    assert.deepEqual([row?.node, row?.lock], ['n1', 'migrate']);
    assert.equal(
      data<{ status: string }>(await raw(url, 'GET', '/nodes/n1/qemu/150/status/current')).status,
      'stopped',
    );
    assert.ok((await volumes(url, 'n1', 'thin')).includes('thin:vm-150-disk-0'));
    // and another migration of it is refused by that lock
    assert.equal((await post(url, RM(150), form({ 'target-vmid': '1250' }))).reason, 'VM is locked (migrate)');
  });

  it('online with delete=1: running on the target, the source destroyed', async () => {
    const upid = await start(url, RM(151), form({ online: '1', delete: '1' }));
    const { exit, log } = await finish(url, 'n1', upid);
    assert.equal(exit, 'OK', log.join('\n'));
    const lines = bare(log);
    assert.ok(lines.includes("Allocating volume for drive 'scsi0' on remote storage 'cephfs'.."));
    assert.ok(lines.includes('drive mirror is starting for drive-scsi0'));
    assert.ok(lines.includes('tunnel: -> sending command "resume" to remote'));
    assert.equal(
      data<{ status: string }>(await raw(url2, 'GET', '/nodes/r1/qemu/151/status/current')).status,
      'running',
    );
    assert.equal(await vmRow(url, 151), undefined);
    assert.ok(!(await volumes(url, 'n1', 'thin')).some((v) => v.includes('-151-')));
  });

  it('the target VMID taken: the tunnel is refused, nothing changes', async () => {
    const upid = await start(url, RM(152), form({ 'target-vmid': '1152' }));
    const { exit, log } = await finish(url, 'n1', upid);
    assert.equal(exit, 'migration aborted');
    const lines = bare(log);
    assert.ok(
      lines.includes('ERROR: migration aborted (duration 00:00:00): 400 Parameter verification failed.'),
      lines.join('\n'),
    );
    assert.ok(lines.includes("ERROR: vmid: unable to create empty VM config - VM 1152 already exists on node 'r1'"));
    assert.equal((await vmRow(url, 152))?.lock, undefined);
  });

  it("missing privileges on the target: the mtunnel's checks", async () => {
    const secret = dst.addToken('root@pam', 'audit', { privsep: true });
    dst.setAcl('/', 'root@pam!audit', 'PVEAuditor');
    const tok = `root@pam!audit=${secret}`;
    let upid = await start(
      url,
      RM(152),
      form({ 'target-endpoint': endpoint(dst, { token: tok }), 'target-vmid': '2152' }),
    );
    let r = await finish(url, 'n1', upid);
    assert.ok(
      bare(r.log).includes(
        'ERROR: migration aborted (duration 00:00:00): 403 Permission check failed (/vms/2152, VM.Allocate)',
      ),
      r.log.join('\n'),
    );
    dst.addRole('Mover', ['Sys.Audit', 'VM.Allocate', 'Datastore.AllocateSpace']);
    dst.setAcl('/', 'root@pam!audit', 'Mover');
    upid = await start(url, RM(152), form({ 'target-endpoint': endpoint(dst, { token: tok }), 'target-vmid': '2152' }));
    r = await finish(url, 'n1', upid);
    assert.ok(
      bare(r.log).includes(
        'ERROR: migration aborted (duration 00:00:00): 403 Permission check failed (/, Sys.Incoming)',
      ),
      r.log.join('\n'),
    );
    assert.equal(await vmRow(url2, 2152), undefined);
    // the storages and bridges the VM needs must exist on the target node
    for (const [extra, err] of [
      [{ 'target-storage': 'nope' }, "500 storage 'nope' does not exist"],
      [{ 'target-bridge': 'vmbr9' }, "500 bridge 'vmbr9' does not exist"],
    ] as const) {
      r = await finish(url, 'n1', await start(url, RM(152), form({ ...extra, 'target-vmid': '2152' })));
      assert.ok(bare(r.log).includes(`ERROR: migration aborted (duration 00:00:00): ${err}`), r.log.join('\n'));
    }
  });

  it('a full target storage: the import fails, the target is cleaned up through the tunnel', async () => {
    const upid = await start(url, RM(153), form({ 'target-storage': 'small', 'target-vmid': '1153' }));
    const { exit, log } = await finish(url, 'n1', upid);
    assert.equal(exit, 'migration aborted');
    const lines = bare(log);
    assert.ok(lines.includes('ERROR: unknown query-disk-import result: error'), lines.join('\n'));
    assert.ok(lines.includes('ERROR: migration aborted (duration 00:00:00): disk import failed - see log above'));
    assert.ok(lines.includes('aborting phase 1 - cleanup resources'));
    // the cloud-init drive was imported before the disk failed: freed again, the VM gone
    assert.equal(await vmRow(url2, 1153), undefined);
    assert.deepEqual(await volumes(url2, 'r1', 'small'), []);
    const row = await vmRow(url, 153);
    assert.deepEqual([row?.node, row?.lock], ['n1', undefined]);
  });

  it('a source worker that dies after the config went over: both configs locked, the tunnel task fails', async () => {
    // waits: tunnel, version, bwlimit, disk-import, 4 copy quarters, query, config, then the finish
    src.addFault({ kind: 'task', type: 'qmigrate', id: '152', action: 'die', step: 11 });
    const upid = await start(url, RM(152), form({ 'target-vmid': '5152' }));
    const { exit, log } = await finish(url, 'n1', upid);
    assert.equal(exit, 'unexpected status');
    const tunnel = /started tunnel worker '([^']+)'/.exec(log.join('\n'))![1]!;
    assert.equal((await vmRow(url, 152))?.lock, 'migrate');
    assert.equal((await config(url2, 'r1', 5152)).lock, 'migrate');
    assert.equal((await config(url2, 'r1', 5152)).name, 'spare');
    await until(() => dst.state.tasks.get(tunnel)?.status === 'stopped', 'the tunnel task');
    assert.equal(dst.state.tasks.get(tunnel)?.exitstatus, 'mtunnel exited unexpectedly');
  });

  it('the target unreachable mid-copy: no reply, the source unlocked, leftovers on the target', async () => {
    const stall = src.addFault({ kind: 'task', type: 'qmigrate', id: '153', action: 'stall', step: 6 });
    const upid = await start(url, RM(153), form({ 'target-vmid': '3153' }));
    // the first import started: the worker is in its copy (held at the stall)
    await logUntil(url, 'n1', upid, /tunnel: established new WS for forwarding/);
    assert.equal(dst.state.vms.get(3153)?.config.lock, 'create');
    const down = dst.addFault({ kind: 'unavailable', ms: 3_600_000, mode: '503' });
    src.removeFault(stall);
    const { exit, log } = await finish(url, 'n1', upid);
    dst.removeFault(down);
    assert.equal(exit, 'migration aborted');
    assert.ok(
      bare(log).some((l) =>
        /^ERROR: no reply to command '\{.*"cmd":"query-disk-import"\}': reading from tunnel failed: got timeout$/.test(
          l,
        ),
      ),
      log.join('\n'),
    );
    assert.deepEqual([(await vmRow(url, 153))?.node, (await vmRow(url, 153))?.lock], ['n1', undefined]);
    // the target could not clean up: its placeholder (lock: create) remains
    assert.equal((await vmRow(url2, 3153))?.lock, 'create');
  });
});

for (const profile of ['7.4', '8.4'] as Profile[]) {
  describe(`remote_migrate (PVE ${profile})`, () => {
    let sim: Simulator;
    before(async () => {
      sim = await startTestSim({ profile, topology: parseTopology(TOPOLOGY, 'remote.yaml') });
    });
    after(() => sim.close());

    it("migrates, and a wrong token fails with the target release's 401", async () => {
      const url = sim.cluster('site-1').url;
      const dst = sim.cluster('site-2');
      const base = { 'target-storage': 'cephfs', 'target-bridge': 'vmbr1' };
      const bad = await post(url, RM(150), { ...base, 'target-endpoint': endpoint(dst, { token: 'root@pam!test=x' }) });
      assert.equal(bad.reason, '401 invalid token value!');
      const upid = await start(url, RM(150), { ...base, 'target-endpoint': endpoint(dst) });
      assert.equal((await finish(url, 'n1', upid)).exit, 'OK');
      assert.equal((await config(dst.url, 'r1', 150)).scsi0, 'cephfs:150/vm-150-disk-0.raw,size=2G');
    });
  });
}

describe('remote_migrate (PVE 6.4)', () => {
  it('does not exist: 501', async () => {
    const sim = await startTestSim({ profile: '6.4', topology: parseTopology(TOPOLOGY, 'remote.yaml') });
    try {
      const r = await post(sim.cluster('site-1').url, RM(150), {
        'target-endpoint': endpoint(sim.cluster('site-2')),
        'target-storage': 'cephfs',
        'target-bridge': 'vmbr1',
      });
      assert.equal(r.status, 501);
      assert.equal(r.reason, `Method 'POST /nodes/n1/qemu/150/remote_migrate' not implemented`);
    } finally {
      await sim.close();
    }
  });
});

describe('remote_migrate over TLS: the fingerprint', () => {
  let sim: Simulator;
  let agent: Agent;
  before(async () => {
    sim = await startTestSim({ profile: '9.2', http: false, topology: parseTopology(TOPOLOGY, 'remote.yaml') });
    agent = new Agent({ connect: { rejectUnauthorized: false } });
  });
  after(async () => {
    await agent.close();
    await sim.close();
  });

  /** A form POST over HTTPS to the self-signed simulator. */
  const tlsPost = async (url: string, path: string, body: Record<string, string>) => {
    const r = await undiciFetch(`${url}/api2/json${path}`, {
      method: 'POST',
      dispatcher: agent,
      headers: { Authorization: `PVEAPIToken=${TOKEN}`, 'Content-Type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams(body).toString(),
    });
    return { status: r.status, reason: r.statusText, data: ((await r.json()) as { data: unknown }).data };
  };

  it('an unpinned or wrong fingerprint fails as PVE::APIClient does; the right one works', async () => {
    const src = sim.cluster('site-1');
    const dst = sim.cluster('site-2');
    const base = { 'target-storage': 'cephfs', 'target-bridge': 'vmbr1' };
    const wrong = Array.from({ length: 32 }, () => 'AB').join(':');
    for (const fingerprint of [undefined, wrong]) {
      const r = await tlsPost(src.url, RM(152), {
        ...base,
        'target-endpoint': endpoint(dst, fingerprint ? { fingerprint } : {}),
      });
      assert.equal(r.status, 500);
      assert.equal(r.reason, `fingerprint '${dst.fingerprint}' not verified, abort!`);
    }
    const r = await tlsPost(src.url, RM(152), {
      ...base,
      'target-vmid': '4152',
      'target-endpoint': endpoint(dst, { fingerprint: dst.fingerprint.toLowerCase() }),
    });
    assert.equal(r.status, 200);
    const task = () => src.state.tasks.get(String(r.data));
    await until(() => task()?.status === 'stopped', 'the migration');
    assert.equal(task()?.exitstatus, 'OK');
    assert.equal(dst.state.vms.get(4152)?.node, 'r1');
  });
});
