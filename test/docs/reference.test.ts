/**
 * docs/reference.md stays what scripts/gen-reference.ts makes of the schemas, and the schemas say
 * something about every field: every property of every CRD has a description (what
 * `kubectl explain` prints), and a description's `Default: ...` is its last sentence, where the
 * generator finds it for the default column.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { REFERENCE_FILE, renderReference, splitDefault } from '../../scripts/gen-reference.ts';
import { crds } from '../../src/api/crd.ts';
import type { JsonSchema } from '../../src/api/structural.ts';

const ROOT = join(import.meta.dirname, '..', '..');

/** Every property (not list items, not map values) of a schema, with its path. */
function* properties(node: JsonSchema, path: string): Generator<[string, JsonSchema]> {
  const props = (node.properties ?? {}) as Record<string, JsonSchema>;
  for (const [k, v] of Object.entries(props)) {
    const p = path ? `${path}.${k}` : k;
    yield [p, v];
    yield* properties(v, p);
    if (v.items && typeof v.items === 'object') yield* properties(v.items as JsonSchema, `${p}[]`);
  }
}

describe('docs/reference.md', () => {
  test('is what the generator writes (run `npm run gen:reference` when this fails)', () => {
    const committed = readFileSync(join(ROOT, REFERENCE_FILE), 'utf8');
    assert.equal(committed, renderReference(), 'docs/reference.md is stale: run npm run gen:reference');
  });

  test('names every field of every kind', () => {
    const page = renderReference();
    for (const crd of crds()) {
      const root = crd.spec.versions[0]!.schema.openAPIV3Schema;
      for (const [path] of properties(root, '')) {
        if (/^(apiVersion|kind|metadata)$/.test(path)) continue;
        // Written once: initProvider is forProvider's twin, a scale set's template spec is a ProxmoxVM spec.
        if (/^spec\.initProvider\./.test(path) || /^spec\.template\.spec\./.test(path)) continue;
        assert.ok(page.includes(`| \`${path}\` |`), `${crd.spec.names.kind} ${path} is not in the reference`);
      }
    }
  });
});

describe('schema descriptions', () => {
  test('every property of every CRD has one', () => {
    const missing: string[] = [];
    for (const crd of crds()) {
      const root = crd.spec.versions[0]!.schema.openAPIV3Schema;
      for (const [path, node] of properties(root, '')) {
        // metadata is the one exception: the apiserver refuses a CRD that describes it.
        if (path === 'metadata') continue;
        if (typeof node.description !== 'string' || !node.description.trim())
          missing.push(`${crd.spec.names.kind} ${path}`);
      }
    }
    assert.deepEqual(missing, [], 'add a description to these fields in src/api');
    for (const crd of crds()) {
      const root = crd.spec.versions[0]!.schema.openAPIV3Schema as { properties?: Record<string, unknown> };
      const meta = root.properties?.metadata;
      assert.deepEqual(meta, { type: 'object' }, `${crd.spec.names.kind}: metadata may say nothing but its type`);
    }
  });

  test("a description's default is its last sentence", () => {
    const misplaced: string[] = [];
    for (const crd of crds()) {
      const root = crd.spec.versions[0]!.schema.openAPIV3Schema;
      for (const [path, node] of properties(root, '')) {
        const d = String(node.description ?? '');
        if (/(^|\.\s+)Default: /.test(d) && splitDefault(d).default === undefined)
          misplaced.push(`${crd.spec.names.kind} ${path}`);
      }
    }
    assert.deepEqual(misplaced, [], 'put "Default: ..." last in these descriptions');
  });

  test('splitDefault takes the last sentence only', () => {
    assert.deepEqual(splitDefault('Cores per socket. Default: 1.'), { text: 'Cores per socket.', default: '1' });
    assert.deepEqual(splitDefault('Default: vmbr0.'), { text: '', default: 'vmbr0' });
    assert.deepEqual(splitDefault('Default: a. More.'), { text: 'Default: a. More.' });
    assert.deepEqual(splitDefault('Version 8.3. Default: 100-999999.'), {
      text: 'Version 8.3.',
      default: '100-999999',
    });
    assert.deepEqual(splitDefault('No default here.'), { text: 'No default here.' });
  });
});
