/**
 * `apply --fleet`: the fleet file is checked as manifests are, every problem at once with
 * `file:line:column: field: message`, what is allowed and a "did you mean" (an unknown key such as
 * `maxParalel` was silently ignored; a misspelled member was reported without its line). A fleet
 * file with a problem stops apply before anything is read or contacted: exit 2 through the CLI.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fleetFileProblems } from '../../src/local/fleet-file.ts';
import { formatProblem } from '../../src/workspace/manifests.ts';
import { cli, writeManifests } from '../helpers/cli.ts';

const VMS = ['dns-primary', 'git-server', 'email-server'].map((name) => ({ metadata: { name } }));

describe('the fleet file of apply --fleet', () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'pp-fleet-file-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  const problems = (name: string, text: string) => {
    const file = join(dir, name);
    writeFileSync(file, text);
    return fleetFileProblems(file, VMS).map((p) => formatProblem(p).slice(dir.length + 1));
  };

  it('a fleet file as docs/fleet.md shows it has no problem', () => {
    assert.deepEqual(
      problems(
        'ok.yaml',
        'phases:\n  - name: core\n    members: [dns-primary]\n  - name: 2\n    members: [git-server, default/email-server]\n    maxParallel: 2\n',
      ),
      [],
    );
  });

  it('unknown keys, misspelled members, a bad maxParallel, a member twice: each at its line, with what is allowed', () => {
    assert.deepEqual(
      problems(
        'bad.yaml',
        [
          'phases:',
          '  - name: core',
          '    members: [dns-primary, git-sever]',
          '    maxParalel: 2',
          '  - name: apps',
          '    members:',
          '      - dns-primary',
          '    maxParallel: 0',
          'phase: x',
          '',
        ].join('\n'),
      ),
      [
        'bad.yaml:3:28: phases[0].members[1]: "git-sever" is not a ProxmoxVM among the manifests (did you mean \'git-server\'?)',
        "bad.yaml:4:5: phases[0].maxParalel: unknown field 'maxParalel' (did you mean 'maxParallel'?); allowed: name, members, maxParallel",
        "bad.yaml:7:9: phases[1].members[0]: 'dns-primary' is listed in phase core already; a VM is in one phase",
        'bad.yaml:8:18: phases[1].maxParallel: 0 is not a whole number > 0; leave it out for no limit',
        "bad.yaml:9:1: phase: unknown field 'phase' (did you mean 'phases'?); allowed: phases",
      ],
    );
  });

  it('no phases list, a YAML syntax error: one problem each, with the shape or the position', () => {
    assert.deepEqual(problems('none.yaml', 'rollout: []\n'), [
      "none.yaml:1:1: rollout: unknown field 'rollout'; allowed: phases",
      "none.yaml:1:1: phases: missing: expected 'phases: [{name, members: [...], maxParallel?}]'",
    ]);
    assert.match(problems('syntax.yaml', 'phases: [\n')[0]!, /^syntax\.yaml:2:1: YAML syntax error: /);
  });

  it('the CLI: apply stops with exit 2 and the problems on stderr, before looking for a ProviderConfig', async () => {
    const m = join(dir, 'm');
    mkdirSync(m);
    writeManifests(m, [{ name: 'dns-primary' }]);
    const fleet = join(dir, 'cli.yaml');
    writeFileSync(fleet, 'phases:\n  - name: core\n    members: [dns-primary]\n    maxParalel: 2\n');
    const res = await cli(['apply', '-f', m, '--fleet', fleet]);
    assert.equal(res.code, 2, res.stdout + res.stderr);
    assert.equal(
      res.stderr,
      `provider-proxmox: ${fleet}:4:5: phases[0].maxParalel: unknown field 'maxParalel' (did you mean 'maxParallel'?); allowed: name, members, maxParallel\n`,
    );
  });
});
