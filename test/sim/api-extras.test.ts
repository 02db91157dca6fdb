/**
 * What the monitoring, storage and access endpoints do beyond their shape (route-walk.test.ts
 * checks that): tokens and ACLs made over the API work like `--token`, pool ACLs reach their
 * members and a VM still being cloned into a pool is invisible to a pool-limited token, upload and
 * download-url content rules per release and their checksums, containers in the VMID space and in
 * /cluster/resources, and the guest agent's refusals.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { SimCluster, Simulator } from '../../src/sim/index.ts';
import { parseTopology } from '../../src/sim/topology.ts';
import { assertError, data, finish, NODE, power, taskLines } from '../helpers/fidelity.ts';
import { raw, startTestSim, TOKEN } from '../helpers/sim.ts';

const TOPOLOGY = `
clusters:
  - name: site-1
    listen: 127.0.0.1:0
    nodes:
      - name: ${NODE}
        cpus: 8
        memory: 64G
        storages:
          - { id: local, type: dir, content: [iso, import, vztmpl], total: 100G }
          - { id: local-lvm, type: lvmthin, content: [images, rootdir], total: 500G }
        bridges: [{ name: vmbr0 }]
        vms:
          - { vmid: 9000, name: tpl, template: true, disk: { storage: local-lvm, size: 1G }, agent: true, guestAgent: true }
          - { vmid: 100, name: other, disk: { storage: local-lvm, size: 1G } }
          - { vmid: 101, name: no-agent-key, disk: { storage: local-lvm, size: 1G }, running: true }
        containers:
          - { vmid: 200, hostname: web-ct, cores: 2, memory: 2048, disk: { storage: local-lvm, size: 8G }, running: true }
`;

function upload(url: string, content: string, name: string, body: Buffer, extra: Record<string, string> = {}) {
  const fd = new FormData();
  fd.set('content', content);
  for (const [k, v] of Object.entries(extra)) fd.set(k, v);
  fd.set('filename', new Blob([body]), name);
  return fetch(`${url}/api2/json/nodes/${NODE}/storage/local/upload`, {
    method: 'POST',
    body: fd,
    headers: { Authorization: `PVEAPIToken=${TOKEN}` },
  });
}

describe('monitoring, storage, access and pools', () => {
  let sim: Simulator;
  let c: SimCluster;
  let url: string;
  let files: Server;
  let fileBase = '';
  before(async () => {
    sim = await startTestSim({ profile: '8.4', topology: parseTopology(TOPOLOGY, 'extras.yaml') });
    c = sim.cluster('site-1');
    url = c.url;
    files = createServer((req, res) => {
      if (req.url === '/missing.iso') res.statusCode = 404;
      res.end('ISO-BYTES');
    });
    await new Promise<void>((r) => files.listen(0, '127.0.0.1', () => r()));
    fileBase = `http://127.0.0.1:${(files.address() as AddressInfo).port}`;
  });
  after(async () => {
    await sim.close();
    await new Promise<void>((r) => files.close(() => r()));
  });

  it('containers: listed, in /cluster/resources with the same numbers, their VMIDs taken', async () => {
    const cts = data<Array<Record<string, unknown>>>(await raw(url, 'GET', `/nodes/${NODE}/lxc`));
    assert.equal(cts.length, 1);
    assert.deepEqual(
      [cts[0]!.vmid, cts[0]!.name, cts[0]!.type, cts[0]!.maxmem],
      [200, 'web-ct', 'lxc', 2048 * 1024 ** 2],
    );
    const rows = data<Array<Record<string, unknown>>>(await raw(url, 'GET', '/cluster/resources?type=vm'));
    const row = rows.find((r) => r.id === 'lxc/200');
    assert.ok(row);
    assert.deepEqual(
      [row.type, row.name, row.maxmem, row.maxdisk, row.status],
      ['lxc', 'web-ct', cts[0]!.maxmem, cts[0]!.maxdisk, 'running'],
    );
    assertError(
      await raw(url, 'POST', `/nodes/${NODE}/qemu`, { form: { vmid: '200' } }),
      500,
      `unable to create VM 200 - CT 200 already exists on node '${NODE}'`,
    );
    const nb = data<Array<{ vmid: number; type: string }>>(await raw(url, 'GET', '/cluster/backup-info/not-backed-up'));
    assert.deepEqual(
      nb.map((g) => `${g.type}/${g.vmid}`),
      ['qemu/100', 'qemu/101', 'lxc/200', 'qemu/9000'],
    );
  });

  it('a token made over the API authenticates; privsep limits it to its own ACLs', async () => {
    const r = await raw(url, 'POST', `/access/users/${encodeURIComponent('root@pam')}/token/pooled`, {
      form: { privsep: '1' },
    });
    const made = data<{ 'full-tokenid': string; value: string; info: { privsep: number } }>(r);
    assert.equal(made['full-tokenid'], 'root@pam!pooled');
    assert.equal(made.info.privsep, 1);
    const auth = { Authorization: `PVEAPIToken=root@pam!pooled=${made.value}` };
    // No ACL yet: it sees no VM at all.
    assert.deepEqual(data(await raw(url, 'GET', '/cluster/resources?type=vm', { headers: auth })), []);
    assertError(
      await raw(url, 'POST', `/access/users/${encodeURIComponent('root@pam')}/token/pooled`),
      400,
      'Parameter verification failed.',
    );
    // A wrong secret is a 401 like any.
    const bad = await raw(url, 'GET', '/version', { headers: { Authorization: 'PVEAPIToken=root@pam!pooled=nope' } });
    assert.equal(bad.status, 401);
  });

  it('pool ACLs reach members; a VM cloned into the pool is invisible until the clone task ends', async () => {
    assert.equal((await raw(url, 'POST', '/pools', { form: { poolid: 'team' } })).status, 200);
    const acl = await raw(url, 'PUT', '/access/acl', {
      form: { path: '/pool/team', tokens: 'root@pam!pooled', roles: 'PVEVMAdmin' },
    });
    assert.equal(acl.status, 200, acl.reason);
    assertError(
      await raw(url, 'PUT', '/access/acl', { form: { path: '/pool/team', tokens: 'root@pam!pooled', roles: 'Nope' } }),
      500,
      "ACL update failed: role 'Nope' does not exist",
    );
    const tokens = data<Array<{ tokenid: string }>>(
      await raw(url, 'GET', `/access/users/${encodeURIComponent('root@pam')}/token`),
    );
    assert.ok(tokens.some((t) => t.tokenid === 'pooled'));
    const secret = [...c.state.tokens.values()].find((t) => t.tokenid === 'pooled')!.secret;
    const auth = { Authorization: `PVEAPIToken=root@pam!pooled=${secret}` };
    assert.equal((await raw(url, 'PUT', '/pools/team', { form: { vms: '100' } })).status, 200);
    const seen = async () =>
      data<Array<{ vmid: number }>>(await raw(url, 'GET', '/cluster/resources?type=vm', { headers: auth })).map(
        (r) => r.vmid,
      );
    assert.deepEqual(await seen(), [100]);
    assert.equal((await raw(url, 'GET', `/nodes/${NODE}/qemu/100/config`, { headers: auth })).status, 200);
    assertError(
      await raw(url, 'GET', `/nodes/${NODE}/qemu/101/config`, { headers: auth }),
      403,
      'Permission check failed (/vms/101, VM.Audit)',
    );

    // The clone joins the pool at the end of its task (qemu-server clone_vm, :4710 at e6352be).
    const stall = c.addFault({ kind: 'task', type: 'qmclone', action: 'stall' });
    const r = await raw(url, 'POST', `/nodes/${NODE}/qemu/9000/clone`, { form: { newid: '150', pool: 'team' } });
    const upid = data<string>(r);
    for (let i = 0; i < 1000 && !c.state.vms.has(150); i++) await new Promise((res) => setImmediate(res));
    assert.ok(c.state.vms.has(150), 'the clone config exists');
    assert.deepEqual(await seen(), [100]);
    c.removeFault(stall);
    assert.equal(await finish(url, upid), 'OK');
    assert.deepEqual(await seen(), [100, 150]);

    // Membership rules.
    assertError(
      await raw(url, 'PUT', '/pools/team', { form: { vms: '100' } }),
      500,
      'update pools failed: VM 100 is already a pool member',
    );
    assertError(
      await raw(url, 'DELETE', '/pools/team'),
      500,
      "delete pool failed: pool 'team' is not empty (contains VM 100)",
    );
    // Deleting the token drops its ACLs.
    assert.equal(
      (await raw(url, 'DELETE', `/access/users/${encodeURIComponent('root@pam')}/token/pooled`)).status,
      200,
    );
    assert.equal(
      c.state.acls.some((a) => a.ugid === 'root@pam!pooled'),
      false,
    );
    assert.equal((await raw(url, 'GET', '/version', { headers: auth })).status, 401);
  });

  it('upload: multipart, imgcopy task, checksum, the content and extension rules', async () => {
    const iso = Buffer.from('a small iso');
    const sha = createHash('sha256').update(iso).digest('hex');
    const ok = await upload(url, 'iso', 'my image.iso', iso, { checksum: sha, 'checksum-algorithm': 'sha256' });
    assert.equal(ok.status, 200);
    const upid = ((await ok.json()) as { data: string }).data;
    assert.match(upid, /:imgcopy::root@pam!test:$/);
    assert.equal(await finish(url, upid), 'OK');
    const lines = await taskLines(url, upid);
    assert.ok(lines.includes('calculating checksum...OK, checksum verified'));
    assert.ok(lines.includes('target file: /mnt/pve/local/template/iso/my_image.iso'), lines.join('\n'));
    const content = data<Array<{ volid: string; size: number }>>(
      await raw(url, 'GET', `/nodes/${NODE}/storage/local/content?content=iso`),
    );
    assert.deepEqual(content.find((v) => v.volid === 'local:iso/my_image.iso')?.size, iso.length);

    const bad = await upload(url, 'iso', 'x.iso', iso, { checksum: '00', 'checksum-algorithm': 'sha256' });
    assert.equal(
      await finish(url, ((await bad.json()) as { data: string }).data),
      `checksum mismatch: got '${sha}' != expect '00'`,
    );
    const ext = await upload(url, 'iso', 'x.qcow2', iso);
    assert.equal(ext.status, 400);
    assert.deepEqual(((await ext.json()) as { errors: unknown }).errors, { filename: 'wrong file extension' });
    // 8.4 takes `import` images.
    const imp = await upload(url, 'import', 'disk.qcow2', iso);
    assert.equal(await finish(url, ((await imp.json()) as { data: string }).data), 'OK');
    // A multipart body anywhere else: pve-http-server's 506.
    const fd = new FormData();
    fd.set('x', '1');
    const other = await fetch(`${url}/api2/json/nodes/${NODE}/qemu/100/config`, {
      method: 'POST',
      body: fd,
      headers: { Authorization: `PVEAPIToken=${TOKEN}` },
    });
    assert.equal(other.status, 506);
  });

  it('download-url: loopback only, checksum, HTTP errors as wget exit codes', async () => {
    const sha1 = createHash('sha1').update('ISO-BYTES').digest('hex');
    const go = async (form: Record<string, string>) => {
      const r = await raw(url, 'POST', `/nodes/${NODE}/storage/local/download-url`, {
        form: { content: 'iso', ...form },
      });
      assert.equal(r.status, 200, r.reason);
      return finish(url, data<string>(r));
    };
    assert.equal(
      await go({ url: `${fileBase}/a.iso`, filename: 'a.iso', checksum: sha1, 'checksum-algorithm': 'sha1' }),
      'OK',
    );
    assert.ok(c.state.volume(NODE, 'local:iso/a.iso'));
    assert.equal(
      await go({ url: `${fileBase}/a.iso`, filename: 'a.iso' }),
      "refusing to override existing file '/mnt/pve/local/template/iso/a.iso'",
    );
    assert.match(
      String(await go({ url: `${fileBase}/missing.iso`, filename: 'm.iso' })),
      /^download failed: command 'wget .*' failed: exit code 8$/,
    );
    assert.match(String(await go({ url: 'https://example.com/b.iso', filename: 'b.iso' })), /exit code 4$/);
    assert.equal(c.state.volume(NODE, 'local:iso/b.iso'), undefined);
  });

  it('volume delete: an unencoded volid with a slash, a base volume with linked clones stays', async () => {
    const d = await raw(url, 'DELETE', `/nodes/${NODE}/storage/local/content/local:iso/a.iso`);
    assert.equal(d.status, 200, d.reason);
    assert.equal(await finish(url, data<string>(d)), 'OK');
    assert.equal(c.state.volume(NODE, 'local:iso/a.iso'), undefined);
    // VM 150 is a linked clone of 9000's base volume.
    const b = await raw(url, 'DELETE', `/nodes/${NODE}/storage/local-lvm/content/base-9000-disk-0`);
    const upid = data<string>(b);
    assert.match(upid, /:imgdel:9000@local-lvm:/);
    assert.equal(await finish(url, upid), "base volume 'base-9000-disk-0' is still in use by linked clones");
  });

  it('agent: refused without an `agent` key, on a stopped VM, and while frozen', async () => {
    assertError(
      await raw(url, 'GET', `/nodes/${NODE}/qemu/101/agent/get-osinfo`),
      500,
      'No QEMU guest agent configured',
    );
    assertError(await raw(url, 'GET', `/nodes/${NODE}/qemu/150/agent/get-osinfo`), 500, 'VM 150 is not running');
    assert.equal(await power(url, 150, 'start'), 'OK');
    // A guest without qemu-guest-agent (not a race with the boot timer): not running.
    c.setGuestAgent(150, false);
    assertError(
      await raw(url, 'GET', `/nodes/${NODE}/qemu/150/agent/get-osinfo`),
      500,
      'QEMU guest agent is not running',
    );
    c.setGuestAgent(150, true);
    sim.clock.advance(60_000);
    assert.equal((await raw(url, 'POST', `/nodes/${NODE}/qemu/150/agent/fsfreeze-freeze`)).status, 200);
    assert.equal(
      data<{ result: string }>(await raw(url, 'POST', `/nodes/${NODE}/qemu/150/agent/fsfreeze-status`)).result,
      'frozen',
    );
    assertError(
      await raw(url, 'GET', `/nodes/${NODE}/qemu/150/agent/get-osinfo`),
      500,
      "VM 150 qga command 'guest-get-osinfo' failed - Command guest-get-osinfo has been disabled: the agent is in frozen state",
    );
    assert.equal(
      data<{ result: number }>(await raw(url, 'POST', `/nodes/${NODE}/qemu/150/agent/fsfreeze-thaw`)).result,
      1,
    );
    const nf = await raw(url, 'POST', `/nodes/${NODE}/qemu/150/agent/exec`, { form: { command: 'nosuch' } });
    assert.equal(nf.status, 500);
    assert.equal(
      (nf.json as { message: string }).message,
      "VM 150 qga command 'guest-exec' failed - Failed to execute child process \u201cnosuch\u201d (No such file or directory)\n",
    );
    // The guest shuts itself down.
    assert.equal((await raw(url, 'POST', `/nodes/${NODE}/qemu/150/agent/shutdown`)).status, 200);
    assert.equal(
      data<{ status: string }>(await raw(url, 'GET', `/nodes/${NODE}/qemu/150/status/current`)).status,
      'stopped',
    );
  });

  it('subscription and replication as PVE without a key or jobs', async () => {
    const s = data<Record<string, unknown>>(await raw(url, 'GET', `/nodes/${NODE}/subscription`));
    assert.equal(s.status, 'notfound');
    assert.match(String(s.serverid), /^[0-9A-F]{32}$/);
    assert.deepEqual(data(await raw(url, 'GET', `/nodes/${NODE}/replication`)), []);
  });
});

describe('upload content types per release', () => {
  it('7.4 has no `import` content: 400 from the schema', async () => {
    const sim = await startTestSim({ profile: '7.4', topology: parseTopology(TOPOLOGY, 'extras.yaml') });
    try {
      const r = await upload(sim.cluster('site-1').url, 'import', 'disk.qcow2', Buffer.from('x'));
      assert.equal(r.status, 400);
      assert.ok(((await r.json()) as { errors: Record<string, string> }).errors.content);
    } finally {
      await sim.close();
    }
  });
});
