import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Simulator } from '../../src/sim/index.ts';
import { raw, startTestSim, waitTask } from '../helpers/sim.ts';

describe('simulator smoke', () => {
  let sim: Simulator;
  before(async () => {
    sim = await startTestSim();
  });
  after(() => sim.close());

  it('serves both seed sites with their nodes', async () => {
    const s1 = await raw(sim.cluster('site-1').url, 'GET', '/nodes');
    const s2 = await raw(sim.cluster('site-2').url, 'GET', '/nodes');
    assert.equal((s1.json as { data: Array<{ node: string; maxcpu: number }> }).data[0]?.node, 'ml110-01');
    assert.equal((s1.json as { data: Array<{ node: string; maxcpu: number }> }).data[0]?.maxcpu, 5);
    assert.equal((s2.json as { data: Array<{ node: string; maxcpu: number }> }).data[0]?.node, 'r630-01');
    assert.equal((s2.json as { data: Array<{ node: string; maxcpu: number }> }).data[0]?.maxcpu, 50);
  });

  it('creates a VM from the cloud image, starts it and reports its address through the agent', async () => {
    const url = sim.cluster('site-1').url;
    const create = await raw(url, 'POST', '/nodes/ml110-01/qemu', {
      form: {
        vmid: '100',
        name: 'smoke',
        cores: '2',
        memory: '2048',
        scsi0: 'local-lvm:0,import-from=local:import/ubuntu-22.04-cloud.qcow2',
        ide2: 'local-lvm:cloudinit',
        net0: 'virtio,bridge=vmbr0',
        agent: '1',
        start: '1',
      },
    });
    assert.equal(create.status, 200, create.text);
    const upid = (create.json as { data: string }).data;
    assert.match(upid, /^UPID:ml110-01:[0-9A-F]{8}:[0-9A-F]{8}:[0-9A-F]{8}:qmcreate:100:root@pam!test:$/);
    assert.equal((await waitTask(url, 'ml110-01', upid)).exitstatus, 'OK');
    const cfg = (await raw(url, 'GET', '/nodes/ml110-01/qemu/100/config')).json as { data: Record<string, string> };
    assert.equal(cfg.data.scsi0, 'local-lvm:vm-100-disk-0,size=2252M');
    assert.match(cfg.data.net0 ?? '', /^virtio=BC:24:11:[0-9A-F:]{8},bridge=vmbr0$/);
    let ip: string | undefined;
    for (let i = 0; i < 5000 && !ip; i++) {
      const r = await raw(url, 'GET', '/nodes/ml110-01/qemu/100/agent/network-get-interfaces');
      if (r.status === 200) {
        const res = (
          r.json as { data: { result: Array<{ name: string; 'ip-addresses': Array<{ 'ip-address': string }> }> } }
        ).data.result;
        ip = res.find((x) => x.name === 'ens18')?.['ip-addresses'][0]?.['ip-address'];
      } else await new Promise((resolve) => setTimeout(resolve, 1));
    }
    assert.equal(ip, '198.51.100.100');
  });
});
