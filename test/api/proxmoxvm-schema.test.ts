/**
 * The ProxmoxVM spec schema's initProvider is built field by field from forProvider rather than
 * with Type.Partial (src/api/proxmoxvm-schema.ts says why): it must be the very schema Type.Partial
 * returns, TypeBox's own non-enumerable markers (`~kind`, `~optional`) included, since the CRD
 * generator, Value.Check, Value.Errors and the bundle's generated checks all read it. The schemas
 * are built on first use (vmSchemas), once.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import Type from 'typebox';
import { Value } from 'typebox/value';
import { vmSchemas } from '../../src/api/proxmoxvm-schema.ts';

const { ForProviderSchema, ProxmoxVMSpecSchema } = vmSchemas();

/** `v` with every own property, enumerable or not, keyed with whether it is enumerable. */
function allProperties(v: unknown): unknown {
  if (!v || typeof v !== 'object' || v instanceof RegExp) return v;
  const out: Record<string, unknown> = {};
  for (const k of Reflect.ownKeys(v)) {
    const d = Object.getOwnPropertyDescriptor(v, k)!;
    out[`${String(k)}${d.enumerable ? '' : ' (not enumerable)'}`] = allProperties(d.value);
  }
  return Array.isArray(v) ? { array: out } : out;
}

describe('ProxmoxVM spec schema: initProvider', () => {
  const initProvider = ProxmoxVMSpecSchema.properties.initProvider;

  it('is Type.Optional(Type.Partial(forProvider)), markers and all', () => {
    assert.deepEqual(allProperties(initProvider), allProperties(Type.Optional(Type.Partial(ForProviderSchema))));
  });

  it("answers Value.Check and Value.Errors as Type.Partial's schema does", () => {
    const partial = Type.Partial(ForProviderSchema);
    for (const value of [{}, { cpu: 2 }, { cpu: 0 }, { memory: '4Gi', disk: 'lots' }, { unknown: 1 }, { name: 7 }]) {
      assert.equal(Value.Check(initProvider, value), Value.Check(partial, value), JSON.stringify(value));
      assert.deepEqual(
        [...Value.Errors(initProvider, value)].map((e) => [e.instancePath, e.keyword, e.message]),
        [...Value.Errors(partial, value)].map((e) => [e.instancePath, e.keyword, e.message]),
        JSON.stringify(value),
      );
    }
  });
});

describe('ProxmoxVM spec schemas: built on first use, once', () => {
  it('every call gives the very same objects (the CRD generator and Value read the one schema)', () => {
    const a = vmSchemas();
    const b = vmSchemas();
    for (const k of Object.keys(a) as Array<keyof typeof a>) assert.equal(a[k], b[k], k);
    assert.equal(a.ProxmoxVMSpecSchema.properties.forProvider, a.ForProviderSchema);
  });
});
