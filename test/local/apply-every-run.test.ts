/**
 * `apply` reconciles every resource on every run, against the in-process simulator: a second run
 * over a state file that says "all Ready" still observes each VM (the 30-VM seed fleet: every one
 * reconciled again, exit 0), and changes made in Proxmox by hand since the last run are repaired by
 * the normal reconcile: a VM stopped by hand is started, memory and cores changed by hand are put
 * back, a VM destroyed by hand is created again. The earlier code ended the second run on the
 * state file's stale Ready conditions after a handful of reconciles and repaired none of these.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type LoadedProviderConfig, parseProviderConfig } from '../../src/api/provider-config-load.ts';
import type { ProxmoxVM } from '../../src/api/proxmoxvm.ts';
import { applyCommand } from '../../src/local/commands.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { providerConfigYaml } from '../../src/sim/provider-config.ts';
import { markerUid } from '../../src/vm/spec.ts';
import { readStateFile } from '../../src/workspace/state-file.ts';
import { capture } from '../helpers/capture.ts';
import { ROOT, writeManifests } from '../helpers/cli.ts';
import { AS_OPERATOR, raw, startTestSim, waitTask } from '../helpers/sim.ts';

// Never the real ~/.local/state: every default state file of this file goes to a temporary root.
const STATE_ROOT = mkdtempSync(join(tmpdir(), 'pp-every-run-root-'));
process.env.PROVIDER_PROXMOX_STATE_DIR = STATE_ROOT;

const NODE = 'ml110-01';

describe('apply reconciles every resource on every run', () => {
  let sim: Simulator;
  let config: LoadedProviderConfig;
  let dir: string;

  before(async () => {
    sim = await startTestSim();
    dir = mkdtempSync(join(tmpdir(), 'pp-every-run-'));
    config = parseProviderConfig(providerConfigYaml(sim), join(dir, 'providerconfig.yaml'));
  });
  after(async () => {
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
    rmSync(STATE_ROOT, { recursive: true, force: true });
  });

  /** One run of apply, in process; `reconciled`: the keys a reconcile of this run finished for. */
  async function apply(
    files: string,
    state: string,
    extra: Partial<Parameters<typeof applyCommand>[0]> = {},
  ): Promise<{ code: number; text: string; reconciled: Set<string>; reconciles: number }> {
    const c = capture();
    const reconciled = new Set<string>();
    let reconciles = 0;
    const code = await applyCommand({
      files: [files],
      loadedConfig: config,
      state,
      taskPollMs: 10,
      agentPollMs: 10,
      quiet: true,
      out: c.out,
      err: c.out,
      timeoutMs: 60_000,
      onResult: (k) => {
        reconciled.add(k);
        reconciles++;
      },
      ...extra,
    });
    return { code, text: c.text(), reconciled, reconciles };
  }

  function fleet(name: string, vms: string[]): string {
    const d = join(dir, name);
    mkdirSync(d);
    writeManifests(
      d,
      vms.map((n) => ({ name: n })),
    );
    return d;
  }

  /** The simulated VM named `name` on site-1 (templates aside); fails when there is not exactly one. */
  function simVm(name: string) {
    const found = [...sim.cluster('site-1').state.vms.values()].filter(
      (v) => v.config.template !== '1' && v.config.name === name,
    );
    assert.equal(found.length, 1, `exactly one VM named ${name}: ${found.map((v) => v.vmid).join(', ')}`);
    return found[0]!;
  }

  /** An operator's action through the API (as `qm` or the web UI would), waited for. */
  async function byHand(method: string, path: string, form?: Record<string, string>): Promise<void> {
    const url = sim.cluster('site-1').url;
    // (The person's own token: the provider's waits a minute before making a VM its own credentials destroyed.)
    const r = await raw(url, method, path, { ...(form ? { form } : {}), headers: AS_OPERATOR });
    assert.equal(r.status, 200, `${method} ${path}: ${r.text}`);
    const upid = (r.json as { data: unknown }).data;
    if (typeof upid === 'string' && upid.startsWith('UPID:')) {
      const t = await waitTask(url, NODE, upid);
      assert.equal(t.exitstatus, 'OK', `${method} ${path}`);
    }
  }

  function stored(state: string, key: string): ProxmoxVM {
    const objects = readStateFile<ProxmoxVM>(state)!.objects;
    return objects.find((o) => `${o.metadata.namespace}/${o.metadata.name}` === key)!;
  }

  it('the 30-VM seed fleet applied, then applied again: the second run reconciles all 30, exit 0', async (t) => {
    const state = join(dir, 'seed.state.json');
    const files = join(ROOT, 'examples/production');
    const first = await apply(files, state);
    assert.equal(first.code, 0, first.text.slice(-3000));
    assert.match(first.text, /all 30 VMs ready/);

    for (const c of sim.clusters) c.resetCounters();
    const second = await apply(files, state);
    assert.equal(second.code, 0, second.text.slice(-3000));
    assert.match(second.text, /all 30 VMs ready/);
    assert.equal(second.reconciled.size, 30, `reconciled in the second run: ${[...second.reconciled].join(', ')}`);
    // Proxmox saw it: each VM read again in full (a new process observes every VM in full), once:
    // the plan's read found nothing to do and the status each VM has, so it serves the reconcile.
    const reads = (route: string) => sim.clusters.reduce((n, c) => n + (c.counters()[route] ?? 0), 0);
    const statusReads = reads('GET /nodes/{node}/qemu/{vmid}/status/current');
    assert.equal(statusReads, 30, 'VM status reads in the second run');
    assert.equal(reads('GET /nodes/{node}/qemu/{vmid}/config'), 30, 'VM config reads in the second run');
    const mutations = sim.clusters.reduce(
      (n, c) =>
        n +
        Object.entries(c.counters())
          .filter(([k]) => !k.startsWith('GET '))
          .reduce((a, [, v]) => a + v, 0),
      0,
    );
    assert.equal(mutations, 0, 'nothing had changed: nothing is changed');
    t.diagnostic(
      `second run: ${second.reconciles} reconciles of ${second.reconciled.size} resources, ${statusReads} VM status reads`,
    );
  });

  it('a VM stopped by hand is started again by the next apply', async () => {
    const m = fleet('stopped', ['stop-1', 'stop-2']);
    const state = join(dir, 'stopped.state.json');
    assert.equal((await apply(m, state)).code, 0);
    const vm = simVm('stop-1');
    await byHand('POST', `/nodes/${NODE}/qemu/${vm.vmid}/status/stop`);
    assert.equal(simVm('stop-1').status, 'stopped');

    const again = await apply(m, state);
    assert.equal(again.code, 0, again.text);
    assert.equal(simVm('stop-1').status, 'running', 'started again');
    assert.equal(simVm('stop-1').vmid, vm.vmid, 'the same VM');
    assert.equal(simVm('stop-2').status, 'running');
    assert.deepEqual([...again.reconciled].sort(), ['default/stop-1', 'default/stop-2']);
    assert.match(again.text, /^stop-1\s+site-1\s+ml110-01\s+\d+\s+running\s+\S+\s+True\s+True/m);
  });

  it('memory and cores changed by hand are put back by the next apply', async () => {
    const m = fleet('resized', ['size-1']);
    const state = join(dir, 'resized.state.json');
    assert.equal((await apply(m, state)).code, 0);
    const vmid = simVm('size-1').vmid;
    // The operator's resize: stop, change, start (so the change is the running config, not pending).
    await byHand('POST', `/nodes/${NODE}/qemu/${vmid}/status/stop`);
    await byHand('POST', `/nodes/${NODE}/qemu/${vmid}/config`, { memory: '3072', cores: '3' });
    await byHand('POST', `/nodes/${NODE}/qemu/${vmid}/status/start`);
    assert.equal(simVm('size-1').config.memory, '3072');

    const again = await apply(m, state);
    assert.equal(again.code, 0, again.text);
    // The manifest's 1 vCPU / 1Gi are what Proxmox holds now. A running VM takes cold-plugged
    // memory and cores at its next boot: they are its pending values, as in PVE.
    const cfg = await raw(sim.cluster('site-1').url, 'GET', `/nodes/${NODE}/qemu/${vmid}/config`);
    const values = (cfg.json as { data: Record<string, unknown> }).data;
    assert.equal(String(values.memory), '1024');
    assert.equal(String(values.cores), '1');
    assert.equal(simVm('size-1').vmid, vmid, 'the same VM, changed in place');
    assert.deepEqual(stored(state, 'default/size-1').status?.atProvider?.pendingChanges?.sort(), ['cores', 'memory']);
  });

  it('a VM destroyed by hand is created again by the next apply, with its marker', async () => {
    const m = fleet('destroyed', ['gone-1']);
    const state = join(dir, 'destroyed.state.json');
    assert.equal((await apply(m, state)).code, 0);
    const vmid = simVm('gone-1').vmid;
    const uid = stored(state, 'default/gone-1').metadata.uid;
    await byHand('POST', `/nodes/${NODE}/qemu/${vmid}/status/stop`);
    await byHand('DELETE', `/nodes/${NODE}/qemu/${vmid}?purge=1`);
    assert.equal(sim.cluster('site-1').state.vms.has(vmid), false);

    // The engine's creation grace (a VM may not be listed yet right after its create) counts from
    // the first run's create: shortened, so the test does not wait out 30 s.
    const again = await apply(m, state, { creationGraceMs: 0 });
    assert.equal(again.code, 0, again.text);
    const vm = simVm('gone-1');
    assert.equal(vm.status, 'running');
    assert.equal(markerUid(vm.config.description), uid, "the resource's marker");
  });
});
