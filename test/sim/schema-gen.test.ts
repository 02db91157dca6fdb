import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { defaultApiDir, generateAll, OUT_DIR, perlToJs } from '../../scripts/gen-pve-schema.ts';

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
