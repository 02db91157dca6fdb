/** `provider-proxmox doctor` against the simulator: healthy, PVE 6.4, wrong token, missing bridge, storage without images... */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { doctorMain } from '../../src/cli/doctor.ts';
import type { DoctorReport } from '../../src/doctor/doctor.ts';
import type { Profile, Simulator } from '../../src/sim/index.ts';
import { startSimulator } from '../../src/sim/index.ts';
import { providerConfigYaml } from '../../src/sim/provider-config.ts';
import { client, deadPort, NODE, ROOT_PASSWORD, sim, TOKEN_SECRET } from '../proxmox/helpers.ts';
import { twoNodeTopology } from '../vm/harness.ts';

let dir: string;
before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'doctor-'));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

interface Run {
  code: number;
  out: string;
  err: string;
  json?: DoctorReport;
}

async function doctor(args: string[]): Promise<Run> {
  let out = '';
  let err = '';
  const code = await doctorMain(args, {
    stdout: (s) => {
      out += s;
    },
    stderr: (s) => {
      err += s;
    },
    client: { retry: { attempts: 1 }, connectTimeoutMs: 2000 },
  });
  const run: Run = { code, out, err };
  if (args.includes('json')) run.json = JSON.parse(out) as DoctorReport;
  return run;
}

async function file(name: string, text: string): Promise<string> {
  const p = join(dir, name);
  await writeFile(p, text);
  return p;
}

function check(r: DoctorReport, site: string, id: string) {
  const c = r.sites.find((s) => s.site === site)?.checks.find((x) => x.id === id);
  assert.ok(c, `no check '${id}' for ${site}: ${JSON.stringify(r.sites.map((s) => s.checks.map((x) => x.id)))}`);
  return c;
}

const vm = (name: string, fp: Record<string, unknown>) =>
  `apiVersion: proxmox.sankofa.io/v1alpha1
kind: ProxmoxVM
metadata:
  name: ${name}
spec:
  forProvider:
${Object.entries(fp)
  .map(([k, v]) => `    ${k}: ${JSON.stringify(v)}`)
  .join('\n')}
`;

async function withSim(profile: Profile, fn: (s: Simulator, config: string) => Promise<void>): Promise<void> {
  const s = await sim(profile);
  try {
    await fn(s, await file(`pc-${profile}-${Math.random().toString(36).slice(2)}.yaml`, providerConfigYaml(s)));
  } finally {
    await s.close();
  }
}

describe('doctor', () => {
  it('a healthy simulator: exit 0, every check ok (text and json)', async () => {
    await withSim('8.4', async (_s, config) => {
      const t = await doctor(['--config', config]);
      assert.equal(t.code, 0, t.out + t.err);
      assert.match(t.out, /0 problems, 0 warnings: everything the provider needs is there/);
      assert.match(t.out, /site site-1 .*: Proxmox VE 8\.4\.5/);
      const j = await doctor(['--config', config, '-o', 'json']);
      assert.equal(j.code, 0);
      assert.equal(j.json!.ok, true);
      assert.deepEqual(
        j.json!.sites.map((x) => x.site),
        ['site-1', 'site-2'],
      );
      for (const id of [
        'auth',
        'version',
        'node ml110-01',
        'bridges ml110-01',
        'storage ml110-01',
        'ssh ml110-01',
        'privileges',
      ]) {
        assert.equal(check(j.json!, 'site-1', id).status, 'ok', id);
      }
      assert.ok(!t.out.includes(TOKEN_SECRET));
    });
  });

  it('SSH for snippets: a node presenting a key that is not pinned fails, with where to read the right one', async () => {
    await withSim('8.4', async (_s, config) => {
      const { readFile } = await import('node:fs/promises');
      const text = (await readFile(config, 'utf8')).replace(/SHA256:[A-Za-z0-9+/]{43}/g, `SHA256:${'A'.repeat(43)}`);
      const r = await doctor(['--config', await file('wrong-key.yaml', text), '-o', 'json']);
      assert.equal(r.code, 1);
      const c = check(r.json!, 'site-1', 'ssh ml110-01');
      assert.equal(c.status, 'fail');
      assert.match(c.detail, /is not one of spec\.sites\[\]\.ssh\.hostKeys; nothing was sent/);
      assert.match(c.fix!, /ssh-keygen -lf/);
    });
  });

  it('PVE 6.4: no import-from is a warning; an image manifest then fails with the template fix', async () => {
    await withSim('6.4', async (_s, config) => {
      const plain = await doctor(['--config', config, '--site', 'site-1', '-o', 'json']);
      assert.equal(plain.code, 0, plain.out);
      const v = check(plain.json!, 'site-1', 'version');
      assert.equal(v.status, 'warn');
      assert.match(v.detail, /import-from: no/);

      const m = await file(
        'img64.yaml',
        vm('web-01', { site: 'site-1', node: 'ml110-01', image: 'ubuntu-22.04-cloud.img' }),
      );
      const r = await doctor(['--config', config, '--site', 'site-1', '-f', m, '-o', 'json']);
      assert.equal(r.code, 1);
      const c = check(r.json!, 'site-1', 'image ubuntu-22.04-cloud.img on ml110-01');
      assert.equal(c.status, 'fail');
      assert.match(c.detail, /has no import-from/);
      assert.match(c.fix!, /template/);
      // At the line of the field to fix, not the resource's `spec:`.
      assert.match(c.detail, new RegExp(`img64\\.yaml:${lineOf(m, 'image:')}\\)`));
      const t = await doctor([
        '--config',
        config,
        '--site',
        'site-1',
        '-f',
        await file('tpl64.yaml', vm('web-02', { node: 'ml110-01', template: 9000 })),
      ]);
      assert.equal(t.code, 0, t.out);
    });
  });

  it('a wrong token: exit 1, the fix names the Secret and pveum, the secret is never printed', async () => {
    await withSim('8.4', async (_s, config) => {
      const { readFile } = await import('node:fs/promises');
      const bad = await file(
        'pc-badtoken.yaml',
        (await readFile(config, 'utf8')).replace(TOKEN_SECRET, 'deadbeef-0000-4000-8000-00000000dead'),
      );
      for (const output of ['text', 'table', 'json', 'yaml']) {
        const r = await doctor(['--config', bad, '--site', 'site-1', '-o', output]);
        assert.equal(r.code, 1);
        assert.ok(
          !r.out.includes('deadbeef-0000-4000-8000-00000000dead') && !r.err.includes('deadbeef'),
          'secret printed',
        );
        assert.ok(!r.out.includes(TOKEN_SECRET));
        if (output === 'json') {
          const a = check(r.json!, 'site-1', 'auth');
          assert.equal(a.status, 'fail');
          assert.match(a.detail, /root@pam!provider: invalid token value!/);
          assert.match(a.fix!, /Secret crossplane-system\/proxmox-credentials/);
          assert.match(a.fix!, /pveum user token add root@pam provider/);
          assert.equal(check(r.json!, 'site-1', 'remaining checks').status, 'skip');
        } else if (output === 'yaml') {
          // The JSON document, as YAML.
          const doc = (await import('yaml')).parse(r.out) as { ok: boolean };
          assert.equal(doc.ok, false);
          assert.match(r.out, /status: fail/);
        } else {
          assert.match(r.out, /FAIL {2}auth/);
        }
      }
    });
  });

  it('a missing bridge and a storage that cannot hold images', async () => {
    await withSim('8.4', async (_s, config) => {
      const m = await file(
        'vms.yaml',
        [vm('web-01', { site: 'site-1', node: 'ml110-01', network: 'vmbr1', storage: 'local', template: 9000 })].join(
          '---\n',
        ),
      );
      const r = await doctor(['--config', config, '--site', 'site-1', '-f', m, '-o', 'json']);
      assert.equal(r.code, 1);
      const b = check(r.json!, 'site-1', 'bridges ml110-01');
      assert.equal(b.status, 'fail');
      assert.match(
        b.detail,
        new RegExp(`vmbr1 does not exist \\(used by web-01 at .*vms\\.yaml:${lineOf(m, 'network:')}\\)`),
      );
      assert.match(b.fix!, /create bridge vmbr1 on ml110-01/);
      assert.match(b.fix!, /existing bridges: vmbr0/);
      const st = check(r.json!, 'site-1', 'storage ml110-01');
      assert.equal(st.status, 'fail');
      assert.match(
        st.detail,
        /storage local \(dir\) cannot hold VM disks: its content is backup,import,iso,snippets,vztmpl/,
      );
      assert.match(st.fix!, /pvesm set local --content images/);
      assert.match(st.fix!, /or use local-lvm/);
      assert.equal(check(r.json!, 'site-1', 'template 9000 on ml110-01').status, 'ok');
    });
  });

  it('images: an ISO volume with a token fails (with the fixes); an import volume and root@pam pass', async () => {
    await withSim('8.4', async (s, config) => {
      const iso = await file(
        'iso.yaml',
        vm('a', { site: 'site-1', node: 'ml110-01', image: 'local:iso/ubuntu-22.04-cloud.img' }),
      );
      const r = await doctor(['--config', config, '--site', 'site-1', '-f', iso, '-o', 'json']);
      assert.equal(r.code, 1);
      const c = check(r.json!, 'site-1', 'image local:iso/ubuntu-22.04-cloud.img on ml110-01');
      assert.match(c.detail, /'iso' volume: with an API token it cannot be imported/);
      assert.match(c.fix!, /local:import\/ubuntu-22\.04-cloud\.img/);
      assert.match(c.fix!, /template/);
      assert.match(c.fix!, /root@pam password/);

      const imp = await file(
        'imp.yaml',
        vm('b', { site: 'site-1', node: 'ml110-01', image: 'ubuntu-22.04-cloud.qcow2' }),
      );
      const ok = await doctor(['--config', config, '--site', 'site-1', '-f', imp, '-o', 'json']);
      assert.equal(ok.code, 0, ok.out);
      assert.match(
        check(ok.json!, 'site-1', 'image ubuntu-22.04-cloud.qcow2 on ml110-01').detail,
        /local:import\/ubuntu-22\.04-cloud\.qcow2/,
      );

      const missing = await file(
        'missing.yaml',
        vm('c', { site: 'site-1', node: 'ml110-01', image: 'debian-12.qcow2' }),
      );
      const m = await doctor(['--config', config, '--site', 'site-1', '-f', missing, '-o', 'json']);
      assert.match(check(m.json!, 'site-1', 'image debian-12.qcow2 on ml110-01').detail, /not found on ml110-01/);

      // root@pam with a password may import the ISO file from its absolute path.
      const pw = await file('pw.txt', `${ROOT_PASSWORD}\n`);
      const root = await doctor([
        '--endpoint',
        s.cluster('site-1').url,
        '--fingerprint',
        s.cluster('site-1').fingerprint,
        '--user',
        'root@pam',
        '--password-file',
        pw,
        '--site',
        'site-1',
        '-f',
        iso,
        '-o',
        'json',
      ]);
      assert.equal(root.code, 0, root.out + root.err);
      assert.match(
        check(root.json!, 'site-1', 'image local:iso/ubuntu-22.04-cloud.img on ml110-01').detail,
        /root@pam imports it/,
      );
      assert.ok(!root.out.includes(ROOT_PASSWORD));
    });
  });

  it('a privilege-separated token with PVEVMAdmin only: the missing privileges and their pveum fixes', async () => {
    await withSim('8.4', async (s, _config) => {
      const site = s.cluster('site-1');
      site.addUser('prov@pve', 'x');
      site.setAcl('/', 'prov@pve', 'Administrator');
      const secret = site.addToken('prov@pve', 'tok', { privsep: true });
      site.setAcl('/vms', 'prov@pve!tok', 'PVEVMAdmin');
      const tf = await file('tok.txt', `prov@pve!tok=${secret}\n`);
      const r = await doctor([
        '--endpoint',
        site.url,
        '--fingerprint',
        site.fingerprint,
        '--token-file',
        tf,
        '-o',
        'json',
      ]);
      assert.equal(r.code, 1, r.out + r.err);
      // The token's own ACL is on /vms only: no Sys.Audit on the node (the intersection with its user's).
      const nodes = check(r.json!, 'default', 'node ml110-01');
      assert.equal(nodes.status, 'fail');
      assert.match(nodes.detail, /Permission check failed \(\/nodes\/ml110-01, Sys\.Audit\)/);
      assert.match(nodes.fix!, /pveum acl modify \/nodes\/ml110-01 --roles PVEAuditor --tokens 'prov@pve!tok'/);
      const sdn = check(r.json!, 'default', 'privileges /sdn/zones/localnetwork');
      assert.equal(sdn.status, 'fail');
      assert.match(sdn.detail, /prov@pve!tok lacks SDN\.Use/);
      assert.match(sdn.fix!, /pveum acl modify \/sdn\/zones\/localnetwork --roles PVESDNUser --tokens 'prov@pve!tok'/);
      const ds = check(r.json!, 'default', 'privileges /storage');
      assert.match(ds.detail, /lacks Datastore\.AllocateSpace, Datastore\.Audit/);
      assert.equal(check(r.json!, 'default', 'privileges /nodes/ml110-01').status, 'fail');
      // With the missing roles granted, everything passes.
      site.setAcl('/', 'prov@pve!tok', 'PVEAuditor');
      site.setAcl('/storage', 'prov@pve!tok', 'PVEDatastoreUser');
      site.setAcl('/sdn/zones/localnetwork', 'prov@pve!tok', 'PVESDNUser');
      const fixed = await doctor([
        '--endpoint',
        site.url,
        '--fingerprint',
        site.fingerprint,
        '--token-file',
        tf,
        '-o',
        'json',
      ]);
      assert.equal(fixed.code, 0, fixed.out);
      assert.ok(!r.out.includes(secret));
    });
  });

  it('TLS: a wrong pinned fingerprint names the presented one; system CAs refuse the self-signed certificate', async () => {
    await withSim('8.4', async (s) => {
      const site = s.cluster('site-1');
      const tf = await file('tok2.txt', `root@pam!provider=${TOKEN_SECRET}`);
      const wrong = await doctor([
        '--endpoint',
        site.url,
        '--fingerprint',
        'AA:'.repeat(31) + 'AA',
        '--token-file',
        tf,
        '-o',
        'json',
      ]);
      assert.equal(wrong.code, 1);
      const e = check(wrong.json!, 'default', `endpoint ${site.url}`);
      assert.equal(e.status, 'fail');
      assert.match(e.detail, /fingerprint mismatch/);
      assert.ok(e.fix!.includes(site.fingerprint));
      const sys = await doctor(['--endpoint', site.url, '--token-file', tf, '-o', 'json']);
      assert.equal(sys.code, 1);
      const e2 = check(sys.json!, 'default', `endpoint ${site.url}`);
      assert.match(e2.detail, /not trusted/);
      assert.ok(e2.fix!.includes(`fingerprint: "${site.fingerprint}"`));
      const insecure = await doctor([
        '--endpoint',
        site.url,
        '--insecure-skip-tls-verify',
        '--token-file',
        tf,
        '-o',
        'json',
      ]);
      assert.equal(insecure.code, 0, 'a warning does not fail');
      assert.equal(check(insecure.json!, 'default', `endpoint ${site.url}`).status, 'warn');
    });
  });

  it('failover: a dead endpoint fails its check, the site still works through the other one', async () => {
    await withSim('8.4', async (s) => {
      const site = s.cluster('site-1');
      const dead = `https://127.0.0.1:${await deadPort()}`;
      const tf = await file('tok3.txt', `root@pam!provider=${TOKEN_SECRET}`);
      const r = await doctor([
        '--endpoint',
        dead,
        '--endpoint',
        site.url,
        '--fingerprint',
        site.fingerprint,
        '--token-file',
        tf,
        '-o',
        'json',
      ]);
      assert.equal(r.code, 1);
      const d = check(r.json!, 'default', `endpoint ${dead}`);
      assert.equal(d.status, 'fail');
      assert.match(d.detail, /connection refused/);
      assert.equal(check(r.json!, 'default', 'node ml110-01').status, 'ok');
    });
  });

  it("locks: a VM whose migration's worker died warns with what to check and the qm unlock; a lock a running backup holds does not", async () => {
    await withSim('8.4', async (s, config) => {
      const { c } = client(s);
      try {
        for (const vmid of [801, 802])
          await c.waitTask(await c.createVm(NODE, vmid, { name: `vm-${vmid}`, memory: 512 }));
      } finally {
        await c.close();
      }
      const site = s.cluster('site-1');
      const quiet = await doctor(['--config', config, '--site', 'site-1', '-o', 'json']);
      assert.equal(check(quiet.json!, 'site-1', 'locks').status, 'ok');
      // What a `qm migrate` worker killed in its phase 1 leaves: the lock, and no task behind it.
      site.state.vms.get(801)!.config.lock = 'migrate';
      // Another user's backup job, its vzdump running.
      const backup = site.addFault({ kind: 'lock', vmid: 802, lock: 'backup', flock: false });
      const r = await doctor(['--config', config, '--site', 'site-1', '-o', 'json']);
      site.removeFault(backup);
      assert.equal(r.code, 0, 'a warning: the provider can work');
      const locks = check(r.json!, 'site-1', 'locks');
      assert.equal(locks.status, 'warn');
      assert.match(locks.detail, /VM 801 \(vm-801\) on ml110-01 is locked \(migrate\) and no task holds it/);
      assert.doesNotMatch(locks.detail, /802/);
      assert.match(locks.fix!, /pvesm free VOLID/);
      assert.match(locks.fix!, /qm unlock 801` on node ml110-01/);
    });
  });

  it('an offline node fails with a fix', async () => {
    await withSim('8.4', async (s, config) => {
      const fid = s.cluster('site-2').addFault({ kind: 'node-offline', node: 'r630-01' });
      const r = await doctor(['--config', config, '--site', 'site-2', '-o', 'json']);
      assert.equal(r.code, 1);
      const n = check(r.json!, 'site-2', 'node r630-01');
      assert.equal(n.status, 'fail');
      assert.match(n.detail, /offline/);
      s.cluster('site-2').faults.remove(fid);
    });
  });

  it('quorum: a two-node cluster with a node down fails the quorum check with the fix; with both up it passes', async () => {
    const s = await startSimulator({
      topology: twoNodeTopology('doctor-quorum.yaml'),
      speed: 1000,
      ephemeralPorts: true,
      authFailDelayMs: 0,
      rootPassword: ROOT_PASSWORD,
      tokens: [`root@pam!provider=${TOKEN_SECRET}`],
    });
    try {
      const config = await file('pc-quorum.yaml', providerConfigYaml(s));
      const ok = await doctor(['--config', config, '--site', 'site-1', '-o', 'json']);
      assert.match(check(ok.json!, 'site-1', 'quorum').detail, /^cluster site-1 is quorate: 2 of 2 nodes online$/);
      s.cluster('site-1').addFault({ kind: 'node-crash', node: 'pve-b' });
      const r = await doctor(['--config', config, '--site', 'site-1', '-o', 'json']);
      assert.equal(r.code, 1);
      const q = check(r.json!, 'site-1', 'quorum');
      assert.equal(q.status, 'fail');
      assert.match(q.detail, /has no quorum: 1 of 2 nodes online \(down: pve-b\)\. \/etc\/pve is read-only/);
      assert.match(q.fix!, /bring pve-b back .*pvecm expected/);
    } finally {
      await s.close();
    }
  });

  it('usage errors exit 2; a broken config exits 1 naming file:line', async () => {
    assert.equal((await doctor([])).code, 2);
    assert.equal((await doctor(['--endpoint', 'https://x:8006'])).code, 2, 'no credentials');
    assert.equal((await doctor(['--config', join(dir, 'nope.yaml')])).code, 2);
    assert.equal((await doctor(['--fingerprint', 'xyz', '--endpoint', 'https://x:8006'])).code, 2);
    assert.equal((await doctor(['-o', 'xml', '--config', 'x'])).code, 2);
    assert.equal((await doctor(['--bogus'])).code, 2);
    const broken = await file(
      'broken.yaml',
      `apiVersion: proxmox.sankofa.io/v1alpha1
kind: ClusterProviderConfig
metadata: {name: x}
spec:
  credentials: {secretRef: {name: s, namespace: ns}}
  sites:
    - name: site-1
      endpoints: [https://pve:8006]
      tls: {fingerprint: "12:34"}
`,
    );
    const r = await doctor(['--config', broken]);
    assert.equal(r.code, 1);
    assert.match(r.out, /broken\.yaml:9: spec\.sites\[0\]\.tls\.fingerprint: must be a SHA-256/);
    const good = await file(
      'good.yaml',
      (await import('node:fs/promises')).readFile !== undefined
        ? (await (await import('node:fs/promises')).readFile(broken, 'utf8')).replace(
            '"12:34"',
            `"${'AB:'.repeat(31)}AB"`,
          )
        : '',
    );
    const u = await doctor(['--config', good, '--site', 'nope']);
    assert.equal(u.code, 2);
    assert.match(u.err, /--site nope: no such site .* \(sites: site-1\)/);
  });

  it('a config without its Secret: the credentials check says where to put it', async () => {
    await withSim('8.4', async (_s, config) => {
      const { readFile } = await import('node:fs/promises');
      const text = (await readFile(config, 'utf8'))
        .split('---\n')
        .find((d) => d.includes('kind: ClusterProviderConfig'))!;
      const noSecret = await file('nosecret.yaml', text);
      const r = await doctor(['--config', noSecret, '--site', 'site-1', '-o', 'json']);
      assert.equal(r.code, 1);
      const c = check(r.json!, 'site-1', 'credentials');
      assert.match(c.detail, /Secret crossplane-system\/proxmox-credentials is not in this file/);
      assert.match(c.fix!, /--secret-file/);
      assert.equal(check(r.json!, 'site-1', 'remaining checks').status, 'skip');
    });
  });
});

describe('doctor and the seed fleet', () => {
  it('examples/production against the default simulator topology: exit 0', async () => {
    await withSim('8.4', async (_s, config) => {
      const r = await doctor(['--config', config, '-f', 'examples/production', '-o', 'json']);
      assert.equal(
        r.code,
        0,
        JSON.stringify(
          r.json?.sites.flatMap((s) => s.checks.filter((c) => c.status === 'fail')),
          null,
          1,
        ),
      );
      assert.equal(check(r.json!, 'site-2', 'image local:import/ubuntu-22.04-cloud.qcow2 on r630-01').status, 'ok');
    });
  });
});

describe('provider-proxmox doctor (the real command line)', () => {
  async function cli(args: string[]): Promise<{ code: number | null; out: string; err: string }> {
    const { spawn } = await import('node:child_process');
    return new Promise((resolve, reject) => {
      const p = spawn(process.execPath, ['src/cli/main.ts', 'doctor', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      let err = '';
      p.stdout.on('data', (d) => {
        out += d;
      });
      p.stderr.on('data', (d) => {
        err += d;
      });
      p.on('error', reject);
      p.on('close', (code) => resolve({ code, out, err }));
    });
  }

  it('exit codes 0, 1 and 2', async () => {
    await withSim('8.4', async (_s, config) => {
      const ok = await cli(['--config', config, '--site', 'site-1']);
      assert.equal(ok.code, 0, ok.out + ok.err);
      assert.match(ok.out, /0 problems/);
      const { readFile } = await import('node:fs/promises');
      const bad = await file('cli-bad.yaml', (await readFile(config, 'utf8')).replace(TOKEN_SECRET, 'not-the-secret'));
      const fail = await cli(['--config', bad, '--site', 'site-1']);
      assert.equal(fail.code, 1, fail.out + fail.err);
      assert.ok(!fail.out.includes('not-the-secret') && !fail.err.includes('not-the-secret'));
      const usage = await cli([]);
      assert.equal(usage.code, 2);
      assert.match(usage.err, /give --config FILE or --endpoint URL/);
    });
  });
});

/** The 1-based line of the first line of `path` containing `text`. */
function lineOf(path: string, text: string): number {
  return (
    readFileSync(path, 'utf8')
      .split('\n')
      .findIndex((l) => l.includes(text)) + 1
  );
}
