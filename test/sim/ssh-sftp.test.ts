/**
 * SSH/SFTP on the simulated nodes: each node's endpoint and ed25519 host key (its OpenSSH
 * fingerprint is what the client is presented), root's logins (the simulator's client key, the
 * root password) and OpenSSH's refusals, SFTP over the storages' directories as sftp-server
 * answers (`Failure` for an existing rename target, posix-rename replacing it, `No such file`
 * outside the storages, a full disk), a snippet becoming a `snippets` volume of the storage API
 * (listed, counted, deleted), shared storages seen from every node, the `ssh-refused` and
 * `ssh-auth` faults, the ProviderConfig's ssh section and the keys in a state file.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parseAllDocuments } from 'yaml';
import type { SimCluster, Simulator } from '../../src/sim/index.ts';
import { loadState, saveState } from '../../src/sim/persist.ts';
import { providerConfigYaml } from '../../src/sim/provider-config.ts';
import { generateKeyPair } from '../../src/sim/ssh/keys.ts';
import { parseTopology } from '../../src/sim/topology.ts';
import { data } from '../helpers/fidelity.ts';
import { raw, startTestSim, waitTask } from '../helpers/sim.ts';
import { call, connect, fingerprintOf, type Session, sftpCode, upload } from './ssh-client.ts';

const TOPOLOGY = `
clusters:
  - name: lab
    listen: 127.0.0.1:0
    nodes:
      - name: pve1
        cpus: 4
        memory: 16G
        storages:
          - { id: local, type: dir, path: /var/lib/vz, content: [iso, snippets], total: 100G }
          - { id: tiny, type: dir, path: /mnt/tiny, content: [snippets], total: 4096 }
          - { id: plain, type: dir, path: /srv/plain, content: [iso], total: 10G }
          - { id: cephfs, type: cephfs, content: [snippets, iso], total: 1T, shared: true }
          - { id: local-lvm, type: lvmthin, content: [images], total: 100G }
        bridges: [{ name: vmbr0 }]
      - name: pve2
        cpus: 4
        memory: 16G
        storages:
          - { id: local, type: dir, path: /var/lib/vz, content: [iso, snippets], total: 100G }
          - { id: cephfs, type: cephfs, content: [snippets, iso], total: 1T, shared: true }
        bridges: [{ name: vmbr0 }]
`;

const SNIPPET = '#cloud-config\npackages: [jq]\n';

describe('SSH/SFTP on simulated nodes', () => {
  let sim: Simulator;
  let lab: SimCluster;
  let url: string;
  const sessions: Session[] = [];
  const open = async (node = 'pve1', auth: Parameters<typeof connect>[1] = {}): Promise<Session> => {
    const s = await connect(lab.sshNode(node), { privateKey: sim.credentials.sshPrivateKey, ...auth });
    sessions.push(s);
    return s;
  };
  before(async () => {
    sim = await startTestSim({ topology: parseTopology(TOPOLOGY, 'lab.yaml'), profile: '8.4' });
    lab = sim.cluster('lab');
    url = lab.url;
  });
  after(async () => {
    for (const s of sessions) s.end();
    await sim.close();
  });

  it('every node: its own port and ed25519 host key; the fingerprint is what the client is shown', async () => {
    const nodes = lab.sshNodes();
    assert.deepEqual(
      nodes.map((n) => n.node),
      ['pve1', 'pve2'],
    );
    assert.notEqual(nodes[0]!.port, nodes[1]!.port);
    for (const n of nodes) {
      assert.equal(n.host, '127.0.0.1');
      assert.match(n.hostPublicKey, /^ssh-ed25519 AAAA\S+ root@pve\d$/);
      assert.match(n.hostKeyFingerprint, /^SHA256:[A-Za-z0-9+/]{43}$/);
      assert.equal(n.hostKeyFingerprint, fingerprintOf(Buffer.from(n.hostPublicKey.split(' ')[1]!, 'base64')));
    }
    assert.notEqual(nodes[0]!.hostKeyFingerprint, nodes[1]!.hostKeyFingerprint);
    assert.match(sim.credentials.sshPrivateKey, /^-----BEGIN OPENSSH PRIVATE KEY-----\n/);
    const s = await open('pve2');
    assert.equal(s.presented, nodes[1]!.hostKeyFingerprint);
    // Pinning another node's key: the client refuses the connection.
    await assert.rejects(
      connect(lab.sshNode('pve1'), {
        privateKey: sim.credentials.sshPrivateKey,
        hostKeys: [nodes[1]!.hostKeyFingerprint],
      }),
    );
  });

  it('logins: the client key and the root password; a wrong key, password or user fails as OpenSSH does', async () => {
    await open('pve1', { privateKey: undefined, password: 'test-root-pw' });
    const other = generateKeyPair('stranger');
    const e1 = await connect(lab.sshNode('pve1'), { privateKey: other.privateKey }).catch(
      (e: Error & { level?: string }) => e,
    );
    assert.equal((e1 as { level?: string }).level, 'client-authentication');
    const e2 = await connect(lab.sshNode('pve1'), { password: 'wrong' }).catch((e: Error & { level?: string }) => e);
    assert.equal((e2 as { level?: string }).level, 'client-authentication');
    const e3 = await connect(lab.sshNode('pve1'), {
      privateKey: sim.credentials.sshPrivateKey,
      username: 'admin',
    }).catch((e: Error & { level?: string }) => e);
    assert.equal((e3 as { level?: string }).level, 'client-authentication');
  });

  it('a snippet uploaded over SFTP is a `snippets` volume: listed, counted, deleted by the API', async () => {
    const { sftp } = await open();
    assert.equal(await call<string>((cb) => sftp.realpath('.', cb)), '/root');
    const before = data<{ used: number }>(await raw(url, 'GET', '/nodes/pve1/storage/local/status')).used;
    await upload(sftp, '/var/lib/vz/snippets/user.yaml', SNIPPET);
    const list = data<Array<Record<string, unknown>>>(
      await raw(url, 'GET', '/nodes/pve1/storage/local/content?content=snippets'),
    );
    assert.equal(list.length, 1);
    const { ctime, ...rest } = list[0]!;
    assert.deepEqual(rest, {
      volid: 'local:snippets/user.yaml',
      content: 'snippets',
      format: 'snippet',
      size: SNIPPET.length,
    });
    assert.equal(typeof ctime, 'number');
    const after = data<{ used: number }>(await raw(url, 'GET', '/nodes/pve1/storage/local/status')).used;
    assert.equal(after - before, SNIPPET.length);
    const names = (
      await call<Array<{ filename: string; longname: string }>>((cb) => sftp.readdir('/var/lib/vz/snippets', cb))
    ).map((e) => e.filename);
    assert.deepEqual(names, ['user.yaml']);
    const st = await call<{ size: number; mode: number }>((cb) => sftp.stat('/var/lib/vz/snippets/user.yaml', cb));
    assert.equal(st.size, SNIPPET.length);
    assert.equal(st.mode, 0o100644);
    assert.equal((await call<Buffer>((cb) => sftp.readFile('/var/lib/vz/snippets/user.yaml', cb))).toString(), SNIPPET);
    // The storage API deletes it (task imgdel), and it is gone from SFTP too.
    const del = await raw(
      url,
      'DELETE',
      `/nodes/pve1/storage/local/content/${encodeURIComponent('local:snippets/user.yaml')}`,
    );
    assert.equal((await waitTask(url, 'pve1', data<string>(del))).exitstatus, 'OK');
    assert.equal((await sftpCode(call((cb) => sftp.stat('/var/lib/vz/snippets/user.yaml', cb)))).code, 2);
  });

  it("plain rename refuses an existing target ('Failure'); posix-rename replaces it", async () => {
    const { sftp } = await open();
    await call((cb) => sftp.writeFile('/var/lib/vz/snippets/a.yaml', 'A', cb));
    await call((cb) => sftp.writeFile('/var/lib/vz/snippets/b.yaml', 'B', cb));
    assert.deepEqual(
      await sftpCode(call((cb) => sftp.rename('/var/lib/vz/snippets/a.yaml', '/var/lib/vz/snippets/b.yaml', cb))),
      {
        code: 4,
        message: 'Failure',
      },
    );
    await call((cb) => sftp.ext_openssh_rename('/var/lib/vz/snippets/a.yaml', '/var/lib/vz/snippets/b.yaml', cb));
    assert.equal((await call<Buffer>((cb) => sftp.readFile('/var/lib/vz/snippets/b.yaml', cb))).toString(), 'A');
    const vols = data<Array<{ volid: string }>>(await raw(url, 'GET', '/nodes/pve1/storage/local/content')).map(
      (v) => v.volid,
    );
    assert.deepEqual(vols, ['local:snippets/b.yaml']);
    // Across storages (file systems): EXDEV, a Failure.
    assert.equal(
      (
        await sftpCode(
          call((cb) => sftp.ext_openssh_rename('/var/lib/vz/snippets/b.yaml', '/mnt/tiny/snippets/b.yaml', cb)),
        )
      ).code,
      4,
    );
    await call((cb) => sftp.unlink('/var/lib/vz/snippets/b.yaml', cb));
  });

  it('outside the storages nothing exists; a write on a read-only handle is `No such file` (EBADF)', async () => {
    const { sftp } = await open();
    assert.deepEqual(await sftpCode(call((cb) => sftp.stat('/etc/passwd', cb))), { code: 2, message: 'No such file' });
    assert.equal((await sftpCode(call((cb) => sftp.writeFile('/tmp/x', 'x', cb)))).code, 2);
    assert.equal((await call<{ mode: number }>((cb) => sftp.stat('/var/lib', cb))).mode, 0o40755);
    assert.equal((await sftpCode(call((cb) => sftp.mkdir('/var/lib/vz/snippets', cb)))).code, 4); // EEXIST
    await call((cb) => sftp.writeFile('/var/lib/vz/snippets/ro.yaml', 'x', cb));
    const h = await call<Buffer>((cb) => sftp.open('/var/lib/vz/snippets/ro.yaml', 'r', cb));
    assert.equal((await sftpCode(call((cb) => sftp.write(h, Buffer.from('y'), 0, 1, 0, cb)))).code, 2);
    await call((cb) => sftp.close(h, cb));
    await call((cb) => sftp.unlink('/var/lib/vz/snippets/ro.yaml', cb));
  });

  it('a storage without `snippets`: the directory is made over SFTP, the file is no volume', async () => {
    const { sftp } = await open();
    assert.equal((await sftpCode(call((cb) => sftp.stat('/srv/plain/snippets', cb)))).code, 2);
    await call((cb) => sftp.mkdir('/srv/plain/snippets', cb));
    await upload(sftp, '/srv/plain/snippets/hidden.yaml', SNIPPET);
    assert.deepEqual(data(await raw(url, 'GET', '/nodes/pve1/storage/plain/content')), []);
    assert.equal(
      (await call<Buffer>((cb) => sftp.readFile('/srv/plain/snippets/hidden.yaml', cb))).toString(),
      SNIPPET,
    );
  });

  it('a full disk: the write fails `Failure` and the file keeps what fit', async () => {
    const { sftp } = await open();
    await assert.rejects(
      call((cb) => sftp.writeFile('/mnt/tiny/snippets/big.yaml', Buffer.alloc(5000, 'a'), cb)),
      {
        code: 4,
        message: 'Failure',
      },
    );
    const st = await call<{ size: number }>((cb) => sftp.stat('/mnt/tiny/snippets/big.yaml', cb));
    assert.equal(st.size, 4096);
    const tiny = data<{ avail: number; used: number }>(await raw(url, 'GET', '/nodes/pve1/storage/tiny/status'));
    assert.deepEqual([tiny.used, tiny.avail], [4096, 0]);
    await call((cb) => sftp.unlink('/mnt/tiny/snippets/big.yaml', cb));
    // The storage-full fault: nothing fits; the empty file stays, as open(O_CREAT) made it.
    const id = lab.addFault({ kind: 'storage-full', node: 'pve1', storage: 'local' });
    await assert.rejects(
      call((cb) => sftp.writeFile('/var/lib/vz/snippets/full.yaml', SNIPPET, cb)),
      { code: 4 },
    );
    assert.equal((await call<{ size: number }>((cb) => sftp.stat('/var/lib/vz/snippets/full.yaml', cb))).size, 0);
    lab.removeFault(id);
    await call((cb) => sftp.unlink('/var/lib/vz/snippets/full.yaml', cb));
  });

  it('a shared storage is one directory on every node', async () => {
    const a = await open('pve1');
    const b = await open('pve2');
    await upload(a.sftp, '/mnt/pve/cephfs/snippets/shared.yaml', SNIPPET);
    assert.equal(
      (await call<Buffer>((cb) => b.sftp.readFile('/mnt/pve/cephfs/snippets/shared.yaml', cb))).toString(),
      SNIPPET,
    );
    const listed = data<Array<{ volid: string }>>(
      await raw(url, 'GET', '/nodes/pve2/storage/cephfs/content?content=snippets'),
    );
    assert.deepEqual(
      listed.map((v) => v.volid),
      ['cephfs:snippets/shared.yaml'],
    );
    // `local` is not shared: pve2's has no such file.
    await upload(a.sftp, '/var/lib/vz/snippets/mine.yaml', SNIPPET);
    assert.equal((await sftpCode(call((cb) => b.sftp.stat('/var/lib/vz/snippets/mine.yaml', cb)))).code, 2);
  });

  it('fault ssh-refused: connection refused until removed (open sessions stay)', async () => {
    const kept = await open('pve1');
    const id = lab.addFault({ kind: 'ssh-refused', node: 'pve1' });
    await lab.sshReady();
    const e = await connect(lab.sshNode('pve1'), { privateKey: sim.credentials.sshPrivateKey }).catch(
      (x: NodeJS.ErrnoException) => x,
    );
    assert.equal((e as NodeJS.ErrnoException).code, 'ECONNREFUSED');
    assert.equal(await call<string>((cb) => kept.sftp.realpath('.', cb)), '/root');
    // pve2 is not affected.
    await open('pve2');
    lab.removeFault(id);
    await lab.sshReady();
    await open('pve1');
  });

  it("a simulator closed while a node refuses SSH closes that node's port too (its close clears the fault, which reopens it)", async () => {
    const own = await startTestSim({ topology: parseTopology(TOPOLOGY, 'lab.yaml'), profile: '8.4' });
    const c = own.cluster('lab');
    const port = c.sshNode('pve1').port;
    c.addFault({ kind: 'ssh-refused', node: 'pve1' });
    await c.sshReady();
    await own.close();
    // Past the reopening's lookup: nothing listens there any more.
    await new Promise((resolve) => setTimeout(resolve, 50));
    const refused = await new Promise<string>((resolve) => {
      const s = createConnection({ host: '127.0.0.1', port }, () => {
        s.destroy();
        resolve('connected');
      });
      s.on('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
    });
    assert.equal(refused, 'ECONNREFUSED');
  });

  it('fault ssh-auth: every login fails, the right key included', async () => {
    const id = lab.addFault({ kind: 'ssh-auth', node: 'pve2' });
    const e = await connect(lab.sshNode('pve2'), { privateKey: sim.credentials.sshPrivateKey }).catch((x: Error) => x);
    assert.equal((e as { level?: string }).level, 'client-authentication');
    assert.ok(lab.faults.list().find((f) => f.id === id)!.fired > 0);
    lab.removeFault(id);
    await open('pve2');
    // The fault's node is checked.
    assert.throws(() => lab.addFault({ kind: 'ssh-auth', node: 'nope' }), /no node 'nope'/);
  });

  it('providerConfigYaml (ssh by default): the ssh section and the proxmox-ssh Secret', () => {
    const docs = parseAllDocuments(providerConfigYaml(sim, { ssh: true, namespace: 'ns1' })).map(
      (d) => d.toJS() as Record<string, any>,
    );
    assert.deepEqual(
      docs.map((d) => [d.kind, d.metadata.name]),
      [
        ['Secret', 'proxmox-credentials'],
        ['Secret', 'proxmox-ssh'],
        ['ClusterProviderConfig', 'default'],
      ],
    );
    assert.deepEqual(docs[1]!.stringData, { privateKey: sim.credentials.sshPrivateKey });
    assert.equal(docs[1]!.type, 'Opaque');
    assert.deepEqual(docs[2]!.spec.sites[0].ssh, {
      user: 'root',
      secretRef: { name: 'proxmox-ssh', namespace: 'ns1' },
      hostKeys: lab.sshNodes().map((n) => n.hostKeyFingerprint),
      nodes: lab.sshNodes().map((n) => ({ name: n.node, host: '127.0.0.1', port: n.port })),
    });
    // The default is the same; ssh: false gives a site without SSH.
    assert.equal(
      providerConfigYaml(sim, { namespace: 'ns1' }),
      providerConfigYaml(sim, { ssh: true, namespace: 'ns1' }),
    );
    const plain = parseAllDocuments(providerConfigYaml(sim, { ssh: false })).map(
      (d) => d.toJS() as Record<string, any>,
    );
    assert.deepEqual(
      plain.map((d) => d.kind),
      ['Secret', 'ClusterProviderConfig'],
    );
    assert.equal(plain[1]!.spec.sites[0].ssh, undefined);
  });

  it('a state file keeps the keys and the files', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sim-ssh-'));
    try {
      const { sftp } = await open('pve1');
      await upload(sftp, '/var/lib/vz/snippets/kept.yaml', SNIPPET);
      await call((cb) => sftp.writeFile('/srv/plain/notes.txt', 'n', cb));
      saveState(sim, join(dir, 'state.json'));
      const again = await startTestSim({ topology: parseTopology(TOPOLOGY, 'lab.yaml'), profile: '8.4' });
      try {
        loadState(again, join(dir, 'state.json'));
        const l2 = again.cluster('lab');
        assert.equal(again.credentials.sshPrivateKey, sim.credentials.sshPrivateKey);
        assert.equal(again.credentials.sshPublicKey, sim.credentials.sshPublicKey);
        assert.equal(l2.sshNode('pve1').hostKeyFingerprint, lab.sshNode('pve1').hostKeyFingerprint);
        const s = await connect(l2.sshNode('pve1'), { privateKey: sim.credentials.sshPrivateKey });
        sessions.push(s);
        assert.equal(
          (await call<Buffer>((cb) => s.sftp.readFile('/var/lib/vz/snippets/kept.yaml', cb))).toString(),
          SNIPPET,
        );
        assert.equal((await call<Buffer>((cb) => s.sftp.readFile('/srv/plain/notes.txt', cb))).toString(), 'n');
        const vols = data<Array<{ volid: string; size: number }>>(
          await raw(l2.url, 'GET', '/nodes/pve1/storage/local/content'),
        );
        assert.ok(vols.some((v) => v.volid === 'local:snippets/kept.yaml' && v.size === SNIPPET.length));
      } finally {
        await again.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
