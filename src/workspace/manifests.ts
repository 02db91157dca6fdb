/**
 * Reading manifests from files and directories: multi-document YAML, every document with its
 * file and line, ProxmoxVM documents checked against the schema with messages that say which
 * file, which line, which field and what is allowed. Names and namespaces of every object are
 * checked as the Kubernetes API server would (no API server sees these files), before they become
 * state-file keys or a VM's ownership marker.
 */
import { readdirSync, type Stats, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { Value } from 'typebox/value';
import {
  DNS1123_SUBDOMAIN_PATTERN,
  nameProblem,
  POLL_INTERVAL_ANNOTATION,
  pollIntervalProblem,
} from '../api/metadata.ts';
import { IMAGE_KIND, imageSpecProblems, type ProxmoxImage } from '../api/proxmoximage.ts';
import { type ProxmoxTemplate, TEMPLATE_KIND } from '../api/proxmoxtemplate.ts';
import { API_VERSION, BRIDGE_PATTERN, GROUP, type ProxmoxVM } from '../api/proxmoxvm.ts';
import { vmSchemas } from '../api/proxmoxvm-schema.ts';
import { decimalSizes } from '../api/quantity.ts';
import { type ManifestDoc, type ManifestProblem, readManifestFile } from './documents.ts';
import { type CheckedKind, specPasses, specSchemas } from './spec-check.ts';

export type { ManifestDoc, ManifestProblem } from './documents.ts';
export { readManifestFile } from './documents.ts';

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

/** A warning (LoadedManifests.warnings) as validate, plan and apply print it. */
export function formatWarning(w: ManifestProblem): string {
  return `warning: ${formatProblem(w)}`;
}

/**
 * Every .yaml/.yml file under the given files and directories, sorted. A directory's entries come
 * with their types (no stat per file, a system call each); a symbolic link is followed with stat.
 */
export function manifestFiles(paths: string[]): string[] {
  const out: string[] = [];
  const walk = (dir: string) => {
    const entries = readdirSync(dir, { withFileTypes: true }).sort((a, b) =>
      a.name < b.name ? -1 : a.name > b.name ? 1 : 0,
    );
    for (const e of entries) {
      const p = join(dir, e.name);
      if (e.isSymbolicLink() ? statSync(p).isDirectory() : e.isDirectory()) walk(p);
      else if (/\.ya?ml$/i.test(p)) out.push(p);
    }
  };
  for (const p of paths) {
    let st: Stats;
    try {
      st = statSync(p);
    } catch {
      throw new ManifestError([{ file: p, message: 'no such file or directory' }]);
    }
    if (st.isFile()) out.push(p);
    else if (st.isDirectory()) walk(p);
    else if (/\.ya?ml$/i.test(p)) out.push(p);
  }
  return out;
}

/**
 * Names other tools give a field of this one (Proxmox's own `qm` options, Terraform providers'),
 * which are not near it in spelling: `cores` is three edits from `node`, none from what is meant.
 */
const FIELD_ALIASES: Record<string, string> = {
  cores: 'cpu',
  vcpus: 'cpu',
  sockets: 'cpu',
  cpus: 'cpu',
  ram: 'memory',
  mem: 'memory',
  bridge: 'network',
  net0: 'networks',
  scsi0: 'disk',
  size: 'disk',
  disk_size: 'disk',
  target_node: 'node',
  clone: 'template',
  sshkeys: 'cloudInit',
  ciuser: 'cloudInit',
};

/** The field `word` stands for in other tools, when `allowed` has it. */
function fieldAlias(word: string, allowed: string[]): string | undefined {
  const to = FIELD_ALIASES[word.toLowerCase()];
  return to && allowed.includes(to) ? to : undefined;
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

/** The sub-schema an error's schemaPath (`#/properties/forProvider/properties/cpu`) points at. */
function schemaAt(schemaPath: string, root: unknown): Record<string, unknown> | undefined {
  let s: unknown = root;
  for (const seg of schemaPath.replace(/^#/, '').split('/').filter(Boolean)) {
    s =
      s && typeof s === 'object'
        ? (s as Record<string, unknown>)[seg.replace(/~1/g, '/').replace(/~0/g, '~')]
        : undefined;
  }
  return s && typeof s === 'object' ? (s as Record<string, unknown>) : undefined;
}

/** Kinds whose objects are not in a namespace (a namespace on them is ignored by Kubernetes; here too). */
const CLUSTER_SCOPED = new Set(['Namespace', 'ClusterProviderConfig', 'ClusterProviderConfigUsage', 'ClusterRole']);

/**
 * metadata.name (a DNS-1123 subdomain; a label for a Namespace) and metadata.namespace (a label)
 * of any Kubernetes object, and the poll-interval annotation of ours. A missing name is left to
 * the kind's own check (a ProxmoxVM requires one; somebody else's document is not ours to judge).
 */
export function checkMetadata(d: ManifestDoc): ManifestProblem[] {
  if (!d.kind || !d.apiVersion) return [];
  const out: ManifestProblem[] = [];
  const at = (field: string) => d.lineOf(field) ?? { line: d.line, column: 1 };
  const md = d.value.metadata;
  if (md === undefined || md === null) return out;
  if (typeof md !== 'object' || Array.isArray(md)) {
    out.push({
      file: d.file,
      ...at('metadata'),
      field: 'metadata',
      message: 'must be a mapping (name, namespace, labels...)',
    });
    return out;
  }
  const m = md as Record<string, unknown>;
  if (m.name !== undefined) {
    const problem = nameProblem(m.name, d.kind === 'Namespace' ? 'label' : 'subdomain');
    if (problem) out.push({ file: d.file, ...at('metadata.name'), field: 'metadata.name', message: problem });
  }
  if (m.namespace !== undefined && !CLUSTER_SCOPED.has(d.kind)) {
    const problem = nameProblem(m.namespace, 'label');
    if (problem) out.push({ file: d.file, ...at('metadata.namespace'), field: 'metadata.namespace', message: problem });
  }
  const annotations = m.annotations;
  if (d.apiVersion.startsWith(`${GROUP}/`) && annotations && typeof annotations === 'object') {
    const poll = (annotations as Record<string, unknown>)[POLL_INTERVAL_ANNOTATION];
    const problem = poll === undefined ? undefined : pollIntervalProblem(poll);
    const field = `metadata.annotations.${POLL_INTERVAL_ANNOTATION}`;
    if (problem) out.push({ file: d.file, ...at(field), field, message: problem });
  }
  return out;
}

/** Schema problems of a ProxmoxVM document (its metadata included), each with its line and field. */
export function checkProxmoxVM(d: ManifestDoc): ManifestProblem[] {
  return checkManaged(d, 'ProxmoxVM');
}

/** What the forProvider of each of our managed kinds describes (their schemas: specSchemas()). */
const MANAGED_KINDS: Record<CheckedKind, string> = {
  ProxmoxVM: 'the VM to create',
  [IMAGE_KIND]: 'the image to download',
  [TEMPLATE_KIND]: 'the template to build',
};

/** Schema problems of a ProxmoxImage or ProxmoxTemplate document, as checkProxmoxVM's. */
export function checkImageKind(d: ManifestDoc): ManifestProblem[] {
  const out = checkManaged(d, d.kind as CheckedKind);
  if (out.length || d.kind !== IMAGE_KIND) return out;
  const fp = (d.value.spec as ProxmoxImage['spec']).forProvider;
  for (const p of imageSpecProblems(fp))
    out.push({ file: d.file, ...(d.lineOf(p.field) ?? { line: d.line }), field: p.field, message: p.message });
  return out;
}

function checkManaged(d: ManifestDoc, kind: CheckedKind): ManifestProblem[] {
  const what = MANAGED_KINDS[kind];
  const out: ManifestProblem[] = [];
  const v = d.value;
  const at = (field: string, key = false) => d.lineOf(field, { key }) ?? { line: d.line, column: 1 };
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
  }
  out.push(...checkMetadata(d));
  const spec = v.spec;
  if (!spec || typeof spec !== 'object') {
    out.push({
      file: d.file,
      ...at('spec'),
      field: 'spec.forProvider',
      message: `required: spec.forProvider (${what})`,
    });
    return out;
  }
  // A spec that passes has nothing to describe, and reads no schema (src/workspace/spec-check.ts).
  const specSchema = specPasses(kind, spec) ? undefined : specSchemas()[kind];
  for (const e of specSchema ? Value.Errors(specSchema, spec) : []) {
    const path = e.instancePath
      .split('/')
      .slice(1)
      .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
    let field = ['spec', ...path]
      .map((s, i) => (/^\d+$/.test(s) && i > 0 ? `[${s}]` : s))
      .join('.')
      .replace(/\.\[/g, '[');
    const schema = schemaAt(e.schemaPath, specSchema);
    let message = e.message;
    let hint = '';
    if (e.keyword === 'additionalProperties') {
      const extra = ((e.params as { additionalProperties?: string[] }).additionalProperties ?? []) as string[];
      const allowed = Object.keys((schema?.properties as Record<string, unknown> | undefined) ?? {});
      for (const k of extra) {
        const f = `${field}.${k}`;
        const hint = fieldAlias(k, allowed) ?? didYouMean(k, allowed);
        // `spec.cpu`: a forProvider field one level too high (forProvider: forgotten or mis-indented).
        const misplaced =
          !hint &&
          path.length === 0 &&
          kind === 'ProxmoxVM' &&
          Object.hasOwn(vmSchemas().ForProviderSchema.properties, k);
        out.push({
          file: d.file,
          ...at(f, true),
          field: f,
          message: `unknown field '${k}'${hint ? ` (did you mean '${hint}'?)` : misplaced ? ` (it belongs under spec.forProvider)` : allowed.length ? ` (allowed: ${allowed.join(', ')})` : ''}`,
        });
      }
      continue;
    }
    if (/\/(anyOf|oneOf)\/\d+$/.test(e.schemaPath)) continue; // one branch of a union: the union reports it
    if (e.keyword === 'boolean') continue; // reported by the additionalProperties entry
    if (e.keyword === 'required') {
      const req = ((e.params as { requiredProperties?: string[] }).requiredProperties ?? []) as string[];
      for (const k of req)
        out.push({
          file: d.file,
          ...at(field, true),
          field: `${field}.${k}`.replace(/^\./, ''),
          message: `required${field === 'spec' && k === 'forProvider' ? ` (${what})` : ''}`,
        });
      continue;
    }
    const found = path.reduce<unknown>(
      (o, k) => (o && typeof o === 'object' ? (o as Record<string, unknown>)[k] : undefined),
      spec,
    );
    const min = schema?.minimum as number | undefined;
    const max = schema?.maximum as number | undefined;
    const range =
      min !== undefined && max !== undefined
        ? ` between ${min} and ${max}`
        : min !== undefined
          ? ` >= ${min}`
          : max !== undefined
            ? ` <= ${max}`
            : '';
    if (e.keyword === 'anyOf' || e.keyword === 'oneOf') {
      const branches = ((schema?.anyOf ?? schema?.oneOf ?? []) as Array<Record<string, unknown>>).filter(Boolean);
      if (branches.length && branches.every((b) => b.const !== undefined))
        message = `must be one of: ${branches.map((b) => String(b.const)).join(', ')}`;
      else {
        message = 'expected a quantity like 4Gi / 512Mi / 20Gi, or a whole number';
        const unit = typeof found === 'string' ? /^(\d+(?:\.\d+)?)\s*([KMGTP])i?B$/i.exec(found.trim()) : null;
        if (unit) hint = ` (did you mean '${unit[1]}${unit[2]!.toUpperCase()}i'?)`;
      }
    } else if (e.keyword === 'pattern' && /memory|disk|size/.test(field))
      message = 'expected a quantity like 4Gi / 512Mi / 20Gi, or a whole number';
    else if ((e.keyword === 'pattern' || e.keyword === 'maxLength') && schema?.pattern === DNS1123_SUBDOMAIN_PATTERN) {
      // A reference to another object: the same words as for metadata.name (the value included).
      const problem = nameProblem(found, 'subdomain');
      if (problem) {
        out.push({ file: d.file, ...at(field), field, message: problem });
        continue;
      }
    } else if (e.keyword === 'pattern' && schema?.pattern === BRIDGE_PATTERN)
      message = 'expected a Linux bridge name like vmbr0: a letter, then up to 14 letters, digits, _ . or -';
    else if (e.keyword === 'minimum' || e.keyword === 'maximum') message = `must be${range}`;
    else if (e.keyword === 'type' && (e.params as { type?: string }).type === 'integer') {
      message = `must be a whole number${range}`;
      // `cpu: "2"`: a number quoted in the YAML is a string.
      if (typeof found === 'string' && /^\d+$/.test(found.trim())) hint = ` (write ${found.trim()} without quotes)`;
    } else if (
      e.keyword === 'type' &&
      (e.params as { type?: string }).type === 'boolean' &&
      typeof found === 'string'
    ) {
      // YAML 1.2 reads yes/no/on/off as strings, not booleans (YAML 1.1 did).
      const yes = /^(yes|y|on|true)$/i.test(found.trim());
      const no = /^(no|n|off|false)$/i.test(found.trim());
      if (yes || no) hint = ` (did you mean ${yes}?)`;
    }
    if (field === 'spec') field = 'spec';
    out.push({
      file: d.file,
      ...at(field),
      field,
      message: `${message}${found !== undefined && typeof found !== 'object' ? `; found ${JSON.stringify(found)}` : ''}${hint}`,
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
  /** ProxmoxImages and ProxmoxTemplates without schema problems (apply runs them before the VMs). */
  images: Array<{ obj: ProxmoxImage; doc: ManifestDoc }>;
  templates: Array<{ obj: ProxmoxTemplate; doc: ManifestDoc }>;
  others: ManifestDoc[];
  /** ProxmoxVM documents with schema problems (in `problems`); `validate` checks what it can of them. */
  rejected: ManifestDoc[];
  problems: ManifestProblem[];
  /** What is valid but rarely meant (sizes in decimal units: sizeWarnings); shown, never refused. */
  warnings: ManifestProblem[];
}

/** A ProxmoxVM's sizes in decimal units (`memory: 4G`), each at its line, with its binary spelling. */
export function sizeWarnings(doc: ManifestDoc, vm: ProxmoxVM): ManifestProblem[] {
  return decimalSizes(vm.spec.forProvider).map(({ field, message }) => ({
    file: doc.file,
    ...(doc.lineOf(field) ?? { line: doc.line }),
    field,
    message,
  }));
}

/**
 * Load every manifest under `paths`; schema problems are collected, not thrown. `fastYaml: false`:
 * read every file with `yaml` alone (src/workspace/documents.ts), for the tests that compare.
 */
export function loadManifests(
  paths: string[],
  cwd = process.cwd(),
  opts: { fastYaml?: boolean } = {},
): LoadedManifests {
  const problems: ManifestProblem[] = [];
  const warnings: ManifestProblem[] = [];
  const vms: LoadedManifests['vms'] = [];
  const images: LoadedManifests['images'] = [];
  const templates: LoadedManifests['templates'] = [];
  const others: ManifestDoc[] = [];
  const rejected: ManifestDoc[] = [];
  const seen = new Map<string, ManifestDoc>();
  for (const file of manifestFiles(paths)) {
    const display = relative(cwd, file) || file;
    for (const d of readManifestFile(file, problems, display, { fast: opts.fastYaml !== false })) {
      if ((d.kind === IMAGE_KIND || d.kind === TEMPLATE_KIND) && d.apiVersion.startsWith(`${GROUP}/`)) {
        const p = checkImageKind(d);
        problems.push(...p);
        if (p.length) continue;
        const obj = d.value as unknown as ProxmoxImage & ProxmoxTemplate;
        obj.metadata.namespace ??= 'default';
        const key = `${d.kind}/${obj.metadata.namespace}/${obj.metadata.name}`;
        const prev = seen.get(key);
        if (prev) {
          problems.push({
            file: d.file,
            ...(d.lineOf('metadata.name') ?? { line: d.line }),
            field: 'metadata.name',
            message: `duplicate ${d.kind} ${key.slice(d.kind.length + 1)} (also in ${prev.file}:${prev.line})`,
          });
          continue;
        }
        seen.set(key, d);
        (d.kind === IMAGE_KIND ? images : templates).push({ obj, doc: d } as never);
        continue;
      }
      if (d.kind !== 'ProxmoxVM') {
        // Another kind with a bad name or namespace is refused too: its key (a Secret's
        // namespace/name) is looked up by the VMs, and Kubernetes would refuse the object.
        problems.push(...checkMetadata(d));
        others.push(d);
        continue;
      }
      const p = checkProxmoxVM(d);
      problems.push(...p);
      if (p.length) {
        rejected.push(d);
        continue;
      }
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
      warnings.push(...sizeWarnings(d, vm));
    }
  }
  return { vms, images, templates, others, rejected, problems, warnings };
}
