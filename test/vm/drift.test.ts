/**
 * Drift and updates against the simulator: changes made behind the provider's back are corrected;
 * spec changes are applied live where Proxmox can, and what needs a reboot is reported in
 * status.atProvider.pendingChanges instead of rebooting; powerState and disk growth.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { ProxmoxVM } from '../../src/api/proxmoxvm.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { OWNER_TAG } from '../../src/vm/spec.ts';
import { cond, diskSize, Engine, getConfig, NODE1, putConfig, SITE1, startSim, vm, waitUntil } from './harness.ts';

const POWER = /^(qmstart|qmstop|qmshutdown|qmreboot|qmreset)$/;

describe('drift and updates against the simulator', () => {
  let sim: Simulator;
  let eng: Engine;
  before(async () => {
    sim = await startSim();
    eng = await new Engine(sim, { pollIntervalMs: 20, driftIntervalMs: 0 }).start();
  });
  after(async () => {
    await eng.stop();
    await sim.close();
  });

  async function readyVm(name: string, fp: Parameters<typeof vm>[1] = {}): Promise<{ key: string; vmid: number }> {
    const key = eng.apply(vm(name, fp));
    const r = await eng.waitReady(key);
    return { key, vmid: r.status!.atProvider!.vmId! };
  }

  function powerTasks(vmid: number): string[] {
    return [...sim.cluster(SITE1).state.tasks.values()]
      .filter((t) => t.id === String(vmid) && POWER.test(t.type))
      .map((t) => t.upid);
  }

  function respec(key: string, change: (r: ProxmoxVM) => void): void {
    const r = eng.get(key);
    change(r);
    eng.apply(r);
  }

  it('tags and description changed by hand on a running VM are put back (the marker line kept)', async () => {
    const c = sim.cluster(SITE1);
    const { vmid } = await readyVm('drift-tags', { tags: ['web'], description: 'the web server' });
    const want = c.state.vms.get(vmid)!.config;
    const tags = want.tags;
    const description = want.description;
    // a human edits the notes (the marker line stays) and replaces the tags
    await putConfig(c, NODE1, vmid, { tags: 'hacked', description: `someone was here\n${description}` });
    assert.equal(c.state.vms.get(vmid)!.config.tags, 'hacked');
    await waitUntil(
      () => c.state.vms.get(vmid)!.config.tags === tags && c.state.vms.get(vmid)!.config.description === description,
      'tags and description restored',
      undefined,
      () => JSON.stringify(c.state.vms.get(vmid)!.config),
    );
    assert.ok(tags?.split(/[;,]/).includes(OWNER_TAG));
    assert.match(description ?? '', /the web server/);
  });

  it('the ownership marker removed by hand: the VM is no longer provably ours -> VMIDConflict, left alone', async () => {
    const c = sim.cluster(SITE1);
    const { key, vmid } = await readyVm('drift-marker');
    const marker = String((await getConfig(c, NODE1, vmid)).description);
    await putConfig(c, NODE1, vmid, { description: 'mine now' });
    const digest = (await getConfig(c, NODE1, vmid)).digest;
    await eng.waitSynced(key, 'VMIDConflict');
    const n = eng.attemptsOf(key).length;
    await waitUntil(() => eng.attemptsOf(key).length >= n + 2, 'more reconciles');
    assert.equal((await getConfig(c, NODE1, vmid)).digest, digest, 'not modified');
    assert.equal(c.state.vms.get(vmid)!.status, 'running');
    // putting the marker back makes it manageable again
    await putConfig(c, NODE1, vmid, { description: marker });
    await eng.waitReady(key);
  });

  it('cores and memory changed by hand on a stopped VM are put back', async () => {
    const c = sim.cluster(SITE1);
    const { vmid } = await readyVm('drift-size', { cpu: 2, memory: '2Gi', powerState: 'stopped' });
    assert.equal(c.state.vms.get(vmid)!.status, 'stopped');
    await putConfig(c, NODE1, vmid, { cores: '4', memory: '4096' });
    await waitUntil(
      () => {
        const cfg = c.state.vms.get(vmid)!.config;
        return cfg.cores === '2' && Number.parseInt(cfg.memory ?? '', 10) === 2048;
      },
      'cores and memory restored',
      undefined,
      () => JSON.stringify(c.state.vms.get(vmid)!.config),
    );
    assert.equal(c.state.vms.get(vmid)!.status, 'stopped', 'still stopped');
  });

  it('cores changed by hand on a running VM: the spec wins, without a reboot', async () => {
    const c = sim.cluster(SITE1);
    const { vmid } = await readyVm('drift-running', { cpu: 1 });
    const started = c.state.vms.get(vmid)!.startedAt;
    const power = powerTasks(vmid).length;
    await putConfig(c, NODE1, vmid, { cores: '3' });
    await waitUntil(async () => {
      const cfg = await getConfig(c, NODE1, vmid);
      return String(cfg.cores) === '1' ? true : undefined;
    }, 'cores back to 1 in the (pending) config');
    assert.equal(c.state.vms.get(vmid)!.startedAt, started, 'not restarted');
    assert.equal(powerTasks(vmid).length, power, 'no power task');
  });

  it('spec cpu/memory raised on a running VM: applied, pendingChanges names them, NO reboot', async () => {
    const c = sim.cluster(SITE1);
    const { key, vmid } = await readyVm('grow-live', { cpu: 1, memory: '1Gi' });
    const sv = c.state.vms.get(vmid)!;
    const started = sv.startedAt;
    const power = powerTasks(vmid).length;
    respec(key, (r) => {
      r.spec.forProvider.cpu = 2;
      r.spec.forProvider.memory = '2Gi';
    });
    const r = await eng.waitFor(
      key,
      (x) =>
        x.status?.observedGeneration === 2 &&
        (x.status?.atProvider?.pendingChanges ?? []).includes('cores') &&
        (x.status?.atProvider?.pendingChanges ?? []).includes('memory'),
      'pendingChanges: cores, memory',
    );
    const cfg = await getConfig(c, NODE1, vmid);
    assert.equal(String(cfg.cores), '2', 'the new value is in the config (pending)');
    assert.equal(Number.parseInt(String(cfg.memory), 10), 2048);
    assert.equal(sv.pending.cores, '2', 'pending: applies at the next reboot');
    assert.equal(sv.config.cores, '1', 'the running VM keeps its cores');
    // a few more reconciles: still no reboot
    const n = eng.attemptsOf(key).length;
    await waitUntil(() => eng.attemptsOf(key).length >= n + 5, 'more reconciles');
    assert.equal(c.state.vms.get(vmid)!.startedAt, started, 'uptime continues');
    assert.equal(c.state.vms.get(vmid)!.status, 'running');
    assert.equal(powerTasks(vmid).length, power, 'no reboot, stop or start task');
    assert.equal(cond(eng.get(key), 'Synced')?.status, 'True');
    assert.equal(r.status?.atProvider?.state, 'running');
  });

  it('powerState: stopped stops the VM (and running starts it again)', async () => {
    const c = sim.cluster(SITE1);
    const { key, vmid } = await readyVm('power');
    respec(key, (r) => {
      r.spec.forProvider.powerState = 'stopped';
    });
    await eng.waitFor(
      key,
      (x) => x.status?.observedGeneration === 2 && x.status?.atProvider?.state === 'stopped',
      'stopped',
    );
    await eng.waitReady(key);
    assert.equal(c.state.vms.get(vmid)!.status, 'stopped');
    respec(key, (r) => {
      r.spec.forProvider.powerState = 'running';
    });
    await eng.waitFor(
      key,
      (x) => x.status?.observedGeneration === 3 && x.status?.atProvider?.state === 'running',
      'running again',
    );
    await eng.waitReady(key);
    assert.equal(c.state.vms.get(vmid)!.status, 'running');
  });

  it('disk growth: a resize task grows scsi0; never shrunk', async () => {
    const c = sim.cluster(SITE1);
    const { key, vmid } = await readyVm('grow-disk', { disk: '8Gi' });
    const resizes = () => [...c.state.tasks.values()].filter((t) => t.type === 'resize' && t.id === String(vmid));
    const before = resizes().length;
    respec(key, (r) => {
      r.spec.forProvider.disk = '12Gi';
    });
    await waitUntil(
      async () => (diskSize(String((await getConfig(c, NODE1, vmid)).scsi0)) === '12G' ? true : undefined),
      'scsi0 at 12G',
    );
    await eng.waitFor(
      key,
      (x) => x.status?.observedGeneration === 2 && x.status?.atProvider?.step === 'Ready',
      'Ready',
    );
    assert.equal(resizes().length, before + 1, 'one resize task');
    // asking for less: refused with a condition, the disk is left alone
    respec(key, (r) => {
      r.spec.forProvider.disk = '9Gi';
    });
    const r = await eng.waitFor(key, (x) => cond(x, 'DiskShrinkRefused')?.status === 'True', 'DiskShrinkRefused');
    assert.match(cond(r, 'DiskShrinkRefused')?.message ?? '', /cannot shrink/);
    assert.equal(diskSize(String((await getConfig(c, NODE1, vmid)).scsi0)), '12G');
    assert.equal(resizes().length, before + 1);
  });

  it('a disk size in no whole GiB (10.4Gi, 20G: 18.6 GiB) grows once to the next whole GiB, then holds: no resize per reconcile, no shrink refused', async () => {
    const c = sim.cluster(SITE1);
    for (const [name, disk, want] of [
      ['odd-disk-gi', '10.4Gi', '11G'],
      ['odd-disk-g', '20G', '19G'],
      ['odd-disk-mi', '2500Mi', '3G'],
    ] as const) {
      const { key, vmid } = await readyVm(name, { disk });
      const resizes = () => [...c.state.tasks.values()].filter((t) => t.type === 'resize' && t.id === String(vmid));
      assert.equal(diskSize(String((await getConfig(c, NODE1, vmid)).scsi0)), want, disk);
      const sent = resizes().length;
      // Drift reads (driftIntervalMs 0: every poll reads the config in full) plan nothing more.
      const polls = eng.attemptsOf(key).length;
      await waitUntil(() => eng.attemptsOf(key).length >= polls + 5 || undefined, 'five more reconciles');
      assert.equal(resizes().length, sent, `${disk}: no resize after the first`);
      const r = eng.get(key);
      assert.equal(
        cond(r, 'DiskShrinkRefused')?.status ?? 'False',
        'False',
        `${disk}: ${cond(r, 'DiskShrinkRefused')?.message}`,
      );
      assert.equal(cond(r, 'Ready')?.status, 'True');
    }
  });
});
