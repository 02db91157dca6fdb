/**
 * `status` and `status --watch` for the local runtime, from a state file: the table (phases in
 * rollout order), the watch loop in place on a terminal, printed on change otherwise (JSON: one
 * line per change), a state file that appears later, and the real CLI stopped by SIGINT (exit 0).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { ProxmoxVM } from '../../src/api/proxmoxvm.ts';
import { statusCommand } from '../../src/local/commands.ts';
import { parseStatusList } from '../../src/local/status-list.ts';
import { capture } from '../helpers/capture.ts';
import { spawnCli } from '../helpers/cli.ts';
import { testTerminal } from '../helpers/terminal.ts';

const LONG_AGO = '2025-12-13T10:00:00Z';

function vm(
  name: string,
  phase: string,
  o: { vmid?: string; state?: string; ready?: boolean; message?: string } = {},
): ProxmoxVM {
  const ready = o.ready ?? true;
  return {
    apiVersion: 'proxmox.sankofa.io/v1alpha1',
    kind: 'ProxmoxVM',
    metadata: {
      name,
      namespace: 'default',
      uid: `uid-${name}`,
      generation: 1,
      resourceVersion: '1',
      creationTimestamp: LONG_AGO,
      annotations: {
        'proxmox.sankofa.io/phase': phase,
        ...(o.vmid ? { 'crossplane.io/external-name': o.vmid } : {}),
      },
    },
    spec: { forProvider: { site: 'site-1', node: 'ml110-01' } },
    status: {
      atProvider: { site: 'site-1', node: 'ml110-01', state: o.state ?? 'running', step: ready ? 'Ready' : 'create' },
      conditions: [
        {
          type: 'Ready',
          status: ready ? 'True' : 'False',
          reason: ready ? 'Available' : 'Creating',
          lastTransitionTime: LONG_AGO,
        },
        {
          type: 'Synced',
          status: o.message ? 'False' : 'True',
          reason: o.message ? 'BridgeNotFound' : 'ReconcileSuccess',
          ...(o.message ? { message: o.message } : {}),
          lastTransitionTime: LONG_AGO,
        },
      ],
    },
  } as unknown as ProxmoxVM;
}

/** Writes as the FileStore does (temp file + rename): a reader never sees half a file. */
function writeState(file: string, objects: ProxmoxVM[]): void {
  writeFileSync(`${file}.tmp`, JSON.stringify({ version: 1, rv: 1, objects, events: [] }));
  renameSync(`${file}.tmp`, file);
}

async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 2000; i++) {
    if (cond()) return;
    await new Promise((r) => setTimeout(r, 5));
  }
  throw new Error(`timed out waiting for ${what}`);
}

describe('status', () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'pp-status-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('the table: NAME PHASE SITE NODE VMID STATE ... MESSAGE, phases in rollout order (2 before 10)', async () => {
    const f = join(dir, 'table.json');
    writeState(f, [
      vm('late', '10', { vmid: '110' }),
      vm('web', '2', { vmid: '102' }),
      vm('broken', '2', { ready: false, state: '', message: "bridge 'vmbr9' does not exist on ml110-01" }),
    ]);
    const c = capture();
    assert.equal(await statusCommand({ state: f, out: c.out }), 0);
    const lines = c.text().trimEnd().split('\n');
    assert.match(lines[0]!, /^NAME\s+PHASE\s+SITE\s+NODE\s+VMID\s+STATE\s+READY\s+SYNCED\s+AGE\s+MESSAGE$/);
    assert.deepEqual(
      lines.slice(1).map((l) => l.split(/\s+/)[0]),
      ['broken', 'web', 'late'],
    );
    assert.match(
      lines[1]!,
      /^broken\s+2\s+site-1\s+ml110-01\s+False\s+False\s+\d+d\s+BridgeNotFound: bridge 'vmbr9' does not exist on ml110-01$/,
    );
    const j = capture();
    await statusCommand({ state: f, output: 'json', out: j.out });
    assert.deepEqual(
      parseStatusList(j.text()).items.map((r) => [r.name, r.phase, r.vmid, r.ready]),
      [
        ['broken', '2', null, false],
        ['web', '2', 102, true],
        ['late', '10', 110, true],
      ],
    );
  });

  it('--watch, not a terminal: the table again only when it changes; stops on the signal with 0', async () => {
    const f = join(dir, 'watch.json');
    writeState(f, [vm('a', '1', { ready: false, state: '' })]);
    const c = capture();
    const stop = new AbortController();
    const done = statusCommand({ state: f, watch: true, intervalMs: 10, signal: stop.signal, out: c.out });
    assert.ok(done instanceof Promise);
    await until(() => c.writes.length === 1, 'the first table');
    // Nothing changes for a while (many intervals): nothing more is printed.
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(c.writes.length, 1);
    assert.match(c.writes[0]!, /^NAME\s+PHASE.*\na\s+1\s+site-1\s+ml110-01\s+False\s+True\s/);
    writeState(f, [vm('a', '1', { vmid: '100' }), vm('b', '2', { ready: false, state: '' })]);
    await until(() => c.writes.length === 2, 'the second table');
    assert.match(
      c.writes[1]!,
      /^\nNAME\s+PHASE.*\na\s+1\s+site-1\s+ml110-01\s+100\s+running\s+True\s+True\s.*\nb\s+2\s/,
    );
    stop.abort();
    assert.equal(await done, 0);
  });

  it('--watch on a terminal: redrawn in place (one head line however many frames), fitted to the width', async () => {
    const f = join(dir, 'tty.json');
    writeState(f, [vm('a', '1', { vmid: '100' })]);
    const t = testTerminal(80, 24);
    const stop = new AbortController();
    const done = statusCommand({ state: f, watch: true, intervalMs: 10, signal: stop.signal, out: t.stream });
    await until(() => t.writes.length >= 1, 'the first frame');
    writeState(f, [vm('a', '1', { vmid: '100' }), vm('b', '2', { vmid: '101' })]);
    await until(() => t.writes.join('').includes('\nb '), 'the frame with b');
    stop.abort();
    assert.equal(await done, 0);
    const lines = await t.lines();
    assert.equal(lines.filter((l) => /^Every 0\.01s: .*tty\.json /.test(l)).length, 1, lines.join('\n'));
    assert.match(lines.slice(1).join('\n'), /^\nNAME\s+.*READY\s+SYNCED.*\na\s+.*\nb\s+/);
    assert.equal(await t.scrolledOff(), 0);
    assert.equal(await t.wrapped(), false);
    t.dispose();
  });

  it('--watch -o json: one line per change; a state file that appears later is picked up', async () => {
    const f = join(dir, 'later.json');
    const c = capture();
    const e = capture();
    const stop = new AbortController();
    const done = statusCommand({
      state: f,
      watch: true,
      intervalMs: 10,
      output: 'json',
      signal: stop.signal,
      out: c.out,
      err: e.out,
    });
    try {
      await until(() => e.writes.length === 1, 'the no-state-file message (stderr: stdout holds JSON lines only)');
      assert.match(
        e.writes[0]!,
        /^no state file at .*later\.json yet: waiting for an apply with --state \S+later\.json to write it/,
      );
      writeState(f, [vm('a', '1')]);
      await until(() => c.writes.length === 1, 'the rows');
      writeState(f, [vm('a', '1'), vm('b', '1')]);
      await until(() => c.writes.length === 2, 'the changed rows');
    } finally {
      // Also when an assertion fails: the watch would keep the test process alive.
      stop.abort();
      await done;
    }
    assert.deepEqual(
      c.writes.map((l) => parseStatusList(l).items.map((r) => r.name)),
      [['a'], ['a', 'b']],
    );
  });

  it('the CLI: status --watch prints changes and exits 0 on SIGINT', async () => {
    const f = join(dir, 'cli.json');
    writeState(f, [vm('one', '1')]);
    const child = spawnCli(['status', '--watch', '--state', f, '--interval', '100ms']);
    let stdout = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (d: string) => {
      stdout += d;
    });
    child.stderr?.resume();
    const exit = new Promise<[number | null, NodeJS.Signals | null]>((resolve) =>
      child.on('exit', (code, sig) => resolve([code, sig])),
    );
    try {
      await until(() => /^one\s/m.test(stdout), 'the first table');
      writeState(f, [vm('one', '1'), vm('two', '2')]);
      await until(() => /^two\s/m.test(stdout), 'the second table');
      child.kill('SIGINT');
      assert.deepEqual(await exit, [0, null]);
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
    assert.equal(stdout.match(/^NAME\s/gm)?.length, 2, stdout);
  });
});
