/**
 * When a write of the local state is durable (src/local/state-database.ts): SQLite runs with
 * `synchronous = OFF` and no checkpoints of its own, and the log is fsynced off the event loop
 * after each group commit; an engine's write resolves only once that fsync has ended (it is in
 * memory at once, so that the next write builds on it), a failed fsync rejects the batch and
 * stops the store, the runtime's synchronous writes are fsynced before they return, and the log
 * is checkpointed with SQLite's full syncs once it has grown.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { FINALIZER } from '../../src/engine/resource.ts';
import { StateDatabase } from '../../src/local/state-database.ts';
import { FileStore } from '../../src/local/store.ts';
import { sqliteModule } from '../../src/workspace/state-db.ts';
import { readStateFile } from '../../src/workspace/state-file.ts';
import { type TestVM, testVM } from '../helpers/scripted-external.ts';

/** Hold every durable() of the state databases until `release` (or fail them with `fail`). */
function holdDurable() {
  const real = StateDatabase.prototype.durable;
  const held: Array<{ go: () => void; fail: (e: Error) => void }> = [];
  StateDatabase.prototype.durable = function (this: StateDatabase) {
    const synced = real.call(this);
    return new Promise<void>((resolve, reject) => {
      held.push({ go: () => synced.then(resolve, reject), fail: reject });
    });
  };
  return {
    held,
    release: () => {
      for (const h of held.splice(0)) h.go();
    },
    fail: (e: Error) => {
      for (const h of held.splice(0)) h.fail(e);
    },
    restore: () => {
      StateDatabase.prototype.durable = real;
    },
  };
}

describe('the local state: a write is durable before it is done', () => {
  const dir = mkdtempSync(join(tmpdir(), 'pp-durable-'));
  after(() => rmSync(dir, { recursive: true, force: true }));
  let n = 0;
  const open = () => {
    const s = new FileStore<TestVM>(join(dir, `state-${n++}.db`));
    s.open('test');
    return s;
  };

  it("an engine's write: in memory and committed at once, resolved only once its fsync ended", async () => {
    const s = open();
    s.apply(testVM('vm1'));
    const hold = holdDurable();
    try {
      const r = structuredClone(s.getSync('default/vm1')!);
      r.metadata.finalizers = [FINALIZER];
      let done = false;
      const write = s.update(r).then((x) => {
        done = true;
        return x;
      });
      await new Promise((resolve) => setImmediate(resolve));
      await new Promise((resolve) => setImmediate(resolve));
      assert.equal(hold.held.length, 1, 'one fsync for the batch');
      assert.deepEqual(s.getSync('default/vm1')!.metadata.finalizers, [FINALIZER], 'in memory');
      const disk = readStateFile<TestVM>(s.dbFile)!.objects[0]!;
      assert.deepEqual(disk.metadata.finalizers, [FINALIZER], 'committed');
      assert.equal(done, false, 'not done before the fsync');
      hold.release();
      assert.deepEqual((await write).metadata.finalizers, [FINALIZER]);
    } finally {
      hold.restore();
      s.close();
    }
  });

  it('a failed fsync rejects the writes of its batch, and the store takes no more', async () => {
    const s = open();
    s.apply(testVM('vm1'));
    const hold = holdDurable();
    try {
      const r = structuredClone(s.getSync('default/vm1')!);
      r.metadata.finalizers = [FINALIZER];
      const write = s.update(r);
      await new Promise((resolve) => setImmediate(resolve));
      await new Promise((resolve) => setImmediate(resolve));
      hold.fail(new Error('EIO: i/o error, fsync'));
      await assert.rejects(write, /could not be made durable \(EIO/);
      const next = structuredClone(s.getSync('default/vm1')!);
      next.status = { observedGeneration: 1 };
      await assert.rejects(s.updateStatus(next), /could not be made durable/);
      assert.throws(() => s.apply(testVM('vm2')), /could not be made durable/);
    } finally {
      hold.restore();
      s.close();
    }
  });

  it("the runtime's synchronous writes are fsynced before they return; an unchanged one is not", () => {
    const s = open();
    const db = () => (s as unknown as { db: StateDatabase }).db;
    s.apply(testVM('vm1'));
    const after1 = db().syncs;
    assert.ok(after1 >= 1);
    s.apply(testVM('vm1'));
    assert.equal(db().syncs, after1, 'nothing written, nothing to sync');
    s.markDeleted('default/vm1');
    assert.equal(db().syncs, after1 + 1);
    s.close();
  });

  it("an admission's writes (applyAll) are durable together when it returns: one fsync, not one each", () => {
    const s = open();
    const db = () => (s as unknown as { db: StateDatabase }).db;
    s.apply(testVM('first'));
    const before = db().syncs;
    s.applyAll(['vm1', 'vm2', 'vm3'].map((n) => testVM(n)));
    assert.equal(db().syncs, before + 1);
    assert.deepEqual(
      ['vm1', 'vm2', 'vm3'].map((n) => s.getSync(`default/${n}`)?.metadata.generation),
      [1, 1, 1],
    );
    s.applyAll([testVM('vm1')]);
    assert.equal(db().syncs, before + 1, 'nothing written, nothing to sync');
    const file = s.dbFile;
    s.close();
    // What the database holds, read by a store of its own: all three.
    const again = new FileStore<TestVM>(file);
    again.open('test');
    assert.deepEqual(
      again
        .listSync()
        .map((o) => o.metadata.name)
        .sort(),
      ['first', 'vm1', 'vm2', 'vm3'],
    );
    again.close();
  });

  it('SQLite runs with synchronous OFF and no checkpoints of its own; the log is checkpointed once grown', async () => {
    const file = join(dir, 'raw.db');
    const s = new FileStore<TestVM>(file);
    s.open('test');
    s.apply(testVM('seed'));
    s.close();
    const fsyncs: number[] = [];
    const db = new StateDatabase(file, {
      fsync: (fd, done) => {
        fsyncs.push(fd);
        done(null);
      },
    });
    try {
      const inner = (db as unknown as { db: import('node:sqlite').DatabaseSync }).db;
      assert.equal((inner.prepare('PRAGMA synchronous').get() as { synchronous: number }).synchronous, 0);
      assert.equal(
        (inner.prepare('PRAGMA wal_autocheckpoint').get() as { wal_autocheckpoint: number }).wal_autocheckpoint,
        0,
      );
      const doc = JSON.stringify({ pad: 'x'.repeat(64 * 1024) });
      // Every 2 MB of rows, the next durable() checkpoints the log, which then starts over.
      for (let i = 0; i < 140; i++) {
        db.transaction(() => db.putObject(`default/big-${i}`, i + 2, doc));
        await db.durable();
      }
      assert.equal(fsyncs.length, 140);
      assert.equal(db.checkpoints, 4, '9 MB of rows: four checkpoints');
      const wal = statSync(`${file}-wal`).size;
      assert.ok(wal <= 8 * 1024 * 1024, `the log was reused (${wal} bytes)`);
      assert.ok(statSync(file).size > 8 * 1024 * 1024, 'pages were copied into the database');
      // The log's descriptor is the one fsynced.
      assert.equal(
        fsyncs.every((fd) => fd === fsyncs[0]),
        true,
      );
    } finally {
      db.close();
    }
    // What was committed is there after close (SQLite's last checkpoint, with its full syncs).
    const { DatabaseSync } = sqliteModule();
    const check = new DatabaseSync(file, { readOnly: true });
    try {
      const row = check.prepare('SELECT count(*) AS n FROM objects').get() as { n: number };
      assert.equal(row.n, 141);
    } finally {
      check.close();
    }
  });
});
