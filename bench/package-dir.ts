/**
 * bench/package-dir: a temporary package laid out as `npm pack` ships one (bin/ and package.json
 * copied, node_modules/ and examples/ of the repository linked), for the benchmarks that measure
 * the CLI as it is installed: with the bundle of scripts/build.ts in dist/ (bundlePackage), the
 * bin runs it, as an installed `provider-proxmox` does.
 */
import { cpSync, mkdirSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildBundle } from '../scripts/build.ts';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** A package with bin/, package.json, and node_modules/ and examples/ of the repository, at `parent`/`name`. */
export function packageDir(parent: string, name: string): string {
  const pkg = join(parent, name);
  mkdirSync(pkg);
  cpSync(join(ROOT, 'bin'), join(pkg, 'bin'), { recursive: true });
  cpSync(join(ROOT, 'package.json'), join(pkg, 'package.json'));
  symlinkSync(join(ROOT, 'node_modules'), join(pkg, 'node_modules'));
  symlinkSync(join(ROOT, 'examples'), join(pkg, 'examples'));
  return pkg;
}

/** The bundle, built afresh, in a package at `parent`/`name`: the package, its bin (what users run) and the build's time. */
export async function bundlePackage(
  parent: string,
  name: string,
): Promise<{ pkg: string; bin: string; buildMs: number }> {
  const pkg = packageDir(parent, name);
  const build = await buildBundle({ outDir: join(pkg, 'dist') });
  return { pkg, bin: join(pkg, 'bin/provider-proxmox.js'), buildMs: build.ms };
}
