/**
 * The end of a move to another site, read while PVE finishes it. The `qmigrate` worker unlocks the
 * VM on the target, then destroys the source and ends (qemu-server QemuMigrate.pm:1906-1909). A
 * reconcile that read the source (still there, locked `migrate`) before that end and the task list
 * after it took the source for left behind: SourceVmLeft, telling the operator to destroy a VMID
 * that no longer held our VM (found by the fault search; that VMID may be another user's VM by then).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Simulator } from '../../src/sim/index.ts';
import { cond, Engine, SITE1, startSim, vm, waitUntil } from './harness.ts';

const SITE2 = 'site-2';
const NODE2 = 'r630-01';

describe('a move arriving while its worker ends', () => {
  let sim: Simulator;
  let eng: Engine;
  before(async () => {
    sim = await startSim();
    eng = await new Engine(sim, { pollIntervalMs: 200 }).start();
  });
  after(async () => {
    await eng.stop();
    await sim.close();
  });

  it('a source destroyed between its read and the task list is not reported left behind', async () => {
    const c1 = sim.cluster(SITE1);
    const c2 = sim.cluster(SITE2);
    const key = eng.apply(vm('racer'));
    const vmid = (await eng.waitReady(key)).status!.atProvider!.vmId!;
    const worker = () => [...c1.state.tasks.values()].find((t) => t.type === 'qmigrate' && t.id === String(vmid));
    // Hold the worker at each of its waits in turn (a task takes its faults when it starts), up to
    // the one before its last tunnel command (`quit`): the target is unlocked then, the source still
    // there and locked `migrate`.
    const holds = Array.from({ length: 80 }, (_, i) =>
      c1.addFault({ kind: 'task', type: 'qmigrate', id: String(vmid), action: 'stall', step: i + 1 }),
    );
    // The migration's answer is lost: no UPID to follow, so each reconcile reads both VMs and the
    // source's task list (as a process that did not send the migration does).
    c1.addFault({ kind: 'reply-lost', method: 'POST', path: '/nodes/{node}/qemu/{vmid}/remote_migrate', count: 1 });
    eng.apply(vm('racer', { site: SITE2, node: NODE2 }));
    let step = 0;
    for (; ; step++) {
      assert.ok(step < holds.length, 'the worker reached its quit command');
      await waitUntil(() => c1.faults.active.get(holds[step]!)?.reached, `the worker's wait ${step + 1}`);
      if (/sending command "quit"/.test(worker()!.log.at(-1) ?? '')) break;
      c1.removeFault(holds[step]!);
    }
    const hold = holds[step]!;
    for (const later of holds.slice(step + 1)) c1.removeFault(later);
    assert.equal(c2.state.vms.get(vmid)?.config.lock, undefined, 'the target is unlocked');
    assert.equal(c1.state.vms.get(vmid)?.config.lock, 'migrate', 'the source is still there, locked');
    // The next reconcile's read of the target lets the worker end; the task list it reads next is
    // answered a moment later, once the worker has destroyed the source and ended.
    let released = false;
    c2.server.prependListener('request', (req: { method?: string; url?: string }) => {
      if (released || req.method !== 'GET' || !req.url?.includes(`/qemu/${vmid}/config`)) return;
      released = true;
      c1.addFault({ kind: 'latency', method: 'GET', path: '/nodes/{node}/tasks', ms: 2000, count: 1 });
      c1.removeFault(hold);
    });
    const r = await eng.waitFor(
      key,
      (x) => x.status?.atProvider?.site === SITE2 && x.status?.atProvider?.step === 'Ready',
      'Ready on site-2',
    );
    assert.ok(released, 'the worker was let go during a reconcile');
    assert.equal(worker()?.status, 'stopped');
    assert.equal(c1.state.vms.get(vmid), undefined, 'the source is gone (delete=1)');
    const left = cond(r, 'SourceVmLeft');
    assert.notEqual(left?.status, 'True', `SourceVmLeft: ${left?.message}`);
  });
});
