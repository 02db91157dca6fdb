/**
 * What a command says of the paths on its command line, through the real CLI: a file or directory
 * that is not there (or is a directory where a file is wanted) is one line, `<flag> <path>: ...;
 * pass ...`, exit 2 (docs/exit-codes.md: the command could not start as written), the same from
 * every command; paths that hold no ProxmoxVM, ProxmoxImage or ProxmoxTemplate are refused by
 * validate and plan as apply refuses them; `status --state` naming no file is exit 2, and a file
 * that is no state file is one line naming it. Nothing here reaches a Proxmox.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { cli } from '../helpers/cli.ts';

describe('paths given on the command line', () => {
  let dir: string;
  let empty: string;
  let missing: string;
  let manifests: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'pp-given-'));
    // Never the real ~/.local/state (the children inherit this environment): an empty state root.
    process.env.PROVIDER_PROXMOX_STATE_DIR = join(dir, 'state-root');
    empty = join(dir, 'empty');
    mkdirSync(empty);
    missing = join(dir, 'nosuch');
    manifests = join(dir, 'm');
    mkdirSync(manifests);
    writeFileSync(
      join(manifests, 'vm.yaml'),
      'apiVersion: proxmox.sankofa.io/v1alpha1\nkind: ProxmoxVM\nmetadata:\n  name: given-1\nspec:\n  forProvider:\n    name: given-1\n    image: local:import/ubuntu-22.04-cloud.qcow2\n',
    );
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  /** One line on stderr naming the flag and the path, what is wrong and what to pass; exit 2. */
  async function refused(args: string[], flag: string, path: string, why: RegExp): Promise<void> {
    const res = await cli(args, { cwd: dir });
    assert.equal(res.code, 2, `${args.join(' ')}: ${res.stdout}${res.stderr}`);
    const line = res.stderr.split('\n')[0]!;
    assert.ok(line.startsWith(`provider-proxmox: ${flag} ${path}: `), `${args.join(' ')}: ${res.stderr}`);
    assert.match(line, why);
    assert.match(line, /; pass /);
    assert.doesNotMatch(res.stderr, /ENOENT|EISDIR/, 'no raw system error');
  }

  const NO_SUCH = /no such file or directory/;

  for (const cmd of ['apply', 'plan', 'delete', 'validate'])
    it(`${cmd} -f with a path that is not there: exit 2`, () => refused([cmd, '-f', missing], '-f', missing, NO_SUCH));

  it('doctor -f with a path that is not there: exit 2, as the others say it', async () => {
    const res = await cli(['doctor', '--endpoint', 'https://pve:8006', '--token', 'a@pam!b=c', '-f', missing]);
    assert.equal(res.code, 2, res.stderr);
    assert.match(res.stderr, new RegExp(`-f ${missing}: no such file or directory; pass `));
  });

  for (const cmd of ['apply', 'plan', 'validate', 'delete'])
    it(`${cmd} --config that is not there, or is a directory: exit 2`, async () => {
      await refused([cmd, '-f', manifests, '--config', missing], '--config', missing, NO_SUCH);
      await refused([cmd, '-f', manifests, '--config', empty], '--config', empty, /is a directory/);
    });

  it('gc and status --config that is not there: exit 2', async () => {
    await refused(['gc', '--config', missing], '--config', missing, NO_SUCH);
    await refused(['status', '--config', missing], '--config', missing, NO_SUCH);
  });

  it('apply --fleet that is not there: exit 2, before the ProviderConfig is looked for', () =>
    refused(['apply', '-f', manifests, '--fleet', missing], '--fleet', missing, NO_SUCH));

  it('status --kubeconfig, sim --topology and controller --kubeconfig that are not there: exit 2', async () => {
    await refused(['status', '--kubeconfig', missing], '--kubeconfig', missing, NO_SUCH);
    await refused(['sim', '--topology', missing], '--topology', missing, NO_SUCH);
    await refused(['controller', '--kubeconfig', missing], '--kubeconfig', missing, NO_SUCH);
  });

  it('-f with nothing to apply: validate, plan and apply refuse it alike (exit 2, the same words)', async () => {
    const only = join(dir, 'secret-only');
    mkdirSync(only);
    writeFileSync(join(only, 's.yaml'), 'apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\nstringData:\n  a: b\n');
    for (const path of [empty, only]) {
      const said = new Set<string>();
      for (const cmd of ['validate', 'plan', 'apply']) {
        const res = await cli([cmd, '-f', path], { cwd: dir });
        assert.equal(res.code, 2, `${cmd} -f ${path}: ${res.stdout}${res.stderr}`);
        assert.equal(res.stdout, '', `${cmd}: nothing on stdout`);
        said.add(res.stderr);
      }
      assert.deepEqual(
        [...said],
        [
          `provider-proxmox: no ProxmoxVM, ProxmoxImage or ProxmoxTemplate in ${path}: pass the files or directories that hold the manifests\n`,
        ],
      );
    }
  });

  it('status --state naming no file: exit 2 naming it; without --state, nothing applied is exit 0', async () => {
    const res = await cli(['status', '--state', join(dir, 'nosuch.db')], { cwd: dir });
    assert.equal(res.code, 2, res.stdout + res.stderr);
    assert.match(
      res.stderr,
      new RegExp(`^provider-proxmox: --state ${join(dir, 'nosuch.db')}: no such state file; pass `),
    );
    assert.equal(res.stdout, '');
    const none = await cli(['status'], { cwd: dir });
    assert.equal(none.code, 0, none.stdout + none.stderr);
    assert.match(none.stdout, /^nothing has been applied: no state file under /);
  });

  it('status --state naming a text file: one line naming the file, what a state file is, and what to do (exit 1)', async () => {
    const text = join(dir, 'notes.db');
    writeFileSync(text, 'hello\nworld\n');
    const res = await cli(['status', '--state', text], { cwd: dir });
    assert.equal(res.code, 1, res.stdout + res.stderr);
    const lines = res.stderr.trimEnd().split('\n');
    assert.equal(lines.length, 1, res.stderr);
    assert.match(
      lines[0]!,
      new RegExp(
        `^provider-proxmox: ${text}: not a usable provider-proxmox state file: it is neither a state database \\(SQLite, as apply writes\\) nor valid JSON .*: move it away and run apply again`,
      ),
    );
    assert.doesNotMatch(res.stderr, /hello/, 'not the file content');
  });
});
