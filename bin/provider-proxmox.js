#!/usr/bin/env node
// The installed `provider-proxmox`: runs the bundle when the package was built (`npm run build`,
// which `npm pack` runs first: dist/cli/main.js, see scripts/build.ts), otherwise the TypeScript
// sources directly (Node >= 22.18 strips types natively; the project pins Node 24). The compile
// cache is turned on here, before either is loaded, so that later runs find main.ts in it too:
// with every TypeScript file of a run in the cache, Node's type stripper is not even started,
// which alone takes longer than Node's own start-up (bench/startup.ts, `sources-bin`). main.ts
// turns the cache on as well, for `node src/cli/main.ts`; a second call changes nothing. fs is
// taken with getBuiltinModule, not imported: an import of node:fs builds its ES module facade,
// which loads fs's streams and fs/promises, about 3 ms (scripts/build.ts, fsByRequire).
import { enableCompileCache } from 'node:module';

const { existsSync } = process.getBuiltinModule('node:fs');

enableCompileCache?.();
const built = new URL('../dist/cli/main.js', import.meta.url);
await import(existsSync(built) ? built.href : new URL('../src/cli/main.ts', import.meta.url).href);
