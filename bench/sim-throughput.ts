/**
 * bench/sim-throughput: requests per second the simulator serves.
 *
 * The simulator runs in its own process (`provider-proxmox sim --http`), the load generator here
 * (undici pool, keep-alive). Two workloads:
 *   - get:    `GET /version` with token auth (the cheapest authenticated call);
 *   - create: `POST /nodes/{node}/qemu` (a new 1 GiB disk) + `GET .../tasks/{upid}/status` until it
 *             stops, then `DELETE` the VM and wait for that task too: full create/destroy cycles.
 * Prints one JSON object. Target (issue 2): >= 3000 simple GETs/s on the 2-core machine.
 *
 * Usage: node bench/sim-throughput.ts [--duration-ms 5000] [--connections 16]
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';

const { values } = parseArgs({
  options: { 'duration-ms': { type: 'string', default: '5000' }, connections: { type: 'string', default: '16' } },
});
const durationMs = Number(values['duration-ms']);
const connections = Number(values.connections);
const TOKEN = 'root@pam!bench=0b0b0b0b-0000-4000-8000-000000000000';

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

const port = await freePort();
const dir = mkdtempSync(join(tmpdir(), 'sim-bench-'));
const topo = join(dir, 'topology.yaml');
writeFileSync(
  topo,
  `clusters:
  - name: bench
    listen: 127.0.0.1:${port}
    nodes:
      - name: pve
        cpus: 64
        memory: 512G
        storages:
          - { id: local-lvm, type: lvmthin, content: [images, rootdir], total: 100T, bandwidth: 100000 }
        bridges:
          - { name: vmbr0, cidr: 198.51.100.2/24, dhcp: 198.51.100.100-198.51.100.250 }
`,
);
const child = spawn(
  process.execPath,
  [
    ...(process.env.SIM_PROF ? ['--cpu-prof', '--cpu-prof-dir', process.env.SIM_PROF] : []),
    new URL('../src/cli/main.ts', import.meta.url).pathname,
    'sim',
    '--http',
    '--topology',
    topo,
    '--speed',
    '1000',
    '--token',
    TOKEN,
  ],
  { stdio: ['ignore', 'pipe', 'inherit'] },
);
await new Promise<void>((resolve, reject) => {
  let out = '';
  child.stdout.on('data', (d: Buffer) => {
    out += d.toString();
    if (out.includes('Press Ctrl-C')) resolve();
  });
  child.once('exit', (code) => reject(new Error(`simulator exited early (${code})`)));
});

const pool = new Pool(`http://127.0.0.1:${port}`, { connections, pipelining: 1 });
const headers = { authorization: `PVEAPIToken=${TOKEN}` };

async function json(
  method: 'GET' | 'POST' | 'DELETE',
  path: string,
  body?: string,
): Promise<{ status: number; data: unknown }> {
  const r = await pool.request({
    method,
    path: `/api2/json${path}`,
    headers: body ? { ...headers, 'content-type': 'application/x-www-form-urlencoded' } : headers,
    ...(body ? { body } : {}),
  });
  const text = await r.body.text();
  return { status: r.statusCode, data: text ? (JSON.parse(text) as { data: unknown }).data : null };
}

async function run(
  worker: () => Promise<number>,
): Promise<{ ops: number; requests: number; errors: number; seconds: number }> {
  const end = performance.now() + durationMs;
  let ops = 0;
  let requests = 0;
  let errors = 0;
  const start = performance.now();
  await Promise.all(
    Array.from({ length: connections }, async () => {
      while (performance.now() < end) {
        try {
          const n = await worker();
          requests += n;
          ops++;
        } catch {
          errors++;
        }
      }
    }),
  );
  return { ops, requests, errors, seconds: (performance.now() - start) / 1000 };
}

// warm-up
for (let i = 0; i < 200; i++) await json('GET', '/version');

const get = await run(async () => {
  const r = await json('GET', '/version');
  if (r.status !== 200) throw new Error(String(r.status));
  return 1;
});

let nextId = 1000;
async function waitTask(upid: string): Promise<number> {
  let n = 0;
  for (;;) {
    n++;
    const r = await json('GET', `/nodes/pve/tasks/${encodeURIComponent(upid)}/status`);
    if ((r.data as { status: string }).status === 'stopped') return n;
  }
}
const create = await run(async () => {
  const vmid = nextId++;
  const c = await json(
    'POST',
    '/nodes/pve/qemu',
    `vmid=${vmid}&name=b${vmid}&scsi0=local-lvm:1&net0=virtio,bridge=vmbr0`,
  );
  if (c.status !== 200) throw new Error(`create ${c.status}`);
  let n = 1 + (await waitTask(c.data as string));
  const d = await json('DELETE', `/nodes/pve/qemu/${vmid}`);
  if (d.status !== 200) throw new Error(`destroy ${d.status}`);
  n += 1 + (await waitTask(d.data as string));
  return n;
});

await pool.close();
child.kill('SIGTERM');

console.log(
  JSON.stringify(
    {
      benchmark: 'sim-throughput',
      node: process.version,
      cpus: cpus().length,
      connections,
      durationMs,
      get: { requestsPerSecond: Math.round(get.requests / get.seconds), requests: get.requests, errors: get.errors },
      createCycle: {
        cyclesPerSecond: Math.round((create.ops / create.seconds) * 10) / 10,
        requestsPerSecond: Math.round(create.requests / create.seconds),
        cycles: create.ops,
        errors: create.errors,
      },
      target: { getRequestsPerSecond: 3000, met: get.requests / get.seconds >= 3000 },
    },
    null,
    2,
  ),
);
