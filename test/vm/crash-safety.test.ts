/**
 * Crash safety of the ProxmoxVM lifecycle against the simulator (DESIGN.md invariants 1 and 3):
 * the reconciler is stopped after every single step of create and of delete (deterministic
 * EngineHooks, no sleeps decide where), then a new "process" starts on the same state file (fresh
 * store, reconciler and VmConnector: every in-memory cache is gone) and runs to Ready (or gone).
 * Afterwards the simulator holds exactly one VM with this resource's ownership marker (none after
 * delete), and no other VM but the template.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { before, describe, it } from 'node:test';
import { type LoadedProviderConfig, parseProviderConfig } from '../../src/api/provider-config-load.ts';
import type { ProxmoxVM } from '../../src/api/proxmoxvm.ts';
import { ManagedReconciler, type ReconcileResult } from '../../src/engine/reconciler.ts';
import { ANNOTATION_EXTERNAL_NAME } from '../../src/engine/resource.ts';
import { type EngineHooks, SimulatedCrash } from '../../src/engine/types.ts';
import { FileConfigSource } from '../../src/local/config-source.ts';
import { settled } from '../../src/local/resource-view.ts';
import { FileStore } from '../../src/local/store.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { providerConfigYaml } from '../../src/sim/provider-config.ts';
import { VmConnector } from '../../src/vm/connector.ts';
import { markerUid } from '../../src/vm/spec.ts';
import { startTestSim } from '../helpers/sim.ts';

const KEY = 'default/vm1';
const TEMPLATE_VMID = 9000;
const STEP_TIMEOUT_MS = 30_000;

type Path = 'import' | 'template' | 'snippet';

function manifest(path: Path): ProxmoxVM {
  return {
    apiVersion: 'proxmox.sankofa.io/v1alpha1',
    kind: 'ProxmoxVM',
    metadata: { name: 'vm1', namespace: 'default', uid: '', generation: 1 },
    spec: {
      forProvider: {
        name: 'vm1',
        site: 'site-1',
        node: 'ml110-01',
        cpu: 2,
        memory: '2Gi',
        disk: '8Gi',
        storage: 'local-lvm',
        network: 'vmbr0',
        ...(path === 'template'
          ? { template: { vmid: TEMPLATE_VMID, full: true } }
          : { image: 'local:import/ubuntu-22.04-cloud.qcow2' }),
        // More than the API can set: the snippet is uploaded over SSH before the create.
        ...(path === 'snippet' ? { userData: '#cloud-config\npackages: [jq]\nruncmd: [echo ready]\n' } : {}),
        cloudInit: { user: 'ops', sshKeys: ['ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFake ops@example'] },
      },
      providerConfigRef: { name: 'default' },
    },
  };
}

/**
 * The state file as one process sees it. A SimulatedCrash thrown inside the ExternalClient is caught
 * by the reconciler like any error, which would then write status: a dead process writes nothing,
 * so once `dead` is set every write fails.
 */
class ProcessStore extends FileStore<ProxmoxVM> {
  dead = false;
  override async update(r: ProxmoxVM): Promise<ProxmoxVM> {
    if (this.dead) throw new Error('the process is dead');
    return super.update(r);
  }
  override async updateStatus(r: ProxmoxVM): Promise<ProxmoxVM> {
    if (this.dead) throw new Error('the process is dead');
    return super.updateStatus(r);
  }
}

/** One run of the "process": its own store (the state file), connector and reconciler. */
interface Proc {
  store: ProcessStore;
  connector: VmConnector;
  rec: ManagedReconciler<ProxmoxVM>;
}

interface Env {
  sim: Simulator;
  dir: string;
  stateFile: string;
  config: LoadedProviderConfig;
}

async function newEnv(): Promise<Env> {
  const sim = await startTestSim();
  const dir = mkdtempSync(join(tmpdir(), 'pp-crash-'));
  const config = parseProviderConfig(providerConfigYaml(sim, { ssh: true }), join(dir, 'providerconfig.yaml'));
  return { sim, dir, stateFile: join(dir, 'state.json'), config };
}

async function closeEnv(env: Env): Promise<void> {
  await env.sim.close();
  rmSync(env.dir, { recursive: true, force: true });
}

function boot(env: Env, crash?: { hooks: EngineHooks; crashed: () => boolean }): Proc {
  const store = new ProcessStore(env.stateFile);
  store.open();
  const hooks: EngineHooks | undefined = crash && {
    at: async (step, key) => {
      try {
        await crash.hooks.at?.(step, key);
      } catch (e) {
        if (e instanceof SimulatedCrash) store.dead = true;
        throw e;
      }
    },
  };
  const connector = new VmConnector(new FileConfigSource(env.config), {
    ...(hooks ? { hooks } : {}),
    taskPollMs: 10,
    // A create the crash left of unknown outcome is waited for this long before it is sent again
    // (production: 30 s, which these tests would spend in real time).
    unknownOutcomeWaitMs: 300,
  });
  const rec = new ManagedReconciler<ProxmoxVM>(store, connector, {
    ...(hooks ? { hooks } : {}),
    shortWaitMs: 10,
    pollIntervalMs: 60_000,
    // short, but not zero: "not found" right after a create is still distrusted for a while
    creationGraceMs: 200,
    createFailureScheduleMs: [20, 40, 80],
  });
  return { store, connector, rec };
}

/** The process dies: nothing of it survives but the state file. */
async function kill(p: Proc): Promise<void> {
  await p.connector.close();
  p.store.close();
}

function crashedBy(res: ReconcileResult): boolean {
  return res.kind === 'rateLimited' && res.error instanceof SimulatedCrash;
}

/**
 * Reconcile KEY until it is Ready (or gone), or until a SimulatedCrash stops the reconciler.
 * Waits are capped short: the outcome never depends on them, only the run time does.
 */
async function drive(p: Proc, until: 'ready' | 'gone'): Promise<'done' | 'crashed'> {
  const deadline = Date.now() + STEP_TIMEOUT_MS;
  let last: ReconcileResult | undefined;
  for (;;) {
    last = await p.rec.reconcile(KEY);
    if (crashedBy(last)) return 'crashed';
    const o = p.store.getSync(KEY);
    if (until === 'ready' ? o !== undefined && settled(o) : o === undefined) return 'done';
    if (Date.now() > deadline) {
      const err = last.kind === 'rateLimited' ? String(last.error) : '';
      throw new Error(
        `not ${until} after ${STEP_TIMEOUT_MS} ms (${err}): ${JSON.stringify({ annotations: o?.metadata.annotations, status: o?.status })}`,
      );
    }
    const wait = last.kind === 'requeueAfter' ? Math.min(last.ms, 15) : 15;
    await new Promise((r) => setTimeout(r, wait));
  }
}

/** Our VMs in the simulator (by ownership marker) and every VM that is neither ours nor the template. */
function simVms(env: Env, uid: string): { ours: number[]; others: number[]; lockedOrPartial: number[] } {
  const ours: number[] = [];
  const others: number[] = [];
  const lockedOrPartial: number[] = [];
  for (const c of env.sim.clusters) {
    for (const vm of c.state.vms.values()) {
      if (vm.vmid === TEMPLATE_VMID) continue; // each site's template
      if (markerUid(vm.config.description) === uid) ours.push(vm.vmid);
      else if (vm.config.lock === 'create' || vm.config.lock === 'clone') lockedOrPartial.push(vm.vmid);
      else others.push(vm.vmid);
    }
  }
  return { ours, others, lockedOrPartial };
}

function assertExactlyOne(env: Env, p: Proc, label: string): void {
  const r = p.store.getSync(KEY);
  assert.ok(r, `${label}: the resource exists`);
  const uid = r.metadata.uid;
  const vms = simVms(env, uid);
  assert.deepEqual(vms.others, [], `${label}: no VM besides ours and the template`);
  assert.deepEqual(vms.lockedOrPartial, [], `${label}: no half-created VM left`);
  assert.equal(vms.ours.length, 1, `${label}: exactly one VM carries uid ${uid} (found ${vms.ours.join(', ')})`);
  assert.equal(r.metadata.annotations?.[ANNOTATION_EXTERNAL_NAME], String(vms.ours[0]), `${label}: external-name`);
  const vm = env.sim.cluster('site-1').state.vms.get(vms.ours[0]!)!;
  assert.equal(vm.status, 'running', `${label}: the VM runs`);
  assert.equal(vm.config.lock, undefined, `${label}: no lock left`);
  assert.ok(env.sim.cluster('site-1').state.vms.get(TEMPLATE_VMID), `${label}: the template is untouched`);
  assert.equal(r.status?.atProvider?.task, undefined, `${label}: no task left in status`);
  const snippet = /^user=(.+)$/.exec(vm.config.cicustom ?? '')?.[1];
  if (r.spec.forProvider.userData) {
    assert.ok(snippet, `${label}: the VM refers to its snippet`);
    const local = env.sim.cluster('site-1').state.nodes.get(vm.node)!.storages.get('local')!;
    const ours = [...local.volumes.values()].map((v) => v.volid).filter((v) => v.includes('provider-proxmox-vm1-'));
    assert.deepEqual(ours, [snippet], `${label}: exactly its snippet is on the node`);
  }
}

function assertNone(env: Env, uid: string, label: string): void {
  const vms = simVms(env, uid);
  assert.deepEqual(vms, { ours: [], others: [], lockedOrPartial: [] }, `${label}: no VM of ours is left`);
  assert.ok(env.sim.cluster('site-1').state.vms.get(TEMPLATE_VMID), `${label}: the template is untouched`);
}

/** Crash on the k-th call of hook `step` (1-based); records every step reached. */
function crashAt(
  step: string | undefined,
  k: number,
  seen: string[] = [],
): { hooks: EngineHooks; crashed: () => boolean } {
  let n = 0;
  let crashed = false;
  return {
    crashed: () => crashed,
    hooks: {
      at: (s, key) => {
        if (key !== KEY) return;
        seen.push(s);
        if (s === step && ++n === k && !crashed) {
          crashed = true;
          throw new SimulatedCrash(s);
        }
      },
    },
  };
}

/** Step N of a recorded sequence as (name, occurrence). */
function occurrences(seq: string[]): Array<{ step: string; k: number; index: number }> {
  const count = new Map<string, number>();
  return seq.map((step, index) => {
    const k = (count.get(step) ?? 0) + 1;
    count.set(step, k);
    return { step, k, index };
  });
}

async function createReady(env: Env, path: Path): Promise<void> {
  const p = boot(env);
  p.store.apply(manifest(path));
  assert.equal(await drive(p, 'ready'), 'done');
  await kill(p);
}

function deleteRequested(env: Env): void {
  const p = boot(env);
  p.store.markDeleted(KEY);
  p.store.close();
}

for (const path of ['import', 'template', 'snippet'] as const) {
  describe(`crash safety, ${path} path`, () => {
    let createSeq: string[] = [];
    let deleteSeq: string[] = [];

    before(async () => {
      // A clean run, recording the step names of create and of delete.
      const env = await newEnv();
      try {
        const seen: string[] = [];
        const p = boot(env, crashAt(undefined, 0, seen));
        p.store.apply(manifest(path));
        assert.equal(await drive(p, 'ready'), 'done');
        assertExactlyOne(env, p, 'clean create');
        createSeq = [...seen];
        seen.length = 0;
        const uid = p.store.getSync(KEY)!.metadata.uid;
        p.store.markDeleted(KEY);
        assert.equal(await drive(p, 'gone'), 'done');
        assertNone(env, uid, 'clean delete');
        deleteSeq = [...seen];
        await kill(p);
      } finally {
        await closeEnv(env);
      }
    });

    it('the clean run passes the named steps of create and delete', () => {
      for (const s of ['connected', 'observed', 'finalizer-added', 'preflight-passed', 'create-pending']) {
        assert.ok(createSeq.includes(s), `create reaches ${s}: ${createSeq.join(' ')}`);
      }
      for (const s of ['create-issued', 'create-succeeded', 'update-start']) assert.ok(createSeq.includes(s), s);
      if (path === 'template') assert.ok(createSeq.includes('update-config'), 'a clone is configured after it');
      if (path === 'snippet') assert.ok(createSeq.includes('create-snippet-uploaded'), 'the snippet goes first');
      for (const s of ['delete-stop-issued', 'delete-destroy-issued', 'delete-issued', 'external-gone']) {
        assert.ok(deleteSeq.includes(s), `delete reaches ${s}: ${deleteSeq.join(' ')}`);
      }
    });

    it('a crash after every single step of create, then a restart: exactly one owned VM', async (t) => {
      const hit = new Set<string>();
      for (const { step, k, index } of occurrences(createSeq)) {
        const label = `create step ${index + 1}/${createSeq.length} (${step} #${k})`;
        const t0 = Date.now();
        const env = await newEnv();
        try {
          const crash = crashAt(step, k);
          const p1 = boot(env, crash);
          p1.store.apply(manifest(path));
          const first = await drive(p1, 'ready');
          if (first === 'crashed') hit.add(step);
          await kill(p1);
          // Restart: a new process on the same state file.
          const p2 = boot(env);
          assert.equal(await drive(p2, 'ready'), 'done', label);
          assertExactlyOne(env, p2, label);
          await kill(p2);
        } finally {
          await closeEnv(env);
        }
        t.diagnostic(`${label}: ${Date.now() - t0} ms`);
      }
      // Polling steps may repeat a different number of times in another run; every distinct step
      // must have been crashed at least once.
      assert.deepEqual([...hit].sort(), [...new Set(createSeq)].sort(), 'every step was crashed at');
    });

    it('a crash after every single step of delete, then a restart: no VM of ours is left', async () => {
      const hit = new Set<string>();
      for (const { step, k, index } of occurrences(deleteSeq)) {
        const label = `delete step ${index + 1}/${deleteSeq.length} (${step} #${k})`;
        const env = await newEnv();
        try {
          await createReady(env, path);
          deleteRequested(env);
          const crash = crashAt(step, k);
          const p1 = boot(env, crash);
          const uid = p1.store.getSync(KEY)!.metadata.uid;
          const first = await drive(p1, 'gone');
          if (first === 'crashed') hit.add(step);
          await kill(p1);
          const p2 = boot(env);
          assert.equal(await drive(p2, 'gone'), 'done', label);
          assertNone(env, uid, label);
          await kill(p2);
        } finally {
          await closeEnv(env);
        }
      }
      assert.deepEqual([...hit].sort(), [...new Set(deleteSeq)].sort(), 'every step was crashed at');
    });

    const variants = [
      { crashStep: 'create-issued', fail: undefined },
      { crashStep: 'create-succeeded', fail: undefined },
      // the task ends in an error after it made the VM (a create that died late): adopted and completed
      { crashStep: 'create-issued', fail: 'end' },
    ] as const;
    for (const v of variants) {
      it(`a crash while the create task runs (crash at ${v.crashStep}${v.fail ? ', then the task fails' : ''}): the restart finds it, no second create`, async () => {
        const label = `stalled ${path} task, crash at ${v.crashStep}${v.fail ? ', task fails' : ''}`;
        const env = await newEnv();
        try {
          const site = env.sim.cluster('site-1');
          const type = path === 'template' ? 'qmclone' : 'qmcreate';
          const stall = site.addFault({ kind: 'task', type, action: 'stall' });
          if (v.fail) site.addFault({ kind: 'task', type, action: 'fail', at: v.fail, message: 'simulated failure' });
          const p1 = boot(env, crashAt(v.crashStep, 1));
          p1.store.apply(manifest(path));
          assert.equal(await drive(p1, 'ready'), 'crashed', label);
          await kill(p1);
          const creates = () =>
            (site.counters()['POST /nodes/{node}/qemu'] ?? 0) +
            (site.counters()['POST /nodes/{node}/qemu/{vmid}/clone'] ?? 0);
          assert.equal(creates(), 1, `${label}: one create issued`);
          const running = [...site.state.tasks.values()].filter((t) => t.status === 'running' && t.type === type);
          assert.equal(running.length, 1, `${label}: the task is still running`);
          const inCreation = [...site.state.vms.values()].filter(
            (x) => x.config.lock === 'create' || x.config.lock === 'clone',
          );
          assert.equal(inCreation.length, 1, `${label}: one VM is being created`);

          // The restarted process looks at the VM while the task still runs: it waits, creates nothing.
          const p2 = boot(env);
          for (let i = 0; i < 10; i++) {
            const res = await p2.rec.reconcile(KEY);
            assert.notEqual(res.kind, 'done', `${label}: keeps watching`);
            await new Promise((r) => setTimeout(r, 10));
          }
          assert.equal(creates(), 1, `${label}: no second create while the task runs`);
          const r = p2.store.getSync(KEY)!;
          assert.equal(
            r.metadata.annotations?.[ANNOTATION_EXTERNAL_NAME],
            String(inCreation[0]!.vmid),
            `${label}: same VMID`,
          );
          assert.notEqual(r.status?.conditions?.find((c) => c.type === 'Ready')?.status, 'True');

          site.removeFault(stall);
          assert.equal(await drive(p2, 'ready'), 'done', label);
          assert.equal(creates(), 1, `${label}: still exactly one create`);
          assertExactlyOne(env, p2, label);
          await kill(p2);
        } finally {
          await closeEnv(env);
        }
      });
    }

    it('a crash just after a create whose task fails before making the VM: created again, exactly one VM', async () => {
      const env = await newEnv();
      try {
        const site = env.sim.cluster('site-1');
        const type = path === 'template' ? 'qmclone' : 'qmcreate';
        site.addFault({ kind: 'task', type, action: 'fail', at: 'start', message: 'simulated failure', count: 1 });
        const p1 = boot(env, crashAt('create-issued', 1));
        p1.store.apply(manifest(path));
        assert.equal(await drive(p1, 'ready'), 'crashed');
        await kill(p1);
        const p2 = boot(env);
        assert.equal(await drive(p2, 'ready'), 'done');
        assertExactlyOne(env, p2, 'task failed at start');
        await kill(p2);
      } finally {
        await closeEnv(env);
      }
    });
  });
}
