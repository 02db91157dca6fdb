/**
 * A real third-party client, the npm package `proxmox-api` (GPL-3.0, a devDependency used only by
 * tests, never imported from src/), drives the simulator unchanged over HTTPS: ticket login and
 * API-token auth, create with cloud-init, start, the guest agent's address, stop, destroy, and a
 * clone of the template VM 9000.
 *
 * TLS: the package calls undici's `fetch` and accepts a `fetch` option (ProxmoxEngineOptions.fetch).
 * We pass undici's fetch with a dispatcher that trusts exactly the simulator's self-signed
 * certificate, pinned by the SHA-256 fingerprint the simulator prints. Verification stays on;
 * NODE_TLS_REJECT_UNAUTHORIZED is not touched.
 */
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { connect } from 'node:tls';
import proxmoxApi, { type Proxmox, type ProxmoxEngineOptions } from 'proxmox-api';
import { Agent, fetch as undiciFetch } from 'undici';
import type { SimCluster, Simulator } from '../../src/sim/index.ts';
import { ROOT_PASSWORD, startTestSim, TOKEN_SECRET } from '../helpers/sim.ts';

const NODE = 'ml110-01';
const SSH_KEYS = [
  'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx3b3JsZC1zaW11bGF0b3Ita2V5LTAx ops@sankofa',
  'ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC+test/key+with=padding== ci@sankofa',
].join('\n');

/** The server's certificate, read once without trusting it, then pinned by its fingerprint. */
async function pinnedCertificate(url: string, fingerprint: string): Promise<string> {
  const u = new URL(url);
  const der = await new Promise<Buffer>((resolve, reject) => {
    const s = connect({ host: u.hostname, port: Number(u.port), rejectUnauthorized: false }, () => {
      const raw = s.getPeerCertificate().raw;
      s.end();
      resolve(raw);
    });
    s.on('error', reject);
  });
  const cert = new X509Certificate(der);
  assert.equal(cert.fingerprint256, fingerprint, 'certificate fingerprint differs from the one the simulator printed');
  return cert.toString();
}

type Options = Omit<ProxmoxEngineOptions, 'fetch'>;

function client(
  cluster: SimCluster,
  ca: string,
  auth: { password: string } | { tokenID: string; tokenSecret: string },
) {
  const u = new URL(cluster.url);
  const dispatcher = new Agent({ connect: { ca } });
  const opts = { host: u.hostname, port: Number(u.port), schema: 'https', ...auth } as Options;
  // undici 7's fetch has the same signature as the package's undici 6 `FetchInterface`.
  const fetch = ((url: string | URL, init?: Record<string, unknown>) =>
    undiciFetch(url, { ...init, dispatcher })) as unknown as ProxmoxEngineOptions['fetch'];
  return { api: proxmoxApi({ ...opts, fetch } as ProxmoxEngineOptions), close: () => dispatcher.close() };
}

async function waitTask(api: Proxmox.Api, node: string, upid: string): Promise<string | undefined> {
  for (let i = 0; i < 10_000; i++) {
    const s = await api.nodes.$(node).tasks.$(upid).status.$get();
    if (s.status === 'stopped') return s.exitstatus;
    await new Promise((r) => setTimeout(r, 1));
  }
  throw new Error(`task ${upid} did not finish`);
}

async function agentIpv4(api: Proxmox.Api, node: string, vmid: number): Promise<{ ip: string; mac: string }> {
  let last: unknown;
  for (let i = 0; i < 10_000; i++) {
    try {
      const r = (await api.nodes.$(node).qemu.$(vmid).agent['network-get-interfaces'].$get()) as {
        result: Array<{
          name: string;
          'hardware-address': string;
          'ip-addresses'?: Array<{ 'ip-address': string; 'ip-address-type': string }>;
        }>;
      };
      const nic = r.result.find((x) => x.name !== 'lo');
      const ip = nic?.['ip-addresses']?.find((a) => a['ip-address-type'] === 'ipv4')?.['ip-address'];
      if (nic && ip) return { ip, mac: nic['hardware-address'] };
    } catch (e) {
      last = e;
      // Until the guest has booted: 500 `QEMU guest agent is not running`.
      assert.match(String((e as Error).message), /QEMU guest agent is not running/);
    }
    await new Promise((r) => setTimeout(r, 1));
  }
  throw new Error(`no agent address for VM ${vmid}: ${String(last)}`);
}

describe('third-party client (npm proxmox-api) over HTTPS', () => {
  let sim: Simulator;
  let ca: string;
  before(async () => {
    sim = await startTestSim({ http: false, profile: '8.4' });
    ca = await pinnedCertificate(sim.cluster('site-1').url, sim.cluster('site-1').fingerprint);
  });
  after(() => sim.close());

  const cycle = async (api: Proxmox.Api, vmid: number, expectedUser: string) => {
    const version = await api.version.$get();
    assert.equal(version.release, '8.4');
    assert.equal(await api.cluster.nextid.$get({ vmid }), String(vmid));

    // Create from the cloud image in the `import` content (PVE >= 8.3), with a cloud-init drive.
    const upid = await api.nodes.$(NODE).qemu.$post({
      vmid,
      name: `tp-${vmid}`,
      cores: 1,
      memory: '1024',
      scsihw: 'virtio-scsi-single',
      scsi0: 'local-lvm:0,import-from=local:import/ubuntu-22.04-cloud.qcow2',
      ide2: 'local-lvm:cloudinit',
      boot: 'order=scsi0',
      net0: 'virtio,bridge=vmbr0',
      agent: '1',
      ciuser: 'ops',
      ipconfig0: 'ip=dhcp',
      // `urlencoded` format: percent-encode first (the package form-encodes again).
      sshkeys: encodeURIComponent(SSH_KEYS),
      tags: 'Phoenix;tp',
    });
    assert.match(upid, new RegExp(`^UPID:${NODE}:[0-9A-F]{8}:[0-9A-F]{8}:[0-9A-F]{8}:qmcreate:${vmid}:`));
    const status = await api.nodes.$(NODE).tasks.$(upid).status.$get();
    assert.equal(status.type, 'qmcreate');
    assert.equal(status.user, expectedUser.split('!')[0]);
    assert.equal(await waitTask(api, NODE, upid), 'OK');

    const config = await api.nodes.$(NODE).qemu.$(vmid).config.$get();
    assert.equal(config.scsi0, `local-lvm:vm-${vmid}-disk-0,size=2252M`);
    assert.equal(config.ide2, `local-lvm:vm-${vmid}-cloudinit,media=cdrom`);
    assert.equal(config.ipconfig0, 'ip=dhcp');
    assert.equal(config.sshkeys, encodeURIComponent(SSH_KEYS), 'sshkeys are stored and returned still encoded');
    assert.equal(decodeURIComponent(String(config.sshkeys)), SSH_KEYS);
    // PVE 8.4's create stores tags verbatim (normalised on create from qemu-server 9.1.16, fix #7480).
    assert.equal(config.tags, 'Phoenix;tp');
    assert.equal(config.lock, undefined);
    assert.match(String(config.digest), /^[0-9a-f]{40}$/);

    assert.equal(await waitTask(api, NODE, await api.nodes.$(NODE).qemu.$(vmid).status.start.$post()), 'OK');
    const { ip, mac } = await agentIpv4(api, NODE, vmid);
    assert.match(ip, /^198\.51\.100\.\d+$/);
    assert.equal(
      mac,
      String(config.net0)
        .match(/virtio=([0-9A-F:]+)/)?.[1]
        ?.toLowerCase(),
    );
    const current = await api.nodes.$(NODE).qemu.$(vmid).status.current.$get();
    assert.equal(current.status, 'running');

    assert.equal(await waitTask(api, NODE, await api.nodes.$(NODE).qemu.$(vmid).status.stop.$post()), 'OK');
    assert.equal((await api.nodes.$(NODE).qemu.$(vmid).status.current.$get()).status, 'stopped');

    assert.equal(await waitTask(api, NODE, await api.nodes.$(NODE).qemu.$(vmid).$delete({ purge: true })), 'OK');
    await assert.rejects(
      api.nodes.$(NODE).qemu.$(vmid).config.$get(),
      new RegExp(`500 Configuration file 'nodes/${NODE}/qemu-server/${vmid}.conf' does not exist`),
    );
    const left = await api.nodes.$(NODE).storage.$('local-lvm').content.$get({ vmid });
    assert.deepEqual(left, []);
  };

  const cloneTemplate = async (api: Proxmox.Api, newid: number) => {
    const tpl = await api.nodes.$(NODE).qemu.$(9000).config.$get();
    assert.equal(tpl.template, 1);
    const upid = await api.nodes
      .$(NODE)
      .qemu.$(9000)
      .clone.$post({ newid, name: `clone-${newid}` });
    // The clone task's id is the source VM.
    assert.match(upid, /:qmclone:9000:/);
    assert.equal(await waitTask(api, NODE, upid), 'OK');
    const config = await api.nodes.$(NODE).qemu.$(newid).config.$get();
    assert.equal(config.name, `clone-${newid}`);
    assert.equal(config.template, undefined);
    // A template clones linked by default.
    assert.match(String(config.scsi0), new RegExp(`^local-lvm:base-9000-disk-0/vm-${newid}-disk-0,`));
    assert.match(String(config.ide2), new RegExp(`^local-lvm:vm-${newid}-cloudinit,media=cdrom`));
    assert.notEqual(config.net0, tpl.net0, 'a clone gets new MACs');
    assert.equal(await waitTask(api, NODE, await api.nodes.$(NODE).qemu.$(newid).status.start.$post()), 'OK');
    assert.match((await agentIpv4(api, NODE, newid)).ip, /^198\.51\.100\.\d+$/);
    assert.equal(await waitTask(api, NODE, await api.nodes.$(NODE).qemu.$(newid).status.stop.$post()), 'OK');
    assert.equal(await waitTask(api, NODE, await api.nodes.$(NODE).qemu.$(newid).$delete()), 'OK');
  };

  it('ticket login (user + password): create with cloud-init, start, agent IP, stop, destroy, clone', async () => {
    const { api, close } = client(sim.cluster('site-1'), ca, { username: 'root@pam', password: ROOT_PASSWORD } as {
      password: string;
    });
    try {
      const nodes = await api.nodes.$get();
      assert.deepEqual(
        nodes.map((n) => n.node),
        [NODE],
      );
      await cycle(api, 120, 'root@pam');
      await cloneTemplate(api, 121);
    } finally {
      await close();
    }
  });

  it('API token: the same cycle, tasks owned by the token', async () => {
    const { api, close } = client(sim.cluster('site-1'), ca, {
      tokenID: 'root@pam!test',
      tokenSecret: TOKEN_SECRET,
    });
    try {
      await cycle(api, 130, 'root@pam!test');
      await cloneTemplate(api, 131);
      const tasks = await api.nodes.$(NODE).tasks.$get({ vmid: 130 });
      assert.ok(tasks.length >= 4);
      for (const t of tasks) assert.equal(t.tokenid, 'test');
    } finally {
      await close();
    }
  });

  it('a wrong password fails the login with 401', async () => {
    const { api, close } = client(sim.cluster('site-1'), ca, { username: 'root@pam', password: 'wrong' } as {
      password: string;
    });
    try {
      await assert.rejects(api.nodes.$get(), (e: Error) => {
        assert.match(String((e.cause as Error | undefined)?.message), /login failed with 401: authentication failure/);
        return true;
      });
    } finally {
      await close();
    }
  });
});
