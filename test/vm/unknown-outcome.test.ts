/**
 * Regression tests for the creates whose outcome Proxmox hides: a reply lost after the create was
 * applied, a create applied after the client gave up, and a create or clone whose worker died and
 * left its `lock: create|clone` placeholder. Each made a second VM, or a resource stuck forever,
 * on main before the fix (issue 9).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Simulator } from '../../src/sim/index.ts';
import { cond, Engine, guests, ownedBy, SITE1, startSim, TEMPLATE, vm } from './harness.ts';

describe('creates whose outcome Proxmox hides', () => {
  let sim: Simulator;
  let eng: Engine;
  let root: Engine;
  before(async () => {
    sim = await startSim();
    eng = await new Engine(sim).start();
    root = await new Engine(sim, { auth: 'password' }).start();
  });
  after(async () => {
    await eng.stop();
    await root.stop();
    await sim.close();
  });

  for (const source of ['import', 'clone'] as const) {
    it(`a ${source} whose reply was lost (applied, connection reset): exactly one VM, Ready`, async () => {
      const c = sim.cluster(SITE1);
      const path = source === 'import' ? '/nodes/{node}/qemu' : '/nodes/{node}/qemu/{vmid}/clone';
      const fault = c.addFault({ kind: 'reply-lost', method: 'POST', path, count: 1 });
      // The worker takes a while (a real import or clone does): retries meet the placeholder.
      const slow = c.addFault({
        kind: 'task',
        type: source === 'import' ? 'qmcreate' : 'qmclone',
        action: 'stall',
        durationMs: 1_000_000,
        count: 1,
      });
      // The production cache: the bulk list read before the create does not show the VM yet.
      const cached = await new Engine(sim, { siteTtlMs: 10_000 }).start();
      const key = cached.apply(
        vm(`lost-${source}`, source === 'clone' ? { image: undefined, template: { name: TEMPLATE } } : {}),
      );
      const r = await cached.waitReady(key).finally(() => cached.stop());
      c.removeFault(fault);
      c.removeFault(slow);
      assert.equal(ownedBy(c, r.metadata.uid).length, 1, 'one VM, not two');
      assert.equal(
        guests(c).filter((g) => g.config.lock === 'create' || g.config.lock === 'clone').length,
        0,
        'no placeholder left',
      );
      assert.equal(r.status?.atProvider?.createOutcome, undefined, 'the outcome is known now');
    });
  }

  it('a create applied after the client gave up: the outcome is unknown, waited for, and one VM results', async () => {
    const c = sim.cluster(SITE1);
    const fault = c.addFault({
      kind: 'applied-late',
      method: 'POST',
      path: '/nodes/{node}/qemu',
      delayMs: 200,
      count: 1,
    });
    const late = await new Engine(sim, { unknownOutcomeWaitMs: 5_000 }).start();
    try {
      const key = late.apply(vm('applied-late'));
      await late.waitFor(key, (x) => x.status?.atProvider?.createOutcome === 'Unknown', 'outcome unknown');
      const r = await late.waitReady(key);
      assert.equal(ownedBy(c, r.metadata.uid).length, 1);
    } finally {
      c.removeFault(fault);
      await late.stop();
    }
  });

  it('a create whose worker died (token): CreateInterrupted with the exact fix, no second VM; delete is no VMIDConflict', async () => {
    const c = sim.cluster(SITE1);
    const fault = c.addFault({ kind: 'task', type: 'qmcreate', action: 'die', at: 'start', count: 1 });
    const key = eng.apply(vm('died-token'));
    const stuck = await eng.waitSynced(key, 'CreateInterrupted');
    c.removeFault(fault);
    const vmid = Number(stuck.metadata.annotations?.['crossplane.io/external-name']);
    assert.equal(c.state.vms.get(vmid)?.config.lock, 'create', 'PVE keeps the placeholder');
    assert.match(cond(stuck, 'Synced')?.message ?? '', new RegExp(`qm unlock ${vmid} && qm destroy ${vmid} --purge`));
    await eng.waitFailures(key, 3);
    assert.equal(guests(c).filter((g) => g.config.name === 'died-token').length, 0, 'no second VM was created');
    eng.delete(key);
    await eng.waitFailures(key, 2);
    assert.notEqual(cond(eng.get(key), 'Synced')?.reason, 'VMIDConflict');
    // The operator removes the placeholder by hand (as `qm destroy` would): the resource then goes.
    c.state.vms.delete(vmid);
    await eng.waitGone(key);
  });

  it('a create whose worker died (root@pam): the placeholder is destroyed and the VM created again, once', async () => {
    const c = sim.cluster(SITE1);
    const fault = c.addFault({ kind: 'task', type: 'qmcreate', action: 'die', at: 'end', count: 1 });
    const key = root.apply(vm('died-root'));
    const r = await root.waitReady(key);
    c.removeFault(fault);
    assert.equal(ownedBy(c, r.metadata.uid).length, 1);
    assert.equal(guests(c).filter((g) => g.config.lock === 'create').length, 0, 'no placeholder left');
  });
});
