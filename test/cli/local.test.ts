/**
 * The cluster-less commands through the real CLI (a child process) against an in-process
 * simulator: exit codes of `apply` (0 ready, 1 failed, 2 usage), manifest errors with positions,
 * `delete -f`, `status` (table and JSON), and the demo.
 */
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Simulator } from '../../src/sim/index.ts';
import { markerUid } from '../../src/vm/spec.ts';
import { type CliFixture, cli, cliFixture, statusItems, writeManifests } from '../helpers/cli.ts';

const POLL = ['--task-poll', '20ms'];

describe('provider-proxmox apply / delete / status', () => {
  let fx: CliFixture;
  let sim: Simulator;
  let dir: string;
  let config: string;

  before(async () => {
    fx = await cliFixture('pp-cli-');
    ({ sim, dir, config } = fx);
  });

  after(async () => {
    await fx.close();
  });

  /** VMs in the simulator besides the templates. */
  function vms(): Array<{ vmid: number; uid: string | undefined; status: string }> {
    return sim.clusters.flatMap((c) =>
      [...c.state.vms.values()]
        .filter((v) => v.config.template !== '1')
        .map((v) => ({ vmid: v.vmid, uid: markerUid(v.config.description), status: v.status })),
    );
  }

  function mutations(): number {
    return sim.clusters.reduce(
      (n, c) =>
        n +
        Object.entries(c.counters())
          .filter(([k]) => !k.startsWith('GET '))
          .reduce((a, [, v]) => a + v, 0),
      0,
    );
  }

  it('apply: exit 0 when every VM is Ready; status prints the table and JSON; delete -f removes the VMs', async () => {
    const m = join(dir, 'ok');
    mkdirSync(m);
    writeManifests(m, [{ name: 'web-1' }, { name: 'web-2', template: 9000 }]);
    const state = join(dir, 'ok.state.json');
    const res = await cli(['apply', '--yes', '-f', m, '--config', config, '--state', state, ...POLL]);
    assert.equal(res.code, 0, res.stdout + res.stderr);
    assert.match(res.stdout, /all 2 VMs ready/);
    assert.match(res.stdout, /^NAME\s+SITE\s+NODE\s+VMID\s+STATE\s+IP\s+READY\s+SYNCED\s+AGE/m);
    assert.match(res.stdout, /^web-1\s+site-1\s+ml110-01\s+\d+\s+running\s+[\d.]+\s+True\s+True/m);
    assert.equal(vms().length, 2);
    assert.ok(vms().every((v) => v.status === 'running' && v.uid));

    const table = await cli(['status', '--state', state]);
    assert.equal(table.code, 0, table.stderr);
    assert.match(table.stdout, /^NAME\s+SITE\s+NODE\s+VMID/m);
    assert.match(table.stdout, /^web-1\s.*\sTrue\s+True\s/m);
    assert.match(table.stdout, /^web-2\s.*\sTrue\s+True\s/m);
    const json = await cli(['status', '--state', state, '-o', 'json']);
    assert.equal(json.code, 0, json.stderr);
    const rows = statusItems(json.stdout);
    assert.deepEqual(rows.map((r) => [r.name, r.ready, r.synced]).sort(), [
      ['web-1', true, true],
      ['web-2', true, true],
    ]);
    assert.deepEqual(
      rows.map((r) => Number(r.vmid)).sort(),
      vms()
        .map((v) => v.vmid)
        .sort(),
    );

    // Applying again changes nothing in Proxmox.
    for (const c of sim.clusters) c.resetCounters();
    const again = await cli(['apply', '--yes', '-f', m, '--config', config, '--state', state, ...POLL]);
    assert.equal(again.code, 0, again.stdout + again.stderr);
    assert.equal(mutations(), 0, 'a second apply of the same manifests mutates nothing');

    const del = await cli(['delete', '--yes', '-f', m, '--config', config, '--state', state, ...POLL]);
    assert.equal(del.code, 0, del.stdout + del.stderr);
    assert.match(del.stdout, /deleted 2 VM\(s\)/);
    assert.deepEqual(vms(), [], 'no VM left but the templates');
    const after = await cli(['status', '--state', state]);
    assert.equal(after.code, 0);
    assert.match(after.stdout, /No resources\./);
    const afterJson = await cli(['status', '--state', state, '-o', 'json']);
    assert.deepEqual(statusItems(afterJson.stdout), []);
  });

  it('apply: exit 1 when a VM fails for good (missing bridge), with the reason and the fix in the final table', async () => {
    const m = join(dir, 'bad-bridge');
    mkdirSync(m);
    writeManifests(m, [{ name: 'lost-1', network: 'vmbr9' }]);
    const state = join(dir, 'bad-bridge.state.json');
    const before = vms().length;
    const res = await cli(['apply', '--yes', '-f', m, '--config', config, '--state', state, ...POLL]);
    assert.equal(res.code, 1, res.stdout + res.stderr);
    const final = res.stdout.slice(res.stdout.lastIndexOf('\nNAME'));
    assert.match(final, /^lost-1\s.*\sFalse\s.*BridgeNotFound: .*bridge 'vmbr9' does not exist on node ml110-01/m);
    assert.match(final, /create it in Proxmox or fix the network of spec\.forProvider/, 'the fix is shown in full');
    assert.match(final, /1 VM\(s\) failed/);
    assert.equal(vms().length, before, 'no VM was created');
    const json = statusItems((await cli(['status', '--state', state, '-o', 'json'])).stdout);
    assert.equal(json[0]?.reason, 'BridgeNotFound');
  });

  it('apply: exit 2 on usage errors (no -f; no ProviderConfig anywhere; a --config without one)', async () => {
    const m = join(dir, 'usage');
    mkdirSync(m);
    writeManifests(m, [{ name: 'u-1' }]);
    const state = join(dir, 'usage.state.json');
    const noF = await cli(['apply', '--yes', '--config', config, '--state', state]);
    assert.equal(noF.code, 2, noF.stderr);
    assert.match(noF.stderr, /required option '-f, --filename <path...>' not specified/);

    const noConfig = await cli(['apply', '--yes', '-f', m, '--state', state]);
    assert.equal(noConfig.code, 2, noConfig.stderr);
    assert.match(noConfig.stderr, /no ProviderConfig: pass --config FILE/);

    const secretOnly = join(dir, 'secret-only.yaml');
    writeFileSync(
      secretOnly,
      'apiVersion: v1\nkind: Secret\nmetadata:\n  name: proxmox-credentials\n  namespace: crossplane-system\nstringData:\n  token: x\n',
    );
    const badConfig = await cli(['apply', '--yes', '-f', m, '--config', secretOnly, '--state', state]);
    assert.equal(badConfig.code, 2, badConfig.stdout + badConfig.stderr);
    assert.match(badConfig.stderr, /ProviderConfig/);
    assert.equal(vms().filter((v) => v.uid).length, 0, 'nothing was created');
  });

  it('apply: manifest errors print file:line:col: field: message and exit 1 without touching the simulator', async () => {
    const m = join(dir, 'broken');
    mkdirSync(m);
    writeManifests(m, [
      { name: 'good-1' },
      { name: 'broken-1', extra: '    cpus: 2\n' },
      { name: 'broken-2', extra: '    powerState: paused\n' },
    ]);
    writeFileSync(
      join(m, 'syntax.yaml'),
      'apiVersion: proxmox.sankofa.io/v1alpha1\nkind: ProxmoxVM\nmetadata: {name: [\n',
    );
    for (const c of sim.clusters) c.resetCounters();
    const res = await cli(['apply', '--yes', '-f', m, '--config', config, '--state', join(dir, 'broken.state.json')]);
    assert.equal(res.code, 1, res.stdout + res.stderr);
    const lines = res.stderr.trim().split('\n');
    assert.ok(
      lines.some((l) =>
        /^\S*broken-1\.yaml:17:5: spec\.forProvider\.cpus: unknown field 'cpus' \(did you mean 'cpu'\?\)$/.test(
          l.replace(/^provider-proxmox: /, ''),
        ),
      ),
      res.stderr,
    );
    assert.ok(
      lines.some((l) => /broken-2\.yaml:17:\d+: spec\.forProvider\.powerState: /.test(l)),
      `powerState error with its position: ${res.stderr}`,
    );
    assert.ok(
      lines.some((l) => /syntax\.yaml:\d+:\d+: YAML syntax error: /.test(l)),
      `syntax error with its position: ${res.stderr}`,
    );
    assert.equal(mutations(), 0, 'no request changed anything');
    const requests = sim.clusters.reduce((n, c) => n + Object.keys(c.counters()).length, 0);
    assert.equal(requests, 0, 'the simulator was not contacted at all');
  });
});

describe('provider-proxmox demo', () => {
  it('demo --speed 200 deploys the seed fleet: exit 0, all 30 VMs ready', async () => {
    const res = await cli(['demo', '--speed', '200'], { timeoutMs: 60_000 });
    assert.equal(res.code, 0, res.stdout.slice(-3000) + res.stderr);
    assert.match(res.stdout, /all 30 VMs ready/);
  });
});
