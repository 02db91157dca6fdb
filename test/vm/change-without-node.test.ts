/**
 * A change planned for a resource whose status records no node. applyChange dropped it without a
 * word, so observe planned it again on every reconcile with Synced True, for good: how the fault
 * search's F45 (a dead create's placeholder never cleared) hid. Now the change is refused with a
 * reason that says what is missing, and nothing is sent to Proxmox.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { ReasonedError } from '../../src/engine/types.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { Engine, mutations, SITE1, startSim, vm } from './harness.ts';

describe('a change planned without a node', () => {
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

  it('is refused with NodeUnknown, and nothing is sent', async () => {
    const key = eng.apply(vm('nodeless'));
    const ready = await eng.waitReady(key);
    await eng.stop();
    const r = structuredClone(ready);
    r.spec.forProvider.powerState = 'stopped';
    r.metadata.generation = (r.metadata.generation ?? 1) + 1;
    const external = await eng.connector.connect(r);
    const obs = await external.observe(r);
    assert.equal(obs.upToDate, false, 'the stop is planned');
    delete r.status!.atProvider!.node;
    const before = mutations(sim.cluster(SITE1));
    await assert.rejects(external.update(r), (e: unknown) => {
      assert.ok(e instanceof ReasonedError, String(e));
      assert.equal(e.reason, 'NodeUnknown');
      assert.match(e.message, /no node recorded in status\.atProvider\.node; nothing was sent/);
      return true;
    });
    assert.deepEqual(mutations(sim.cluster(SITE1)), before, 'no request that changes anything');
    assert.equal(sim.cluster(SITE1).state.vms.get(ready.status!.atProvider!.vmId!)?.status, 'running');
  });
});
