/**
 * gc's re-check right before each deletion, through the `scanSite`/`collect` API on the simulator:
 * a VM created after the scan started (or within the 5 min clock-skew margin before it) is not
 * deleted, nor one whose config changed since the scan, nor one whose resource appeared in the
 * state file meanwhile (re-read right before acting), nor a stopped VM of an unknown uid that was
 * started meanwhile, nor one that is gone, nor a finding no scan produced. Each case also shows the
 * VM would have been deleted without the change, so no check passes by accident.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type LoadedProviderConfig, parseProviderConfig } from '../../src/api/provider-config-load.ts';
import type { ProxmoxVM } from '../../src/api/proxmoxvm.ts';
import { collect, type GcFinding, type GcPolicy, knownResources, scanSite } from '../../src/fleet/gc.ts';
import { clientForSite } from '../../src/proxmox/site.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { providerConfigYaml } from '../../src/sim/provider-config.ts';
import { readStateFile } from '../../src/workspace/state-file.ts';
import { raw, startTestSim, waitTask } from '../helpers/sim.ts';

const INSTALLATION = 'cli-default';
const NODE = 'ml110-01';

describe('gc re-checks each VM right before deleting it', () => {
  let sim: Simulator;
  let dir: string;
  let config: LoadedProviderConfig;
  /** uids "deleted from the state file": their VMs are true orphans. */
  const retired: string[] = [];

  const exists = (vmid: number) => sim.cluster('site-1').state.vms.has(vmid);
  async function api(method: string, path: string, form?: Record<string, string>) {
    const c = sim.cluster('site-1');
    const r = await raw(c.url, method, path, form ? { form } : {});
    assert.equal(r.status, 200, r.text);
    const upid = (r.json as { data: unknown }).data;
    if (typeof upid === 'string' && upid.startsWith('UPID:'))
      assert.equal((await waitTask(c.url, NODE, upid)).exitstatus, 'OK');
  }
  /** A VM of ours (this installation's marker and tag); its uid retired unless `unknown`. */
  async function plant(vmid: number, opts: { unknown?: boolean } = {}): Promise<string> {
    const uid = randomUUID();
    if (!opts.unknown) retired.push(uid);
    await api('POST', `/nodes/${NODE}/qemu`, {
      vmid: String(vmid),
      name: `vm-${vmid}`,
      memory: '512',
      tags: 'provider-proxmox',
      description: `provider-proxmox.owner: default/vm-${vmid} uid=${uid} vmid=${vmid} installation=${INSTALLATION}`,
    });
    // The bulk list shows a new VM's status only after pvestatd's next round (the simulator's
    // timer): gc treats `unknown` as possibly running, so wait for it as an operator would.
    const c = sim.cluster('site-1');
    for (let i = 0; i < 500; i++) {
      const r = await raw(c.url, 'GET', '/cluster/resources?type=vm');
      const e = (r.json as { data: Array<{ vmid: number; status?: string }> }).data.find((x) => x.vmid === vmid);
      if (e?.status && e.status !== 'unknown') break;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    return uid;
  }
  const policy = (extra: Partial<GcPolicy> = {}): GcPolicy => ({
    installation: INSTALLATION,
    known: knownResources([], retired, 'site-1'),
    ...extra,
  });
  /** Scan site-1 on the simulator's clock (or `at`); the findings for `vmid`. */
  async function scan(vmid: number, opts: { at?: number; policy?: GcPolicy } = {}): Promise<GcFinding[]> {
    const client = clientForSite(config, 'site-1');
    try {
      const all = await scanSite(client, 'site-1', opts.policy ?? policy(), {
        now: () => opts.at ?? sim.clock.now(),
      });
      return all.filter((f) => f.vmid === vmid);
    } finally {
      await client.close();
    }
  }
  const gcDelete = async (findings: GcFinding[], known = () => policy().known) =>
    (await collect(config, findings, { known })).map((f) => f.action);

  before(async () => {
    sim = await startTestSim();
    dir = mkdtempSync(join(tmpdir(), 'pp-gc-recheck-'));
    config = parseProviderConfig(providerConfigYaml(sim), join(dir, 'providerconfig.yaml'));
  });
  after(async () => {
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a VM created after the scan started is not deleted; nor within the 5 min clock-skew margin; later it is', async () => {
    const scanStart = sim.clock.now();
    await plant(710);
    // The scan's clock was read before the VM existed (as when it appears while a long scan runs).
    const early = await scan(710, { at: scanStart });
    assert.deepEqual(
      early.map((f) => [f.kind, f.deletable]),
      [['orphan', true]],
    );
    const [first] = await gcDelete(early);
    assert.match(
      first!,
      /^skipped: created \S+, after the scan started or within 5 min of it \(clock skew\); run gc again later$/,
    );
    assert.ok(exists(710));
    // Four minutes later: still inside the margin.
    sim.clock.advance(4 * 60_000);
    assert.match((await gcDelete(await scan(710)))[0]!, /^skipped: created /);
    assert.ok(exists(710));
    // Six minutes after its creation: old enough, and deleted.
    sim.clock.advance(2 * 60_000);
    assert.deepEqual(await gcDelete(await scan(710)), ['deleted']);
    assert.ok(!exists(710));
  });

  it('a VM whose config changed since the scan is not deleted', async () => {
    await plant(711);
    sim.clock.advance(10 * 60_000);
    const found = await scan(711);
    await api('POST', `/nodes/${NODE}/qemu/711/config`, { name: 'renamed-by-someone' });
    assert.deepEqual(await gcDelete(found), ['skipped: its config changed since the scan; run gc again']);
    assert.ok(exists(711));
    assert.deepEqual(await gcDelete(await scan(711)), ['deleted'], 'scanned again, it goes');
  });

  it('a protected orphan (protection: 1) is skipped with the fix, not stopped; unprotected, it goes', async () => {
    await plant(716);
    await api('POST', `/nodes/${NODE}/qemu/716/status/start`);
    await api('POST', `/nodes/${NODE}/qemu/716/config`, { protection: '1' });
    sim.clock.advance(10 * 60_000);
    assert.deepEqual(await gcDelete(await scan(716)), [
      `skipped: protected (protection: 1), which Proxmox refuses to destroy; to collect it, on node ${NODE} of site site-1 run 'qm set 716 --protection 0' (GUI: VM 716 > Options > Protection), then run gc again`,
    ]);
    assert.equal(sim.cluster('site-1').state.vms.get(716)?.status, 'running', 'not stopped');
    await api('POST', `/nodes/${NODE}/qemu/716/config`, { protection: '0' });
    assert.deepEqual(await gcDelete(await scan(716)), ['deleted']);
    assert.ok(!exists(716));
  });

  it('a VM whose resource appeared in the state file since the scan is not deleted (the file is read again)', async () => {
    await plant(712);
    sim.clock.advance(10 * 60_000);
    const found = await scan(712);
    // Meanwhile someone applies default/vm-712 with this state file.
    const state = join(dir, 'state.json');
    const vm = {
      apiVersion: 'proxmox.sankofa.io/v1alpha1',
      kind: 'ProxmoxVM',
      metadata: { name: 'vm-712', namespace: 'default', uid: randomUUID() },
      spec: { forProvider: { site: 'site-1', node: NODE, cpu: 1, memory: '512Mi' } },
    };
    writeFileSync(state, JSON.stringify({ version: 2, rv: 1, objects: [vm], retired }));
    const fresh = () => {
      const s = readStateFile<ProxmoxVM>(state)!;
      return knownResources(s.objects, s.retired, 'site-1');
    };
    assert.deepEqual(await gcDelete(found, fresh), ['skipped: its resource default/vm-712 exists now']);
    assert.ok(exists(712));
    // Without it (the same scan, the file as the scan read it), the VM would have gone.
    writeFileSync(state, JSON.stringify({ version: 2, rv: 2, objects: [], retired }));
    assert.deepEqual(await gcDelete(found, fresh), ['deleted']);
  });

  it('a stopped VM of an unknown uid (--include-unknown) that was started since the scan is not deleted', async () => {
    await plant(713, { unknown: true });
    await plant(716, { unknown: true });
    sim.clock.advance(10 * 60_000);
    const withUnknown = policy({ includeUnknown: true });
    const found = [...(await scan(713, { policy: withUnknown })), ...(await scan(716, { policy: withUnknown }))];
    assert.deepEqual(
      found.map((f) => [f.vmid, f.kind, f.deletable, f.onlyStopped, f.uidKnown]),
      [
        [713, 'orphan', true, true, false],
        [716, 'orphan', true, true, false],
      ],
    );
    // 713 is started after the scan; 716, left stopped, shows what the same findings do otherwise.
    await api('POST', `/nodes/${NODE}/qemu/713/status/start`);
    assert.deepEqual(await gcDelete(found), [
      'skipped: running now; a VM whose uid this store never held is deleted only while stopped',
      'deleted',
    ]);
    assert.ok(exists(713));
    assert.ok(!exists(716));
  });

  it('a VM gone since the scan, and a finding no scan produced, are skipped', async () => {
    await plant(714);
    sim.clock.advance(10 * 60_000);
    const found = await scan(714);
    await api('DELETE', `/nodes/${NODE}/qemu/714`);
    assert.deepEqual(await gcDelete(found), ['skipped: gone since the scan']);
    // A finding made up for a VM the scan never listed (no digest) is never acted on.
    await plant(715);
    sim.clock.advance(10 * 60_000);
    const [real] = await scan(715);
    const { digest: _digest, ...madeUp } = real!;
    assert.deepEqual(await gcDelete([madeUp]), ['skipped: not found by a scan']);
    assert.ok(exists(715));
  });
});
