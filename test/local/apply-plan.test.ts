/**
 * `apply` and `delete` as an operator expects (issue 11): the plan read from Proxmox first, field
 * by field; no change without a confirmation (a prompt on a terminal, --yes without one); what was
 * done at the end, with the VMs that wait for a reboot; `--reboot-policy IfNeeded` reboots them;
 * `delete --dry-run` lists what would be destroyed.
 */
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parseMarker } from '../../src/vm/spec.ts';
import { type CliFixture, cli, cliFixture, writeManifests } from '../helpers/cli.ts';
import { twoNodeTopology } from '../vm/harness.ts';

const POLL = ['--task-poll', '20ms'];

describe('apply and delete: plan, confirmation, summary', () => {
  let fx: CliFixture;
  let m: string;
  let state: string;
  before(async () => {
    fx = await cliFixture('pp-apply-plan-');
    m = join(fx.dir, 'm');
    mkdirSync(m);
    state = join(fx.dir, 'state.json');
  });
  after(async () => {
    await fx.close();
  });

  const vms = (name: string) =>
    fx.sim.clusters
      .flatMap((c) => [...c.state.vms.values()])
      .filter((v) => parseMarker(v.config.description)?.name === name);
  const run = (cmd: string, ...extra: string[]) =>
    cli([cmd, '-f', m, '--config', fx.config, '--state', state, ...POLL, ...extra]);

  it('without a terminal and without --yes, apply changes nothing and says how to go ahead (exit 2)', async () => {
    writeManifests(m, [{ name: 'plan-a' }, { name: 'plan-b' }]);
    const res = await run('apply');
    assert.equal(res.code, 2, res.stdout + res.stderr);
    assert.match(res.stdout, /\+ create\s+default\/plan-a/);
    assert.match(res.stderr, /pass --yes \(or --auto-approve\)/);
    assert.equal(vms('plan-a').length + vms('plan-b').length, 0);
  });

  it('apply --yes: the plan, then what was done', async () => {
    const res = await run('apply', '--yes');
    assert.equal(res.code, 0, res.stdout + res.stderr);
    assert.match(res.stdout, /Changes, read from Proxmox:/);
    assert.match(res.stdout, /Plan: 2 to create, 0 to adopt, 0 to update, 0 to reboot, 0 unchanged\./);
    assert.match(res.stdout, /Done: 2 created, 0 adopted, 0 updated, 0 rebooted, 0 unchanged\./);
    assert.equal(vms('plan-a').length, 1);
  });

  it('a memory change on a running VM: shown as waiting for the next boot, named at the end; IfNeeded reboots', async () => {
    writeManifests(m, [{ name: 'plan-a', memory: '2Gi' }, { name: 'plan-b' }]);
    const res = await run('apply', '--yes');
    assert.equal(res.code, 0, res.stdout + res.stderr);
    assert.match(res.stdout, /~ update-reboot\s+default\/plan-a \(VM \d+ on ml110-01\)/);
    assert.match(res.stdout, /memory: 1024 -> 2048 \(at the next boot\)/);
    assert.match(res.stdout, /1 VM\(s\) run with changes Proxmox applies only at the next boot: plan-a \(memory\)/);
    const vm = vms('plan-a')[0]!;
    assert.equal(vm.config.memory, '1024', 'pending, not applied');

    const reboot = await run('apply', '--yes', '--reboot-policy', 'IfNeeded');
    assert.equal(reboot.code, 0, reboot.stdout + reboot.stderr);
    assert.match(reboot.stdout, /↻ reboot\s+default\/plan-a/);
    assert.doesNotMatch(reboot.stdout, /applies only at the next boot/);
    assert.equal(vms('plan-a')[0]!.config.memory, '2048');
  });

  it('delete --dry-run lists the VMs it would destroy; delete needs --yes without a terminal', async () => {
    const dry = await run('delete', '--dry-run');
    assert.equal(dry.code, 0, dry.stdout + dry.stderr);
    assert.match(dry.stdout, /- default\/plan-a: VM \d+ on ml110-01 \(running\)/);
    assert.match(dry.stdout, /2 VM\(s\) to destroy\./);
    assert.equal(vms('plan-a').length, 1, 'nothing destroyed');
    const refused = await run('delete');
    assert.equal(refused.code, 2, refused.stdout + refused.stderr);
    assert.equal(vms('plan-a').length, 1, 'nothing destroyed');
    const del = await run('delete', '--yes');
    assert.equal(del.code, 0, del.stdout + del.stderr);
    assert.equal(vms('plan-a').length + vms('plan-b').length, 0);
  });
});

describe('apply stops on a permanent error after one confirmation', () => {
  let fx: CliFixture;
  before(async () => {
    fx = await cliFixture('pp-apply-permanent-');
  });
  after(async () => {
    await fx.close();
  });

  it('a wrong token: exit 1 within seconds, with the reason and its fix; nothing created', async () => {
    const m = join(fx.dir, 'm');
    mkdirSync(m);
    writeManifests(m, [{ name: 'perm-a' }]);
    const bad = join(fx.dir, 'bad.yaml');
    writeFileSync(
      bad,
      readFileSync(fx.config, 'utf8').replace(
        /token: c0ffee00-[0-9a-f-]+/,
        'token: 00000000-0000-4000-8000-00000000beef',
      ),
    );
    const t = Date.now();
    const res = await cli(['apply', '--yes', '-f', m, '--config', bad, '--state', join(fx.dir, 's.json'), ...POLL]);
    const seconds = (Date.now() - t) / 1000;
    assert.equal(res.code, 1, res.stdout + res.stderr);
    assert.match(res.stdout, /AuthenticationFailed/);
    assert.match(res.stdout, /check the credentials Secret of site site-1/);
    assert.ok(seconds < 60, `stopped after ${seconds} s, not at the 30-minute timeout`);
    assert.doesNotMatch(res.stdout + res.stderr, /00000000-0000-4000-8000-00000000beef/);
  });
});

describe("apply's plan and a site without quorum", () => {
  let fx: CliFixture;
  before(async () => {
    fx = await cliFixture('pp-apply-quorum-', { topology: twoNodeTopology('quorum.yaml') });
  });
  after(async () => {
    await fx.close();
  });

  it("pve-b down (two nodes, no QDevice): apply's plan warns of it, naming the fix, before anything is sent; quorate again, no warning", async () => {
    const site = fx.sim.cluster('site-1');
    const m = join(fx.dir, 'm');
    mkdirSync(m);
    writeManifests(m, [{ name: 'plan-q', node: 'pve-a' }]);
    const args = ['-f', m, '--config', fx.config, '--state', join(fx.dir, 'state.json'), ...POLL];
    const crash = site.addFault({ kind: 'node-crash', node: 'pve-b' });
    try {
      const res = await cli(['apply', ...args]);
      assert.equal(res.code, 2, res.stdout + res.stderr);
      assert.match(res.stdout, /\+ create\s+default\/plan-q/);
      assert.match(
        res.stdout,
        /^ {2}! warning: site site-1: cluster \S+ has no quorum \(1 of 2 nodes online \(down: pve-b\)\): Proxmox refuses creates, starts and config changes until it is back, and apply waits on the changes planned there \(NoQuorum\)\. Fix: bring pve-b back .*pvecm expected/m,
      );
      assert.equal(site.state.vms.size, 0, 'nothing sent');
      const dry = await cli(['apply', '--dry-run', ...args]);
      assert.equal(dry.stdout.match(/! warning: site site-1: cluster \S+ has no quorum/g)?.length, 1, dry.stdout);
      const json = await cli(['apply', '--dry-run', '-o', 'json', ...args]);
      assert.match(JSON.parse(json.stdout)[0].warning, /has no quorum/);
    } finally {
      site.removeFault(crash);
    }
    const quorate = await cli(['apply', ...args]);
    assert.equal(quorate.code, 2, quorate.stdout + quorate.stderr);
    assert.doesNotMatch(quorate.stdout, /warning/, 'quorate again: no warning');
  });
});
