/**
 * A resource Ready on site-1 and a VM of its identity on site-2 that this installation made for a
 * uid no resource holds (a create in flight there when the state was lost: fault search F51).
 * Which one stays follows from what PVE shows: the one that runs when only one does, else the
 * older. The stray here is made through the API as such a create leaves it: this installation's
 * marker for its VMID, our tag, the resource's name, a `meta` ctime written by its create.
 * (The fault search's regression F51 is the whole case, with the state lost mid-create.)
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { ProxmoxVM } from '../../src/api/proxmoxvm.ts';
import type { SimCluster, Simulator } from '../../src/sim/index.ts';
import { ownershipMarker } from '../../src/vm/spec.ts';
import { raw, waitTask } from '../helpers/sim.ts';
import { cond, count, Engine, foreignVm, NODE1, putConfig, SITE1, startSim, vm } from './harness.ts';

const SITE2 = 'site-2';
const NODE2 = 'r630-01';
const LOST_UID = '0b5e6a0e-5f1c-4c3e-9d0e-00000000f051';

/** The VMs on `c` whose marker names `name` (any uid). */
function named(c: SimCluster, name: string): number[] {
  return [...c.state.vms.values()]
    .filter((v) => (v.config.description ?? '').includes(`/${name} uid=`))
    .map((v) => v.vmid)
    .sort();
}

/** Make `r`'s twin on site-2 at `vmid` for a uid no resource holds, started when `running`. */
async function stray(
  sim: Simulator,
  r: ProxmoxVM,
  vmid: number,
  installation: string,
  running: boolean,
  extra: Record<string, string> = {},
) {
  const c2 = sim.cluster(SITE2);
  const lost = { ...r, metadata: { ...r.metadata, uid: LOST_UID } };
  await foreignVm(
    c2,
    vmid,
    {
      name: r.metadata.name,
      tags: 'provider-proxmox',
      description: ownershipMarker(lost, { installation, vmid }),
      ...extra,
    },
    NODE2,
  );
  if (!running) return;
  const res = await raw(c2.url, 'POST', `/nodes/${NODE2}/qemu/${vmid}/status/start`, {});
  assert.equal(res.status, 200);
  assert.equal((await waitTask(c2.url, NODE2, (res.json as { data: string }).data)).exitstatus, 'OK');
}

/** Wait (on real time, bounded) until `done` holds. */
async function until(what: string, done: () => boolean, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  while (!done()) {
    if (Date.now() > end) assert.fail(`timed out waiting for: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe("a resource's twin on another site", () => {
  let sim: Simulator;
  let eng: Engine;
  before(async () => {
    sim = await startSim();
    // Polls within a test's time. A resource on site-2 keeps that site's list fresh, as any site
    // with resources of this process is kept (an idle one is read once a minute).
    eng = await new Engine(sim, { pollIntervalMs: 100 }).start();
    await eng.waitReady(eng.apply(vm('anchor', { site: SITE2, node: NODE2 })));
  });
  after(async () => {
    await eng.stop();
    await sim.close();
  });

  it('a newer twin that never ran goes; the running VM the resource holds stays', async () => {
    const c1 = sim.cluster(SITE1);
    const c2 = sim.cluster(SITE2);
    const key = eng.apply(vm('twin-a'));
    const r = await eng.waitReady(key);
    const vmid = r.status!.atProvider!.vmId!;
    const installation = /installation=(\S+)/.exec(c1.state.vms.get(vmid)!.config.description ?? '')![1]!;
    const seen: string[] = [];
    // (Status writes reach an index, not a watch.)
    const stop = eng.store.addIndex((_k, x) => {
      const c = x && cond(x, 'DuplicateElsewhere');
      if (c) seen.push(`${c.reason}: ${c.message}`);
    });
    await stray(sim, r, 170, installation, false);
    assert.deepEqual(named(c2, 'twin-a'), [170]);
    await until('the twin on site-2 is destroyed', () => named(c2, 'twin-a').length === 0);
    assert.equal(count(c2, 'DELETE /nodes/{node}/qemu/{vmid}'), 1, 'one destroy, on site-2');
    assert.deepEqual(named(c1, 'twin-a'), [vmid], 'the resource keeps its VM');
    assert.equal(c1.state.vms.get(vmid)?.status, 'running');
    const after = await eng.waitFor(
      key,
      (x) => cond(x, 'DuplicateElsewhere')?.reason === 'DuplicateRetired',
      'the condition says the twin is gone',
    );
    assert.equal(after.status?.atProvider?.vmId, vmid);
    assert.equal(cond(after, 'Ready')?.status, 'True');
    // While it was being retired, the resource said which VM, where, and why.
    const said = seen.find((m) => m.startsWith('RetiringDuplicate'));
    assert.match(
      said ?? '',
      /VM 170 on node r630-01 of site site-2.*duplicates VM \d+ and does not run where the other does: destroyed/,
    );
    stop();
  });

  it('a twin an operator protected is left as it is, said to be, and goes once the protection is lifted', async () => {
    const c1 = sim.cluster(SITE1);
    const c2 = sim.cluster(SITE2);
    const key = eng.apply(vm('twin-p'));
    const r = await eng.waitReady(key);
    const vmid = r.status!.atProvider!.vmId!;
    const installation = /installation=(\S+)/.exec(c1.state.vms.get(vmid)!.config.description ?? '')![1]!;
    const destroys = count(c2, 'DELETE /nodes/{node}/qemu/{vmid}');
    await stray(sim, r, 172, installation, true, { protection: '1' });
    const held = await eng.waitFor(
      key,
      (x) => cond(x, 'DuplicateElsewhere')?.reason === 'VMProtected',
      'the condition says the twin is protected',
    );
    assert.match(
      cond(held, 'DuplicateElsewhere')!.message ?? '',
      /VM 172 on node r630-01 of site site-2 is protected \(protection: 1\).*Fix: if it is to go, on node r630-01 of site site-2 run 'qm set 172 --protection 0'/,
    );
    // Before, it was stopped for a destroy PVE refused, at every poll.
    assert.equal(c2.state.vms.get(172)?.status, 'running', 'not stopped');
    assert.equal(count(c2, 'POST /nodes/{node}/qemu/{vmid}/status/stop'), 0);
    assert.equal(count(c2, 'DELETE /nodes/{node}/qemu/{vmid}'), destroys, 'no destroy sent');
    assert.equal(cond(held, 'Ready')?.status, 'True', 'the resource keeps its VM, Ready');
    await putConfig(c2, NODE2, 172, { protection: '0' });
    await until('the twin goes once unprotected', () => named(c2, 'twin-p').length === 0);
    assert.deepEqual(named(c1, 'twin-p'), [vmid]);
  });

  it('a running twin of a stopped VM stays: the resource retires its own VM, adopts the twin and moves it here', async () => {
    const c1 = sim.cluster(SITE1);
    const c2 = sim.cluster(SITE2);
    const key = eng.apply(vm('twin-b', { powerState: 'stopped' }));
    const r = await eng.waitReady(key);
    const vmid = r.status!.atProvider!.vmId!;
    const installation = /installation=(\S+)/.exec(c1.state.vms.get(vmid)!.config.description ?? '')![1]!;
    await stray(sim, r, 171, installation, true);
    const uuid = c2.state.vms.get(171)!.config.smbios1;
    const moved = await eng.waitFor(
      key,
      (x) =>
        x.status?.atProvider?.site === SITE1 &&
        x.status?.atProvider?.step === 'Ready' &&
        named(c2, 'twin-b').length === 0,
      'the twin adopted and moved to site-1',
    );
    assert.equal(c1.state.vms.get(vmid)?.config.smbios1 === uuid, false, 'its own VM went');
    const kept = named(c1, 'twin-b');
    assert.equal(kept.length, 1, 'one VM of the resource');
    assert.equal(c1.state.vms.get(kept[0]!)?.config.smbios1, uuid, 'it is the twin, moved (its SMBIOS UUID)');
    assert.equal(moved.status?.atProvider?.vmId, kept[0]);
    assert.equal(moved.status?.atProvider?.node, NODE1);
  });

  it('its own VM protected, to be retired for a running twin: left as it is (VMProtected) until the protection is lifted', async () => {
    const c1 = sim.cluster(SITE1);
    const c2 = sim.cluster(SITE2);
    const key = eng.apply(vm('twin-q', { powerState: 'stopped' }));
    const r = await eng.waitReady(key);
    const vmid = r.status!.atProvider!.vmId!;
    const installation = /installation=(\S+)/.exec(c1.state.vms.get(vmid)!.config.description ?? '')![1]!;
    await putConfig(c1, NODE1, vmid, { protection: '1' });
    const destroys = count(c1, 'DELETE /nodes/{node}/qemu/{vmid}');
    await stray(sim, r, 173, installation, true);
    const held = await eng.waitFor(key, (x) => cond(x, 'Synced')?.reason === 'VMProtected', 'VMProtected');
    assert.match(
      cond(held, 'Synced')!.message ?? '',
      new RegExp(
        `VM ${vmid} on node ${NODE1} of site site-1 is protected \\(protection: 1\\).*it was to go: VM ${vmid} duplicates VM 173.*Fix: if it is to go, on node ${NODE1} of site site-1 run 'qm set ${vmid} --protection 0'`,
      ),
    );
    assert.ok(c1.state.vms.has(vmid), 'left as it is');
    assert.equal(count(c1, 'DELETE /nodes/{node}/qemu/{vmid}'), destroys, 'no destroy sent');
    await putConfig(c1, NODE1, vmid, { protection: '0' });
    await eng.waitFor(
      key,
      (x) =>
        x.status?.atProvider?.site === SITE1 &&
        x.status?.atProvider?.step === 'Ready' &&
        named(c2, 'twin-q').length === 0,
      'the twin adopted and moved to site-1 once unprotected',
    );
    assert.equal(named(c1, 'twin-q').length, 1, 'one VM of the resource');
    assert.equal(c1.state.vms.has(vmid), false, 'its own VM went');
  });
});
