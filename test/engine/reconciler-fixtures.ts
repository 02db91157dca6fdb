/**
 * The fixtures ManagedReconciler's tests share (reconciler-*.test.ts): a store that records its
 * writes and can answer one with a conflict, and a reconciler over it and a scripted external
 * system on a clock the test moves by hand.
 */
import assert from 'node:assert/strict';
import { ManagedReconciler, type ReconcilerOptions } from '../../src/engine/reconciler.ts';
import type { Condition } from '../../src/engine/resource.ts';
import { ConflictError, type EngineHooks } from '../../src/engine/types.ts';
import { MemoryStore } from '../../src/local/memory-store.ts';
import { ExternalSystem, ScriptedConnector, type TestVM, testVM } from '../helpers/scripted-external.ts';

export const T0 = Date.parse('2025-06-01T12:00:00Z');
export const KEY = 'default/vm1';

/** A MemoryStore that records every write and can be told to answer the next write with a conflict. */
export class RecordingStore extends MemoryStore<TestVM> {
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

export interface Env {
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

export function setup(
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

export function pick(c: Condition | undefined): Pick<Condition, 'status' | 'reason'> | undefined {
  return c ? { status: c.status, reason: c.reason } : undefined;
}

/** Create and bring a resource to Ready (two reconciles), past the creation grace period. */
export async function createReady(env: Env, vm: TestVM = testVM('vm1')): Promise<void> {
  env.store.apply(vm);
  const key = `default/${vm.metadata.name}`;
  await env.rec.reconcile(key);
  env.advance(60_000);
  await env.rec.reconcile(key);
  assert.deepEqual(pick(env.cond('Ready', key)), { status: 'True', reason: 'Available' });
}
