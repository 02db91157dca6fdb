/**
 * Reading a ProviderConfig or ClusterProviderConfig (the schema: provider-config.ts) from YAML.
 * loadProviderConfig() reads a YAML file holding the config and, optionally, its Secret(s); the
 * credentials Secret holds `tokenid` + `token` (an API token) or `username` + `password`. Beyond the
 * schema it checks what a schema cannot say: unique site names and endpoints, one TLS mode per site,
 * the fingerprint and host key formats, a Secret reference for every site. Its errors (ConfigError)
 * name file:line and the field.
 */
import Value from 'typebox/value';
import { type Document, isMap, isPair, isScalar, LineCounter, parseAllDocuments, type YAMLMap } from 'yaml';
import {
  API_VERSION,
  type ProviderConfig,
  ProviderConfigKinds,
  ProviderConfigSchema,
  type SecretRef,
} from './provider-config.ts';

/** A configuration problem, located: `file:line: field: message`. */
export class ConfigError extends Error {
  readonly file: string;
  readonly line: number | undefined;
  readonly field: string | undefined;
  readonly problems: readonly string[];
  constructor(
    file: string,
    problems: Array<{ line?: number | undefined; field?: string | undefined; message: string }>,
  ) {
    const lines = problems.map(
      (p) => `${file}${p.line ? `:${p.line}` : ''}: ${p.field ? `${p.field}: ` : ''}${p.message}`,
    );
    super(lines.join('\n'));
    this.name = 'ConfigError';
    this.file = file;
    this.line = problems[0]?.line;
    this.field = problems[0]?.field;
    this.problems = Object.freeze(lines);
  }
}

/** A Secret's data, decoded (stringData wins over base64 data). Never printed. */
export interface SecretData {
  namespace: string;
  name: string;
  data: Record<string, string>;
  file: string;
  line: number | undefined;
}

export interface LoadedProviderConfig {
  file: string;
  config: ProviderConfig;
  /** Secrets found in the file(s), by `namespace/name`. */
  secrets: Map<string, SecretData>;
  /** Line of a field (`spec.sites[0].tls`), for later messages. */
  lineOf(field: string): number | undefined;
}

interface YamlDoc {
  doc: Document.Parsed;
  value: unknown;
}

function fieldPath(segments: Array<string | number>): string {
  let out = '';
  for (const s of segments) out += typeof s === 'number' ? `[${s}]` : out ? `.${s}` : s;
  return out;
}

function pointerSegments(pointer: string): Array<string | number> {
  if (!pointer) return [];
  return pointer
    .split('/')
    .slice(1)
    .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'))
    .map((s) => (/^\d+$/.test(s) ? Number(s) : s));
}

function keyLine(map: unknown, lc: LineCounter, key: string): number | undefined {
  if (!isMap(map)) return undefined;
  const pair = (map as YAMLMap).items.find((p) => isPair(p) && isScalar(p.key) && p.key.value === key);
  const k = pair && isPair(pair) && isScalar(pair.key) ? pair.key : undefined;
  return k?.range ? lc.linePos(k.range[0]).line : undefined;
}

/** Line of a field: its key's line in a map, its item's line in a list; else the nearest parent's. */
function lineOfNode(
  doc: Document.Parsed,
  lc: LineCounter,
  segments: Array<string | number>,
  key?: string,
): number | undefined {
  if (key !== undefined) {
    const parent = segments.length ? doc.getIn(segments, true) : doc.contents;
    const l = keyLine(parent, lc, key);
    if (l) return l;
  }
  for (let n = segments.length; n >= 0; n--) {
    const last = segments[n - 1];
    if (n > 0 && typeof last === 'string') {
      const parent = n - 1 === 0 ? doc.contents : doc.getIn(segments.slice(0, n - 1), true);
      const l = keyLine(parent, lc, last);
      if (l) return l;
    }
    const node = n === 0 ? doc.contents : doc.getIn(segments.slice(0, n), true);
    const range = node && typeof node === 'object' ? (node as { range?: [number, number, number] }).range : undefined;
    if (range) return lc.linePos(range[0]).line;
  }
  return undefined;
}

function resolveSchema(root: unknown, schemaPath: string): Record<string, unknown> | undefined {
  let cur: unknown = root;
  for (const seg of pointerSegments(schemaPath.replace(/^#/, ''))) {
    if (!cur || typeof cur !== 'object') return undefined;
    cur = (cur as Record<string, unknown>)[String(seg)];
  }
  return cur && typeof cur === 'object' ? (cur as Record<string, unknown>) : undefined;
}

interface Problem {
  line?: number | undefined;
  field?: string | undefined;
  message: string;
}

function schemaProblems(doc: Document.Parsed, lc: LineCounter, value: unknown): Problem[] {
  const out: Problem[] = [];
  const seen = new Set<string>();
  for (const e of Value.Errors(ProviderConfigSchema, value)) {
    if (e.keyword === 'boolean') continue; // the additionalProperties twin of another error
    const segs = pointerSegments(e.instancePath);
    // Inside an anyOf, report once at the union (its own message) rather than per branch.
    const unionAt = /^(.*)\/anyOf\/\d+/.exec(e.schemaPath);
    const schemaNode = unionAt
      ? resolveSchema(ProviderConfigSchema, unionAt[1]!)
      : resolveSchema(ProviderConfigSchema, e.schemaPath);
    let message = e.message;
    let key: string | undefined;
    if (e.keyword === 'additionalProperties') {
      const extra = ((e.params as { additionalProperties?: string[] }).additionalProperties ?? []).join(', ');
      message = `unknown field${extra.includes(',') ? 's' : ''} ${extra}`;
      key = (e.params as { additionalProperties?: string[] }).additionalProperties?.[0];
    } else if (e.keyword === 'required') {
      const req = ((e.params as { requiredProperties?: string[] }).requiredProperties ?? []).join(', ');
      message = `missing required field ${req}`;
    } else if (typeof schemaNode?.errorMessage === 'string') {
      message = schemaNode.errorMessage;
    } else if (e.keyword === 'const' && segs.join('.') === 'apiVersion') {
      message = `must be ${API_VERSION}`;
    }
    const field = key ? fieldPath([...segs]) || '(top level)' : fieldPath(segs) || '(top level)';
    const sig = `${field}|${message}`;
    if (seen.has(sig)) continue;
    seen.add(sig);
    out.push({ line: lineOfNode(doc, lc, segs, key), field, message });
  }
  return out;
}

/**
 * A pinned host key: an OpenSSH SHA256 fingerprint, or the key blob of a known_hosts line (whose
 * fingerprint is computed when it is compared). Undefined when it is neither.
 */
export function parseHostKey(text: string): { fingerprint: string } | { keyBlob: string } | undefined {
  const t = text.trim();
  const fp = /^SHA256:([A-Za-z0-9+/]{43})=?$/.exec(t);
  if (fp) return { fingerprint: `SHA256:${fp[1]}` };
  const line = /^(?:\S+\s+)?(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(?:256|384|521))\s+([A-Za-z0-9+/]+=*)(?:\s.*)?$/.exec(
    t,
  );
  if (line) return { keyBlob: line[2]! };
  return undefined;
}

function semanticProblems(cfg: ProviderConfig, at: (segs: Array<string | number>) => number | undefined): Problem[] {
  const out: Problem[] = [];
  const names = new Set<string>();
  cfg.spec.sites.forEach((s, i) => {
    const base: Array<string | number> = ['spec', 'sites', i];
    if (names.has(s.name))
      out.push({
        line: at([...base, 'name']),
        field: fieldPath([...base, 'name']),
        message: `duplicate site name '${s.name}'`,
      });
    names.add(s.name);
    const eps = new Set<string>();
    s.endpoints.forEach((ep, j) => {
      try {
        const origin = new URL(ep).origin;
        if (eps.has(origin)) {
          out.push({
            line: at([...base, 'endpoints', j]),
            field: fieldPath([...base, 'endpoints', j]),
            message: `duplicate endpoint ${origin}`,
          });
        }
        eps.add(origin);
      } catch {
        out.push({
          line: at([...base, 'endpoints', j]),
          field: fieldPath([...base, 'endpoints', j]),
          message: 'is not a valid URL',
        });
      }
    });
    const tls = s.tls;
    if (tls) {
      const set = [
        tls.fingerprint !== undefined,
        tls.caBundle !== undefined,
        tls.insecureSkipTLSVerify === true,
      ].filter(Boolean).length;
      if (set > 1) {
        out.push({
          line: at([...base, 'tls']),
          field: fieldPath([...base, 'tls']),
          message: 'set only one of fingerprint, caBundle, insecureSkipTLSVerify',
        });
      }
      const fps =
        tls.fingerprint === undefined ? [] : Array.isArray(tls.fingerprint) ? tls.fingerprint : [tls.fingerprint];
      fps.forEach((fp, j) => {
        const hex = fp
          .trim()
          .replace(/^sha256[:=\s]*/i, '')
          .replace(/[:\s]/g, '');
        if (!/^[0-9A-Fa-f]{64}$/.test(hex)) {
          const segs = Array.isArray(tls.fingerprint)
            ? [...base, 'tls', 'fingerprint', j]
            : [...base, 'tls', 'fingerprint'];
          out.push({
            line: at(segs),
            field: fieldPath(segs),
            message: 'must be a SHA-256 certificate fingerprint: 32 hex bytes like AB:CD:... (see `pvenode cert info`)',
          });
        }
      });
      if (tls.caBundle !== undefined && !tls.caBundle.includes('-----BEGIN CERTIFICATE-----')) {
        out.push({
          line: at([...base, 'tls', 'caBundle']),
          field: fieldPath([...base, 'tls', 'caBundle']),
          message: 'must hold PEM certificates (-----BEGIN CERTIFICATE-----)',
        });
      }
    }
    const r = s.vmidRange;
    if (r && r.min > r.max) {
      out.push({
        line: at([...base, 'vmidRange']),
        field: fieldPath([...base, 'vmidRange']),
        message: `min (${r.min}) is greater than max (${r.max})`,
      });
    }
    (s.ssh?.hostKeys ?? []).forEach((k, j) => {
      if (!parseHostKey(k))
        out.push({
          line: at([...base, 'ssh', 'hostKeys', j]),
          field: fieldPath([...base, 'ssh', 'hostKeys', j]),
          message:
            'must be an OpenSSH SHA256 fingerprint (SHA256:<43 base64 characters>, as `ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` prints on the node) or a known_hosts line (HOST ssh-ed25519 AAAA...)',
        });
    });
    if (new Set(s.nodes ?? []).size !== (s.nodes ?? []).length) {
      out.push({ line: at([...base, 'nodes']), field: fieldPath([...base, 'nodes']), message: 'lists a node twice' });
    }
  });
  const r = cfg.spec.vmidRange;
  if (r && r.min > r.max)
    out.push({
      line: at(['spec', 'vmidRange']),
      field: 'spec.vmidRange',
      message: `min (${r.min}) is greater than max (${r.max})`,
    });
  const needsDefaultRef = cfg.spec.sites.some((s) => !s.credentialsSecretRef);
  if (needsDefaultRef && !cfg.spec.credentials.secretRef) {
    out.push({
      line: at(['spec', 'credentials']),
      field: 'spec.credentials.secretRef',
      message: 'is required unless every site has its own credentialsSecretRef',
    });
  }
  if (cfg.kind === 'ClusterProviderConfig') {
    const refs: Array<[Array<string | number>, SecretRef | undefined]> = [
      [['spec', 'credentials', 'secretRef'], cfg.spec.credentials.secretRef],
      ...cfg.spec.sites.map((s, i): [Array<string | number>, SecretRef | undefined] => [
        ['spec', 'sites', i, 'credentialsSecretRef'],
        s.credentialsSecretRef,
      ]),
      ...cfg.spec.sites.map((s, i): [Array<string | number>, SecretRef | undefined] => [
        ['spec', 'sites', i, 'ssh', 'secretRef'],
        s.ssh?.secretRef,
      ]),
    ];
    for (const [segs, ref] of refs) {
      if (ref && !ref.namespace) {
        out.push({
          line: at(segs),
          field: `${fieldPath(segs)}.namespace`,
          message: 'is required in a ClusterProviderConfig',
        });
      }
    }
  }
  return out;
}

function parseDocs(text: string, file: string): { docs: YamlDoc[]; lc: LineCounter } {
  const lc = new LineCounter();
  const parsed = parseAllDocuments(text, { lineCounter: lc, prettyErrors: false });
  const list = Array.isArray(parsed) ? parsed : [];
  if (!Array.isArray(parsed)) {
    throw new ConfigError(file, [{ message: 'not a YAML stream' }]);
  }
  const problems: Problem[] = [];
  for (const d of list) {
    for (const e of d.errors) {
      problems.push({
        line: e.linePos?.[0]?.line ?? lc.linePos(e.pos[0]).line,
        message: `YAML: ${e.message.split('\n')[0]}`,
      });
    }
  }
  if (problems.length) throw new ConfigError(file, problems);
  return { docs: list.map((doc) => ({ doc, value: doc.toJS() as unknown })), lc };
}

function secretFromDoc(d: YamlDoc, lc: LineCounter, file: string, defaultNamespace: string): SecretData {
  const v = d.value as { metadata?: { name?: unknown; namespace?: unknown }; data?: unknown; stringData?: unknown };
  const name = typeof v.metadata?.name === 'string' ? v.metadata.name : '';
  const namespace = typeof v.metadata?.namespace === 'string' ? v.metadata.namespace : defaultNamespace;
  const line = lineOfNode(d.doc, lc, []);
  if (!name) throw new ConfigError(file, [{ line, field: 'metadata.name', message: 'a Secret needs a name' }]);
  const data: Record<string, string> = {};
  if (v.data && typeof v.data === 'object') {
    for (const [k, x] of Object.entries(v.data as Record<string, unknown>)) {
      if (typeof x !== 'string' || !/^[A-Za-z0-9+/=\s]*$/.test(x)) {
        throw new ConfigError(file, [
          {
            line: lineOfNode(d.doc, lc, ['data', k]),
            field: `data.${k}`,
            message: 'must be base64 (use stringData for plain text)',
          },
        ]);
      }
      data[k] = Buffer.from(x, 'base64').toString('utf8');
    }
  }
  if (v.stringData && typeof v.stringData === 'object') {
    for (const [k, x] of Object.entries(v.stringData as Record<string, unknown>)) {
      if (x === null || x === undefined) continue;
      if (typeof x === 'object') {
        throw new ConfigError(file, [
          { line: lineOfNode(d.doc, lc, ['stringData', k]), field: `stringData.${k}`, message: 'must be a string' },
        ]);
      }
      data[k] = String(x);
    }
  }
  return { namespace, name, data, file, line };
}

/**
 * Parse a YAML text holding a ProviderConfig or ClusterProviderConfig (and possibly its Secrets).
 * `name` picks one when the file has several.
 */
export function parseProviderConfig(text: string, file: string, opts: { name?: string } = {}): LoadedProviderConfig {
  const { docs, lc } = parseDocs(text, file);
  const secrets = new Map<string, SecretData>();
  const candidates: YamlDoc[] = [];
  for (const d of docs) {
    const v = d.value as { kind?: unknown; apiVersion?: unknown } | null;
    if (!v || typeof v !== 'object') continue;
    if (v.kind === 'Secret') {
      const s = secretFromDoc(d, lc, file, 'default');
      secrets.set(`${s.namespace}/${s.name}`, s);
    } else if (typeof v.kind === 'string' && (ProviderConfigKinds as readonly string[]).includes(v.kind)) {
      candidates.push(d);
    }
  }
  const nameOf = (d: YamlDoc) => String((d.value as { metadata?: { name?: unknown } }).metadata?.name ?? '');
  let chosen: YamlDoc | undefined;
  if (opts.name !== undefined) {
    chosen = candidates.find((d) => nameOf(d) === opts.name);
    if (!chosen) {
      throw new ConfigError(file, [
        {
          message: `no ProviderConfig or ClusterProviderConfig named '${opts.name}' (found: ${candidates.map(nameOf).join(', ') || 'none'})`,
        },
      ]);
    }
  } else if (candidates.length === 1) {
    chosen = candidates[0];
  } else if (candidates.length === 0) {
    throw new ConfigError(file, [
      { message: `no ${API_VERSION} ProviderConfig or ClusterProviderConfig in this file` },
    ]);
  } else {
    throw new ConfigError(file, [
      { message: `several provider configs (${candidates.map(nameOf).join(', ')}): choose one by name` },
    ]);
  }
  const { doc, value } = chosen!;
  const problems = schemaProblems(doc, lc, value);
  if (problems.length) throw new ConfigError(file, problems);
  const config = value as ProviderConfig;
  const at = (segs: Array<string | number>) => lineOfNode(doc, lc, segs);
  const sem = semanticProblems(config, at);
  if (sem.length) throw new ConfigError(file, sem);
  const lineOf = (field: string) => {
    const segs = field
      .replace(/\[(\d+)\]/g, '.$1')
      .split('.')
      .filter(Boolean)
      .map((s) => (/^\d+$/.test(s) ? Number(s) : s));
    return lineOfNode(doc, lc, segs);
  };
  return { file, config, secrets, lineOf };
}

/** Secrets from another file (a Secret manifest, or a list of them). */
export function parseSecrets(text: string, file: string): SecretData[] {
  const { docs, lc } = parseDocs(text, file);
  const out: SecretData[] = [];
  for (const d of docs) {
    const v = d.value as { kind?: unknown } | null;
    if (v && typeof v === 'object' && v.kind === 'Secret') out.push(secretFromDoc(d, lc, file, 'default'));
  }
  if (!out.length) throw new ConfigError(file, [{ message: 'no v1 Secret in this file' }]);
  return out;
}

export async function loadProviderConfig(
  file: string,
  opts: { name?: string; secretFiles?: string[] } = {},
): Promise<LoadedProviderConfig> {
  // Loaded on use: validate imports this module for parseProviderConfig and reads no file with it.
  const { readFile } = await import('node:fs/promises');
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (e) {
    throw new ConfigError(file, [{ message: `cannot read: ${(e as NodeJS.ErrnoException).code ?? String(e)}` }]);
  }
  const loaded = parseProviderConfig(text, file, opts.name !== undefined ? { name: opts.name } : {});
  for (const sf of opts.secretFiles ?? []) {
    let st: string;
    try {
      st = await readFile(sf, 'utf8');
    } catch (e) {
      throw new ConfigError(sf, [{ message: `cannot read: ${(e as NodeJS.ErrnoException).code ?? String(e)}` }]);
    }
    for (const s of parseSecrets(st, sf)) loaded.secrets.set(`${s.namespace}/${s.name}`, s);
  }
  return loaded;
}
