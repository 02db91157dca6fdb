/**
 * Generates src/sim/schema/generated/extra-<profile>.json: the parameter schemas of the methods the
 * simulator serves that scripts/gen-pve-schema.ts leaves out of pve-<profile>.json (its
 * `keepPath` drops the directory indexes `/`, `/access`, `/cluster`, `lxc`, `subscription` and
 * `replication` under a node, `/cluster/backup-info`, and `vzdump`). The loader (./index.ts) reads
 * both files; a path is in one or the other, never both. Run: `npm run gen:sim-coverage` (which
 * runs this first), or `node src/sim/schema/gen-extra.ts`.
 *
 * The output has exactly the form of pve-<profile>.json because it is made by the same function,
 * scripts/gen-pve-schema.ts generateProfile(): the extra paths are handed to it under a `/pools`
 * prefix (a prefix its keepPath keeps whole) and the prefix is taken off again afterwards. So
 * patterns, formats and `[n]` families are converted by one piece of code, not two. Folding
 * EXTRA_METHODS into keepPath would make this file unnecessary.
 */
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { defaultApiDir, generateProfile, loadSources, PROFILES } from '../../../scripts/gen-pve-schema.ts';

/**
 * `METHOD path` of each method that goes into the extra file (where the release has it). Only
 * served methods: a method without a schema answers 501 like any method PVE does not know, which
 * is what the simulator answers for every method it does not serve.
 */
export const EXTRA_METHODS: readonly string[] = [
  'GET /',
  'GET /access',
  'GET /cluster',
  'GET /cluster/backup-info',
  'GET /cluster/backup-info/not-backed-up',
  'GET /nodes/{node}/lxc',
  'GET /nodes/{node}/replication',
  'GET /nodes/{node}/subscription',
  'POST /nodes/{node}/vzdump',
];

/**
 * `GET /`: PVE::API2 `index` (pve-manager PVE/API2.pm at 14a22df3; the same in 6.4-7.4), which the
 * published API description leaves out because it starts below the root: no parameters
 * (`additionalProperties => 0, properties => {}`), tokens allowed (no `allowtoken => 0`).
 */
const ROOT_INDEX = {
  path: '/',
  method: 'GET',
  allowtoken: true,
  protected: false,
  props: {},
  additionalProperties: false,
};

const PREFIX = '/pools';
const SOURCES: Record<string, string> = {
  '6.4': 'apidoc-6.4-15.json',
  '7.4': 'apidoc-7.4-16.json',
  '8.4': 'apidoc-8.4.5.json',
  '9.2': 'snapshot-9.2.3.json',
};

export const EXTRA_OUT_DIR = fileURLToPath(new URL('./generated/', import.meta.url));

/** The four extra files, keyed by file name. */
export function generateExtra(dir: string = defaultApiDir()): Map<string, string> {
  const src = loadSources(dir);
  const keep = new Set(EXTRA_METHODS);
  const out = new Map<string, string>();
  for (const p of PROFILES) {
    const methods = [...src[p].filter((m) => keep.has(`${m.method} ${m.path}`)), ROOT_INDEX].map((m) => ({
      ...m,
      path: PREFIX + m.path,
    }));
    const text = generateProfile(p, methods, SOURCES[p]!).replace(
      /"path":"\/pools(\/[^"]*)"/g,
      (_all, rest: string) => `"path":${JSON.stringify(rest)}`,
    );
    out.set(`extra-${p}.json`, text);
  }
  return out;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  for (const [name, text] of generateExtra()) {
    writeFileSync(EXTRA_OUT_DIR + name, text);
    console.log(`${name}: ${text.length} bytes`);
  }
}
