/**
 * User data reaching the guest: a `#cloud-config` snippet uploaded over SFTP and named by
 * `cicustom user=` is what the guest's cloud-init runs at its first boot (packages, write_files,
 * runcmd), so qemu-guest-agent installed by it gives an agentless image a running agent; a
 * missing snippet fails the start with PVE's text (only then: the config accepts any volume id);
 * a failing runcmd or an unknown package shows as cloud-init's error in `cloud-init status`
 * (exit code 1); the `[special:cloudinit]` bookkeeping of GET/PUT .../cloudinit and the dump.
 *
 * Deterministic: the guest's boot and cloud-init's run are passed with the simulated clock.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { SimCluster, Simulator } from '../../src/sim/index.ts';
import type { Profile } from '../../src/sim/schema/index.ts';
import { parseTopology } from '../../src/sim/topology.ts';
import { assertError, data, finish, NODE, power, taskLines } from '../helpers/fidelity.ts';
import { raw, startTestSim } from '../helpers/sim.ts';
import { call, connect, type Session, upload } from './ssh-client.ts';

const TOPOLOGY = `
clusters:
  - name: site-1
    listen: 127.0.0.1:0
    nodes:
      - name: ${NODE}
        cpus: 8
        memory: 64G
        storages:
          - { id: local, type: dir, path: /var/lib/vz, content: [iso, snippets], total: 100G }
          - { id: plain, type: dir, path: /srv/plain, content: [iso], total: 10G }
          - { id: local-lvm, type: lvmthin, content: [images], total: 500G }
        bridges:
          - { name: vmbr0, cidr: 192.0.2.10/24, gateway: 192.0.2.1, dhcp: 192.0.2.100-192.0.2.199 }
        vms:
          - { vmid: 9001, name: stock-tpl, template: true, disk: { storage: local-lvm, size: 1G }, cloudinit: true,
              agent: true }
`;

const USER_DATA = `#cloud-config
hostname: web-1
timezone: Europe/Berlin
users:
  - default
  - { name: ops, sudo: ALL=(ALL) NOPASSWD:ALL }
ssh_authorized_keys: [ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMq test@example]
packages: [qemu-guest-agent, nginx]
write_files:
  - path: /etc/motd
    content: hello from cloud-init
  - path: /opt/app/config.json
    encoding: b64
    content: ${Buffer.from('{"port":8080}').toString('base64')}
    permissions: '0600'
runcmd:
  - echo provisioned > /var/tmp/done
  - [sh, -c, 'echo runcmd ran']
`;

const LATER = 600_000;

async function clone(url: string, newid: number): Promise<void> {
  const r = await raw(url, 'POST', `/nodes/${NODE}/qemu/9001/clone`, { form: { newid: String(newid) } });
  assert.equal(r.status, 200, r.reason);
  assert.equal(await finish(url, data<string>(r)), 'OK');
}

async function setConfig(url: string, vmid: number, form: Record<string, string>): Promise<void> {
  const r = await raw(url, 'PUT', `/nodes/${NODE}/qemu/${vmid}/config`, { form });
  assert.equal(r.status, 200, `${r.status} ${r.reason}`);
}

/** Run a command through the agent and wait for it (the clock passes its run time). */
async function exec(sim: Simulator, url: string, vmid: number, command: string[]) {
  // An array from PVE 8.0; a `string-alist` (NUL-separated) before.
  const arg = sim.profile === '7.4' || sim.profile === '6.4' ? command.join('\0') : command;
  const r = await raw(url, 'POST', `/nodes/${NODE}/qemu/${vmid}/agent/exec`, { json: { command: arg } });
  assert.equal(r.status, 200, `${r.status} ${r.reason}`);
  const pid = data<{ pid: number }>(r).pid;
  sim.clock.advance(10_000);
  const st = data<{ exited: number; exitcode: number; 'out-data'?: string; 'err-data'?: string }>(
    await raw(url, 'GET', `/nodes/${NODE}/qemu/${vmid}/agent/exec-status?pid=${pid}`),
  );
  assert.equal(st.exited, 1);
  return { exitcode: st.exitcode, out: st['out-data'] ?? '', err: st['err-data'] ?? '' };
}

function suite(profile: Profile, missingText: (volid: string, path: string) => string) {
  describe(`cloud-init user data in the guest (PVE ${profile})`, () => {
    let sim: Simulator;
    let site: SimCluster;
    let url: string;
    let ssh: Session;
    before(async () => {
      sim = await startTestSim({ topology: parseTopology(TOPOLOGY, 'ci.yaml'), profile });
      site = sim.cluster('site-1');
      url = site.url;
      ssh = await connect(site.sshNode(NODE), { privateKey: sim.credentials.sshPrivateKey });
      await upload(ssh.sftp, '/var/lib/vz/snippets/web.yaml', USER_DATA);
      await upload(
        ssh.sftp,
        '/var/lib/vz/snippets/fails.yaml',
        '#cloud-config\nruncmd:\n  - echo before\n  - "false"\n',
      );
      await upload(ssh.sftp, '/var/lib/vz/snippets/nopkg.yaml', '#cloud-config\npackages: [jq, no-such-tool]\n');
    });
    after(async () => {
      ssh.end();
      await sim.close();
    });

    it('cicustom user=: packages, write_files and runcmd run; the agent answers once installed', async () => {
      await clone(url, 200);
      await setConfig(url, 200, { cicustom: 'user=local:snippets/web.yaml' });
      assert.equal(await power(url, 200, 'start'), 'OK');
      sim.clock.advance(LATER);
      assert.equal((await raw(url, 'POST', `/nodes/${NODE}/qemu/200/agent/ping`)).status, 200);
      assert.deepEqual(await exec(sim, url, 200, ['cat', '/etc/motd']), {
        exitcode: 0,
        out: 'hello from cloud-init',
        err: '',
      });
      assert.equal((await exec(sim, url, 200, ['cat', '/opt/app/config.json'])).out, '{"port":8080}');
      assert.equal((await exec(sim, url, 200, ['cat', '/var/tmp/done'])).out, 'provisioned\n');
      const fr = data<{ content: string }>(
        await raw(url, 'GET', `/nodes/${NODE}/qemu/200/agent/file-read?file=/etc/motd`),
      );
      assert.equal(fr.content, 'hello from cloud-init');
      const dpkg = await exec(sim, url, 200, ['dpkg-query', '-W', 'qemu-guest-agent', 'nginx']);
      assert.equal(dpkg.exitcode, 0);
      assert.match(dpkg.out, /^qemu-guest-agent\t\S+\nnginx\t\S+\n$/);
      const missing = await exec(sim, url, 200, ['dpkg', '-s', 'apache2']);
      assert.equal(missing.exitcode, 1);
      assert.match(missing.err, /^dpkg-query: package 'apache2' is not installed/);
      const st = await exec(sim, url, 200, ['cloud-init', 'status', '--format', 'json']);
      assert.equal(st.exitcode, 0);
      const json = JSON.parse(st.out) as Record<string, unknown>;
      assert.equal(json.status, 'done');
      assert.equal(json.extended_status, 'done');
      assert.deepEqual(json.errors, []);
      assert.equal(json.datasource, 'nocloud');
      assert.equal(json.detail, 'DataSourceNoCloud [seed=/dev/sr0][dsmode=net]');
      assert.equal(json.boot_status_code, 'enabled-by-generator');
      assert.match(String(json.last_update), /^Thu, 01 Jan 1970 00:00:\d\d \+0000$/);
      assert.deepEqual(Object.keys(json), [
        'boot_status_code',
        'datasource',
        'detail',
        'errors',
        'extended_status',
        'init',
        'init-local',
        'last_update',
        'modules-config',
        'modules-final',
        'recoverable_errors',
        'stage',
        'status',
      ]);
      assert.match(st.out, /"start": \d+\.\d+/);
      const log = (await exec(sim, url, 200, ['cat', '/var/log/cloud-init-output.log'])).out;
      assert.match(log, /running 'modules:final'/);
      assert.match(log, /Setting up qemu-guest-agent/);
      assert.match(log, /runcmd ran\n/);
      assert.equal((await exec(sim, url, 200, ['hostname'])).out, 'web-1\n');
      const view = site.cloudInit(200)!;
      assert.equal(view.status, 'done');
      assert.equal(view.userData, USER_DATA);
      assert.deepEqual(view.record.users, ['ubuntu', 'ops']);
      assert.equal(view.record.timezone, 'Europe/Berlin');
      assert.equal(view.record.sshAuthorizedKeys.length, 1);
      assert.equal(view.guestAgent, true);
      // The same image, user data without the agent: `not running` for ever.
      await clone(url, 206);
      await setConfig(url, 206, { cicustom: 'user=local:snippets/nopkg.yaml' });
      assert.equal(await power(url, 206, 'start'), 'OK');
      sim.clock.advance(LATER);
      assertError(await raw(url, 'POST', `/nodes/${NODE}/qemu/206/agent/ping`), 500, 'QEMU guest agent is not running');
      assert.equal(site.cloudInit(206)!.status, 'error');
      assert.equal(await power(url, 206, 'stop'), 'OK');
    });

    it('a reboot with the same drive: no per-instance module runs again; the agent stays', async () => {
      assert.equal(await power(url, 200, 'reboot'), 'OK');
      sim.clock.advance(LATER);
      const view = site.cloudInit(200)!;
      assert.equal(view.newInstance, false);
      assert.equal(view.status, 'done');
      assert.equal((await raw(url, 'POST', `/nodes/${NODE}/qemu/200/agent/ping`)).status, 200);
      assert.equal(await power(url, 200, 'stop'), 'OK');
    });

    it('a missing snippet fails the start with PVE text; the config took it without a check', async () => {
      await clone(url, 201);
      await setConfig(url, 201, { cicustom: 'user=local:snippets/missing.yaml' });
      const r = await raw(url, 'POST', `/nodes/${NODE}/qemu/201/status/start`);
      const upid = data<string>(r);
      const want = missingText('local:snippets/missing.yaml', '/var/lib/vz/snippets/missing.yaml');
      assert.equal(await finish(url, upid), want);
      assert.ok((await taskLines(url, upid)).includes(`TASK ERROR: ${want}`));
      // A volume that is no snippet: refused at start too.
      await setConfig(url, 201, { cicustom: 'user=local:iso/none.iso' });
      assert.equal(await power(url, 201, 'start'), 'local:iso/none.iso is not in the snippets directory');
      // A file in a storage without `snippets` content is still read (parse_volname does not check).
      await call((cb) => ssh.sftp.mkdir('/srv/plain/snippets', cb));
      await upload(ssh.sftp, '/srv/plain/snippets/plain.yaml', '#cloud-config\nhostname: from-plain\n');
      await setConfig(url, 201, { cicustom: 'user=plain:snippets/plain.yaml' });
      assert.equal(await power(url, 201, 'start'), 'OK');
      sim.clock.advance(LATER);
      assert.equal(site.cloudInit(201)!.hostname, 'from-plain');
      assert.equal(await power(url, 201, 'stop'), 'OK');
    });

    it('a failing runcmd: status error, scripts_user, exit code 1', async () => {
      await clone(url, 202);
      await setConfig(url, 202, { cicustom: 'user=local:snippets/fails.yaml' });
      site.setGuestAgent(202, true);
      assert.equal(await power(url, 202, 'start'), 'OK');
      sim.clock.advance(LATER);
      const st = await exec(sim, url, 202, ['cloud-init', 'status', '--format', 'json']);
      assert.equal(st.exitcode, 1);
      const json = JSON.parse(st.out) as {
        status: string;
        extended_status: string;
        errors: string[];
        recoverable_errors: Record<string, string[]>;
      };
      assert.equal(json.status, 'error');
      assert.equal(json.extended_status, 'error - done');
      assert.deepEqual(json.errors, [
        "('scripts_user', RuntimeError('Runparts: 1 failures (runcmd) in 1 attempted commands'))",
      ]);
      assert.ok(
        json.recoverable_errors.WARNING!.includes(
          'Failed to run module scripts_user (scripts in /var/lib/cloud/instance/scripts)',
        ),
      );
      const long = await exec(sim, url, 202, ['cloud-init', 'status', '--long']);
      assert.equal(long.exitcode, 1);
      assert.match(
        long.out,
        /^status: error\nextended_status: error - done\nboot_status_code: enabled-by-generator\nlast_update: .*\ndetail: DataSourceNoCloud \[seed=\/dev\/sr0\]\[dsmode=net\]\nerrors:\n\t- \('scripts_user', /,
      );
      assert.equal((await exec(sim, url, 202, ['cloud-init', 'status'])).out, 'status: error\n');
      assert.equal(await power(url, 202, 'stop'), 'OK');
    });

    it('a package the archive lacks: package_update_upgrade_install fails, the others are installed', async () => {
      await clone(url, 203);
      await setConfig(url, 203, { cicustom: 'user=local:snippets/nopkg.yaml' });
      site.setGuestAgent(203, true);
      assert.equal(await power(url, 203, 'start'), 'OK');
      sim.clock.advance(LATER);
      const view = site.cloudInit(203)!;
      assert.equal(view.status, 'error');
      assert.deepEqual(view.errors, [
        `('package_update_upgrade_install', PackageInstallerError("Failed to install the following packages: {'no-such-tool'}. See associated package manager logs for more details."))`,
      ]);
      assert.equal((await exec(sim, url, 203, ['dpkg-query', '-W', 'jq'])).exitcode, 0);
      assert.equal(await power(url, 203, 'stop'), 'OK');
    });

    it('PVE generated user data: the dump; a new user data is a new instance at the next boot', async () => {
      await clone(url, 204);
      site.setGuestAgent(204, true);
      await setConfig(url, 204, { ciuser: 'ops', name: 'gen-1' });
      const dump = data<string>(await raw(url, 'GET', `/nodes/${NODE}/qemu/204/cloudinit/dump?type=user`));
      assert.match(dump, /^#cloud-config\nhostname: gen-1\nmanage_etc_hosts: true\nfqdn: gen-1\nuser: ops\n/);
      const meta = data<string>(await raw(url, 'GET', `/nodes/${NODE}/qemu/204/cloudinit/dump?type=meta`));
      assert.match(meta, /^instance-id: [0-9a-f]{40}\n$/);
      assert.equal(await power(url, 204, 'start'), 'OK');
      sim.clock.advance(LATER);
      const first = site.cloudInit(204)!;
      assert.equal(first.instanceId, meta.slice('instance-id: '.length).trim());
      assert.equal(first.hostname, 'gen-1');
      assert.deepEqual(first.record.users, ['ops']);
      assert.equal(await power(url, 204, 'stop'), 'OK');
      await setConfig(url, 204, { ciuser: 'admin' });
      assert.equal(await power(url, 204, 'start'), 'OK');
      sim.clock.advance(LATER);
      assert.equal(site.cloudInit(204)!.newInstance, true);
      assert.deepEqual(site.cloudInit(204)!.record.users, ['admin']);
    });
  });
}

suite('9.2', (volid) => `can't find file '${volid}'`);
suite('7.4', (_volid, path) => `can't open '${path}' - No such file or directory`);
