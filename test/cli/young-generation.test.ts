/**
 * The long-running commands restart once with V8's young generation bounded
 * (src/cli/young-generation.ts): the real CLI in a child process, with a preload that prints the
 * Node options of the process that runs the command to its end (a process that restarts itself
 * ends in execve, and runs no exit handler). A semi-space size given by the user, on Node's
 * command line or in NODE_OPTIONS, is left alone, and brief commands are not restarted.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, it } from 'node:test';
import { COMMAND_GROUPS } from '../../src/cli/program.ts';
import {
  boundedRestartArgs,
  boundedRestartEnv,
  LONG_RUNNING_COMMANDS,
  SEMI_SPACE_MB,
} from '../../src/cli/young-generation.ts';
import { MAIN, ROOT } from '../helpers/cli.ts';

const BOUNDED = `--max-semi-space-size=${SEMI_SPACE_MB}`;
const REPORT =
  'data:text/javascript,process.on("exit",()=>process.stderr.write("EXECARGV "+JSON.stringify(process.execArgv)+"\\n"))';

const MALLOC_REPORT =
  'data:text/javascript,process.on("exit",()=>process.stderr.write("MALLOC "+process.env.MALLOC_ARENA_MAX+" "+process.env.MALLOC_MMAP_THRESHOLD_+"\\n"))';

/** The Node options of each process that ran the CLI to its end (one, unless something went wrong). */
function nodeOptionsOfRun(args: string[], nodeArgs: string[] = [], env: NodeJS.ProcessEnv = {}): string[][] {
  const r = spawnSync(process.execPath, [...nodeArgs, '--import', REPORT, MAIN, ...args], {
    cwd: ROOT,
    env: { ...process.env, NODE_OPTIONS: '', ...env },
    encoding: 'utf8',
  });
  return r.stderr
    .split('\n')
    .filter((l) => l.startsWith('EXECARGV '))
    .map((l) => (JSON.parse(l.slice('EXECARGV '.length)) as string[]).filter((a) => a !== '--import' && a !== REPORT));
}

describe('long-running commands bound the young generation', () => {
  it('every long-running command is a command of the program', () => {
    for (const c of LONG_RUNNING_COMMANDS) assert.ok(Object.hasOwn(COMMAND_GROUPS, c), c);
  });

  it('apply restarts once with the semi-space bounded, its arguments and Node options kept', {
    skip: typeof process.execve !== 'function' || process.platform === 'win32',
  }, () => {
    assert.deepEqual(nodeOptionsOfRun(['apply', '--help'], ['--no-warnings']), [[BOUNDED, '--no-warnings']]);
  });

  it('a semi-space size of the user, on the command line or in NODE_OPTIONS, is left alone', () => {
    assert.deepEqual(nodeOptionsOfRun(['apply', '--help'], ['--max-semi-space-size=16']), [
      ['--max-semi-space-size=16'],
    ]);
    assert.deepEqual(nodeOptionsOfRun(['apply', '--help'], [], { NODE_OPTIONS: '--max-semi-space-size=2' }), [[]]);
  });

  it("glibc's malloc is bounded in the restart (2 arenas, the mmap threshold fixed), unless the user set either", {
    skip: typeof process.execve !== 'function' || process.platform === 'win32',
  }, () => {
    const r = spawnSync(process.execPath, ['--import', MALLOC_REPORT, MAIN, 'apply', '--help'], {
      cwd: ROOT,
      env: { ...process.env, NODE_OPTIONS: '', MALLOC_ARENA_MAX: '', MALLOC_MMAP_THRESHOLD_: '' },
      encoding: 'utf8',
    });
    assert.match(r.stderr, /^MALLOC 2 131072$/m);
    assert.deepEqual(boundedRestartEnv({ MALLOC_ARENA_MAX: '4', MALLOC_MMAP_THRESHOLD_: '65536' }), {
      MALLOC_ARENA_MAX: '4',
      MALLOC_MMAP_THRESHOLD_: '65536',
    });
  });

  it('brief commands and help are not restarted', () => {
    assert.deepEqual(nodeOptionsOfRun(['validate', '--help']), [[]]);
    assert.deepEqual(nodeOptionsOfRun(['--help']), [[]]);
  });

  it('the restart keeps argv after Node and its options, and is asked for once', () => {
    const argv = ['/usr/bin/node', '/x/main.js', 'apply', '-f', 'a b', '--yes'];
    assert.deepEqual(boundedRestartArgs(argv, ['--trace-warnings'], undefined), [
      '/usr/bin/node',
      BOUNDED,
      '--trace-warnings',
      '/x/main.js',
      'apply',
      '-f',
      'a b',
      '--yes',
    ]);
    assert.equal(boundedRestartArgs(argv, [BOUNDED], undefined), undefined);
    assert.equal(boundedRestartArgs(argv, [], '--inspect --max-semi-space-size 4'), undefined);
    assert.equal(boundedRestartArgs(['/usr/bin/node', '/x/main.js', 'status'], [], undefined), undefined);
    assert.equal(boundedRestartArgs(['/usr/bin/node', '/x/main.js'], [], undefined), undefined);
  });
});
