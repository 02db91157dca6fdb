/**
 * Invariants 1-3 against the simulator: a lost status write never makes a second VM; two creators
 * racing for VMIDs get a VM each; a VMID held by a foreign VM is a conflict, never modified or
 * deleted; a task that fails after the VM exists is completed or cleaned up, never leaked;
 * adoption (Observe only) makes no mutating request.
 */
import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import type { ProxmoxVM } from '../../src/api/proxmoxvm.ts';
import { ConflictError, SimulatedCrash } from '../../src/engine/types.ts';
import { MemoryStore } from '../../src/local/memory-store.ts';
import type { Simulator } from '../../src/sim/index.ts';
import {
  assertBackoffGrows,
  cond,
  count,
  Engine,
  foreignVm,
  getConfig,
  guests,
  mutations,
  NODE1,
  ownedBy,
  SITE1,
  startSim,
  TEMPLATE,
  vm,
  waitUntil,
} from './harness.ts';

const CREATE = 'POST /nodes/{node}/qemu';

/** A store that loses (silently, or with a conflict) the first status write matching `when`. */
class LossyStore extends MemoryStore<ProxmoxVM> {
  when: ((r: ProxmoxVM) => boolean) | undefined;
  mode: 'drop' | 'conflict' = 'drop';
  lost = 0;
  override async updateStatus(r: ProxmoxVM): Promise<ProxmoxVM> {
    if (this.when?.(r)) {
      this.when = undefined;
      this.lost++;
      if (this.mode === 'conflict') throw new ConflictError();
      const cur = this.getSync(`${r.metadata.namespace}/${r.metadata.name}`);
      if (!cur) throw new ConflictError();
      return cur; // acknowledged, never stored
    }
    return super.updateStatus(r);
  }
}

const afterCreate = (r: ProxmoxVM) => /:qmcreate:/.test(r.status?.atProvider?.task ?? '');

describe('ownership and zero orphans against the simulator', () => {
  let sim: Simulator;
  const engines: Engine[] = [];
  const start = async (e: Engine) => {
    engines.push(e);
    return e.start();
  };
  before(async () => {
    sim = await startSim();
  });
  afterEach(async () => {
    for (const e of engines.splice(0)) await e.stop();
    sim.cluster(SITE1).clearFaults();
  });
  after(async () => {
    await sim.close();
  });

  for (const mode of ['drop', 'conflict'] as const) {
    it(`a status write lost after create (${mode}) -> still exactly one VM`, async () => {
      const c = sim.cluster(SITE1);
      const store = new LossyStore();
      store.mode = mode;
      store.when = afterCreate;
      const eng = await start(new Engine(sim, { store }));
      const creates = count(c, CREATE);
      const key = eng.apply(vm(`lost-status-${mode}`));
      const r = await eng.waitReady(key);
      assert.equal(store.lost, 1, 'the status write was lost');
      assert.equal(ownedBy(c, r.metadata.uid).length, 1, 'exactly one VM');
      assert.equal(count(c, CREATE), creates + 1, 'one create request');
    });
  }

  it('a restarted reconciler over a store whose status was reset, the create still running -> one VM', async () => {
    const c = sim.cluster(SITE1);
    const store = new MemoryStore<ProxmoxVM>();
    // The import stalls (a slow copy): the VM exists, locked 'create', without its config yet.
    const stall = c.addFault({ kind: 'task', type: 'qmcreate', action: 'stall' });
    let crashed = false;
    const first = await start(
      new Engine(sim, {
        store,
        hooks: {
          at: (step) => {
            if (step === 'create-succeeded' && !crashed) {
              crashed = true;
              throw new SimulatedCrash(step);
            }
          },
        },
      }),
    );
    const key = first.apply(vm('restart-reset'));
    await waitUntil(() => crashed, 'the crash after create');
    await first.stop();
    const r0 = store.getSync(key)!;
    assert.equal(r0.metadata.annotations?.['crossplane.io/external-name'] !== undefined, true);
    const vmid = Number(r0.metadata.annotations!['crossplane.io/external-name']);
    assert.equal(c.state.vms.get(vmid)?.config.lock, 'create', 'the VM exists, locked, mid-create');
    r0.status = {};
    await store.updateStatus(r0);

    const second = await start(new Engine(sim, { store }));
    await second.waitFor(key, (r) => cond(r, 'Ready')?.reason === 'Creating', 'Creating while the create runs');
    // several observations while it is still locked: never a conflict, never a second create
    const n = second.attemptsOf(key).length;
    await waitUntil(() => second.attemptsOf(key).length >= n + 3, 'more observations');
    const mid = second.get(key);
    assert.notEqual(cond(mid, 'Synced')?.reason, 'VMIDConflict', JSON.stringify(mid.status));
    assert.equal(guests(c).filter((v) => v.vmid === vmid).length, 1);
    c.removeFault(stall);
    const r = await second.waitReady(key);
    assert.equal(r.status?.atProvider?.vmId, vmid);
    assert.equal(ownedBy(c, r.metadata.uid).length, 1, 'exactly one VM');
  });

  it('the nextid race: two providers creating on the same site at once -> one VM each, no duplicate, no orphan', async () => {
    const c = sim.cluster(SITE1);
    const before = guests(c).length;
    // Creates land late (simulated 300 s, 0.3 s here): both providers pick VMIDs before either VM shows.
    c.addFault({ kind: 'latency', ms: 300_000, method: 'POST', path: '/nodes/{node}/qemu' });
    const a = await start(new Engine(sim));
    const b = await start(new Engine(sim));
    const keysA = [0, 1, 2].map((i) => a.apply(vm(`race-a${i}`)));
    const keysB = [0, 1, 2].map((i) => b.apply(vm(`race-b${i}`)));
    const ready = await Promise.all([...keysA.map((k) => a.waitReady(k)), ...keysB.map((k) => b.waitReady(k))]);
    const vmids = ready.map((r) => r.status!.atProvider!.vmId!);
    assert.equal(new Set(vmids).size, 6, `distinct VMIDs: ${vmids.join(', ')}`);
    for (const r of ready) {
      const owned = ownedBy(c, r.metadata.uid);
      assert.equal(owned.length, 1, `${r.metadata.name}: one VM`);
      assert.equal(owned[0]!.vmid, r.status!.atProvider!.vmId);
    }
    assert.equal(guests(c).length, before + 6, 'no extra VM');
    // the race did happen: some create found its VMID taken
    const taken = [...a.attempts, ...b.attempts].filter((x) => x.reason === 'VMIDTaken').length;
    assert.ok(taken >= 1, 'at least one VMID was taken by the other provider');
  });

  it('a foreign VM created at our VMID between prepareCreate and create -> a new VMID, the foreign VM untouched', async () => {
    const c = sim.cluster(SITE1);
    let eng: Engine | undefined;
    let foreign: number | undefined;
    eng = await start(
      new Engine(sim, {
        hooks: {
          at: async (step, key) => {
            if (step !== 'create-pending' || foreign !== undefined || !eng) return;
            foreign = Number(eng.get(key).metadata.annotations!['crossplane.io/external-name']);
            await foreignVm(c, foreign);
          },
        },
      }),
    );
    const key = eng.apply(vm('foreign-race'));
    const r = await eng.waitReady(key);
    assert.ok(foreign !== undefined);
    const digest = (await getConfig(c, NODE1, foreign)).digest;
    assert.notEqual(r.status!.atProvider!.vmId, foreign, 'another VMID was chosen');
    assert.ok(eng.attemptsOf(key).some((x) => x.reason === 'VMIDTaken'));
    assert.equal(ownedBy(c, r.metadata.uid).length, 1);
    const f = c.state.vms.get(foreign)!;
    assert.equal(f.config.name, `foreign-${foreign}`);
    assert.equal((await getConfig(c, NODE1, foreign)).digest, digest);
  });

  it('a crash after create-pending, and a foreign VM takes that VMID meanwhile -> a new VMID, nothing touched', async () => {
    const c = sim.cluster(SITE1);
    let eng: Engine | undefined;
    let foreign: number | undefined;
    eng = await start(
      new Engine(sim, {
        hooks: {
          at: async (step, key) => {
            if (step !== 'create-pending' || foreign !== undefined || !eng) return;
            foreign = Number(eng.get(key).metadata.annotations!['crossplane.io/external-name']);
            await foreignVm(c, foreign);
            throw new SimulatedCrash(step);
          },
        },
      }),
    );
    const key = eng.apply(vm('foreign-crash'));
    const r = await eng.waitReady(key);
    assert.ok(foreign !== undefined);
    assert.notEqual(r.status!.atProvider!.vmId, foreign);
    assert.equal(ownedBy(c, r.metadata.uid).length, 1);
    assert.equal(c.state.vms.get(foreign)?.config.name, `foreign-${foreign}`);
    assert.equal(c.state.vms.get(foreign)?.config.description, undefined, 'the foreign VM got no marker');
  });

  for (const how of ['external-name', 'spec.vmid'] as const) {
    it(`a VMID held by a foreign VM (${how}) -> VMIDConflict; never modified, never deleted`, async () => {
      const c = sim.cluster(SITE1);
      const vmid = how === 'external-name' ? 4242 : 4343;
      await foreignVm(c, vmid, { tags: 'theirs', description: 'not yours' });
      const digest = (await getConfig(c, NODE1, vmid)).digest;
      const eng = await start(new Engine(sim));
      c.resetCounters();
      const key = eng.apply(
        how === 'external-name'
          ? vm('foreign-vmid', {}, { annotations: { 'crossplane.io/external-name': String(vmid) } })
          : vm('foreign-spec-vmid', { vmid }),
      );
      const tail = await eng.waitFailures(key, 4);
      const r = eng.get(key);
      assert.equal(cond(r, 'Synced')?.reason, 'VMIDConflict');
      assert.match(cond(r, 'Synced')?.message ?? '', new RegExp(`${vmid}`));
      // (spec.vmid: the first failure is the create's "already exists", on the create schedule)
      assertBackoffGrows(tail.slice(1), 640);
      assert.equal((await getConfig(c, NODE1, vmid)).digest, digest, 'the foreign VM is unchanged');
      // spec.vmid: one create attempt answered "already exists"; nothing else mutates
      const m = mutations(c);
      if (how === 'external-name') assert.deepEqual(m, {});
      else assert.deepEqual(m, { [CREATE]: 1 });

      // Deleting the resource: nothing of its own exists at the VMID, so it goes (its finalizer is
      // removed without touching the stranger; no finalizer has to be removed by hand).
      eng.delete(key);
      await eng.waitGone(key);
      assert.ok(c.state.vms.has(vmid), 'the foreign VM is never deleted');
      assert.equal((await getConfig(c, NODE1, vmid)).digest, digest);
      assert.deepEqual(mutations(c), m, 'no mutating request after the delete either');
    });
  }

  it('adoption: managementPolicies [Observe] + external-name -> observed, zero mutating requests, never deleted', async () => {
    const c = sim.cluster(SITE1);
    const vmid = 4444;
    await foreignVm(c, vmid, { agent: '1', start: '1', tags: 'legacy' });
    await waitUntil(() => c.state.vms.get(vmid)?.status === 'running', 'the foreign VM running');
    const digest = (await getConfig(c, NODE1, vmid)).digest;
    const eng = await start(new Engine(sim, { pollIntervalMs: 20 }));
    c.resetCounters();
    const key = eng.apply(
      vm(
        'adopted',
        { cpu: 4, memory: '8Gi', tags: ['other'] },
        { managementPolicies: ['Observe'], annotations: { 'crossplane.io/external-name': String(vmid) } },
      ),
    );
    const r = await eng.waitFor(
      key,
      (x) => cond(x, 'Ready')?.status === 'True' && (x.status?.atProvider?.ipAddresses?.length ?? 0) > 0,
      'observed with an address',
    );
    const a = r.status!.atProvider!;
    assert.equal(a.vmId, vmid);
    assert.equal(a.node, NODE1);
    assert.equal(a.state, 'running');
    assert.equal(cond(r, 'Synced')?.status, 'True');
    const n = eng.attemptsOf(key).length;
    await waitUntil(() => eng.attemptsOf(key).length >= n + 5, 'a few more polls');
    assert.deepEqual(mutations(c), {}, 'no POST/PUT/DELETE at all');
    eng.delete(key);
    await eng.waitGone(key);
    assert.deepEqual(mutations(c), {}, 'deleting the resource does not touch the VM');
    assert.equal(c.state.vms.get(vmid)?.status, 'running');
    assert.equal((await getConfig(c, NODE1, vmid)).digest, digest);
  });

  it('a create task that fails after the VM exists (qmcreate fails at the end) -> completed, never leaked', async () => {
    const c = sim.cluster(SITE1);
    const before = guests(c).length;
    c.addFault({
      kind: 'task',
      type: 'qmcreate',
      action: 'fail',
      at: 'end',
      message: 'unable to create VM: disk sync failed',
    });
    const eng = await start(new Engine(sim));
    const key = eng.apply(vm('create-fails-late'));
    const r = await eng.waitReady(key);
    assert.ok(
      eng.attemptsOf(key).some((x) => x.kind === 'rateLimited' && x.reason === 'CreateFailed'),
      'the failure was seen and backed off',
    );
    assert.equal(ownedBy(c, r.metadata.uid).length, 1, 'one VM, ours');
    assert.equal(guests(c).length, before + 1, 'nothing leaked');
  });

  it('a clone task that fails after the VM exists -> completed or cleaned up, never leaked', async () => {
    const c = sim.cluster(SITE1);
    const before = guests(c).length;
    c.addFault({ kind: 'task', type: 'qmclone', action: 'fail', at: 'end', message: 'clone failed: disk sync' });
    const eng = await start(new Engine(sim));
    const key = eng.apply(vm('clone-fails-late', { image: undefined, template: { name: TEMPLATE } }));
    const r = await eng.waitReady(key);
    assert.ok(eng.attemptsOf(key).some((x) => x.kind === 'rateLimited' && x.reason === 'CreateFailed'));
    assert.equal(ownedBy(c, r.metadata.uid).length, 1);
    assert.equal(guests(c).length, before + 1);
  });

  it('a start task that keeps failing -> TaskFailed with growing backoff; Ready once it starts; one VM', async () => {
    const c = sim.cluster(SITE1);
    const before = guests(c).length;
    const fault = c.addFault({
      kind: 'task',
      type: 'qmstart',
      action: 'fail',
      at: 'start',
      count: -1,
      message: 'start failed: OOM',
    });
    const eng = await start(new Engine(sim));
    const key = eng.apply(vm('start-fails'));
    const tail = await eng.waitRateLimited(key, 5);
    const r0 = eng.get(key);
    assert.equal(cond(r0, 'Synced')?.reason, 'TaskFailed');
    assert.match(cond(r0, 'Synced')?.message ?? '', /OOM/);
    assertBackoffGrows(tail.slice(-4), 640);
    const starts = [...c.state.tasks.values()].filter(
      (t) => t.type === 'qmstart' && t.id === String(r0.status?.atProvider?.vmId),
    ).length;
    assert.ok(starts <= tail.length + 1, `start attempts bounded by the failures: ${starts}`);
    c.removeFault(fault);
    const r = await eng.waitReady(key);
    assert.equal(ownedBy(c, r.metadata.uid).length, 1);
    assert.equal(guests(c).length, before + 1);
  });
});
