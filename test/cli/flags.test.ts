/**
 * Flags that every command of a kind takes alike, and values no flag may take. The commands that
 * ask before they change or destroy anything (apply, delete, gc --delete) take the same flags to
 * go ahead without asking (`-y`, `--yes`, `--auto-approve`: what each refusal suggests). An
 * interval or timeout below what its loop can use (0 made `status --watch` spin, `apply` time out
 * at once) is a usage error (exit 2) naming the flag and what it takes.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { buildProgram } from '../../src/cli/program.ts';
import { cli } from '../helpers/cli.ts';

const whole = buildProgram(['node', 'provider-proxmox', '--help']);
const command = (name: string) => whole.commands.find((c) => c.name() === name)!;

describe('the confirmation flags', () => {
  for (const name of ['apply', 'delete', 'gc'])
    it(`${name} takes -y, --yes and --auto-approve`, () => {
      const flags = command(name).options.map((o) => [o.short, o.long]);
      assert.ok(
        flags.some(([s, l]) => s === '-y' && l === '--yes'),
        `${name}: -y, --yes`,
      );
      assert.ok(
        flags.some(([, l]) => l === '--auto-approve'),
        `${name}: --auto-approve`,
      );
    });
});

describe('intervals and timeouts too short to use', () => {
  for (const [args, flag, least] of [
    [['status', '--watch', '--interval', '0'], '--interval', '100ms'],
    [['status', '--watch', '--interval', '1ms'], '--interval', '100ms'],
    [['apply', '-f', 'm', '--timeout', '0'], '--timeout', '1s'],
    [['delete', '-f', 'm', '--timeout', '0'], '--timeout', '1s'],
    [['apply', '-f', 'm', '--task-poll', '0'], '--task-poll', '10ms'],
    [['controller', '--poll', '0'], '--poll', '1s'],
    [['doctor', '--timeout', '0'], '--timeout', '100ms'],
  ] as const)
    it(`${args.join(' ')}: exit 2, naming ${flag} and its least value`, async () => {
      const res = await cli([...args]);
      assert.equal(res.code, 2, res.stdout + res.stderr);
      assert.match(res.stderr, new RegExp(`option '${flag} <[a-z]+>' argument '${args.at(-1)}' is invalid`));
      assert.match(res.stderr, new RegExp(`at least ${least}`));
    });

  it('the least values themselves are taken (the parser alone: nothing runs)', () => {
    const option = (cmd: string, long: string) => command(cmd).options.find((o) => o.long === long)!;
    const parse = (cmd: string, long: string, v: string) =>
      (option(cmd, long) as unknown as { parseArg: (v: string, prev: unknown) => number }).parseArg(v, undefined);
    assert.equal(parse('status', '--interval', '100ms'), 100);
    assert.equal(parse('apply', '--timeout', '1s'), 1000);
    assert.equal(parse('apply', '--task-poll', '20ms'), 20);
    assert.equal(parse('apply', '--offline-grace', '0'), 0, '0 is documented: at once');
    assert.equal(parse('apply', '--drift-interval', '0'), 0, '0 is documented: every poll');
    // doctor's --timeout takes a duration as the others do (it took bare seconds alone: 5s was refused).
    assert.equal(parse('doctor', '--timeout', '5s'), 5000);
    assert.equal(parse('doctor', '--timeout', '5'), 5000, 'a bare number is seconds');
  });
});

describe('help and flags that said less than they did', () => {
  it('no help shows an empty or a second default (`(default: [])`, `(default: all) (default: [])`)', () => {
    for (const c of whole.commands) {
      const help = c.helpInformation().replace(/\s+/g, ' ');
      assert.doesNotMatch(help, /\(default: \[\]\)/, `${c.name()} --help`);
      assert.doesNotMatch(help, /default: [^()]*\) \(default:/, `${c.name()} --help`);
    }
    assert.match(command('doctor').helpInformation().replace(/\s+/g, ' '), /repeatable; default: all\)/);
  });

  it('apply --max-parallel says that without it there is no limit', () => {
    assert.match(command('apply').helpInformation().replace(/\s+/g, ' '), /--max-parallel <n> .*default: no limit/);
  });

  it('status -n without --kubeconfig: exit 2, saying what -n is for (it was silently ignored)', async () => {
    const res = await cli(['status', '-n', 'prod', '--state', 'nosuch.db']);
    assert.equal(res.code, 2, res.stdout + res.stderr);
    assert.match(
      res.stderr,
      /^provider-proxmox: -n prod picks a namespace of a cluster: add --kubeconfig FILE, or leave -n out/,
    );
  });
});
