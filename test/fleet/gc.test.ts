/**
 * `gc` against the in-process simulator, one site with every kind of VM gc tells apart: a true
 * orphan (its resource was deleted from the state file with deletionPolicy Orphan, so its uid is
 * in `retired`), a half-created VM of an existing resource, a stopped VM of this installation
 * whose uid the state file never held, an old-format marker of an unknown uid, another
 * installation's VM, and foreign VMs (no marker, even with our tag or a create lock). The report
 * lists each with its kind; `--delete --yes` deletes only the true orphan; `--include-unknown`
 * adds the stopped unknown ones; `--include-half-created` the half-created one (root@pam only);
 * foreign and other installations' VMs are never touched. `--delete` without `--yes` is a usage
 * error (exit 2) that contacts nothing.
 *
 * Every planted VM is made older than the scan by advancing the simulator's clock, which gc is
 * given as its own: deletion skips VMs created after (or just before) the scan started.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parse, stringify } from 'yaml';
import { parseProviderConfig } from '../../src/api/provider-config-load.ts';
import type { ProxmoxVM } from '../../src/api/proxmoxvm.ts';
import { gcCommand } from '../../src/fleet/commands.ts';
import type { GcFinding } from '../../src/fleet/gc.ts';
import { applyCommand, deleteCommand } from '../../src/local/commands.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { providerConfigYaml } from '../../src/sim/provider-config.ts';
import { UsageError } from '../../src/workspace/arguments.ts';
import { readStateFile } from '../../src/workspace/state-file.ts';
import { capture } from '../helpers/capture.ts';
import { cli } from '../helpers/cli.ts';
import { ROOT_PASSWORD, raw, startTestSim, waitTask } from '../helpers/sim.ts';

/** The simulator's config is named `default`: the CLI's installation is `cli-default`. */
const INSTALLATION = 'cli-default';

describe('gc', () => {
  let sim: Simulator;
  let dir: string;
  let config: string;
  let rootConfig: string;
  let state: string;
  let keepUid: string;
  let goneUid: string;
  let goneVmid: number;
  const strangerUid = randomUUID();
  const legacyUid = randomUUID();

  /** Create a VM straight through the API (as a crashed provider, a person or another tool would). */
  async function plant(
    vmid: number,
    name: string,
    opts: { description?: string; tags?: string; lock?: 'create' } = {},
  ) {
    const c = sim.cluster('site-1');
    const r = await raw(c.url, 'POST', '/nodes/ml110-01/qemu', {
      form: {
        vmid: String(vmid),
        name,
        memory: '512',
        ...(opts.description ? { description: opts.description } : {}),
        ...(opts.tags ? { tags: opts.tags } : {}),
      },
    });
    assert.equal(r.status, 200, r.text);
    const t = await waitTask(c.url, 'ml110-01', (r.json as { data: string }).data);
    assert.equal(t.exitstatus, 'OK');
    if (opts.lock) c.addFault({ kind: 'lock', vmid, lock: opts.lock, flock: false });
  }
  const marker = (owner: string, uid: string, vmid: number, installation = INSTALLATION) =>
    `provider-proxmox.owner: ${owner} uid=${uid} vmid=${vmid} installation=${installation}`;

  const names = () =>
    [...sim.cluster('site-1').state.vms.values()]
      .filter((v) => v.config.template !== '1')
      .map((v) => v.config.name!)
      .sort();
  const counters = () => sim.clusters.reduce((n, c) => n + Object.values(c.counters()).reduce((a, b) => a + b, 0), 0);
  /** gc on the simulator's clock. */
  const gc = (a: Omit<Parameters<typeof gcCommand>[0], 'now'>) => gcCommand({ ...a, now: () => sim.clock.now() });
  const vmManifest = (name: string, extra = '') =>
    `apiVersion: proxmox.sankofa.io/v1alpha1\nkind: ProxmoxVM\nmetadata:\n  name: ${name}\nspec:\n${extra}  forProvider:\n    site: site-1\n    node: ml110-01\n    cpu: 1\n    memory: 512Mi\n    template: { vmid: 9000 }\n`;

  before(async () => {
    sim = await startTestSim();
    dir = mkdtempSync(join(tmpdir(), 'pp-gc-'));
    config = join(dir, 'providerconfig.yaml');
    writeFileSync(config, providerConfigYaml(sim));
    // The same sites with root@pam and its password (which may unlock VMs over the API).
    const docs = providerConfigYaml(sim)
      .split(/^---$/m)
      .map((d) => parse(d) as Record<string, unknown>);
    docs[0]!.stringData = { username: 'root@pam', password: ROOT_PASSWORD };
    rootConfig = join(dir, 'root-config.yaml');
    writeFileSync(rootConfig, docs.map((d) => stringify(d)).join('---\n'));

    // gc-keep is managed the normal way: in the state file, never an orphan. gc-gone is deleted
    // from the state file with deletionPolicy Orphan: its VM stays, its uid goes to `retired`.
    const keep = join(dir, 'keep.yaml');
    writeFileSync(keep, vmManifest('gc-keep'));
    const gone = join(dir, 'gone.yaml');
    writeFileSync(gone, vmManifest('gc-gone', '  deletionPolicy: Orphan\n'));
    state = join(dir, 'state.json');
    const loadedConfig = parseProviderConfig(providerConfigYaml(sim), config);
    const c = capture();
    const run = { loadedConfig, state, taskPollMs: 10, agentPollMs: 10, quiet: true, out: c.out };
    assert.equal(await applyCommand({ ...run, files: [keep, gone] }), 0, c.text());
    const objects = readStateFile<ProxmoxVM>(state)!.objects;
    keepUid = objects.find((o) => o.metadata.name === 'gc-keep')!.metadata.uid;
    const goneVm = objects.find((o) => o.metadata.name === 'gc-gone')!;
    goneUid = goneVm.metadata.uid;
    goneVmid = Number(goneVm.metadata.annotations!['crossplane.io/external-name']);
    assert.equal(await deleteCommand({ ...run, files: [gone] }), 0, c.text());
    const after = readStateFile<ProxmoxVM>(state)!;
    assert.deepEqual(
      after.objects.map((o) => o.metadata.name),
      ['gc-keep'],
    );
    assert.ok(after.retired.includes(goneUid), 'the deleted resource is retired');
    assert.ok(names().includes('gc-gone'), 'deletionPolicy Orphan kept its VM');

    // Half-created: a create of gc-keep that died (its marker), locked 'create', no task running.
    await plant(701, 'gc-half', {
      description: marker('default/gc-keep', keepUid, 701),
      tags: 'provider-proxmox',
      lock: 'create',
    });
    // This installation's marker, but a resource and a uid this state file never had: stopped.
    await plant(702, 'gc-stranger', {
      description: `db\n\n${marker('default/stranger', strangerUid, 702)}`,
      tags: 'provider-proxmox;db',
    });
    // The first marker format (no installation) with a uid this state file never had.
    await plant(703, 'gc-legacy', {
      description: `provider-proxmox.owner: default/old uid=${legacyUid}`,
      tags: 'provider-proxmox',
    });
    // Another installation's VM.
    await plant(704, 'gc-elsewhere', {
      description: marker('default/web', randomUUID(), 704, 'cli-other-team'),
      tags: 'provider-proxmox',
    });
    // Foreign VMs: no marker. Not even our tag, or a create lock, makes them ours.
    await plant(800, 'foreign-plain');
    await plant(801, 'foreign-tagged', { tags: 'provider-proxmox', description: 'made by hand' });
    await plant(802, 'foreign-locked', { lock: 'create' });
    // Everything above is now well older than any scan (more than the 5 min clock-skew margin).
    sim.clock.advance(10 * 60_000);
  });
  after(async () => {
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('reports each VM with its kind, foreign VMs not at all; exit 1 (something to collect)', async () => {
    const c = capture();
    assert.equal(await gc({ config, state, output: 'json', out: c.out }), 1);
    const found = JSON.parse(c.text()) as GcFinding[];
    assert.deepEqual(
      found.map((f) => [f.vmid, f.name, f.kind, f.owner, f.lock ?? '', Boolean(f.deletable)]),
      [
        [goneVmid, 'gc-gone', 'orphan', 'default/gc-gone', '', true],
        [701, 'gc-half', 'half-created', 'default/gc-keep', 'create', false],
        [702, 'gc-stranger', 'orphan', 'default/stranger', '', false],
        [703, 'gc-legacy', 'legacy-unknown', 'default/old', '', false],
        [704, 'gc-elsewhere', 'managed-elsewhere', 'default/web', '', false],
      ],
    );
    assert.equal(
      found[0]!.detail,
      `no resource default/gc-gone in this state file (uid ${goneUid} was this state file's)`,
    );
    assert.match(
      found[2]!.detail,
      /never held: it may be another state file's; stopped, --include-unknown deletes it$/,
    );
    assert.match(found[3]!.detail, /^old marker \(no installation\) with uid \S+, which this state file never held/);
    assert.equal(found[4]!.installation, 'cli-other-team');

    const t = capture();
    await gc({ config, state, out: t.out });
    const lines = t.text().trimEnd().split('\n');
    assert.match(lines[0]!, /^SITE\s+NODE\s+VMID\s+NAME\s+KIND\s+OWNER\s+STATUS\s+LOCK\s+DETAIL$/);
    assert.match(
      lines[1]!,
      new RegExp(
        `^site-1\\s+ml110-01\\s+${goneVmid}\\s+gc-gone\\s+orphan\\s+default/gc-gone\\s+running\\s+no resource`,
      ),
    );
    assert.match(
      lines[2]!,
      /^site-1\s+ml110-01\s+701\s+gc-half\s+half-created\s+default\/gc-keep\s+\S+\s+create\s+locked 'create'/,
    );
    assert.match(
      lines[3]!,
      /^site-1\s+ml110-01\s+702\s+gc-stranger\s+orphan\s+default\/stranger\s+stopped\s+no resource/,
    );
    assert.match(
      lines[4]!,
      /^site-1\s+ml110-01\s+703\s+gc-legacy\s+legacy-unknown\s+default\/old\s+stopped\s+old marker/,
    );
    // Other installations: one summary line per site and installation, not a row per VM.
    assert.deepEqual(lines.slice(5), [
      '',
      "site-1: 1 VM(s) of installation 'cli-other-team': managed elsewhere, never deleted from here",
    ]);
    assert.doesNotMatch(t.text(), /foreign|^\S+\s+\S+\s+\d+\s+gc-keep\s/m);
  });

  it('--delete without --yes is a usage error (exit 2) that contacts nothing', async () => {
    for (const c of sim.clusters) c.resetCounters();
    await assert.rejects(gc({ config, state, delete: true }), (e: Error) => e instanceof UsageError);
    const res = await cli(['gc', '--config', config, '--state', state, '--delete']);
    assert.equal(res.code, 2, res.stdout + res.stderr);
    assert.match(res.stderr, /--delete removes VMs: add --yes \(or --auto-approve\) to confirm/);
    assert.equal(counters(), 0, 'no request reached the simulator');
    assert.ok(names().includes('gc-gone'));
  });

  it("--delete --yes deletes only the true orphan (its uid was this state file's); exit 1 for what it kept", async () => {
    const c = capture();
    assert.equal(await gc({ config, state, delete: true, yes: true, output: 'json', out: c.out }), 1, c.text());
    const result = JSON.parse(c.text()) as GcFinding[];
    assert.deepEqual(
      result.map((f) => [f.name, f.action?.replace(/:.*/, '')]),
      [
        ['gc-gone', 'deleted'],
        ['gc-half', 'kept'],
        ['gc-stranger', 'kept'],
        ['gc-legacy', 'kept'],
        ['gc-elsewhere', undefined],
      ],
    );
    assert.equal(result[1]!.action, 'kept: its resource exists (--include-half-created)');
    assert.deepEqual(names(), [
      'foreign-locked',
      'foreign-plain',
      'foreign-tagged',
      'gc-elsewhere',
      'gc-half',
      'gc-keep',
      'gc-legacy',
      'gc-stranger',
    ]);
  });

  it("--include-unknown also deletes the stopped VMs whose uid this state file never held; never other installations'", async () => {
    const c = capture();
    assert.equal(
      await gc({ config, state, delete: true, yes: true, includeUnknown: true, output: 'json', out: c.out }),
      0,
      c.text(),
    );
    assert.deepEqual(
      (JSON.parse(c.text()) as GcFinding[]).map((f) => [f.name, f.action?.replace(/:.*/, '')]),
      [
        ['gc-half', 'kept'],
        ['gc-stranger', 'deleted'],
        ['gc-legacy', 'deleted'],
        ['gc-elsewhere', undefined],
      ],
    );
    assert.deepEqual(names(), [
      'foreign-locked',
      'foreign-plain',
      'foreign-tagged',
      'gc-elsewhere',
      'gc-half',
      'gc-keep',
    ]);
  });

  it('--include-half-created: an API token cannot unlock (skipped, exit 1); root@pam with its password can', async () => {
    const c = capture();
    assert.equal(
      await gc({ config, state, delete: true, yes: true, includeHalfCreated: true, output: 'json', out: c.out }),
      1,
    );
    const skipped = (JSON.parse(c.text()) as GcFinding[]).filter((f) => f.kind !== 'managed-elsewhere');
    assert.deepEqual(
      skipped.map((f) => f.name),
      ['gc-half'],
    );
    assert.match(
      skipped[0]!.action ?? '',
      /^skipped: locked \(create\); only root@pam with a password can clear it over the API\. Fix: on node \S+ run 'qm unlock \d+ && qm destroy \d+ --purge'$/,
    );
    const r = capture();
    assert.equal(
      await gc({
        config: rootConfig,
        state,
        delete: true,
        yes: true,
        includeHalfCreated: true,
        output: 'json',
        out: r.out,
      }),
      0,
      r.text(),
    );
    assert.deepEqual(
      (JSON.parse(r.text()) as GcFinding[]).map((f) => [f.name, f.action]),
      [
        ['gc-half', 'deleted'],
        ['gc-elsewhere', undefined],
      ],
    );
    // Never touched: the foreign VMs, the other installation's, and the managed VM itself.
    assert.deepEqual(names(), ['foreign-locked', 'foreign-plain', 'foreign-tagged', 'gc-elsewhere', 'gc-keep']);
    const after = capture();
    assert.equal(await gc({ config, state, out: after.out }), 0, "another installation's VM is no reason for exit 1");
    assert.equal(
      after.text(),
      "No orphaned, stuck or half-created VMs.\n\nsite-1: 1 VM(s) of installation 'cli-other-team': managed elsewhere, never deleted from here\n",
    );
  });

  it('without a state file gc refuses (it cannot know what exists): exit 2', async () => {
    await assert.rejects(
      gc({ config, state: join(dir, 'missing.json') }),
      (e: Error) =>
        e instanceof UsageError && /reads them from the state file: .*missing\.json: no such file/.test(e.message),
    );
  });
});
