/** VMIDs held by resources in the store are not handed out again after a restart. */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { FileConfigSource } from '../../src/local/runtime.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { VmConnector, vmidHoldersOf } from '../../src/vm/connector.ts';
import { SITE1, simConfig, startSim, vm } from './harness.ts';

describe('VMID reservations from the store', () => {
  let sim: Simulator;
  before(async () => {
    sim = await startSim();
  });
  after(() => sim.close());

  it('a fresh connector skips VMIDs other resources hold as external names', async () => {
    const holder = vm('holder');
    holder.metadata.uid = 'uid-holder';
    holder.metadata.annotations = { 'crossplane.io/external-name': '100' };
    const fresh = vm('fresh');
    fresh.metadata.uid = 'uid-fresh';
    const config = simConfig(sim);
    const connector = new VmConnector(new FileConfigSource(config), {
      vmidHolders: (site) => vmidHoldersOf([holder, fresh], site, undefined),
    });
    const ext = await connector.connect(fresh);
    assert.equal(await sim.cluster(SITE1).state.vms.has(100), false, 'VM 100 does not exist yet');
    assert.deepEqual(await ext.preflight(fresh), {});
    const { externalName } = await ext.prepareCreate(fresh);
    assert.notEqual(externalName, '100', 'the VMID the holder owns is skipped');
    assert.equal(externalName, '101');
    // Without the store's view, the same connector state would have picked 100.
    const bare = new VmConnector(new FileConfigSource(config));
    const other = vm('other');
    other.metadata.uid = 'uid-other';
    const ext2 = await bare.connect(other);
    await ext2.preflight(other);
    assert.equal((await ext2.prepareCreate(other)).externalName, '100');
    await connector.close();
    await bare.close();
  });
});
