/**
 * docs/simulator.md's API coverage section is what src/sim/coverage.ts computes from the routes
 * and PVE's API descriptions now: a route added or removed without `npm run gen:sim-coverage`
 * fails here.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { defaultApiDir } from '../../scripts/gen-pve-schema.ts';
import { coverageMarkdown, DOC, END, START } from '../../src/sim/coverage.ts';

const apiDir = defaultApiDir();

describe('docs/simulator.md API coverage', () => {
  it('is up to date', { skip: existsSync(apiDir) ? false : `PVE API sources not found at ${apiDir}` }, () => {
    const doc = readFileSync(DOC, 'utf8');
    const a = doc.indexOf(START);
    const b = doc.indexOf(END);
    assert.ok(a >= 0 && b > a, 'coverage markers missing: run npm run gen:sim-coverage');
    assert.ok(doc.slice(a, b + END.length) === coverageMarkdown(apiDir), 'stale: run npm run gen:sim-coverage');
  });

  it('counts every served method of a release once', {
    skip: existsSync(apiDir) ? false : `PVE API sources not found at ${apiDir}`,
  }, () => {
    const md = coverageMarkdown(apiDir);
    const row = /^\| 9\.2 \| (\d+) \| (\d+) \| (\d+) \|$/m.exec(md);
    assert.ok(row);
    assert.equal(Number(row[1]), Number(row[2]) + Number(row[3]));
    assert.match(md, /\| GET \| `\/nodes\/\{node\}\/lxc` \| served \| served \| served \| served \|/);
    assert.match(md, /\| POST \| `\/nodes\/\{node\}\/lxc` \| 501 \| 501 \| 501 \| 501 \|/);
    // backup-info came with 7.x: no cell for 6.4.
    assert.match(md, /\| GET \| `\/cluster\/backup-info` \| {2}\| served \| served \| served \|/);
  });
});
