/**
 * The documents of one manifest file, each with its file and line, and where each of its fields
 * is (`lineOf`) for the messages of src/workspace/manifests.ts and src/fleet/validate.ts.
 *
 * A file is read twice over only when it has to be. First by src/workspace/fast-yaml.ts, which
 * gives the values and nothing else, and only when they are certainly those of the `yaml` package;
 * the positions come from `yaml`'s Document nodes, built on the first call of `line` or `lineOf` of
 * any document of the file, which happens only when a problem is reported. Otherwise (a syntax
 * error, a construct fast-yaml leaves to `yaml`) the file is read with `yaml` alone, as it always was.
 * validate of the seed fleet reports nothing and so never builds a Document
 * (bench/startup.ts: what that saves).
 */
import { readFileSync } from 'node:fs';
import { type Document, isMap, isPair, isScalar, isSeq, LineCounter, parseAllDocuments, type YAMLMap } from 'yaml';
import { fastDocuments } from './fast-yaml.ts';

export interface ManifestProblem {
  file: string;
  line?: number;
  column?: number;
  field?: string;
  message: string;
}

export interface ManifestDoc {
  file: string;
  line: number;
  kind: string;
  apiVersion: string;
  value: Record<string, unknown>;
  /**
   * Line of a field path like `spec.forProvider.memory`: where its value starts, or with
   * `{ key: true }` where its key is (an unknown or missing field is best shown at its key).
   */
  lineOf(field: string, opts?: { key?: boolean }): { line: number; column: number } | undefined;
}

function segmentsOf(field: string): Array<string | number> {
  // Annotation and label keys hold dots (proxmox.sankofa.io/phase): the rest of the path is one key.
  const m = /^(metadata\.(?:annotations|labels))\.(.+)$/.exec(field);
  if (m) return [...segmentsOf(m[1]!), m[2]!];
  return field
    .replace(/\[(\d+)\]/g, '.$1')
    .split('.')
    .filter(Boolean)
    .map((s) => (/^\d+$/.test(s) ? Number(s) : s));
}

const YAML_HINTS: Partial<Record<string, string>> = {
  TAB_AS_INDENT: ' (indent with spaces)',
  BLOCK_AS_IMPLICIT_KEY: " (is the next line indented too far, or does an unquoted value contain ': '? quote it)",
  DUPLICATE_KEY: ' (the same key twice in one mapping)',
};

/** `text` read with `yaml`: every document with its positions (YAML syntax errors become problems). */
function readWithPositions(text: string, problems: ManifestProblem[], display: string): ManifestDoc[] {
  const lc = new LineCounter();
  const docs = parseAllDocuments(text, { lineCounter: lc, prettyErrors: false });
  const out: ManifestDoc[] = [];
  for (const d of Array.isArray(docs) ? docs : [docs]) {
    const doc = d as Document.Parsed;
    if (doc.errors.length) {
      for (const [i, e] of doc.errors.entries()) {
        // After a first error the parser reads the following lines of the mapping as broken keys:
        // those follow-on errors say nothing new (a tab on one line gave a dozen of them).
        if (i > 0 && (e.code === 'BLOCK_AS_IMPLICIT_KEY' || e.code === 'MULTILINE_IMPLICIT_KEY')) continue;
        const pos = lc.linePos(e.pos[0]);
        problems.push({
          file: display,
          line: pos.line,
          column: pos.col,
          message: `YAML syntax error: ${e.message.split('\n')[0]}${YAML_HINTS[e.code] ?? ''}`,
        });
      }
      continue;
    }
    const value = doc.toJS() as unknown;
    if (value === null || value === undefined) continue;
    const start = doc.contents?.range ? lc.linePos(doc.contents.range[0]).line : 1;
    if (typeof value !== 'object' || Array.isArray(value)) {
      problems.push({
        file: display,
        line: start,
        message: 'expected a Kubernetes object (a mapping with apiVersion and kind)',
      });
      continue;
    }
    const v = value as Record<string, unknown>;
    const pos = (range: [number, number, number] | undefined | null) => {
      if (!range) return undefined;
      const p = lc.linePos(range[0]);
      return { line: p.line, column: p.col };
    };
    // Where the key of a field is; for a missing field, the key of the nearest parent that exists.
    const keyPos = (segs: Array<string | number>): { line: number; column: number } | undefined => {
      if (!segs.length) return pos(doc.contents?.range);
      const parent = segs.length === 1 ? doc.contents : doc.getIn(segs.slice(0, -1), true);
      const last = segs[segs.length - 1];
      if (isMap(parent)) {
        const pair = parent.items.find((p) => isPair(p) && isScalar(p.key) && p.key.value === last);
        if (pair && isScalar(pair.key) && pair.key.range) return pos(pair.key.range);
      } else if (isSeq(parent) && typeof last === 'number') {
        const item = parent.items[last] as { range?: [number, number, number] } | undefined;
        if (item?.range) return pos(item.range);
      }
      return keyPos(segs.slice(0, -1));
    };
    const lineOf = (field: string, opts: { key?: boolean } = {}) => {
      const segs = segmentsOf(field);
      if (opts.key) return keyPos(segs);
      for (let n = segs.length; n >= 0; n--) {
        const node = n === 0 ? doc.contents : doc.getIn(segs.slice(0, n), true);
        if (!node || typeof node !== 'object') continue;
        if (n === segs.length - 1 && isMap(node)) {
          const key = segs[n];
          const pair = (node as YAMLMap).items.find((p) => isPair(p) && isScalar(p.key) && p.key.value === key);
          if (pair && isPair(pair) && isScalar(pair.key) && pair.key.range) {
            const pos = lc.linePos(pair.key.range[0]);
            return { line: pos.line, column: pos.col };
          }
        }
        const range = (node as { range?: [number, number, number] }).range;
        if (range) {
          const pos = lc.linePos(range[0]);
          return { line: pos.line, column: pos.col };
        }
      }
      return undefined;
    };
    out.push({
      file: display,
      line: start,
      kind: String(v.kind ?? ''),
      apiVersion: String(v.apiVersion ?? ''),
      value: v,
      lineOf,
    });
  }
  return out;
}

/**
 * Parse one file into documents (YAML syntax errors become problems with positions). `fast: false`
 * reads it with `yaml` alone (test/workspace/fast-yaml.test.ts: both ways give the same).
 */
export function readManifestFile(
  file: string,
  problems: ManifestProblem[],
  display = file,
  opts: { fast?: boolean } = {},
): ManifestDoc[] {
  const text = readFileSync(file, 'utf8');
  const values = opts.fast === false ? undefined : fastDocuments(text);
  if (!values) return readWithPositions(text, problems, display);
  let located: ManifestDoc[] | undefined;
  // The same documents in the same order: fast-yaml returns only what `yaml` reads alike.
  const at = (i: number) => {
    located ??= readWithPositions(text, [], display);
    return located[i];
  };
  return values.map((v, i) => ({
    file: display,
    get line() {
      return at(i)?.line ?? 1;
    },
    kind: String(v.kind ?? ''),
    apiVersion: String(v.apiVersion ?? ''),
    value: v,
    lineOf: (field, opts) => at(i)?.lineOf(field, opts),
  }));
}
