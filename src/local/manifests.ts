/**
 * Reading manifests from files and directories: multi-document YAML, every document with its
 * file and line, ProxmoxVM documents checked against the schema with messages that say which
 * file, which line, which field and what is allowed.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { Value } from 'typebox/value';
import { type Document, isMap, isPair, isScalar, LineCounter, parseAllDocuments, type YAMLMap } from 'yaml';
import { API_VERSION, ForProviderSchema, type ProxmoxVM, ProxmoxVMSpecSchema } from '../api/proxmoxvm.ts';

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
  /** Line of a field path like `spec.forProvider.memory`. */
  lineOf(field: string): { line: number; column: number } | undefined;
}

export class ManifestError extends Error {
  readonly problems: ManifestProblem[];
  constructor(problems: ManifestProblem[]) {
    super(problems.map(formatProblem).join('\n'));
    this.problems = problems;
  }
}

export function formatProblem(p: ManifestProblem): string {
  const where = `${p.file}${p.line ? `:${p.line}${p.column ? `:${p.column}` : ''}` : ''}`;
  return `${where}: ${p.field ? `${p.field}: ` : ''}${p.message}`;
}

/** Every .yaml/.yml file under the given files and directories, sorted. */
export function manifestFiles(paths: string[]): string[] {
  const out: string[] = [];
  const walk = (p: string) => {
    const st = statSync(p);
    if (st.isDirectory()) {
      for (const e of readdirSync(p).sort()) walk(join(p, e));
    } else if (/\.ya?ml$/i.test(p)) out.push(p);
  };
  for (const p of paths) {
    try {
      statSync(p);
    } catch {
      throw new ManifestError([{ file: p, message: 'no such file or directory' }]);
    }
    const st = statSync(p);
    if (st.isFile()) out.push(p);
    else walk(p);
  }
  return out;
}

function segmentsOf(field: string): Array<string | number> {
  return field
    .replace(/\[(\d+)\]/g, '.$1')
    .split('.')
    .filter(Boolean)
    .map((s) => (/^\d+$/.test(s) ? Number(s) : s));
}

/** Parse one file into documents (YAML syntax errors become problems with positions). */
export function readManifestFile(file: string, problems: ManifestProblem[], display = file): ManifestDoc[] {
  const text = readFileSync(file, 'utf8');
  const lc = new LineCounter();
  const docs = parseAllDocuments(text, { lineCounter: lc, prettyErrors: false });
  const out: ManifestDoc[] = [];
  for (const d of Array.isArray(docs) ? docs : [docs]) {
    const doc = d as Document.Parsed;
    if (doc.errors.length) {
      for (const e of doc.errors) {
        const pos = lc.linePos(e.pos[0]);
        problems.push({
          file: display,
          line: pos.line,
          column: pos.col,
          message: `YAML syntax error: ${e.message.split('\n')[0]}`,
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
    const lineOf = (field: string) => {
      const segs = segmentsOf(field);
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

/** Nearest allowed name for a "did you mean" hint (Levenshtein <= 3). */
export function didYouMean(word: string, allowed: string[]): string | undefined {
  let best: string | undefined;
  let bestD = 4;
  for (const a of allowed) {
    const d = levenshtein(word.toLowerCase(), a.toLowerCase());
    if (d < bestD) {
      bestD = d;
      best = a;
    }
  }
  return best;
}

function levenshtein(a: string, b: string): number {
  const dp = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let prev = dp[0]!;
    dp[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const tmp = dp[j]!;
      dp[j] = Math.min(dp[j]! + 1, dp[j - 1]! + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1));
      prev = tmp;
    }
  }
  return dp[b.length]!;
}

const FOR_PROVIDER_KEYS = Object.keys(ForProviderSchema.properties);

/** Schema problems of a ProxmoxVM document, each with its line and field. */
export function checkProxmoxVM(d: ManifestDoc): ManifestProblem[] {
  const out: ManifestProblem[] = [];
  const v = d.value;
  const at = (field: string) => d.lineOf(field) ?? { line: d.line, column: 1 };
  if (v.apiVersion !== API_VERSION) {
    out.push({
      file: d.file,
      ...at('apiVersion'),
      field: 'apiVersion',
      message: `expected ${API_VERSION}, found '${String(v.apiVersion)}'`,
    });
  }
  const md = v.metadata as Record<string, unknown> | undefined;
  if (!md || typeof md.name !== 'string' || !md.name) {
    out.push({ file: d.file, ...at('metadata'), field: 'metadata.name', message: 'required: the resource name' });
  } else if (!/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(md.name) || md.name.length > 253) {
    out.push({
      file: d.file,
      ...at('metadata.name'),
      field: 'metadata.name',
      message: `'${md.name}' is not a valid Kubernetes name (lower-case letters, digits, '-' and '.')`,
    });
  }
  const spec = v.spec;
  if (!spec || typeof spec !== 'object') {
    out.push({
      file: d.file,
      ...at('spec'),
      field: 'spec.forProvider',
      message: 'required: spec.forProvider (the VM to create)',
    });
    return out;
  }
  for (const e of Value.Errors(ProxmoxVMSpecSchema, spec)) {
    const path = e.instancePath
      .split('/')
      .slice(1)
      .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
    let field = ['spec', ...path]
      .map((s, i) => (/^\d+$/.test(s) && i > 0 ? `[${s}]` : s))
      .join('.')
      .replace(/\.\[/g, '[');
    let message = e.message;
    if (e.keyword === 'additionalProperties') {
      const extra = ((e.params as { additionalProperties?: string[] }).additionalProperties ?? []) as string[];
      for (const k of extra) {
        const f = `${field}.${k}`;
        const allowed = path.length === 1 && path[0] === 'forProvider' ? FOR_PROVIDER_KEYS : [];
        const hint = allowed.length ? didYouMean(k, allowed) : undefined;
        out.push({
          file: d.file,
          ...at(f),
          field: f,
          message: `unknown field '${k}'${hint ? ` (did you mean '${hint}'?)` : ''}`,
        });
      }
      continue;
    }
    if (e.keyword === 'boolean') continue; // reported by the additionalProperties entry
    if (e.keyword === 'required') {
      const req = ((e.params as { requiredProperties?: string[] }).requiredProperties ?? []) as string[];
      for (const k of req)
        out.push({ file: d.file, ...at(field), field: `${field}.${k}`.replace(/^\./, ''), message: 'required' });
      continue;
    }
    if (e.keyword === 'anyOf' || e.keyword === 'oneOf')
      message = 'expected a quantity like 4Gi / 512Mi / 20Gi, or a whole number';
    if (e.keyword === 'pattern' && /memory|disk|size/.test(field))
      message = 'expected a quantity like 4Gi / 512Mi / 20Gi, or a whole number';
    const found = path.reduce<unknown>(
      (o, k) => (o && typeof o === 'object' ? (o as Record<string, unknown>)[k] : undefined),
      spec,
    );
    if (field === 'spec') field = 'spec';
    out.push({
      file: d.file,
      ...at(field),
      field,
      message: `${message}${found !== undefined && typeof found !== 'object' ? `; found ${JSON.stringify(found)}` : ''}`,
    });
  }
  // Collapse duplicate messages for one field (a union reports each branch).
  const seen = new Set<string>();
  return out.filter((p) => {
    const k = `${p.field}|${p.message}`;
    if (seen.has(k)) return false;
    seen.add(k);
    return true;
  });
}

export interface LoadedManifests {
  vms: Array<{ vm: ProxmoxVM; doc: ManifestDoc }>;
  others: ManifestDoc[];
  problems: ManifestProblem[];
}

/** Load every manifest under `paths`; schema problems are collected, not thrown. */
export function loadManifests(paths: string[], cwd = process.cwd()): LoadedManifests {
  const problems: ManifestProblem[] = [];
  const vms: LoadedManifests['vms'] = [];
  const others: ManifestDoc[] = [];
  const seen = new Map<string, ManifestDoc>();
  for (const file of manifestFiles(paths)) {
    const display = relative(cwd, file) || file;
    for (const d of readManifestFile(file, problems, display)) {
      if (d.kind !== 'ProxmoxVM') {
        others.push(d);
        continue;
      }
      const p = checkProxmoxVM(d);
      problems.push(...p);
      if (p.length) continue;
      const vm = d.value as unknown as ProxmoxVM;
      vm.metadata.namespace ??= 'default';
      const key = `${vm.metadata.namespace}/${vm.metadata.name}`;
      const prev = seen.get(key);
      if (prev) {
        problems.push({
          file: d.file,
          ...(d.lineOf('metadata.name') ?? { line: d.line }),
          field: 'metadata.name',
          message: `duplicate ProxmoxVM ${key} (also in ${prev.file}:${prev.line})`,
        });
        continue;
      }
      seen.set(key, d);
      vms.push({ vm, doc: d });
    }
  }
  return { vms, others, problems };
}
