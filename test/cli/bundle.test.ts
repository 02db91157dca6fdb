/**
 * The bundle of `npm run build` (scripts/build.ts) behaves as the sources do. It is built into a
 * temporary package laid out as `npm pack` ships it (dist/, bin/, package.json, examples/ and
 * node_modules/ beside them) but without src/, so that anything still reaching into src/ at run
 * time fails here; every run goes through that package's bin/provider-proxmox.js, which must pick
 * the bundle. Each command is run from the bundle and from `src/cli/main.ts`, and the exit code,
 * stdout and stderr must be the same: `--help`, `plan --help`, `validate` of the seed fleet and of
 * broken manifests, a usage error, and `controller` against an unreachable cluster (the external
 * Kubernetes client). validate of the seed fleet must load neither the packages the bundle loads on
 * first use (scripts/build.ts, LAZY) nor node:child_process nor node:v8, and `-o yaml` must load
 * yaml on use and print what the sources print, as must a manifest left to js-yaml load js-yaml.
 * `apply` of a VM with no snippet to upload must load neither the simulator (demo's) nor ssh2. Then
 * `demo` from the bundle runs the simulator on its default topology (read from the copied
 * default-topology.yaml) and deploys two VMs.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type BuildResult, buildBundle, EXTERNAL, fsImportNames, LAZY, lazyFile } from '../../scripts/build.ts';
import { writeResolveHook } from '../../scripts/resolve-hook.ts';
import { startSimulator } from '../../src/sim/index.ts';
import { providerConfigYaml } from '../../src/sim/provider-config.ts';
import { cliEnv, MAIN, ROOT, writeManifests } from '../helpers/cli.ts';

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Run node with `args` in `cwd` to its end (killed after `timeoutMs`). */
function node(args: string[], cwd: string, timeoutMs = 60_000): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { cwd, env: cliEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => {
      stdout += d;
    });
    child.stderr.setEncoding('utf8').on('data', (d: string) => {
      stderr += d;
    });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`node ${args.join(' ')} did not finish in ${timeoutMs} ms\n${stdout}\n${stderr}`));
    }, timeoutMs);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

describe('the bundle (npm run build)', () => {
  let tmp: string;
  let pkg: string;
  let build: BuildResult;
  /** The working directory of both runs, so that relative paths print alike. */
  let work: string;
  const bundled = (args: string[], timeoutMs?: number) =>
    node([join(pkg, 'bin/provider-proxmox.js'), ...args], work, timeoutMs);
  const sources = (args: string[]) => node([MAIN, ...args], work);

  before(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'pp-bundle-'));
    pkg = join(tmp, 'package');
    work = join(tmp, 'work');
    mkdirSync(work, { recursive: true });
    build = await buildBundle({ outDir: join(pkg, 'dist') });
    cpSync(join(ROOT, 'bin'), join(pkg, 'bin'), { recursive: true });
    cpSync(join(ROOT, 'package.json'), join(pkg, 'package.json'));
    symlinkSync(join(ROOT, 'examples'), join(pkg, 'examples'));
    symlinkSync(join(ROOT, 'node_modules'), join(pkg, 'node_modules'));
  });

  after(() => {
    rmSync(tmp, { recursive: true, force: true });
  });

  it('is an entry point and its chunks, with TypeBox, yaml and commander inside and the externals left out', () => {
    assert.equal(build.main, join(pkg, 'dist/cli/main.js'));
    assert.ok(existsSync(build.main));
    const js = build.files.filter((f) => f.endsWith('.js'));
    assert.ok(js.includes('cli/main.js'), js.join(' '));
    assert.ok(js.length > 3 && js.every((f) => f === 'cli/main.js' || f.startsWith('chunks/')), js.join(' '));
    for (const p of ['typebox', 'yaml', 'commander'])
      assert.ok(
        build.inputs.some((i) => i.startsWith(`node_modules/${p}/`)),
        `${p} is not in the bundle`,
      );
    for (const p of EXTERNAL)
      assert.ok(!build.inputs.some((i) => i.startsWith(`node_modules/${p}/`)), `${p} was bundled`);
    assert.ok(build.assets.includes('sim/default-topology.yaml'), build.assets.join(' '));
    for (const pkg of Object.keys(LAZY)) assert.ok(js.includes(`chunks/${lazyFile(pkg)}.js`), js.join(' '));
    // node:fs is required, not imported (scripts/build.ts, fsByRequire).
    for (const f of js) assert.doesNotMatch(readFileSync(join(build.outDir, f), 'utf8'), /from "node:fs"/, f);
    // Its stand-in reads what src/ imports, not every property of fs (fs.Dir loads a module of its own).
    const names = fsImportNames();
    assert.ok(names.includes('readFileSync') && !names.includes('Dir'), names.join(' '));
    // The output is minified (scripts/build.ts, MINIFY): the stand-in is found by esbuild's account.
    const standIns = Object.entries(build.metafile.outputs)
      .filter(([f, o]) => f.endsWith('.js') && 'fs-by-require:node:fs' in o.inputs)
      .map(([f]) => f);
    assert.equal(standIns.length, 1, standIns.join(' '));
    assert.ok(
      readFileSync(join(ROOT, standIns[0]!), 'utf8')
        .replace(/\s+/g, '')
        .includes(`var{${names.join(',')}}=fs;`),
      standIns[0],
    );
    // The entry point loads nothing before the compile cache is on: the wiring is a chunk of its own.
    const entry = readFileSync(build.main, 'utf8');
    assert.match(entry, /enableCompileCache/);
    assert.match(entry, /await import\("\.\.\/chunks\/program-[A-Z0-9]+\.js"\)/);
  });

  for (const args of [['--help'], ['plan', '--help'], ['--version'], ['nope']]) {
    it(`${args.join(' ')}: the same exit code and output as the sources`, async () => {
      const [b, s] = await Promise.all([bundled(args), sources(args)]);
      assert.deepEqual(b, s);
      assert.equal(b.code, args[0] === 'nope' ? 2 : 0, b.stderr);
    });
  }

  it('validate -f examples/production: the seed fleet is valid, as from the sources', async () => {
    const args = ['validate', '-f', join(ROOT, 'examples/production')];
    const [b, s] = await Promise.all([bundled(args), sources(args)]);
    assert.deepEqual(b, s);
    assert.equal(b.code, 0, b.stderr);
    assert.match(b.stdout, /^30 ProxmoxVM\(s\) in 30 file\(s\): valid$/m);
  });

  it('validate of the seed fleet loads neither the lazy packages nor node:child_process; -o yaml loads yaml, a quoted key js-yaml', async () => {
    // Every URL the run resolves, ES modules and require() alike, written at exit.
    const seen = join(tmp, 'resolved.json');
    const hook = writeResolveHook(tmp, seen);
    const loaded = async (args: string[]) => {
      const r = await node(['--import', hook, join(pkg, 'bin/provider-proxmox.js'), ...args], work);
      assert.equal(r.code, 0, r.stderr);
      return { r, urls: JSON.parse(readFileSync(seen, 'utf8')) as string[] };
    };
    const fleet = join(ROOT, 'examples/production');
    const { urls } = await loaded(['validate', '-f', fleet]);
    assert.ok(
      urls.some((u) => u.includes('/dist/chunks/')),
      urls.join('\n'),
    );
    for (const u of urls) {
      assert.doesNotMatch(u, /\/chunks\/lazy-/);
      assert.notEqual(u, 'node:child_process');
      // Nor node:v8: validate leaves the heap's sizing alone (src/cli/program.ts, BRIEF_COMMANDS).
      assert.notEqual(u, 'node:v8');
    }
    // What the stand-in loads on first use: the same document as from the sources.
    const asYaml = await loaded(['validate', '-f', fleet, '-o', 'yaml']);
    assert.ok(
      asYaml.urls.some((u) => u.endsWith(`/chunks/${lazyFile('yaml')}.js`)),
      asYaml.urls.join('\n'),
    );
    assert.deepEqual(asYaml.r, await sources(['validate', '-f', fleet, '-o', 'yaml']));
    // A manifest that src/workspace/plain-yaml.ts leaves to js-yaml (a quoted key): js-yaml is
    // loaded on use, yaml is not, and the run is the sources' run.
    const quoted = join(tmp, 'quoted-key');
    mkdirSync(quoted);
    const basic = readFileSync(join(fleet, 'basic-vm.yaml'), 'utf8');
    assert.match(basic, /\n {4}proxmox\.sankofa\.io\/phase: /);
    writeFileSync(
      join(quoted, 'basic-vm.yaml'),
      basic.replace(/\n {4}proxmox\.sankofa\.io\/phase: /, '\n    "proxmox.sankofa.io/phase": '),
    );
    const byJsYaml = await loaded(['validate', '-f', quoted]);
    assert.ok(
      byJsYaml.urls.some((u) => u.endsWith(`/chunks/${lazyFile('js-yaml')}.js`)),
      byJsYaml.urls.join('\n'),
    );
    assert.ok(!byJsYaml.urls.some((u) => u.endsWith(`/chunks/${lazyFile('yaml')}.js`)), byJsYaml.urls.join('\n'));
    assert.deepEqual(byJsYaml.r, await sources(['validate', '-f', quoted]));
  });

  it('validate of broken manifests: the same problems with file:line:column (yaml and TypeBox bundled)', async () => {
    const dir = join(tmp, 'broken');
    mkdirSync(dir);
    const [file] = writeManifests(dir, [{ name: 'web-1', extra: '    cores: 2\n' }]);
    writeFileSync(
      join(dir, 'tab.yaml'),
      'apiVersion: proxmox.sankofa.io/v1alpha1\nkind: ProxmoxVM\nmetadata:\n\tname: x\n',
    );
    writeFileSync(
      join(dir, 'cpu.yaml'),
      readFileSync(file!, 'utf8')
        .replace('name: web-1\n  namespace', 'name: web-2\n  namespace')
        .replace('cpu: 1', 'cpu: many'),
    );
    const args = ['validate', '-f', dir];
    const [b, s] = await Promise.all([bundled(args), sources(args)]);
    assert.deepEqual(b, s);
    assert.equal(b.code, 1);
    const out = b.stdout + b.stderr;
    for (const f of ['web-1.yaml', 'tab.yaml', 'cpu.yaml']) assert.match(out, new RegExp(`${f}:\\d+:\\d+`), out);
  });

  it('controller against an unreachable cluster: the same error (the Kubernetes client from node_modules)', async () => {
    const kubeconfig = join(tmp, 'kubeconfig.yaml');
    writeFileSync(
      kubeconfig,
      [
        'apiVersion: v1',
        'kind: Config',
        'clusters: [{name: c, cluster: {server: "http://127.0.0.1:9"}}]',
        'users: [{name: u, user: {token: not-a-secret}}]',
        'contexts: [{name: x, context: {cluster: c, user: u}}]',
        'current-context: x',
        '',
      ].join('\n'),
    );
    const args = ['controller', '--kubeconfig', kubeconfig, '--health-port', '0', '--metrics-port', '0'];
    const [b, s] = await Promise.all([bundled(args), sources(args)]);
    assert.deepEqual(b, s);
    assert.equal(b.code, 1, b.stdout + b.stderr);
    assert.match(b.stderr, /kube-system/);
  });

  it('apply of a VM with no snippet loads neither the simulator nor ssh2', async () => {
    // ssh2 alone, with its WebAssembly, cost a 3,000-VM apply 18 MB of its peak memory when the
    // local commands' module still brought in demo's simulator.
    const sim = await startSimulator({ speed: 200, ephemeralPorts: true });
    try {
      const dir = join(tmp, 'apply-lean');
      mkdirSync(dir);
      writeFileSync(join(dir, 'providerconfig.yaml'), providerConfigYaml(sim, { ssh: false }));
      mkdirSync(join(dir, 'manifests'));
      writeManifests(join(dir, 'manifests'), [{ name: 'lean-1' }]);
      const seen = join(dir, 'resolved.json');
      const hook = writeResolveHook(dir, seen);
      const args = ['apply', '-f', join(dir, 'manifests'), '--config', join(dir, 'providerconfig.yaml')];
      const r = await node(
        ['--import', hook, join(pkg, 'bin/provider-proxmox.js'), ...args, '--state', join(dir, 'state.db'), '--yes'],
        work,
      );
      assert.equal(r.code, 0, r.stdout + r.stderr);
      const urls = JSON.parse(readFileSync(seen, 'utf8')) as string[];
      assert.ok(
        urls.some((u) => u.includes('/dist/chunks/')),
        urls.join('\n'),
      );
      for (const u of urls) {
        assert.doesNotMatch(u, /\/node_modules\/ssh2\//);
        assert.doesNotMatch(u, /\/chunks\/demo-/);
      }
    } finally {
      await sim.close();
    }
  });

  it('demo: the simulator on its default topology deploys two VMs; the default -f is the package examples/', async () => {
    const help = await bundled(['demo', '--help']);
    assert.equal(help.code, 0, help.stderr);
    const compact = help.stdout.replace(/\s+/g, '');
    assert.ok(compact.includes(`${join(pkg, 'examples/production')}"`), help.stdout);

    const dir = join(tmp, 'fleet');
    mkdirSync(dir);
    writeManifests(dir, [{ name: 'web-1' }, { name: 'web-2', site: 'site-2', node: 'r630-01' }]);
    const r = await bundled(['demo', '--speed', '200', '-f', dir], 60_000);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    assert.match(r.stdout, /all 2 VMs ready/);
    assert.match(r.stdout, /^web-2\s+.*site-2\s+r630-01\s+\d+\s+running\s/m);
  });
});
