/**
 * Machine output and pipes through the real CLI (a child process) against the simulator: with
 * `-o json` stdout is one JSON document for status, status --live, validate, plan, gc and (with
 * -q) apply; a reader that goes away (`| head -1`) ends the command with 141 and no stack trace;
 * output that is no terminal carries no escape sequence even when TERM says colours.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parseStatusList } from '../../src/local/status-list.ts';
import { type CliFixture, cli, cliEnv, cliFixture, MAIN, ROOT, writeManifests } from '../helpers/cli.ts';

/** Fast polling, and no confirmation prompt (there is no terminal to answer it). */
const POLL = ['--task-poll', '20ms', '--yes'];
/** A stack trace or Node's report of an unhandled error. */
const CRASH = /^\s+at |Unhandled|EPIPE|node:internal/m;

/** Run the CLI, and close its stdout (as `| head -1` does) when the first line arrives. */
function untilFirstLine(args: string[], env: NodeJS.ProcessEnv = cliEnv()) {
  return new Promise<{ code: number | null; signal: NodeJS.Signals | null; first: string; stderr: string }>(
    (resolve, reject) => {
      const child = spawn(process.execPath, [MAIN, ...args], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      let first = '';
      let stderr = '';
      child.stdout.setEncoding('utf8');
      child.stdout.on('data', (d: string) => {
        out += d;
        if (!first && out.includes('\n')) {
          first = out.slice(0, out.indexOf('\n'));
          child.stdout.destroy();
        }
      });
      child.stderr.setEncoding('utf8');
      child.stderr.on('data', (d: string) => {
        stderr += d;
      });
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new Error(`${args.join(' ')} did not end after its reader left\n${stderr}`));
      }, 60_000);
      child.on('close', (code, signal) => {
        clearTimeout(timer);
        resolve({ code, signal, first, stderr });
      });
    },
  );
}

describe('machine output and pipes', () => {
  let fx: CliFixture;
  let m: string;
  let state: string;

  before(async () => {
    fx = await cliFixture('pp-output-');
    m = join(fx.dir, 'vms');
    mkdirSync(m);
    writeManifests(m, [{ name: 'out-1' }, { name: 'out-2' }]);
    state = join(fx.dir, 'state.json');
  });
  after(() => fx.close());

  it('apply -q -o json: stdout is one StatusList document, the summary on stderr', async () => {
    const res = await cli([
      'apply',
      '--yes',
      '-f',
      m,
      '--config',
      fx.config,
      '--state',
      state,
      '-q',
      '-o',
      'json',
      ...POLL,
    ]);
    assert.equal(res.code, 0, res.stderr);
    const doc = parseStatusList(res.stdout);
    assert.deepEqual(
      doc.items.map((i) => [i.name, i.ready, i.synced, typeof i.vmid]),
      [
        ['out-1', true, true, 'number'],
        ['out-2', true, true, 'number'],
      ],
    );
    assert.match(res.stderr, /all 2 VMs ready/);
  });

  it('status, status --live, validate, plan, gc with -o json: stdout parses as JSON', async () => {
    // The VMs may exist already (the test above); without them status has nothing to show.
    const applied = await cli(['apply', '--yes', '-f', m, '--config', fx.config, '--state', state, '-q', ...POLL]);
    assert.equal(applied.code, 0, applied.stdout + applied.stderr);
    const status = await cli(['status', '--state', state, '-o', 'json']);
    assert.equal(status.code, 0, status.stderr);
    const doc = parseStatusList(status.stdout);
    assert.deepEqual(
      doc.items.map((i) => [i.namespace, i.name, i.ready, i.state, i.ipAddresses.length > 0, i.ageSeconds! >= 0]),
      [
        ['default', 'out-1', true, 'running', true, true],
        ['default', 'out-2', true, 'running', true, true],
      ],
    );
    const runs: Array<[string, string[], number]> = [
      ['status --live', ['status', '--live', '--config', fx.config, '--state', state, '-o', 'json'], 0],
      ['validate', ['validate', '-f', m, '-o', 'json'], 0],
      ['plan', ['plan', '-f', m, '--config', fx.config, '-o', 'json'], 0],
      ['gc', ['gc', '--config', fx.config, '--state', state, '-o', 'json'], 0],
    ];
    for (const [name, args, code] of runs) {
      const res = await cli(args);
      assert.equal(res.code, code, `${name}: ${res.stderr}`);
      assert.doesNotThrow(() => JSON.parse(res.stdout), `${name}: ${res.stdout.slice(0, 200)}`);
    }
    const live = JSON.parse((await cli(runs[0]![1])).stdout);
    assert.equal(live.kind, 'LiveStatus');
    assert.deepEqual(
      live.items.map((i: { name: string; inState: unknown }) => [i.name, i.inState]),
      [
        ['out-1', true],
        ['out-2', true],
      ],
    );
  });

  it('| head -1: apply and delete end with 141 when their reader leaves, without a stack trace', async () => {
    const dir = join(fx.dir, 'pipe');
    mkdirSync(dir);
    writeManifests(dir, [{ name: 'pipe-1' }, { name: 'pipe-2' }, { name: 'pipe-3' }]);
    const pipeState = join(fx.dir, 'pipe.state.json');
    const base = ['-f', dir, '--config', fx.config, '--state', pipeState, ...POLL];
    const apply = await untilFirstLine(['apply', '--yes', ...base]);
    assert.ok(apply.first, 'a first line');
    assert.equal(apply.code, 141, apply.stderr);
    assert.doesNotMatch(apply.stderr, CRASH);
    // The run it cut short is continued by the next one, as after any interruption.
    const again = await cli(['apply', '--yes', ...base]);
    assert.equal(again.code, 0, again.stdout + again.stderr);
    assert.match(again.stdout, /all 3 VMs ready/);
    const del = await untilFirstLine(['delete', '--yes', ...base]);
    assert.equal(del.code, 141, del.stderr);
    assert.doesNotMatch(del.stderr, CRASH);
  });

  it('not a terminal: no escape sequence, even with TERM=xterm-256color and no NO_COLOR', async () => {
    const env: NodeJS.ProcessEnv = { ...cliEnv(), TERM: 'xterm-256color' };
    delete env.NO_COLOR;
    delete env.FORCE_COLOR;
    const dir = join(fx.dir, 'plain');
    mkdirSync(dir);
    writeManifests(dir, [{ name: 'plain-1' }]);
    const res = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const child = spawn(
        process.execPath,
        [MAIN, 'apply', '--yes', '-f', dir, '--config', fx.config, '--state', join(fx.dir, 'plain.json'), ...POLL],
        { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] },
      );
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d: Buffer) => {
        stdout += d;
      });
      child.stderr.on('data', (d: Buffer) => {
        stderr += d;
      });
      child.on('close', (code) => resolve({ code, stdout, stderr }));
    });
    assert.equal(res.code, 0, res.stdout + res.stderr);
    assert.match(res.stdout, /^\[\s+\d+\.\ds\] plain-1: /m, 'the line log');
    assert.doesNotMatch(res.stdout + res.stderr, /\x1b/);
  });
});
