/**
 * The `provider-proxmox` entry point (`node src/cli/main.ts`, bin/provider-proxmox.js, and the
 * bundle's dist/cli/main.js): turns on Node's compile cache, then loads the commander wiring
 * (src/cli/program.ts) and runs it. Nothing else is imported statically here, because every
 * module of the static graph is compiled before the first line of this file runs: only what is
 * loaded after enableCompileCache() is cached. This file itself is not (it is compiled before it
 * can ask), so `node src/cli/main.ts` still starts Node's type stripper on every run; the bin,
 * which turns the cache on first, and the bundle, which has no TypeScript, do not.
 */
import { enableCompileCache } from 'node:module';
import { setFlagsFromString } from 'node:v8';

// V8's compiled code (and the stripped TypeScript) of every module loaded from here on is kept in
// Node's compile cache ($NODE_COMPILE_CACHE, default <tmpdir>/node-compile-cache), so later runs
// skip the compile: about half the start-up of a command with many modules. A cache that cannot be
// written is skipped; NODE_DISABLE_COMPILE_CACHE=1 turns it off.
enableCompileCache?.();

// The heap grows by a fifth over what survived a collection, not V8's default (several times
// more for a young heap): an apply of thousands of VMs makes much short-lived garbage (every bulk
// list parsed), and the default let the heap, and the RSS, run far past what is live
// (bench/local-apply.ts, 1,000 VMs: peak RSS 363 -> 268 MB, CPU 13.0 -> 12.6 s). The controller
// runs with the same flag (Dockerfile). It takes effect for the heap's next sizing.
setFlagsFromString('--heap-growing-percent=20');

const { runProgram } = await import('./program.ts');
await runProgram(process.argv);
