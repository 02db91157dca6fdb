/**
 * `npm run build`: the CLI as one ESM bundle made by esbuild, dist/cli/main.js, which
 * bin/provider-proxmox.js runs when it exists (and the controller image's ENTRYPOINT names). It is
 * there for start-up time: the sources load about 800 modules for `validate` (almost all of them
 * TypeBox's), each resolved, read and compiled on its own; the bundle is a handful of files.
 * Code splitting keeps every command's dynamic `import()` a chunk of its own (dist/chunks/), so
 * `--help` still loads only the commander wiring and `validate` never loads the simulator.
 * `node src/cli/main.ts` (npm start, the tests) keeps running the sources unbundled.
 *
 * What the bundle must do the way the sources do:
 * - `import.meta.url` of a project module means that module's own file (src/sim/topology.ts reads
 *   default-topology.yaml next to itself; src/cli/local.ts finds examples/ two levels up). Each is
 *   rewritten to the URL of the module's mirror in the output (src/sim/topology.ts ->
 *   dist/sim/topology.js), and every `new URL('<literal>', import.meta.url)` that points inside
 *   src/ is copied there (dist/sim/default-topology.yaml). Paths that leave src/ (examples/) come
 *   out the same, since dist/ sits where src/ does.
 * - CommonJS dependencies (commander, yaml, undici) call require() for Node's built-ins, which an
 *   ES module does not have: each output file opens with a require made by createRequire.
 * - Dependencies that find files next to themselves at run time stay in node_modules (EXTERNAL);
 *   the build fails if a bundled one uses `import.meta.url`, `__dirname` or `__filename`, unless
 *   REVIEWED says why that is harmless.
 *
 * One module is the bundle's own: src/workspace/spec-check-compiled.ts, empty in the sources, is
 * replaced by the checks TypeBox's Code() generates at this build from the specSchemas() of
 * src/workspace/spec-check.ts (specCheckModules), so that `validate` does not walk every valid
 * spec with TypeBox's interpreter (nor compile at each start-up what never changes between builds).
 *
 * What a command does not use at start is kept out of its way: the packages of LAZY (TypeBox's
 * Value, yaml, js-yaml) are loaded on the first use of one of their exports, from files of their own; a
 * dependency's require of a Node built-in that it uses only in what this CLI never runs is made on
 * use (DEFERRED_REQUIRES); node:fs is required rather than imported (fsByRequire). Each says what
 * it saves; bench/startup.ts measures the start-up against its target, 3x Node's own.
 *
 * Usage: node scripts/build.ts [--outdir DIR]   (default: the outDir of tsconfig.build.json, dist/)
 */
import { cpSync, existsSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import * as esbuild from 'esbuild';
import { Code } from 'typebox/compile';

const ROOT = resolve(import.meta.dirname, '..');
const TSCONFIG = join(ROOT, 'tsconfig.build.json');
const tsconfig = JSON.parse(readFileSync(TSCONFIG, 'utf8')) as { compilerOptions: { rootDir: string; outDir: string } };
/** src/: the modules whose `import.meta.url` is rewritten. */
const SRC = join(ROOT, tsconfig.compilerOptions.rootDir);
export const DEFAULT_OUT_DIR = join(ROOT, tsconfig.compilerOptions.outDir);
/** The entry point, at the same place under the output as under src/ (cli/main.js). */
const ENTRY = join(SRC, 'cli/main.ts');

/**
 * Left in node_modules, loaded from there at run time.
 * - pino: its transports run in worker threads that load pino's own files by path
 *   (node_modules/pino/lib/transport.js:219).
 * - ssh2: loads its optional native crypto binding from its own build/ directory
 *   (node_modules/ssh2/lib/protocol/crypto.js:30).
 * - @kubernetes/client-node: the Kubernetes client of src/kube/api.ts, loaded only by commands that
 *   talk to a cluster (`controller`, `status` of a cluster), whose start-up the bundle is not for;
 *   it is 980 files and 18 MB, which would be most of the build's time and of dist/.
 */
export const EXTERNAL = ['pino', 'ssh2', '@kubernetes/client-node'];

/**
 * Dependencies that the project's modules import statically, as in the sources, but that the
 * bundle loads only when one of their exports is first used: the commands that must start fast
 * do not use them. Each importer in src/ gets a stand-in, CommonJS so that esbuild reads every
 * import from it through a property at its use, whose exports are getters that load the package on
 * first read from chunks/lazy-NAME.js with require(), which loads an ES module without top-level
 * await synchronously (Node >= 22.12), as the sources' static import had it loaded before.
 * chunks/lazy-NAME.js is a build of its own: in the main build its code would join the chunk that
 * every command loads, since esbuild puts the parts of a package that any entry point uses into
 * the chunk of every entry point that reaches the package's files. So the bundle holds a second
 * TypeBox, the one of lazy-typebox-value.js, which Value's functions use: TypeBox's schemas are
 * plain objects (their kind is a property, `~kind`), read by one copy as the other wrote them, and
 * the project sets none of TypeBox's process-wide state (System, Settings, Locale, Format), which
 * each copy would hold apart; the build fails if a module of src/ imports one of those. Nor may
 * the main build bundle a LAZY package's entry itself (a dynamic `import()` of it would): the
 * build fails then, and so there is one yaml.
 */
export const LAZY: Record<string, string> = {
  'typebox/value':
    "Value.Errors says what is wrong with a spec or a ProviderConfig, Value.Check is the sources' spec check: validate of a valid fleet calls neither (src/workspace/spec-check.ts); about 300 KB of TypeBox, its type and schema engines",
  yaml: 'reads what src/workspace/fast-yaml.ts leaves to it, the lines of a reported problem, --config and --fleet files, and writes -o yaml: validate of a valid fleet does none of these; about 270 KB',
  'js-yaml':
    "reads what src/workspace/plain-yaml.ts leaves to src/workspace/fast-yaml.ts (anchors, flow mappings, folded scalars...): the seed fleet's manifests have none of these; about 100 KB, and its schemas built at load",
};

/** TypeBox's process-wide state, which the second TypeBox of LAZY would not share. */
export const TYPEBOX_STATE =
  /import[^;]*\b(System|Settings|Locale|Format)\b[^;]*from 'typebox(\/[a-z]+)?'|from 'typebox\/format'/;

/** lazy-typebox-value for typebox/value: the output file, under chunks/, a stand-in loads. */
export const lazyFile = (pkg: string) => `lazy-${pkg.replace(/[^a-z0-9]+/gi, '-')}`;

/**
 * The names a package exports, read as Node reads it: a CommonJS package as an ES module sees it,
 * without `default` and Node's `module.exports` (the project's modules import names only).
 */
export async function exportNames(pkg: string): Promise<string[]> {
  const ns = (await import(pkg)) as Record<string, unknown>;
  return Object.keys(ns)
    .filter((n) => /^[A-Za-z_$][\w$]*$/.test(n) && n !== 'default' && n !== '__esModule')
    .sort();
}

/** The stand-in of `pkg`: a getter per export, which loads chunks/`file`.js on first use. */
export function lazyStandIn(pkg: string, names: string[], file: string): string {
  return [
    `// The bundle's stand-in for ${pkg}, loaded on first use (scripts/build.ts, LAZY).`,
    'let real;',
    `const load = () => (real ??= require(${JSON.stringify(`../chunks/${file}.js`)}));`,
    `for (const name of ${JSON.stringify(names)})`,
    '  Object.defineProperty(exports, name, { enumerable: true, get: () => load()[name] });',
    '',
  ].join('\n');
}

/** The main build: the project's static imports of a LAZY package get its stand-in. */
function lazyStandIns(names: Map<string, Promise<string[]>>): esbuild.Plugin {
  return {
    name: 'lazy-stand-ins',
    setup(build) {
      build.onResolve({ filter: /.*/ }, (args) =>
        names.has(args.path) && args.kind === 'import-statement' && args.importer.startsWith(SRC + sep)
          ? { path: args.path, namespace: 'lazy-stand-in' }
          : undefined,
      );
      // Its require() is of a file of the output, found at run time next to the requiring file.
      build.onResolve({ filter: /.*/, namespace: 'lazy-stand-in' }, (args) => ({ path: args.path, external: true }));
      build.onLoad({ filter: /.*/, namespace: 'lazy-stand-in' }, async (args) => ({
        contents: lazyStandIn(args.path, await names.get(args.path)!, lazyFile(args.path)),
        loader: 'js',
      }));
    },
  };
}

/** The build of chunks/lazy-NAME.js: each the package's exports, as the stand-in reads them. */
function lazyEntries(names: Map<string, Promise<string[]>>): esbuild.Plugin {
  return {
    name: 'lazy-entries',
    setup(build) {
      build.onResolve({ filter: /^lazy-entry:/ }, (args) => ({
        path: args.path.slice('lazy-entry:'.length),
        namespace: 'lazy-entry',
      }));
      build.onLoad({ filter: /.*/, namespace: 'lazy-entry' }, async (args) => ({
        contents: `export { ${(await names.get(args.path)!).join(', ')} } from ${JSON.stringify(args.path)};\n`,
        loader: 'js',
        resolveDir: ROOT,
      }));
    },
  };
}

/**
 * Node built-ins that a bundled dependency requires when it is loaded but uses only in what this
 * CLI never runs; in the bundle it requires them on first use instead. The build fails unless the
 * file still has that very line and uses nothing of the built-in but `members` (a new version of
 * the dependency is then to be reviewed again).
 * - commander: node:child_process, for stand-alone executable subcommands, which this CLI has none
 *   of; loading it is about 3 ms of every command's start, a tenth of Node's own start-up.
 */
export const DEFERRED_REQUIRES: Record<string, { line: string; binding: string; builtin: string; members: string[] }> =
  {
    'commander/lib/command.js': {
      line: "const childProcess = require('node:child_process');",
      binding: 'childProcess',
      builtin: 'node:child_process',
      members: ['spawn'],
    },
  };

/** `text` of the dependency file `key` with its DEFERRED_REQUIRES line made a require on use. */
export function deferRequire(key: string, text: string): string {
  const d = DEFERRED_REQUIRES[key]!;
  const at = text.indexOf(d.line);
  if (at < 0 || text.indexOf(d.line, at + 1) >= 0)
    throw new Error(`scripts/build.ts: ${key} no longer has the line \`${d.line}\` once: review DEFERRED_REQUIRES`);
  const rest = text.slice(0, at) + text.slice(at + d.line.length);
  const used = [...rest.matchAll(new RegExp(`\\b${d.binding}\\b(\\.\\w+)?`, 'g'))].map((m) => m[1]?.slice(1));
  const other = used.filter((m) => !m || !d.members.includes(m));
  if (other.length)
    throw new Error(
      `scripts/build.ts: ${key} uses ${d.binding}${other[0] ? `.${other[0]}` : ' itself'}, not only ${d.members.join(', ')}: review DEFERRED_REQUIRES`,
    );
  const lazy = d.members.map((m) => `${m}: (...args) => require(${JSON.stringify(d.builtin)}).${m}(...args)`);
  return text.replace(d.line, `const ${d.binding} = { ${lazy.join(', ')} };`);
}

function deferredRequires(): esbuild.Plugin {
  return {
    name: 'deferred-requires',
    setup(build) {
      const keys = Object.keys(DEFERRED_REQUIRES).map((k) =>
        k.replace(/[.*+?^${}()|[\]\\]/g, '\\$&').replace(/\//g, '[\\\\/]'),
      );
      build.onLoad({ filter: new RegExp(`[\\\\/]node_modules[\\\\/](?:${keys.join('|')})$`) }, async (args) => {
        const key = posix(args.path.slice(args.path.lastIndexOf(`node_modules${sep}`) + 'node_modules/'.length));
        if (!(key in DEFERRED_REQUIRES)) return undefined;
        return { contents: deferRequire(key, await readFile(args.path, 'utf8')), loader: 'js' };
      });
    },
  };
}

/**
 * `import ... from 'node:fs'` in an ES module makes Node build the module's facade, which reads
 * every export of fs, among them the getters that load its streams and fs/promises: about 3 ms of
 * the start-up of any command, more than a tenth of Node's own. The bundle requires fs instead
 * (what its CommonJS dependencies do already): the same object, without the facade. The stand-in
 * is an ES module that exports what src/ imports from fs (FS_IMPORT), each read once: a CommonJS
 * stand-in made esbuild copy every property of fs onto a namespace object in each importing module
 * (__toESM), and reading them all loads what fs loads on first use (fs.Dir: its internal/fs/dir),
 * about 2 ms of `validate` together. An import of another name fails the build (no such export).
 */
const FS_IMPORT = /^import\s+(type\s+)?\{([^}]*)\}\s*from\s*'(?:node:)?fs';/gm;
const ANY_FS_IMPORT = /^import\b[^;]*?\bfrom\s*'(?:node:)?fs';/gm;

/** The names src/ imports from node:fs; the build fails on any other form of import of it. */
export function fsImportNames(): string[] {
  const names = new Set<string>();
  for (const f of readdirSync(SRC, { recursive: true, encoding: 'utf8' })) {
    if (!f.endsWith('.ts')) continue;
    const text = readFileSync(join(SRC, f), 'utf8');
    const named = [...text.matchAll(FS_IMPORT)];
    const all = [...text.matchAll(ANY_FS_IMPORT)];
    const other = all.find((a) => !a[0].startsWith('import type ') && !named.some((m) => m.index === a.index));
    if (other)
      throw new Error(
        `scripts/build.ts: src/${posix(f)}: \`${other[0]}\`: import fs's functions by name (fsByRequire)`,
      );
    for (const m of named) {
      if (m[1]) continue;
      for (const spec of m[2]!.split(',').map((s) => s.trim()))
        if (spec && !spec.startsWith('type ')) names.add(spec.split(/\s+as\s+/)[0]!);
    }
  }
  return [...names].sort();
}

/** The bundle's node:fs for ES modules: fs itself as the default export, and `names`. */
export function fsStandIn(names: string[]): string {
  return [
    "// The bundle's node:fs for ES modules (scripts/build.ts, fsByRequire).",
    "const fs = require('node:fs');",
    'export default fs;',
    `export const { ${names.join(', ')} } = fs;`,
    '',
  ].join('\n');
}

function fsByRequire(): esbuild.Plugin {
  return {
    name: 'fs-by-require',
    setup(build) {
      build.onResolve({ filter: /^(node:)?fs$/ }, (args) =>
        args.kind === 'import-statement' ? { path: 'node:fs', namespace: 'fs-by-require' } : undefined,
      );
      build.onLoad({ filter: /.*/, namespace: 'fs-by-require' }, () => ({
        contents: fsStandIn(fsImportNames()),
        loader: 'js',
      }));
    },
  };
}

/** Bundled dependency files that mention `__dirname`, `__filename` or `import.meta.url`, and why that is harmless. */
const REVIEWED: Record<string, string> = {
  'commander/lib/command.js':
    'only in comments: executableDir() is for stand-alone subcommand files, which this CLI has none of',
  'undici/index.js': '`typeof __filename` guard, for stack traces only',
};

/** Prepended to every output file: CommonJS code in the bundle calls require('node:...'). */
const BANNER = [
  "import { createRequire as __ppCreateRequire } from 'node:module';",
  'const require = __ppCreateRequire(import.meta.url);',
].join('\n');

const FILE_LOCATORS = /\b__dirname\b|\b__filename\b|\bimport\.meta\.url\b/;
const URL_LITERAL = /new URL\(\s*(['"])([^'"]+)\1\s*,\s*import\.meta\.url\s*\)/g;

/** The module the bundle replaces, and the one whose specSchemas() it is generated from. */
const SPEC_CHECK_COMPILED = join(SRC, 'workspace/spec-check-compiled.ts');
const SPEC_CHECK = join(SRC, 'workspace/spec-check.ts');

/**
 * The bundle's src/workspace/spec-check-compiled.ts (`entry`), and per kind the module TypeBox's
 * Code() writes for that kind's spec schema (`kinds`, imported by the entry as `spec-check:KIND`).
 * Code() leaves the regular expressions of a schema to External variables, handed to the module
 * through its SetExternal: each is written out as a RegExp of the same source and flags, and
 * anything else fails the build rather than be guessed at.
 */
export async function specCheckModules(): Promise<{ entry: string; kinds: Map<string, string> }> {
  const { specSchemas } = (await import(pathToFileURL(SPEC_CHECK).href)) as {
    specSchemas: () => Record<string, Parameters<typeof Code>[0]>;
  };
  const kinds = new Map<string, string>();
  const lines = ['// Generated by scripts/build.ts from the specSchemas() of src/workspace/spec-check.ts.'];
  const entries: string[] = [];
  for (const [i, [kind, schema]] of Object.entries(specSchemas()).entries()) {
    const code = Code(schema);
    const variables = (code.External.variables as unknown[]).map((v, n) => {
      if (!(v instanceof RegExp))
        throw new Error(`scripts/build.ts: ${kind}: External variable ${n} of TypeBox's Code() is not a RegExp`);
      return `new RegExp(${JSON.stringify(v.source)}, ${JSON.stringify(v.flags)})`;
    });
    kinds.set(kind, code.Code);
    lines.push(`import * as check${i} from ${JSON.stringify(`spec-check:${kind}`)};`);
    lines.push(`check${i}.SetExternal({ variables: [${variables.join(', ')}] });`);
    entries.push(`${JSON.stringify(kind)}: check${i}.Check`);
  }
  lines.push(`export const COMPILED = { ${entries.join(', ')} };`);
  return { entry: `${lines.join('\n')}\n`, kinds };
}

function specChecks(): esbuild.Plugin {
  return {
    name: 'spec-checks',
    setup(build) {
      const modules = specCheckModules();
      build.onResolve({ filter: /^spec-check:/ }, (args) => ({
        path: args.path.slice('spec-check:'.length),
        namespace: 'spec-check',
      }));
      // Code()'s modules import from typebox (typebox/guard, typebox/system): resolved as the sources' are.
      build.onLoad({ filter: /.*/, namespace: 'spec-check' }, async (args) => ({
        contents: (await modules).kinds.get(args.path)!,
        loader: 'js',
        resolveDir: ROOT,
      }));
      build.onLoad({ filter: /spec-check-compiled\.ts$/ }, async (args) =>
        args.path === SPEC_CHECK_COMPILED
          ? { contents: (await modules).entry, loader: 'js', resolveDir: dirname(SPEC_CHECK_COMPILED) }
          : undefined,
      );
    },
  };
}

/**
 * Whitespace and syntax minified, names kept: V8 scans every byte of a module it loads, also the
 * bodies of functions it compiles only when called, so a smaller text is a shorter start for
 * every command (validate of the seed fleet: about 2% of its instructions). Identifiers stay as
 * written, and keepNames keeps every function's and class's name: errors and stack traces name
 * what the sources name, and the source maps map the rest.
 */
const MINIFY = { minifyWhitespace: true, minifySyntax: true } as const;

export interface BuildResult {
  outDir: string;
  /** The entry point: <outDir>/cli/main.js. */
  main: string;
  /** Every file written, relative to outDir. */
  files: string[];
  /** The source files and dependency files in the bundle. */
  inputs: string[];
  /** Files copied from src/ because a module reads them next to itself. */
  assets: string[];
  /** esbuild's account of the build: which inputs went into which output. */
  metafile: esbuild.Metafile;
  ms: number;
}

const posix = (p: string) => p.split(sep).join('/');

/**
 * `import Type from 'typebox'` (and `Value` from 'typebox/value', default or named) binds an object
 * that holds every function of the package, so esbuild keeps all of them: TypeBox's TypeScript
 * parser (Type.Script), codecs, conversions, about 100 KB that `validate` compiled at every start
 * for nothing. The same functions are the package's named exports, so the bundle imports the
 * namespace instead (`import * as Type`), which esbuild trims to the `Type.X` a module uses; the
 * build fails unless each such X is the very same function both ways.
 */
const TYPEBOX_IMPORT = /^import (?:(\w+)|\{ (Value) \})(, \{ [^}]* \})? from '(typebox|typebox\/value)';$/gm;

export async function typeboxNamespaces(text: string, file: string): Promise<string> {
  const rewrites: Array<Promise<string>> = [];
  const out = text.replace(TYPEBOX_IMPORT, (line, byDefault: string | undefined, named, rest, pkg: string) => {
    const name = (byDefault ?? named) as string;
    rewrites.push(
      (async () => {
        const ns = (await import(pkg)) as Record<string, Record<string, unknown>>;
        const bound = byDefault ? ns.default! : ns[name]!;
        const body = text.replace(line, '');
        // The object itself, passed or indexed (a word in a string or comment is neither).
        if (new RegExp(`(?<![.\\w])${name}\\s*[[),;]|[(,=]\\s*${name}\\b(?!\\.)`).test(body))
          throw new Error(
            `scripts/build.ts: ${relative(ROOT, file)}: ${name} is used as an object, not only as ${name}.X`,
          );
        for (const [, member] of body.matchAll(new RegExp(`\\b${name}\\.(\\w+)`, 'g')))
          if (bound[member!] !== ns[member!])
            throw new Error(
              `scripts/build.ts: ${relative(ROOT, file)}: ${name}.${member} is not ${pkg}'s export ${member}`,
            );
        return line;
      })(),
    );
    return `import * as ${name} from '${pkg}';${rest ? `\nimport ${rest.slice(2)} from '${pkg}';` : ''}`;
  });
  await Promise.all(rewrites);
  return out;
}

/**
 * Every output file sits one directory below outDir (cli/main.js, chunks/*.js), so that one
 * relative URL from any of them reaches a module's mirror: `../sim/topology.js`.
 */
function importMetaUrl(assets: Map<string, string>, outDir: string): esbuild.Plugin {
  return {
    name: 'import-meta-url',
    setup(build) {
      build.onLoad({ filter: /\.ts$/ }, async (args) => {
        if (!args.path.startsWith(SRC + sep)) return undefined;
        const text = await typeboxNamespaces(await readFile(args.path, 'utf8'), args.path);
        const state = TYPEBOX_STATE.exec(text);
        if (state)
          throw new Error(
            `scripts/build.ts: ${relative(ROOT, args.path)} imports TypeBox's ${state[1] ?? 'Format'}, which the bundle's two TypeBoxes would hold apart (LAZY)`,
          );
        if (!text.includes('import.meta.url')) return { contents: text, loader: 'ts' };
        const mirror = posix(relative(SRC, args.path)).replace(/\.ts$/, '.js');
        for (const m of text.matchAll(URL_LITERAL)) {
          const target = fileURLToPath(new URL(m[2]!, `file://${args.path}`));
          if (!target.startsWith(SRC + sep)) continue;
          if (!existsSync(target))
            throw new Error(
              `${relative(ROOT, args.path)}: new URL('${m[2]}', import.meta.url): no such file ${target}`,
            );
          assets.set(target, join(outDir, relative(SRC, target)));
        }
        const contents = text.replaceAll(
          'import.meta.url',
          `new URL(${JSON.stringify(`../${mirror}`)}, import.meta.url).href`,
        );
        return { contents, loader: 'ts' };
      });
    },
  };
}

export async function buildBundle(opts: { outDir?: string } = {}): Promise<BuildResult> {
  const t0 = performance.now();
  const outDir = resolve(opts.outDir ?? DEFAULT_OUT_DIR);
  if (`${ROOT}${sep}`.startsWith(`${outDir}${sep}`) || `${outDir}${sep}`.startsWith(`${SRC}${sep}`))
    throw new Error(
      `scripts/build.ts: --outdir ${outDir}: it is emptied first, so it must not hold the repository or src/`,
    );
  // A previous build (or tsc's per-file output) would leave stale chunks next to the new ones.
  rmSync(outDir, { recursive: true, force: true });
  const assets = new Map<string, string>();
  const lazyNames = new Map(Object.keys(LAZY).map((pkg) => [pkg, exportNames(pkg)]));
  const main = esbuild.build({
    absWorkingDir: ROOT,
    entryPoints: [ENTRY],
    outbase: SRC,
    outdir: outDir,
    chunkNames: 'chunks/[name]-[hash]',
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: 'node22.19',
    tsconfig: TSCONFIG,
    external: EXTERNAL,
    banner: { js: BANNER },
    // Error and class names stay what the sources call them (esbuild renames clashing ones).
    keepNames: true,
    ...MINIFY,
    sourcemap: 'linked',
    metafile: true,
    logLevel: 'silent',
    plugins: [lazyStandIns(lazyNames), deferredRequires(), fsByRequire(), specChecks(), importMetaUrl(assets, outDir)],
  });
  const lazy = esbuild.build({
    absWorkingDir: ROOT,
    entryPoints: Object.keys(LAZY).map((pkg) => ({ in: `lazy-entry:${pkg}`, out: `chunks/${lazyFile(pkg)}` })),
    outdir: outDir,
    bundle: true,
    format: 'esm',
    platform: 'node',
    target: 'node22.19',
    banner: { js: BANNER },
    keepNames: true,
    ...MINIFY,
    sourcemap: 'linked',
    metafile: true,
    logLevel: 'silent',
    plugins: [lazyEntries(lazyNames)],
  });
  const [result, lazyResult] = await Promise.all([main, lazy]);
  for (const pkg of Object.keys(LAZY)) {
    const entry = posix(relative(ROOT, fileURLToPath(import.meta.resolve(pkg))));
    if (entry in result.metafile.inputs)
      throw new Error(
        `scripts/build.ts: ${pkg} is bundled besides chunks/${lazyFile(pkg)}.js: only a static import from src/ is given its stand-in (LAZY)`,
      );
  }
  Object.assign(result.metafile.inputs, lazyResult.metafile.inputs);
  Object.assign(result.metafile.outputs, lazyResult.metafile.outputs);
  const files = Object.keys(result.metafile.outputs).map((f) => posix(relative(outDir, resolve(ROOT, f))));
  for (const f of files.filter((f) => f.endsWith('.js')))
    if (!/^[^/]+\/[^/]+$/.test(f)) throw new Error(`scripts/build.ts: ${f} is not one directory below the output`);
  const inputs = Object.keys(result.metafile.inputs).map((f) => resolve(ROOT, f));
  const unreviewed = inputs
    .filter((f) => f.includes(`${sep}node_modules${sep}`))
    .map((f) => ({ f, key: posix(f.slice(f.lastIndexOf(`node_modules${sep}`) + 'node_modules/'.length)) }))
    .filter(({ f, key }) => !(key in REVIEWED) && FILE_LOCATORS.test(readFileSync(f, 'utf8')));
  if (unreviewed.length)
    throw new Error(
      `scripts/build.ts: bundled dependency files locate files next to themselves: ${unreviewed.map((u) => u.key).join(', ')}. ` +
        'Add the package to EXTERNAL, or to REVIEWED with the reason it is harmless.',
    );
  for (const [from, to] of assets) cpSync(from, to, { recursive: true });
  return {
    outDir,
    main: join(outDir, 'cli/main.js'),
    files: files.sort(),
    inputs: inputs.map((f) => posix(relative(ROOT, f))).sort(),
    assets: [...assets.values()].map((f) => posix(relative(outDir, f))).sort(),
    metafile: result.metafile,
    ms: Math.round(performance.now() - t0),
  };
}

if (process.argv[1] && resolve(process.argv[1]) === import.meta.filename) {
  const { values } = parseArgs({
    options: { outdir: { type: 'string' } },
  });
  const r = await buildBundle(values.outdir ? { outDir: values.outdir } : {});
  const bytes = r.files.filter((f) => f.endsWith('.js')).reduce((n, f) => n + statSync(join(r.outDir, f)).size, 0);
  const js = r.files.filter((f) => f.endsWith('.js')).length;
  process.stderr.write(
    `${relative(ROOT, r.main) || r.main}: ${js} files, ${Math.round(bytes / 1024)} KiB, ${r.inputs.length} modules bundled, ` +
      `${r.assets.length} asset(s), ${r.ms} ms\n`,
  );
}
