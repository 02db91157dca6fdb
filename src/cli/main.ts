/**
 * The `provider-proxmox` entry point (`node src/cli/main.ts`, bin/provider-proxmox.js, and the
 * bundle's dist/cli/main.js): turns on Node's compile cache, restarts a long-running command with
 * V8's young generation bounded, then loads the commander wiring (src/cli/program.ts) and runs it
 * (which sizes V8's old generation for the commands that run long). Nothing else is imported
 * statically here, because every module of the static graph is compiled before the first line of
 * this file runs: only what is loaded after enableCompileCache() is cached. This file itself is
 * not (it is compiled before it can ask), so `node src/cli/main.ts` still starts Node's type
 * stripper on every run; the bin, which turns the cache on first, and the bundle, which has no
 * TypeScript, do not.
 */
import { enableCompileCache } from 'node:module';

// V8's compiled code (and the stripped TypeScript) of every module loaded from here on is kept in
// Node's compile cache ($NODE_COMPILE_CACHE, default <tmpdir>/node-compile-cache), so later runs
// skip the compile: about half the start-up of a command with many modules. A cache that cannot be
// written is skipped; NODE_DISABLE_COMPILE_CACHE=1 turns it off.
enableCompileCache?.();

// apply, delete, demo, sim and controller restart here, once, with V8's young generation bounded
// (src/cli/young-generation.ts says why); nothing has run yet that a restart would lose.
(await import('./young-generation.ts')).boundYoungGeneration();

const { runProgram } = await import('./program.ts');
await runProgram(process.argv);
