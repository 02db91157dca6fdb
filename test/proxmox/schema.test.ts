/**
 * Every request the client can build, checked against the published PVE API schema of each
 * supported version: the method and path exist, the client's path label is PVE's template, and
 * the parameters (names, types, formats, ranges) pass PVE's own validation rules.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { buildPath, type PveRequest, wireParams } from '../../src/proxmox/requests.ts';
import * as ClusterRequests from '../../src/proxmox/requests-cluster.ts';
import * as QemuRequests from '../../src/proxmox/requests-qemu.ts';
import { matchMethod, type Profile, SCHEMA_PROFILES, validateParams } from '../../src/sim/schema/index.ts';

/** Every request builder, by name: the requests outside a VM and a VM's own. */
const R = { ...ClusterRequests, ...QemuRequests };

const UPID = 'UPID:pve:0000A1B2:0012C3D4:6650F00D:qmcreate:100:root@pam!provider:';
const N = 'pve';

interface Sample {
  name: string;
  req: PveRequest<unknown>;
  /** First profile that has this call (default: all). */
  since?: Profile;
}

const ORDER: Profile[] = ['6.4', '7.4', '8.4', '9.2'];
const atLeast = (p: Profile, since: Profile | undefined) => !since || ORDER.indexOf(p) >= ORDER.indexOf(since);

const BUILDERS_COVERED = new Set<string>();
function s(name: keyof typeof R, req: PveRequest<unknown>, since?: Profile, label?: string): Sample {
  BUILDERS_COVERED.add(name);
  return { name: label ?? name, req, ...(since ? { since } : {}) };
}

const fullConfig: QemuRequests.QemuConfigInput = {
  name: 'web-01',
  description: 'managed by provider-proxmox\nuid: 1234',
  tags: 'prod;web',
  cores: 2,
  sockets: 1,
  memory: 4096,
  cpu: 'host',
  ostype: 'l26',
  scsihw: 'virtio-scsi-single',
  scsi0: 'local-lvm:32,discard=on,ssd=1',
  ide2: 'local-lvm:cloudinit',
  net0: 'virtio,bridge=vmbr0,tag=20,firewall=1,mtu=1500',
  net1: 'virtio=BC:24:11:00:00:01,bridge=vmbr1',
  ipconfig0: 'ip=10.0.0.5/24,gw=10.0.0.1',
  ipconfig1: 'ip=dhcp',
  ciuser: 'ubuntu',
  cipassword: 'hunter2hunter2',
  sshkeys: 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample user@host\nssh-rsa AAAAB3Nza user2@host',
  nameserver: '1.1.1.1 8.8.8.8',
  searchdomain: 'example.com',
  agent: 'enabled=1',
  onboot: true,
  startup: 'order=2,up=30',
  boot: 'order=scsi0;net0',
  serial0: 'socket',
  vga: 'serial0',
};

const SAMPLES: Sample[] = [
  s('version', R.version()),
  s('login', R.login('root@pam', 'secret-password')),
  s('permissions', R.permissions()),
  s('permissions', R.permissions({ path: '/vms', userid: 'alice@pve' }), undefined, 'permissions(path,userid)'),
  s('nextId', R.nextId()),
  s('nextId', R.nextId(123), undefined, 'nextId(vmid)'),
  s('clusterResources', R.clusterResources()),
  s('clusterResources', R.clusterResources('vm'), undefined, 'clusterResources(vm)'),
  s('clusterResources', R.clusterResources('storage'), undefined, 'clusterResources(storage)'),
  s('clusterStatus', R.clusterStatus()),
  s('listPools', R.listPools()),
  s('getPool', R.getPool('tenant-a')),
  s('createPool', R.createPool('tenant-a', 'for tenant A')),
  s('listNodes', R.listNodes()),
  s('nodeStatus', R.nodeStatus(N)),
  s('nodeNetwork', R.nodeNetwork(N, 'any_bridge')),
  s('nodeNetwork', R.nodeNetwork(N), undefined, 'nodeNetwork()'),
  s('nodeStorages', R.nodeStorages(N, { content: 'images', enabled: true })),
  s('nodeStorages', R.nodeStorages(N, { storage: 'local-lvm' }), undefined, 'nodeStorages(storage)'),
  s('storageStatus', R.storageStatus(N, 'local-lvm')),
  s('storageContent', R.storageContent(N, 'local', { content: 'iso' })),
  s('storageContent', R.storageContent(N, 'local-lvm', { vmid: 100 }), undefined, 'storageContent(vmid)'),
  s('listVms', R.listVms(N)),
  s('createVm', R.createVm(N, 100, fullConfig, { pool: 'tenant-a', start: true, storage: 'local-lvm' })),
  s(
    'createVm',
    R.createVm(N, 101, { name: 'imported', scsi0: 'local-lvm:0,import-from=local:iso/ubuntu.img' }),
    '7.4',
    'createVm(import-from)',
  ),
  s('createVm', R.createVm(N, 102, { name: 'ha', memory: 2048 }, { haManaged: true }), '9.2', 'createVm(ha-managed)'),
  s(
    'cloneVm',
    R.cloneVm(N, 9000, 100, { name: 'web-01', full: true, storage: 'local-lvm', pool: 'tenant-a', target: 'pve2' }),
  ),
  s(
    'cloneVm',
    R.cloneVm(N, 9000, 100, { full: false, description: 'x', format: 'qcow2', snapname: 'base' }),
    undefined,
    'cloneVm(linked)',
  ),
  s('vmConfig', R.vmConfig(N, 100)),
  s('vmConfig', R.vmConfig(N, 100, { current: true }), undefined, 'vmConfig(current)'),
  s(
    'updateVmConfigAsync',
    R.updateVmConfigAsync(N, 100, {
      set: { cores: 4, memory: 8192, net0: 'virtio,bridge=vmbr0', sshkeys: 'ssh-ed25519 AAAA a@b', tags: 'a;b' },
      delete: ['net1', 'ide2'],
      revert: ['cores'],
      digest: 'a'.repeat(40),
    }),
  ),
  s('updateVmConfigSync', R.updateVmConfigSync(N, 100, { set: { description: 'x', onboot: false }, skiplock: true })),
  s('unlockVm', R.unlockVm(N, 100)),
  s('vmPending', R.vmPending(N, 100)),
  s('vmSnapshots', R.vmSnapshots(N, 100)),
  s('snapshotConfig', R.snapshotConfig(N, 100, 'before-upgrade')),
  s('resizeDisk', R.resizeDisk(N, 100, 'scsi0', '+8G', { digest: 'b'.repeat(40), skiplock: true })),
  s('resizeDisk', R.resizeDisk(N, 100, 'scsi0', '64G'), undefined, 'resizeDisk(absolute)'),
  s('vmStatus', R.vmStatus(N, 100)),
  s('vmPower', R.vmPower(N, 100, 'start', { skiplock: true }), undefined, 'vmPower(start)'),
  s('vmPower', R.vmPower(N, 100, 'stop', { timeout: 30, skiplock: true }), undefined, 'vmPower(stop)'),
  s(
    'vmPower',
    R.vmPower(N, 100, 'shutdown', { timeout: 120, forceStop: true, skiplock: true }),
    undefined,
    'vmPower(shutdown)',
  ),
  s('vmPower', R.vmPower(N, 100, 'reboot', { timeout: 60 }), undefined, 'vmPower(reboot)'),
  s('deleteVm', R.deleteVm(N, 100, { purge: true, skiplock: true })),
  s(
    'deleteVm',
    R.deleteVm(N, 100, { destroyUnreferencedDisks: true }),
    undefined,
    'deleteVm(destroy-unreferenced-disks)',
  ),
  s('templateVm', R.templateVm(N, 100, { disk: 'scsi0' })),
  s('agentNetworkInterfaces', R.agentNetworkInterfaces(N, 100)),
  s('agentPing', R.agentPing(N, 100)),
  s('agentExec', R.agentExec(N, 100, ['cloud-init', 'status', '--format', 'json'], true)),
  s('agentExec', R.agentExec(N, 100, ['cloud-init', 'status', '--long'], false), undefined, 'agentExec(string)'),
  s('agentExecStatus', R.agentExecStatus(N, 100, 4242)),
  s('cloudInitPending', R.cloudInitPending(N, 100), '7.4'),
  s('storageConfig', R.storageConfig('local')),
  s('migratePrecondition', R.migratePrecondition(N, 100, 'r630-01')),
  s(
    'migrateVm',
    R.migrateVm(N, 100, { target: 'r630-01', online: true, withLocalDisks: true, targetStorage: 'ceph-fs' }),
  ),
  s('moveDisk', R.moveDisk(N, 100, { disk: 'scsi0', storage: 'ceph-fs', delete: true, digest: 'c'.repeat(40) })),
  s(
    'remoteMigrateVm',
    R.remoteMigrateVm(N, 100, {
      targetEndpoint: `apitoken=PVEAPIToken=root@pam!t=${'d'.repeat(36)},host=192.0.2.20,fingerprint=${'AB:'.repeat(31)}AB`,
      targetStorage: 'local-lvm:ceph-fs',
      targetBridge: 'vmbr0:vmbr0',
      targetVmid: 100,
      online: true,
      delete: true,
    }),
    '7.4',
  ),
  s(
    'listTasks',
    R.listTasks(N, {
      source: 'active',
      vmid: 100,
      typefilter: 'qmcreate',
      userfilter: 'root',
      errors: true,
      start: 0,
      limit: 50,
    }),
  ),
  s(
    'downloadUrl',
    R.downloadUrl(N, 'local', {
      url: 'https://cloud-images.ubuntu.com/jammy/current/jammy-server-cloudimg-amd64.img',
      content: 'iso',
      filename: 'jammy.img',
      checksum: { algorithm: 'sha256', value: 'a'.repeat(64) },
    }),
    '7.4',
  ),
  s(
    'downloadUrl',
    R.downloadUrl(N, 'local', {
      url: 'https://cloud-images.ubuntu.com/jammy/current/jammy-server-cloudimg-amd64.img',
      content: 'import',
      filename: 'jammy.qcow2',
      checksum: { algorithm: 'sha512', value: 'b'.repeat(128) },
    }),
    '8.4',
    'downloadUrl (import content)',
  ),
  s('deleteVolume', R.deleteVolume(N, 'local', 'local:import/jammy.qcow2')),
  s('taskStatus', R.taskStatus(N, UPID)),
  s('taskLog', R.taskLog(N, UPID, { start: 0, limit: 500 })),
  s('stopTask', R.stopTask(N, UPID)),
];

/** Helpers exported by requests-cluster.ts and requests-qemu.ts that are not request builders. */
const HELPERS = new Set(['decodeConfig']);

describe('request builders vs. the PVE API schema', () => {
  it('every builder is exercised by a sample', () => {
    const builders = Object.entries(R)
      .filter(([k, v]) => typeof v === 'function' && !HELPERS.has(k))
      .map(([k]) => k);
    const missing = builders.filter((b) => !BUILDERS_COVERED.has(b));
    assert.deepEqual(missing, [], `add samples for: ${missing.join(', ')}`);
  });

  for (const profile of SCHEMA_PROFILES) {
    describe(`PVE ${profile}`, () => {
      for (const sample of SAMPLES) {
        const applicable = atLeast(profile, sample.since);
        it(`${sample.name}${applicable ? '' : ' (absent: newer call)'}`, () => {
          const { req } = sample;
          const path = buildPath(req.path, req.pathParams);
          const m = matchMethod(profile, req.method, path);
          if (!applicable) {
            // It must really be missing there (or its parameters must fail) - else lower `since`.
            const ok =
              m && !validateParams(m.schema, { ...Object.fromEntries(wireParams(req.params)), ...m.pathParams }).errors;
            assert.ok(!ok, `${sample.name} is valid in ${profile}: lower its 'since'`);
            return;
          }
          assert.ok(m, `${req.method} ${path} does not exist in PVE ${profile}`);
          assert.equal(m.template, req.path, 'the client labels the request with PVE path template');
          const raw: Record<string, unknown> = { ...Object.fromEntries(wireParams(req.params)), ...m.pathParams };
          const v = validateParams(m.schema, raw);
          assert.deepEqual(v.errors ?? {}, {}, `PVE ${profile} rejects ${req.method} ${req.path}`);
          if (req.method !== 'GET')
            assert.equal(req.idempotent, sample.name === 'login' || sample.name === 'agentPing');
        });
      }
    });
  }

  it('no version has an importdisk REST method (the client never builds one)', () => {
    for (const p of SCHEMA_PROFILES) assert.equal(matchMethod(p, 'POST', '/nodes/pve/qemu/100/importdisk'), undefined);
    for (const sample of SAMPLES) assert.ok(!sample.req.path.includes('importdisk'));
  });

  it('import-from does not exist on 6.4', () => {
    const m = matchMethod('6.4', 'POST', '/nodes/pve/qemu')!;
    const v = validateParams(m.schema, { node: 'pve', vmid: '100', scsi0: 'local-lvm:0,import-from=local:iso/x.img' });
    assert.ok(v.errors?.scsi0, 'PVE 6.4 rejects import-from');
  });
});

describe('wire encoding', () => {
  it('booleans are 0/1, lists are comma-joined, undefined is dropped', () => {
    const w = wireParams({ a: true, b: false, c: ['x', 'y'], d: undefined, e: 3 });
    assert.deepEqual(w, [
      ['a', '1'],
      ['b', '0'],
      ['c', 'x,y'],
      ['e', '3'],
    ]);
  });

  it('sshkeys are percent-encoded with %20 (never +), then form-encoded again', () => {
    const w = Object.fromEntries(wireParams({ sshkeys: 'ssh-ed25519 AAAA+/= me@host\nssh-rsa BBB' }));
    assert.equal(w.sshkeys, 'ssh-ed25519%20AAAA%2B%2F%3D%20me%40host%0Assh-rsa%20BBB');
    assert.match(w.sshkeys!, /^[-%a-zA-Z0-9_.!~*'()]*$/, "PVE's urlencoded format");
    const form = new URLSearchParams(wireParams({ sshkeys: 'a b' })).toString();
    assert.equal(form, 'sshkeys=a%2520b');
  });

  it('path parameters are encoded segment by segment (UPIDs contain : and !)', () => {
    assert.equal(
      buildPath('/nodes/{node}/tasks/{upid}/status', { node: 'pve', upid: UPID }),
      `/nodes/pve/tasks/${encodeURIComponent(UPID)}/status`,
    );
    assert.throws(() => buildPath('/nodes/{node}', {}), /path parameter 'node'/);
  });

  it('secret parameters are marked sensitive', () => {
    assert.deepEqual(R.login('u@pam', 'p').sensitive, ['password']);
    assert.ok(R.createVm('n', 100, { cipassword: 'x' }).sensitive?.includes('cipassword'));
    assert.ok(R.updateVmConfigAsync('n', 100, { set: { cipassword: 'x' } }).sensitive?.includes('cipassword'));
  });

  it('nextid decodes the JSON string PVE answers', () => {
    assert.equal(R.nextId().decode('100'), 100);
    assert.throws(() => R.nextId().decode('abc'));
  });

  it('config values are decoded to strings, digest apart', () => {
    assert.deepEqual(R.decodeConfig({ cores: 2, memory: '2048', digest: 'abc', x: null }), {
      digest: 'abc',
      values: { cores: '2', memory: '2048' },
    });
  });
});
