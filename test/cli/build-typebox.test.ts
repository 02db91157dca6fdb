/**
 * scripts/build.ts's rewrite of TypeBox imports in the bundle (`import Type from 'typebox'` to
 * `import * as Type`, which esbuild trims): taken only where each `Type.X` is the same function
 * both ways, and refused where the module uses the object itself.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { typeboxNamespaces } from '../../scripts/build.ts';
import { ROOT } from '../helpers/cli.ts';

const FILE = join(ROOT, 'src/api/example.ts');

describe('build: TypeBox namespace imports', () => {
  it('default and named imports become namespace imports; type imports are kept', async () => {
    const text = `import Type, { type Static } from 'typebox';\nimport { Value } from 'typebox/value';\nconst S = Type.Object({ a: Type.String() });\nexport type T = Static<typeof S>;\nexport const ok = (v: unknown) => Value.Check(S, v);\n`;
    assert.equal(
      await typeboxNamespaces(text, FILE),
      `import * as Type from 'typebox';\nimport { type Static } from 'typebox';\nimport * as Value from 'typebox/value';\nconst S = Type.Object({ a: Type.String() });\nexport type T = Static<typeof S>;\nexport const ok = (v: unknown) => Value.Check(S, v);\n`,
    );
    // "Type" in a string is not a use of the object.
    const worded = `import Type from 'typebox';\nexport const S = Type.String({ description: 'Type of it' });\n`;
    assert.match(await typeboxNamespaces(worded, FILE), /^import \* as Type from 'typebox';/);
  });

  it('refused: the object passed or indexed, or a member the namespace does not share', async () => {
    await assert.rejects(typeboxNamespaces(`import Type from 'typebox';\nuse(Type);\n`, FILE), /used as an object/);
    await assert.rejects(
      typeboxNamespaces(`import Type from 'typebox';\nType['Object'];\n`, FILE),
      /used as an object/,
    );
    await assert.rejects(
      typeboxNamespaces(`import Value from 'typebox/value';\nValue.NotAFunction();\nValue.Value;\n`, FILE),
      /Value\.Value is not typebox\/value's export Value/,
    );
  });
});
