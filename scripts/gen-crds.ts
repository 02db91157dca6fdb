/**
 * Writes the CustomResourceDefinitions generated from src/api (src/api/crd.ts) to deploy/crds,
 * the Helm chart's crds/ and package/crds. `--check` writes nothing and exits 1 when a committed file
 * differs from the generated one (test/api/crds.test.ts does the same in the test suite).
 *
 *   npm run gen:crds            # regenerate
 *   npm run gen:crds -- --check # verify
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CRD_DIRS, generatedFiles } from '../src/api/crd.ts';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const check = process.argv.includes('--check');
const files = generatedFiles();
const problems: string[] = [];

for (const dir of CRD_DIRS) {
  const abs = join(root, dir);
  const stale = existsSync(abs) ? readdirSync(abs).filter((f) => f.endsWith('.yaml') && !files.has(`${dir}/${f}`)) : [];
  for (const f of stale) {
    if (check) problems.push(`${dir}/${f}: not generated any more (delete it)`);
    else rmSync(join(abs, f));
  }
}
for (const [rel, text] of files) {
  const abs = join(root, rel);
  const current = existsSync(abs) ? readFileSync(abs, 'utf8') : undefined;
  if (current === text) continue;
  if (check) {
    problems.push(`${rel}: ${current === undefined ? 'missing' : 'differs from the generated CRD'}`);
  } else {
    mkdirSync(dirname(abs), { recursive: true });
    writeFileSync(abs, text);
    console.log(`wrote ${rel}`);
  }
}
if (problems.length) {
  console.error(`${problems.join('\n')}\nRun: npm run gen:crds`);
  process.exit(1);
}
if (check) console.log(`${files.size} CRD files up to date`);
