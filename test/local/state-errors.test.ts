/**
 * Unusable state files stop `apply`, `apply --dry-run`, `delete` and `status`: an empty file,
 * `{}`, `[]`, a newer version and text that is not JSON each fail with a StateFileError naming the
 * file (exit 1 through the CLI: not a usage error), leave the file as it was (no lock or temp file
 * left beside it) and contact no Proxmox. None of them may pass for an empty fleet: `status` would
 * say "No resources." and apply would create every VM again. A state file of another installation
 * is refused the same way. In process for each case; the real CLI once per command for the exit code.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { applyCommand, deleteCommand, statusCommand } from '../../src/local/commands.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { UsageError } from '../../src/workspace/arguments.ts';
import { StateFileError } from '../../src/workspace/state-file.ts';
import { capture } from '../helpers/capture.ts';
import { type CliFixture, cli, cliFixture, writeManifests } from '../helpers/cli.ts';

// Never the real ~/.local/state (the children inherit this environment).
const STATE_ROOT = mkdtempSync(join(tmpdir(), 'pp-state-errors-root-'));
process.env.PROVIDER_PROXMOX_STATE_DIR = STATE_ROOT;

const BAD: Array<{ what: string; text: string; says: RegExp }> = [
  { what: 'empty', text: '', says: /it is empty/ },
  { what: '{}', text: '{}', says: /it has no version/ },
  { what: '[]', text: '[]', says: /a list, not a state object/ },
  {
    what: 'version 99',
    text: '{"version":99,"rv":1,"objects":[],"events":[]}',
    says: /state file version 99, but this provider-proxmox reads versions 1 to \d/,
  },
  { what: 'not JSON', text: '{"version": 2, "objects": [', says: /it is not JSON/ },
];

describe('an unusable state file stops every command (exit 1, the file named, left untouched)', () => {
  let fx: CliFixture;
  let sim: Simulator;
  let dir: string;
  let config: string;
  let manifests: string;

  before(async () => {
    fx = await cliFixture('pp-state-errors-');
    ({ sim, dir, config } = fx);
    manifests = join(dir, 'm');
    mkdirSync(manifests);
    writeManifests(manifests, [{ name: 'bad-state-1' }]);
  });
  after(async () => {
    await fx.close();
    rmSync(STATE_ROOT, { recursive: true, force: true });
  });

  function requests(): number {
    return sim.clusters.reduce((n, c) => n + Object.values(c.counters()).reduce((a, b) => a + b, 0), 0);
  }

  /** The file as it was, no lock or temp file beside it, and no request to Proxmox. */
  function untouched(file: string, text: string, mtime: number): void {
    assert.equal(readFileSync(file, 'utf8'), text, 'the file is untouched');
    assert.equal(statSync(file).mtimeMs, mtime);
    assert.ok(!existsSync(`${file}.lock`) && !existsSync(`${file}.tmp`), 'no lock or temp file left');
    assert.equal(requests(), 0, 'no Proxmox was contacted');
  }

  for (const bad of BAD) {
    it(`${bad.what}: apply, apply --dry-run, delete and status fail naming the file`, async () => {
      const file = join(dir, `${bad.what.replace(/\W+/g, '-')}.state.json`);
      writeFileSync(file, bad.text);
      const mtime = statSync(file).mtimeMs;
      for (const c of sim.clusters) c.resetCounters();
      const out = capture();
      const common = { files: [manifests], config, state: file, quiet: true, out: out.out, err: out.out };
      const runs: Array<[string, () => Promise<number>]> = [
        ['apply', () => applyCommand({ ...common, taskPollMs: 10 })],
        ['apply --dry-run', () => applyCommand({ ...common, dryRun: true })],
        ['delete', () => deleteCommand(common)],
        ['status', () => statusCommand({ state: file, out: out.out })],
        ['status -o json', () => statusCommand({ state: file, output: 'json', out: out.out })],
      ];
      for (const [name, run] of runs)
        await assert.rejects(
          run,
          (e: Error) =>
            e instanceof StateFileError &&
            !(e instanceof UsageError) &&
            e.message.includes(file) &&
            bad.says.test(e.message),
          name,
        );
      assert.equal(out.text(), '', 'nothing printed: no table, no "No resources."');
      untouched(file, bad.text, mtime);
    });
  }

  it('the CLI: apply, apply --dry-run, delete and status exit 1 with the message naming the file', async () => {
    const bad = BAD[3]!;
    const file = join(dir, 'cli.state.json');
    writeFileSync(file, bad.text);
    const mtime = statSync(file).mtimeMs;
    for (const c of sim.clusters) c.resetCounters();
    const commands: Array<[string, string[]]> = [
      ['apply', ['apply', '--yes', '-f', manifests, '--config', config, '--state', file, '--task-poll', '20ms']],
      ['apply --dry-run', ['apply', '--yes', '-f', manifests, '--config', config, '--state', file, '--dry-run']],
      ['delete', ['delete', '--yes', '-f', manifests, '--config', config, '--state', file]],
      ['status', ['status', '--state', file]],
    ];
    // One after the other: apply and delete take the state file's lock, so at the same time one
    // could see the other's lock instead of the bad file.
    const results: Awaited<ReturnType<typeof cli>>[] = [];
    for (const [, args] of commands) results.push(await cli(args));
    for (const [i, [name]] of commands.entries()) {
      const r = results[i]!;
      assert.equal(r.code, 1, `${name}: ${r.stdout}${r.stderr}`);
      assert.ok(r.stderr.startsWith(`provider-proxmox: ${file}: `), `${name} names the file: ${r.stderr}`);
      assert.match(r.stderr, bad.says, name);
      assert.equal(r.stdout, '', name);
    }
    untouched(file, bad.text, mtime);
  });

  it("another installation's state file: apply and delete exit 1 naming it and both installations", async () => {
    const file = join(dir, 'team-a.state.json');
    const text = JSON.stringify({ version: 2, installation: 'team-a', rv: 1, objects: [], events: [], retired: [] });
    writeFileSync(file, text);
    for (const c of sim.clusters) c.resetCounters();
    // In turn: both take the state file's lock.
    const apply = await cli(['apply', '--yes', '-f', manifests, '--config', config, '--state', file]);
    const del = await cli(['delete', '--yes', '-f', manifests, '--config', config, '--state', file]);
    for (const r of [apply, del]) {
      assert.equal(r.code, 1, r.stdout + r.stderr);
      assert.ok(r.stderr.includes(file), r.stderr);
      // The ProviderConfig `default` without spec.installation is the CLI installation cli-default.
      assert.match(r.stderr, /belongs to installation 'team-a', but the ProviderConfig says 'cli-default'/);
    }
    assert.equal(readFileSync(file, 'utf8'), text);
    assert.equal(requests(), 0);
  });
});
