/**
 * Regression tests for the zero-duplicate and zero-orphan findings of issue 9 that need no new
 * simulator fault: a VMID taken during the failed-create backoff, a changed site, a forged or
 * broken ownership marker, a password echoed by a task error, and stop() aborting in-flight work.
 * Each failed on main before the fix.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { SimulatedCrash } from '../../src/engine/types.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { markerUid, ownershipMarker, validateSpec } from '../../src/vm/spec.ts';
import { cond, count, Engine, foreignVm, ownedBy, SITE1, startSim, vm, waitUntil } from './harness.ts';

describe('zero duplicates and zero orphans: engine regressions', () => {
  let sim: Simulator;
  let eng: Engine;
  before(async () => {
    sim = await startSim();
    eng = await new Engine(sim).start();
  });
  after(async () => {
    await eng.stop();
    await sim.close();
  });

  it('a create task that fails, then a stranger takes its VMID during the backoff: a new VMID, never a permanent VMIDConflict', async () => {
    const c = sim.cluster(SITE1);
    // Every create fails until the stranger has taken the VMID (count -1), so no retry can win the race.
    const fault = c.addFault({
      kind: 'task',
      type: 'qmcreate',
      action: 'fail',
      at: 'start',
      message: 'no space',
      count: -1,
    });
    let first = 0;
    let foreign: Record<string, string> | undefined;
    // Right after the failure is recorded, before the next observe: the stranger creates at our VMID.
    const backoff = new Engine(sim, {
      hooks: {
        at: async (step, key) => {
          if (step !== 'connected' || foreign || !first) return;
          c.removeFault(fault);
          await foreignVm(c, first);
          foreign = structuredClone(c.state.vms.get(first)!.config);
          void key;
        },
      },
    });
    const key = backoff.apply(vm('taken-in-backoff'));
    await backoff.start();
    try {
      const failed = await backoff.waitFor(key, (r) => cond(r, 'Synced')?.reason === 'CreateFailed', 'CreateFailed');
      first = Number(failed.metadata.annotations?.['crossplane.io/external-name']);
      const r = await backoff.waitReady(key);
      assert.ok(foreign, 'the stranger took the VMID');
      assert.notEqual(r.status?.atProvider?.vmId, first, 'another VMID was chosen');
      assert.equal(ownedBy(c, r.metadata.uid).length, 1, 'exactly one VM of ours');
      assert.deepEqual(c.state.vms.get(first)?.config, foreign, 'the stranger is untouched');
    } finally {
      c.removeFault(fault);
      await backoff.stop();
    }
  });

  it('slots held by resources that are deleted before they create are released: the node is never blocked', async () => {
    const c = sim.cluster(SITE1);
    // Both slots of the node (perNode: 2) are taken by resources that crash right after preflight.
    const stuck = new Set(['default/slot-a', 'default/slot-b']);
    const crashing = new Engine(sim, {
      hooks: {
        at: (step, key) => {
          if (step === 'preflight-passed' && stuck.has(key)) throw new SimulatedCrash(step);
        },
      },
    });
    await crashing.start();
    try {
      const a = crashing.apply(vm('slot-a'));
      const b = crashing.apply(vm('slot-b'));
      await crashing.waitFailures(a, 2);
      await crashing.waitFailures(b, 2);
      crashing.delete(a);
      crashing.delete(b);
      await crashing.waitGone(a);
      await crashing.waitGone(b);
      const r = await crashing.waitReady(crashing.apply(vm('slot-c')));
      assert.equal(ownedBy(c, r.metadata.uid).length, 1, 'created: no slot was left held');
    } finally {
      await crashing.stop();
    }
  });

  it('a change of site on a Ready VM moves it there: never a second VM on the other site, and it is deleted there', async () => {
    const key = eng.apply(vm('site-change'));
    const r = await eng.waitReady(key);
    const moved = structuredClone(r);
    moved.spec.forProvider.site = 'site-2';
    moved.spec.forProvider.node = sim.cluster('site-2').nodes[0]!;
    moved.metadata.generation = (moved.metadata.generation ?? 1) + 1;
    eng.apply(moved);
    const there = await eng.waitFor(
      key,
      (x) => x.status?.atProvider?.site === 'site-2' && x.status?.atProvider?.step === 'Ready',
      'Ready on site-2',
    );
    const own = () =>
      ownedBy(sim.cluster(SITE1), r.metadata.uid).length + ownedBy(sim.cluster('site-2'), r.metadata.uid).length;
    assert.equal(own(), 1, 'exactly one VM, on site-2');
    assert.equal(there.status?.atProvider?.vmId, r.status?.atProvider?.vmId);
    // Deleting it now destroys it where it is, and only then drops the finalizer.
    eng.delete(key);
    await eng.waitGone(key);
    assert.equal(own(), 0);
  });

  it('a password echoed by a failing task never reaches a condition, the status or an event', async () => {
    const secret = 'pw-echoed-9d1c44';
    const c = sim.cluster(SITE1);
    const fault = c.addFault({
      kind: 'task',
      type: 'qmcreate',
      action: 'fail',
      at: 'start',
      message: `unable to apply cipassword ${secret}`,
    });
    const withSecret = await new Engine(sim, { secret: async () => secret }).start();
    try {
      const key = withSecret.apply(
        vm('echoed', { cloudInit: { user: 'ops', passwordSecretRef: { name: 's', key: 'password' } } }),
      );
      await withSecret.waitFor(key, (r) => cond(r, 'Synced')?.reason === 'CreateFailed', 'CreateFailed');
      const visible = JSON.stringify([withSecret.get(key), withSecret.store.events]);
      assert.ok(visible.includes('unable to apply cipassword'), 'the error itself is reported');
      assert.ok(!visible.includes(secret), 'without the password');
    } finally {
      c.removeFault(fault);
      await withSecret.stop();
    }
  });

  it('stop() while a create is on the wire records nothing; the next process finds the create and makes no second VM', async () => {
    const c = sim.cluster(SITE1);
    const held = c.addFault({
      kind: 'applied-late',
      method: 'POST',
      path: '/nodes/{node}/qemu',
      delayMs: 20_000_000,
      count: 1,
    });
    const first = await new Engine(sim, {}).start();
    const key = first.apply(vm('stopped-mid-create'));
    await waitUntil(
      () => (first.get(key).metadata.annotations?.['crossplane.io/external-create-pending'] ? true : undefined),
      'the create marked pending',
    );
    await waitUntil(() => (count(c, 'POST /nodes/{node}/qemu') > 0 ? true : undefined), 'the create sent');
    await first.stop();
    const left = first.get(key);
    assert.equal(
      left.metadata.annotations?.['crossplane.io/external-create-failed'],
      undefined,
      'not recorded as failed',
    );
    c.removeFault(held); // PVE applies it now
    const next = await new Engine(sim, { store: first.store }).start();
    try {
      const r = await next.waitReady(key);
      assert.equal(ownedBy(c, r.metadata.uid).length, 1, 'one VM');
    } finally {
      await next.stop();
    }
  });

  it('stop() aborts a reconcile waiting on Proxmox: it returns at once and nothing is sent after it', async () => {
    const c = sim.cluster(SITE1);
    const slow = new Engine(sim, {});
    await slow.start();
    // 20 s of real time at the test speed factor: far longer than stop() may take.
    const latency = c.addFault({ kind: 'latency', ms: 20_000_000, path: '/cluster/resources' });
    try {
      const before = count(c, 'GET /cluster/resources');
      slow.apply(vm('aborted'));
      await waitUntil(() => (count(c, 'GET /cluster/resources') > before ? true : undefined), 'a request in flight');
      const started = Date.now();
      await slow.stop();
      assert.ok(Date.now() - started < 5_000, 'stop() did not wait for the 20-second request');
      const after = JSON.stringify(c.counters());
      await new Promise((resolve) => setTimeout(resolve, 200));
      assert.equal(JSON.stringify(c.counters()), after, 'no request after stop()');
    } finally {
      c.removeFault(latency);
    }
  });
});

describe('the ownership marker cannot be forged or broken by a manifest', () => {
  const base = () => {
    const r = vm('marker-test');
    r.metadata.uid = '2f1e8c4a-0d2b-4c7e-9a51-3b6f0c9d7e12';
    return r;
  };

  it('a description holding another resource marker line is refused before anything is created', () => {
    const r = base();
    const other = base();
    other.metadata.name = 'victim';
    other.metadata.uid = '9a9a9a9a-0000-4000-8000-000000000001';
    r.spec.forProvider.description = `hello\n${ownershipMarker(other, { installation: 'cli-default', vmid: 100 })}`;
    const problems = validateSpec(r);
    assert.deepEqual(
      problems.map((p) => p.field),
      ['spec.forProvider.description'],
    );
  });

  it('a namespace with a newline would split the marker: refused', () => {
    const r = base();
    r.metadata.namespace = 'prod\nprovider-proxmox.owner: x';
    assert.deepEqual(
      validateSpec(r).map((p) => p.field),
      ['metadata.namespace'],
    );
  });

  it('only the last line counts, and only in the exact grammar', () => {
    const uid = '2f1e8c4a-0d2b-4c7e-9a51-3b6f0c9d7e12';
    assert.equal(markerUid(`provider-proxmox.owner: default/a uid=${uid}\nnotes`), undefined);
    assert.equal(markerUid(`notes\n\nprovider-proxmox.owner: default/a uid=${uid}\n`), uid);
    assert.equal(markerUid(`provider-proxmox.owner: default/a uid=${uid} trailing`), undefined);
  });
});
