/**
 * The built-in topology is the seed fleet's, as a client sees it through the API; a broken
 * topology file is reported with file:line:col and the field path.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Simulator } from '../../src/sim/index.ts';
import { defaultTopology, loadTopologyFile, parseTopology, TopologyError } from '../../src/sim/topology.ts';
import { type RawResponse, raw, startTestSim, waitTask } from '../helpers/sim.ts';

const GiB = 1024 ** 3;
const MiB = 1024 ** 2;

function data<T>(r: RawResponse): T {
  assert.equal(r.status, 200, `${r.status} ${r.reason}`);
  return (r.json as { data: T }).data;
}

interface NodeEntry {
  node: string;
  status: string;
  maxcpu: number;
  maxmem: number;
  mem: number;
}
interface StorageEntry {
  storage: string;
  type: string;
  content: string;
  total: number;
  avail: number;
  shared: number;
}

describe('default topology (the seed fleet) through the API', () => {
  let sim: Simulator;
  before(async () => {
    sim = await startTestSim();
  });
  after(() => sim.close());

  it('has two sites on 127.0.0.1:8006 and :8007, one node each', () => {
    const t = defaultTopology();
    assert.deepEqual(
      t.clusters.map((c) => [c.name, c.listen, c.nodes.map((n) => n.name)]),
      [
        ['site-1', '127.0.0.1:8006', ['ml110-01']],
        ['site-2', '127.0.0.1:8007', ['r630-01']],
      ],
    );
    assert.deepEqual(
      sim.clusters.map((c) => [c.name, c.nodes]),
      [
        ['site-1', ['ml110-01']],
        ['site-2', ['r630-01']],
      ],
    );
  });

  it('site-1/ml110-01: 5 cpus, 270 GiB memory with 9.2 GiB used', async () => {
    const url = sim.cluster('site-1').url;
    const nodes = data<NodeEntry[]>(await raw(url, 'GET', '/nodes'));
    assert.equal(nodes.length, 1);
    const n = nodes[0]!;
    assert.equal(n.node, 'ml110-01');
    assert.equal(n.status, 'online');
    assert.equal(n.maxcpu, 5);
    assert.equal(n.maxmem, 270 * GiB);
    assert.equal(n.mem, Math.round(9.2 * GiB));
    const status = data<{ cpuinfo: { cpus: number }; memory: { total: number; used: number; free: number } }>(
      await raw(url, 'GET', '/nodes/ml110-01/status'),
    );
    assert.equal(status.cpuinfo.cpus, 5);
    assert.deepEqual(status.memory, {
      total: 270 * GiB,
      used: Math.round(9.2 * GiB),
      free: 270 * GiB - Math.round(9.2 * GiB),
    });
    const res = data<Array<{ id: string; maxcpu?: number; maxmem?: number }>>(
      await raw(url, 'GET', '/cluster/resources?type=node'),
    );
    assert.deepEqual(
      res.map((r) => [r.id, r.maxcpu, r.maxmem]),
      [['node/ml110-01', 5, 270 * GiB]],
    );
  });

  it('site-2/r630-01: 50 cpus, local-lvm of 171.3 GiB, ceph-fs takes VM images', async () => {
    const url = sim.cluster('site-2').url;
    const n = data<NodeEntry[]>(await raw(url, 'GET', '/nodes'))[0]!;
    assert.equal(n.node, 'r630-01');
    assert.equal(n.maxcpu, 50);
    const storages = data<StorageEntry[]>(await raw(url, 'GET', '/nodes/r630-01/storage'));
    const lvm = storages.find((s) => s.storage === 'local-lvm')!;
    assert.equal(lvm.total, Math.round(171.3 * GiB));
    // Template 9000's base disk (2252 MiB) and cloud-init volume (4 MiB) live there.
    assert.equal(lvm.avail, Math.round(171.3 * GiB) - 2256 * MiB);
    const ceph = storages.find((s) => s.storage === 'ceph-fs')!;
    assert.ok(ceph.content.split(',').includes('images'), ceph.content);
    assert.equal(ceph.shared, 1);
    assert.ok(ceph.total > lvm.total * 10, 'ceph-fs is the large storage');
    const forImages = data<StorageEntry[]>(await raw(url, 'GET', '/nodes/r630-01/storage?content=images'));
    assert.deepEqual(forImages.map((s) => s.storage).sort(), ['ceph-fs', 'local-lvm']);

    // A VM disk is created on ceph-fs.
    const create = await raw(url, 'POST', '/nodes/r630-01/qemu', {
      form: { vmid: '300', name: 'on-ceph', scsi0: 'ceph-fs:4', net0: 'virtio,bridge=vmbr0' },
    });
    assert.equal((await waitTask(url, 'r630-01', data<string>(create))).exitstatus, 'OK');
    const cfg = data<Record<string, unknown>>(await raw(url, 'GET', '/nodes/r630-01/qemu/300/config'));
    assert.equal(cfg.scsi0, 'ceph-fs:vm-300-disk-0,size=4G');
    const content = data<Array<{ volid: string; size: number }>>(
      await raw(url, 'GET', '/nodes/r630-01/storage/ceph-fs/content?vmid=300'),
    );
    assert.deepEqual(
      content.map((v) => [v.volid, v.size]),
      [['ceph-fs:vm-300-disk-0', 4 * GiB]],
    );
  });

  for (const [site, node, net] of [
    ['site-1', 'ml110-01', '198.51.100.'],
    ['site-2', 'r630-01', '203.0.113.'],
  ] as const) {
    it(`${site}: local holds iso/ubuntu-22.04-cloud.img, bridge vmbr0, template 9000 with cloud-init`, async () => {
      const url = sim.cluster(site).url;
      const iso = data<Array<{ volid: string; content: string; format: string; size: number }>>(
        await raw(url, 'GET', `/nodes/${node}/storage/local/content?content=iso`),
      );
      assert.deepEqual(
        iso.map(({ volid, content, format, size }) => ({ volid, content, format, size })),
        [{ volid: 'local:iso/ubuntu-22.04-cloud.img', content: 'iso', format: 'iso', size: 2252 * MiB }],
      );
      const local = data<StorageEntry[]>(await raw(url, 'GET', `/nodes/${node}/storage`)).find(
        (s) => s.storage === 'local',
      )!;
      assert.equal(local.type, 'dir');
      assert.ok(local.content.split(',').includes('iso'));

      const bridges = data<Array<{ iface: string; type: string; active: number; cidr?: string }>>(
        await raw(url, 'GET', `/nodes/${node}/network?type=any_bridge`),
      );
      assert.deepEqual(
        bridges.map((b) => [b.iface, b.type, b.active]),
        [['vmbr0', 'bridge', 1]],
      );
      assert.ok(bridges[0]?.cidr?.startsWith(net));

      const tpl = data<Record<string, unknown>>(await raw(url, 'GET', `/nodes/${node}/qemu/9000/config`));
      assert.equal(tpl.template, 1);
      assert.equal(tpl.ide2, 'local-lvm:vm-9000-cloudinit,media=cdrom');
      assert.equal(tpl.ipconfig0, 'ip=dhcp');
      assert.equal(tpl.agent, '1');
      assert.equal(tpl.scsi0, 'local-lvm:base-9000-disk-0,size=2252M');
      assert.match(String(tpl.net0), /^virtio=[0-9A-F:]{17},bridge=vmbr0$/);
      const status = data<{ template?: number; status: string }>(
        await raw(url, 'GET', `/nodes/${node}/qemu/9000/status/current`),
      );
      assert.deepEqual([status.template, status.status], [1, 'stopped']);
      const vms = data<Array<{ vmid: number; template?: number }>>(await raw(url, 'GET', '/cluster/resources?type=vm'));
      assert.equal(vms.find((v) => v.vmid === 9000)?.template, 1);
    });
  }
});

describe('topology errors', () => {
  const broken = [
    'clusters:', //                                                         1
    '  - name: a', //                                                       2
    '    listen: 127.0.0.1:18006', //                                       3
    '    profile: 8.1', //                                                  4
    '    nodes:', //                                                        5
    '      - name: n1', //                                                  6
    '        cpus: many', //                                                7
    '        memory: 16Q', //                                               8
    '        storages:', //                                                 9
    '          - id: local-lvm', //                                         10
    '            type: lvmthin', //                                         11
    '            content: [images, pictures]', //                           12
    '            total: 100G', //                                           13
    '        bridges:', //                                                  14
    '          - name: vmbr0', //                                           15
    '            dhcp: 10.0.0.10', //                                       16
    '        vms:', //                                                      17
    '          - vmid: 9000', //                                            18
    '            name: tpl', //                                             19
    '            disk: { storage: nope, size: 2G }', //                     20
    '  - name: a', //                                                       21
    '    listen: 127.0.0.1:18006', //                                       22
    '    nodes:', //                                                        23
    '      - name: n2', //                                                  24
    '        cpus: 2', //                                                   25
    '        memory: 2G', //                                                26
    '        storages: []', //                                              27
    '        bridges: []', //                                               28
    '',
  ].join('\n');

  function problems(text: string, file: string): string[] {
    try {
      parseTopology(text, file);
    } catch (e) {
      assert.ok(e instanceof TopologyError, String(e));
      return e.message.split('\n');
    }
    assert.fail('expected a TopologyError');
  }

  it('names file:line:col and the field path of every problem', () => {
    const got = problems(broken, 'fleet.yaml');
    const expected: Array<[string, RegExp]> = [
      ['fleet.yaml:4:14: clusters.0.profile: ', /expected one of 6\.4, 7\.4, 8\.4, 9\.2, got 8\.1/],
      ['fleet.yaml:7:15: clusters.0.nodes.0.cpus: ', /expected a positive integer, got "many"/],
      ['fleet.yaml:8:17: clusters.0.nodes.0.memory: ', /expected a size/],
      ['fleet.yaml:12:31: clusters.0.nodes.0.storages.0.content.1: ', /unknown content type 'pictures'/],
      ['fleet.yaml:16:19: clusters.0.nodes.0.bridges.0.dhcp: ', /FIRST-LAST/],
      ['fleet.yaml:20:30: clusters.0.nodes.0.vms.0.disk.storage: ', /no storage 'nope' on node 'n1'/],
      ['fleet.yaml:21:11: clusters.1.name: ', /cluster name 'a' is used twice/],
      ['fleet.yaml:22:13: clusters.1.listen: ', /address 127\.0\.0\.1:18006 is used by another cluster/],
    ];
    for (const [prefix, re] of expected) {
      const line = got.find((l) => l.startsWith(prefix));
      assert.ok(line, `no problem reported as '${prefix}…' in:\n${got.join('\n')}`);
      assert.match(line.slice(prefix.length), re);
    }
    assert.equal(got.length, expected.length, got.join('\n'));
    // Sorted by position in the file.
    const pos = got.map((l) => l.split(':').slice(1, 3).map(Number) as [number, number]);
    assert.deepEqual(
      pos,
      [...pos].sort((a, b) => a[0] - b[0] || a[1] - b[1]),
    );
  });

  it('a field that is missing is placed at the mapping that lacks it, and named as required', () => {
    const got = problems(
      'clusters:\n  - name: a\n    listen: 127.0.0.1:18010\n    nodes:\n      - cpus: 4\n        memory: 8G\n',
      'missing.yaml',
    );
    const name = got.find((l) => l.includes('clusters.0.nodes.0.name'));
    assert.ok(name, got.join('\n'));
    assert.match(name, /^missing\.yaml:5:9: clusters\.0\.nodes\.0\.name: required: /);
    assert.ok(!got.some((l) => /got undefined|:1:1:/.test(l)), got.join('\n'));
  });

  it('reports YAML syntax errors with file:line:col', () => {
    const got = problems('clusters:\n  - name: a\n    listen: [127.0.0.1:1\n', 'syntax.yaml');
    assert.match(got[0] ?? '', /^syntax\.yaml:\d+:\d+: /);
  });

  it('checks references and duplicates: VM ids, node names, disk storages that hold no images', () => {
    const got = problems(
      [
        'clusters:',
        '  - name: a',
        '    listen: 127.0.0.1:18006',
        '    nodes:',
        '      - name: n1',
        '        cpus: 2',
        '        memory: 2G',
        '        storages: [{ id: local, type: dir, content: [iso], total: 10G }]',
        '        bridges: [{ name: vmbr0 }]',
        '        vms:',
        '          - { vmid: 100, name: x, disk: { storage: local, size: 1G } }',
        '      - name: n1',
        '        cpus: 2',
        '        memory: 2G',
        '        storages: []',
        '        bridges: []',
        '        vms: [{ vmid: 100, name: y }]',
        '',
      ].join('\n'),
      'refs.yaml',
    );
    assert.ok(
      got.some((l) =>
        /^refs\.yaml:11:\d+: clusters\.0\.nodes\.0\.vms\.0\.disk\.storage: .*does not hold VM images/.test(l),
      ),
      got.join('\n'),
    );
    assert.ok(
      got.some((l) => /^refs\.yaml:12:\d+: clusters\.0\.nodes\.1\.name: node name 'n1' is used twice/.test(l)),
      got.join('\n'),
    );
    assert.ok(
      got.some((l) => /^refs\.yaml:17:\d+: clusters\.0\.nodes\.1\.vms\.0\.vmid: VM 100 is defined twice/.test(l)),
      got.join('\n'),
    );
  });

  it('loadTopologyFile names the real file', () => {
    const dir = mkdtempSync(join(tmpdir(), 'sim-topology-'));
    try {
      const file = join(dir, 'fleet.yaml');
      writeFileSync(file, broken);
      assert.throws(
        () => loadTopologyFile(file),
        (e: Error) => e instanceof TopologyError && e.message.startsWith(`${file}:4:14: clusters.0.profile: `),
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
