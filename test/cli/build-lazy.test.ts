/**
 * scripts/build.ts's start-up rewrites, one by one: the stand-in that loads a LAZY package on the
 * first read of one of its exports (and not before), the names it forwards, and a dependency's
 * require of a Node built-in made on use (DEFERRED_REQUIRES), refused where the file is not the one
 * reviewed. test/cli/bundle.test.ts runs the bundle they make.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DEFERRED_REQUIRES, deferRequire, exportNames, lazyStandIn, TYPEBOX_STATE } from '../../scripts/build.ts';

/** Run a stand-in as CommonJS with `require` counting its calls. */
function runStandIn(text: string, real: Record<string, unknown>) {
  const required: string[] = [];
  const module = { exports: {} as Record<string, unknown> };
  new Function('exports', 'require', 'module', text)(
    module.exports,
    (id: string) => {
      required.push(id);
      return real;
    },
    module,
  );
  return { exports: module.exports, required };
}

describe('build: lazy packages', () => {
  it('the stand-in requires its file on the first read of an export, once, and hands out the real values', () => {
    class LineCounter {}
    const parse = (s: string) => `parsed ${s}`;
    const { exports, required } = runStandIn(lazyStandIn('yaml', ['LineCounter', 'parse'], 'lazy-yaml'), {
      LineCounter,
      parse,
    });
    assert.deepEqual(Object.keys(exports), ['LineCounter', 'parse']);
    assert.deepEqual(required, [], 'nothing is loaded before an export is read');
    assert.equal(exports.parse, parse);
    assert.equal(exports.LineCounter, LineCounter);
    assert.ok(new (exports.LineCounter as typeof LineCounter)() instanceof LineCounter);
    assert.deepEqual(required, ['../chunks/lazy-yaml.js']);
  });

  it('forwards the names a package exports, without default and module.exports', async () => {
    const yaml = await exportNames('yaml');
    for (const name of ['parse', 'parseAllDocuments', 'stringify', 'LineCounter', 'isMap'])
      assert.ok(yaml.includes(name));
    assert.ok(!yaml.includes('default') && !yaml.includes('module.exports'), yaml.join(' '));
    const value = await exportNames('typebox/value');
    assert.ok(value.includes('Errors') && value.includes('Check'), value.join(' '));
  });

  it("TypeBox's process-wide state, which the second TypeBox would not share, is told from its pure modules", () => {
    for (const line of [
      "import { Settings } from 'typebox/system';",
      "import System from 'typebox/system';",
      "import { Format } from 'typebox/format';",
      "import Type, { Locale } from 'typebox';",
    ])
      assert.match(line, TYPEBOX_STATE);
    for (const line of [
      "import { Memory } from 'typebox/system';",
      "import Type, { type Static } from 'typebox';",
      "import { Value } from 'typebox/value';",
    ])
      assert.doesNotMatch(line, TYPEBOX_STATE);
  });
});

describe('build: deferred requires of built-ins', () => {
  const key = 'commander/lib/command.js';
  const { line } = DEFERRED_REQUIRES[key]!;

  it("the require becomes one on use of the reviewed members, the file's code unchanged otherwise", () => {
    const text = `const a = 1;\n${line}\nfunction run() { return childProcess.spawn('x', []); }\n`;
    const out = deferRequire(key, text);
    assert.doesNotMatch(out, /^const childProcess = require/m);
    assert.match(
      out,
      /^const childProcess = \{ spawn: \(\.\.\.args\) => require\("node:child_process"\)\.spawn\(\.\.\.args\) \};$/m,
    );
    assert.equal(out.replace(/^const childProcess = .*$/m, line), text);
  });

  it('refused: the line gone or twice, another member used, or the object itself', () => {
    assert.throws(() => deferRequire(key, 'const x = 1;\n'), /no longer has the line/);
    assert.throws(() => deferRequire(key, `${line}\n${line}\n`), /no longer has the line/);
    assert.throws(() => deferRequire(key, `${line}\nchildProcess.execSync('x');\n`), /uses childProcess\.execSync/);
    assert.throws(() => deferRequire(key, `${line}\nuse(childProcess);\n`), /uses childProcess itself/);
  });
});
