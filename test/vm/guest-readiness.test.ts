/**
 * Readiness of a guest that may never run qemu-guest-agent (the stock Ubuntu cloud image has
 * none): a bounded wait that ends in AgentNotResponding (Ready False, with what to check) and a
 * slow poll, static addresses that need no agent, `agent: false`, and cloud-init's own result in
 * the CloudInit condition, read through the agent. A userData the API cannot set is refused
 * before anything is created when the site has no SSH, and NativeOnly says what it left out.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Simulator } from '../../src/sim/index.ts';
import { providerConfigYaml } from '../../src/sim/provider-config.ts';
import { defaultTopology } from '../../src/sim/topology.ts';
import { cond, count, Engine, SITE1, startSim, vm } from './harness.ts';

/** The default world, with images as they come: no qemu-guest-agent in any guest. */
function stockTopology() {
  const t = defaultTopology();
  for (const c of t.clusters)
    for (const n of c.nodes) {
      for (const s of n.storages) for (const v of s.volumes ?? []) v.guestAgent = false;
      for (const x of n.vms ?? []) x.guestAgent = false;
    }
  return t;
}

const PACKAGES = '#cloud-config\nusers:\n  - name: ops\npackages:\n  - qemu-guest-agent\n';

describe('guest readiness without an agent', () => {
  let sim: Simulator;
  let eng: Engine;
  before(async () => {
    sim = await startSim({ topology: stockTopology() });
    // A site without SSH: no snippets.
    eng = await new Engine(sim, {
      pollIntervalMs: 200,
      configYaml: () => providerConfigYaml(sim, { ssh: false }),
    }).start();
  });
  after(async () => {
    await eng.stop();
    await sim.close();
  });

  it('an agent that never answers ends in AgentNotResponding after agentTimeout, then one call per poll', async () => {
    const key = eng.apply(vm('agentless-1', { agentTimeout: '60s' }));
    await eng.waitFor(key, (x) => x.status?.atProvider?.step === 'WaitingForAgent', 'WaitingForAgent');
    // The guest runs on (the simulated clock; the uptime PVE reports is what the wait counts).
    sim.clock.advance(61_000);
    const r = await eng.waitFor(key, (x) => x.status?.atProvider?.step === 'AgentNotResponding', 'AgentNotResponding');
    const ready = cond(r, 'Ready')!;
    assert.equal(ready.status, 'False');
    assert.equal(ready.reason, 'AgentNotResponding');
    assert.match(ready.message ?? '', /qemu-guest-agent/);
    assert.match(ready.message ?? '', /agent: false/);
    assert.equal(cond(r, 'Synced')?.status, 'True', 'nothing failed on the provider side');
    const vmid = r.status!.atProvider!.vmId!;
    // From now on the resource is polled at the poll interval, not the agent interval: count the
    // agent calls over a stretch of wall time in which the fast agent poll (5 ms here) would make hundreds.
    const c = sim.cluster(SITE1);
    const calls = () => count(c, 'GET /nodes/{node}/qemu/{vmid}/agent/network-get-interfaces');
    const before = calls();
    await new Promise((res) => setTimeout(res, 1000));
    assert.ok(calls() - before <= 8, `at most one agent call per poll interval (${calls() - before} in 1 s)`);

    // The agent comes (installed by hand): the VM becomes Ready with its address.
    c.setGuestAgent(vmid, true);
    const up = await eng.waitReady(key);
    assert.equal(up.status?.atProvider?.ipSource, 'agent');
    assert.ok(up.status?.atProvider?.ipAddresses?.length);
  });

  it('a static ipConfig address needs no agent: Ready with that address', async () => {
    const key = eng.apply(
      vm('agentless-2', { cloudInit: { ipConfig: [{ address: '192.0.2.50/24', gateway: '192.0.2.1' }] } }),
    );
    const r = await eng.waitReady(key);
    assert.deepEqual(r.status?.atProvider?.ipAddresses, ['192.0.2.50']);
    assert.equal(r.status?.atProvider?.ipSource, 'ipConfig');
  });

  it('agent: false with DHCP: Ready without an address', async () => {
    const key = eng.apply(vm('agentless-3', { agent: false }));
    const r = await eng.waitReady(key);
    assert.equal(r.status?.atProvider?.ipAddresses, undefined);
  });

  it('userData with packages on a site without ssh: refused before anything is created, with the fix', async () => {
    const c = sim.cluster(SITE1);
    const vms = c.state.vms.size;
    const key = eng.apply(vm('needs-snippet', { userData: PACKAGES }));
    const r = await eng.waitSynced(key, 'SnippetsUnavailable');
    const msg = cond(r, 'Synced')?.message ?? '';
    assert.match(msg, /packages/);
    assert.match(msg, /spec\.sites\[\]\.ssh/);
    assert.match(msg, /userDataMode: NativeOnly/);
    assert.equal(c.state.vms.size, vms, 'no VM was created');
    eng.delete(key);
    await eng.waitGone(key);
  });

  it('userDataMode NativeOnly: users and keys applied, the CloudInit condition names what was left out', async () => {
    const key = eng.apply(
      vm('native-only', {
        userData: PACKAGES,
        agent: false,
        cloudInit: { userDataMode: 'NativeOnly' },
      }),
    );
    const r = await eng.waitReady(key);
    const ci = cond(r, 'CloudInit');
    assert.equal(ci?.status, 'False');
    assert.equal(ci?.reason, 'UserDataPartiallyApplied');
    assert.match(ci?.message ?? '', /packages/);
    const c = sim.cluster(SITE1);
    assert.equal(c.state.vms.get(r.status!.atProvider!.vmId!)!.config.ciuser, 'ops');
  });
});

describe('cloud-init result through the guest agent', () => {
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

  it('a guest whose cloud-init finished: CloudInit True (Done), the result in status', async () => {
    const key = eng.apply(vm('ci-done'));
    const r = await eng.waitReady(key);
    const ci = cond(r, 'CloudInit');
    assert.equal(ci?.status, 'True', JSON.stringify(r.status));
    assert.equal(ci?.reason, 'Done');
    assert.equal(r.status?.atProvider?.cloudInit?.status, 'done');
    assert.equal(r.status?.atProvider?.cloudInit?.for, 'native');
  });
});
