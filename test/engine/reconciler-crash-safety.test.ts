/**
 * ManagedReconciler when writes conflict or the process dies between steps: a conflict is a
 * plain requeue, and a crash at any step, followed by restarted reconcilers, leaves exactly one
 * external object (stopping to ask a person where it cannot tell).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import type { ReconcileResult } from '../../src/engine/reconciler.ts';
import {
  ANNOTATION_CREATE_PENDING,
  ANNOTATION_CREATE_SUCCEEDED,
  ANNOTATION_EXTERNAL_NAME,
  FINALIZER,
} from '../../src/engine/resource.ts';
import { SimulatedCrash } from '../../src/engine/types.ts';
import { testVM } from '../helpers/scripted-external.ts';
import { createReady, type Env, KEY, pick, setup } from './reconciler-fixtures.ts';

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
