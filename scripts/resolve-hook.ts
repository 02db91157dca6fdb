/**
 * A preload (`node --import <file>`) that records every module URL a run resolves, ES modules and
 * require() alike (module.registerHooks), and writes them as a JSON array at exit (synchronously:
 * nothing async runs then). bench/startup.ts counts modules with it; test/cli/bundle.test.ts checks
 * which ones a command loads.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** Write the preload into `dir`; returns its path. The URLs go to `out`. */
export function writeResolveHook(dir: string, out: string): string {
  const hook = join(dir, 'resolved-modules.mjs');
  writeFileSync(
    hook,
    `import { registerHooks } from 'node:module';
import { writeFileSync } from 'node:fs';
const seen = new Set();
registerHooks({ resolve(specifier, context, next) { const r = next(specifier, context); seen.add(r.url); return r; } });
process.on('exit', () => writeFileSync(${JSON.stringify(out)}, JSON.stringify([...seen])));
`,
  );
  return hook;
}
