/**
 * The JSON state files of earlier versions on first use of the state database: `--state x.json`
 * is imported into `x.db`, `state.json` beside the default `state.db` into it, and a JSON file
 * moved to the database's name by hand in place; each time the JSON file is kept (renamed to
 * `.imported`, never deleted), and readers (readStateFile: status, plan, gc) read the JSON file
 * as long as no database exists. A JSON file of another installation is refused and left as it
 * is; an import killed between its two renames is finished by the next open; a JSON file beside a
 * database that is not the one imported is an error naming both. A SQLite file that is not a
 * state database, a newer schema and a damaged database are errors naming the file.
 */
import assert from 'node:assert/strict';
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { after, describe, it } from 'node:test';
import { ANNOTATION_EXTERNAL_NAME } from '../../src/engine/resource.ts';
import { FileStore } from '../../src/local/store.ts';
import { DB_STATE_VERSION } from '../../src/workspace/state-db.ts';
import { readStateFile, StateFileError, statePaths } from '../../src/workspace/state-file.ts';
import { type TestVM, testVM } from '../helpers/scripted-external.ts';

const dirs: string[] = [];
function tmp(): string {
  const d = mkdtempSync(join(tmpdir(), 'pp-import-'));
  dirs.push(d);
  return d;
}
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** A JSON state file as version 2 wrote it: two resources, an event, a retired uid. */
function jsonState(installation?: string): string {
  const a = testVM('vm1');
  a.metadata.resourceVersion = '7';
  a.metadata.annotations = { [ANNOTATION_EXTERNAL_NAME]: '101' };
  const b = testVM('vm2');
  b.metadata.resourceVersion = '9';
  return JSON.stringify({
    version: 2,
    ...(installation ? { installation } : {}),
    rv: 9,
    objects: [a, b],
    events: [
      { key: 'default/vm1', type: 'Normal', reason: 'Available', message: 'Ready is True', time: 't', count: 3 },
    ],
    retired: ['uid-gone'],
  });
}

function opened(file: string, installation?: string): FileStore<TestVM> {
  const s = new FileStore<TestVM>(file);
  s.open(installation);
  return s;
}

describe('state paths', () => {
  it('x.json and x.db are one pair; any other name is the database alone', () => {
    assert.deepEqual(statePaths('/s/state.json'), { db: '/s/state.db', json: '/s/state.json' });
    assert.deepEqual(statePaths('/s/state.db'), { db: '/s/state.db', json: '/s/state.json' });
    assert.deepEqual(statePaths('/s/team-a.state.json'), { db: '/s/team-a.state.db', json: '/s/team-a.state.json' });
    assert.deepEqual(statePaths('/s/fleet'), { db: '/s/fleet', json: undefined });
  });
});

describe('importing a JSON state file', () => {
  it('--state x.json: read as JSON until the first writer imports it into x.db, then kept as x.json.imported', async () => {
    const dir = tmp();
    const json = join(dir, 'x.json');
    const text = jsonState('cli-default');
    writeFileSync(json, text);
    assert.equal(readStateFile(json)?.version, 2, 'a reader reads the JSON file while there is no database');

    const s = opened(json, 'cli-default');
    assert.deepEqual(
      s.listSync().map((o) => [o.metadata.name, o.metadata.resourceVersion]),
      [
        ['vm1', '7'],
        ['vm2', '9'],
      ],
    );
    assert.deepEqual(s.retired, ['uid-gone']);
    assert.equal(s.events[0]?.count, 3);
    assert.equal(s.installation, 'cli-default');
    assert.equal(readFileSync(join(dir, 'x.json.imported'), 'utf8'), text, 'the JSON file is kept as it was');
    assert.ok(!existsSync(json));
    // The counter goes on from the JSON file's.
    const vm3 = s.apply(testVM('vm3'));
    assert.equal(vm3.metadata.resourceVersion, '10');
    s.close();
    assert.deepEqual(readdirSync(dir).sort(), ['x.db', 'x.json.imported']);

    // Both names now stand for the database.
    for (const name of ['x.json', 'x.db']) {
      const read = readStateFile<TestVM>(join(dir, name))!;
      assert.equal(read.version, DB_STATE_VERSION);
      assert.deepEqual(
        read.objects.map((o) => o.metadata.name),
        ['vm1', 'vm2', 'vm3'],
      );
      assert.equal(read.objects[0]!.metadata.annotations?.[ANNOTATION_EXTERNAL_NAME], '101');
    }
  });

  it('the default state.db imports the state.json an earlier version left beside it', () => {
    const dir = tmp();
    writeFileSync(join(dir, 'state.json'), jsonState());
    const s = opened(join(dir, 'state.db'), 'team-a');
    assert.equal(s.listSync().length, 2);
    assert.equal(s.installation, 'team-a', 'a state without an installation takes the one of the run');
    s.close();
    assert.deepEqual(readdirSync(dir).sort(), ['state.db', 'state.json.imported']);
    assert.equal(readStateFile(join(dir, 'state.db'))?.installation, 'team-a');
  });

  it('a JSON file moved to the database name by hand is imported in place, a copy kept', () => {
    const dir = tmp();
    const db = join(dir, 'state.db');
    const text = jsonState();
    writeFileSync(db, text);
    assert.equal(readStateFile(db)?.objects.length, 2);
    const s = opened(db);
    assert.equal(s.listSync().length, 2);
    s.close();
    assert.equal(readFileSync(`${db}.imported`, 'utf8'), text);
    assert.equal(readStateFile(db)?.version, DB_STATE_VERSION);
  });

  it("another installation's JSON file is refused and left untouched: no database, no rename", () => {
    const dir = tmp();
    const json = join(dir, 'team-a.state.json');
    const text = jsonState('team-a');
    writeFileSync(json, text);
    assert.throws(
      () => opened(json, 'cli-default'),
      (e: Error) =>
        e instanceof StateFileError && e.message.startsWith(`${json}: `) && /installation 'team-a'/.test(e.message),
    );
    assert.deepEqual(readdirSync(dir), ['team-a.state.json']);
    assert.equal(readFileSync(json, 'utf8'), text);
  });

  it('an import killed between writing the database and renaming the JSON file is finished by the next open', () => {
    const dir = tmp();
    const json = join(dir, 'state.json');
    const text = jsonState();
    writeFileSync(json, text);
    opened(json).close();
    // As if the process had died before the rename: the JSON file back beside the database.
    copyFileSync(join(dir, 'state.json.imported'), json);
    assert.equal(readStateFile(json)?.version, DB_STATE_VERSION, 'readers take the database and ignore the copy');
    const s = opened(json);
    assert.equal(s.listSync().length, 2);
    s.close();
    assert.deepEqual(readdirSync(dir).sort(), ['state.db', 'state.json.imported', 'state.json.imported.2']);
  });

  it('a JSON file beside the database that is not the imported one: readers and writers refuse, naming both', () => {
    const dir = tmp();
    const db = join(dir, 'state.db');
    const s = opened(db);
    s.apply(testVM('vm1'));
    s.close();
    // An earlier provider-proxmox, run since, wrote its own state.json.
    const json = join(dir, 'state.json');
    writeFileSync(json, jsonState());
    const both = (e: Error) =>
      e instanceof StateFileError && e.message.startsWith(`${db}: `) && e.message.includes(json);
    assert.throws(() => readStateFile(db), both);
    assert.throws(() => opened(db), both);
    assert.ok(existsSync(json) && !existsSync(`${db}.lock`), 'both left as they are, the lock released');
  });
});

describe('unusable databases', () => {
  function sqlite(file: string, sql: string): void {
    const db = new DatabaseSync(file);
    db.exec(sql);
    db.close();
  }
  const cases: Array<[string, (file: string) => void, RegExp]> = [
    [
      'a SQLite file of another program',
      (f) => sqlite(f, 'CREATE TABLE t (x)'),
      /not a provider-proxmox state database/,
    ],
    [
      'a newer schema',
      (f) => {
        const s = opened(f);
        s.apply(testVM('vm1'));
        s.close();
        sqlite(f, 'PRAGMA user_version = 99');
      },
      /schema 99, but this provider-proxmox reads schemas 1 to 1/,
    ],
    [
      'a damaged database',
      (f) => {
        const s = opened(f);
        for (let i = 0; i < 50; i++) s.apply(testVM(`vm${i}`));
        s.close();
        const bytes = readFileSync(f);
        bytes.fill(0x5a, 100, bytes.length);
        writeFileSync(f, bytes);
      },
      /state/,
    ],
  ];
  for (const [what, make, says] of cases) {
    it(`${what}: readers and the writer fail naming the file`, () => {
      const file = join(tmp(), 'state.db');
      make(file);
      const named = (e: Error) =>
        e instanceof StateFileError && e.message.startsWith(`${file}: `) && says.test(e.message);
      assert.throws(() => readStateFile(file), named);
      assert.throws(() => opened(file), named);
      assert.ok(!existsSync(`${file}.lock`));
    });
  }
});
