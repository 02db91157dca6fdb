/**
 * gc is scoped to one installation and one state file, on a simulated site shared the ways
 * production shares one: two state files of one CLI user (fleet A of four VMs, state B of one),
 * an operator's clone of one of our VMs, and two teams whose ProviderConfigs name different
 * installations. The reproductions of what gc used to do there: `gc --state B --delete --yes`
 * deleted fleet A; a `{}` or `[]` state file read as "no resources" (every VM an orphan); a clone
 * (it copies the description, marker included) was deleted as an orphan; one team's gc deleted
 * the other's VMs.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parse, stringify } from 'yaml';
import { parseProviderConfig } from '../../src/api/provider-config-load.ts';
import { gcCommand } from '../../src/fleet/commands.ts';
import type { GcFinding } from '../../src/fleet/gc.ts';
import { applyCommand } from '../../src/local/commands.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { providerConfigYaml } from '../../src/sim/provider-config.ts';
import { UsageError } from '../../src/workspace/arguments.ts';
import { capture } from '../helpers/capture.ts';
import { cli } from '../helpers/cli.ts';
import { raw, startTestSim, waitTask } from '../helpers/sim.ts';

describe('gc on a shared site', () => {
  let sim: Simulator;
  let dir: string;
  let config: string;
  let stateA: string;
  let stateB: string;
  const fleetA = ['a-1', 'a-2', 'a-3', 'a-4'];

  const vms = () =>
    [...sim.cluster('site-1').state.vms.values()]
      .filter((v) => v.config.template !== '1')
      .map((v) => ({ vmid: v.vmid, name: v.config.name!, status: v.status, description: v.config.description }));
  const names = () =>
    vms()
      .map((v) => v.name)
      .sort();
  const vmidOf = (name: string) => vms().find((v) => v.name === name)!.vmid;
  const counters = () => sim.clusters.reduce((n, c) => n + Object.values(c.counters()).reduce((a, b) => a + b, 0), 0);
  const gc = (a: Omit<Parameters<typeof gcCommand>[0], 'now'>) => gcCommand({ ...a, now: () => sim.clock.now() });
  const json = async (a: Omit<Parameters<typeof gcCommand>[0], 'now' | 'out' | 'output'>) => {
    const c = capture();
    const code = await gc({ ...a, output: 'json', out: c.out });
    return { code, found: JSON.parse(c.text()) as GcFinding[] };
  };

  /** A ProviderConfig file for the simulator; `installation` sets spec.installation. */
  function configFile(file: string, opts: { installation?: string } = {}): string {
    const docs = providerConfigYaml(sim)
      .split(/^---$/m)
      .map((d) => parse(d) as { spec?: Record<string, unknown> });
    const config = docs.find((d) => (d as { kind?: string }).kind === 'ClusterProviderConfig');
    if (opts.installation) config!.spec!.installation = opts.installation;
    writeFileSync(file, docs.map((d) => stringify(d)).join('---\n'));
    return file;
  }

  /** Apply running VMs (cloned from the site's template) into `state` with `cfg`. */
  async function apply(cfg: string, state: string, vmNames: string[]): Promise<void> {
    const m = join(dir, `${vmNames.join('_')}-${Math.random().toString(36).slice(2)}.yaml`);
    writeFileSync(
      m,
      vmNames
        .map(
          (n) =>
            `apiVersion: proxmox.sankofa.io/v1alpha1\nkind: ProxmoxVM\nmetadata:\n  name: ${n}\nspec:\n  forProvider:\n    site: site-1\n    node: ml110-01\n    cpu: 1\n    memory: 512Mi\n    template: { vmid: 9000 }\n`,
        )
        .join('---\n'),
    );
    const c = capture();
    const code = await applyCommand({
      files: [m],
      loadedConfig: parseProviderConfig(readFileSync(cfg, 'utf8'), cfg),
      state,
      taskPollMs: 10,
      agentPollMs: 10,
      quiet: true,
      out: c.out,
    });
    assert.equal(code, 0, c.text());
  }

  before(async () => {
    sim = await startTestSim();
    dir = mkdtempSync(join(tmpdir(), 'pp-gc-scope-'));
    config = configFile(join(dir, 'providerconfig.yaml'));
    stateA = join(dir, 'a.json');
    stateB = join(dir, 'b.json');
    await apply(config, stateA, fleetA);
    await apply(config, stateB, ['b-1']);
    assert.ok(vms().every((v) => v.status === 'running'));
    // The fleets are now well older than any scan (more than the 5 min clock-skew margin), so
    // nothing below is spared by the creation-time rule: only by whose VMs they are.
    sim.clock.advance(10 * 60_000);
  });
  after(async () => {
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('gc --state B --delete --yes deletes nothing of fleet A and says why (running, uids B never held)', async () => {
    const before = names();
    const { code, found } = await json({ config, state: stateB, delete: true, yes: true });
    assert.equal(code, 1, 'kept candidates are worth a look');
    assert.deepEqual(
      found.map((f) => [f.name, f.kind, f.deletable, f.status]).sort(),
      fleetA.map((n) => [n, 'orphan', false, 'running']),
    );
    for (const f of found)
      assert.match(
        f.action!,
        /^kept: looks like another state file's fleet \(same installation, a uid this state file never held, running\): not deleted\. If it is yours, apply its manifest with the state file that manages it; if it is really abandoned, stop it and run gc with --include-unknown; to keep two fleets apart, give each its own spec\.installation$/,
      );
    assert.deepEqual(names(), before);

    // The table says it once for all: this is probably the wrong state file.
    const t = capture();
    assert.equal(await gc({ config, state: stateB, out: t.out }), 1);
    assert.match(
      t.text(),
      /\nAll 4 orphan candidate\(s\) are running VMs of this installation whose uids this state file never held: it is probably not the state file that manages them \(check --state\); none of them is deleted\.\n$/,
    );

    // The reproduction through the real CLI; and from A's side, B's VM is just as safe.
    const res = await cli(['gc', '--config', config, '--state', stateB, '--delete', '--yes']);
    assert.equal(res.code, 1, res.stdout + res.stderr);
    assert.match(res.stdout, /All 4 orphan candidate\(s\) are running VMs/);
    const fromA = await json({ config, state: stateA, delete: true, yes: true, includeUnknown: true });
    assert.deepEqual(
      fromA.found.map((f) => [f.name, f.kind, f.action?.replace(/ \(.*/, '')]),
      [['b-1', 'orphan', "kept: looks like another state file's fleet"]],
    );
    assert.deepEqual(names(), before);
  });

  it('a state file holding {} or [] (or nothing, or not JSON) is an error naming it, exit 2; nothing is contacted or deleted', async () => {
    const before = names();
    for (const [label, text] of [
      ['{}', '{}'],
      ['[]', '[]'],
      ['empty', ''],
      ['not JSON', '{"objects": ['],
    ] as const) {
      const file = join(dir, `bad-${label.replace(/\W/g, '')}.json`);
      writeFileSync(file, text);
      for (const c of sim.clusters) c.resetCounters();
      await assert.rejects(
        gc({ config, state: file, delete: true, yes: true }),
        (e: Error) =>
          e instanceof UsageError && e.message.startsWith(`${file}: not a usable provider-proxmox state file`),
        label,
      );
      assert.equal(counters(), 0, `${label}: no request reached the simulator`);
    }
    for (const text of ['{}', '[]']) {
      const file = join(dir, 'bad-cli.json');
      writeFileSync(file, text);
      const res = await cli(['gc', '--config', config, '--state', file, '--delete', '--yes']);
      assert.equal(res.code, 2, res.stdout + res.stderr);
      assert.match(res.stderr, /bad-cli\.json: not a usable provider-proxmox state file/);
      assert.equal(res.stdout, '');
    }
    assert.deepEqual(names(), before);
  });

  it("a state file of another installation is refused: gc would take that installation's VMs for its own", async () => {
    const file = join(dir, 'other-installation.json');
    writeFileSync(file, JSON.stringify({ version: 2, installation: 'team-x', rv: 1, objects: [], retired: [] }));
    await assert.rejects(
      gc({ config, state: file, delete: true, yes: true }),
      (e: Error) =>
        e instanceof UsageError &&
        e.message.startsWith(
          `${file}: this state file belongs to installation 'team-x', but the ProviderConfig says 'cli-default'`,
        ),
    );
  });

  it("an operator's clone of one of our VMs (it copies the marker) is listed as a copy and never deleted", async () => {
    const c = sim.cluster('site-1');
    const source = vmidOf('a-1');
    const r = await raw(c.url, 'POST', `/nodes/ml110-01/qemu/${source}/clone`, {
      form: { newid: '750', name: 'a-1-by-hand', full: '1' },
    });
    assert.equal(r.status, 200, r.text);
    assert.equal((await waitTask(c.url, 'ml110-01', (r.json as { data: string }).data)).exitstatus, 'OK');
    const clone = vms().find((v) => v.vmid === 750)!;
    assert.equal(clone.status, 'stopped');
    assert.match(clone.description ?? '', new RegExp(`provider-proxmox\\.owner: default/a-1 uid=\\S+ vmid=${source} `));
    sim.clock.advance(10 * 60_000);

    // Stopped, this installation's marker, a resource A has: only the VMID tells it is a copy.
    // --include-unknown (which deletes stopped VMs of unknown uids) does not make it deletable.
    const { found } = await json({ config, state: stateA, delete: true, yes: true, includeUnknown: true });
    const copy = found.find((f) => f.vmid === 750)!;
    assert.equal(copy.kind, 'copy');
    assert.equal(
      copy.detail,
      `not ours: a copy of VM ${source} (a clone copies the description, marker included); never deleted`,
    );
    assert.equal(copy.action, `kept: ${copy.detail}`);
    // From B, whose state never held a-1: a stopped VM of this installation with an unknown uid,
    // which --include-unknown deletes, were it not a copy.
    const fromB = await json({ config, state: stateB, delete: true, yes: true, includeUnknown: true });
    assert.deepEqual(
      fromB.found.filter((f) => f.vmid === 750).map((f) => [f.kind, f.action]),
      [['copy', `kept: ${copy.detail}`]],
    );
    assert.ok(
      vms().some((v) => v.vmid === 750),
      'the clone is still there',
    );
    // A copy alone is nothing to collect.
    const t = capture();
    await gc({ config, state: stateA, out: t.out });
    assert.match(t.text(), /\s750\s+a-1-by-hand\s+copy\s+default\/a-1\s+stopped\s+not ours: a copy of VM/);
  });

  it("two installations on one site never see each other's VMs as orphans", async () => {
    // Same resource names in both teams: only the installation tells their VMs apart.
    const cfgA = configFile(join(dir, 'team-a.yaml'), { installation: 'team-a' });
    const cfgB = configFile(join(dir, 'team-b.yaml'), { installation: 'team-b' });
    const tA = join(dir, 'team-a.json');
    const tB = join(dir, 'team-b.json');
    await apply(cfgA, tA, ['web-1', 'web-2']);
    await apply(cfgB, tB, ['web-1', 'web-2', 'web-3']);
    // Stopped, so that --include-unknown would delete them if either team took the other's for its own.
    const c = sim.cluster('site-1');
    for (const v of vms().filter((x) => x.name.startsWith('web-'))) {
      const r = await raw(c.url, 'POST', `/nodes/ml110-01/qemu/${v.vmid}/status/stop`);
      assert.equal(r.status, 200, r.text);
      assert.equal((await waitTask(c.url, 'ml110-01', (r.json as { data: string }).data)).exitstatus, 'OK');
    }
    // /cluster/resources (what gc's inventory reads) shows a status as of pvestatd's last round.
    for (let i = 0; ; i++) {
      const r = await raw(c.url, 'GET', '/cluster/resources?type=vm');
      const rows = (r.json as { data: Array<{ name?: string; status?: string }> }).data;
      if (rows.filter((x) => x.name?.startsWith('web-')).every((x) => x.status === 'stopped')) break;
      assert.ok(i < 1000, 'pvestatd never reported the team VMs stopped');
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    sim.clock.advance(10 * 60_000);
    const before = names();
    for (const [cfg, st, other, otherCount] of [
      [cfgA, tA, 'team-b', 3],
      [cfgB, tB, 'team-a', 2],
    ] as const) {
      const { code, found } = await json({ config: cfg, state: st, delete: true, yes: true, includeUnknown: true });
      assert.equal(code, 0, JSON.stringify(found.filter((f) => f.kind !== 'managed-elsewhere')));
      assert.ok(found.every((f) => f.kind === 'managed-elsewhere' && f.action === undefined));
      assert.equal(found.filter((f) => f.installation === other).length, otherCount);
      // The CLI user's fleets (cli-default) and the clone are other installations' too.
      assert.equal(found.filter((f) => f.installation === 'cli-default').length, fleetA.length + 2);
      const t = capture();
      assert.equal(await gc({ config: cfg, state: st, out: t.out }), 0);
      assert.equal(
        t.text(),
        [
          'No orphaned, stuck or half-created VMs.',
          '',
          `site-1: ${fleetA.length + 2} VM(s) of installation 'cli-default': managed elsewhere, never deleted from here`,
          `site-1: ${otherCount} VM(s) of installation '${other}': managed elsewhere, never deleted from here`,
          '',
        ].join('\n'),
      );
    }
    assert.deepEqual(names(), before);
  });
});
