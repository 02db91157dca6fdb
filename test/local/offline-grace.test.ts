/**
 * `apply --offline-grace`: a VM whose node stays offline (Ready False NodeOffline) is waited for
 * that long, then counted failed, and apply ends (exit 1) naming it and what to do, instead of
 * holding every later phase until its --timeout.
 */
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type CliFixture, cli, cliFixture, writeManifests } from '../helpers/cli.ts';

describe('apply and a node that stays offline', () => {
  let fx: CliFixture;
  before(async () => {
    fx = await cliFixture('pp-offline-grace-');
  });
  after(async () => {
    await fx.close();
  });

  it('--offline-grace 1s: the VM on the crashed node is failed after a second, named with the fix; exit 1, not the timeout', async () => {
    const m = join(fx.dir, 'm');
    mkdirSync(m);
    writeManifests(m, [{ name: 'offline-a' }]);
    const args = [
      '-f',
      m,
      '--config',
      fx.config,
      '--state',
      join(fx.dir, 'state.json'),
      '--task-poll',
      '20ms',
      '--yes',
    ];
    const first = await cli(['apply', ...args]);
    assert.equal(first.code, 0, first.stdout + first.stderr);

    const site = fx.sim.cluster('site-1');
    const crash = site.addFault({ kind: 'node-crash', node: 'ml110-01' });
    try {
      const res = await cli(['apply', ...args, '--offline-grace', '1s', '--timeout', '90s']);
      assert.equal(res.code, 1, res.stdout + res.stderr);
      assert.doesNotMatch(res.stdout + res.stderr, /timed out/);
      assert.match(res.stdout + res.stderr, /NodeOffline: node ml110-01 of site site-1 is offline/);
      assert.match(
        res.stdout + res.stderr,
        /1 VM\(s\) on a node offline for longer than --offline-grace \(1s\): offline-a; run apply again once the node is back/,
      );
    } finally {
      site.removeFault(crash);
    }
  });

  it('--help names it, with its default', async () => {
    const res = await cli(['apply', '--help']);
    assert.match(
      res.stdout,
      /--offline-grace <duration>\s+stop waiting for a VM whose node has been offline\s+this long[^-]*\(default: 10m\)/,
    );
  });
});
