/**
 * What ManagedReconciler reports, and when it holds back: the Ready and Synced conditions, the
 * events crossplane-runtime would record, and the pause annotation and management policies.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  ANNOTATION_CREATE_PENDING,
  ANNOTATION_EXTERNAL_NAME,
  ANNOTATION_PAUSED,
  ANNOTATION_POLL_INTERVAL,
  ANNOTATION_RECONCILE_REQUESTED,
  FINALIZER,
  type ManagementAction,
  policySupported,
  rfc3339,
} from '../../src/engine/resource.ts';
import { ReasonedError } from '../../src/engine/types.ts';
import { testVM } from '../helpers/scripted-external.ts';
import { createReady, type Env, KEY, pick, setup, T0 } from './reconciler-fixtures.ts';

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
