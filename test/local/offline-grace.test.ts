/**
 * `apply --offline-grace` and `delete --offline-grace`: a VM whose node stays offline (NodeOffline)
 * is waited for that long, then counted failed, and the command ends (exit 1) naming it and what
 * to do, instead of holding every later phase, or the delete, until its --timeout. A delete says
 * why the VM cannot be destroyed meanwhile (it read the config at every reconcile, `No route to
 * host`), and goes on once the node is back.
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
  /** The manifests (one VM, offline-a), config and state of these tests, without a confirmation. */
  const argsOf = () => [
    ...['-f', join(fx.dir, 'm'), '--config', fx.config, '--state', join(fx.dir, 'state.json')],
    ...['--task-poll', '20ms', '--yes'],
  ];

  it('--offline-grace 1s: the VM on the crashed node is failed after a second, named with the fix; exit 1, not the timeout', async () => {
    mkdirSync(join(fx.dir, 'm'));
    writeManifests(join(fx.dir, 'm'), [{ name: 'offline-a' }]);
    const args = argsOf();
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

  it('delete --offline-grace 1s: the VM on the crashed node is not deleted, with why and the fix; deleted once the node is back', async () => {
    const args = argsOf();
    const site = fx.sim.cluster('site-1');
    const crash = site.addFault({ kind: 'node-crash', node: 'ml110-01' });
    try {
      // The plan names the VM it cannot read (the list still shows the node online) and counts it:
      // it said `kept, PlanFailed` and the delete went on to destroy it, and a dry run, which did
      // not read the state file, could not name the VM.
      const unread =
        /\? default\/offline-a: VM (\d+) on ml110-01, not planned \(NodeUnreachable: node ml110-01 of site site-1 did not answer the read of VM \1 \(.*No route to host\).*; the delete destroys it if it is still this resource's\n0 VM\(s\) to destroy, and 1 more not planned \(\?\)\./;
      const dry = await cli(['delete', ...args, '--dry-run']);
      assert.equal(dry.code, 0, dry.stdout + dry.stderr);
      assert.match(dry.stdout, unread);
      const res = await cli(['delete', ...args, '--offline-grace', '1s', '--timeout', '90s']);
      assert.equal(res.code, 1, res.stdout + res.stderr);
      assert.match(res.stdout, unread);
      assert.match(
        res.stdout,
        /NodeOffline: delete failed: node ml110-01 of site site-1 is offline: VM \d+ cannot be destroyed until it is back, and the delete waits for it\. If the node is gone for good, move the VM's config to a node that is up \(on that node: mv \/etc\/pve\/nodes\/ml110-01\/qemu-server\/\d+\.conf/,
      );
      assert.match(
        res.stdout,
        /1 VM\(s\) not deleted\n1 of them on a node offline for longer than --offline-grace \(1s\): offline-a/,
      );
      // (The table's MESSAGE says it, not a failed read: `No route to host` only in the plan read before the list showed the node down.)
      assert.doesNotMatch(res.stdout.split('NAME')[1] ?? '', /No route to host/);
    } finally {
      site.removeFault(crash);
    }
    const again = await cli(['delete', ...args]);
    assert.equal(again.code, 0, again.stdout + again.stderr);
    assert.equal([...site.state.vms.values()].filter((v) => v.config.name === 'offline-a').length, 0, again.stdout);
  });

  it('--help names it, with its default', async () => {
    for (const command of ['apply', 'delete']) {
      const res = await cli([command, '--help']);
      assert.match(
        res.stdout,
        /--offline-grace <duration>\s+stop waiting for a VM whose node has been offline\s+this long[^-]*\(default: 10m\)/,
      );
    }
  });
});
