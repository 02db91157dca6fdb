/**
 * FileStore's group commit (src/local/store.ts): the engine's writes made in one turn of the
 * event loop are committed in one transaction, each resolves only after that commit, and only
 * then is it in memory and heard by watchers; a failed commit rejects the whole batch and changes
 * nothing; the runtime's synchronous writes commit what is staged first.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { FINALIZER } from '../../src/engine/resource.ts';
import { ConflictError } from '../../src/engine/types.ts';
import { StateDatabase } from '../../src/local/state-database.ts';
import { FileStore } from '../../src/local/store.ts';
import { readStateFile } from '../../src/workspace/state-file.ts';
import { type TestVM, testVM } from '../helpers/scripted-external.ts';

/** Count (and optionally fail) the state database's transactions while `f` runs. */
async function transactions<T>(f: () => Promise<T>, fail = false): Promise<{ count: number; result: T }> {
  const real = StateDatabase.prototype.transaction;
  let count = 0;
  StateDatabase.prototype.transaction = function (this: StateDatabase, fn: () => void) {
    count++;
    if (fail) throw new Error('database or disk is full');
    return real.call(this, fn);
  };
  try {
    const result = await f();
    return { count, result };
  } finally {
    StateDatabase.prototype.transaction = real;
  }
}

describe('FileStore group commit', () => {
  const dir = mkdtempSync(join(tmpdir(), 'pp-group-commit-'));
  after(() => rmSync(dir, { recursive: true, force: true }));
  let n = 0;
  const open = () => {
    const s = new FileStore<TestVM>(join(dir, `state-${n++}.db`));
    s.open('test');
    return s;
  };
  const onDisk = (s: FileStore<TestVM>, key: string) =>
    readStateFile<TestVM>(s.dbFile)!.objects.find((o) => `${o.metadata.namespace}/${o.metadata.name}` === key);

  it('writes of one turn: one transaction; each visible (memory, watchers, disk) only once committed', async () => {
    const s = open();
    const keys = ['vm1', 'vm2', 'vm3'].map((name) => {
      s.apply(testVM(name));
      return `default/${name}`;
    });
    const heard: Array<{ key: string; finalizers: string[] }> = [];
    s.watch((key) => heard.push({ key, finalizers: [...(s.getSync(key)?.metadata.finalizers ?? [])] }));
    let staged: Promise<TestVM[]> | undefined;
    const { count } = await transactions(async () => {
      staged = Promise.all(
        keys.map((k) => {
          const r = structuredClone(s.getSync(k)!);
          r.metadata.finalizers = [FINALIZER];
          return s.update(r);
        }),
      );
      // Not committed yet: neither in memory, nor heard, nor on disk.
      for (const k of keys) {
        assert.deepEqual(s.getSync(k)!.metadata.finalizers, []);
        assert.deepEqual(onDisk(s, k)!.metadata.finalizers, []);
      }
      assert.equal(heard.length, 0);
      return staged;
    });
    const done = await staged!;
    assert.equal(count, 1, 'three writes, one commit');
    for (const [i, k] of keys.entries()) {
      assert.deepEqual(s.getSync(k)!.metadata.finalizers, [FINALIZER]);
      assert.deepEqual(onDisk(s, k)!.metadata.finalizers, [FINALIZER]);
      assert.equal(done[i]!.metadata.resourceVersion, s.getSync(k)!.metadata.resourceVersion);
    }
    assert.deepEqual(
      heard,
      keys.map((key) => ({ key, finalizers: [FINALIZER] })),
      'a watcher hears of a write once it is in memory',
    );
    s.close();
  });

  it('a failed commit rejects every write of its batch and changes nothing; the next one works', async () => {
    const s = open();
    s.apply(testVM('vm1'));
    s.apply(testVM('vm2'));
    const before = ['default/vm1', 'default/vm2'].map((k) => s.getSync(k)!);
    const writes = before.map((o) => {
      const r = structuredClone(o);
      r.status = { observedGeneration: 1, atProvider: { id: '100' } };
      return s.updateStatus(r);
    });
    await transactions(async () => {
      for (const w of writes) await assert.rejects(w, /disk is full/);
    }, true);
    for (const o of before) {
      assert.equal(s.getSync(`default/${o.metadata.name}`), o, 'memory unchanged');
      assert.equal(onDisk(s, `default/${o.metadata.name}`)!.status, undefined, 'disk unchanged');
    }
    const r = structuredClone(before[0]!);
    r.status = { observedGeneration: 1, atProvider: { id: '101' } };
    await s.updateStatus(r);
    assert.equal(onDisk(s, 'default/vm1')!.status?.atProvider?.id, '101');
    s.close();
  });

  it('a synchronous write commits the staged ones first; a second write on a staged one conflicts', async () => {
    const s = open();
    const one = s.apply(testVM('vm1'));
    const r = structuredClone(one);
    r.metadata.finalizers = [FINALIZER];
    const first = s.update(r);
    await assert.rejects(s.update(structuredClone(r)), ConflictError, 'the staged write moved the resourceVersion on');
    s.apply(testVM('vm2'));
    assert.deepEqual(onDisk(s, 'default/vm1')!.metadata.finalizers, [FINALIZER], 'committed before vm2');
    assert.deepEqual((await first).metadata.finalizers, [FINALIZER]);
    // A staged write is committed by close, too.
    const late = structuredClone(s.getSync('default/vm2')!);
    late.metadata.finalizers = [FINALIZER];
    const pending = s.update(late);
    s.close();
    await pending;
    const again = new FileStore<TestVM>(s.file);
    again.open('test');
    assert.deepEqual(again.getSync('default/vm2')!.metadata.finalizers, [FINALIZER]);
    again.close();
  });
});
