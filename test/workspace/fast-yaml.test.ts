/**
 * The happy path's YAML reader (src/workspace/fast-yaml.ts) against the `yaml` package it stands
 * in for: on every YAML file of the repository, on scalars where the two libraries' rules could
 * part, on generated documents and on mutated seed manifests, it either gives exactly `yaml`'s
 * values or leaves the file to `yaml`, and it never takes a file `yaml` rejects. Then the whole
 * of reading and validating, fast path on and off: the same documents, lines, field positions
 * and problems for the seed fleet, the seed's broken manifests and mutated copies of them.
 * src/workspace/plain-yaml.ts, the fast path's first reader, and js-yaml, its second, are each
 * held to the same promise; plain-yaml also on what manifests are written with and what it leaves.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import fc from 'fast-check';
import { dump } from 'js-yaml';
import { parseAllDocuments, stringify } from 'yaml';
import { validateManifests } from '../../src/fleet/validate.ts';
import { type ManifestDoc, type ManifestProblem, readManifestFile } from '../../src/workspace/documents.ts';
import { fastDocuments, jsYamlDocuments } from '../../src/workspace/fast-yaml.ts';
import { manifestFiles } from '../../src/workspace/manifests.ts';
import { plainDocuments } from '../../src/workspace/plain-yaml.ts';
import { ROOT } from '../helpers/cli.ts';

const PRODUCTION = join(ROOT, 'examples/production');
const BROKEN = join(ROOT, 'test/fixtures/seed-broken');
const SEED = [...manifestFiles([PRODUCTION]), ...manifestFiles([BROKEN])].map((f) => readFileSync(f, 'utf8'));

/** What readManifestFile made of `text` before the fast path: `yaml`'s documents, or its errors. */
function yamlRead(text: string): { values: unknown[] } | { errors: string[] } {
  const values: unknown[] = [];
  for (const d of parseAllDocuments(text, { prettyErrors: false })) {
    if (d.errors.length) return { errors: d.errors.map((e) => e.code) };
    // yaml warns (process.emitWarning) about keys it stringifies; the fast path leaves those to it.
    const v = d.toJS();
    if (v !== null && v !== undefined) values.push(v);
  }
  return { values };
}

/**
 * The fast path's promise, kept by each of its readers (plain-yaml, js-yaml) and by both in turn:
 * yaml's values exactly (deepStrictEqual: -0, NaN, key order), or nothing.
 */
function agrees(text: string): boolean {
  for (const [reader, read] of [
    ['fast path', fastDocuments],
    ['plain-yaml', plainDocuments],
    ['js-yaml', jsYamlDocuments],
  ] as const) {
    const fast = read(text);
    if (!fast) continue;
    const slow = yamlRead(text);
    assert.ok(
      'values' in slow,
      `${reader} took a text yaml rejects (${'errors' in slow ? slow.errors : ''}):\n${text}`,
    );
    assert.deepStrictEqual(fast, slow.values, `${reader}:\n${text}`);
  }
  return true;
}

const quiet = (f: () => void) => {
  const emit = process.emitWarning;
  process.emitWarning = () => {};
  try {
    f();
  } finally {
    process.emitWarning = emit;
  }
};

describe('fast-yaml: yaml values or none', () => {
  it('every YAML file of the repository; the seed fleet is read by the fast path', () => {
    const files = execFileSync('git', ['ls-files', '*.yaml', '*.yml'], { cwd: ROOT, encoding: 'utf8' })
      .trim()
      .split('\n');
    assert.ok(files.length > 50, `${files.length} files`);
    for (const f of files) quiet(() => agrees(readFileSync(join(ROOT, f), 'utf8')));
    // By plain-yaml itself: js-yaml is not even loaded then (the bundle loads it on first use).
    for (const f of manifestFiles([PRODUCTION]))
      assert.ok(plainDocuments(readFileSync(f, 'utf8')), `${f}: left to js-yaml or yaml, so validate is slow again`);
  });

  it('left to yaml: where the two read alike only by chance, or not at all', () => {
    const cases: Record<string, string> = {
      // js-yaml reads 5; yaml's core schema has no binary integers and keeps the string.
      'an explicit tag': 'a: !!int 0b101\n',
      'an unknown tag': 'a: !custom 1\n',
      'a non-specific tag': 'a: ! 1\n',
      // yaml refuses this many alias expansions; js-yaml has no such limit by default.
      aliases: `a: &a [1, 2]\n${Array.from({ length: 150 }, (_, i) => `k${i}: *a`).join('\n')}\n`,
      'an anchor': 'a: &x 1\n',
      // yaml switches to YAML 1.1 (yes is true, 0777 octal); js-yaml does not.
      'a directive': '%YAML 1.1\n---\na: yes\nb: 0777\n',
      'a number key': '1: a\n',
      'a null key': '~: a\n',
      'a mapping as key': '? {a: 1}\n: b\n',
      'a __proto__ key': '__proto__: {a: 1}\n',
      'a merge key': 'a: {x: 1}\nb:\n  <<: {y: 2}\n',
      'a list document': '- a\n- b\n',
      'a scalar document': 'a: 1\n---\njust text\n',
      'a syntax error': 'a: [1, 2\n',
      'an overflowing number': `a: ${'9'.repeat(400)}\n`,
      // js-yaml keeps the last line (spaces beyond the indicated indentation) where yaml drops it.
      'an indentation indicator': 'a: |1\n   #\n   \n',
    };
    for (const [what, text] of Object.entries(cases)) assert.equal(fastDocuments(text), undefined, what);
    // And what it does take, next to those: the same without the construct.
    assert.deepStrictEqual(fastDocuments('a: 1\n---\n---\nb: "1"\n'), [{ a: 1 }, { b: '1' }]);
  });

  it('scalars where YAML 1.2 core schema readers part: numbers, nulls, booleans, keys', () => {
    const words = [
      ...['0', '-0', '+0', '007', '08', '0o17', '0o8', '+0o7', '0x1F', '0X1F', '-0x1', '0b101', '1_000', '1e3'],
      ...[
        '1E+3',
        '-1e-3',
        '.5',
        '-.5',
        '+.5',
        '5.',
        '1.5e3',
        '1e999',
        '-1e999',
        '9'.repeat(400),
        '0x' + 'f'.repeat(300),
      ],
      ...['.inf', '-.Inf', '+.INF', '.nan', '.NaN', '.NAN', 'nan', 'inf', '~', 'null', 'Null', 'NULL', 'nULL'],
      ...['true', 'True', 'TRUE', 'tRUE', 'false', 'yes', 'no', 'on', 'off', 'y', 'n', '2024-01-01', '12:30:00'],
      ...['1.2.3', '4Gi', '20Gi', '1:2', '<<', '__proto__', 'constructor', '=', '!', '-', '9007199254740993'],
    ];
    const quote = (w: string, q: number) => (q === 1 ? `'${w}'` : q === 2 ? JSON.stringify(w) : w);
    fc.assert(
      fc.property(fc.constantFrom(...words), fc.constantFrom(...words), fc.nat(2), fc.nat(2), (k, v, qk, qv) => {
        const key = /^[-!<=~]|^$/.test(k) && qk === 0 ? JSON.stringify(k) : quote(k, qk);
        const value = /^[-!]$/.test(v) && qv === 0 ? JSON.stringify(v) : quote(v, qv);
        quiet(() => {
          agrees(`${key}: ${value}\n`);
          agrees(`a:\n  - ${value}\n  - { ${key}: ${value} }\n`);
          agrees(`a: [${value}, ${value}]\n`);
        });
      }),
      { seed: 16, numRuns: 600 },
    );
  });

  it('generated objects, written by yaml and by js-yaml in their several styles', () => {
    const text = fc.oneof(
      fc.string(),
      fc.string({ unit: 'grapheme' }),
      fc.constantFrom('a\nb', ' lead', 'trail ', 'x: y', '# no', '- item', '"q"', "it's", '\t', 'a\\b', '\u2028'),
    );
    const value = fc.letrec((tie) => ({
      any: fc.oneof(
        { depthSize: 'small' },
        text,
        fc.integer(),
        fc.double(),
        fc.boolean(),
        fc.constant(null),
        fc.array(tie('any'), { maxLength: 4 }),
        tie('object'),
      ),
      object: fc.dictionary(
        text.filter((k) => k !== '__proto__' && k !== '<<'),
        tie('any'),
        { maxKeys: 4 },
      ),
    }));
    fc.assert(
      fc.property(
        fc.array(value.object, { minLength: 1, maxLength: 3 }),
        fc.record({ indent: fc.integer({ min: 2, max: 4 }), lineWidth: fc.constantFrom(0, 20, 80) }),
        fc.constantFrom('PLAIN', 'QUOTE_DOUBLE', 'QUOTE_SINGLE', 'BLOCK_LITERAL', 'BLOCK_FOLDED'),
        fc.boolean(),
        (docs, o, scalar, flow) => {
          const byYaml = docs
            .map((d) =>
              stringify(d, { ...o, defaultStringType: scalar as never, collectionStyle: flow ? 'flow' : 'any' }),
            )
            .join('---\n');
          const byJsYaml = docs
            .map((d) => dump(d, { indent: o.indent, lineWidth: o.lineWidth || -1, flowLevel: flow ? 1 : -1 }))
            .join('---\n');
          quiet(() => {
            agrees(byYaml);
            agrees(byJsYaml);
          });
        },
      ),
      { seed: 16, numRuns: 300 },
    );
  });

  it('mutated seed manifests: never takes what yaml rejects, never reads a value otherwise', () => {
    const inserts = ['\t', ' ', ':', ': ', '- ', '#', ' #', '"', "'", '\n', '  ', '{', '}', '[', ']', ',', '|', '>'];
    const more = [
      '*a',
      '&a ',
      '!',
      '!!str ',
      '? ',
      '%YAML 1.1\n---\n',
      '\r\n',
      '...\n',
      '---\n',
      '\\',
      '\u00a0',
      '\ufeff',
    ];
    const edit = fc.record({
      at: fc.double({ min: 0, max: 1, noNaN: true, maxExcluded: true }),
      op: fc.constantFrom('insert', 'delete', 'duplicate-line'),
      text: fc.constantFrom(...inserts, ...more),
      n: fc.integer({ min: 1, max: 3 }),
    });
    let taken = 0;
    fc.assert(
      fc.property(fc.constantFrom(...SEED), fc.array(edit, { minLength: 1, maxLength: 3 }), (seed, edits) => {
        let s = seed;
        for (const e of edits) {
          const p = Math.floor(e.at * s.length);
          if (e.op === 'insert') s = s.slice(0, p) + e.text + s.slice(p);
          else if (e.op === 'delete') s = s.slice(0, p) + s.slice(p + e.n);
          else {
            const a = s.lastIndexOf('\n', p);
            const b = s.indexOf('\n', p);
            if (b > a) s = s.slice(0, b) + s.slice(a, b) + s.slice(b);
          }
        }
        quiet(() => agrees(s));
        if (fastDocuments(s)) taken++;
      }),
      { seed: 16, numRuns: 1500 },
    );
    // Most mutations still parse: the comparison above was not vacuous.
    assert.ok(taken > 300, `${taken} mutated files taken by the fast path`);
  });
});

describe('plain-yaml: the subset it reads, as yaml reads it', () => {
  it('what manifests are written with: read, and read as yaml reads it', () => {
    const cases: Record<string, string> = {
      'nested mappings, comments, a document marker': '# c\n---\na:\n  b: 1 # one\n  c: x y\n\n  # more\nd: true\n',
      "a sequence at its key's indentation": 'a:\n- x\n- y\nb: ~\n',
      'mappings in a sequence': 'a:\n  - name: x\n    groups: [sudo, adm]\n  -   name: y\n      n: -3\n',
      'literals, clipped and stripped, in a sequence too':
        'a: |\n  #cloud-config\n    x: 1\n\n  y\n\nb: |-\n  z\nc:\n  - d: |\n      e\n',
      'quotes and empty collections': "a: \"it's # not\"\nb: 'it''s'\nc: []\nd: {}\ne: ''\n",
      'numbers as yaml reads them': 'a: 0\nb: -12\nc: 1.5\nd: 4Gi\ne: 1.2.3\nf: 12:30\n',
      'two documents and an empty one': 'a: 1\n---\n---\nb: 2\n',
    };
    for (const [what, text] of Object.entries(cases)) {
      assert.ok(plainDocuments(text), `${what}: left to another reader`);
      agrees(text);
    }
  });

  it('left to the other readers: what it does not know for certain', () => {
    const cases: Record<string, string> = {
      'a tab': 'a:\n\tb: 1\n',
      'a carriage return': 'a: 1\r\n',
      'a quoted key': '"a": 1\n',
      'an escape': 'a: "x\\ty"\n',
      'a folded scalar': 'a: >\n  x\n',
      'a kept literal': 'a: |+\n  x\n',
      'a scalar over two lines': 'a: x\n  y\n',
      'a flow mapping': 'a: {b: 1}\n',
      'a duplicate key': 'a: 1\na: 2\n',
      'a number that is not read exactly': 'a: 1e3\nb: 007\n',
      'a number key': '1: a\n',
      'a __proto__ key': '__proto__: 1\n',
      'an anchor': 'a: &x 1\n',
      'a list document': '- a\n',
      'a directive': '%YAML 1.2\n---\na: 1\n',
      'a document end marker': 'a: 1\n...\n',
    };
    for (const [what, text] of Object.entries(cases)) assert.equal(plainDocuments(text), undefined, what);
  });

  it('generated manifests of plain words, numbers and literals, written by yaml and by js-yaml', () => {
    const word = fc.stringMatching(/^[a-zA-Z0-9_./-][a-zA-Z0-9 _.:#/-]{0,10}$/);
    const literal = fc.stringMatching(/^([a-z #:-]{1,8}\n){1,4}\n?$/);
    const value = fc.letrec((tie) => ({
      any: fc.oneof(
        { depthSize: 'small' },
        word,
        literal,
        fc.integer(),
        fc.constantFrom(1.5, -2.25, 0),
        fc.boolean(),
        fc.constant(null),
        fc.array(tie('any'), { maxLength: 3 }),
        tie('object'),
      ),
      object: fc.dictionary(fc.stringMatching(/^[a-z][a-z0-9_./-]{0,6}$/), tie('any'), { maxKeys: 4 }),
    }));
    let read = 0;
    fc.assert(
      fc.property(
        fc.array(value.object, { minLength: 1, maxLength: 3 }),
        fc.integer({ min: 1, max: 4 }),
        fc.constantFrom('PLAIN', 'QUOTE_DOUBLE', 'QUOTE_SINGLE', 'BLOCK_LITERAL'),
        fc.boolean(),
        (docs, indent, scalar, indentSeq) => {
          const byYaml = docs
            .map((d) =>
              stringify(d, {
                indent: Math.max(2, indent),
                lineWidth: 0,
                indentSeq,
                defaultStringType: scalar as never,
              }),
            )
            .join('---\n');
          const byJsYaml = docs.map((d) => dump(d, { indent, lineWidth: -1 })).join('---\n');
          for (const text of [byYaml, byJsYaml]) {
            agrees(text);
            if (plainDocuments(text)) read++;
          }
        },
      ),
      { seed: 16, numRuns: 400 },
    );
    assert.ok(read > 100, `${read} generated texts read by plain-yaml`);
  });
});

/** Every field path of a value, as lineOf takes them (`a.b[0].c`, annotation keys with dots). */
function fieldsOf(v: unknown, prefix = ''): string[] {
  if (!v || typeof v !== 'object') return [];
  const entries: Array<[string, unknown]> = Array.isArray(v)
    ? v.map((x, i) => [`${prefix}[${i}]`, x])
    : Object.entries(v).map(([k, x]) => [prefix ? `${prefix}.${k}` : k, x]);
  return entries.flatMap(([p, x]) => [p, `${p}.missing`, ...fieldsOf(x, p)]);
}

/** A document as the messages see it: values, lines, and the position of every field, key or value. */
function described(docs: ManifestDoc[], problems: ManifestProblem[]) {
  return {
    problems,
    docs: docs.map((d) => ({
      file: d.file,
      line: d.line,
      kind: d.kind,
      apiVersion: d.apiVersion,
      value: d.value,
      at: fieldsOf(d.value).map((f) => [f, d.lineOf(f), d.lineOf(f, { key: true })]),
    })),
  };
}

describe('reading and validating: the fast path changes nothing', () => {
  let dir: string;
  const mutated: string[] = [];

  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'pp-fast-yaml-'));
    // Broken copies of the seed: wrong values, unknown fields, bad YAML, each in a file of its own.
    const edits: Array<[RegExp, string]> = [
      [/cpu: \d+/, 'cpu: 0'],
      [/memory: \S+/, 'memory: 4GB'],
      [/disk: \S+/, 'dsik: 20Gi'],
      [/name: (\S+)/, 'name: Upper_Case'],
      [/forProvider:/, 'forProvider:\n    cpu: two'],
      [/\n {4}(\w)/, '\n\t$1'],
      [/kind: ProxmoxVM/, 'kind: ProxmoxVm'],
      [/site: \S+/, 'site: [unclosed'],
    ];
    readdirSync(PRODUCTION, { recursive: true, withFileTypes: true })
      .filter((e) => e.isFile() && e.name.endsWith('.yaml'))
      .slice(0, 16)
      .forEach((e, i) => {
        const [re, to] = edits[i % edits.length]!;
        const f = join(dir, `${i}-${e.name}`);
        writeFileSync(f, readFileSync(join(e.parentPath, e.name), 'utf8').replace(re, to));
        mutated.push(f);
      });
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('readManifestFile: the same documents, lines, field positions and problems', () => {
    for (const f of [...manifestFiles([PRODUCTION, BROKEN]), ...mutated]) {
      const fast: ManifestProblem[] = [];
      const slow: ManifestProblem[] = [];
      const a = described(readManifestFile(f, fast), fast);
      const b = described(readManifestFile(f, slow, f, { fast: false }), slow);
      assert.deepStrictEqual(a, b, f);
    }
  });

  it('validate: the same problems for the seed fleet, its broken manifests and broken copies', () => {
    for (const paths of [[PRODUCTION], [BROKEN], [dir], [PRODUCTION, dir]]) {
      const fast = validateManifests(paths);
      const slow = validateManifests(paths, { fastYaml: false });
      assert.deepStrictEqual(fast, slow, paths.join(' '));
    }
    assert.equal(validateManifests([PRODUCTION]).problems.length, 0);
    assert.ok(validateManifests([dir]).problems.length >= mutated.length, 'every broken copy reports something');
  });
});
