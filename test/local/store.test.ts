import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import {
  ANNOTATION_CREATE_PENDING,
  ANNOTATION_EXTERNAL_NAME,
  ANNOTATION_PAUSED,
  FINALIZER,
} from '../../src/engine/resource.ts';
import { ConflictError, type WatchEvent } from '../../src/engine/types.ts';
import { MemoryStore } from '../../src/local/memory-store.ts';
import { FileStore, StateLockedError } from '../../src/local/store.ts';
import { DB_STATE_VERSION } from '../../src/workspace/state-db.ts';
import { readStateFile, StateFileError } from '../../src/workspace/state-file.ts';
import { type TestVM, testVM } from '../helpers/scripted-external.ts';

const KEY = 'default/vm1';

function memory(): { store: MemoryStore<TestVM>; seen: Array<{ key: string; event: WatchEvent; gen?: number }> } {
  const store = new MemoryStore<TestVM>();
  store.now = () => Date.parse('2025-06-01T12:00:00Z');
  const seen: Array<{ key: string; event: WatchEvent; gen?: number }> = [];
  store.watch((key, event, obj) => seen.push({ key, event, ...(obj ? { gen: obj.metadata.generation } : {}) }));
  return { store, seen };
}

describe('MemoryStore', () => {
  it('apply creates with uid, generation 1, a resourceVersion, and announces ADDED', () => {
    const { store, seen } = memory();
    const vm = testVM('vm1');
    vm.metadata.uid = '';
    const o = store.apply(vm);
    assert.ok(o.metadata.uid, 'a uid is assigned');
    assert.equal(o.metadata.generation, 1);
    assert.ok(o.metadata.resourceVersion);
    assert.equal(o.metadata.creationTimestamp, '2025-06-01T12:00:00Z');
    assert.deepEqual(o.metadata.finalizers, []);
    assert.deepEqual(seen, [{ key: KEY, event: 'ADDED', gen: 1 }]);
  });

  it('apply of an identical manifest is a no-op; a spec change bumps the generation', () => {
    const { store, seen } = memory();
    const a = store.apply(testVM('vm1'));
    const b = store.apply(testVM('vm1'));
    assert.equal(b.metadata.resourceVersion, a.metadata.resourceVersion);
    assert.equal(seen.length, 1);
    const c = store.apply(testVM('vm1', { cpu: 4 }));
    assert.equal(c.metadata.generation, 2);
    assert.notEqual(c.metadata.resourceVersion, a.metadata.resourceVersion);
    assert.deepEqual(seen.at(-1), { key: KEY, event: 'MODIFIED', gen: 2 });
    const d = store.apply(testVM('vm1', { cpu: 4, annotations: { note: 'x' } }));
    assert.equal(d.metadata.generation, 2, 'metadata changes do not bump the generation');
  });

  it('apply keeps the annotations the engine wrote, but the manifest can drop its own (unpause)', async () => {
    const { store } = memory();
    store.apply(testVM('vm1', { annotations: { [ANNOTATION_PAUSED]: 'true', team: 'ml' } }));
    const cur = (await store.get(KEY))!;
    cur.metadata.annotations![ANNOTATION_EXTERNAL_NAME] = '101';
    cur.metadata.annotations![ANNOTATION_CREATE_PENDING] = '2025-06-01T12:00:00Z';
    await store.update(cur);
    const next = store.apply(testVM('vm1', { annotations: { team: 'ml' } }));
    assert.deepEqual(next.metadata.annotations, {
      team: 'ml',
      [ANNOTATION_EXTERNAL_NAME]: '101',
      [ANNOTATION_CREATE_PENDING]: '2025-06-01T12:00:00Z',
    });
    // a manifest may still set the external name (import an existing VM)
    const imported = store.apply(testVM('vm1', { annotations: { [ANNOTATION_EXTERNAL_NAME]: '555' } }));
    assert.equal(imported.metadata.annotations?.[ANNOTATION_EXTERNAL_NAME], '555');
  });

  it('get and list return copies', async () => {
    const { store } = memory();
    store.apply(testVM('vm1'));
    const a = (await store.get(KEY))!;
    a.spec.forProvider.cpu = 99;
    a.metadata.annotations!.x = 'y';
    assert.equal((await store.get(KEY))!.spec.forProvider.cpu, 2);
    const [l] = await store.list();
    l!.spec.forProvider.cpu = 42;
    assert.equal(store.getSync(KEY)!.spec.forProvider.cpu, 2);
    assert.equal(store.listSync().length, 1);
  });

  it('update with a stale resourceVersion is a conflict (metadata and status alike)', async () => {
    const { store } = memory();
    store.apply(testVM('vm1'));
    const first = (await store.get(KEY))!;
    const second = (await store.get(KEY))!;
    first.metadata.annotations!.a = '1';
    await store.update(first);
    second.metadata.annotations!.b = '2';
    await assert.rejects(store.update(second), ConflictError);
    second.status = { observedGeneration: 1 };
    await assert.rejects(store.updateStatus(second), ConflictError);
    await assert.rejects(store.update(testVM('nope')), ConflictError, 'updating a missing object');
    await assert.rejects(store.updateStatus(testVM('nope')), ConflictError);
  });

  it('a write returns the new resourceVersion, so the writer can write again', async () => {
    const { store } = memory();
    store.apply(testVM('vm1'));
    const r = (await store.get(KEY))!;
    r.metadata.annotations!.a = '1';
    r.metadata.resourceVersion = (await store.update(r)).metadata.resourceVersion;
    r.status = { observedGeneration: 1 };
    r.metadata.resourceVersion = (await store.updateStatus(r)).metadata.resourceVersion;
    r.metadata.annotations!.b = '2';
    await store.update(r);
    assert.deepEqual(store.getSync(KEY)!.metadata.annotations, { a: '1', b: '2' });
  });

  it('update: the generation moves only on a spec change', async () => {
    const { store, seen } = memory();
    store.apply(testVM('vm1'));
    const r = (await store.get(KEY))!;
    r.metadata.annotations!.a = '1';
    r.metadata.finalizers = [FINALIZER];
    const s1 = await store.update(r);
    assert.equal(s1.metadata.generation, 1);
    assert.deepEqual(seen.at(-1), { key: KEY, event: 'MODIFIED', gen: 1 });
    s1.spec.forProvider.memory = 2048;
    const s2 = await store.update(s1);
    assert.equal(s2.metadata.generation, 2);
    const s3 = await store.update(s2);
    assert.equal(s3.metadata.resourceVersion, s2.metadata.resourceVersion, 'an unchanged write changes nothing');
  });

  it('update cannot touch status, and status writes cannot touch metadata or spec', async () => {
    const { store } = memory();
    store.apply(testVM('vm1'));
    const r = (await store.get(KEY))!;
    r.status = { observedGeneration: 7 };
    const s1 = await store.update(r);
    assert.equal(s1.status, undefined);
    s1.status = { observedGeneration: 1 };
    s1.spec.forProvider.cpu = 64;
    s1.metadata.annotations!.sneaky = 'yes';
    const s2 = await store.updateStatus(s1);
    assert.equal(s2.status?.observedGeneration, 1);
    assert.equal(s2.spec.forProvider.cpu, 2);
    assert.equal(s2.metadata.annotations?.sneaky, undefined);
    assert.equal(s2.metadata.generation, 1);
  });

  it('status writes bump the resourceVersion but do not wake watchers', async () => {
    const { store, seen } = memory();
    store.apply(testVM('vm1'));
    const r = (await store.get(KEY))!;
    r.status = { observedGeneration: 1, conditions: [] };
    const s = await store.updateStatus(r);
    assert.notEqual(s.metadata.resourceVersion, r.metadata.resourceVersion);
    assert.equal(seen.length, 1, 'only the ADDED');
    const same = await store.updateStatus(s);
    assert.equal(same.metadata.resourceVersion, s.metadata.resourceVersion, 'identical status: no write');
  });

  it('deletion without finalizers removes the object at once (DELETED)', async () => {
    const { store, seen } = memory();
    store.apply(testVM('vm1'));
    store.markDeleted(KEY);
    assert.equal(await store.get(KEY), undefined);
    assert.deepEqual(seen.at(-1), { key: KEY, event: 'DELETED' });
    store.markDeleted(KEY); // idempotent
  });

  it('finalizers hold deletion; DELETED once the last one is removed', async () => {
    const { store, seen } = memory();
    store.apply(testVM('vm1'));
    const r = (await store.get(KEY))!;
    r.metadata.finalizers = [FINALIZER, 'example.com/other'];
    await store.update(r);
    store.markDeleted(KEY);
    const marked = (await store.get(KEY))!;
    assert.equal(marked.metadata.deletionTimestamp, '2025-06-01T12:00:00Z');
    assert.deepEqual(seen.at(-1), { key: KEY, event: 'MODIFIED', gen: 1 });
    const rv = marked.metadata.resourceVersion;
    store.markDeleted(KEY);
    assert.equal((await store.get(KEY))!.metadata.resourceVersion, rv, 'marking twice changes nothing');
    assert.equal((await store.get(KEY))!.metadata.deletionTimestamp, '2025-06-01T12:00:00Z');

    marked.metadata.finalizers = [FINALIZER];
    const one = await store.update(marked);
    assert.ok(await store.get(KEY), 'one finalizer left: still there');
    one.metadata.finalizers = [];
    await store.update(one);
    assert.equal(await store.get(KEY), undefined);
    assert.deepEqual(seen.at(-1), { key: KEY, event: 'DELETED' });
    const after = testVM('vm1');
    after.metadata.resourceVersion = one.metadata.resourceVersion;
    await assert.rejects(store.update(after), ConflictError, 'writes to a deleted object fail');
  });

  it('unsubscribed watchers hear nothing more', () => {
    const store = new MemoryStore<TestVM>();
    const seen: string[] = [];
    const stop = store.watch((k, e) => seen.push(`${k} ${e}`));
    store.apply(testVM('vm1'));
    stop();
    store.apply(testVM('vm2'));
    assert.deepEqual(seen, [`${KEY} ADDED`]);
  });

  it('events repeat as a count, like Kubernetes event aggregation', () => {
    const store = new MemoryStore<TestVM>();
    const vm = store.apply(testVM('vm1'));
    store.event(vm, 'Warning', 'Locked', 'VM 100 is locked');
    store.event(vm, 'Warning', 'Locked', 'VM 100 is locked');
    store.event(vm, 'Normal', 'Available', 'Ready is True');
    store.event(vm, 'Warning', 'Locked', 'VM 100 is locked');
    assert.deepEqual(
      store.events.map((e) => [e.reason, e.count]),
      [
        ['Locked', 2],
        ['Available', 1],
        ['Locked', 1],
      ],
    );
  });

  it('a repeated event counts on the newest of its resource among the 1,000 kept, never on one dropped', () => {
    const store = new MemoryStore<TestVM>();
    const a = store.apply(testVM('a'));
    const b = store.apply(testVM('b'));
    store.event(a, 'Normal', 'Seen', 'first');
    store.event(b, 'Normal', 'Seen', 'b');
    for (let i = 0; i < 999; i++) store.event(b, 'Normal', 'Step', `b ${i}`);
    // a's only event was the oldest of 1,001: dropped, so the same event again is a new one.
    store.event(a, 'Normal', 'Seen', 'first');
    assert.equal(store.events.length, 1000);
    assert.deepEqual(
      store.events.filter((e) => e.key === 'default/a').map((e) => e.count),
      [1],
    );
    // b's newest is kept: a repeat of it counts on it.
    store.event(b, 'Normal', 'Step', 'b 998');
    assert.equal(store.events.length, 1000);
    assert.equal(store.events.findLast((e) => e.key === 'default/b')?.count, 2);
  });
});

describe('FileStore', () => {
  const dirs: string[] = [];
  const opened: FileStore<TestVM>[] = [];
  function tmp(): string {
    const d = mkdtempSync(join(tmpdir(), 'pp-store-'));
    dirs.push(d);
    return d;
  }
  function open(file: string): FileStore<TestVM> {
    const s = new FileStore<TestVM>(file);
    s.open();
    opened.push(s);
    return s;
  }
  after(() => {
    for (const s of opened) s.close();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  it('writes every change through to the database and reloads the same state', async () => {
    const dir = tmp();
    const file = join(dir, 'state.db');
    const a = open(file);
    const vm = a.apply(testVM('vm1'));
    vm.metadata.finalizers = [FINALIZER];
    vm.metadata.annotations![ANNOTATION_EXTERNAL_NAME] = '100';
    const u = await a.update(vm);
    u.status = { observedGeneration: 1, atProvider: { id: '100', cpu: 2 } };
    const s = await a.updateStatus(u);
    a.event(s, 'Normal', 'Available', 'Ready is True');
    a.apply(testVM('vm2'));
    // Another reader sees every committed write while the store is open (WAL).
    const onDisk = readStateFile<TestVM>(file)!;
    assert.equal(onDisk.version, DB_STATE_VERSION);
    assert.equal(onDisk.objects.length, 2);
    assert.equal(onDisk.objects[0]!.status?.atProvider?.id, '100');
    assert.deepEqual(
      readdirSync(dir).filter((f) => !/-(wal|shm)$/.test(f)),
      ['state.db', 'state.db.lock'],
      'no temp file left behind',
    );
    a.close();
    assert.equal(existsSync(`${file}.lock`), false, 'close releases the lock');
    assert.deepEqual(readdirSync(dir), ['state.db'], 'close checkpoints the log into the database');

    const b = open(file);
    assert.deepEqual(b.listSync(), a.listSync());
    assert.deepEqual(b.events, a.events, 'events written with the next write, or at close');
    const again = structuredClone(b.getSync(KEY)!);
    assert.equal(again.status?.atProvider?.id, '100');
    // resourceVersions continue where they were: a stale copy from before the restart still conflicts
    again.metadata.annotations!.more = '1';
    const next = await b.update(again);
    assert.ok(Number(next.metadata.resourceVersion) > Number(s.metadata.resourceVersion));
    await assert.rejects(b.update(s), ConflictError);
    b.close();
  });

  it('deletions, retired uids and the resourceVersion counter survive a reopen', async () => {
    const file = join(tmp(), 'state.db');
    const a = open(file);
    const one = a.apply(testVM('vm1'));
    const two = a.apply(testVM('vm2'));
    a.markDeleted(KEY);
    a.close();
    const b = open(file);
    assert.deepEqual(
      b.listSync().map((o) => o.metadata.name),
      ['vm2'],
    );
    assert.deepEqual(b.retired, [one.metadata.uid]);
    const three = b.apply(testVM('vm3'));
    assert.ok(
      Number(three.metadata.resourceVersion) > Number(two.metadata.resourceVersion),
      'a deleted object takes none of its resourceVersions back',
    );
    b.close();
  });

  it('getSync and listSync are read-only views (frozen); get and list are copies', async () => {
    const s = open(join(tmp(), 'state.db'));
    s.apply(testVM('vm1'));
    const view = s.getSync(KEY)!;
    assert.ok(Object.isFrozen(view) && Object.isFrozen(view.spec.forProvider));
    assert.throws(() => {
      view.spec.forProvider.cpu = 99;
    }, TypeError);
    assert.equal(s.listSync()[0], view, 'no copy per listing');
    const copy = (await s.get(KEY))!;
    copy.spec.forProvider.cpu = 99;
    assert.equal(s.getSync(KEY)!.spec.forProvider.cpu, 2);
    s.close();
  });

  it('after close a write is refused and changes nothing; the database is never created twice', () => {
    const file = join(tmp(), 'state.db');
    const a = open(file);
    a.apply(testVM('vm1'));
    a.close();
    assert.throws(() => a.apply(testVM('vm2')), /the state is closed/);
    assert.deepEqual(
      a.listSync().map((o) => o.metadata.name),
      ['vm1'],
    );
    assert.deepEqual(
      readStateFile<TestVM>(file)!.objects.map((o) => o.metadata.name),
      ['vm1'],
    );
  });

  it('starts empty when the file does not exist yet, and creates it at the first write', () => {
    const dir = tmp();
    const s = open(join(dir, 'new.db'));
    assert.deepEqual(s.listSync(), []);
    assert.equal(existsSync(join(dir, 'new.db')), false, 'nothing written by opening');
    s.apply(testVM('vm1'));
    assert.equal(readStateFile(join(dir, 'new.db'))?.objects.length, 1);
    s.close();
  });

  it('refuses a second open while the first holds the lock (same process), also by its .json name', () => {
    const file = join(tmp(), 'state.db');
    const a = open(file);
    assert.throws(() => new FileStore<TestVM>(file).open(), StateLockedError);
    assert.throws(() => new FileStore<TestVM>(file.replace(/\.db$/, '.json')).open(), StateLockedError);
    a.close();
    const b = open(file);
    b.close();
  });

  it('refuses to open while another live process holds the lock', () => {
    const file = join(tmp(), 'state.db');
    writeFileSync(`${file}.lock`, String(process.ppid)); // our parent is alive
    assert.throws(
      () => new FileStore<TestVM>(file).open(),
      (e: Error) => e instanceof StateLockedError && e.message.includes(`process ${process.ppid}`),
    );
    assert.equal(readFileSync(`${file}.lock`, 'utf8'), String(process.ppid), 'the live lock is untouched');
  });

  it('takes over a stale lock left by a dead process', () => {
    const file = join(tmp(), 'state.db');
    const dead = spawnSync(process.execPath, ['-e', '']);
    assert.ok(dead.pid);
    writeFileSync(`${file}.lock`, String(dead.pid));
    const s = open(file);
    assert.equal(readFileSync(`${file}.lock`, 'utf8'), String(process.pid));
    s.close();
  });

  for (const [label, content] of [
    ['not JSON', '{"version": 1, "objects": ['],
    ['JSON of the wrong shape', 'null'],
    ['objects missing', '{"version": 1}'],
    ['empty', ''],
    ['an empty object', '{}'],
    ['a list', '[]'],
    ['a newer version', '{"version": 99, "rv": 1, "objects": []}'],
  ] as const) {
    it(`an unreadable JSON state file (${label}) is an error naming the file, and the lock is released`, () => {
      const dir = tmp();
      const file = join(dir, 'state.json');
      writeFileSync(file, content);
      assert.throws(
        () => new FileStore<TestVM>(file).open(),
        (e: Error) => e instanceof StateFileError && e.message.startsWith(`${file}: `) && /state file/.test(e.message),
      );
      assert.deepEqual(readdirSync(dir), ['state.json'], 'no database, lock or temp file left');
      assert.equal(readFileSync(file, 'utf8'), content, 'the file is left for the user to inspect');
    });
  }
});
