/**
 * Guests without qemu-guest-agent: whether a guest runs the agent comes from its image (the
 * topology's `guestAgent` on a volume or a VM, default false), carried by `import-from` and by
 * clones, and changed by `SimCluster.setGuestAgent` / `POST /_sim/guest-agent` (software
 * installed or removed in the guest). `agent: 1` alone is not enough: PVE answers every agent
 * call with `500 QEMU guest agent is not running` when guest-ping fails (qemu-server
 * src/PVE/QemuServer/Agent.pm:109-113), for ever.
 *
 * Deterministic: the agent's boot time is passed with the simulated clock (`clock.advance`).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { SimCluster, Simulator } from '../../src/sim/index.ts';
import { parseTopology } from '../../src/sim/topology.ts';
import { assertError, createVmAndWait, data, finish, NODE, power } from '../helpers/fidelity.ts';
import { raw, startTestSim, TOKEN } from '../helpers/sim.ts';

const TOPOLOGY = `
clusters:
  - name: site-1
    listen: 127.0.0.1:0
    nodes:
      - name: ${NODE}
        cpus: 8
        memory: 64G
        storages:
          - id: local
            type: dir
            content: [iso, import]
            total: 100G
            volumes:
              - { name: import/stock.qcow2, size: 1G }
              - { name: import/prepared.qcow2, size: 1G, guestAgent: true }
          - { id: local-lvm, type: lvmthin, content: [images], total: 500G }
        bridges:
          - { name: vmbr0, cidr: 192.0.2.10/24, dhcp: 192.0.2.100-192.0.2.199 }
        vms:
          - { vmid: 9001, name: stock-tpl, template: true, disk: { storage: local-lvm, size: 1G }, agent: true }
          - { vmid: 9002, name: prepared-tpl, template: true, disk: { storage: local-lvm, size: 1G }, agent: true,
              guestAgent: true }
`;

const AGENT_BOOT_MS = 60_000;

async function agent(url: string, vmid: number) {
  return raw(url, 'GET', `/nodes/${NODE}/qemu/${vmid}/agent/network-get-interfaces`);
}

/** Start the VM and let its guest boot well past the agent's boot time. */
async function boot(sim: Simulator, url: string, vmid: number): Promise<void> {
  assert.equal(await power(url, vmid, 'start'), 'OK');
  sim.clock.advance(AGENT_BOOT_MS);
}

async function cloneOf(url: string, tpl: number, newid: number): Promise<void> {
  const r = await raw(url, 'POST', `/nodes/${NODE}/qemu/${tpl}/clone`, { form: { newid: String(newid) } });
  assert.equal(r.status, 200, r.reason);
  assert.equal(await finish(url, data<string>(r)), 'OK');
}

describe('guest agent: images with and without qemu-guest-agent', () => {
  let sim: Simulator;
  let c: SimCluster;
  let url: string;
  before(async () => {
    sim = await startTestSim({ topology: parseTopology(TOPOLOGY, 'agent.yaml') });
    c = sim.cluster('site-1');
    url = c.url;
  });
  after(() => sim.close());

  it('imported from the stock image (no agent): `QEMU guest agent is not running` for ever', async () => {
    await createVmAndWait(url, {
      vmid: '700',
      agent: '1',
      net0: 'virtio,bridge=vmbr0',
      scsi0: 'local-lvm:0,import-from=local:import/stock.qcow2',
    });
    await boot(sim, url, 700);
    assertError(await agent(url, 700), 500, 'QEMU guest agent is not running');
    sim.clock.advance(24 * 3600 * 1000);
    assertError(await agent(url, 700), 500, 'QEMU guest agent is not running');
    assertError(await raw(url, 'POST', `/nodes/${NODE}/qemu/700/agent/ping`), 500, 'QEMU guest agent is not running');
    // status/current still reports the configured channel.
    assert.equal(data<{ agent?: number }>(await raw(url, 'GET', `/nodes/${NODE}/qemu/700/status/current`)).agent, 1);
  });

  it('imported from an image prepared with the agent: answers after the boot', async () => {
    await createVmAndWait(url, {
      vmid: '701',
      agent: '1',
      net0: 'virtio,bridge=vmbr0',
      scsi0: 'local-lvm:0,import-from=local:import/prepared.qcow2',
    });
    await boot(sim, url, 701);
    assert.equal((await agent(url, 701)).status, 200);
  });

  it('clones inherit the template guest; a clone of a clone too', async () => {
    await cloneOf(url, 9001, 702);
    await cloneOf(url, 9002, 703);
    await boot(sim, url, 702);
    await boot(sim, url, 703);
    assertError(await agent(url, 702), 500, 'QEMU guest agent is not running');
    assert.equal((await agent(url, 703)).status, 200);
    assert.equal(await power(url, 703, 'stop'), 'OK');
    const r = await raw(url, 'POST', `/nodes/${NODE}/qemu/703/clone`, { form: { newid: '704' } });
    assert.equal(await finish(url, data<string>(r)), 'OK');
    await boot(sim, url, 704);
    assert.equal((await agent(url, 704)).status, 200);
  });

  it('no agent key: not configured; `agent: 0`: the channel is missing, so "not running"', async () => {
    await createVmAndWait(url, { vmid: '705', net0: 'virtio,bridge=vmbr0' });
    await createVmAndWait(url, { vmid: '706', agent: '0', net0: 'virtio,bridge=vmbr0' });
    await boot(sim, url, 705);
    await boot(sim, url, 706);
    assertError(await agent(url, 705), 500, 'No QEMU guest agent configured');
    assertError(await agent(url, 706), 500, 'QEMU guest agent is not running');
  });

  it('a VM without an imported image (blank disk) keeps the agent-running model', async () => {
    await createVmAndWait(url, { vmid: '707', agent: '1', scsi0: 'local-lvm:1', net0: 'virtio,bridge=vmbr0' });
    await boot(sim, url, 707);
    assert.equal((await agent(url, 707)).status, 200);
  });

  it('setGuestAgent / POST /_sim/guest-agent installs or removes the agent in a guest', async () => {
    // Installed in the running stock VM (as cloud-init packages would): answers from now on.
    assert.equal(c.setGuestAgent(700, true), true);
    assert.equal((await agent(url, 700)).status, 200);
    const post = (body: unknown) =>
      fetch(`${url}/_sim/guest-agent`, {
        method: 'POST',
        headers: { Authorization: `PVEAPIToken=${TOKEN}` },
        body: JSON.stringify(body),
      });
    const stop = await post({ vmid: 700, running: false });
    assert.equal(stop.status, 200);
    assert.deepEqual(await stop.json(), { data: null });
    assertError(await agent(url, 700), 500, 'QEMU guest agent is not running');
    assert.equal((await post({ vmid: 700, running: true })).status, 200);
    // It stays installed across a reboot (after the usual boot time) and clones inherit it.
    assert.equal(await power(url, 700, 'stop'), 'OK');
    await boot(sim, url, 700);
    assert.equal((await agent(url, 700)).status, 200);
    assert.equal((await post({ vmid: 4242, running: true })).status, 404);
    const bad = await post({ vmid: 700, running: 'yes' });
    assert.equal(bad.status, 400);
    assert.deepEqual(((await bad.json()) as { errors?: unknown }).errors, {
      'guest-agent': 'expected {"vmid": N, "running": true|false}',
    });
    assert.equal(c.setGuestAgent(4242, true), false);
  });

  it('the topology refuses a guestAgent that is not a boolean', () => {
    assert.throws(
      () => parseTopology(TOPOLOGY.replace('guestAgent: true }', 'guestAgent: "yes" }'), 'bad.yaml'),
      /bad\.yaml:\d+:\d+: clusters\.0\.nodes\.0\.storages\.0\.volumes\.1\.guestAgent: expected true or false, got "yes"/,
    );
  });
});

describe('guest agent: the default topology models images prepared with the agent', () => {
  let sim: Simulator;
  let url: string;
  before(async () => {
    sim = await startTestSim();
    url = sim.cluster('site-1').url;
  });
  after(() => sim.close());

  it('an import of the seed image and a clone of template 9000 both answer', async () => {
    await createVmAndWait(url, {
      vmid: '710',
      agent: '1',
      net0: 'virtio,bridge=vmbr0',
      scsi0: 'local-lvm:0,import-from=local:import/ubuntu-22.04-cloud.qcow2',
    });
    await cloneOf(url, 9000, 711);
    await boot(sim, url, 710);
    await boot(sim, url, 711);
    assert.equal((await agent(url, 710)).status, 200);
    assert.equal((await agent(url, 711)).status, 200);
  });
});
