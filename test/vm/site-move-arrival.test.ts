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
import { login, ticketHeaders } from '../helpers/fidelity.ts';
import { raw, waitTask } from '../helpers/sim.ts';
import { cond, Engine, NODE1, SITE1, startSim, vm, waitUntil } from './harness.ts';

const SITE2 = 'site-2';
const NODE2 = 'r630-01';

describe('a move arriving while its worker ends', () => {
  /** The number of the qmigrate worker's wait before its `quit`, for a VM of vm()'s size (the first test finds it). */
  let quitStep: number | undefined;
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
    // The migration's answer is lost: no UPID to follow, so each reconcile reads both VMs and the
    // source's task list (as a process that did not send the migration does).
    c1.addFault({ kind: 'reply-lost', method: 'POST', path: '/nodes/{node}/qemu/{vmid}/remote_migrate', count: 1 });
    const { hold, step } = await holdBeforeQuit(sim, eng, 'racer', vmid);
    quitStep = step;
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

  it('a source left behind is reported with the fix, and the report clears once the operator removed it', async () => {
    assert.ok(quitStep, 'the first test found the wait before quit');
    const c1 = sim.cluster(SITE1);
    // Its own VMID: the first test's VM holds 100 on site-2 now, and a VM keeps its VMID when it moves.
    const key = eng.apply(vm('stranded', { vmid: 150 }));
    const vmid = (await eng.waitReady(key)).status!.atProvider!.vmId!;
    // The worker's process is killed once the target is unlocked, before it destroys the source:
    // PVE leaves the source stopped (here: as the migration left it) and locked `migrate`.
    c1.addFault({ kind: 'task', type: 'qmigrate', id: String(vmid), action: 'die', step: quitStep });
    eng.apply(vm('stranded', { vmid: 150, site: SITE2, node: NODE2 }));
    const r = await eng.waitFor(key, (x) => cond(x, 'SourceVmLeft')?.status === 'True', 'SourceVmLeft');
    assert.equal(c1.state.vms.get(vmid)?.config.lock, 'migrate', 'the source is there, locked');
    assert.match(cond(r, 'SourceVmLeft')!.message!, new RegExp(`qm unlock ${vmid} && qm destroy ${vmid} --purge`));
    assert.deepEqual(r.status?.atProvider?.sourceLeft, { site: SITE1, node: NODE1, vmid });
    // The operator removes it (as root@pam over the API: `skiplock` is root's, as `qm unlock` is).
    const root = ticketHeaders(await login(c1.url));
    const destroy = await raw(c1.url, 'DELETE', `/nodes/${NODE1}/qemu/${vmid}?purge=1&skiplock=1`, { headers: root });
    assert.equal(destroy.status, 200, destroy.text);
    assert.equal((await waitTask(c1.url, NODE1, (destroy.json as { data: string }).data)).exitstatus, 'OK');
    // The next full read of the VM (the drift read, or a spec change: here a change) looks again.
    eng.apply(vm('stranded', { vmid: 150, site: SITE2, node: NODE2, tags: ['moved'] }));
    const cleared = await eng.waitFor(
      key,
      (x) => cond(x, 'SourceVmLeft')?.status === 'False' && x.status?.atProvider?.step === 'Ready',
      'SourceVmLeft cleared',
    );
    assert.equal(cond(cleared, 'SourceVmLeft')?.reason, 'SourceRemoved');
    assert.equal(cleared.status?.atProvider?.sourceLeft, undefined);
  });

  it('a VM arriving at a VMID another resource names is waited for, not reported left from a dead create (F93)', async () => {
    const c1 = sim.cluster(SITE1);
    const c2 = sim.cluster(SITE2);
    const key = eng.apply(vm('arriving', { vmid: 170 }));
    const vmid = (await eng.waitReady(key)).status!.atProvider!.vmId!;
    // The move's worker held once the target's mtunnel made its `lock: create` placeholder
    // (qemu-server Qemu.pm:6711-6712), its `qmtunnel` task running on the target.
    const holds = Array.from({ length: 40 }, (_, i) =>
      c1.addFault({ kind: 'task', type: 'qmigrate', id: String(vmid), action: 'stall', step: i + 1 }),
    );
    eng.apply(vm('arriving', { vmid: 170, site: SITE2, node: NODE2 }));
    const tunnel = () => [...c2.state.tasks.values()].find((t) => t.type === 'qmtunnel' && t.id === String(vmid));
    let step = 0;
    for (; ; step++) {
      assert.ok(step < holds.length, 'the target placeholder was made');
      await waitUntil(() => c1.faults.active.get(holds[step]!)?.reached, `the worker's wait ${step + 1}`);
      if (c2.state.vms.get(vmid)?.config.lock === 'create' && tunnel()?.status === 'running') break;
      c1.removeFault(holds[step]!);
    }
    // Another resource names that VMID on site-2 (a user's spec.forProvider.vmid, or a VMID it
    // chose before the one there was destroyed): it finds the placeholder and no create task.
    const waiter = eng.apply(vm('waiter', { vmid: 170, site: SITE2, node: NODE2 }));
    await waitUntil(() => eng.attemptsOf(waiter).length >= 3, 'three reconciles of the waiter');
    const now = eng.get(waiter);
    assert.notEqual(now.status?.atProvider?.step, 'CreateInterrupted', cond(now, 'Synced')?.message);
    assert.equal(cond(now, 'Ready')?.reason, 'Creating', cond(now, 'Ready')?.message);
    assert.equal(c2.state.vms.get(vmid)?.config.lock, 'create', 'the placeholder is left to its worker');
    for (const h of holds.slice(step)) c1.removeFault(h);
    const moved = await eng.waitFor(
      key,
      (x) => x.status?.atProvider?.site === SITE2 && x.status?.atProvider?.step === 'Ready',
      'Ready on site-2',
    );
    assert.equal(moved.status?.atProvider?.vmId, vmid);
    const refused = await eng.waitFor(waiter, (x) => cond(x, 'Synced')?.reason === 'VMIDConflict', 'VMIDConflict');
    assert.match(cond(refused, 'Synced')!.message!, /not this resource's|not created by this resource/);
  });
});

/**
 * Move `name` (VM `vmid`) to site-2 and hold its qmigrate worker at the wait before its last tunnel
 * command (`quit`), stepping it wait by wait (a task takes its faults when it starts): the target
 * is unlocked then, the source still there and locked `migrate`. Returns the holding fault and
 * the wait's number.
 */
async function holdBeforeQuit(
  sim: Simulator,
  eng: Engine,
  name: string,
  vmid: number,
): Promise<{ hold: number; step: number }> {
  const c1 = sim.cluster(SITE1);
  const worker = () => [...c1.state.tasks.values()].find((t) => t.type === 'qmigrate' && t.id === String(vmid));
  const holds = Array.from({ length: 80 }, (_, i) =>
    c1.addFault({ kind: 'task', type: 'qmigrate', id: String(vmid), action: 'stall', step: i + 1 }),
  );
  eng.apply(vm(name, { site: SITE2, node: NODE2 }));
  let step = 0;
  for (; ; step++) {
    assert.ok(step < holds.length, 'the worker reached its quit command');
    await waitUntil(() => sim.cluster(SITE1).faults.active.get(holds[step]!)?.reached, `the worker's wait ${step + 1}`);
    if (/sending command "quit"/.test(worker()!.log.at(-1) ?? '')) break;
    c1.removeFault(holds[step]!);
  }
  for (const later of holds.slice(step + 1)) c1.removeFault(later);
  return { hold: holds[step]!, step: step + 1 };
}
