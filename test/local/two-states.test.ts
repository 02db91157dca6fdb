/**
 * Two `apply` runs of the same manifests with different state files, at the same time (two
 * operators, two CI jobs): they converge to one VM per manifest, and both end Ready on it. Before,
 * each state file made a fleet of its own.
 */
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parseMarker } from '../../src/vm/spec.ts';
import { type CliFixture, cli, cliFixture, writeManifests } from '../helpers/cli.ts';

const POLL = ['--task-poll', '20ms'];

describe('two state files, one fleet', () => {
  let fx: CliFixture;
  before(async () => {
    fx = await cliFixture('pp-two-states-');
  });
  after(async () => {
    await fx.close();
  });

  it('two concurrent applies with different --state converge to one VM per manifest', async () => {
    const manifests = join(fx.dir, 'm');
    mkdirSync(manifests);
    const names = ['twin-1', 'twin-2', 'twin-3'];
    writeManifests(
      manifests,
      names.map((name) => ({ name })),
    );
    const run = (state: string) =>
      cli(['apply', '--yes', '-f', manifests, '--config', fx.config, '--state', join(fx.dir, state), '-q', ...POLL]);
    const [a, b] = await Promise.all([run('a.json'), run('b.json')]);
    assert.equal(a.code, 0, a.stdout + a.stderr);
    assert.equal(b.code, 0, b.stdout + b.stderr);
    const vms = fx.sim.clusters
      .flatMap((c) => [...c.state.vms.values()])
      .filter((v) => names.includes(parseMarker(v.config.description)?.name ?? ''));
    assert.deepEqual(vms.map((v) => parseMarker(v.config.description)!.name).sort(), names, 'one VM per manifest');
    // A run again with either state file finds them all and creates nothing.
    const creates = fx.sim.clusters.reduce((n, c) => n + (c.counters()['POST /nodes/{node}/qemu'] ?? 0), 0);
    const again = await run('b.json');
    assert.equal(again.code, 0, again.stdout + again.stderr);
    assert.equal(
      fx.sim.clusters.reduce((n, c) => n + (c.counters()['POST /nodes/{node}/qemu'] ?? 0), 0),
      creates,
    );
  });
});
