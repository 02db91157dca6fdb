/**
 * `status --live` against the simulator: this installation's VMs as Proxmox holds them, read from
 * the ownership markers of every site, with whether the state file knows each (yes / no, `—`
 * without a state file); a VM of the first marker format shown as `legacy`; another
 * installation's VMs summarized as "managed elsewhere"; an operator's clone of one of our VMs
 * (a copied marker) named as not ours. Works with no state file at all; table, JSON and YAML.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parse } from 'yaml';
import { type LoadedProviderConfig, parseProviderConfig } from '../../src/api/provider-config-load.ts';
import type { ProxmoxVM } from '../../src/api/proxmoxvm.ts';
import { applyCommand, statusCommand } from '../../src/local/commands.ts';
import { type LiveStatus, LiveStatusSchema, schemaErrors } from '../../src/local/status-list.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { providerConfigYaml } from '../../src/sim/provider-config.ts';
import { UsageError } from '../../src/workspace/arguments.ts';
import { readStateFile } from '../../src/workspace/state-file.ts';
import { capture } from '../helpers/capture.ts';
import { cli, writeManifests } from '../helpers/cli.ts';
import { raw, startTestSim, waitTask } from '../helpers/sim.ts';

// Never the real ~/.local/state (the CLI children inherit this environment).
const STATE_ROOT = mkdtempSync(join(tmpdir(), 'pp-live-root-'));
process.env.PROVIDER_PROXMOX_STATE_DIR = STATE_ROOT;

const NODE = 'ml110-01';
const LEGACY_VMID = 700;
const COPY_VMID = 701;

describe('status --live', () => {
  let sim: Simulator;
  let dir: string;
  let configFile: string;
  let config: LoadedProviderConfig;
  let state: string;
  let vmidOf: Map<string, number>;

  async function apply(loaded: LoadedProviderConfig, name: string, vms: string[], stateFile: string): Promise<void> {
    const m = join(dir, name);
    mkdirSync(m);
    writeManifests(
      m,
      vms.map((n) => ({ name: n })),
    );
    const c = capture();
    const code = await applyCommand({
      files: [m],
      loadedConfig: loaded,
      state: stateFile,
      taskPollMs: 10,
      agentPollMs: 10,
      quiet: true,
      out: c.out,
      timeoutMs: 60_000,
    });
    assert.equal(code, 0, c.text());
  }

  async function task(method: string, path: string, form: Record<string, string>): Promise<void> {
    const url = sim.cluster('site-1').url;
    const r = await raw(url, method, path, { form });
    assert.equal(r.status, 200, `${method} ${path}: ${r.text}`);
    const t = await waitTask(url, NODE, (r.json as { data: string }).data);
    assert.equal(t.exitstatus, 'OK', `${method} ${path}`);
  }

  before(async () => {
    sim = await startTestSim();
    dir = mkdtempSync(join(tmpdir(), 'pp-live-'));
    configFile = join(dir, 'providerconfig.yaml');
    writeFileSync(configFile, providerConfigYaml(sim));
    config = parseProviderConfig(providerConfigYaml(sim), configFile);
    // Installation cli-default (the config `default`): two VMs in `state`, one in another state file.
    state = join(dir, 'state.json');
    await apply(config, 'ours', ['live-1', 'live-2'], state);
    await apply(config, 'ours-elsewhere', ['live-3'], join(dir, 'other.state.json'));
    // Installation team-b: the same Proxmox, another owner.
    const teamB = parseProviderConfig(
      providerConfigYaml(sim).replace(/^spec:\n/m, 'spec:\n  installation: team-b\n'),
      join(dir, 'team-b.yaml'),
    );
    await apply(teamB, 'team-b', ['b-1', 'b-2'], join(dir, 'team-b.state.json'));
    vmidOf = new Map(
      [...sim.cluster('site-1').state.vms.values()].map((v) => [v.config.name ?? '', v.vmid] as [string, number]),
    );
    // A VM of the first marker format (no installation, no VMID), whose uid the state file knows not.
    await task('POST', `/nodes/${NODE}/qemu`, {
      vmid: String(LEGACY_VMID),
      name: 'old-1',
      memory: '512',
      tags: 'provider-proxmox',
      description: 'made by an old provider-proxmox\nprovider-proxmox.owner: default/old-1 uid=0000-legacy',
    });
    // An operator's full clone of live-1: its description (so its marker) comes along.
    await task('POST', `/nodes/${NODE}/qemu/${vmidOf.get('live-1')}/clone`, {
      newid: String(COPY_VMID),
      name: 'live-1-copy',
      full: '1',
    });
  });
  after(async () => {
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
    rmSync(STATE_ROOT, { recursive: true, force: true });
  });

  it("the table: this installation's VMs with IN STATE, legacy marked, other installations summarized; exit 0", async () => {
    const res = await cli(['status', '--live', '--config', configFile, '--state', state]);
    assert.equal(res.code, 0, res.stdout + res.stderr);
    const lines = res.stdout.trimEnd().split('\n');
    assert.equal(lines[0], `VMs of installation cli-default in Proxmox (IN STATE: known to ${state})`);
    assert.match(lines[2]!, /^NAME\s+SITE\s+NODE\s+VMID\s+STATE\s+LOCK\s+IN STATE\s+MARKER$/);
    const rows = lines.slice(3, 7).map((l) => l.split(/\s{2,}/));
    assert.deepEqual(rows, [
      ['default/live-1', 'site-1', NODE, String(vmidOf.get('live-1')), 'running', 'yes'],
      ['default/live-2', 'site-1', NODE, String(vmidOf.get('live-2')), 'running', 'yes'],
      ['default/live-3', 'site-1', NODE, String(vmidOf.get('live-3')), 'running', 'no'],
      ['default/old-1', 'site-1', NODE, String(LEGACY_VMID), 'stopped', 'no', 'legacy'],
    ]);
    assert.equal(lines[7], '');
    assert.match(lines[8]!, /^legacy: the first marker format/);
    assert.equal(lines[9], 'managed elsewhere: installation team-b: 2 VM(s) (site-1: 2)');
    assert.equal(
      lines[10],
      `copied marker: site-1 VM ${COPY_VMID} on ${NODE} carries the marker of default/live-1 written for VM ${vmidOf.get('live-1')} (a clone?): not this installation's`,
    );
    assert.equal(lines.length, 11, res.stdout);
    assert.doesNotMatch(res.stdout, /b-1|b-2/, "team-b's VMs are not listed one by one");
  });

  it('-o json and -o yaml: the same view as data', async () => {
    const j = capture();
    assert.equal(await statusCommand({ live: true, config: configFile, state, output: 'json', out: j.out }), 0);
    const view = JSON.parse(j.text()) as LiveStatus;
    assert.deepEqual(schemaErrors(LiveStatusSchema, view), []);
    assert.equal(view.installation, 'cli-default');
    assert.equal(view.stateFile, state);
    assert.deepEqual(
      view.items.map((v) => [`${v.namespace}/${v.name}`, v.vmid, v.inState, v.marker]),
      [
        ['default/live-1', vmidOf.get('live-1'), true, 'current'],
        ['default/live-2', vmidOf.get('live-2'), true, 'current'],
        ['default/live-3', vmidOf.get('live-3'), false, 'current'],
        ['default/old-1', LEGACY_VMID, false, 'legacy'],
      ],
    );
    const stored = readStateFile<ProxmoxVM>(state)!.objects;
    assert.equal(view.items[0]!.uid, stored.find((o) => o.metadata.name === 'live-1')!.metadata.uid);
    assert.deepEqual(view.elsewhere, [{ installation: 'team-b', site: 'site-1', vms: 2 }]);
    assert.deepEqual(view.copies, [
      {
        site: 'site-1',
        node: NODE,
        vmid: COPY_VMID,
        namespace: 'default',
        name: 'live-1',
        writtenFor: vmidOf.get('live-1'),
      },
    ]);
    assert.deepEqual(view.errors, []);
    const y = capture();
    assert.equal(await statusCommand({ live: true, config: configFile, state, output: 'yaml', out: y.out }), 0);
    assert.deepEqual({ ...parse(y.text()), generatedAt: view.generatedAt }, view);
  });

  it('without any state file: every VM still listed, IN STATE —', async () => {
    // No --state and nothing under the state root: the installation's default file does not exist.
    const res = await cli(['status', '--live', '--config', configFile, '-o', 'json'], { cwd: dir });
    assert.equal(res.code, 0, res.stdout + res.stderr);
    const view = JSON.parse(res.stdout) as LiveStatus;
    assert.equal(view.stateFile, null);
    assert.deepEqual(
      view.items.map((v) => [`${v.namespace}/${v.name}`, v.inState]),
      [
        ['default/live-1', null],
        ['default/live-2', null],
        ['default/live-3', null],
        ['default/old-1', null],
      ],
    );
    const table = await cli(['status', '--live', '--config', configFile], { cwd: dir });
    assert.equal(table.code, 0, table.stderr);
    assert.match(table.stdout, /^VMs of installation cli-default in Proxmox \(IN STATE: no state file\)$/m);
    assert.match(table.stdout, /^default\/live-1\s+site-1\s+ml110-01\s+\d+\s+running\s+—$/m);
  });

  it('--live needs a ProviderConfig, and takes neither --watch nor --kubeconfig (usage errors)', async () => {
    for (const args of [
      { live: true },
      { live: true, config: configFile, watch: true },
      { live: true, config: configFile, kubeconfig: '/nonexistent' },
    ])
      await assert.rejects(statusCommand({ ...args, out: capture().out }), UsageError, JSON.stringify(args));
    const res = await cli(['status', '--live']);
    assert.equal(res.code, 2, res.stderr);
    assert.match(res.stderr, /status --live reads Proxmox: pass --config FILE/);
  });
});
