/**
 * bench/startup: how long `provider-proxmox` takes to start, and how many modules it loads, for
 * commands that need little (`--help`, `validate -f examples/production`, `plan --help`), next to
 * Node's own start-up (`node -e 0`). The target: within 3x Node's start-up.
 *
 * Each command runs `runs` times as a fresh process (the median wall time is reported), without a
 * compile cache (NODE_DISABLE_COMPILE_CACHE=1: a user's first run) and with one (a private
 * NODE_COMPILE_CACHE, filled by one run first: every later run, since src/cli/main.ts enables the
 * cache for what commands load). `msDefault` is a later run as users get it, with neither variable
 * set: main.ts's enableCompileCache() then caches what commands load dynamically, in the default
 * <tmpdir>/node-compile-cache (a private TMPDIR here), but not main.ts and its static imports. Modules are counted by a preload (`--import`) that registers module.registerHooks
 * and counts every distinct URL resolved, ESM and CommonJS alike: the project's own files,
 * node_modules, and Node built-ins apart.
 *
 * Prints one JSON object. Usage: node bench/startup.ts [--runs 5] [--modules-list] [--main FILE]
 * (`--main dist/cli/main.js` measures a build, which needs no type stripping).
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: {
    runs: { type: 'string', default: '5' },
    'modules-list': { type: 'boolean', default: false },
    main: { type: 'string' },
  },
});
const runs = Number(values.runs);
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const MAIN = values.main ? resolve(values.main) : join(ROOT, 'src/cli/main.ts');

const COMMANDS: Array<{ name: string; args: string[] }> = [
  { name: 'node -e 0', args: ['-e', '0'] },
  { name: '--help', args: [MAIN, '--help'] },
  { name: 'validate -f examples/production', args: [MAIN, 'validate', '-f', join(ROOT, 'examples/production')] },
  { name: 'plan --help', args: [MAIN, 'plan', '--help'] },
];

const dir = mkdtempSync(join(tmpdir(), 'pp-bench-startup-'));
const countsFile = join(dir, 'modules.json');
// The preload: every resolved URL, written at exit (synchronously: nothing async runs then).
const hook = join(dir, 'count-modules.mjs');
writeFileSync(
  hook,
  `import { registerHooks } from 'node:module';
import { writeFileSync } from 'node:fs';
const seen = new Set();
registerHooks({ resolve(specifier, context, next) { const r = next(specifier, context); seen.add(r.url); return r; } });
process.on('exit', () => writeFileSync(${JSON.stringify(countsFile)}, JSON.stringify([...seen])));
`,
);

function run(args: string[], env: NodeJS.ProcessEnv): { ms: number; code: number | null; stderr: string } {
  const t0 = performance.now();
  const r = spawnSync(process.execPath, args, { env, encoding: 'utf8', cwd: ROOT });
  return { ms: performance.now() - t0, code: r.status, stderr: r.stderr };
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return Math.round(s[Math.floor(s.length / 2)]!);
};

const baseEnv: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: '1', NODE_DISABLE_COMPILE_CACHE: '1' };
delete baseEnv.NODE_COMPILE_CACHE;
const cachedEnv: NodeJS.ProcessEnv = { ...baseEnv, NODE_COMPILE_CACHE: join(dir, 'compile-cache') };
delete cachedEnv.NODE_DISABLE_COMPILE_CACHE;
const defaultEnv: NodeJS.ProcessEnv = { ...cachedEnv, TMPDIR: join(dir, 'tmp') };
delete defaultEnv.NODE_COMPILE_CACHE;
mkdirSync(join(dir, 'tmp'));
const results = [];
try {
  for (const c of COMMANDS) {
    const cold: number[] = [];
    const cached: number[] = [];
    const dflt: number[] = [];
    let code: number | null = null;
    for (let i = 0; i < runs; i++) {
      const r = run(c.args, baseEnv);
      code = r.code;
      cold.push(r.ms);
    }
    run(c.args, cachedEnv); // fills the cache
    for (let i = 0; i < runs; i++) cached.push(run(c.args, cachedEnv).ms);
    run(c.args, defaultEnv);
    for (let i = 0; i < runs; i++) dflt.push(run(c.args, defaultEnv).ms);
    const counted = run(['--import', hook, ...c.args], baseEnv);
    if (counted.code !== code) throw new Error(`${c.name} with the module counter: ${counted.stderr}`);
    const urls = JSON.parse(readFileSync(countsFile, 'utf8')) as string[];
    const project = urls.filter(
      (u) => u.startsWith('file:') && !u.includes('/node_modules/') && u !== `file://${hook}`,
    );
    const deps = urls.filter((u) => u.includes('/node_modules/'));
    const builtins = urls.filter((u) => u.startsWith('node:'));
    const packages = [...new Set(deps.map((u) => /\/node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(u)?.[1] ?? u))].sort();
    results.push({
      command: c.name,
      exitCode: code,
      ms: median(cold),
      msCompileCache: median(cached),
      msDefault: median(dflt),
      modules: project.length + deps.length + builtins.length,
      projectModules: project.length,
      dependencyModules: deps.length,
      builtinModules: builtins.length,
      packages,
      ...(values['modules-list'] ? { projectFiles: project.map((u) => u.replace(`file://${ROOT}`, '')) } : {}),
    });
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
const node = results[0]!;
console.log(
  JSON.stringify(
    {
      bench: 'startup',
      node: process.version,
      main: MAIN,
      runs,
      results: results.map((r) => ({ ...r, xNode: +(r.ms / node.ms).toFixed(1) })),
      target: 'each command within 3x node -e 0 (xNode <= 3)',
    },
    null,
    2,
  ),
);
