/**
 * `provider-proxmox sim` as a process: the printed endpoints and credentials, `--print-config`,
 * a clean stop on SIGTERM/SIGINT that saves `--state`, the state surviving a restart, `--help` and
 * the exit codes of bad arguments; and `npx provider-proxmox --help` from the repository root.
 */
import assert from 'node:assert/strict';
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { connect } from 'node:tls';
import { fileURLToPath } from 'node:url';
import { Agent, fetch as undiciFetch } from 'undici';
import { parseAllDocuments } from 'yaml';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const NODE_BIN = join(ROOT, 'node_modules/.bin/node');
const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/;

/** A free loopback port: bind port 0, read it, let it go. */
async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const { port } = srv.address() as { port: number };
  await new Promise<void>((resolve) => srv.close(() => resolve()));
  return port;
}

interface Run {
  proc: ChildProcessWithoutNullStreams;
  stdout: () => string;
  stderr: () => string;
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

function run(cmd: string, args: string[], env: NodeJS.ProcessEnv = process.env): Run {
  const proc = spawn(cmd, args, { cwd: ROOT, env, stdio: 'pipe' });
  let out = '';
  let err = '';
  proc.stdout.setEncoding('utf8').on('data', (d: string) => {
    out += d;
  });
  proc.stderr.setEncoding('utf8').on('data', (d: string) => {
    err += d;
  });
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    proc.on('close', (code, signal) => resolve({ code, signal })),
  );
  return { proc, stdout: () => out, stderr: () => err, exit };
}

function sim(args: string[]): Run {
  return run(NODE_BIN, ['src/cli/main.ts', 'sim', ...args]);
}

/** Resolves once stdout shows `re`; rejects if the process ends first. */
async function waitForOutput(r: Run, re: RegExp): Promise<string> {
  let exited = false;
  void r.exit.then(() => {
    exited = true;
  });
  for (;;) {
    if (re.test(r.stdout())) return r.stdout();
    if (exited) throw new Error(`process ended before printing ${re}:\n${r.stdout()}\n${r.stderr()}`);
    await new Promise<void>((resolve) => {
      const done = () => {
        r.proc.stdout.off('data', done);
        r.proc.off('close', done);
        resolve();
      };
      r.proc.stdout.on('data', done);
      r.proc.on('close', done);
    });
  }
}

async function finished(r: Run): Promise<{ code: number | null; out: string; err: string }> {
  const { code } = await r.exit;
  return { code, out: r.stdout(), err: r.stderr() };
}

type Fetch = (
  url: string,
  init?: { method?: string; headers?: Record<string, string>; body?: string },
) => Promise<{
  status: number;
  json: () => Promise<unknown>;
}>;

async function api(f: Fetch, base: string, auth: string, method: string, path: string, form?: Record<string, string>) {
  const res = await f(`${base}/api2/json${path}`, {
    method,
    headers: {
      Authorization: auth,
      ...(form ? { 'Content-Type': 'application/x-www-form-urlencoded' } : {}),
    },
    ...(form ? { body: new URLSearchParams(form).toString() } : {}),
  });
  return { status: res.status, data: ((await res.json()) as { data: unknown }).data };
}

async function waitTaskOk(f: Fetch, base: string, auth: string, node: string, upid: string): Promise<void> {
  for (;;) {
    const r = await api(f, base, auth, 'GET', `/nodes/${node}/tasks/${encodeURIComponent(upid)}/status`);
    const d = r.data as { status: string; exitstatus?: string };
    if (d.status === 'stopped') {
      assert.equal(d.exitstatus, 'OK');
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}

function topologyYaml(p1: number, p2: number): string {
  const node = (name: string, net: string) => `
      - name: ${name}
        cpus: 8
        memory: 32G
        storages:
          - { id: local-lvm, type: lvmthin, content: [images, rootdir], total: 200G }
        bridges:
          - { name: vmbr0, cidr: ${net}.2/24, dhcp: ${net}.100-${net}.200 }`;
  return `clusters:
  - name: alpha
    listen: 127.0.0.1:${p1}
    nodes:${node('a1', '10.10.0')}
  - name: beta
    listen: 127.0.0.1:${p2}
    profile: '7.4'
    nodes:${node('b1', '10.20.0')}${node('b2', '10.20.0')}
`;
}

describe('provider-proxmox sim (process)', () => {
  let dir: string;
  let topology: string;
  let ports: [number, number];
  const running: Run[] = [];
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sim-cli-'));
    ports = [await freePort(), await freePort()];
    topology = join(dir, 'topology.yaml');
    writeFileSync(topology, topologyYaml(...ports));
  });
  after(() => {
    for (const r of running) if (r.proc.exitCode === null && r.proc.signalCode === null) r.proc.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  });

  it('prints endpoints and credentials, writes the ProviderConfig, stops on SIGTERM and keeps its state', async () => {
    const printConfig = join(dir, 'provider-config.yaml');
    const state = join(dir, 'state.json');
    const [p1, p2] = ports;

    // First run: plain HTTP, a generated token.
    const first = sim([
      '--http',
      '--topology',
      topology,
      '--speed',
      '100',
      '--print-config',
      printConfig,
      '--state',
      state,
    ]);
    running.push(first);
    const out = await waitForOutput(first, /Press Ctrl-C to stop\.\n/);
    const lines = out.trimEnd().split('\n');
    assert.equal(lines[0], 'Proxmox VE simulator: profile 8.4, speed 100, HTTP');
    assert.match(lines[1]!, new RegExp(`^  alpha  http://127\\.0\\.0\\.1:${p1}  node a1$`));
    assert.match(lines[2]!, new RegExp(`^  beta   http://127\\.0\\.0\\.1:${p2}  node b1,b2$`));
    assert.equal(lines[3], 'Credentials (every cluster):');
    assert.equal(lines[4], '  user      root@pam  password proxmox-sim');
    const tokenLine = /^ {2}token {5}(root@pam!provider)=(\S+)$/.exec(lines[5]!);
    assert.ok(tokenLine, lines[5]);
    assert.match(tokenLine[2]!, UUID);
    assert.equal(lines[6], `ProviderConfig written to ${printConfig}`);
    assert.equal(lines[7], 'Press Ctrl-C to stop.');
    assert.equal(lines.length, 8);
    const auth = `PVEAPIToken=${tokenLine[1]}=${tokenLine[2]}`;

    // --print-config: a Secret with the printed token and a ClusterProviderConfig for both sites.
    assert.equal(statSync(printConfig).mode & 0o777, 0o600, 'the file holds a secret');
    const docs = parseAllDocuments(readFileSync(printConfig, 'utf8'));
    assert.ok(Array.isArray(docs));
    for (const d of docs) assert.deepEqual(d.errors, []);
    // The credentials Secret, the SSH key Secret (cloud-init snippets), the ClusterProviderConfig.
    assert.equal(docs.length, 3);
    const [secret, sshSecret, config] = docs.map((d) => d.toJS()) as [
      { apiVersion: string; kind: string; metadata: { name: string; namespace: string }; stringData: unknown },
      { apiVersion: string; kind: string; metadata: { name: string; namespace: string }; stringData: unknown },
      {
        apiVersion: string;
        kind: string;
        spec: { credentials: { secretRef: unknown }; sites: Array<Record<string, unknown>> };
      },
    ];
    assert.equal(sshSecret.metadata.name, 'proxmox-ssh');
    assert.match(String((sshSecret.stringData as { privateKey: string }).privateKey), /BEGIN OPENSSH PRIVATE KEY/);
    for (const site of config.spec.sites) {
      const ssh = site.ssh as { hostKeys: string[]; nodes: unknown[] };
      assert.match(ssh.hostKeys[0]!, /^SHA256:/);
      delete site.ssh;
    }
    assert.equal(secret.apiVersion, 'v1');
    assert.equal(secret.kind, 'Secret');
    assert.deepEqual(secret.stringData, { tokenid: 'root@pam!provider', token: tokenLine[2] });
    assert.equal(config.apiVersion, 'proxmox.sankofa.io/v1alpha1');
    assert.equal(config.kind, 'ClusterProviderConfig');
    assert.deepEqual(config.spec.credentials.secretRef, {
      name: secret.metadata.name,
      namespace: secret.metadata.namespace,
    });
    assert.deepEqual(config.spec.sites, [
      { name: 'alpha', endpoints: [`http://127.0.0.1:${p1}`], nodes: ['a1'] },
      { name: 'beta', endpoints: [`http://127.0.0.1:${p2}`], nodes: ['b1', 'b2'] },
    ]);

    // Both clusters answer, each with its own profile.
    const f = fetch as unknown as Fetch;
    const a = `http://127.0.0.1:${p1}`;
    const b = `http://127.0.0.1:${p2}`;
    assert.equal(((await api(f, a, auth, 'GET', '/version')).data as { release: string }).release, '8.4');
    assert.equal(((await api(f, b, auth, 'GET', '/version')).data as { release: string }).release, '7.4');

    // A VM created in the first run...
    const create = await api(f, a, auth, 'POST', '/nodes/a1/qemu', {
      vmid: '100',
      name: 'survivor',
      scsi0: 'local-lvm:2',
      net0: 'virtio,bridge=vmbr0',
    });
    assert.equal(create.status, 200);
    await waitTaskOk(f, a, auth, 'a1', String(create.data));

    first.proc.kill('SIGTERM');
    const end = await first.exit;
    assert.deepEqual(end, { code: 0, signal: null });
    assert.match(first.stdout(), /simulator stopped\n$/);
    assert.equal(first.stderr(), '');
    const saved = JSON.parse(readFileSync(state, 'utf8')) as {
      clusters: Array<{ name: string; vms: Array<{ vmid: number; config: Record<string, string> }> }>;
    };
    assert.equal(statSync(state).mode & 0o777, 0o600);
    assert.deepEqual(
      saved.clusters.find((c) => c.name === 'alpha')?.vms.map((v) => [v.vmid, v.config.name]),
      [[100, 'survivor']],
    );

    // ...is there after a restart with the same --state (this time over HTTPS, with a given token).
    const secret2 = '0b1f2d3c-4e5f-4a6b-8c7d-9e0f1a2b3c4d';
    const second = sim([
      '--topology',
      topology,
      '--speed',
      '100',
      '--state',
      state,
      '--token',
      `ops@pve!ci=${secret2}`,
    ]);
    running.push(second);
    const out2 = (await waitForOutput(second, /Press Ctrl-C to stop\.\n/)).split('\n');
    assert.equal(out2[0], 'Proxmox VE simulator: profile 8.4, speed 100, HTTPS');
    const alpha = new RegExp(
      `^  alpha  https://127\\.0\\.0\\.1:${p1}  node a1  fingerprint ((?:[0-9A-F]{2}:){31}[0-9A-F]{2})$`,
    ).exec(out2[1]!);
    assert.ok(alpha, out2[1]);
    assert.match(out2[2]!, /^ {2}beta {3}https:\/\/127\.0\.0\.1:\d+ {2}node b1,b2 {2}fingerprint [0-9A-F:]{95}$/);
    assert.equal(out2[5], `  token     ops@pve!ci=${secret2}`);

    // Trust exactly the certificate whose fingerprint was printed.
    const der = await new Promise<Buffer>((resolve, reject) => {
      const s = connect({ host: '127.0.0.1', port: p1, rejectUnauthorized: false }, () => {
        resolve(s.getPeerCertificate().raw);
        s.end();
      });
      s.on('error', reject);
    });
    const cert = new X509Certificate(der);
    assert.equal(cert.fingerprint256, alpha[1]);
    const dispatcher = new Agent({ connect: { ca: cert.toString() } });
    try {
      const tls = ((url: string, init?: object) => undiciFetch(url, { ...init, dispatcher })) as unknown as Fetch;
      const https = `https://127.0.0.1:${p1}`;
      const cfg = await api(tls, https, `PVEAPIToken=ops@pve!ci=${secret2}`, 'GET', '/nodes/a1/qemu/100/config');
      assert.equal(cfg.status, 200);
      assert.equal((cfg.data as { name: string }).name, 'survivor');
      assert.equal((cfg.data as { scsi0: string }).scsi0, 'local-lvm:vm-100-disk-0,size=2G');
    } finally {
      await dispatcher.close();
    }

    second.proc.kill('SIGINT');
    assert.deepEqual(await second.exit, { code: 0, signal: null });
    assert.match(second.stdout(), /simulator stopped\n$/);
  });

  it('fails with exit 1 when a listen address is taken, naming the cluster', async () => {
    const busy: Server = createServer();
    await new Promise<void>((resolve) => busy.listen(ports[0], '127.0.0.1', resolve));
    try {
      const r = await finished(sim(['--http', '--topology', topology]));
      assert.equal(r.code, 1);
      assert.match(
        r.err,
        new RegExp(`cluster 'alpha': cannot listen on 127\\.0\\.0\\.1:${ports[0]}: address already in use`),
      );
    } finally {
      await new Promise<void>((resolve) => busy.close(() => resolve()));
    }
  });
});

describe('provider-proxmox command line', () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'sim-cli-args-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('--help describes the commands and every sim option, exit 0', async () => {
    const [top, simHelp] = await Promise.all([
      finished(run(NODE_BIN, ['src/cli/main.ts', '--help'])),
      finished(sim(['--help'])),
    ]);
    assert.equal(top.code, 0);
    assert.match(top.out, /^Usage: provider-proxmox \[options\] \[command\]/);
    assert.match(top.out, /\n {2}sim \[options\] +Run the Proxmox VE API simulator/);
    assert.equal(simHelp.code, 0);
    assert.match(simHelp.out, /^Usage: provider-proxmox sim \[options\]/);
    for (const opt of [
      '--topology <file>',
      '--profile <version>',
      '--speed <n>',
      '--http',
      '--root-password <pw>',
      '--token <USER@REALM!ID=SECRET>',
      '--state <file>',
      '--print-config <file>',
    ]) {
      assert.ok(simHelp.out.includes(opt), `sim --help lacks ${opt}`);
    }
    assert.match(simHelp.out, /choices: "6\.4",\s+"7\.4", "8\.4", "9\.2"/);
  });

  it('bad arguments exit 2 with a reason; a broken topology exits 1 with file:line:col', async () => {
    const broken = join(dir, 'broken.yaml');
    writeFileSync(
      broken,
      'clusters:\n  - name: x\n    listen: 127.0.0.1:1\n    nodes:\n      - name: n\n        cpus: 0\n',
    );
    const [profile, speed, token, unknown, topo] = await Promise.all([
      finished(sim(['--profile', '5.0'])),
      finished(sim(['--speed', '0'])),
      finished(sim(['--token', 'not-a-token'])),
      finished(sim(['--no-such-option'])),
      finished(sim(['--http', '--topology', broken])),
    ]);
    assert.equal(profile.code, 2);
    assert.match(profile.err, /argument '5\.0' is invalid\. Allowed choices are 6\.4, 7\.4, 8\.4, 9\.2\./);
    assert.equal(speed.code, 2);
    assert.match(speed.err, /expected a number > 0/);
    assert.equal(token.code, 2);
    assert.match(token.err, /expected USER@REALM!TOKENID=SECRET/);
    assert.equal(unknown.code, 2);
    assert.match(unknown.err, /unknown option '--no-such-option'/);
    assert.equal(topo.code, 1);
    assert.ok(
      topo.err.includes(`${broken}:6:15: clusters.0.nodes.0.cpus: expected a positive integer, got 0`),
      topo.err,
    );
    for (const r of [profile, speed, token, unknown, topo]) assert.equal(r.out, '');
  });

  it('`npx provider-proxmox --help` works from the repository root', async () => {
    const r = await finished(run('npx', ['--no-install', 'provider-proxmox', '--help']));
    assert.equal(r.code, 0, r.err);
    assert.match(r.out, /^Usage: provider-proxmox \[options\] \[command\]/);
  });
});
