/**
 * The spec checks of src/workspace/spec-check.ts: the ones scripts/build.ts generates for the
 * bundle with TypeBox's Code() give Value.Check's answer, and Value.Check passes exactly the specs
 * on which Value.Errors finds nothing (what lets manifests.ts skip Errors on them). Checked on the
 * specs of every example manifest, the seed's broken ones, and mutated copies of them.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';
import fc from 'fast-check';
import { Value } from 'typebox/value';
import { parseAllDocuments } from 'yaml';
import { specCheckModules } from '../../scripts/build.ts';
import { manifestFiles } from '../../src/workspace/manifests.ts';
import { type CheckedKind, specPasses, specSchemas } from '../../src/workspace/spec-check.ts';
import { ROOT } from '../helpers/cli.ts';

const SPEC_SCHEMAS = specSchemas();

/** Every spec of a checked kind in examples/ and the seed's broken manifests, with its kind. */
const SPECS: Array<{ kind: CheckedKind; spec: unknown }> = manifestFiles([
  join(ROOT, 'examples'),
  join(ROOT, 'test/fixtures/seed-broken'),
]).flatMap((f) =>
  parseAllDocuments(readFileSync(f, 'utf8'))
    .filter((d) => !d.errors.length)
    .map((d) => d.toJS() as { kind?: string; spec?: unknown } | null)
    .filter((v): v is { kind: CheckedKind; spec: unknown } => !!v && !!v.kind && v.kind in SPEC_SCHEMAS && 'spec' in v),
);

/** A copy of `v` with the value at one path (chosen by `pick`) replaced, removed, or given an unknown key. */
function mutate(v: unknown, pick: number[], op: string, value: unknown): unknown {
  const copy = structuredClone(v);
  let node = copy as Record<string, unknown>;
  for (const [depth, p] of pick.entries()) {
    const keys = node && typeof node === 'object' ? Object.keys(node) : [];
    if (!keys.length) break;
    const k = keys[p % keys.length]!;
    const child = node[k];
    if (depth === pick.length - 1 || !child || typeof child !== 'object') {
      if (op === 'delete') delete node[k];
      else if (op === 'unknown') node[`${k}x`] = value;
      else node[k] = value;
      return copy;
    }
    node = child as Record<string, unknown>;
  }
  return copy;
}

describe('spec checks', () => {
  let dir: string;
  let compiled: Partial<Record<CheckedKind, (spec: unknown) => boolean>>;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'pp-spec-check-'));
    symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'));
    const { entry, kinds } = await specCheckModules();
    let text = entry;
    for (const [kind, code] of kinds) {
      writeFileSync(join(dir, `${kind}.mjs`), code);
      text = text.replaceAll(JSON.stringify(`spec-check:${kind}`), JSON.stringify(`./${kind}.mjs`));
    }
    writeFileSync(join(dir, 'entry.mjs'), text);
    ({ COMPILED: compiled } = await import(pathToFileURL(join(dir, 'entry.mjs')).href));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('one generated check per kind, none in the sources', async () => {
    assert.deepEqual(Object.keys(compiled).sort(), Object.keys(SPEC_SCHEMAS).sort());
    const { COMPILED } = await import('../../src/workspace/spec-check-compiled.ts');
    assert.deepEqual(COMPILED, {});
  });

  it("the example and seed specs: the generated check, Value.Check and Errors' silence agree", () => {
    assert.ok(SPECS.length > 40, `${SPECS.length} specs`);
    let passed = 0;
    for (const { kind, spec } of SPECS) {
      const check = Value.Check(SPEC_SCHEMAS[kind], spec);
      assert.equal(compiled[kind]!(spec), check, JSON.stringify(spec));
      assert.equal(specPasses(kind, spec), check);
      assert.equal(Value.Errors(SPEC_SCHEMAS[kind], spec).length === 0, check, JSON.stringify(spec));
      if (check) passed++;
    }
    assert.ok(passed > 30 && passed < SPECS.length, `${passed} of ${SPECS.length} pass: both answers were seen`);
  });

  it('mutated specs: the same answers', () => {
    const value = fc.oneof(
      fc.integer({ min: -5, max: 1 << 20 }),
      fc.double(),
      fc.constantFrom('', '4Gi', '4GB', 'x'.repeat(300), 'Upper_Case', 'vmbr0', 'a.b', '-1', 'site-1', 'sha256'),
      fc.constant(null),
      fc.boolean(),
      fc.constant([]),
      fc.constant({}),
      fc.array(fc.string(), { maxLength: 2 }),
    );
    let passed = 0;
    let failed = 0;
    fc.assert(
      fc.property(
        fc.constantFrom(...SPECS),
        fc.array(fc.nat(40), { minLength: 1, maxLength: 5 }),
        fc.constantFrom('set', 'delete', 'unknown'),
        value,
        ({ kind, spec }, pick, op, v) => {
          const m = mutate(spec, pick, op, v);
          const check = Value.Check(SPEC_SCHEMAS[kind], m);
          assert.equal(compiled[kind]!(m), check, JSON.stringify(m));
          assert.equal(Value.Errors(SPEC_SCHEMAS[kind], m).length === 0, check, JSON.stringify(m));
          if (check) passed++;
          else failed++;
        },
      ),
      { seed: 16, numRuns: 1500 },
    );
    assert.ok(passed > 100 && failed > 100, `${passed} passed, ${failed} failed`);
  });
});
