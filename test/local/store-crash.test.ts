/**
 * Crash safety of the state database: a child process writes to a FileStore in a tight loop
 * (creates, one at a time and several at once as an admission makes them, metadata and status
 * writes, deletions, events), printing each write once it returned
 * (committed), and is SIGKILLed in the middle of it, several times over the same database. After
 * each kill the database is whole (integrity_check), a reader and a new writer open it, and every
 * write the child reported is there (each resource at least at the resourceVersion last reported,
 * each reported deletion gone unless re-created since).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, openSync, readFileSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { after, describe, it } from 'node:test';
import { FileStore } from '../../src/local/store.ts';
import { readStateFile } from '../../src/workspace/state-file.ts';
import { type TestVM, testVM } from '../helpers/scripted-external.ts';

const CHILD = process.env.PP_STORE_CRASH_CHILD;

if (CHILD) {
  // The child: write until killed. A line is printed only after its write returned.
  const store = new FileStore<TestVM>(CHILD);
  store.open('crash');
  // A file, not stdout (a pipe the parent may not drain as fast): one line per returned write.
  const log = openSync(`${CHILD}.log`, 'a');
  const say = (line: string) => writeSync(log, `${line}\n`);
  for (let i = 0; ; i++) {
    const name = `vm${i % 150}`;
    const key = `default/${name}`;
    const cur = store.getSync(key);
    if (!cur && i % 5 === 0) {
      // A rollout's admission: several at once, durable together when applyAll returns.
      const names = [name, `vm${(i + 1) % 150}`, `vm${(i + 2) % 150}`].filter((n) => !store.getSync(`default/${n}`));
      store.applyAll(names.map((n) => testVM(n, { annotations: { note: 'y'.repeat(i % 300) } })));
      for (const n of names) say(`put default/${n} ${store.getSync(`default/${n}`)!.metadata.resourceVersion}`);
    } else if (!cur) {
      const o = store.apply(testVM(name, { annotations: { note: 'x'.repeat(i % 500) } }));
      say(`put ${key} ${o.metadata.resourceVersion}`);
    } else if (i % 17 === 0) {
      store.markDeleted(key);
      say(`del ${key}`);
    } else {
      const r = structuredClone(cur);
      r.status = { observedGeneration: 1, atProvider: { id: String(i), cpu: i % 8 } };
      const o = await store.updateStatus(r);
      store.event(o, 'Normal', 'Written', `write ${i}`);
      say(`put ${key} ${o.metadata.resourceVersion}`);
    }
  }
}

/** Run the child until it reported `writes` more writes, then SIGKILL it; its complete lines. */
function runAndKill(db: string, writes: number): Promise<string[]> {
  const logFile = `${db}.log`;
  writeFileSync(logFile, '');
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [import.meta.filename], {
      env: { ...process.env, PP_STORE_CRASH_CHILD: db },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let err = '';
    child.stderr.on('data', (d) => {
      err += d;
    });
    const lines = () => readFileSync(logFile, 'utf8').split('\n').slice(0, -1); // a partial last line is not one
    const poll = setInterval(() => {
      if (lines().length >= writes) {
        clearInterval(poll);
        child.kill('SIGKILL');
      }
    }, 5);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearInterval(poll);
      if (signal !== 'SIGKILL') return reject(new Error(`the child ended by itself (${code}): ${err}`));
      resolve(lines());
    });
  });
}

describe('the state database survives SIGKILL mid-write', { skip: Boolean(CHILD) }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'pp-store-crash-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('after each kill: whole, readable, and holding every write the child reported', async () => {
    const db = join(dir, 'state.db');
    /** Per key: the last reported resourceVersion, or 'deleted'. */
    const committed = new Map<string, number | 'deleted'>();
    for (const writes of [300, 1000, 2500]) {
      const lines = await runAndKill(db, writes);
      assert.ok(lines.length >= writes, `the child wrote ${lines.length}`);
      for (const l of lines) {
        const [op, key, rv] = l.split(' ');
        committed.set(key!, op === 'del' ? 'deleted' : Number(rv));
      }

      const check = new DatabaseSync(db);
      assert.equal(
        (check.prepare('PRAGMA integrity_check').get() as { integrity_check: string }).integrity_check,
        'ok',
      );
      check.close();

      const read = readStateFile<TestVM>(db)!;
      const byKey = new Map(read.objects.map((o) => [`default/${o.metadata.name}`, o]));
      // The one write the kill interrupted may have committed without being reported: it may have
      // re-created a resource reported deleted, or deleted one reported written. Nothing else.
      const unreported: string[] = [];
      for (const [key, rv] of committed) {
        const o = byKey.get(key);
        if (rv === 'deleted') {
          if (o) unreported.push(`${key} is back`);
        } else if (!o) unreported.push(`${key} (rv ${rv}) is missing`);
        else assert.ok(Number(o.metadata.resourceVersion) >= rv, `${key}: rv ${o.metadata.resourceVersion} < ${rv}`);
      }
      assert.ok(unreported.length <= 1, `more than the write in flight differs: ${unreported.join(', ')}`);
      // Reported writes the next run must find: what is there now.
      for (const [key] of committed) {
        const o = byKey.get(key);
        committed.set(key, o ? Number(o.metadata.resourceVersion) : 'deleted');
      }
      // A new writer takes over the dead child's lock and sees the same.
      const s = new FileStore<TestVM>(db);
      s.open('crash');
      assert.equal(s.listSync().length, read.objects.length);
      s.close();
    }
  });
});
