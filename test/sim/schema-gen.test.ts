import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { defaultApiDir, generateAll, OUT_DIR, perlToJs } from '../../scripts/gen-pve-schema.ts';
import { EXTRA_OUT_DIR, generateExtra } from '../../src/sim/schema/gen-extra.ts';
import { methodsOf, SCHEMA_PROFILES } from '../../src/sim/schema/index.ts';

const apiDir = defaultApiDir();
const haveSources = existsSync(apiDir);

describe('gen-pve-schema', () => {
  it('committed src/sim/schema/generated/*.json match a fresh generation', {
    skip: haveSources ? false : `PVE API sources not found at ${apiDir} (set PVE_API_DIR)`,
  }, () => {
    const files = generateAll(apiDir);
    assert.equal(files.size, 4);
    let total = 0;
    for (const [name, text] of files) {
      const committed = readFileSync(OUT_DIR + name, 'utf8');
      assert.ok(committed === text, `${name} is stale: run npm run gen:schema`);
      total += text.length;
    }
    assert.ok(total < 1.5 * 1024 * 1024, `generated schemas are ${total} bytes`);
  });

  it('committed src/sim/schema/generated/extra-*.json match a fresh generation, and add only new paths', {
    skip: haveSources ? false : `PVE API sources not found at ${apiDir} (set PVE_API_DIR)`,
  }, () => {
    const files = generateExtra(apiDir);
    assert.equal(files.size, 4);
    for (const [name, text] of files) {
      assert.ok(readFileSync(EXTRA_OUT_DIR + name, 'utf8') === text, `${name} is stale: run npm run gen:sim-coverage`);
    }
    for (const p of SCHEMA_PROFILES) {
      const keys = methodsOf(p).map((m) => `${m.method} ${m.path}`);
      assert.equal(new Set(keys).size, keys.length, `${p}: a method is in both generated files`);
      assert.ok(keys.includes('GET /'), `${p}: the root index`);
      assert.ok(keys.includes('GET /nodes/{node}/lxc'), `${p}: the container list`);
    }
  });

  it('converts Perl patterns', () => {
    assert.equal(perlToJs('(?^:\\d+(?:-\\d+)?)', true), '(?:\\d+(?:-\\d+)?)');
    assert.equal(perlToJs('(?^i:abc)', true), '(?i:abc)');
    assert.equal(perlToJs('[A-Z]{,16}', true), '[A-Z]{0,16}');
    assert.equal(perlToJs('[A-Z]{,16}', false), '[A-Z]\\{,16\\}');
    assert.equal(perlToJs('https?://.*', true), 'https?://[^\\n]*');
    assert.equal(perlToJs('^a$', true), '^a(?=\\n?$)');
    assert.equal(perlToJs('[[:alnum:].$]+', true), '[a-zA-Z0-9.$]+');
    assert.throws(() => perlToJs('a++', true));
  });
});
