/**
 * `delete -f` with a state file that does not hold the resources (lost, or another one): their VMs
 * are found by this installation's ownership marker and destroyed; a manifest with no VM in Proxmox
 * is reported as such and nothing is created for it. Before, delete said "nothing to delete" and
 * left every VM running.
 */
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Simulator } from '../../src/sim/index.ts';
import { parseMarker } from '../../src/vm/spec.ts';
import { type CliFixture, cli, cliFixture, writeManifests } from '../helpers/cli.ts';

const POLL = ['--task-poll', '20ms'];

describe('delete with a lost state file', () => {
  let fx: CliFixture;
  let sim: Simulator;
  let dir: string;
  let config: string;
  before(async () => {
    fx = await cliFixture('pp-delete-lost-');
    ({ sim, dir, config } = fx);
  });
  after(async () => {
    await fx.close();
  });

  const ours = (name: string) =>
    sim.clusters
      .flatMap((c) => [...c.state.vms.values()])
      .filter((v) => parseMarker(v.config.description)?.name === name);

  it('finds the VMs by marker, destroys them, and creates nothing for a manifest without a VM', async () => {
    const applied = join(dir, 'applied');
    mkdirSync(applied);
    writeManifests(applied, [{ name: 'lost-1' }, { name: 'lost-2' }]);
    const first = await cli([
      'apply',
      '--yes',
      '-f',
      applied,
      '--config',
      config,
      '--state',
      join(dir, 'a.json'),
      ...POLL,
    ]);
    assert.equal(first.code, 0, first.stdout + first.stderr);
    assert.equal(ours('lost-1').length + ours('lost-2').length, 2);

    // The same manifests plus one never applied, with a state file that knows none of them.
    const all = join(dir, 'all');
    mkdirSync(all);
    writeManifests(all, [{ name: 'lost-1' }, { name: 'lost-2' }, { name: 'never-applied' }]);
    const creates = sim.clusters.reduce((n, c) => n + (c.counters()['POST /nodes/{node}/qemu'] ?? 0), 0);
    const del = await cli(['delete', '--yes', '-f', all, '--config', config, '--state', join(dir, 'b.json'), ...POLL]);
    assert.equal(del.code, 0, del.stdout + del.stderr);
    assert.match(del.stdout, /3 of these resources are not in the state file/);
    assert.match(del.stdout, /deleted 2 VM\(s\); 1 resource\(s\) had no VM in Proxmox/);
    assert.equal(ours('lost-1').length + ours('lost-2').length, 0, 'both VMs destroyed');
    assert.equal(ours('never-applied').length, 0, 'nothing created');
    assert.equal(
      sim.clusters.reduce((n, c) => n + (c.counters()['POST /nodes/{node}/qemu'] ?? 0), 0),
      creates,
      'no create sent',
    );
  });
});
