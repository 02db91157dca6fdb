/**
 * `apply` killed with SIGKILL at several moments, then run again until it exits 0: exactly one VM
 * per manifest and no orphan (issue 4). Real processes on both sides: the simulator runs as
 * `provider-proxmox sim --http` in its own process, `apply` is the real CLI. The final assertion
 * is independent of where the kills landed: it looks only at the simulator (over its API) and the
 * state file.
 */
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { markerUid } from '../../src/vm/spec.ts';
import { readStateFile, statePaths } from '../../src/workspace/state-file.ts';
import { cli, ROOT, spawnCli, statusItems, writeManifests } from '../helpers/cli.ts';

const TEMPLATE_VMID = 9000;

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      const port = typeof a === 'object' && a ? a.port : 0;
      s.close(() => resolve(port));
    });
  });
}

interface SimApi {
  urls: Map<string, string>;
  auth: string;
}

async function get<T>(api: SimApi, site: string, path: string): Promise<T> {
  const res = await fetch(`${api.urls.get(site)}/api2/json${path}`, { headers: { Authorization: api.auth } });
  assert.equal(res.status, 200, `GET ${path} on ${site}: ${res.status}`);
  return ((await res.json()) as { data: T }).data;
}

/** Every VM of every site with its ownership marker, read through the API. */
async function simVms(api: SimApi): Promise<Array<{ site: string; vmid: number; uid?: string; template: boolean }>> {
  const out: Array<{ site: string; vmid: number; uid?: string; template: boolean }> = [];
  for (const site of api.urls.keys()) {
    const list = await get<Array<{ type: string; vmid?: number; node?: string; template?: number }>>(
      api,
      site,
      '/cluster/resources?type=vm',
    );
    for (const e of list) {
      if (e.type !== 'qemu' || e.vmid === undefined || !e.node) continue;
      const cfg = await get<Record<string, string>>(api, site, `/nodes/${e.node}/qemu/${e.vmid}/config`);
      const uid = markerUid(cfg.description);
      out.push({ site, vmid: e.vmid, ...(uid ? { uid } : {}), template: e.template === 1 });
    }
  }
  return out;
}

type StoredVm = { metadata: { name: string; uid: string; annotations?: Record<string, string> } };

function readState(file: string): StoredVm[] {
  return (readStateFile(file)?.objects ?? []) as unknown as StoredVm[];
}

describe('apply killed with SIGKILL, then run again', () => {
  let dir: string;
  let sim: ChildProcess | undefined;
  let config: string;
  let api: SimApi;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'pp-sigkill-'));
    // The seed topology, on free ports.
    const topo = readFileSync(join(ROOT, 'src/sim/default-topology.yaml'), 'utf8')
      .replace('127.0.0.1:8006', `127.0.0.1:${await freePort()}`)
      .replace('127.0.0.1:8007', `127.0.0.1:${await freePort()}`);
    const topology = join(dir, 'topology.yaml');
    writeFileSync(topology, topo);
    config = join(dir, 'providerconfig.yaml');
    const child = spawnCli(['sim', '--http', '--speed', '200', '--topology', topology, '--print-config', config]);
    sim = child;
    let out = '';
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the simulator did not start: ${out}`)), 20_000);
      child.stdout.setEncoding('utf8');
      child.stdout.on('data', (d: string) => {
        out += d;
        if (out.includes('Press Ctrl-C to stop.')) {
          clearTimeout(timer);
          resolve();
        }
      });
      child.once('exit', (code) => reject(new Error(`the simulator exited (${code}): ${out}`)));
    });
    const docs = parseAllDocuments(readFileSync(config, 'utf8')).map((d) => d.toJS()) as Array<{
      kind: string;
      stringData?: { tokenid: string; token: string };
      spec?: { sites: Array<{ name: string; endpoints: string[] }> };
    }>;
    const secret = docs.find((d) => d.kind === 'Secret')!.stringData!;
    const pc = docs.find((d) => d.kind === 'ClusterProviderConfig')!;
    api = {
      urls: new Map(pc.spec!.sites.map((s) => [s.name, s.endpoints[0]!])),
      auth: `PVEAPIToken=${secret.tokenid}=${secret.token}`,
    };
  });

  after(async () => {
    if (sim && sim.exitCode === null) {
      const exited = new Promise((resolve) => sim!.once('exit', resolve));
      sim.kill('SIGTERM');
      await exited;
    }
    rmSync(dir, { recursive: true, force: true });
  });

  /** Every state file written so far: a VM that belongs to none of them is an orphan. */
  const stateFiles: string[] = [];

  type Kill = { line: number; afterMs?: number };

  /**
   * Apply `names` (4 VMs: import and clone on both sites), killing the CLI at each point of
   * `schedule` in turn (each run starts over from the state file) until a run finishes before its
   * kill point; then run again until it exits 0 and check the simulator and the state file.
   */
  async function killAndRerun(t: { diagnostic: (m: string) => void }, prefix: string, schedule: Kill[]) {
    const names = ['a', 'b', 'c', 'd'].map((x) => `${prefix}-${x}`);
    const manifests = join(dir, prefix);
    mkdirSync(manifests);
    writeManifests(manifests, [
      { name: names[0]! },
      { name: names[1]!, template: TEMPLATE_VMID },
      { name: names[2]!, site: 'site-2', node: 'r630-01' },
      { name: names[3]!, site: 'site-2', node: 'r630-01', template: TEMPLATE_VMID },
    ]);
    const state = join(dir, `${prefix}.state.json`);
    stateFiles.push(state);
    const apply = ['apply', '--yes', '-f', manifests, '--config', config, '--state', state, '--task-poll', '20ms'];
    // The lock is the database's: `X.state.json` names the state database `X.state.db`.
    const lockFile = `${statePaths(state).db}.lock`;

    const kills: string[] = [];
    let finished = false;
    for (const k of schedule) {
      let pid: number | undefined;
      let lastLine = '';
      const res = await cli(apply, {
        timeoutMs: 60_000,
        onLine: (line, n, child) => {
          pid = child.pid;
          if (n !== k.line) return;
          lastLine = line;
          if (k.afterMs === undefined) child.kill('SIGKILL');
          else setTimeout(() => child.kill('SIGKILL'), k.afterMs);
        },
      });
      if (res.signal === 'SIGKILL') {
        const where = `line ${k.line}${k.afterMs !== undefined ? ` + ${k.afterMs} ms` : ''}`;
        kills.push(where);
        t.diagnostic(`killed at ${where} (${lastLine.trim()}); last output: ${res.stdout.trim().split('\n').at(-1)}`);
        // The killed process could not clean up: its lock file is left behind, holding its pid (unless
        // the kill came after the final table, when it may have released the lock already).
        if (!/VMs ready|VM\(s\) failed|timed out/.test(res.stdout)) {
          assert.ok(existsSync(lockFile), `a stale lock file after the kill at ${where}`);
          assert.equal(readFileSync(lockFile, 'utf8').trim(), String(pid));
        }
        continue;
      }
      // Not killed: it got past the stale lock of the killed run and finished.
      assert.doesNotMatch(res.stderr, /in use by process/, 'the stale lock is taken over');
      assert.equal(res.code, 0, `apply finished before its kill point: ${res.stdout}\n${res.stderr}`);
      finished = true;
      break;
    }
    assert.ok(kills.length >= 2, `apply was killed at least twice (${kills.join('; ')})`);
    // Run again until it exits 0 (the runs above may all have been killed).
    for (let i = 0; i < 3 && !finished; i++) {
      const res = await cli(apply, { timeoutMs: 60_000 });
      assert.doesNotMatch(res.stderr, /in use by process/, 'the stale lock is taken over');
      assert.equal(res.code, 0, `apply after the kills: ${res.stdout}\n${res.stderr}`);
      finished = true;
    }
    assert.ok(!existsSync(lockFile), 'a clean exit releases the lock');

    // The state file: one resource per manifest, each with its VMID.
    const stored = readState(state);
    assert.deepEqual(stored.map((o) => o.metadata.name).sort(), names);

    // The simulator: exactly one VM per manifest, carrying its uid, and nothing else but the templates.
    const vms = await simVms(api);
    const others = vms.filter((v) => !v.template);
    assert.equal(vms.filter((v) => v.template && v.vmid === TEMPLATE_VMID).length, 2, 'both templates are still there');
    for (const o of stored) {
      const mine = others.filter((v) => v.uid === o.metadata.uid);
      assert.equal(mine.length, 1, `exactly one VM for ${o.metadata.name}: ${JSON.stringify(others)}`);
      assert.equal(String(mine[0]!.vmid), o.metadata.annotations?.['crossplane.io/external-name']);
    }
    const known = new Set(stateFiles.flatMap((f) => readState(f).map((o) => o.metadata.uid)));
    assert.deepEqual(
      others.filter((v) => !v.uid || !known.has(v.uid)),
      [],
      'no orphan: every VM belongs to a resource of a state file',
    );

    // status: the table, and JSON.
    const table = await cli(['status', '--state', state]);
    assert.equal(table.code, 0, table.stderr);
    assert.match(table.stdout, /^NAME\s+SITE\s+NODE\s+VMID\s+STATE/m);
    for (const n of names) assert.match(table.stdout, new RegExp(`^${n}\\s.*\\srunning\\s.*\\sTrue\\s+True\\s`, 'm'));
    const json = await cli(['status', '--state', state, '-o', 'json']);
    assert.equal(json.code, 0, json.stderr);
    const rows = statusItems(json.stdout);
    assert.deepEqual(rows.map((r) => r.name).sort(), names);
    assert.ok(rows.every((r) => r.ready === true && r.synced === true));
  }

  it('killed after the 1st, 3rd, 5th... line of progress: one VM per manifest, no orphan, stale lock taken over', async (t) => {
    await killAndRerun(
      t,
      'lines',
      [1, 3, 5, 6, 7, 8, 10, 14, 20, 30].map((line) => ({ line })),
    );
  });

  it('killed K ms after its first line (mid-create): one VM per manifest, no orphan', async (t) => {
    await killAndRerun(
      t,
      'timed',
      [100, 180, 220, 260, 300, 350, 420, 500, 650, 850, 1100].map((afterMs) => ({ line: 1, afterMs })),
    );
  });
});
