/**
 * `apply` and `delete` as an operator expects (issue 11): the plan read from Proxmox first, field
 * by field; no change without a confirmation (a prompt on a terminal, --yes without one); what was
 * done at the end, with the VMs that wait for a reboot; `--reboot-policy IfNeeded` reboots them;
 * `delete --dry-run` lists what would be destroyed.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
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
  /** `cmd --yes` of `path` with a state file of its own (`state`, in the fixture's directory). */
  const runOn = (cmd: string, path: string, state: string) =>
    cli([cmd, '--yes', '-f', path, '--config', fx.config, '--state', join(fx.dir, state), ...POLL]);

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
    assert.match(res.stdout, /Done: 2 created, 0 adopted, 0 updated, 0 rebooted, 0 unchanged, 0 failed\./);
    assert.equal(vms('plan-a').length, 1);
  });

  it('nothing to change: plan and apply print the summary without an empty "Changes" header', async () => {
    const plan = await cli(['plan', '-f', m, '--config', fx.config, '--state', state]);
    assert.equal(plan.code, 0, plan.stdout + plan.stderr);
    assert.match(plan.stdout, /^total: 2 VMs, 2 vCPUs, /m);
    assert.match(plan.stdout, /Plan: 0 to create, 0 to adopt, 0 to update, 0 to reboot, 2 unchanged\./);
    assert.doesNotMatch(plan.stdout, /Changes, read from Proxmox:/);
    // Nothing to confirm: apply goes ahead without --yes.
    const again = await run('apply');
    assert.equal(again.code, 0, again.stdout + again.stderr);
    assert.doesNotMatch(again.stdout, /Changes, read from Proxmox:/);
    assert.match(again.stdout, /Done: 0 created, 0 adopted, 0 updated, 0 rebooted, 2 unchanged, 0 failed\./);
  });

  it('one VM is counted as one: `total: 1 VM, 1 vCPU`', async () => {
    const one = join(fx.dir, 'one');
    mkdirSync(one);
    writeManifests(one, [{ name: 'plan-one' }]);
    const plan = await cli(['plan', '-f', one, '--config', fx.config, '--state', join(fx.dir, 'one.db')]);
    assert.equal(plan.code, 0, plan.stdout + plan.stderr);
    assert.match(plan.stdout, /^total: 1 VM, 1 vCPU, /m);
  });

  it('memory: 1G (decimal, 953.7 MiB): plan and apply warn at its line, naming 1Gi, and go on; the VM gets what was written', async () => {
    const dec = join(fx.dir, 'decimal');
    mkdirSync(dec);
    const [file] = writeManifests(dec, [{ name: 'plan-decimal', memory: '1G' }]);
    const warning =
      /^warning: .*plan-decimal\.yaml:\d+:\d+: spec\.forProvider\.memory: '1G' is 1,000,000,000 bytes, 953\.7 MiB .*write '1Gi'$/m;
    const plan = await cli(['plan', '-f', dec, '--config', fx.config, '--state', join(fx.dir, 'decimal.db')]);
    assert.equal(plan.code, 0, plan.stdout + plan.stderr);
    assert.match(plan.stdout, warning);
    const res = await runOn('apply', file!, 'decimal.db');
    assert.equal(res.code, 0, res.stdout + res.stderr);
    assert.match(res.stderr, warning);
    assert.equal(vms('plan-decimal')[0]?.config.memory, '954');
  });

  it('delete of a VM an operator protected: exit 1 at once, naming the fix; the VM is left running', async () => {
    const dir = join(fx.dir, 'protected');
    mkdirSync(dir);
    writeManifests(dir, [{ name: 'plan-protected' }]);
    const apply = await runOn('apply', dir, 'protected.db');
    assert.equal(apply.code, 0, apply.stdout + apply.stderr);
    const vm = vms('plan-protected')[0]!;
    vm.config.protection = '1';
    const res = await runOn('delete', dir, 'protected.db');
    assert.equal(res.code, 1, res.stdout + res.stderr);
    assert.match(res.stdout + res.stderr, /VMProtected.*qm set \d+ --protection 0/s);
    assert.equal(vms('plan-protected')[0]?.status, 'running', 'left running');
  });

  it("a create refused for contention on its storage's lock (cfs-lock timeout, many creates on a shared storage): retried, apply ends 0", async () => {
    // qemu-server's create dies with PVE's storage lock timeout and removes what it made
    // (pve-cluster Cluster.pm cfs_lock: "got lock request timeout"); nothing of the spec is wrong,
    // and the next create goes through. Before, apply stopped on it as CreateFailed (exit 1).
    const dir = join(fx.dir, 'contention');
    mkdirSync(dir);
    writeManifests(dir, [{ name: 'plan-contended' }]);
    const fault = fx.sim.cluster('site-1').addFault({
      kind: 'task',
      type: 'qmcreate',
      action: 'fail',
      at: 'start',
      message: "unable to create VM 0 - cfs-lock 'storage-local-lvm' error: got lock request timeout",
      count: 1,
    });
    try {
      const res = await runOn('apply', dir, 'contention.db');
      assert.equal(res.code, 0, res.stdout + res.stderr);
      assert.equal(vms('plan-contended').length, 1);
    } finally {
      fx.sim.cluster('site-1').removeFault(fault);
    }
  });

  it('apply and delete refused for want of --yes leave no empty state directory behind', async () => {
    const root = join(fx.dir, 'state-root');
    const before = process.env.PROVIDER_PROXMOX_STATE_DIR;
    process.env.PROVIDER_PROXMOX_STATE_DIR = root;
    try {
      const other = join(fx.dir, 'other');
      mkdirSync(other);
      writeManifests(other, [{ name: 'plan-other' }]);
      const apply = await cli(['apply', '-f', other, '--config', fx.config, ...POLL]);
      assert.equal(apply.code, 2, apply.stdout + apply.stderr);
      assert.ok(
        !existsSync(root),
        `nothing under ${root}: ${existsSync(root) ? readdirSync(root, { recursive: true }) : ''}`,
      );
      // plan-a and plan-b exist: a delete from a state root that does not know them finds them by marker.
      const del = await cli(['delete', '-f', m, '--config', fx.config, ...POLL]);
      assert.equal(del.code, 2, del.stdout + del.stderr);
      assert.ok(!existsSync(root), `nothing under ${root}`);
    } finally {
      if (before === undefined) delete process.env.PROVIDER_PROXMOX_STATE_DIR;
      else process.env.PROVIDER_PROXMOX_STATE_DIR = before;
    }
  });

  it('a memory change on a running VM: shown as waiting for the next boot, named at the end; IfNeeded reboots', async () => {
    writeManifests(m, [{ name: 'plan-a', memory: '2Gi' }, { name: 'plan-b' }]);
    const res = await run('apply', '--yes');
    assert.equal(res.code, 0, res.stdout + res.stderr);
    assert.match(res.stdout, /~ update-reboot\s+default\/plan-a \(VM \d+ on ml110-01\)/);
    assert.match(res.stdout, /memory: 1024 MiB -> 2048 MiB \(at the next boot\)/);
    assert.match(res.stdout, /1 VM\(s\) run with changes Proxmox applies only at the next boot: plan-a \(memory\)/);
    const vm = vms('plan-a')[0]!;
    assert.equal(vm.config.memory, '1024', 'pending, not applied');

    const reboot = await run('apply', '--yes', '--reboot-policy', 'IfNeeded');
    assert.equal(reboot.code, 0, reboot.stdout + reboot.stderr);
    assert.match(reboot.stdout, /↻ reboot\s+default\/plan-a/);
    assert.doesNotMatch(reboot.stdout, /applies only at the next boot/);
    assert.equal(vms('plan-a')[0]!.config.memory, '2048');
  });

  it('a memory change applied with --reboot-policy IfNeeded in one run: Done counts it updated and rebooted', async () => {
    writeManifests(m, [{ name: 'plan-a', memory: '3Gi' }, { name: 'plan-b' }]);
    const res = await run('apply', '--yes', '--reboot-policy', 'IfNeeded');
    assert.equal(res.code, 0, res.stdout + res.stderr);
    assert.match(res.stdout, /~ update-reboot\s+default\/plan-a/);
    assert.match(res.stdout, /Done: 0 created, 0 adopted, 1 updated, 1 rebooted, 1 unchanged, 0 failed\./);
    assert.equal(vms('plan-a')[0]!.config.memory, '3072');
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
    // The flag the refusal suggests besides --yes.
    assert.match(refused.stderr, /pass --yes \(or --auto-approve\)/);
    const del = await run('delete', '--auto-approve');
    assert.equal(del.code, 0, del.stdout + del.stderr);
    assert.equal(vms('plan-a').length + vms('plan-b').length, 0);
  });
});

describe("apply's Done line counts what happened, not the plan", () => {
  let fx: CliFixture;
  before(async () => {
    fx = await cliFixture('pp-apply-done-');
  });
  after(async () => {
    await fx.close();
  });

  it('two VMs that fail for good (a missing bridge, a missing image): 0 created, 2 failed', async () => {
    const m = join(fx.dir, 'm');
    mkdirSync(m);
    writeManifests(m, [
      { name: 'done-bridge', network: 'vmbr9' },
      { name: 'done-image', image: 'local:iso/no-such-image.img' },
    ]);
    const res = await cli(['apply', '--yes', '-f', m, '--config', fx.config, '--state', join(fx.dir, 's.db'), ...POLL]);
    assert.equal(res.code, 1, res.stdout + res.stderr);
    assert.match(res.stdout, /2 VM\(s\) failed/);
    assert.match(res.stdout, /Done: 0 created, 0 adopted, 0 updated, 0 rebooted, 0 unchanged, 2 failed\./);
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
