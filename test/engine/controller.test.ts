import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Controller } from '../../src/engine/controller.ts';
import { ManagedReconciler, type ReconcileResult } from '../../src/engine/reconciler.ts';
import { CREATE_FAILURE_SCHEDULE_MS, PRIORITY_EVENT, PRIORITY_LOW } from '../../src/engine/workqueue.ts';
import { MemoryStore } from '../../src/local/memory-store.ts';
import { FakeClock, flush } from '../helpers/fake-clock.ts';
import { ExternalSystem, ScriptedConnector, type TestVM, testVM } from '../helpers/scripted-external.ts';

/** A reconciler whose calls the test completes by hand, one at a time, in any order. */
class GatedReconciler {
  inFlight = new Map<string, Array<(r: ReconcileResult) => void>>();
  running = 0;
  maxRunning = 0;
  readonly calls: string[] = [];
  overlap: string | undefined;
  async reconcile(key: string): Promise<ReconcileResult> {
    this.calls.push(key);
    if (this.inFlight.get(key)?.length) this.overlap = key;
    this.running++;
    this.maxRunning = Math.max(this.maxRunning, this.running);
    try {
      return await new Promise<ReconcileResult>((resolve) => {
        const list = this.inFlight.get(key) ?? [];
        list.push(resolve);
        this.inFlight.set(key, list);
      });
    } finally {
      this.running--;
    }
  }
  /** Finish the in-flight reconcile of `key`. */
  finish(key: string, result: ReconcileResult = { kind: 'done' }): void {
    const list = this.inFlight.get(key);
    const resolve = list?.shift();
    assert.ok(resolve, `${key} is not being reconciled`);
    if (!list?.length) this.inFlight.delete(key);
    resolve(result);
  }
  keys(): string[] {
    return [...this.inFlight.keys()].sort();
  }
}

/** A reconciler that answers from a script per key (default: done). */
class ScriptedResults {
  readonly calls: string[] = [];
  readonly script = new Map<string, ReconcileResult[]>();
  throwFor = new Set<string>();
  async reconcile(key: string): Promise<ReconcileResult> {
    this.calls.push(key);
    if (this.throwFor.has(key)) throw new Error(`reconciler bug for ${key}`);
    return this.script.get(key)?.shift() ?? { kind: 'done' };
  }
}

function asReconciler(r: object): ManagedReconciler<TestVM> {
  return r as unknown as ManagedReconciler<TestVM>;
}

function withVMs(n: number): MemoryStore<TestVM> {
  const store = new MemoryStore<TestVM>();
  for (let i = 0; i < n; i++) store.apply(testVM(`vm${i}`));
  return store;
}

describe('Controller', () => {
  it('runs N workers: never more than N reconciles at once, and all keys get done', async () => {
    const store = withVMs(10);
    const rec = new GatedReconciler();
    const c = new Controller(store, asReconciler(rec), { workers: 3, clock: new FakeClock() });
    await c.start();
    await flush();
    assert.equal(rec.running, 3);
    for (let round = 0; round < 20 && rec.calls.length < 10; round++) {
      const [k] = rec.keys();
      rec.finish(k!);
      await flush();
      assert.ok(rec.running <= 3);
    }
    assert.equal(rec.calls.length, 10);
    for (const k of rec.keys()) rec.finish(k);
    await flush();
    assert.equal(rec.maxRunning, 3);
    assert.deepEqual([...rec.calls].sort(), [...Array(10).keys()].map((i) => `default/vm${i}`).sort());
    await c.stop();
  });

  it('a key changed while it is being reconciled runs again afterwards, never concurrently', async () => {
    const store = withVMs(1);
    const rec = new GatedReconciler();
    const c = new Controller(store, asReconciler(rec), { workers: 4, clock: new FakeClock() });
    await c.start();
    await flush();
    assert.deepEqual(rec.keys(), ['default/vm0']);
    store.apply(testVM('vm0', { cpu: 8 })); // watch event during the reconcile
    store.apply(testVM('vm0', { cpu: 16 }));
    await flush();
    assert.equal(rec.running, 1, 'not handed to a second worker');
    rec.finish('default/vm0');
    await flush();
    assert.equal(rec.calls.length, 2, 'one more run for both changes');
    rec.finish('default/vm0');
    await flush();
    assert.equal(rec.calls.length, 2);
    assert.equal(rec.overlap, undefined);
    await c.stop();
  });

  it('status-only writes do not trigger a reconcile', async () => {
    const store = withVMs(1);
    const rec = new ScriptedResults();
    const c = new Controller(store, asReconciler(rec), { workers: 1, clock: new FakeClock() });
    await c.start();
    await flush();
    assert.equal(rec.calls.length, 1);
    const r = store.getSync('default/vm0')!;
    r.status = { observedGeneration: 1 };
    await store.updateStatus(r);
    await flush();
    assert.equal(rec.calls.length, 1);
    await c.stop();
  });

  it('maps results: done -> forget, requeueAfter -> forget + addAfter, rateLimited -> backoff', async () => {
    const clock = new FakeClock();
    const store = withVMs(1);
    const rec = new ScriptedResults();
    const key = 'default/vm0';
    const seen: Array<[ReconcileResult['kind'], number]> = [];
    rec.script.set(key, [
      { kind: 'rateLimited', error: new Error('observe failed') },
      { kind: 'rateLimited', error: new Error('observe failed') },
      { kind: 'requeueAfter', ms: 5000 },
      { kind: 'rateLimited', schedule: CREATE_FAILURE_SCHEDULE_MS },
      { kind: 'rateLimited' },
      { kind: 'done' },
    ]);
    const c = new Controller(store, asReconciler(rec), {
      workers: 2,
      clock,
      random: () => 0.5,
      onResult: (_k, r, failures) => seen.push([r.kind, failures]),
    });
    await c.start();
    await flush();
    assert.equal(rec.calls.length, 1);

    // 1st failure: 1 s
    clock.advance(999);
    await flush();
    assert.equal(rec.calls.length, 1);
    clock.advance(1);
    await flush();
    assert.equal(rec.calls.length, 2);
    // 2nd failure: 2 s
    clock.advance(1999);
    await flush();
    assert.equal(rec.calls.length, 2);
    clock.advance(1);
    await flush();
    assert.equal(rec.calls.length, 3);
    // requeueAfter 5 s, and the backoff was forgotten
    assert.equal(c.queue.backoff.failuresOf(key), 0);
    clock.advance(4999);
    await flush();
    assert.equal(rec.calls.length, 3);
    clock.advance(1);
    await flush();
    assert.equal(rec.calls.length, 4);
    // a failed create: the create schedule starts at 30 s
    clock.advance(29_999);
    await flush();
    assert.equal(rec.calls.length, 4);
    clock.advance(1);
    await flush();
    assert.equal(rec.calls.length, 5);
    // a plain requeue (conflict) is rate-limited too: second failure in a row -> 2 s
    clock.advance(2000);
    await flush();
    assert.equal(rec.calls.length, 6);
    // done: forgotten, nothing scheduled
    assert.equal(c.queue.backoff.failuresOf(key), 0);
    assert.equal(c.queue.pendingDelayed, 0);
    clock.advance(3_600_000);
    await flush();
    assert.equal(rec.calls.length, 6);
    assert.deepEqual(seen, [
      ['rateLimited', 1],
      ['rateLimited', 2],
      ['requeueAfter', 0],
      ['rateLimited', 1],
      ['rateLimited', 2],
      ['done', 0],
    ]);
    await c.stop();
  });

  it('a progress requeue (work in flight) keeps the backoff: a task failing again waits longer each time', async () => {
    const clock = new FakeClock();
    const store = withVMs(1);
    const rec = new ScriptedResults();
    const key = 'default/vm0';
    rec.script.set(key, [
      { kind: 'rateLimited', error: new Error('task failed') },
      { kind: 'requeueAfter', ms: 10, progress: true },
      { kind: 'rateLimited', error: new Error('task failed') },
      { kind: 'requeueAfter', ms: 10 },
      { kind: 'rateLimited', error: new Error('task failed') },
    ]);
    const seen: number[] = [];
    const c = new Controller(store, asReconciler(rec), {
      clock,
      random: () => 0.5,
      onResult: (_k, _r, failures) => seen.push(failures),
    });
    await c.start();
    await flush();
    clock.advance(1000); // 1st failure: 1 s
    await flush();
    clock.advance(10); // progress: the backoff is kept
    await flush();
    clock.advance(1999);
    await flush();
    assert.equal(rec.calls.length, 3, '2nd failure: 2 s, not 1 s');
    clock.advance(1);
    await flush();
    assert.equal(rec.calls.length, 4);
    clock.advance(10); // a plain requeue (success): forgotten, the next failure starts at 1 s again
    await flush();
    assert.deepEqual(seen, [1, 1, 2, 0, 1]);
    await c.stop();
  });

  it("a reconcile's requeue replaces the one an earlier reconcile asked for, even when that one is sooner", async () => {
    const clock = new FakeClock();
    const store = withVMs(1);
    const rec = new ScriptedResults();
    const key = 'default/vm0';
    // A create's task, watched: a wake is the signal, the 20 s requeue a fallback. The task ends,
    // the wake comes at 16 s, and the next step asks to be looked at again in 13 s.
    rec.script.set(key, [
      { kind: 'requeueAfter', ms: 20_000, progress: true },
      { kind: 'requeueAfter', ms: 13_000, progress: true },
      { kind: 'requeueAfter', ms: 60_000 },
    ]);
    const c = new Controller(store, asReconciler(rec), { clock });
    await c.start();
    await flush();
    assert.equal(rec.calls.length, 1);
    clock.advance(16_000);
    c.wake(key);
    await flush();
    assert.equal(rec.calls.length, 2);
    clock.advance(4_000); // 20 s: the first reconcile's fallback, superseded
    await flush();
    assert.equal(rec.calls.length, 2, 'no reconcile at 20 s: the one at 16 s asked for 29 s');
    clock.advance(9_000);
    await flush();
    assert.equal(rec.calls.length, 3, 'reconciled at 29 s');
    await c.stop();
  });

  it('a throwing reconciler does not kill its worker; the key backs off', async () => {
    const clock = new FakeClock();
    const store = withVMs(3);
    const rec = new ScriptedResults();
    rec.throwFor.add('default/vm0');
    const c = new Controller(store, asReconciler(rec), { workers: 1, clock, random: () => 0.5 });
    await c.start();
    await flush();
    assert.deepEqual(rec.calls, ['default/vm0', 'default/vm1', 'default/vm2']);
    assert.equal(c.queue.backoff.failuresOf('default/vm0'), 1);
    rec.throwFor.clear();
    clock.advance(1000);
    await flush();
    assert.equal(rec.calls.length, 4);
    await c.stop();
  });

  it('a throwing onResult callback does not kill the worker either', async () => {
    const store = withVMs(3);
    const rec = new ScriptedResults();
    const c = new Controller(store, asReconciler(rec), {
      workers: 1,
      clock: new FakeClock(),
      onResult: () => {
        throw new Error('metrics exploded');
      },
    });
    await c.start();
    await flush();
    assert.equal(rec.calls.length, 3);
    await c.stop();
  });

  it('stop() waits for in-flight reconciles and takes no new work', async () => {
    const store = withVMs(3);
    const rec = new GatedReconciler();
    const c = new Controller(store, asReconciler(rec), { workers: 1, clock: new FakeClock() });
    await c.start();
    await flush();
    let stopped = false;
    const stopping = c.stop().then(() => {
      stopped = true;
    });
    await flush();
    assert.equal(stopped, false, 'still waiting for the running reconcile');
    rec.finish('default/vm0');
    await stopping;
    assert.deepEqual(rec.calls, ['default/vm0'], 'queued keys were not started after stop');
    store.apply(testVM('vm9'));
    await flush();
    assert.equal(rec.calls.length, 1, 'the watch is closed');
  });

  it('drives the real reconciler to convergence: one external object per resource, all Ready', async () => {
    const clock = new FakeClock(Date.parse('2025-06-01T12:00:00Z'));
    const now = () => clock.now();
    const store = new MemoryStore<TestVM>();
    store.now = now;
    const sys = new ExternalSystem();
    const rec = new ManagedReconciler<TestVM>(store, new ScriptedConnector(sys, { deterministic: true, now }), { now });
    const c = new Controller(store, rec, { workers: 3, clock, random: () => 0.5 });
    for (let i = 0; i < 8; i++) store.apply(testVM(`vm${i}`));
    sys.failNext.create = new Error('transient'); // one create fails once
    await c.start();
    for (let i = 0; i < 40; i++) {
      await flush();
      clock.advance(5000);
    }
    await flush();
    assert.equal(sys.objects.size, 8);
    for (const vm of store.listSync()) {
      assert.equal(sys.ownedBy(vm.metadata.uid).length, 1, vm.metadata.name);
      const ready = vm.status?.conditions?.find((x) => x.type === 'Ready');
      assert.equal(ready?.status, 'True', vm.metadata.name);
    }
    // deletion through the controller
    for (const vm of store.listSync()) store.markDeleted(`default/${vm.metadata.name}`);
    for (let i = 0; i < 20; i++) {
      await flush();
      clock.advance(5000);
    }
    await flush();
    assert.equal(store.listSync().length, 0);
    assert.equal(sys.objects.size, 0);
    await c.stop();
  });
});

describe('Controller: priorities and poll jitter (issue 17)', () => {
  it('with listPriority LOW, a change the watch sees goes ahead of the first list', async () => {
    const store = withVMs(50);
    const rec = new GatedReconciler();
    const c = new Controller(store, asReconciler(rec), {
      workers: 1,
      clock: new FakeClock(),
      listPriority: PRIORITY_LOW,
    });
    await c.start();
    await flush();
    assert.deepEqual(rec.keys(), ['default/vm0'], 'the one worker took the first of the list');
    store.apply(testVM('vm42', { cpu: 8 })); // a user's edit while 49 list items wait
    rec.finish('default/vm0');
    await flush();
    assert.deepEqual(rec.keys(), ['default/vm42'], 'the edited resource is next, not 50th');
    rec.finish('default/vm42');
    await flush();
    assert.deepEqual(rec.keys(), ['default/vm1']);
    for (let i = 0; i < 60 && rec.keys().length; i++) {
      rec.finish(rec.keys()[0]!);
      await flush();
    }
    assert.equal(rec.calls.length, 50, 'every key once: the edited one was raised, not queued twice');
    await c.stop();
  });

  it('a poll comes back at PRIORITY_LOW: work in flight and retries due at the same moment go first', async () => {
    const clock = new FakeClock();
    const store = withVMs(4);
    const rec = new GatedReconciler();
    const c = new Controller(store, asReconciler(rec), { workers: 1, clock, random: () => 0.5, pollJitter: 0.1 });
    await c.start();
    await flush();
    const next = async (result: ReconcileResult) => {
      rec.finish(rec.keys()[0]!, result);
      await flush();
    };
    await next({ kind: 'requeueAfter', ms: 60_000 }); // vm0: a poll
    await next({ kind: 'requeueAfter', ms: 60_000, progress: true }); // vm1: a task in flight
    await next({ kind: 'rateLimited', schedule: [60_000] }); // vm2: a retry
    assert.deepEqual(rec.keys(), ['default/vm3']);
    clock.advance(60_000); // all three due while the one worker is busy
    assert.equal(c.queue.length, 3);
    assert.equal(c.queue.lengthAt(PRIORITY_EVENT), 2);
    const order: string[] = [];
    for (let i = 0; i < 4; i++) {
      await next({ kind: 'done' });
      order.push(...rec.keys());
    }
    assert.deepEqual(order, ['default/vm1', 'default/vm2', 'default/vm0']);
    await c.stop();
  });

  it('a poll is jittered within [-pollJitter, +pollJitter] of its interval (crossplane-runtime WithPollJitterHook)', async () => {
    for (const [random, due] of [
      [0, 54_000],
      [0.5, 60_000],
      [0.999_999, 66_000],
    ] as const) {
      const clock = new FakeClock();
      const store = withVMs(1);
      const rec = new ScriptedResults();
      rec.script.set('default/vm0', [{ kind: 'requeueAfter', ms: 60_000 }]);
      const c = new Controller(store, asReconciler(rec), { workers: 1, clock, random: () => random, pollJitter: 0.1 });
      await c.start();
      await flush();
      clock.advance(due - 1);
      await flush();
      assert.equal(rec.calls.length, 1, `random ${random}: not before ${due} ms`);
      clock.advance(1);
      await flush();
      assert.equal(rec.calls.length, 2, `random ${random}: at ${due} ms`);
      await c.stop();
    }
  });

  it('without pollJitter (the default: the local runtime) a poll comes back at its interval exactly', async () => {
    const clock = new FakeClock();
    const store = withVMs(1);
    const rec = new ScriptedResults();
    rec.script.set('default/vm0', [{ kind: 'requeueAfter', ms: 60_000 }]);
    const c = new Controller(store, asReconciler(rec), { workers: 1, clock, random: () => 0 });
    await c.start();
    await flush();
    clock.advance(59_999);
    await flush();
    assert.equal(rec.calls.length, 1);
    clock.advance(1);
    await flush();
    assert.equal(rec.calls.length, 2);
    await c.stop();
  });

  it('resync() queues every key behind any change', async () => {
    const store = withVMs(3);
    const rec = new GatedReconciler();
    const c = new Controller(store, asReconciler(rec), { workers: 1, clock: new FakeClock() });
    await c.start();
    await flush();
    for (let i = 0; i < 3; i++) {
      rec.finish(rec.keys()[0]!);
      await flush();
    }
    c.wake('default/vm2');
    await flush();
    assert.deepEqual(rec.keys(), ['default/vm2']);
    c.resync(['default/vm0', 'default/vm1', 'default/vm2']);
    c.wake('default/vm1'); // a change after the resync was queued still goes first
    rec.finish('default/vm2');
    await flush();
    assert.deepEqual(rec.keys(), ['default/vm1']);
    rec.finish('default/vm1');
    await flush();
    assert.deepEqual(rec.keys(), ['default/vm0']);
    rec.finish('default/vm0');
    await flush();
    assert.deepEqual(rec.keys(), ['default/vm2'], 'vm2 once more, from the resync');
    rec.finish('default/vm2');
    await flush();
    assert.deepEqual(rec.keys(), [], 'vm1 was raised, not queued twice');
    await c.stop();
  });
});
