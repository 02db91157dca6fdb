/**
 * The seed fleet re-planned while it exists (issue 14): first the placement the seed's documents
 * re-planned away from (its "moved from ml110-01" and "changed from local-lvm" values: the seven
 * Phoenix VMs, the four validators and sentries 03-04 on site-1, ml110-01, local-lvm), then
 * examples/production as it is. `apply` shows the moves before it makes them, and at the end every
 * VM has kept its VMID, marker and SMBIOS UUID, the moved ones run on r630-01 with their disks on
 * ceph-fs, and nothing was destroyed (the remote migration's own delete of the source aside).
 *
 * The two sites are separate clusters with their own VMID ranges, as a fleet that moves VMs
 * between clusters is configured: a VMID then stays free on the other site, and the VM keeps it.
 */
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parseAllDocuments, stringify } from 'yaml';
import { type LoadedProviderConfig, parseProviderConfig } from '../../src/api/provider-config-load.ts';
import { applyCommand } from '../../src/local/commands.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { providerConfigYaml } from '../../src/sim/provider-config.ts';
import { parseTopology } from '../../src/sim/topology.ts';
import type { ResourcePlan } from '../../src/vm/plan.ts';
import { parseMarker } from '../../src/vm/spec.ts';
import { capture } from '../helpers/capture.ts';
import { ROOT } from '../helpers/cli.ts';
import { startTestSim } from '../helpers/sim.ts';

const STATE_ROOT = mkdtempSync(join(tmpdir(), 'pp-replan-root-'));
process.env.PROVIDER_PROXMOX_STATE_DIR = STATE_ROOT;

/** The seed's re-planned VMs (shared/seeds 003, sections 2.2-2.8, 3.1 and 3.2). */
const MOVED = [
  'phoenix/git-server.yaml',
  'phoenix/email-server.yaml',
  'phoenix/devops-runner.yaml',
  'phoenix/codespaces-ide.yaml',
  'phoenix/as4-gateway.yaml',
  'phoenix/business-integration-gateway.yaml',
  'phoenix/financial-messaging-gateway.yaml',
  'smom-dbis-138/validator-01.yaml',
  'smom-dbis-138/validator-02.yaml',
  'smom-dbis-138/validator-03.yaml',
  'smom-dbis-138/validator-04.yaml',
  'smom-dbis-138/sentry-03.yaml',
  'smom-dbis-138/sentry-04.yaml',
];

/**
 * The default topology with room on ml110-01 for the fleet before its re-plan (the seed's own
 * ml110-01 never held all of it: that is why it was re-planned).
 */
function roomyTopology() {
  const text = readFileSync(join(ROOT, 'src/sim/default-topology.yaml'), 'utf8')
    .replace(/cpus: 5\n/, 'cpus: 64\n')
    .replace(/total: 800G #[^\n]*/, 'total: 4T');
  return parseTopology(text, 'replan-topology.yaml');
}

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? files(p).map((x) => join(f, x)) : [f];
  });
}

describe('the seed fleet re-planned: moved with its data, never recreated', () => {
  let sim: Simulator;
  let config: LoadedProviderConfig;
  let dir: string;

  before(async () => {
    sim = await startTestSim({ topology: roomyTopology() });
    dir = mkdtempSync(join(tmpdir(), 'pp-replan-'));
    const docs = parseAllDocuments(providerConfigYaml(sim)).map((d) => d.toJS() as Record<string, any>);
    const pc = docs.find((d) => d.kind === 'ClusterProviderConfig')!;
    for (const s of pc.spec.sites)
      s.vmidRange = s.name === 'site-1' ? { min: 100, max: 4999 } : { min: 5000, max: 9999 };
    const file = join(dir, 'providerconfig.yaml');
    writeFileSync(file, docs.map((d) => stringify(d)).join('---\n'));
    config = parseProviderConfig(readFileSync(file, 'utf8'), file);
  });
  after(async () => {
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
    rmSync(STATE_ROOT, { recursive: true, force: true });
  });

  async function apply(manifests: string, state: string, confirm?: (p: ResourcePlan[]) => Promise<boolean>) {
    const c = capture();
    const code = await applyCommand({
      files: [manifests],
      loadedConfig: config,
      state,
      taskPollMs: 10,
      agentPollMs: 10,
      quiet: true,
      out: c.out,
      err: c.out,
      timeoutMs: 120_000,
      ...(confirm ? { confirm } : {}),
    });
    return { code, text: c.text() };
  }

  /** Every VM of the fleet (not templates), by name, across both clusters. */
  function fleet() {
    const out = new Map<
      string,
      Array<{ site: string; vmid: number; node: string; description: string; smbios: string; scsi0: string }>
    >();
    for (const c of sim.clusters)
      for (const v of c.state.vms.values()) {
        const m = parseMarker(v.config.description);
        if (!m || v.config.template === '1') continue;
        const list = out.get(m.name) ?? [];
        list.push({
          site: c.name,
          vmid: v.vmid,
          node: v.node,
          description: v.config.description ?? '',
          smbios: v.config.smbios1 ?? '',
          scsi0: v.config.scsi0 ?? '',
        });
        out.set(m.name, list);
      }
    return out;
  }

  it('applies the old placement, then examples/production: 13 remote migrations, the same 30 VMs', async () => {
    // The old placement: the re-planned files as they were before.
    const old = join(dir, 'before');
    cpSync(join(ROOT, 'examples/production'), old, { recursive: true });
    for (const f of MOVED) {
      const p = join(old, f);
      const text = readFileSync(p, 'utf8');
      assert.match(text, /node: r630-01/, f);
      writeFileSync(
        p,
        text
          .replace(/node: r630-01/g, 'node: ml110-01')
          .replace(/site: site-2/g, 'site: site-1')
          .replace(/storage: ceph-fs/g, 'storage: local-lvm'),
      );
    }
    const state = join(dir, 'seed.state.json');
    const first = await apply(old, state);
    assert.equal(first.code, 0, first.text.slice(-3000));
    const was = fleet();
    assert.equal(was.size, 30);
    for (const [name, vms] of was) assert.equal(vms.length, 1, `${name}: one VM`);
    const movedNames = new Set<string>();
    for (const f of MOVED) {
      const name = /name: (\S+)/.exec(readFileSync(join(ROOT, 'examples/production', f), 'utf8'))![1]!;
      movedNames.add(name);
      assert.equal(was.get(name)![0]!.site, 'site-1', `${name} starts on site-1`);
    }
    assert.equal(movedNames.size, MOVED.length);
    for (const c of sim.clusters) c.resetCounters();

    // The re-plan: what apply is about to do is shown (and confirmed) before anything moves.
    let shown: ResourcePlan[] = [];
    const second = await apply(join(ROOT, 'examples/production'), state, async (p) => {
      shown = p;
      assert.equal(
        sim.clusters.reduce((n, c) => n + (c.counters()['POST /nodes/{node}/qemu/{vmid}/remote_migrate'] ?? 0), 0),
        0,
        'nothing moved before the confirmation',
      );
      return true;
    });
    assert.equal(second.code, 0, second.text.slice(-3000));
    const moves = shown.filter((p) => p.changes.some((c) => c.field === 'site'));
    assert.equal(moves.length, MOVED.length, JSON.stringify(shown.filter((p) => p.action !== 'no-op')));
    for (const p of moves) {
      const c = p.changes.find((x) => x.field === 'site')!;
      assert.equal(c.from, 'site-1/ml110-01', p.key);
      assert.equal(c.to, 'site-2/r630-01', p.key);
      assert.match(c.detail ?? '', /^remote migrate, (online|offline), storage local-lvm:ceph-fs/, p.key);
    }
    assert.deepEqual(
      shown.filter((p) => p.action === 'create' || p.action === 'refused').map((p) => p.key),
      [],
      'nothing is created or refused',
    );

    const now = fleet();
    assert.equal(now.size, 30);
    for (const [name, [before]] of was) {
      const after = now.get(name)!;
      assert.equal(after.length, 1, `${name}: exactly one VM`);
      const [vm] = after;
      assert.equal(vm!.vmid, before!.vmid, `${name} kept its VMID`);
      assert.equal(vm!.description, before!.description, `${name} kept its marker`);
      assert.equal(vm!.smbios, before!.smbios, `${name} is the same VM (its SMBIOS UUID)`);
      if (movedNames.has(name)) {
        assert.equal(vm!.site, 'site-2', name);
        assert.equal(vm!.node, 'r630-01', name);
        assert.match(vm!.scsi0, /^ceph-fs:/, `${name}: its disk is on ceph-fs`);
      } else assert.equal(vm!.site, before!.site, name);
    }
    const count = (k: string) => sim.clusters.reduce((n, c) => n + (c.counters()[k] ?? 0), 0);
    assert.equal(count('POST /nodes/{node}/qemu/{vmid}/remote_migrate'), MOVED.length);
    assert.equal(count('DELETE /nodes/{node}/qemu/{vmid}'), 0, 'the provider destroyed nothing');
    assert.equal(count('POST /nodes/{node}/qemu'), 0, 'nothing was created');
  });
});
