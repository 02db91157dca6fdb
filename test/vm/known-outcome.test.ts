/**
 * Our own finished task as evidence (src/vm/known-outcome.ts), against the simulator: a create
 * reaches Ready with its config read once, its status never read on its own, and no task's status
 * read one by one (the node's task list says a task ended OK); and what the trust must not hide:
 * a spec edited while the resize runs is read and applied, a failed resize is read again in full,
 * a VM stopped by hand while its guest boots is seen through the agent and started again, and on
 * PVE 6 (a task list without `since`) each task's own status says how it ended.
 */
import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import type { Simulator } from '../../src/sim/index.ts';
import { raw, waitTask } from '../helpers/sim.ts';
import { cond, count, Engine, NODE1, SITE1, startSim, TEMPLATE, vm } from './harness.ts';

const CONFIG = 'GET /nodes/{node}/qemu/{vmid}/config';
const STATUS = 'GET /nodes/{node}/qemu/{vmid}/status/current';
const PENDING = 'GET /nodes/{node}/qemu/{vmid}/pending';
const CLOUDINIT = 'GET /nodes/{node}/qemu/{vmid}/cloudinit';
const TASK_STATUS = 'GET /nodes/{node}/tasks/{upid}/status';
const TASK_LIST = 'GET /nodes/{node}/tasks';

describe('our finished task as evidence', () => {
  let sim: Simulator;
  let eng: Engine;
  before(async () => {
    sim = await startSim();
  });
  afterEach(async () => {
    await eng?.stop();
    sim.cluster(SITE1).clearFaults();
  });
  after(async () => {
    await sim.close();
  });

  it('create to Ready: one config read, no status, pending or cloud-init read, no task read one by one', async () => {
    eng = await new Engine(sim, { pollIntervalMs: 60_000 }).start();
    const c = sim.cluster(SITE1);
    c.resetCounters();
    const r = await eng.waitReady(eng.apply(vm('known-1', { disk: '20Gi' })));
    assert.equal(r.status?.atProvider?.state, 'running');
    assert.ok(r.status?.atProvider?.ipAddresses?.length, 'addresses from the agent');
    const n = (k: string) => count(c, k);
    assert.equal(n(CONFIG), 1, 'the config is read once, after the create');
    assert.equal(n(STATUS), 0, 'the power state is what our tasks left');
    assert.equal(n(PENDING) + n(CLOUDINIT), 0, 'a start of ours applied whatever was pending');
    assert.equal(n(TASK_STATUS), 0, "the node's task list said how each task ended");
    assert.ok(n(TASK_LIST) >= 1);
    assert.equal(count(c, 'PUT /nodes/{node}/qemu/{vmid}/resize'), 1);
  });

  it('a spec edited while the resize runs: the plan is dropped, the new spec read and applied', async () => {
    eng = await new Engine(sim, { pollIntervalMs: 60_000 }).start();
    const c = sim.cluster(SITE1);
    const stall = c.addFault({ kind: 'task', type: 'resize', action: 'stall' });
    const key = eng.apply(vm('known-2', { disk: '20Gi', memory: '1Gi' }));
    await eng.waitFor(key, (x) => x.status?.atProvider?.step === 'Resizing', 'Resizing');
    eng.apply(vm('known-2', { disk: '20Gi', memory: '2Gi' }));
    // A reconcile has read the edit before the resize may end: one begun before the edit (reconciles
    // of a resource run one at a time) could otherwise start the VM on the old spec first, and the
    // edit would then wait for a reboot as a pending change (seen once on a loaded host).
    const edited = eng.store.getSync(key)!.metadata.generation!;
    await eng.waitFor(key, (x) => (cond(x, 'Synced')?.observedGeneration ?? 0) >= edited, 'the edit observed');
    c.removeFault(stall);
    const r = await eng.waitReady(key);
    const vmid = r.status!.atProvider!.vmId!;
    assert.equal(c.state.vms.get(vmid)?.config.memory, '2048', 'the edit reached the VM');
  });

  it('a failed resize: the VM is read again in full, and the resize made', async () => {
    eng = await new Engine(sim, { pollIntervalMs: 60_000 }).start();
    const c = sim.cluster(SITE1);
    c.addFault({ kind: 'task', type: 'resize', action: 'fail', message: 'simulated failure', count: 1 });
    c.resetCounters();
    const r = await eng.waitReady(eng.apply(vm('known-3', { disk: '20Gi' })));
    const vmid = r.status!.atProvider!.vmId!;
    assert.match(String(c.state.vms.get(vmid)?.config.scsi0), /size=20G/);
    assert.ok(count(c, CONFIG) >= 2, `config reads: ${count(c, CONFIG)}`);
    assert.ok(count(c, TASK_STATUS) >= 1, "the failure's own status and log make the error");
  });

  it('a VM stopped by hand while its guest boots: the agent says so, and it is started again', async () => {
    eng = await new Engine(sim, { pollIntervalMs: 60_000 }).start();
    const c = sim.cluster(SITE1);
    // A guest whose agent does not answer (taken out while the start is held): the resource waits.
    const hold = c.addFault({ kind: 'task', type: 'qmstart', action: 'stall' });
    const key = eng.apply(vm('known-4', { agentTimeout: '1h' }));
    const starting = await eng.waitFor(key, (x) => x.status?.atProvider?.step === 'Starting', 'Starting');
    const vmid = starting.status!.atProvider!.vmId!;
    c.setGuestAgent(vmid, false);
    c.removeFault(hold);
    await eng.waitFor(key, (x) => x.status?.atProvider?.step === 'WaitingForAgent', 'WaitingForAgent');
    const starts = count(c, 'POST /nodes/{node}/qemu/{vmid}/status/start');
    const res = await raw(c.url, 'POST', `/nodes/${NODE1}/qemu/${vmid}/status/stop`, { form: {} });
    assert.equal(res.status, 200, res.text);
    await waitTask(c.url, NODE1, (res.json as { data: string }).data);
    await eng.waitFor(
      key,
      () =>
        count(c, 'POST /nodes/{node}/qemu/{vmid}/status/start') > starts && c.state.vms.get(vmid)?.status === 'running',
      'started again',
    );
    c.setGuestAgent(vmid, true);
    const r = await eng.waitReady(key);
    assert.equal(cond(r, 'Ready')?.status, 'True');
  });
});

describe('our finished task as evidence on PVE 6.4 (no `since` in the task list)', () => {
  let sim: Simulator;
  let eng: Engine;
  before(async () => {
    sim = await startSim({ profile: '6.4' });
    eng = await new Engine(sim, { pollIntervalMs: 60_000 }).start();
  });
  after(async () => {
    await eng.stop();
    await sim.close();
  });

  it('each task is read on its own once it left the active list, and the clone reaches Ready', async () => {
    const c = sim.cluster(SITE1);
    c.resetCounters();
    const earlier = new Set(c.state.tasks.keys());
    const r = await eng.waitReady(
      eng.apply(vm('known-64', { image: undefined, template: { name: TEMPLATE }, disk: '20Gi' })),
    );
    assert.equal(r.status?.atProvider?.state, 'running');
    // The clone, its config, the resize and the start: each one's end read from the task itself.
    const tasks = [...c.state.tasks.keys()].filter((k) => !earlier.has(k)).length;
    assert.ok(tasks >= 3, `${tasks} tasks`);
    assert.ok(count(c, TASK_STATUS) >= tasks, `task status reads: ${count(c, TASK_STATUS)} for ${tasks} tasks`);
  });
});
