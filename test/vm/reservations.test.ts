/**
 * VMIDs held by resources in the store are not handed out again after a restart; creates that
 * choose at once share one nextid read and still take a VMID each.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { FileConfigSource } from '../../src/local/config-source.ts';
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

  it('creates that choose at once read nextid once and take a VMID each', async () => {
    const connector = new VmConnector(new FileConfigSource(simConfig(sim)));
    // Two: the node's slots (two by default) are what lets a create's checks pass.
    const wave = ['w1', 'w2'].map((name) => {
      const r = vm(name);
      r.metadata.uid = `uid-${name}`;
      return r;
    });
    const exts = await Promise.all(wave.map((r) => connector.connect(r)));
    for (const [i, r] of wave.entries()) assert.deepEqual(await exts[i]!.preflight(r), {});
    let nextIdReads = 0;
    const count = (req: { url?: string }) => {
      if (req.url?.startsWith('/api2/json/cluster/nextid')) nextIdReads++;
    };
    const server = sim.cluster(SITE1).server;
    server.prependListener('request', count);
    try {
      const names = await Promise.all(wave.map(async (r, i) => (await exts[i]!.prepareCreate(r)).externalName));
      assert.equal(new Set(names).size, 2, `two VMIDs: ${names.join(', ')}`);
      assert.equal(nextIdReads, 1, 'one nextid read for the two');
      // A later choice reads it again: a read is shared only while it is in flight.
      const again = (await exts[1]!.prepareCreate(wave[1]!)).externalName;
      assert.notEqual(again, names[0], 'not the VMID the other one reserved');
      assert.equal(nextIdReads, 2);
    } finally {
      server.removeListener('request', count);
      await connector.close();
    }
  });
});
