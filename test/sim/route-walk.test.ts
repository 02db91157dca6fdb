/**
 * Walks the whole API of each release, as published in ../shared/pve-api, against a simulator
 * imitating that release:
 * - every method the simulator serves is called (the script below must reach each one) and its
 *   answer must be a 200 whose `data` has the release's return shape (test/sim/pve-api.ts);
 *   a task started on the way must end `OK` (or with warnings);
 * - every other method of the release answers exactly as PVE answers a method it does not know:
 *   501, reason and `message` `Method 'M /path' not implemented` (pve-http-server AnyEvent.pm
 *   rest handler, :2297 at HEAD), `data: null`.
 *
 * Known wire differences from the schema (../shared/pve-api/README.md) are listed in WIRE with
 * the reason; anything else that differs fails.
 */
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { ROUTES, type Simulator } from '../../src/sim/index.ts';
import { type HttpMethod, matchMethod, type Profile, SCHEMA_PROFILES } from '../../src/sim/schema/index.ts';
import { parseTopology } from '../../src/sim/topology.ts';
import { raw, startTestSim, waitTask } from '../helpers/sim.ts';
import { API_DIR, apiMethods, checkReturn, HAVE_API } from './pve-api.ts';

const N = 'ml110-01';
const N2 = 'ml110-02';
const TOPOLOGY = `
clusters:
  - name: walk
    listen: 127.0.0.1:0
    nodes:
      - name: ${N}
        cpus: 8
        memory: 64G
        storages:
          - { id: local, type: dir, content: [iso, vztmpl, backup, snippets, import, images], total: 100G,
              volumes: [{ name: import/img.qcow2, size: 1G }] }
          - { id: local-lvm, type: lvmthin, content: [images, rootdir], total: 500G }
        bridges:
          - { name: vmbr0, cidr: 192.0.2.10/24, dhcp: 192.0.2.100-192.0.2.199 }
        vms:
          - { vmid: 9000, name: tpl, template: true, disk: { storage: local-lvm, size: 1G }, cloudinit: true,
              agent: true, guestAgent: true }
          - { vmid: 100, name: web, disk: { storage: local-lvm, size: 2G }, agent: true, guestAgent: true,
              running: true }
          - { vmid: 101, name: db, disk: { storage: local-lvm, size: 2G } }
          - { vmid: 102, name: mover, disk: { storage: local-lvm, size: 1G } }
        containers:
          - { vmid: 200, hostname: ct1, cores: 2, memory: 1024, disk: { storage: local-lvm, size: 8G }, running: true }
      - name: ${N2}
        cpus: 8
        memory: 64G
        storages:
          - { id: local, type: dir, content: [iso, vztmpl, backup, snippets, import, images], total: 100G }
          - { id: local-lvm, type: lvmthin, content: [images, rootdir], total: 500G }
        bridges: [{ name: vmbr0 }]
  # the target of remote_migrate
  - name: walk-remote
    listen: 127.0.0.1:1
    nodes:
      - name: remote-01
        cpus: 8
        memory: 64G
        storages:
          - { id: local-lvm, type: lvmthin, content: [images, rootdir], total: 500G }
        bridges: [{ name: vmbr0 }]
`;

/**
 * Schema vs. wire: where real PVE answers other than its own schema says, per method, which
 * differences (matched against the checker's message) and why.
 */
const WIRE: Array<{ key: string; match: RegExp; profiles?: Profile[]; why: string }> = [
  {
    key: 'GET /cluster/nextid',
    match: /expected integer/,
    why: 'declared integer, PVE answers a JSON string ("100") (../shared/pve-api/README.md)',
  },
  {
    key: 'GET /cluster/resources',
    match: /\.(mem|disk): expected string, got number/,
    profiles: ['6.4'],
    why: "pve-manager 6.4 (be0bdb1a PVE/API2/Cluster.pm) declares mem and disk `type => 'string'`; the values are the RRD's numbers",
  },
  {
    key: 'GET /nodes/{node}/qemu/{vmid}/pending',
    match: /\.(value|pending): expected string, got number/,
    why: 'declared string; the values are the config as parse_vm_config typed them (check_type makes integers numbers)',
  },
];

function wireOk(p: Profile, key: string, err: string): boolean {
  return WIRE.some((w) => w.key === key && w.match.test(err) && (!w.profiles || w.profiles.includes(p)));
}

type Step = {
  method: HttpMethod;
  path: string;
  form?: Record<string, string>;
  /** A task whose exit status need not be OK (e.g. a stop of a finished task). */
  anyExit?: boolean;
  /** Runs instead of a plain request (multipart upload). */
  send?: (url: string) => Promise<Response>;
  /** The node whose task list has the step's task (default N). */
  node?: string;
};

const q = (s: string) => encodeURIComponent(s);

/** The script: every served route, in an order in which each call can succeed. */
function script(fileUrl: string, remoteUrl: string): Step[] {
  const v = `/nodes/${N}/qemu`;
  const a = `${v}/100/agent`;
  const s: Step[] = [
    { method: 'GET', path: '/' },
    { method: 'GET', path: '/version' },
    { method: 'GET', path: '/access' },
    { method: 'GET', path: '/access/ticket' },
    { method: 'GET', path: '/access/permissions' },
    { method: 'GET', path: '/access/users?full=1' },
    { method: 'POST', path: `/access/users/${q('root@pam')}/token/walk`, form: { comment: 'walk', privsep: '1' } },
    { method: 'GET', path: `/access/users/${q('root@pam')}/token` },
    { method: 'GET', path: `/access/users/${q('root@pam')}/token/walk` },
    { method: 'PUT', path: `/access/users/${q('root@pam')}/token/walk`, form: { comment: 'walked' } },
    { method: 'PUT', path: '/access/acl', form: { path: '/vms/101', tokens: 'root@pam!walk', roles: 'PVEAuditor' } },
    { method: 'GET', path: '/access/acl' },
    { method: 'GET', path: '/access/roles' },
    { method: 'POST', path: '/pools', form: { poolid: 'walk', comment: 'route walk' } },
    { method: 'PUT', path: '/pools/walk', form: { vms: '101', storage: 'local' } },
    { method: 'GET', path: '/pools' },
    { method: 'GET', path: '/pools/walk' },
    { method: 'PUT', path: '/pools/walk', form: { vms: '101', storage: 'local', delete: '1' } },
    { method: 'DELETE', path: '/pools/walk' },
    { method: 'GET', path: '/cluster' },
    { method: 'GET', path: '/cluster/nextid' },
    { method: 'GET', path: '/cluster/resources' },
    { method: 'GET', path: '/cluster/status' },
    { method: 'GET', path: '/cluster/tasks' },
    { method: 'GET', path: '/cluster/backup-info' },
    { method: 'GET', path: '/cluster/backup-info/not-backed-up' },
    { method: 'GET', path: '/storage' },
    { method: 'GET', path: '/storage/local' },
    { method: 'GET', path: '/nodes' },
    { method: 'GET', path: `/nodes/${N}` },
    { method: 'GET', path: `/nodes/${N}/status` },
    { method: 'GET', path: `/nodes/${N}/version` },
    { method: 'GET', path: `/nodes/${N}/network` },
    { method: 'GET', path: `/nodes/${N}/subscription` },
    { method: 'GET', path: `/nodes/${N}/replication` },
    { method: 'GET', path: `/nodes/${N}/rrddata?timeframe=hour` },
    { method: 'GET', path: `/nodes/${N}/lxc` },
    { method: 'GET', path: `/nodes/${N}/storage` },
    { method: 'GET', path: `/nodes/${N}/storage/local` },
    { method: 'GET', path: `/nodes/${N}/storage/local/status` },
    {
      method: 'POST',
      path: `/nodes/${N}/storage/local/upload`,
      send: (url) => {
        const fd = new FormData();
        fd.set('content', 'iso');
        fd.set('filename', new Blob([Buffer.from('ISO')]), 'walk.iso');
        return fetch(`${url}/api2/json/nodes/${N}/storage/local/upload`, {
          method: 'POST',
          body: fd,
          headers: { Authorization: `PVEAPIToken=root@pam!test=c0ffee00-0000-4000-8000-000000000001` },
        });
      },
    },
    {
      method: 'POST',
      path: `/nodes/${N}/storage/local/download-url`,
      form: { url: fileUrl, content: 'iso', filename: 'dl.iso' },
    },
    { method: 'GET', path: `/nodes/${N}/storage/local/content` },
    { method: 'DELETE', path: `/nodes/${N}/storage/local/content/${q('local:iso/walk.iso')}` },
    // VMs
    { method: 'GET', path: v },
    { method: 'GET', path: `${v}/100` },
    { method: 'GET', path: `${v}/100/status` },
    { method: 'GET', path: `${v}/100/status/current` },
    { method: 'GET', path: `${v}/100/config` },
    { method: 'GET', path: `${v}/100/pending` },
    { method: 'GET', path: `${v}/100/rrddata?timeframe=hour` },
    { method: 'GET', path: a },
    ...['get-fsinfo', 'get-host-name', 'get-memory-block-info', 'get-memory-blocks', 'get-osinfo', 'get-time']
      .concat(['get-timezone', 'get-users', 'get-vcpus', 'info', 'network-get-interfaces'])
      .map((c): Step => ({ method: 'GET', path: `${a}/${c}` })),
    ...['ping', 'fsfreeze-status', 'fsfreeze-freeze', 'fsfreeze-thaw', 'fstrim'].map(
      (c): Step => ({ method: 'POST', path: `${a}/${c}` }),
    ),
    { method: 'POST', path: `${a}/file-write`, form: { file: '/tmp/walk', content: 'hello' } },
    { method: 'GET', path: `${a}/file-read?file=${q('/tmp/walk')}` },
    { method: 'POST', path: `${a}/exec`, form: { command: 'true' } },
    { method: 'GET', path: `${a}/exec-status?pid=1000` },
    { method: 'POST', path: `${a}/set-user-password`, form: { username: 'root', password: 'walk-pw-1' } },
    { method: 'POST', path: `${a}/shutdown` },
    // create, config, resize, power
    {
      method: 'POST',
      path: v,
      form: { vmid: '300', name: 'walk', scsi0: 'local-lvm:1', net0: 'virtio,bridge=vmbr0', agent: '1' },
    },
    { method: 'POST', path: `${v}/300/config`, form: { cores: '2' } },
    { method: 'PUT', path: `${v}/300/config`, form: { description: 'walked' } },
    { method: 'PUT', path: `${v}/300/resize`, form: { disk: 'scsi0', size: '+1G' } },
    { method: 'POST', path: `${v}/300/status/start` },
    { method: 'POST', path: `${v}/300/status/reboot` },
    { method: 'POST', path: `${v}/300/status/shutdown` },
    { method: 'POST', path: `${v}/300/status/start` },
    // suspend to RAM and back, then to disk (hibernate) and back
    { method: 'POST', path: `${v}/300/status/suspend` },
    { method: 'POST', path: `${v}/300/status/resume` },
    { method: 'POST', path: `${v}/300/status/suspend`, form: { todisk: '1' } },
    { method: 'POST', path: `${v}/300/status/resume` },
    { method: 'POST', path: `${v}/300/status/stop` },
    { method: 'GET', path: `${v}/100/migrate` },
    { method: 'GET', path: `${v}/101/migrate` },
    // a backup, listed and deleted
    { method: 'POST', path: `/nodes/${N}/vzdump`, form: { vmid: '101', storage: 'local', compress: 'zstd' } },
    { method: 'GET', path: `/nodes/${N}/storage/local/content?content=backup` },
    {
      method: 'DELETE',
      path: `/nodes/${N}/storage/local/content/backup`,
      send: async (url) => {
        const list = await raw(url, 'GET', `/nodes/${N}/storage/local/content?content=backup`);
        const volid = (list.json as { data: Array<{ volid: string }> }).data[0]?.volid ?? 'local:backup/none';
        return fetch(`${url}/api2/json/nodes/${N}/storage/local/content/${q(volid)}`, {
          method: 'DELETE',
          headers: { Authorization: `PVEAPIToken=root@pam!test=c0ffee00-0000-4000-8000-000000000001` },
        });
      },
    },
    // snapshots
    { method: 'POST', path: `${v}/101/snapshot`, form: { snapname: 'walk', description: 'first' } },
    { method: 'GET', path: `${v}/101/snapshot` },
    { method: 'GET', path: `${v}/101/snapshot/walk` },
    { method: 'GET', path: `${v}/101/snapshot/walk/config` },
    { method: 'PUT', path: `${v}/101/snapshot/walk/config`, form: { description: 'again' } },
    { method: 'POST', path: `${v}/101/snapshot/walk/rollback` },
    { method: 'DELETE', path: `${v}/101/snapshot/walk` },
    // cloud-init: pending values, regenerate, the generated config
    { method: 'GET', path: `${v}/9000/cloudinit` },
    { method: 'PUT', path: `${v}/9000/cloudinit` },
    { method: 'GET', path: `${v}/9000/cloudinit/dump?type=user` },
    // a disk to another storage, the VM to the other node and back, then to the other cluster
    { method: 'POST', path: `${v}/102/move_disk`, form: { disk: 'scsi0', storage: 'local', delete: '1' } },
    { method: 'POST', path: `${v}/102/migrate`, form: { target: N2 } },
    { method: 'POST', path: `/nodes/${N2}/qemu/102/migrate`, form: { target: N }, node: N2 },
    {
      method: 'POST',
      path: `${v}/102/remote_migrate`,
      form: {
        'target-endpoint': `apitoken=PVEAPIToken=root@pam!test=c0ffee00-0000-4000-8000-000000000001,host=127.0.0.1,port=${new URL(remoteUrl).port}`,
        'target-storage': 'local-lvm',
        'target-bridge': 'vmbr0',
        delete: '1',
      },
    },
    // clone, template, destroy
    { method: 'POST', path: `${v}/9000/clone`, form: { newid: '301', name: 'walk-clone' } },
    { method: 'POST', path: `${v}/301/template` },
    { method: 'DELETE', path: `${v}/301` },
    { method: 'DELETE', path: `${v}/300` },
    { method: 'DELETE', path: `/access/users/${q('root@pam')}/token/walk` },
    // tasks (a finished task: its stop is a no-op)
    { method: 'GET', path: `/nodes/${N}/tasks` },
  ];
  return s;
}

async function call(
  url: string,
  step: Step,
): Promise<{ status: number; reason: string; body: Record<string, unknown> }> {
  if (step.send) {
    const r = await step.send(url);
    return { status: r.status, reason: r.statusText, body: (await r.json()) as Record<string, unknown> };
  }
  const opts = step.form ? { form: step.form } : {};
  const noAuth = step.path === '/access/ticket' && step.method === 'POST';
  const r = await raw(url, step.method, step.path, noAuth ? { ...opts, headers: { Authorization: null } } : opts);
  return { status: r.status, reason: r.reason, body: (r.json ?? {}) as Record<string, unknown> };
}

/** Fill a template's `{param}`s with values that never collide with a literal sibling. */
function concrete(path: string): string {
  const values: Record<string, string> = {
    node: N,
    vmid: '100',
    storage: 'local',
    snapname: 'walk',
    userid: 'root@pam',
  };
  return path.replace(/\{([\w-]+)\}/g, (_m, k: string) => values[k] ?? `walk-${k}`);
}

function served(p: Profile): Set<string> {
  const out = new Set<string>();
  for (const r of ROUTES) {
    const m = matchMethod(p, r.method, concrete(r.path));
    if (m && m.template === r.path) out.add(`${r.method} ${r.path}`);
  }
  return out;
}

describe('route walk: every served method has the schema shape, every other one answers 501', {
  skip: HAVE_API ? false : `PVE API descriptions not found at ${API_DIR}`,
}, () => {
  let files: Server;
  let fileUrl = '';
  before(async () => {
    files = createServer((_req, res) => res.end('ISO-DATA'));
    await new Promise<void>((r) => files.listen(0, '127.0.0.1', () => r()));
    fileUrl = `http://127.0.0.1:${(files.address() as AddressInfo).port}/dl.iso`;
  });
  after(() => new Promise<void>((r) => files.close(() => r())));

  it('ROUTES: no method twice, each one in the schema of some release', () => {
    const keys = ROUTES.map((r) => `${r.method} ${r.path}`);
    assert.equal(new Set(keys).size, keys.length);
    for (const r of ROUTES)
      assert.ok(
        SCHEMA_PROFILES.some((p) => matchMethod(p, r.method, concrete(r.path))?.template === r.path),
        `${r.method} ${r.path} is in no release's schema`,
      );
  });

  for (const p of SCHEMA_PROFILES) {
    describe(`PVE ${p}`, () => {
      let sim: Simulator;
      let url: string;
      before(async () => {
        sim = await startTestSim({ profile: p, topology: parseTopology(TOPOLOGY, 'walk.yaml') });
        url = sim.cluster('walk').url;
        sim.clock.advance(60_000); // VM 100's agent is up
      });
      after(() => sim.close());

      it('each served method answers 200 with the return shape', async () => {
        const returns = new Map(apiMethods(p).map((m) => [`${m.method} ${m.path}`, m.returns]));
        const reached = new Set<string>();
        const problems: string[] = [];
        for (const step of script(fileUrl, sim.cluster('walk-remote').url)) {
          const m = matchMethod(p, step.method, step.path.split('?')[0]!);
          if (!m) continue; // not in this release (e.g. backup-info before 7.x): covered by the 501 walk
          const key = `${step.method} ${m.template}`;
          reached.add(key);
          const r = await call(url, step);
          if (r.status !== 200) {
            problems.push(`${key}: ${r.status} ${r.reason}`);
            continue;
          }
          const errs = checkReturn(returns.get(key), r.body.data).filter((e) => !wireOk(p, key, e));
          problems.push(...errs.map((e) => `${key}: ${e}`));
          const upid = r.body.data;
          if (typeof upid === 'string' && upid.startsWith('UPID:')) {
            const t = await waitTask(url, step.node ?? N, upid);
            if (!step.anyExit && !/^(OK|WARNINGS: \d+)$/.test(String(t.exitstatus)))
              problems.push(`${key}: task ended ${t.exitstatus}`);
            // the task routes, on a real task
            for (const sub of ['', '/status', '/log']) {
              const tr = await raw(url, 'GET', `/nodes/${step.node ?? N}/tasks/${q(upid)}${sub}`);
              reached.add(`GET /nodes/{node}/tasks/{upid}${sub}`);
              const tkey = `GET /nodes/{node}/tasks/{upid}${sub}`;
              if (tr.status !== 200) problems.push(`${tkey}: ${tr.status}`);
              else
                problems.push(
                  ...checkReturn(returns.get(tkey), (tr.json as { data: unknown }).data).map((e) => `${tkey}: ${e}`),
                );
            }
            const d = await raw(url, 'DELETE', `/nodes/${step.node ?? N}/tasks/${q(upid)}`);
            reached.add('DELETE /nodes/{node}/tasks/{upid}');
            if (d.status !== 200) problems.push(`DELETE /nodes/{node}/tasks/{upid}: ${d.status}`);
          }
        }
        // POST /access/ticket: a login.
        const login = await raw(url, 'POST', '/access/ticket', {
          form: { username: 'root@pam', password: 'test-root-pw' },
          headers: { Authorization: null },
        });
        reached.add('POST /access/ticket');
        assert.equal(login.status, 200);
        problems.push(...checkReturn(returns.get('POST /access/ticket'), (login.json as { data: unknown }).data));
        assert.deepEqual(problems, []);
        const missing = [...served(p)].filter((k) => !reached.has(k));
        assert.deepEqual(missing, [], 'served methods the walk does not call');
      });

      it('every method not served answers 501 like an unknown method', async () => {
        const srv = served(p);
        const wrong: string[] = [];
        let n = 0;
        for (const m of apiMethods(p)) {
          if (srv.has(`${m.method} ${m.path}`)) continue;
          const path = concrete(m.path);
          const r = await raw(url, m.method, path);
          n++;
          const text = `Method '${m.method} ${path}' not implemented`;
          const body = r.json as { data?: unknown; message?: string } | undefined;
          const ok =
            r.status === 501 &&
            r.reason === text &&
            body?.data === null &&
            (p === '6.4' || p === '7.4' ? body.message === undefined : body?.message === text);
          if (!ok) wrong.push(`${m.method} ${m.path}: ${r.status} ${r.reason} ${r.text.slice(0, 80)}`);
        }
        assert.deepEqual(wrong, []);
        assert.ok(n > 300, `${n} methods not served`);
      });
    });
  }
});
