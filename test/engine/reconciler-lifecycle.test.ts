/**
 * ManagedReconciler's lifecycle of one resource against a scripted external system: the create
 * (its crash-safe annotations, failures and backoff), the creation grace period, updates and the
 * deletion with its finalizer. The fixtures: reconciler-fixtures.ts.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ManagedReconciler } from '../../src/engine/reconciler.ts';
import {
  ANNOTATION_CREATE_FAILED,
  ANNOTATION_CREATE_PENDING,
  ANNOTATION_CREATE_SUCCEEDED,
  ANNOTATION_EXTERNAL_NAME,
  ANNOTATION_POLL_INTERVAL,
  FINALIZER,
  rfc3339,
  setAnnotation,
} from '../../src/engine/resource.ts';
import { type ExternalClient, ReasonedError } from '../../src/engine/types.ts';
import { CREATE_FAILURE_SCHEDULE_MS } from '../../src/engine/workqueue.ts';
import { type TestVM, testVM } from '../helpers/scripted-external.ts';
import { createReady, KEY, pick, setup, T0 } from './reconciler-fixtures.ts';

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
