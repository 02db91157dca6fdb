/**
 * `provider-proxmox completion bash|zsh|fish` through the real CLI: the bash script offers every
 * command `--help` lists and every flag `apply --help` lists, and bash itself completes with it
 * (commands, flags, the choices of -o, the shells, file names for --config); the zsh and fish
 * scripts parse (and fish completes) where those shells are installed; an unknown shell is a
 * usage error.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { cli } from '../helpers/cli.ts';

const has = (shell: string) => spawnSync(shell, ['--version'], { stdio: 'ignore' }).status === 0;

/** The commands of `provider-proxmox --help`. */
async function helpCommands(): Promise<string[]> {
  const help = (await cli(['--help'])).stdout;
  const section = help.slice(help.indexOf('\nCommands:\n'));
  return [...section.matchAll(/^ {2}([a-z][\w-]*)\b/gm)].map((m) => m[1]!);
}

/** The flags of `provider-proxmox <command> --help`. */
async function helpFlags(command: string): Promise<string[]> {
  const help = (await cli([command, '--help'])).stdout;
  const start = help.indexOf('\nOptions:\n');
  const section = help.slice(start, help.indexOf('\n\n', start + 1));
  return [...section.matchAll(/^ {2}(?:(-\w), )?(--[\w-]+)/gm)].flatMap((m) => (m[1] ? [m[1], m[2]!] : [m[2]!]));
}

describe('provider-proxmox completion', () => {
  let dir: string;
  let bash: string;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'pp-completion-'));
    const res = await cli(['completion', 'bash']);
    assert.equal(res.code, 0, res.stderr);
    bash = res.stdout;
    writeFileSync(join(dir, 'completion.bash'), bash);
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  /** What bash completes for the words (the last one is the word being completed). */
  function complete(...words: string[]): string[] {
    const script = `source ${join(dir, 'completion.bash')}
COMP_WORDS=(${words.map((w) => `'${w}'`).join(' ')}); COMP_CWORD=${words.length - 1}
_provider_proxmox; printf '%s\\n' "\${COMPREPLY[@]}"`;
    const r = spawnSync('bash', ['--norc', '-c', script], { encoding: 'utf8', cwd: dir });
    assert.equal(r.status, 0, r.stderr);
    return r.stdout.split('\n').filter(Boolean).sort();
  }

  it('the bash script lists every command of --help and every flag of apply --help', async () => {
    const commands = await helpCommands();
    assert.ok(
      commands.includes('apply') && commands.includes('completion') && commands.length >= 10,
      commands.join(' '),
    );
    const top = complete('provider-proxmox', '');
    for (const c of commands) assert.ok(top.includes(c), `command ${c} in ${top.join(' ')}`);
    const flags = await helpFlags('apply');
    for (const f of [
      '-f',
      '--filename',
      '--config',
      '--state',
      '-o',
      '--output',
      '-q',
      '--quiet',
      '--dry-run',
      '-h',
      '--help',
    ])
      assert.ok(flags.includes(f), `apply --help lists ${f}: ${flags.join(' ')}`);
    const offered = complete('provider-proxmox', 'apply', '-');
    for (const f of flags) assert.ok(offered.includes(f), `apply flag ${f} in ${offered.join(' ')}`);
    for (const f of flags) assert.match(bash, new RegExp(`\\s${f}(\\s|")`), `${f} in the script`);
  });

  it('bash completes commands, flags, option values, the shells and file names', () => {
    writeFileSync(join(dir, 'pc.yaml'), '');
    assert.deepEqual(complete('provider-proxmox', 'ap'), ['apply']);
    assert.deepEqual(complete('provider-proxmox', 'apply', '--ou'), ['--output']);
    assert.deepEqual(complete('provider-proxmox', 'apply', '-f', 'x', '-o', ''), ['json', 'table', 'yaml']);
    assert.deepEqual(complete('provider-proxmox', 'sim', '--profile', ''), ['6.4', '7.4', '8.4', '9.2']);
    assert.deepEqual(complete('provider-proxmox', 'completion', ''), ['bash', 'fish', 'zsh']);
    assert.deepEqual(complete('provider-proxmox', 'status', '--config', 'pc'), ['pc.yaml']);
    assert.deepEqual(complete('provider-proxmox', 'help', 'st'), ['status']);
  });

  it('zsh: the script parses', { skip: !has('zsh') && 'zsh is not installed' }, async () => {
    const res = await cli(['completion', 'zsh']);
    assert.equal(res.code, 0, res.stderr);
    assert.match(res.stdout, /^#compdef provider-proxmox$/m);
    for (const c of await helpCommands()) assert.match(res.stdout, new RegExp(`^ {4}'${c}:`, 'm'), c);
    const file = join(dir, '_provider-proxmox');
    writeFileSync(file, res.stdout);
    const r = spawnSync('zsh', ['-n', file], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
  });

  it('fish: the script parses and completes', { skip: !has('fish') && 'fish is not installed' }, async () => {
    const res = await cli(['completion', 'fish']);
    assert.equal(res.code, 0, res.stderr);
    const file = join(dir, 'provider-proxmox.fish');
    writeFileSync(file, res.stdout);
    const run = (line: string) =>
      spawnSync('fish', ['--no-config', '-c', `source ${file}; complete -C '${line}'`], { encoding: 'utf8' })
        .stdout.split('\n')
        .filter(Boolean)
        .map((l) => l.split('\t')[0]!)
        .sort();
    assert.deepEqual(run('provider-proxmox ap'), ['apply']);
    assert.deepEqual(run('provider-proxmox apply -o '), ['json', 'table', 'yaml']);
    assert.ok(run('provider-proxmox apply --').includes('--filename'));
  });

  it('an unknown shell is a usage error (exit 2)', async () => {
    const res = await cli(['completion', 'ksh']);
    assert.equal(res.code, 2);
    assert.match(res.stderr, /Allowed choices are bash, zsh, fish/);
  });
});
