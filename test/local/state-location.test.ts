/**
 * Where the state file is when `--state` is not given: one per installation under
 * `${XDG_STATE_HOME:-~/.local/state}/provider-proxmox/<installation>/state.db` (the root
 * overridable by PROVIDER_PROXMOX_STATE_DIR), so the same manifests applied from another directory
 * find the same state and create nothing; `status` without a config picks the only installation
 * there is (several: a usage error listing them; none: "nothing has been applied"); the old place
 * `./.provider-proxmox/state.json` is still used when it exists (imported into the state.db beside
 * it by the first apply), with one note naming the new one.
 * The real CLI with XDG_STATE_HOME and HOME in temporary directories; never the real home.
 *
 * The last test (the state file deleted: apply creates nothing) needs the engine's adoption of
 * this installation's VMs by marker (src/vm, being added separately): until that lands it fails
 * with a second VM per manifest.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Simulator } from '../../src/sim/index.ts';
import { providerConfigYaml } from '../../src/sim/provider-config.ts';
import { markerUid } from '../../src/vm/spec.ts';
import { stateFileFor } from '../../src/workspace/arguments.ts';
import { defaultStateFile, readStateFile, stateRoot } from '../../src/workspace/state-file.ts';
import { type CliFixture, type CliResult, cli, cliFixture, statusItems, writeManifests } from '../helpers/cli.ts';

// The CLI children inherit this environment: the state root is a temporary XDG_STATE_HOME.
const HOME = mkdtempSync(join(tmpdir(), 'pp-location-home-'));
const XDG = join(HOME, 'xdg-state');
process.env.HOME = HOME;
process.env.XDG_STATE_HOME = XDG;
delete process.env.PROVIDER_PROXMOX_STATE_DIR;
const ROOT_DIR = join(XDG, 'provider-proxmox');

const POLL = ['--task-poll', '20ms'];

describe('the state root and the default state file', () => {
  it('PROVIDER_PROXMOX_STATE_DIR, else $XDG_STATE_HOME/provider-proxmox, else ~/.local/state/provider-proxmox', () => {
    assert.equal(
      stateRoot({ PROVIDER_PROXMOX_STATE_DIR: '/srv/pp', XDG_STATE_HOME: '/x', HOME: '/home/u' }),
      '/srv/pp',
    );
    assert.equal(stateRoot({ XDG_STATE_HOME: '/x', HOME: '/home/u' }), '/x/provider-proxmox');
    assert.equal(stateRoot({ HOME: '/home/u' }), '/home/u/.local/state/provider-proxmox');
    assert.equal(stateRoot({ XDG_STATE_HOME: '', HOME: '/home/u' }), '/home/u/.local/state/provider-proxmox');
    // The XDG spec: a relative path is invalid and ignored (it would depend on the directory again).
    assert.equal(stateRoot({ XDG_STATE_HOME: 'state', HOME: '/home/u' }), '/home/u/.local/state/provider-proxmox');
    assert.equal(defaultStateFile('cli-default', { XDG_STATE_HOME: '/x' }), '/x/provider-proxmox/cli-default/state.db');
  });

  it('--state wins over everything; without it the file depends on the installation, not the directory', () => {
    const cwd = mkdtempSync(join(tmpdir(), 'pp-location-cwd-'));
    try {
      assert.deepEqual(stateFileFor({ state: 'x.json', installation: 'i', cwd }), { file: 'x.json' });
      assert.deepEqual(stateFileFor({ installation: 'team-a', cwd }), {
        file: join(ROOT_DIR, 'team-a', 'state.db'),
      });
      assert.deepEqual(stateFileFor({ installation: 'team-a', cwd: tmpdir() }), {
        file: join(ROOT_DIR, 'team-a', 'state.db'),
      });
    } finally {
      rmSync(cwd, { recursive: true, force: true });
    }
  });
});

describe('apply, delete and status without --state (the real CLI)', () => {
  let fx: CliFixture;
  let sim: Simulator;
  let dir: string;
  let config: string;
  let teamB: string;
  let manifests: string;

  before(async () => {
    fx = await cliFixture('pp-location-');
    ({ sim, dir, config } = fx);
    teamB = join(dir, 'team-b.yaml');
    writeFileSync(teamB, providerConfigYaml(sim).replace(/^spec:\n/m, 'spec:\n  installation: team-b\n'));
    manifests = join(dir, 'manifests');
    mkdirSync(manifests);
    writeManifests(manifests, [{ name: 'where-1' }, { name: 'where-2' }]);
  });
  after(async () => {
    await fx.close();
    rmSync(HOME, { recursive: true, force: true });
  });

  /** A new empty directory to run a command in. */
  function workdir(name: string): string {
    const d = join(dir, name);
    mkdirSync(d, { recursive: true });
    return d;
  }

  /** Non-template VMs in the simulator named `prefix*`, with their marker uid. */
  function vms(prefix: string): Array<{ name: string; uid: string | undefined }> {
    return sim.clusters
      .flatMap((c) => [...c.state.vms.values()])
      .filter((v) => v.config.template !== '1' && (v.config.name ?? '').startsWith(prefix))
      .map((v) => ({ name: v.config.name!, uid: markerUid(v.config.description) }))
      .sort((a, b) => a.name.localeCompare(b.name));
  }

  function mutations(): number {
    return sim.clusters.reduce(
      (n, c) =>
        n +
        Object.entries(c.counters())
          .filter(([k]) => !k.startsWith('GET '))
          .reduce((a, [, v]) => a + v, 0),
      0,
    );
  }

  const ok = (r: CliResult, what: string) => assert.equal(r.code, 0, `${what}: ${r.stdout}${r.stderr}`);

  it('apply from two directories: one state file under XDG_STATE_HOME, the second apply creates nothing', async () => {
    const first = await cli(['apply', '--yes', '-f', manifests, '--config', config, ...POLL], { cwd: workdir('a') });
    ok(first, 'apply from a');
    assert.equal(first.stderr, '', 'no note: there is no legacy state file');
    const file = join(ROOT_DIR, 'cli-default', 'state.db');
    assert.ok(existsSync(file), `the state file is at ${file}`);
    assert.ok(!existsSync(join(dir, 'a', '.provider-proxmox')), 'nothing written into the current directory');
    assert.equal(vms('where-').length, 2);

    for (const c of sim.clusters) c.resetCounters();
    const second = await cli(['apply', '--yes', '-f', manifests, '--config', config, ...POLL], { cwd: workdir('b') });
    ok(second, 'apply from b');
    assert.match(second.stdout, /all 2 VMs ready/);
    assert.deepEqual(
      vms('where-').map((v) => v.name),
      ['where-1', 'where-2'],
      'still one VM per manifest',
    );
    assert.equal(mutations(), 0, 'nothing created or changed');
  });

  it('status without --config or --state: the only installation under the root', async () => {
    const res = await cli(['status', '-o', 'json'], { cwd: workdir('c') });
    ok(res, 'status');
    assert.deepEqual(
      statusItems(res.stdout).map((r) => [r.name, r.ready]),
      [
        ['where-1', true],
        ['where-2', true],
      ],
    );
  });

  it('two installations: status without --config is a usage error listing them; --config picks one', async () => {
    const m = workdir('team-b-manifests');
    writeManifests(m, [{ name: 'where-b1' }]);
    ok(await cli(['apply', '--yes', '-f', m, '--config', teamB, ...POLL], { cwd: workdir('d') }), 'apply team-b');
    assert.ok(existsSync(join(ROOT_DIR, 'team-b', 'state.db')));

    const ambiguous = await cli(['status'], { cwd: workdir('d') });
    assert.equal(ambiguous.code, 2, ambiguous.stdout + ambiguous.stderr);
    assert.match(
      ambiguous.stderr,
      /holds the state files of 2 installations \(cli-default, team-b\): pass --config FILE/,
    );

    const b = await cli(['status', '--config', teamB, '-o', 'json'], { cwd: workdir('d') });
    ok(b, 'status --config team-b');
    assert.deepEqual(
      statusItems(b.stdout).map((r) => r.name),
      ['where-b1'],
    );
    const a = await cli(['status', '--config', config, '-o', 'json'], { cwd: workdir('d') });
    assert.deepEqual(
      statusItems(a.stdout).map((r) => r.name),
      ['where-1', 'where-2'],
    );
    // delete finds the same file: the VMs of team-b go, cli-default's stay.
    ok(await cli(['delete', '--yes', '-f', m, '--config', teamB, ...POLL], { cwd: workdir('e') }), 'delete team-b');
    assert.deepEqual(vms('where-b'), []);
    assert.equal(vms('where-').length, 2);
  });

  it('nothing applied anywhere: status says so (exit 0)', async () => {
    const empty = join(HOME, 'empty-xdg');
    process.env.XDG_STATE_HOME = empty;
    try {
      const res = await cli(['status'], { cwd: workdir('f') });
      ok(res, 'status');
      assert.equal(
        res.stdout.trim(),
        `nothing has been applied: no state file under ${join(empty, 'provider-proxmox')} (apply writes one per installation there; pass --state FILE for one elsewhere)`,
      );
    } finally {
      process.env.XDG_STATE_HOME = XDG;
    }
  });

  it('./.provider-proxmox/state.json in the current directory is still used, with one note naming the new place', async () => {
    const old = workdir('old-project');
    const newDefault = join(ROOT_DIR, 'cli-default', 'state.db');
    // The old default, as an earlier version left it: a copy of this installation's state, as JSON.
    mkdirSync(join(old, '.provider-proxmox'));
    const legacy = join(old, '.provider-proxmox', 'state.json');
    writeFileSync(legacy, JSON.stringify({ ...readStateFile(newDefault)!, version: 2 }));
    const before = readFileSync(newDefault);
    const beforeMtime = statSync(newDefault).mtimeMs;

    for (const c of sim.clusters) c.resetCounters();
    const res = await cli(['apply', '--yes', '-f', manifests, '--config', config, ...POLL], { cwd: old });
    ok(res, 'apply in the old directory');
    const notes = res.stderr.trim().split('\n');
    assert.equal(notes.length, 1, res.stderr);
    assert.equal(
      notes[0],
      `note: using ${legacy}, the state file's old default place; the default is now ${newDefault}, the same from every directory: move it there (mkdir -p ${join(ROOT_DIR, 'cli-default')} && mv ${legacy} ${newDefault}) while no apply runs, or pass --state`,
    );
    assert.equal(mutations(), 0);
    assert.deepEqual(readFileSync(newDefault), before, 'the new default was not used');
    // Imported into the database beside it, the JSON file kept.
    assert.ok(existsSync(join(old, '.provider-proxmox', 'state.db')) && existsSync(`${legacy}.imported`));
    assert.equal(statSync(newDefault).mtimeMs, beforeMtime);

    const status = await cli(['status', '-o', 'json'], { cwd: old });
    ok(status, 'status in the old directory');
    assert.match(status.stderr, /^note: using .*\.provider-proxmox\/state\.db, the state file's old default place/);
    assert.equal(statusItems(status.stdout).length, 2);
    // --state still overrides it: no note.
    const explicit = await cli(['status', '--state', newDefault], { cwd: old });
    ok(explicit, 'status --state');
    assert.equal(explicit.stderr, '');
  });

  it('--help names the new default', async () => {
    const commands = ['apply', 'delete', 'status'];
    const results = await Promise.all(commands.map((command) => cli([command, '--help'])));
    for (const [i, command] of commands.entries()) {
      const res = results[i]!;
      ok(res, `${command} --help`);
      assert.match(
        res.stdout.replace(/\s+/g, ' '),
        /\$\{XDG_STATE_HOME:-~\/\.local\/state\}\/provider-proxmox\/<installation>\/state\.db/,
        command,
      );
    }
  });

  // NEEDS ADOPTION (src/vm, another engineer's change in progress): with the state file gone, the
  // engine must adopt this installation's VM of the same namespace/name instead of creating one.
  it('[needs adoption] the state file deleted: apply finds the VMs by marker and creates nothing', async () => {
    const file = join(ROOT_DIR, 'cli-default', 'state.db');
    const uids = vms('where-').map((v) => v.uid);
    rmSync(file);
    for (const c of sim.clusters) c.resetCounters();
    const res = await cli(['apply', '--yes', '-f', manifests, '--config', config, ...POLL], { cwd: workdir('g') });
    ok(res, 'apply without its state file');
    assert.deepEqual(
      vms('where-').map((v) => v.name),
      ['where-1', 'where-2'],
      'one VM per manifest, not a second one',
    );
    assert.equal(
      sim.clusters.reduce((n, c) => n + (c.counters()['POST /nodes/{node}/qemu'] ?? 0), 0),
      0,
      'no create was sent',
    );
    assert.equal(vms('where-').length, uids.length);
    assert.ok(existsSync(file), 'the state file is written again');
  });
});
