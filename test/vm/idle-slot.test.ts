/**
 * A slot of this process held for a resource with no task in flight: the task's end was seen by
 * another process (an old leader still at work), so this one never released it, and the node's
 * next resize waited for it for good (fault search F50). A reconcile's observe releases it; a
 * plan's, which changes nothing, does not. (The fault search's regression F50 is the whole case.)
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Simulator } from '../../src/sim/index.ts';
import type { SiteContext } from '../../src/vm/site-cache.ts';
import { Engine, NODE1, startSim, vm } from './harness.ts';

describe('a slot held with no task in flight', () => {
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

  it("a plan leaves it; the resource's next reconcile releases it", async () => {
    const key = eng.apply(vm('idle-slot'));
    const r = await eng.waitReady(key);
    await eng.stop();
    const external = await eng.connector.connect(r);
    // The connector's SiteContext for the resource's site, which its limiter lives in.
    const site = (external as unknown as { site: SiteContext }).site;
    const uid = r.metadata.uid;
    assert.equal(r.status?.atProvider?.task, undefined, 'no task in flight');
    assert.ok(site.limiter.tryAcquire(uid, NODE1, [], undefined, { resize: true }), 'a resize slot taken for it');
    await external.planFor(structuredClone(r), key);
    assert.equal(site.limiter.releaseHeld('nobody'), false);
    // Still held after the plan: releasing it now finds it.
    assert.equal(site.limiter.releaseHeld(uid), true, 'the plan did not release it');
    assert.ok(site.limiter.tryAcquire(uid, NODE1, [], undefined, { resize: true }));
    await external.observe(structuredClone(r));
    assert.equal(site.limiter.releaseHeld(uid), false, 'the reconcile released it');
  });
});
