import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { ManagedReconciler, type ReconcileResult, type ReconcilerOptions } from '../../src/engine/reconciler.ts';
import {
  ANNOTATION_CREATE_FAILED,
  ANNOTATION_CREATE_PENDING,
  ANNOTATION_CREATE_SUCCEEDED,
  ANNOTATION_EXTERNAL_NAME,
  ANNOTATION_PAUSED,
  ANNOTATION_POLL_INTERVAL,
  ANNOTATION_RECONCILE_REQUESTED,
  type Condition,
  FINALIZER,
  type ManagementAction,
  policySupported,
  rfc3339,
  setAnnotation,
} from '../../src/engine/resource.ts';
import {
  ConflictError,
  type EngineHooks,
  type ExternalClient,
  ReasonedError,
  SimulatedCrash,
} from '../../src/engine/types.ts';
import { CREATE_FAILURE_SCHEDULE_MS } from '../../src/engine/workqueue.ts';
import { MemoryStore } from '../../src/local/memory-store.ts';
import { ExternalSystem, ScriptedConnector, type TestVM, testVM } from '../helpers/scripted-external.ts';

const T0 = Date.parse('2025-06-01T12:00:00Z');
const KEY = 'default/vm1';

/** A MemoryStore that records every write and can be told to answer the next write with a conflict. */
class RecordingStore extends MemoryStore<TestVM> {
  readonly writes: Array<{ kind: 'update' | 'status'; annotations: Record<string, string>; finalizers: string[] }> = [];
  readonly conflictNext: Array<'update' | 'status'> = [];
  override async update(r: TestVM): Promise<TestVM> {
    if (this.conflictNext[0] === 'update') {
      this.conflictNext.shift();
      throw new ConflictError();
    }
    const out = await super.update(r);
    this.writes.push({
      kind: 'update',
      annotations: { ...r.metadata.annotations },
      finalizers: [...(r.metadata.finalizers ?? [])],
    });
    return out;
  }
  override async updateStatus(r: TestVM): Promise<TestVM> {
    if (this.conflictNext[0] === 'status') {
      this.conflictNext.shift();
      throw new ConflictError();
    }
    this.writes.push({
      kind: 'status',
      annotations: { ...r.metadata.annotations },
      finalizers: [...(r.metadata.finalizers ?? [])],
    });
    return super.updateStatus(r);
  }
}

interface Env {
  clock: { t: number };
  now: () => number;
  store: RecordingStore;
  sys: ExternalSystem;
  rec: ManagedReconciler<TestVM>;
  /** A new reconciler (a restarted process) over the same store and external system. */
  fresh(opts?: Partial<ReconcilerOptions>): ManagedReconciler<TestVM>;
  advance(ms: number): void;
  get(key?: string): TestVM | undefined;
  cond(type: string, key?: string): Condition | undefined;
}

function setup(
  o: { deterministic?: boolean; hooks?: EngineHooks; opts?: Partial<ReconcilerOptions>; sys?: ExternalSystem } = {},
): Env {
  const clock = { t: T0 };
  const now = () => clock.t;
  const store = new RecordingStore();
  store.now = now;
  const sys = o.sys ?? new ExternalSystem();
  const deterministic = o.deterministic ?? true;
  const make = (opts: Partial<ReconcilerOptions> = {}) =>
    new ManagedReconciler<TestVM>(store, new ScriptedConnector(sys, { deterministic, now }), { now, ...opts });
  const env: Env = {
    clock,
    now,
    store,
    sys,
    rec: make({ ...(o.hooks ? { hooks: o.hooks } : {}), ...o.opts }),
    fresh: (opts) => make(opts),
    advance: (ms) => {
      clock.t += ms;
    },
    get: (key = KEY) => store.getSync(key),
    cond: (type, key = KEY) => store.getSync(key)?.status?.conditions?.find((c) => c.type === type),
  };
  return env;
}

function pick(c: Condition | undefined): Pick<Condition, 'status' | 'reason'> | undefined {
  return c ? { status: c.status, reason: c.reason } : undefined;
}

/** Create and bring a resource to Ready (two reconciles), past the creation grace period. */
async function createReady(env: Env, vm: TestVM = testVM('vm1')): Promise<void> {
  env.store.apply(vm);
  const key = `default/${vm.metadata.name}`;
  await env.rec.reconcile(key);
  env.advance(60_000);
  await env.rec.reconcile(key);
  assert.deepEqual(pick(env.cond('Ready', key)), { status: 'True', reason: 'Available' });
}

describe('ManagedReconciler: create', () => {
  it('writes external-name and create-pending in one store write before create() is called', async () => {
    let atPending: TestVM | undefined;
    let objectsAtPending = -1;
    let createCallsAtPending = -1;
    const env = setup({
      hooks: {
        at: (step) => {
          if (step !== 'create-pending') return;
          atPending = env.store.getSync(KEY);
          objectsAtPending = env.sys.objects.size;
          createCallsAtPending = env.sys.callsOf('create');
        },
      },
    });
    env.store.apply(testVM('vm1'));
    const result = await env.rec.reconcile(KEY);

    assert.ok(atPending, 'the create-pending hook ran');
    assert.equal(atPending.metadata.annotations?.[ANNOTATION_EXTERNAL_NAME], '100');
    assert.equal(atPending.metadata.annotations?.[ANNOTATION_CREATE_PENDING], rfc3339(T0));
    assert.ok(atPending.metadata.finalizers?.includes(FINALIZER));
    assert.equal(objectsAtPending, 0, 'nothing exists externally yet');
    assert.equal(createCallsAtPending, 0, 'create() not called yet');

    // No write ever carried the external name without the pending mark.
    const updates = env.store.writes.filter((w) => w.kind === 'update');
    const firstWithName = updates.find((w) => w.annotations[ANNOTATION_EXTERNAL_NAME] !== undefined);
    assert.ok(firstWithName?.annotations[ANNOTATION_CREATE_PENDING], 'name and pending landed together');
    // prepareCreate picked the name before create, and create used it.
    const order = env.sys.calls.map((c) => c.op);
    assert.ok(order.indexOf('prepare') < order.indexOf('create'));
    assert.deepEqual([...env.sys.objects.keys()], ['100']);

    assert.deepEqual(result, { kind: 'requeueAfter', ms: 2000, progress: true });
    const stored = env.get()!;
    assert.equal(stored.metadata.annotations?.[ANNOTATION_CREATE_SUCCEEDED], rfc3339(T0));
    assert.equal(stored.metadata.annotations?.[ANNOTATION_CREATE_FAILED], undefined);
    assert.deepEqual(pick(env.cond('Ready')), { status: 'False', reason: 'Creating' });
    assert.deepEqual(pick(env.cond('Synced')), { status: 'True', reason: 'ReconcileSuccess' });
    assert.equal(env.sys.ownedBy('uid-vm1').length, 1);
  });

  it('without prepareCreate, the name create() returns is persisted with create-succeeded', async () => {
    const env = setup({ deterministic: false });
    env.store.apply(testVM('vm1'));
    await env.rec.reconcile(KEY);
    const stored = env.get()!;
    assert.equal(stored.metadata.annotations?.[ANNOTATION_EXTERNAL_NAME], '100');
    assert.ok(stored.metadata.annotations?.[ANNOTATION_CREATE_SUCCEEDED]);
    assert.equal(env.sys.callsOf('prepare'), 0);
  });

  it('then observes the new resource as Ready, Synced, and polls at the poll interval', async () => {
    const env = setup();
    env.store.apply(testVM('vm1', { memory: null }));
    await env.rec.reconcile(KEY);
    env.advance(5000);
    const result = await env.rec.reconcile(KEY);
    assert.deepEqual(result, { kind: 'requeueAfter', ms: 60_000 });
    assert.deepEqual(pick(env.cond('Ready')), { status: 'True', reason: 'Available' });
    assert.deepEqual(pick(env.cond('Synced')), { status: 'True', reason: 'ReconcileSuccess' });
    assert.equal(env.sys.callsOf('create'), 1);
    assert.equal(env.get()!.status?.atProvider?.id, '100');
    // late-initialized memory landed in the spec
    assert.equal(env.get()!.spec.forProvider.memory, 1024);
    assert.equal(env.get()!.metadata.generation, 2);
  });

  it('without LateInitialize in the policies, the spec is not filled in', async () => {
    const env = setup();
    const vm = testVM('vm1', { memory: null });
    vm.spec.managementPolicies = ['Observe', 'Create', 'Update', 'Delete'];
    env.store.apply(vm);
    await env.rec.reconcile(KEY);
    env.advance(5000);
    await env.rec.reconcile(KEY);
    assert.equal(env.get()!.spec.forProvider.memory, undefined);
    assert.equal(env.get()!.metadata.generation, 1);
  });

  it('a failed create writes create-failed, says why in Synced, and backs off on the create schedule', async () => {
    const env = setup();
    env.sys.failNext.create = new ReasonedError('BridgeNotFound', 'bridge vmbr9 does not exist on node pve1');
    env.store.apply(testVM('vm1'));
    const result = await env.rec.reconcile(KEY);
    assert.equal(result.kind, 'rateLimited');
    // the n-th failed create in a row waits the n-th step of the schedule (counted by the reconciler)
    assert.deepEqual((result as { schedule?: number[] }).schedule, [CREATE_FAILURE_SCHEDULE_MS[0]]);
    const stored = env.get()!;
    assert.equal(stored.metadata.annotations?.[ANNOTATION_CREATE_FAILED], rfc3339(T0));
    assert.equal(stored.metadata.annotations?.[ANNOTATION_CREATE_SUCCEEDED], undefined);
    assert.deepEqual(pick(env.cond('Ready')), { status: 'False', reason: 'Creating' });
    const synced = env.cond('Synced')!;
    assert.equal(synced.status, 'False');
    assert.equal(synced.reason, 'BridgeNotFound');
    assert.equal(synced.message, 'create failed: bridge vmbr9 does not exist on node pve1');
    assert.equal(env.sys.objects.size, 0);
  });

  it('the n-th failed create in a row waits the n-th step of the create schedule', async () => {
    const env = setup();
    env.store.apply(testVM('vm1'));
    const steps: Array<number[] | undefined> = [];
    for (let i = 0; i < 6; i++) {
      env.sys.failNext.create = new ReasonedError('CreateFailed', 'task failed');
      const r = await env.rec.reconcile(KEY);
      assert.equal(r.kind, 'rateLimited');
      steps.push((r as { schedule?: number[] }).schedule);
      env.advance(700_000);
    }
    assert.deepEqual(steps, [[30_000], [60_000], [120_000], [300_000], [600_000], [600_000]]);
  });

  it('a retryable create failure uses the normal backoff, a plain error says ReconcileError', async () => {
    const env = setup();
    env.sys.failNext.create = new ReasonedError(
      'Locked',
      "can't lock file '/var/lock/qemu-server/lock-100.conf'",
      true,
    );
    env.store.apply(testVM('vm1'));
    const r1 = await env.rec.reconcile(KEY);
    assert.equal(r1.kind, 'rateLimited');
    assert.equal((r1 as { schedule?: number[] }).schedule, undefined);
    assert.equal(env.cond('Synced')?.reason, 'Locked');

    env.advance(10_000);
    env.sys.failNext.create = new Error('socket hang up');
    const r2 = await env.rec.reconcile(KEY);
    assert.equal(r2.kind, 'rateLimited');
    assert.equal(env.cond('Synced')?.reason, 'ReconcileError');
    assert.equal(env.cond('Synced')?.message, 'create failed: socket hang up');
    assert.equal(env.sys.objects.size, 0);
    // the retry reuses the persisted external name: no name is burnt per attempt
    env.advance(10_000);
    await env.rec.reconcile(KEY);
    assert.deepEqual([...env.sys.objects.keys()], ['100']);
    assert.equal(env.sys.callsOf('prepare'), 1);
  });

  it('a partial create (object made, then the call failed) is adopted, never duplicated', async () => {
    for (const deterministic of [true, false]) {
      const env = setup({ deterministic });
      env.sys.failAfterCreate = new Error('disk import failed');
      env.store.apply(testVM('vm1'));
      const r1 = await env.rec.reconcile(KEY);
      assert.equal(r1.kind, 'rateLimited');
      assert.ok(env.get()!.metadata.annotations?.[ANNOTATION_CREATE_FAILED]);
      env.sys.failAfterCreate = undefined;
      env.advance(40_000);
      await env.rec.reconcile(KEY);
      env.advance(40_000);
      await env.rec.reconcile(KEY);
      assert.equal(env.sys.objects.size, 1, `deterministic=${deterministic}`);
      assert.equal(env.sys.callsOf('create'), 1);
      assert.deepEqual(pick(env.cond('Ready')), { status: 'True', reason: 'Available' });
      assert.deepEqual(pick(env.cond('Synced')), { status: 'True', reason: 'ReconcileSuccess' });
    }
  });

  it('publishes connection details from create and from observe when a secret is requested', async () => {
    const published: Array<Record<string, string>> = [];
    const env = setup({
      opts: {
        publishConnection: async (_r, d) => {
          published.push(d);
        },
      },
    });
    const vm = testVM('vm1');
    vm.spec.writeConnectionSecretToRef = { name: 'vm1-conn' };
    env.store.apply(vm);
    await env.rec.reconcile(KEY);
    env.advance(5000);
    await env.rec.reconcile(KEY);
    assert.deepEqual(published, [{ password: 'initial' }, { address: '10.0.0.100' }]);

    const env2 = setup({
      opts: {
        publishConnection: async () => {
          throw new Error('secrets is forbidden');
        },
      },
    });
    await env2.rec.reconcile(KEY); // not there: nothing happens
    env2.store.apply(testVM('vm1')); // no secret requested: publish never called
    await env2.rec.reconcile(KEY);
    env2.advance(5000);
    await env2.rec.reconcile(KEY);
    assert.deepEqual(pick(env2.cond('Synced')), { status: 'True', reason: 'ReconcileSuccess' });
  });

  it('an external name observe gave up is written at once, also when the create stops before its pending mark', async () => {
    // The Proxmox client gives a VMID up on proof that the VM at it is gone (its own destroy of a
    // dead create's placeholder, a retired duplicate). Written only with the create's pending mark,
    // a create whose checks failed (or that waited for a slot) left the old name in the store, and
    // the next observe took it for the resource's again (fault search F38).
    const env = setup();
    let gone = false;
    const client: ExternalClient<TestVM> = {
      async observe(r) {
        if (!gone) return { exists: true, upToDate: true };
        setAnnotation(r, ANNOTATION_EXTERNAL_NAME, undefined);
        return { exists: false, upToDate: false };
      },
      async preflight() {
        throw new ReasonedError('NodeNotFound', 'the node is not part of the site', true);
      },
      async create() {
        throw new Error('not reached: the checks failed');
      },
      async update() {
        return {};
      },
      async delete() {
        return {};
      },
    };
    const rec = new ManagedReconciler<TestVM>(env.store, { connect: async () => client }, { now: env.now });
    env.store.apply(testVM('vm1', { annotations: { [ANNOTATION_EXTERNAL_NAME]: '100' } }));
    // First as it was: its finalizer written (a write of the metadata, which would carry any change).
    await rec.reconcile(KEY);
    assert.deepEqual(env.get()?.metadata.finalizers, [FINALIZER]);
    gone = true;
    await rec.reconcile(KEY);
    assert.equal(env.get()?.metadata.annotations?.[ANNOTATION_EXTERNAL_NAME], undefined, 'the name given up is stored');
    assert.equal(env.cond('Synced')?.reason, 'NodeNotFound');
    // No AdoptedExternalResource event for a name given up.
    assert.ok(!env.store.events.some((e) => e.reason === 'AdoptedExternalResource'));
  });

  it('a resource that does not exist in the store is done', async () => {
    const env = setup();
    assert.deepEqual(await env.rec.reconcile('default/nope'), { kind: 'done' });
    assert.equal(env.sys.calls.length, 0);
  });
});

describe('ManagedReconciler: conditions', () => {
  it('carry observedGeneration; lastTransitionTime changes only when the status changes', async () => {
    const env = setup();
    env.store.apply(testVM('vm1'));
    await env.rec.reconcile(KEY); // t0: Creating / Success
    assert.equal(env.cond('Synced')?.lastTransitionTime, rfc3339(T0));
    assert.equal(env.cond('Ready')?.lastTransitionTime, rfc3339(T0));
    assert.equal(env.cond('Synced')?.observedGeneration, 1);

    env.advance(10_000); // Ready False -> True
    await env.rec.reconcile(KEY);
    assert.equal(env.cond('Ready')?.lastTransitionTime, rfc3339(T0 + 10_000));
    assert.equal(env.cond('Synced')?.lastTransitionTime, rfc3339(T0), 'Synced stayed True');

    env.advance(10_000); // spec change: generation 2, update, Synced stays True
    env.store.apply(testVM('vm1', { cpu: 4 }));
    assert.equal(env.get()!.metadata.generation, 2);
    await env.rec.reconcile(KEY);
    assert.equal(env.sys.objects.get('100')?.cpu, 4);
    assert.equal(env.cond('Synced')?.observedGeneration, 2);
    assert.equal(env.get()!.status?.observedGeneration, 2);
    assert.equal(env.cond('Synced')?.lastTransitionTime, rfc3339(T0));

    env.advance(10_000); // update fails: Synced True -> False
    env.store.apply(testVM('vm1', { cpu: 8 }));
    env.sys.failNext.update = new Error('boom');
    const failed = await env.rec.reconcile(KEY);
    assert.equal(failed.kind, 'rateLimited');
    const s = env.cond('Synced')!;
    assert.deepEqual(
      { status: s.status, reason: s.reason, message: s.message, gen: s.observedGeneration },
      { status: 'False', reason: 'ReconcileError', message: 'update failed: boom', gen: 3 },
    );
    assert.equal(s.lastTransitionTime, rfc3339(T0 + 30_000));

    env.advance(10_000); // same failure again: no transition
    env.sys.failNext.update = new Error('boom');
    await env.rec.reconcile(KEY);
    assert.equal(env.cond('Synced')?.lastTransitionTime, rfc3339(T0 + 30_000));

    env.advance(10_000); // recovers: False -> True
    await env.rec.reconcile(KEY);
    assert.equal(env.cond('Synced')?.status, 'True');
    assert.equal(env.cond('Synced')?.message, undefined, 'the old error message is gone');
    assert.equal(env.cond('Synced')?.lastTransitionTime, rfc3339(T0 + 50_000));
    assert.equal(env.sys.objects.get('100')?.cpu, 8);
  });

  it('a ReasonedError shows its reason on Synced (observe)', async () => {
    const env = setup();
    env.store.apply(testVM('vm1'));
    env.sys.failNext.observe = new ReasonedError('ImageNotImportable', 'local:iso/ubuntu.img is ISO content');
    const r = await env.rec.reconcile(KEY);
    assert.equal(r.kind, 'rateLimited');
    assert.equal(env.cond('Synced')?.reason, 'ImageNotImportable');
    assert.equal(env.cond('Synced')?.message, 'observe failed: local:iso/ubuntu.img is ISO content');
    assert.equal(env.sys.callsOf('create'), 0);
  });

  it('a connect failure says "connect failed"', async () => {
    const env = setup();
    env.store.apply(testVM('vm1'));
    env.sys.failNext.connect = new Error('ProviderConfig default not found');
    const r = await env.rec.reconcile(KEY);
    assert.equal(r.kind, 'rateLimited');
    assert.equal(env.cond('Synced')?.message, 'connect failed: ProviderConfig default not found');
    assert.equal(env.sys.callsOf('observe'), 0);
  });

  it('records lastHandledReconcileAt from the reconcile-requested-at annotation', async () => {
    const env = setup();
    env.store.apply(testVM('vm1', { annotations: { [ANNOTATION_RECONCILE_REQUESTED]: 'now-please' } }));
    await env.rec.reconcile(KEY);
    assert.equal(env.get()!.status?.lastHandledReconcileAt, 'now-please');
  });
});

describe('ManagedReconciler: events', () => {
  const seen = (env: Env, from = 0) => env.store.events.slice(from).map((e) => `${e.type} ${e.reason}`);

  it('a create tells its story: Creating, then Available; no event for a plain successful observe', async () => {
    const env = setup();
    env.store.apply(testVM('vm1'));
    await env.rec.reconcile(KEY);
    assert.deepEqual(
      seen(env),
      ['Normal CreatedExternalResource', 'Normal Creating'],
      "crossplane-runtime's event for the create; Synced turning True on a success is no event",
    );
    env.advance(5000);
    await env.rec.reconcile(KEY);
    assert.deepEqual(seen(env, 2), ['Normal Available'], 'the first Ready=True is one');
    const n = env.store.events.length;
    for (let i = 0; i < 3; i++) {
      env.advance(60_000);
      await env.rec.reconcile(KEY);
    }
    assert.equal(env.store.events.length, n, 'polls of a steady resource: no events');
  });

  it("crossplane-runtime's mutation events: created, pending once per create while the listing lags, deleted", async () => {
    const env = setup();
    env.store.apply(testVM('vm1'));
    await env.rec.reconcile(KEY);
    const created = env.store.events.find((e) => e.reason === 'CreatedExternalResource')!;
    const name = env.get()!.metadata.annotations![ANNOTATION_EXTERNAL_NAME]!;
    assert.equal(created.message, `Successfully requested creation of external resource (external name ${name})`);
    env.sys.invisible = true; // the listing lags: the grace wait
    for (let i = 0; i < 3; i++) {
      env.advance(2000);
      assert.deepEqual(await env.rec.reconcile(KEY), { kind: 'requeueAfter', ms: 2000, progress: true });
    }
    const pending = env.store.events.filter((e) => e.reason === 'PendingExternalResource');
    assert.deepEqual(
      pending.map((e) => [e.type, e.count]),
      [['Normal', 1]],
      'one event for the wait, not one per poll',
    );
    env.sys.invisible = false;
    env.advance(2000);
    await env.rec.reconcile(KEY);
    env.store.markDeleted(KEY);
    await env.rec.reconcile(KEY);
    assert.equal(env.store.events.filter((e) => e.reason === 'DeletedExternalResource').length, 1);
    assert.ok(
      !env.store.events.some((e) => e.reason === 'UpdatedExternalResource'),
      'no update was made: no update event',
    );
  });

  it('observing an existing, up-to-date resource for the first time: one event (Available), not two', async () => {
    const env = setup();
    env.sys.objects.set('200', { id: '200', marker: 'uid-vm1', name: 'vm1', cpu: 2, memory: 1024 });
    const vm = testVM('vm1', { annotations: { [ANNOTATION_EXTERNAL_NAME]: '200' } });
    vm.spec.managementPolicies = ['Observe'];
    env.store.apply(vm);
    await env.rec.reconcile(KEY);
    assert.deepEqual(pick(env.cond('Synced')), { status: 'True', reason: 'ReconcileSuccess' });
    assert.deepEqual(seen(env), ['Normal Available']);
    // A restarted process finds the status as it left it: nothing changed, nothing to say.
    env.advance(60_000);
    await env.fresh().reconcile(KEY);
    assert.deepEqual(seen(env), ['Normal Available']);
  });

  it("a failure is one Warning with crossplane-runtime's reason and the provider's; a repeat is none; recovery is one", async () => {
    const env = setup();
    await createReady(env);
    const n = env.store.events.length;
    env.store.apply(testVM('vm1', { cpu: 3 }));
    env.sys.failNext.update = new ReasonedError('Locked', 'VM 100 is locked (backup)', true);
    await env.rec.reconcile(KEY);
    const last = env.store.events.at(-1)!;
    assert.deepEqual(
      { type: last.type, reason: last.reason, message: last.message },
      {
        type: 'Warning',
        reason: 'CannotUpdateExternalResource',
        message: 'Locked: update failed: VM 100 is locked (backup)',
      },
    );
    assert.deepEqual(pick(env.cond('Synced')), { status: 'False', reason: 'Locked' }, 'the condition keeps the cause');
    // The same error again (an outage retried): no event per retry.
    env.advance(1000);
    env.sys.failNext.update = new ReasonedError('Locked', 'VM 100 is locked (backup)', true);
    await env.rec.reconcile(KEY);
    assert.equal(env.store.events.length, n + 1);
    assert.equal(env.store.events.at(-1)!.count, 1);
    env.advance(1000);
    await env.rec.reconcile(KEY);
    assert.deepEqual(
      seen(env, n + 1),
      ['Normal UpdatedExternalResource', 'Normal ReconcileSuccess'],
      'the update went through: Synced is True again',
    );
    assert.equal(env.store.events.at(-1)!.message, 'Synced is True again (was Locked)');
  });

  it('every failed create is an event (CannotCreateExternalResource, counted), as crossplane-runtime records each', async () => {
    const env = setup();
    env.store.apply(testVM('vm1'));
    for (let i = 0; i < 3; i++) {
      env.sys.failNext.create = new ReasonedError('BridgeNotFound', 'bridge vmbr9 does not exist on node pve1');
      await env.rec.reconcile(KEY);
      env.advance(700_000);
    }
    const cannot = env.store.events.filter((e) => e.reason === 'CannotCreateExternalResource');
    assert.deepEqual(
      cannot.map((e) => [e.type, e.message, e.count]),
      [['Warning', 'BridgeNotFound: create failed: bridge vmbr9 does not exist on node pve1', 3]],
    );
    assert.ok(!env.store.events.some((e) => e.reason === 'BridgeNotFound'), 'no second event for the same failure');
  });

  it("a failing step's reason: connect, observe; a plain error carries no provider reason", async () => {
    const env = setup();
    env.sys.failNext.connect = new Error('no credentials');
    env.store.apply(testVM('vm1'));
    await env.rec.reconcile(KEY);
    assert.deepEqual(
      [env.store.events.at(-1)!.reason, env.store.events.at(-1)!.message],
      ['CannotConnectToProvider', 'connect failed: no credentials'],
    );
    env.sys.failNext.observe = new ReasonedError('ImageNotImportable', 'local:iso/ubuntu.img is ISO content');
    await env.rec.reconcile(KEY);
    assert.deepEqual(
      [env.store.events.at(-1)!.reason, env.store.events.at(-1)!.message],
      ['CannotObserveExternalResource', 'ImageNotImportable: observe failed: local:iso/ubuntu.img is ISO content'],
    );
  });

  it('Observe-only without the external resource: CannotObserveExternalResource', async () => {
    const env = setup();
    const vm = testVM('vm1', { annotations: { [ANNOTATION_EXTERNAL_NAME]: '404' } });
    vm.spec.managementPolicies = ['Observe'];
    env.store.apply(vm);
    await env.rec.reconcile(KEY);
    assert.ok(seen(env).includes('Warning CannotObserveExternalResource'), seen(env).join(', '));
  });

  it('pause, invalid policies and reconcile requests use the reasons crossplane-runtime records', async () => {
    const env = setup();
    env.store.apply(testVM('vm1', { annotations: { [ANNOTATION_PAUSED]: 'true' } }));
    await env.rec.reconcile(KEY);
    assert.deepEqual(seen(env), ['Normal ReconciliationPaused']);
    assert.deepEqual(pick(env.cond('Synced')), { status: 'False', reason: 'ReconcilePaused' });
    await env.rec.reconcile(KEY);
    assert.equal(env.store.events.length, 1, 'paused and still paused: said once');

    const bad = testVM('vm2');
    bad.spec.managementPolicies = ['Create'];
    env.store.apply(bad);
    await env.rec.reconcile('default/vm2');
    assert.equal(env.store.events.at(-1)!.reason, 'CannotUseInvalidManagementPolicy');
    assert.equal(env.store.events.at(-1)!.type, 'Warning');

    await createReady(env, testVM('vm3'));
    const n = env.store.events.length;
    env.store.apply(testVM('vm3', { annotations: { [ANNOTATION_RECONCILE_REQUESTED]: 'token-1' } }));
    await env.rec.reconcile('default/vm3');
    await env.rec.reconcile('default/vm3');
    assert.deepEqual(
      env.store.events.slice(n).map((e) => [e.reason, e.message]),
      [['ReconcileRequestHandled', 'Handling reconcile request token-1']],
      'once per request',
    );
  });
});

describe('ManagedReconciler: pause and management policies', () => {
  it('the paused annotation stops everything: ReconcilePaused, no external calls', async () => {
    const env = setup();
    env.store.apply(testVM('vm1', { annotations: { [ANNOTATION_PAUSED]: 'true' } }));
    const r = await env.rec.reconcile(KEY);
    assert.deepEqual(r, { kind: 'done' });
    assert.deepEqual(pick(env.cond('Synced')), { status: 'False', reason: 'ReconcilePaused' });
    assert.equal(env.sys.calls.length, 0, 'not even connect');
    assert.equal(env.store.events.at(-1)?.type, 'Normal');

    // Removing the annotation from the manifest resumes.
    env.store.apply(testVM('vm1'));
    assert.equal(env.get()!.metadata.annotations?.[ANNOTATION_PAUSED], undefined);
    await env.rec.reconcile(KEY);
    assert.equal(env.sys.objects.size, 1);
  });

  it('empty managementPolicies pause too', async () => {
    const env = setup();
    const vm = testVM('vm1');
    vm.spec.managementPolicies = [];
    env.store.apply(vm);
    assert.deepEqual(await env.rec.reconcile(KEY), { kind: 'done' });
    assert.deepEqual(pick(env.cond('Synced')), { status: 'False', reason: 'ReconcilePaused' });
    assert.equal(env.sys.calls.length, 0);
  });

  it('a paused resource being deleted keeps its finalizer (it cannot finish deleting)', async () => {
    const env = setup();
    await createReady(env);
    env.store.apply(testVM('vm1', { annotations: { [ANNOTATION_PAUSED]: 'true' } }));
    env.store.markDeleted(KEY);
    const calls = env.sys.calls.length;
    await env.rec.reconcile(KEY);
    assert.ok(env.get()?.metadata.finalizers?.includes(FINALIZER));
    assert.equal(env.sys.calls.length, calls);
    assert.equal(env.sys.objects.size, 1);
  });

  it('an unsupported combination is a ReconcileError and touches nothing', async () => {
    const env = setup();
    const vm = testVM('vm1');
    vm.spec.managementPolicies = ['Create'];
    env.store.apply(vm);
    assert.deepEqual(await env.rec.reconcile(KEY), { kind: 'done' });
    const s = env.cond('Synced')!;
    assert.equal(s.reason, 'ReconcileError');
    assert.match(s.message ?? '', /unsupported management policy combination: \[Create\]/);
    assert.equal(env.sys.calls.length, 0);
    assert.equal(env.store.events.at(-1)?.type, 'Warning');
  });

  it('policySupported matches crossplane-runtime', () => {
    const ok: ManagementAction[][] = [
      ['*'],
      [],
      ['Observe'],
      ['Observe', 'Create', 'Update', 'Delete', 'LateInitialize'],
      ['Observe', 'Create', 'Update', 'Delete'],
      ['Observe', 'Create', 'Update', 'LateInitialize'],
      ['Observe', 'Create', 'Update'],
      ['Observe', 'Create', 'Delete', 'LateInitialize'],
      ['Observe', 'Create', 'LateInitialize'],
      ['Observe', 'Create', 'Delete'],
      ['Observe', 'Create'],
      ['Observe', 'Delete'],
      ['Observe', 'Update'],
      ['Observe', 'LateInitialize'],
      ['Observe', 'Update', 'LateInitialize'],
      ['LateInitialize', 'Observe', 'Observe'], // order and repeats do not matter
    ];
    for (const p of ok) assert.ok(policySupported(p), JSON.stringify(p));
    const bad: ManagementAction[][] = [
      ['Create'],
      ['Delete'],
      ['Update'],
      ['LateInitialize'],
      ['Create', 'Update', 'Delete'],
      ['*', 'Observe'],
      ['Observe', 'Update', 'Delete'],
    ];
    for (const p of bad) assert.ok(!policySupported(p), JSON.stringify(p));
  });

  it('Observe-only on a missing resource: error, poll requeue, never create', async () => {
    const env = setup();
    const vm = testVM('vm1', { annotations: { [ANNOTATION_POLL_INTERVAL]: '30s' } });
    vm.spec.managementPolicies = ['Observe'];
    env.store.apply(vm);
    for (let i = 0; i < 3; i++) {
      const r = await env.rec.reconcile(KEY);
      assert.deepEqual(r, { kind: 'requeueAfter', ms: 30_000 });
      env.advance(30_000);
    }
    const s = env.cond('Synced')!;
    assert.deepEqual(
      { status: s.status, reason: s.reason, message: s.message },
      { status: 'False', reason: 'ReconcileError', message: 'observe failed: external resource does not exist' },
    );
    assert.equal(env.sys.callsOf('create') + env.sys.callsOf('prepare'), 0);
    assert.equal(env.sys.objects.size, 0);
    assert.equal(env.get()!.metadata.annotations?.[ANNOTATION_CREATE_PENDING], undefined);
  });

  it('Observe-only on an existing resource: Synced, no update even when it differs', async () => {
    const env = setup();
    env.sys.objects.set('200', { id: '200', marker: 'uid-vm1', name: 'vm1', cpu: 1, memory: 512 });
    const vm = testVM('vm1', { cpu: 4, annotations: { [ANNOTATION_EXTERNAL_NAME]: '200' } });
    vm.spec.managementPolicies = ['Observe'];
    env.store.apply(vm);
    const r = await env.rec.reconcile(KEY);
    assert.deepEqual(r, { kind: 'requeueAfter', ms: 60_000 });
    assert.deepEqual(pick(env.cond('Synced')), { status: 'True', reason: 'ReconcileSuccess' });
    assert.equal(env.sys.callsOf('update'), 0);
    assert.equal(env.sys.objects.get('200')?.cpu, 1);
  });

  it('without Update in the policies, a drifted resource is left alone', async () => {
    const env = setup();
    const vm = testVM('vm1');
    vm.spec.managementPolicies = ['Observe', 'Create', 'Delete', 'LateInitialize'];
    await createReady(env, vm);
    const changed = testVM('vm1', { cpu: 16 });
    changed.spec.managementPolicies = vm.spec.managementPolicies;
    env.store.apply(changed);
    await env.rec.reconcile(KEY);
    assert.equal(env.sys.callsOf('update'), 0);
    assert.equal(env.sys.objects.get('100')?.cpu, 2);
    assert.deepEqual(pick(env.cond('Synced')), { status: 'True', reason: 'ReconcileSuccess' });
  });
});

describe('ManagedReconciler: update', () => {
  it('updates when not up to date, then polls', async () => {
    const env = setup();
    await createReady(env);
    env.store.apply(testVM('vm1', { cpu: 4 }));
    const r = await env.rec.reconcile(KEY);
    assert.deepEqual(r, { kind: 'requeueAfter', ms: 2000, progress: true });
    assert.equal(env.sys.callsOf('update'), 1);
    assert.equal(env.sys.objects.get('100')?.cpu, 4);
    env.advance(2000);
    assert.deepEqual(await env.rec.reconcile(KEY), { kind: 'requeueAfter', ms: 60_000 });
    assert.equal(env.sys.callsOf('update'), 1);
  });

  it('a retryable ReasonedError from update: its reason on Synced, normal backoff', async () => {
    const env = setup();
    await createReady(env);
    env.store.apply(testVM('vm1', { cpu: 4 }));
    env.sys.failNext.update = new ReasonedError('Locked', 'VM 100 is locked (backup)', true);
    const r = await env.rec.reconcile(KEY);
    assert.equal(r.kind, 'rateLimited');
    assert.equal((r as { schedule?: number[] }).schedule, undefined);
    assert.equal(env.cond('Synced')?.reason, 'Locked');
    assert.equal(env.cond('Synced')?.message, 'update failed: VM 100 is locked (backup)');
  });

  it('honours the poll-interval annotation (Go durations), falling back to the default', async () => {
    const cases: Array<[string, number]> = [
      ['30s', 30_000],
      ['1m30s', 90_000],
      ['500ms', 500],
      ['soon', 60_000],
      ['0s', 60_000],
    ];
    for (const [value, ms] of cases) {
      const env = setup();
      await createReady(env, testVM('vm1', { annotations: { [ANNOTATION_POLL_INTERVAL]: value } }));
      assert.deepEqual(await env.rec.reconcile(KEY), { kind: 'requeueAfter', ms }, value);
    }
  });

  it('the reconciler-wide poll interval is an option', async () => {
    const env = setup({ opts: { pollIntervalMs: 5 * 60_000 } });
    await createReady(env);
    assert.deepEqual(await env.rec.reconcile(KEY), { kind: 'requeueAfter', ms: 300_000 });
  });
});

describe('ManagedReconciler: creation grace period', () => {
  it('"not found" just after a create is not a reason to create again', async () => {
    const env = setup();
    env.store.apply(testVM('vm1'));
    await env.rec.reconcile(KEY);
    env.sys.invisible = true; // the listing lags
    env.advance(10_000);
    const writes = env.store.writes.length;
    const r = await env.rec.reconcile(KEY);
    assert.deepEqual(r, { kind: 'requeueAfter', ms: 2000, progress: true });
    assert.equal(env.sys.callsOf('create'), 1);
    assert.equal(env.store.writes.length, writes, 'quiet: no writes');
    // after the grace period the engine trusts the observation; the marker check in create keeps it single
    env.advance(30_000);
    await env.rec.reconcile(KEY);
    assert.equal(env.sys.objects.size, 1);
  });

  it('a resource deleted just after its create keeps its finalizer until the object is visible (no leak)', async () => {
    const env = setup();
    env.store.apply(testVM('vm1'));
    await env.rec.reconcile(KEY);
    env.sys.invisible = true;
    env.store.markDeleted(KEY);
    env.advance(3000);
    const r = await env.rec.reconcile(KEY);
    assert.deepEqual(r, { kind: 'requeueAfter', ms: 2000, progress: true });
    assert.ok(env.get()?.metadata.finalizers?.includes(FINALIZER), 'finalizer kept');
    env.sys.invisible = false; // the listing caught up
    env.advance(2000);
    await env.rec.reconcile(KEY);
    assert.equal(env.sys.objects.size, 0, 'deleted');
    env.advance(30_000); // "gone" is trusted once the grace period is over
    await env.rec.reconcile(KEY);
    assert.equal(env.get(), undefined);
  });
});

describe('ManagedReconciler: deletion', () => {
  it('deletes the external resource, then removes the finalizer once it is gone', async () => {
    const env = setup();
    await createReady(env);
    const seen: string[] = [];
    env.store.watch((k, ev) => seen.push(`${k} ${ev}`));
    env.store.markDeleted(KEY);
    const r1 = await env.rec.reconcile(KEY);
    assert.deepEqual(r1, { kind: 'requeueAfter', ms: 2000, progress: true });
    assert.equal(env.sys.callsOf('delete'), 1);
    assert.equal(env.sys.objects.size, 0);
    assert.deepEqual(pick(env.cond('Ready')), { status: 'False', reason: 'Deleting' });
    assert.ok(env.get()?.metadata.finalizers?.includes(FINALIZER), 'finalizer stays until the next observe');

    const r2 = await env.rec.reconcile(KEY);
    assert.deepEqual(r2, { kind: 'done' });
    assert.equal(env.get(), undefined);
    assert.equal(seen.at(-1), `${KEY} DELETED`);
    assert.equal(env.sys.callsOf('delete'), 1);
  });

  it('an asynchronous delete is polled until the object is gone', async () => {
    const env = setup();
    await createReady(env);
    env.sys.asyncDelete = true;
    env.store.markDeleted(KEY);
    assert.deepEqual(await env.rec.reconcile(KEY), { kind: 'requeueAfter', ms: 5000, progress: true });
    assert.equal(env.sys.objects.size, 1);
    assert.ok(env.get());
    env.sys.finishDeletes();
    assert.deepEqual(await env.rec.reconcile(KEY), { kind: 'done' });
    assert.equal(env.get(), undefined);
  });

  it('a failed delete says why and backs off; the finalizer stays', async () => {
    const env = setup();
    await createReady(env);
    env.store.markDeleted(KEY);
    env.sys.failNext.delete = new ReasonedError('Locked', 'VM 100 is locked (clone)', true);
    const r = await env.rec.reconcile(KEY);
    assert.equal(r.kind, 'rateLimited');
    assert.deepEqual(pick(env.cond('Ready')), { status: 'False', reason: 'Deleting' });
    assert.equal(env.cond('Synced')?.message, 'delete failed: VM 100 is locked (clone)');
    assert.ok(env.get()?.metadata.finalizers?.includes(FINALIZER));
    assert.equal(env.sys.objects.size, 1);
  });

  it('waits while other finalizers are present', async () => {
    const env = setup();
    await createReady(env);
    const cur = env.get()!;
    cur.metadata.finalizers = [...(cur.metadata.finalizers ?? []), 'example.com/usage'];
    await env.store.update(cur);
    env.store.markDeleted(KEY);
    const r = await env.rec.reconcile(KEY);
    assert.equal(r.kind, 'rateLimited');
    assert.equal(env.sys.callsOf('delete'), 0);
    assert.equal(env.sys.objects.size, 1);
    const other = env.get()!;
    other.metadata.finalizers = [FINALIZER];
    await env.store.update(other);
    await env.rec.reconcile(KEY);
    await env.rec.reconcile(KEY);
    assert.equal(env.sys.objects.size, 0);
    assert.equal(env.get(), undefined);
  });

  for (const [label, mutate] of [
    [
      'deletionPolicy: Orphan',
      (vm: TestVM) => {
        vm.spec.deletionPolicy = 'Orphan';
      },
    ],
    [
      'managementPolicies without Delete',
      (vm: TestVM) => {
        vm.spec.managementPolicies = ['Observe', 'Create', 'Update', 'LateInitialize'];
      },
    ],
  ] as const) {
    it(`${label}: the finalizer is removed and the external resource left alone`, async () => {
      const env = setup();
      const vm = testVM('vm1');
      mutate(vm);
      await createReady(env, vm);
      const calls = env.sys.calls.length;
      env.store.markDeleted(KEY);
      assert.deepEqual(await env.rec.reconcile(KEY), { kind: 'done' });
      assert.equal(env.get(), undefined);
      assert.equal(env.sys.objects.size, 1);
      assert.equal(env.sys.calls.length, calls, 'not even observed');
    });
  }

  it('never deletes an object it does not own (marker mismatch)', async () => {
    const env = setup();
    env.sys.objects.set('100', { id: '100', marker: 'someone-else', name: 'theirs', cpu: 8, memory: 8192 });
    env.store.apply(testVM('vm1', { annotations: { [ANNOTATION_EXTERNAL_NAME]: '100' } }));
    await env.rec.reconcile(KEY);
    assert.equal(env.cond('Synced')?.reason, 'NotOwned');
    const stored = env.get()!;
    stored.metadata.finalizers = [FINALIZER];
    await env.store.update(stored);
    env.store.markDeleted(KEY);
    for (let i = 0; i < 3; i++) await env.rec.reconcile(KEY);
    assert.equal(env.sys.callsOf('delete') + env.sys.callsOf('create') + env.sys.callsOf('update'), 0);
    assert.equal(env.sys.objects.get('100')?.marker, 'someone-else');
    assert.ok(env.get()?.metadata.finalizers?.includes(FINALIZER), 'kept: a human decides');
  });
});

describe('ManagedReconciler: conflicts', () => {
  it('a conflict is a plain (rate-limited) requeue without an error condition', async () => {
    const env = setup();
    env.store.apply(testVM('vm1'));
    env.store.conflictNext.push('update'); // the finalizer write
    const r = await env.rec.reconcile(KEY);
    assert.deepEqual(r, { kind: 'rateLimited' });
    assert.equal(env.get()!.status, undefined, 'no condition written');
    assert.equal(env.sys.callsOf('create'), 0);
    await env.rec.reconcile(KEY);
    assert.equal(env.sys.objects.size, 1);
  });

  it('a conflict on the create-pending write stops before create', async () => {
    const env = setup({
      hooks: {
        at: (step) => {
          if (step === 'finalizer-added') env.store.conflictNext.push('update');
        },
      },
    });
    env.store.apply(testVM('vm1'));
    assert.deepEqual(await env.rec.reconcile(KEY), { kind: 'rateLimited' });
    assert.equal(env.sys.callsOf('create'), 0);
    assert.equal(env.get()!.metadata.annotations?.[ANNOTATION_CREATE_PENDING], undefined);
  });

  it('a conflict on a status write requeues; the next reconcile writes it', async () => {
    const env = setup();
    await createReady(env);
    env.store.apply(testVM('vm1', { cpu: 4 }));
    env.store.conflictNext.push('status');
    assert.deepEqual(await env.rec.reconcile(KEY), { kind: 'rateLimited' });
    assert.equal(env.get()!.status?.observedGeneration, 1);
    await env.rec.reconcile(KEY);
    assert.equal(env.get()!.status?.observedGeneration, 2);
  });

  it('a conflict on the create-succeeded write re-fetches and keeps a concurrent spec edit', async () => {
    const env = setup({
      hooks: {
        at: (step) => {
          if (step === 'create-issued') env.store.apply(testVM('vm1', { cpu: 8 })); // the user edits meanwhile
        },
      },
    });
    env.store.apply(testVM('vm1'));
    const r = await env.rec.reconcile(KEY);
    assert.deepEqual(r, { kind: 'requeueAfter', ms: 2000, progress: true });
    const stored = env.get()!;
    assert.ok(stored.metadata.annotations?.[ANNOTATION_CREATE_SUCCEEDED], 'the result was recorded');
    assert.equal(stored.spec.forProvider.cpu, 8, "the user's edit survived");
    assert.equal(stored.metadata.generation, 2);
    assert.equal(stored.status?.observedGeneration, 1, 'we acted on generation 1');
    env.advance(40_000);
    await env.fresh().reconcile(KEY);
    await env.fresh().reconcile(KEY);
    assert.equal(env.sys.objects.get('100')?.cpu, 8);
    assert.equal(env.get()!.status?.observedGeneration, 2);
  });
});

describe('ManagedReconciler: crash safety', () => {
  const createSteps = [
    'connected',
    'observed',
    'finalizer-added',
    'create-pending',
    'create-issued',
    'create-succeeded',
  ];

  /**
   * Restarted reconcilers run until things settle. Where the engine stopped to ask a human
   * ("cannot determine creation result"), the human checks the external system and, finding
   * nothing, removes the pending annotation.
   */
  async function settle(env: Env): Promise<ReconcileResult[]> {
    const out: ReconcileResult[] = [];
    for (let i = 0; i < 6; i++) {
      env.advance(31_000);
      out.push(await env.fresh().reconcile(KEY));
      if (env.cond('Synced')?.message?.startsWith('cannot determine creation result')) {
        assert.equal(env.sys.ownedBy('uid-vm1').length, 0, 'stopped although the marker lookup could find it');
        const r = env.get()!;
        delete r.metadata.annotations?.[ANNOTATION_CREATE_PENDING];
        await env.store.update(r);
      }
    }
    return out;
  }

  function assertOneOwned(env: Env, label: string): void {
    assert.equal(env.sys.objects.size, 1, `${label}: exactly one external object`);
    const [obj] = env.sys.ownedBy('uid-vm1');
    assert.ok(obj, `${label}: it carries our marker`);
    assert.equal(env.get()!.metadata.annotations?.[ANNOTATION_EXTERNAL_NAME], obj.id, `${label}: external-name`);
    assert.deepEqual(pick(env.cond('Ready')), { status: 'True', reason: 'Available' }, label);
    assert.deepEqual(pick(env.cond('Synced')), { status: 'True', reason: 'ReconcileSuccess' }, label);
  }

  for (const deterministic of [true, false]) {
    for (const step of createSteps) {
      it(`crash at ${step} (${deterministic ? 'name chosen before create' : 'name from create'}): exactly one object`, async () => {
        let crashed = false;
        const env = setup({
          deterministic,
          hooks: {
            at: (s) => {
              if (s === step && !crashed) {
                crashed = true;
                throw new SimulatedCrash(s);
              }
            },
          },
        });
        env.store.apply(testVM('vm1'));
        const r = await env.rec.reconcile(KEY);
        assert.ok(crashed, 'the step was reached');
        assert.equal(r.kind, 'rateLimited');
        assert.ok((r as { error?: Error }).error instanceof SimulatedCrash);
        await settle(env);
        assertOneOwned(env, step);
      });
    }
  }

  it('name from create, crash after create, listing lags: the engine stops and asks instead of creating again', async () => {
    let crashed = false;
    const env = setup({
      deterministic: false,
      hooks: {
        at: (s) => {
          if (s === 'create-issued' && !crashed) {
            crashed = true;
            throw new SimulatedCrash(s);
          }
        },
      },
    });
    env.store.apply(testVM('vm1'));
    await env.rec.reconcile(KEY);
    assert.equal(env.get()!.metadata.annotations?.[ANNOTATION_EXTERNAL_NAME], undefined, 'the name was lost');
    env.sys.invisible = true;
    env.advance(60_000);
    const r = await env.fresh().reconcile(KEY);
    assert.deepEqual(r, { kind: 'done' });
    assert.equal(env.sys.callsOf('create'), 1, 'no second create');
    assert.deepEqual(pick(env.cond('Ready')), { status: 'False', reason: 'Creating' });
    assert.match(
      env.cond('Synced')?.message ?? '',
      /^cannot determine creation result - remove the crossplane.io\/external-create-pending annotation/,
    );
    // Deleting now must not drop the finalizer either: the object may exist.
    env.store.markDeleted(KEY);
    await env.fresh().reconcile(KEY);
    assert.ok(env.get()?.metadata.finalizers?.includes(FINALIZER));
    // Once the listing shows it, the marker finds it, and deletion proceeds.
    env.sys.invisible = false;
    await env.fresh().reconcile(KEY);
    assert.ok(env.get()!.metadata.annotations?.[ANNOTATION_CREATE_SUCCEEDED], 'adoption recorded the create result');
    assert.equal(env.sys.objects.size, 0);
    env.advance(31_000);
    await env.fresh().reconcile(KEY);
    assert.equal(env.get(), undefined);
  });

  it('name chosen before create, crash after create, listing lags: creating again is safe (same name)', async () => {
    let crashed = false;
    const env = setup({
      hooks: {
        at: (s) => {
          if (s === 'create-issued' && !crashed) {
            crashed = true;
            throw new SimulatedCrash(s);
          }
        },
      },
    });
    env.store.apply(testVM('vm1'));
    await env.rec.reconcile(KEY);
    env.sys.invisible = true;
    env.advance(60_000);
    await env.fresh().reconcile(KEY);
    assert.equal(env.sys.callsOf('create'), 2, 'created again, with the same name');
    assert.equal(env.sys.objects.size, 1);
    env.sys.invisible = false;
    await settle(env);
    assertOneOwned(env, 'deterministic lag');
  });

  it('crash at create-failed after a partial create: exactly one object', async () => {
    for (const deterministic of [true, false]) {
      let crashed = false;
      const env = setup({
        deterministic,
        hooks: {
          at: (s) => {
            if (s === 'create-failed' && !crashed) {
              crashed = true;
              throw new SimulatedCrash(s);
            }
          },
        },
      });
      env.sys.failAfterCreate = new Error('timeout waiting for the task');
      env.store.apply(testVM('vm1'));
      await env.rec.reconcile(KEY);
      assert.ok(crashed);
      env.sys.failAfterCreate = undefined;
      await settle(env);
      assertOneOwned(env, `create-failed deterministic=${deterministic}`);
    }
  });

  for (const step of ['observed', 'delete-issued', 'external-gone']) {
    it(`crash at ${step} while deleting: the object and then the resource go away`, async () => {
      const env = setup();
      await createReady(env);
      env.store.markDeleted(KEY);
      let crashed = false;
      const crashing = env.fresh({
        hooks: {
          at: (s) => {
            if (s === step && !crashed) {
              crashed = true;
              throw new SimulatedCrash(s);
            }
          },
        },
      });
      for (let i = 0; i < 3 && !crashed; i++) await crashing.reconcile(KEY);
      assert.ok(crashed);
      if (step === 'delete-issued') {
        assert.notEqual(
          env.cond('Synced')?.message,
          `delete failed: simulated crash at ${step}`,
          'a crash is not a delete error',
        );
      }
      for (let i = 0; i < 3 && env.get(); i++) await env.fresh().reconcile(KEY);
      assert.equal(env.sys.objects.size, 0);
      assert.equal(env.get(), undefined);
    });
  }

  it('property: any sequence of crashes and restarts leaves exactly one object', async () => {
    const allSteps = [...createSteps, 'create-failed', 'update-issued'];
    await fc.assert(
      fc.asyncProperty(
        fc.boolean(),
        fc.array(
          fc.record({
            crashAt: fc.option(fc.constantFrom(...allSteps), { nil: undefined }),
            wait: fc.integer({ min: 1000, max: 40_000 }),
            failCreate: fc.constantFrom('no', 'before', 'after'),
            invisible: fc.boolean(),
          }),
          { minLength: 1, maxLength: 8 },
        ),
        async (deterministic, runs) => {
          const env = setup({ deterministic });
          env.store.apply(testVM('vm1'));
          for (const run of runs) {
            env.sys.invisible = run.invisible;
            if (run.failCreate === 'before') env.sys.failNext.create = new Error('create refused');
            env.sys.failAfterCreate = run.failCreate === 'after' ? new Error('task failed') : undefined;
            const rec = env.fresh({
              hooks: {
                at: (s) => {
                  if (s === run.crashAt) throw new SimulatedCrash(s);
                },
              },
            });
            await rec.reconcile(KEY);
            env.advance(run.wait);
            assert.ok(env.sys.objects.size <= 1, 'never two objects');
          }
          env.sys.invisible = false;
          env.sys.failAfterCreate = undefined;
          delete env.sys.failNext.create;
          await settle(env);
          assertOneOwned(env, JSON.stringify(runs));
        },
      ),
      { numRuns: 150 },
    );
  });
});
