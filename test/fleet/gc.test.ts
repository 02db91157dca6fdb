/**
 * `gc` against the in-process simulator: a planted orphan (our ownership marker and tag, a uid
 * that no resource in the state file has) is found; a half-created VM (lock `create`, no task) is
 * reported; foreign VMs (no marker, even with our tag or a create lock) are never listed and never
 * deleted; `--delete --yes` deletes only the orphan; `--delete` without `--yes` is a usage error
 * (exit 2) that contacts nothing.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parse, stringify } from 'yaml';
import { parseProviderConfig } from '../../src/api/provider-config.ts';
import type { ProxmoxVM } from '../../src/api/proxmoxvm.ts';
import { gcCommand } from '../../src/fleet/commands.ts';
import type { GcFinding } from '../../src/fleet/gc.ts';
import { applyCommand, UsageError } from '../../src/local/commands.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { providerConfigYaml } from '../../src/sim/provider-config.ts';
import { capture } from '../helpers/capture.ts';
import { cli } from '../helpers/cli.ts';
import { ROOT_PASSWORD, raw, startTestSim, waitTask } from '../helpers/sim.ts';

describe('gc', () => {
  let sim: Simulator;
  let dir: string;
  let config: string;
  let rootConfig: string;
  let state: string;
  let keepUid: string;
  const orphanUid = randomUUID();

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

  const names = () =>
    [...sim.cluster('site-1').state.vms.values()]
      .filter((v) => v.config.template !== '1')
      .map((v) => v.config.name!)
      .sort();
  const counters = () => sim.clusters.reduce((n, c) => n + Object.values(c.counters()).reduce((a, b) => a + b, 0), 0);

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

    // One VM managed the normal way: in the state file, never an orphan.
    const m = join(dir, 'keep.yaml');
    writeFileSync(
      m,
      'apiVersion: proxmox.sankofa.io/v1alpha1\nkind: ProxmoxVM\nmetadata:\n  name: gc-keep\nspec:\n  forProvider:\n    site: site-1\n    node: ml110-01\n    cpu: 1\n    memory: 512Mi\n    template: { vmid: 9000 }\n',
    );
    state = join(dir, 'state.json');
    const c = capture();
    const code = await applyCommand({
      files: [m],
      loadedConfig: parseProviderConfig(providerConfigYaml(sim), config),
      state,
      taskPollMs: 10,
      agentPollMs: 10,
      quiet: true,
      out: c.out,
    });
    assert.equal(code, 0, c.text());
    keepUid = (JSON.parse(readFileSync(state, 'utf8')) as { objects: ProxmoxVM[] }).objects[0]!.metadata.uid;

    // The orphan: our marker and tag, a uid no resource has (its resource was deleted with the state).
    await plant(700, 'gc-orphan', {
      description: `web server\n\nprovider-proxmox.owner: default/gone uid=${orphanUid}`,
      tags: 'provider-proxmox;web',
    });
    // Half-created: a create of gc-keep that died (our marker, gc-keep's uid), locked 'create', no task.
    await plant(701, 'gc-half', {
      description: `provider-proxmox.owner: default/gc-keep uid=${keepUid}`,
      tags: 'provider-proxmox',
      lock: 'create',
    });
    // Foreign VMs: no marker. Not even our tag, or a create lock, makes them ours.
    await plant(800, 'foreign-plain');
    await plant(801, 'foreign-tagged', { tags: 'provider-proxmox', description: 'made by hand' });
    await plant(802, 'foreign-locked', { lock: 'create' });
  });
  after(async () => {
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('reports the orphan and the half-created VM, nothing else; exit 1 (something to collect)', async () => {
    const c = capture();
    assert.equal(await gcCommand({ config, state, output: 'json', out: c.out }), 1);
    const found = JSON.parse(c.text()) as GcFinding[];
    assert.deepEqual(
      found.map((f) => [f.vmid, f.name, f.kind, f.owner, f.lock ?? '', f.detail]),
      [
        [700, 'gc-orphan', 'orphan', 'default/gone', '', `marker uid ${orphanUid} matches no resource`],
        [701, 'gc-half', 'half-created', 'default/gc-keep', 'create', "locked 'create' with no task running"],
      ],
    );
    const t = capture();
    await gcCommand({ config, state, out: t.out });
    const lines = t.text().trimEnd().split('\n');
    assert.match(lines[0]!, /^SITE\s+NODE\s+VMID\s+NAME\s+KIND\s+OWNER\s+STATUS\s+LOCK\s+DETAIL$/);
    assert.match(lines[1]!, /^site-1\s+ml110-01\s+700\s+gc-orphan\s+orphan\s+default\/gone\s+stopped\s+marker uid /);
    assert.match(
      lines[2]!,
      /^site-1\s+ml110-01\s+701\s+gc-half\s+half-created\s+default\/gc-keep\s+\S+\s+create\s+locked 'create'/,
    );
    assert.equal(lines.length, 3);
    assert.doesNotMatch(t.text(), /foreign|^\S+\s+\S+\s+\d+\s+gc-keep\s/m);
  });

  it('--delete without --yes is a usage error (exit 2) that contacts nothing', async () => {
    for (const c of sim.clusters) c.resetCounters();
    await assert.rejects(gcCommand({ config, state, delete: true }), (e: Error) => e instanceof UsageError);
    const res = await cli(['gc', '--config', config, '--state', state, '--delete']);
    assert.equal(res.code, 2, res.stdout + res.stderr);
    assert.match(res.stderr, /--delete removes VMs: add --yes to confirm/);
    assert.equal(counters(), 0, 'no request reached the simulator');
    assert.ok(names().includes('gc-orphan'));
  });

  it('--delete --yes deletes only the orphan; foreign VMs and the half-created one (its resource exists) stay', async () => {
    const before = names();
    const c = capture();
    assert.equal(await gcCommand({ config, state, delete: true, yes: true, output: 'json', out: c.out }), 0, c.text());
    const result = JSON.parse(c.text()) as GcFinding[];
    assert.deepEqual(
      result.map((f) => [f.name, f.action]),
      [
        ['gc-orphan', 'deleted'],
        ['gc-half', 'kept: its resource exists (--include-half-created)'],
      ],
    );
    assert.deepEqual(
      names(),
      before.filter((n) => n !== 'gc-orphan'),
    );
    assert.deepEqual(names(), ['foreign-locked', 'foreign-plain', 'foreign-tagged', 'gc-half', 'gc-keep']);
  });

  it('--include-half-created: an API token cannot unlock (skipped, exit 1); root@pam with its password can', async () => {
    const c = capture();
    assert.equal(
      await gcCommand({ config, state, delete: true, yes: true, includeHalfCreated: true, output: 'json', out: c.out }),
      1,
    );
    const skipped = JSON.parse(c.text()) as GcFinding[];
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
      await gcCommand({
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
      [['gc-half', 'deleted']],
    );
    // Never touched: the foreign VMs, and the managed VM itself.
    assert.deepEqual(names(), ['foreign-locked', 'foreign-plain', 'foreign-tagged', 'gc-keep']);
    const after = capture();
    assert.equal(await gcCommand({ config, state, out: after.out }), 0);
    assert.equal(after.text(), 'No orphaned, stuck or half-created VMs.\n');
  });

  it('without a state file gc refuses (it cannot know what exists): exit 2', async () => {
    await assert.rejects(
      gcCommand({ config, state: join(dir, 'missing.json') }),
      (e: Error) =>
        e instanceof UsageError && /reads them from the state file: .*missing\.json: no such file/.test(e.message),
    );
  });
});
