/**
 * A task of ours that fails because its VM is gone by now is not the resource's failure. Two
 * `apply` runs with different state files (test/local/two-states.test.ts) each make a VM for a
 * manifest, and one retires the other's as a twin; when that destroy holds the VM's lock, the other
 * runtime's resize waits for the lock, then finds no config (PVE loads it once the lock is held:
 * qemu-server src/PVE/API2/Qemu.pm:6002-6004) and fails. That run stopped with TaskFailed (a reason
 * `apply` stops for), where its next reconcile would have adopted the twin kept. Here the VM is
 * destroyed the same way by another user while the resize waits: `apply` goes on, and the resource
 * ends Ready on a VM made again.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parseProviderConfig } from '../../src/api/provider-config-load.ts';
import { applyCommand } from '../../src/local/commands.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { providerConfigYaml } from '../../src/sim/provider-config.ts';
import { capture } from '../helpers/capture.ts';
import { writeManifests } from '../helpers/cli.ts';
import { AS_OPERATOR, raw, startTestSim } from '../helpers/sim.ts';
import { waitUntil } from '../vm/harness.ts';

const NODE = 'ml110-01';

describe('a task that failed because its VM is gone', () => {
  let sim: Simulator;
  let dir: string;
  before(async () => {
    // Speed 20: the resize waits for the VM's lock up to 10 simulated seconds (half a real second),
    // time enough for the destroy below to hold it and end.
    sim = await startTestSim({ speed: 20 });
    dir = mkdtempSync(join(tmpdir(), 'pp-gone-vm-'));
  });
  after(async () => {
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('does not stop apply: the resize that found no VM is followed by a VM made again, exit 0', async () => {
    const c = sim.cluster('site-1');
    const manifests = join(dir, 'm');
    mkdirSync(manifests);
    writeManifests(manifests, [{ name: 'gone-1' }]);
    const config = parseProviderConfig(providerConfigYaml(sim), join(dir, 'providerconfig.yaml'));
    // Our resize arrives 2 simulated seconds after it is sent; the destroy holds the VM's lock for 3.
    const lateResize = c.addFault({
      kind: 'latency',
      ms: 2_000,
      method: 'PUT',
      path: '/nodes/{node}/qemu/{vmid}/resize',
      count: 1,
    });
    const slowDestroy = c.addFault({ kind: 'task', type: 'qmdestroy', action: 'stall', durationMs: 3_000, count: 1 });
    const out = capture();
    const applied = applyCommand({
      files: [manifests],
      loadedConfig: config,
      state: join(dir, 'state.json'),
      taskPollMs: 10,
      agentPollMs: 10,
      quiet: true,
      out: out.out,
      err: out.out,
      timeoutMs: 120_000,
      // A VM not found within the creation grace after our create is waited for, not made again
      // at once (a list that lags the create); 30 s by default, a second here.
      creationGraceMs: 1_000,
    });
    const named = () => [...c.state.vms.values()].filter((v) => v.config.name === 'gone-1');
    const created = (v: ReturnType<typeof named>[number]) =>
      [...c.state.tasks.values()].some(
        (t) => t.type === 'qmcreate' && t.id === String(v.vmid) && t.status === 'stopped',
      );
    // The create has ended: another user destroys the VM before our resize is processed.
    const first = await waitUntil(() => named().find(created), 'the first VM made', 60_000);
    const destroy = await raw(c.url, 'DELETE', `/nodes/${NODE}/qemu/${first.vmid}`, { headers: AS_OPERATOR });
    assert.equal(destroy.status, 200, destroy.text);
    const code = await applied;
    c.removeFault(lateResize);
    c.removeFault(slowDestroy);
    // The scenario happened: our resize of the first VM waited for its lock and found no config.
    const resize = [...c.state.tasks.values()].find((t) => t.type === 'resize' && t.id === String(first.vmid));
    assert.ok(resize, 'a resize of the first VM was sent');
    assert.match(resize.exitstatus ?? '', /Configuration file .* does not exist/);
    assert.equal(code, 0, out.text().slice(-3000));
    const now = named();
    assert.equal(now.length, 1, `one VM named gone-1: ${now.map((v) => v.vmid).join(', ')}`);
    assert.notEqual(now[0], first, 'made again (at the same VMID, free again)');
    assert.equal(now[0]!.status, 'running');
  });
});
