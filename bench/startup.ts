/**
 * bench/startup: how long `provider-proxmox` takes to start, and how many modules it loads, for
 * commands that need little (`--help`, `validate -f examples/production`, `plan --help`), next to
 * Node's own start-up (`node -e 0`). The target: within 3x Node's start-up.
 *
 * Three programs are measured in the same run:
 * - `sources`: `node src/cli/main.ts`, what the README runs in a clone;
 * - `sources-bin`: bin/provider-proxmox.js over the sources (`npx provider-proxmox` in a clone
 *   without dist/): the same modules, but the bin turns the compile cache on before main.ts is
 *   loaded, so later runs also skip Node's type stripper, whose start alone costs more than Node's
 *   own start-up for the first TypeScript file that is not in the cache;
 * - `bundle`: the bundle of scripts/build.ts, built afresh into a temporary package laid out as
 *   `npm pack` ships it, run through its bin/provider-proxmox.js (an installed package).
 * `--main FILE` measures that one file instead (`--main dist/cli/main.js`: an existing build);
 * given more than once, each file (main1, main2...), their runs taking turns like the rest, which
 * is how two builds are compared on a shared machine (a bin/provider-proxmox.js of a package laid
 * out as above: before and after a change); `--sources-only`, the first one.
 *
 * Each command runs `runs` times as a fresh process, the commands taking turns so that the shared
 * machine's noise falls on all of them alike; the median wall time is reported. Three ways:
 * - `ms`: without a compile cache (NODE_DISABLE_COMPILE_CACHE=1): a user's first run;
 * - `msCompileCache`: with a private NODE_COMPILE_CACHE, filled by one run first;
 * - `msDefault`: neither variable set, as users run it: src/cli/main.ts (and the bin) turn the
 *   cache on in the default <tmpdir>/node-compile-cache (a private TMPDIR here) before loading the
 *   rest, so every run after the first gets it.
 * Modules are counted by a preload (`--import`) that registers module.registerHooks and counts
 * every distinct URL resolved, ESM and CommonJS alike: the project's own files, node_modules, and
 * Node built-ins apart, and `kib`, the size of those files: what was read and compiled (the
 * bundle's chunks hold many modules each, so its counts say less). Every xNode divides by
 * `nodeStartup.ms`, the median of all of Node's runs (it does not depend on the mode);
 * `targetMet` says per command whether the first run (`ms`) and later runs (`msDefault`) are
 * within 3x of it. Timings on a shared machine are noisy: compare runs taken together.
 *
 * Prints one JSON object. Usage: node bench/startup.ts [--runs 5] [--modules-list] [--main FILE]...
 *   [--sources-only]
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { writeResolveHook } from '../scripts/resolve-hook.ts';
import { bundlePackage, packageDir, ROOT } from './package-dir.ts';

const { values } = parseArgs({
  options: {
    runs: { type: 'string', default: '5' },
    'modules-list': { type: 'boolean', default: false },
    main: { type: 'string', multiple: true },
    'sources-only': { type: 'boolean', default: false },
  },
});
const runs = Number(values.runs);
if (!Number.isInteger(runs) || runs < 1) throw new Error(`--runs ${values.runs}: expected a whole number >= 1`);
const TARGET = 3;

const dir = mkdtempSync(join(tmpdir(), 'pp-bench-startup-'));
const countsFile = join(dir, 'modules.json');
// The preload: every resolved URL, written at exit.
const hook = writeResolveHook(dir, countsFile);

/** A program to measure: the file node runs, and the directory its own files are under. */
interface Program {
  name: string;
  main: string;
  root: string;
  buildMs?: number;
}

/** The bin over the sources: a package without dist/, its src/ the repository's. */
function sourcesBinProgram(): Program {
  const pkg = packageDir(dir, 'sources-package');
  symlinkSync(join(ROOT, 'src'), join(pkg, 'src'));
  return { name: 'sources-bin', main: join(pkg, 'bin/provider-proxmox.js'), root: ROOT };
}

/** The bundle in a package laid out as `npm pack` ships it (dist/ and bin/, no src/). */
async function bundleProgram(): Promise<Program> {
  const { pkg, bin, buildMs } = await bundlePackage(dir, 'package');
  return { name: 'bundle', main: bin, root: pkg, buildMs };
}

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

type Mode = 'ms' | 'msCompileCache' | 'msDefault';

/**
 * Every command, `runs` times per mode, the commands taking turns; the median per mode, and
 * `all`, the median over every mode (Node's own start-up does not depend on the mode, so its
 * `all` is the steadier baseline on a shared machine).
 */
function measure(commands: Array<{ key: string; args: string[] }>): Map<string, Record<Mode | 'all', number>> {
  const cachedEnv: NodeJS.ProcessEnv = { ...baseEnv, NODE_COMPILE_CACHE: join(dir, 'compile-cache') };
  delete cachedEnv.NODE_DISABLE_COMPILE_CACHE;
  const defaultEnv: NodeJS.ProcessEnv = { ...cachedEnv, TMPDIR: join(dir, 'tmp') };
  delete defaultEnv.NODE_COMPILE_CACHE;
  mkdirSync(join(dir, 'tmp'));
  const envs: Record<Mode, NodeJS.ProcessEnv> = { ms: baseEnv, msCompileCache: cachedEnv, msDefault: defaultEnv };
  const times = new Map(
    commands.map((c) => [c.key, { ms: [], msCompileCache: [], msDefault: [] } as Record<Mode, number[]>]),
  );
  for (const mode of ['ms', 'msCompileCache', 'msDefault'] as const) {
    if (mode !== 'ms') for (const c of commands) run(c.args, envs[mode]); // fills the cache
    for (let i = 0; i < runs; i++)
      for (const c of commands) {
        const r = run(c.args, envs[mode]);
        if (r.code !== 0) throw new Error(`${c.key} exited ${r.code}: ${r.stderr}`);
        times.get(c.key)![mode].push(r.ms);
      }
  }
  return new Map(
    [...times].map(([k, t]) => [
      k,
      {
        ms: median(t.ms),
        msCompileCache: median(t.msCompileCache),
        msDefault: median(t.msDefault),
        all: median([...t.ms, ...t.msCompileCache, ...t.msDefault]),
      },
    ]),
  );
}

function modules(args: string[], root: string) {
  const counted = run(['--import', hook, ...args], baseEnv);
  if (counted.code !== 0) throw new Error(`${args.join(' ')} with the module counter: ${counted.stderr}`);
  const urls = JSON.parse(readFileSync(countsFile, 'utf8')) as string[];
  const own = urls.filter((u) => u.startsWith('file:') && !u.includes('/node_modules/') && u !== `file://${hook}`);
  const deps = urls.filter((u) => u.includes('/node_modules/'));
  const builtins = urls.filter((u) => u.startsWith('node:'));
  const packages = [...new Set(deps.map((u) => /\/node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(u)?.[1] ?? u))].sort();
  const bytes = [...own, ...deps].reduce((n, u) => n + statSync(fileURLToPath(u)).size, 0);
  return {
    modules: own.length + deps.length + builtins.length,
    kib: Math.round(bytes / 1024),
    projectModules: own.length,
    dependencyModules: deps.length,
    builtinModules: builtins.length,
    packages,
    ...(values['modules-list'] ? { projectFiles: own.map((u) => relative(root, fileURLToPath(u))) } : {}),
  };
}

const COMMANDS: Array<{ name: string; args: string[] }> = [
  { name: '--help', args: ['--help'] },
  { name: 'validate -f examples/production', args: ['validate', '-f', join(ROOT, 'examples/production')] },
  { name: 'plan --help', args: ['plan', '--help'] },
];

let output: unknown;
try {
  const mains = values.main ?? [];
  const programs: Program[] = mains.length
    ? mains.map((m, i) => ({ name: mains.length > 1 ? `main${i + 1}` : 'main', main: resolve(m), root: ROOT }))
    : [
        { name: 'sources', main: join(ROOT, 'src/cli/main.ts'), root: ROOT },
        ...(values['sources-only'] ? [] : [sourcesBinProgram(), await bundleProgram()]),
      ];
  const all = [
    { key: 'node -e 0', args: ['-e', '0'] },
    ...programs.flatMap((p) => COMMANDS.map((c) => ({ key: `${p.name} ${c.name}`, args: [p.main, ...c.args] }))),
  ];
  const times = measure(all);
  const node = times.get('node -e 0')!;
  const x = (ms: number, base: number) => +(ms / base).toFixed(1);
  output = {
    bench: 'startup',
    node: process.version,
    runs,
    target: `each command within ${TARGET}x node -e 0 (xNode <= ${TARGET})`,
    nodeStartup: {
      ms: node.all,
      byMode: { ms: node.ms, msCompileCache: node.msCompileCache, msDefault: node.msDefault },
    },
    programs: programs.map((p) => ({
      program: p.name,
      main: relative(ROOT, p.main).startsWith('..') ? p.main : relative(ROOT, p.main),
      ...(p.buildMs !== undefined ? { buildMs: p.buildMs } : {}),
      results: COMMANDS.map((c) => {
        const { all: _, ...t } = times.get(`${p.name} ${c.name}`)!;
        return {
          command: c.name,
          ...t,
          xNode: x(t.ms, node.all),
          xNodeCompileCache: x(t.msCompileCache, node.all),
          xNodeDefault: x(t.msDefault, node.all),
          targetMet: { firstRun: t.ms <= TARGET * node.all, laterRuns: t.msDefault <= TARGET * node.all },
          ...modules([p.main, ...c.args], p.root),
        };
      }),
    })),
  };
} finally {
  rmSync(dir, { recursive: true, force: true });
}
console.log(JSON.stringify(output, null, 2));
