/**
 * The whole userData reaches the guest: rendered into a content-addressed snippet, uploaded over
 * SFTP to the simulated node (host key pinned), referenced with `cicustom user=`, and followed by
 * the simulated guest's cloud-init (packages, write_files, runcmd). A change is a new snippet and
 * waits for the next boot; the old file goes; a failing runcmd shows as CloudInitFailed; SSH
 * failures leave no VM behind.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { parseAllDocuments, stringify } from 'yaml';
import { externalName } from '../../src/engine/resource.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { providerConfigYaml } from '../../src/sim/provider-config.ts';
import { defaultTopology } from '../../src/sim/topology.ts';
import { ownershipMarker } from '../../src/vm/spec.ts';
import { raw, waitTask } from '../helpers/sim.ts';
import { cond, Engine, foreignVm, NODE1, SITE1, startSim, vm } from './harness.ts';

/** The default world with stock images: no guest has qemu-guest-agent until cloud-init installs it. */
function stockTopology() {
  const t = defaultTopology();
  for (const c of t.clusters)
    for (const n of c.nodes) {
      for (const s of n.storages) for (const v of s.volumes ?? []) v.guestAgent = false;
      for (const x of n.vms ?? []) x.guestAgent = false;
    }
  return t;
}

const USER_DATA = `#cloud-config
users:
  - name: ops
    groups: [sudo]
    shell: /bin/bash
packages:
  - qemu-guest-agent
  - jq
write_files:
  - path: /etc/motd
    content: managed by provider-proxmox
runcmd:
  - systemctl enable --now qemu-guest-agent
`;

async function snippets(sim: Simulator): Promise<string[]> {
  const c = sim.cluster(SITE1);
  const res = await raw(c.url, 'GET', `/nodes/${NODE1}/storage/local/content?content=snippets`);
  return ((res.json as { data: Array<{ volid: string }> }).data ?? []).map((v) => v.volid).sort();
}

describe('userData as a snippet over SSH', () => {
  let sim: Simulator;
  let eng: Engine;
  before(async () => {
    sim = await startSim({ topology: stockTopology() });
    eng = await new Engine(sim, { configYaml: () => providerConfigYaml(sim, { ssh: true }) }).start();
  });
  after(async () => {
    await eng.stop();
    await sim.close();
  });

  it('every key is applied: the agent comes from packages, the files and commands ran', async () => {
    const key = eng.apply(vm('full-ud', { userData: USER_DATA }));
    const r = await eng.waitReady(key);
    const a = r.status!.atProvider!;
    const vmid = a.vmId!;
    const c = sim.cluster(SITE1);
    assert.match(a.userDataSnippet ?? '', /^local:snippets\/provider-proxmox-full-ud-[0-9a-f]{8}-[0-9a-f]{12}\.yaml$/);
    assert.equal(c.state.vms.get(vmid)!.config.cicustom, `user=${a.userDataSnippet}`);
    assert.deepEqual(await snippets(sim), [a.userDataSnippet]);
    const guest = c.cloudInit(vmid)!;
    assert.equal(guest.status, 'done');
    assert.ok(guest.packages.jq, 'jq installed');
    assert.ok(guest.guestAgent, 'qemu-guest-agent installed by cloud-init');
    assert.equal(guest.hostname, 'full-ud');
    assert.match(guest.userData, /write_files/);
    assert.equal(a.ipSource, 'agent');
    assert.equal(cond(r, 'CloudInit')?.status, 'True');
    assert.equal(cond(r, 'CloudInit')?.reason, 'Done');
  });

  it('a changed userData is a new snippet: the old file goes, the change waits for a reboot, IfNeeded applies it', async () => {
    const key = 'default/full-ud';
    const before = eng.get(key).status!.atProvider!.userDataSnippet!;
    const changed = USER_DATA.replace('  - jq\n', '  - jq\n  - htop\n');
    eng.apply(vm('full-ud', { userData: changed }));
    const pending = await eng.waitFor(
      key,
      (x) => x.status?.atProvider?.userDataSnippet !== before && cond(x, 'PendingReboot')?.status === 'True',
      'new snippet, pending reboot',
    );
    const now = pending.status!.atProvider!.userDataSnippet!;
    assert.deepEqual(await snippets(sim), [now], 'the old snippet was removed');
    assert.ok(pending.status?.atProvider?.pendingChanges?.includes('cicustom'));
    const vmid = pending.status!.atProvider!.vmId!;
    assert.equal(sim.cluster(SITE1).cloudInit(vmid)!.packages.htop, undefined, 'not before the reboot');

    eng.apply(vm('full-ud', { userData: changed, rebootPolicy: 'IfNeeded' }));
    await eng.waitFor(
      key,
      (x) => cond(x, 'PendingReboot')?.status === 'False' && x.status?.atProvider?.step === 'Ready',
      'rebooted',
    );
    assert.ok(sim.cluster(SITE1).cloudInit(vmid)!.packages.htop, 'cloud-init ran the new user-data');
  });

  it('a failing runcmd: CloudInitFailed with the module, Ready False', async () => {
    const key = eng.apply(vm('bad-ud', { userData: `${USER_DATA}  - false\n` }));
    const r = await eng.waitFor(key, (x) => x.status?.atProvider?.step === 'CloudInitFailed', 'CloudInitFailed');
    assert.equal(cond(r, 'Ready')?.status, 'False');
    assert.equal(cond(r, 'Ready')?.reason, 'CloudInitFailed');
    assert.equal(cond(r, 'CloudInit')?.status, 'False');
    assert.match(cond(r, 'CloudInit')?.message ?? '', /scripts_user/);
    assert.equal(r.status?.atProvider?.cloudInit?.status, 'error');
  });

  it('deleting the resource removes its snippets', async () => {
    const names = await snippets(sim);
    assert.ok(
      names.some((n) => n.includes('provider-proxmox-bad-ud-')),
      names.join(', '),
    );
    eng.delete('default/bad-ud');
    await eng.waitGone('default/bad-ud');
    assert.ok(!(await snippets(sim)).some((n) => n.includes('provider-proxmox-bad-ud-')));
  });

  it("deleting the resource leaves a file that another state file's VM of the same name names (fault search F56)", async () => {
    const c = sim.cluster(SITE1);
    const r = await eng.waitReady(eng.apply(vm('twin-ud', { userData: USER_DATA })));
    const file = r.status!.atProvider!.userDataSnippet!;
    const own = c.state.vms.get(r.status!.atProvider!.vmId!)!;
    const installation = /installation=(\S+)/.exec(own.config.description ?? '')![1]!;
    // The other state file's resource of the same name: its own uid, the same file (same identity
    // and content), its VM on the same node.
    const other = { ...r, metadata: { ...r.metadata, uid: '0b5e6a0e-5f1c-4c3e-9d0e-0000000ff056' } };
    await foreignVm(
      c,
      871,
      {
        name: 'twin-ud',
        tags: 'provider-proxmox',
        description: ownershipMarker(other, { installation, vmid: 871 }),
        cicustom: `user=${file}`,
      },
      NODE1,
    );
    eng.delete('default/twin-ud');
    await eng.waitGone('default/twin-ud');
    assert.ok((await snippets(sim)).includes(file), 'the file VM 871 names is still there');
    const res = await raw(c.url, 'DELETE', `/nodes/${NODE1}/qemu/871`, {});
    assert.equal((await waitTask(c.url, NODE1, (res.json as { data: string }).data)).exitstatus, 'OK');
  });

  /**
   * A resource with a snippet, Ready; then its twin's create (the other state file's resource of
   * the same name: its own uid, the same file), sent and held in its worker by a stall fault.
   */
  async function twinCreating(name: string, vmid: number) {
    const c = sim.cluster(SITE1);
    const r = await eng.waitReady(eng.apply(vm(name, { userData: USER_DATA })));
    const file = r.status!.atProvider!.userDataSnippet!;
    const own = c.state.vms.get(r.status!.atProvider!.vmId!)!;
    const installation = /installation=(\S+)/.exec(own.config.description ?? '')![1]!;
    const other = { ...r, metadata: { ...r.metadata, uid: `0b5e6a0e-5f1c-4c3e-9d0e-000000${vmid}f56` } };
    const stall = c.addFault({ kind: 'task', type: 'qmcreate', id: String(vmid), action: 'stall' });
    const res = await raw(c.url, 'POST', `/nodes/${NODE1}/qemu`, {
      form: {
        vmid: String(vmid),
        name,
        tags: 'provider-proxmox',
        description: ownershipMarker(other, { installation, vmid }),
        cicustom: `user=${file}`,
        scsi0: 'local-lvm:1',
      },
    });
    assert.equal(res.status, 200, res.text);
    return { c, file, stall, res };
  }

  it("deleting the resource leaves its files while a create is in flight on its node: it may be the other state file's twin's (fault search F56)", async () => {
    // The twin's create, sent and held in its worker: a `lock: create` placeholder with no name.
    const { c, file, stall, res } = await twinCreating('twin-flight', 872);
    assert.equal(c.state.vms.get(872)?.config.lock, 'create');
    eng.delete('default/twin-flight');
    await eng.waitGone('default/twin-flight');
    assert.ok((await snippets(sim)).includes(file), 'the file the create in flight will name is still there');
    c.removeFault(stall);
    assert.equal((await waitTask(c.url, NODE1, (res.json as { data: string }).data)).exitstatus, 'OK');
    assert.equal(c.state.vms.get(872)?.config.cicustom, `user=${file}`);
    const gone = await raw(c.url, 'DELETE', `/nodes/${NODE1}/qemu/872`, {});
    assert.equal((await waitTask(c.url, NODE1, (gone.json as { data: string }).data)).exitstatus, 'OK');
  });

  it("deleting the resource leaves a file a twin's create that just ended names, listed as `VM <vmid>` until pvestatd's next tick (fault search F56)", async () => {
    const { c, file, stall, res } = await twinCreating('twin-ended', 873);
    const listed = async () =>
      (
        (await raw(c.url, 'GET', '/cluster/resources?type=vm')).json as { data: Array<Record<string, unknown>> }
      ).data.find((e) => e.vmid === 873);
    for (let i = 0; i < 2000 && (await listed())?.name !== 'VM 873'; i++) await new Promise((ok) => setTimeout(ok, 1));
    // pvestatd hangs; the create ends: config written, the list's name still the placeholder's.
    const hung = c.addFault({ kind: 'stats-stalled', node: NODE1 });
    c.removeFault(stall);
    assert.equal((await waitTask(c.url, NODE1, (res.json as { data: string }).data)).exitstatus, 'OK');
    assert.equal((await listed())?.name, 'VM 873');
    assert.equal((await listed())?.lock, undefined);
    eng.delete('default/twin-ended');
    await eng.waitGone('default/twin-ended');
    assert.ok((await snippets(sim)).includes(file), 'the file VM 873 names is still there');
    c.removeFault(hung);
    const gone = await raw(c.url, 'DELETE', `/nodes/${NODE1}/qemu/873`, {});
    assert.equal((await waitTask(c.url, NODE1, (gone.json as { data: string }).data)).exitstatus, 'OK');
  });

  it("deleting the resource removes its files while a create this process sent is in flight on the node: that placeholder is no twin's", async () => {
    const c = sim.cluster(SITE1);
    const r = await eng.waitReady(eng.apply(vm('own-flight-a', { userData: USER_DATA })));
    const file = r.status!.atProvider!.userDataSnippet!;
    const stall = c.addFault({ kind: 'task', type: 'qmcreate', action: 'stall' });
    const b = eng.apply(vm('own-flight-b', { userData: `${USER_DATA}  - echo b\n` }));
    const creating = await eng.waitFor(b, (x) => Boolean(x.status?.atProvider?.task), 'its create sent');
    assert.equal(c.state.vms.get(Number(externalName(creating)))?.config.lock, 'create');
    eng.delete('default/own-flight-a');
    await eng.waitGone('default/own-flight-a');
    assert.ok(!(await snippets(sim)).includes(file), 'the deleted resource left no file behind');
    c.removeFault(stall);
    await eng.waitReady(b);
    eng.delete('default/own-flight-b');
    await eng.waitGone('default/own-flight-b');
  });

  it('sshd refusing connections: retried, nothing created meanwhile; Ready once it is back', async () => {
    const c = sim.cluster(SITE1);
    const vms = c.state.vms.size;
    // sshd killed with its sessions: the provider's open connection goes too.
    const fault = c.addFault({ kind: 'ssh-refused', node: NODE1, dropSessions: true });
    await c.sshReady();
    const key = eng.apply(vm('ssh-down', { userData: USER_DATA }));
    const r = await eng.waitSynced(key, 'SnippetUploadFailed');
    assert.match(cond(r, 'Synced')?.message ?? '', /connection refused/);
    assert.equal(c.state.vms.size, vms, 'no VM without its snippet');
    c.removeFault(fault);
    await c.sshReady();
    await eng.waitReady(key, 60_000);
  });

  it('uploads share one connection per node; one open before sshd stopped still serves', async () => {
    const server = sim.cluster(SITE1).sshServers.get(NODE1)!;
    const before = server.accepted;
    const keys = ['share-a', 'share-b', 'share-c'].map((n) =>
      eng.apply(vm(n, { userData: `${USER_DATA}  - echo ${n}\n` })),
    );
    for (const k of keys) await eng.waitReady(k, 60_000);
    assert.ok(server.accepted - before <= 1, `${server.accepted - before} connections for 3 uploads`);
    // sshd stopped, its sessions left alone (systemd's KillMode=process for ssh.service).
    const c = sim.cluster(SITE1);
    const fault = c.addFault({ kind: 'ssh-refused', node: NODE1 });
    await c.sshReady();
    try {
      const key = eng.apply(vm('share-d', { userData: `${USER_DATA}  - echo d\n` }));
      await eng.waitReady(key, 60_000);
    } finally {
      c.removeFault(fault);
      await c.sshReady();
    }
    assert.ok((await snippets(sim)).some((n) => n.includes('provider-proxmox-share-d-')));
  });
});

describe('SSH host keys are pinned', () => {
  let sim: Simulator;
  let eng: Engine;
  before(async () => {
    sim = await startSim();
    // The ProviderConfig pins a key that no node has.
    const wrongKey = (yaml: string) => {
      const docs = parseAllDocuments(yaml).map((d) => d.toJS() as Record<string, unknown>);
      for (const d of docs)
        if (d.kind === 'ClusterProviderConfig')
          for (const s of (d.spec as { sites: Array<{ ssh?: { hostKeys: string[] } }> }).sites)
            if (s.ssh) s.ssh.hostKeys = [`SHA256:${'A'.repeat(43)}`];
      return docs.map((d) => stringify(d)).join('---\n');
    };
    eng = await new Engine(sim, {
      configYaml: () => wrongKey(providerConfigYaml(sim, { ssh: true })),
      secret: async () => 'not-used',
    }).start();
  });
  after(async () => {
    await eng.stop();
    await sim.close();
  });

  it('a node presenting another key gets nothing: SshHostKeyMismatch, permanent, no VM', async () => {
    const c = sim.cluster(SITE1);
    const vms = c.state.vms.size;
    const key = eng.apply(vm('pinned', { userData: USER_DATA }));
    const r = await eng.waitSynced(key, 'SshHostKeyMismatch');
    const msg = cond(r, 'Synced')?.message ?? '';
    assert.match(msg, /SHA256:/);
    assert.match(msg, /nothing was sent/);
    assert.equal(c.state.vms.size, vms);
    assert.deepEqual(await snippets(sim), []);
  });

  it('a password Secret with a snippet is refused before anything is created', async () => {
    const key = eng.apply(
      vm('pw', { userData: USER_DATA, cloudInit: { passwordSecretRef: { name: 'pw', key: 'password' } } }),
    );
    const r = await eng.waitSynced(key, 'PasswordInSnippetRefused');
    assert.match(cond(r, 'Synced')?.message ?? '', /hashed_passwd/);
  });
});
