#!/usr/bin/env node
// The installed `provider-proxmox`: runs the bundle when the package was built (`npm run build`,
// which `npm pack` runs first: dist/cli/main.js, see scripts/build.ts), otherwise the TypeScript
// sources directly (Node >= 22.18 strips types natively; the project pins Node 24). The compile
// cache is turned on here, before either is loaded, so that later runs find main.ts in it too:
// with every TypeScript file of a run in the cache, Node's type stripper is not even started,
// which alone takes longer than Node's own start-up (bench/startup.ts, `sources-bin`). main.ts
// turns the cache on as well, for `node src/cli/main.ts`; a second call changes nothing. fs is
// taken with getBuiltinModule, not imported: an import of node:fs builds its ES module facade,
// which loads fs's streams and fs/promises, about 3 ms (scripts/build.ts, fsByRequire). node:module
// is taken so too, so that an older Node reaches the version check below instead of failing to
// link a name it lacks.
const [major, minor] = process.versions.node.split('.').map(Number);
if (major < 22 || (major === 22 && minor < 19)) {
  process.stderr.write(
    `provider-proxmox: needs Node.js 22.19 or later (package.json "engines"); this is ${process.version}\n`,
  );
  process.exit(1);
}
const { enableCompileCache } = process.getBuiltinModule('node:module');
const { existsSync } = process.getBuiltinModule('node:fs');

enableCompileCache?.();
const built = new URL('../dist/cli/main.js', import.meta.url);
await import(existsSync(built) ? built.href : new URL('../src/cli/main.ts', import.meta.url).href);
