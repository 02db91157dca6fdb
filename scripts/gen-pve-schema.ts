/**
 * Generates the compact per-profile PVE API parameter schemas the simulator validates requests
 * against (src/sim/schema/generated/pve-<profile>.json), from the API descriptions Proxmox VE
 * publishes (../shared/pve-api/, see its README). Run: `npm run gen:schema`.
 *
 * What is kept: the paths the simulator serves or may serve (see `keepPath`), per method the
 * parameter properties with only what validation needs (type, optional, enum, ranges, lengths,
 * pattern, format, requires, items, and inside property strings default_key/alias/keyAlias),
 * `allowtoken` and `protected`. Descriptions and return schemas are dropped.
 *
 * Transformations (all deterministic, so the committed output can be compared in a test):
 * - nested property-string formats (`format: {...}`) are deduplicated into `formats` and
 *   referenced as `"format": "#<id>"` (ids never clash with PVE format names, which have no '#');
 * - `[n]` parameter families (`net[n]`, `scsi[n]`...) get `n`: the highest index PVE accepts,
 *   from the description ("n is 0 to 30") or, when it says nothing, from the constants of
 *   qemu-server / pve-manager (`FAMILY_MAX`);
 * - `pattern`s are converted from Perl to JavaScript regular-expression source (see `perlToJs`);
 *   the validator anchors them like PVE's `m/^$pattern$/`;
 * - the 9.2 snapshot is a normalized flat form (`paths[].methods[]`, `parameters` a list, `enum: []`
 *   for "no enum", `max_length`/`min_length`, `requires` under `extra`); it is mapped back to the
 *   apidoc shape. It cannot say whether a method declares no `properties` at all (PVE then checks
 *   no parameter) or whether `additionalProperties` is 1; both are taken from the 8.4 apidoc for
 *   methods that exist there.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export type Profile = '6.4' | '7.4' | '8.4' | '9.2';
export const PROFILES: readonly Profile[] = ['6.4', '7.4', '8.4', '9.2'];
const SOURCES: Record<Profile, string> = {
  '6.4': 'apidoc-6.4-15.json',
  '7.4': 'apidoc-7.4-16.json',
  '8.4': 'apidoc-8.4.5.json',
  '9.2': 'snapshot-9.2.3.json',
};
const METHODS = ['GET', 'POST', 'PUT', 'DELETE'] as const;

export function defaultApiDir(): string {
  return process.env.PVE_API_DIR ?? fileURLToPath(new URL('../../shared/pve-api/', import.meta.url));
}
export const OUT_DIR = fileURLToPath(new URL('../src/sim/schema/generated/', import.meta.url));

// biome-ignore lint/suspicious/noExplicitAny: raw third-party JSON
type Raw = any;
interface SrcMethod {
  path: string;
  method: string;
  allowtoken: boolean;
  protected: boolean;
  /** undefined: the method declares no `properties` (PVE then validates nothing) */
  props: Record<string, Raw> | undefined;
  additionalProperties: boolean;
}

// ---------------------------------------------------------------------------------------------
// Which paths the simulator serves or may serve.

const NODE_EXCLUDED = new Set([
  'lxc',
  'ceph',
  'disks',
  'apt',
  'certificates',
  'hardware',
  'sdn',
  'replication',
  'scan',
  'services',
  'subscription',
  'vzdump',
]);
const CONSOLE = /^(termproxy|vncshell|spiceshell|vncproxy|spiceproxy|vncwebsocket|mtunnel.*)$/;

export function keepPath(path: string): boolean {
  const s = path.split('/').filter(Boolean);
  const [a, b, c] = s;
  if (path === '/version') return true;
  if (a === 'access') return b === 'ticket' || b === 'permissions' || b === 'users' || b === 'acl' || b === 'roles';
  if (a === 'cluster') return b === 'nextid' || b === 'resources' || b === 'tasks' || b === 'status';
  if (a === 'pools' || a === 'storage') return true;
  if (a === 'nodes') {
    if (c !== undefined && NODE_EXCLUDED.has(c)) return false;
    return !s.some((x) => CONSOLE.test(x));
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// `[n]` families: highest accepted index when the description does not state it.
// qemu-server: MAX_NETS=32 (net, ipconfig), MAX_UNUSED_DISKS=256, MAX_NUMA=8, MAX_HOSTPCI_DEVICES=16,
// MAX_VIRTIOFS=10, MAX_USB_DEVICES=5 (6.x) / 14 (7.x+; the description's "up to 14" is off by one:
// the loop is `$i < 14`); pve-manager NodeConfig: `for my $i (0..$MAXDOMAINS)`, $MAXDOMAINS=5.
const FAMILY_MAX: Record<string, number | ((p: Profile) => number)> = {
  net: 31,
  ipconfig: 31,
  unused: 255,
  numa: 7,
  hostpci: 15,
  virtiofs: 9,
  usb: (p) => (p === '6.4' ? 4 : 13),
  acmedomain: 5,
};

function familyMax(profile: Profile, name: string, def: Raw): number {
  const prefix = name.slice(0, -3);
  const fixed = FAMILY_MAX[prefix];
  if (fixed !== undefined) return typeof fixed === 'function' ? fixed(profile) : fixed;
  const m = /\(n is 0 to (\d+)/.exec(String(def.description ?? ''));
  if (m) return Number(m[1]);
  throw new Error(`${profile}: no maximum index known for parameter family '${name}'`);
}

// ---------------------------------------------------------------------------------------------
// Perl regular expression source -> JavaScript source (no flags; Node 24 supports `(?i:...)`).
// - `(?^:` / `(?^i:` (stringified qr//) -> `(?:` / `(?i:`
// - `$` (no /m) matches at the end or before a final newline in Perl -> `(?=\n?$)`
// - `.` does not match "\n" in Perl but matches "\r" -> `[^\n]`
// - `{,n}` is a quantifier from Perl 5.34 on (PVE 8 = Perl 5.36, PVE 9 = 5.40), a literal before
// - POSIX classes inside brackets ([:alnum:] ...) are expanded; a leading `]` in a class is escaped
// Differences left: Perl's \d \w \s are Unicode-aware on decoded strings, JavaScript's are ASCII.
const POSIX: Record<string, string> = {
  alnum: 'a-zA-Z0-9',
  alpha: 'a-zA-Z',
  digit: '0-9',
  space: '\\s',
  word: '\\w',
  upper: 'A-Z',
  lower: 'a-z',
  xdigit: '0-9A-Fa-f',
};

export function perlToJs(src: string, modernQuantifiers: boolean): string {
  let out = '';
  let i = 0;
  while (i < src.length) {
    const ch = src[i]!;
    if (ch === '\\') {
      const next = src[i + 1];
      if (next === undefined) throw new Error(`trailing backslash in pattern ${src}`);
      if (next === 'A') out += '(?<![\\s\\S])';
      else if (next === 'z') out += '(?![\\s\\S])';
      else if (next === 'Z') out += '(?=\\n?(?![\\s\\S]))';
      else if ('hHvVRKXNpPgkGQE'.includes(next)) throw new Error(`unsupported Perl escape \\${next} in ${src}`);
      else out += ch + next;
      i += 2;
      continue;
    }
    if (ch === '[') {
      let j = i + 1;
      let cls = '[';
      if (src[j] === '^') {
        cls += '^';
        j++;
      }
      if (src[j] === ']') {
        cls += '\\]';
        j++;
      }
      for (;;) {
        const c = src[j];
        if (c === undefined) throw new Error(`unterminated class in ${src}`);
        if (c === '\\') {
          cls += c + (src[j + 1] ?? '');
          j += 2;
          continue;
        }
        if (c === '[' && src[j + 1] === ':') {
          const end = src.indexOf(':]', j + 2);
          const name = src.slice(j + 2, end);
          const rep = POSIX[name];
          if (end < 0 || rep === undefined) throw new Error(`unsupported POSIX class in ${src}`);
          cls += rep;
          j = end + 2;
          continue;
        }
        if (c === '[') {
          cls += '\\[';
          j++;
          continue;
        }
        if (c === ']') break;
        cls += c;
        j++;
      }
      out += cls + ']';
      i = j + 1;
      continue;
    }
    if (ch === '(' && src[i + 1] === '?') {
      if (src[i + 2] === '^') {
        const colon = src.indexOf(':', i + 3);
        const flags = src.slice(i + 3, colon);
        if (!/^[i]*$/.test(flags)) throw new Error(`unsupported inline flags '${flags}' in ${src}`);
        out += flags ? `(?${flags}:` : '(?:';
        i = colon + 1;
        continue;
      }
      if (src[i + 2] === '>' || src[i + 2] === '#' || src[i + 2] === '|') {
        throw new Error(`unsupported group (?${src[i + 2]} in ${src}`);
      }
    }
    if (ch === '$') {
      out += '(?=\\n?$)';
      i++;
      continue;
    }
    if (ch === '.') {
      out += '[^\\n]';
      i++;
      continue;
    }
    if (ch === '{') {
      const m = /^\{,(\d+)\}/.exec(src.slice(i));
      if (m) {
        out += modernQuantifiers ? `{0,${m[1]}}` : `\\{,${m[1]}\\}`;
        i += m[0].length;
        continue;
      }
    }
    out += ch;
    i++;
  }
  new RegExp(out); // must compile
  return out;
}

// ---------------------------------------------------------------------------------------------
// Loading the four sources into one shape.

function loadApidoc(file: string): SrcMethod[] {
  const tree = JSON.parse(readFileSync(file, 'utf8')) as Raw[];
  const out: SrcMethod[] = [];
  const walk = (n: Raw) => {
    for (const verb of METHODS) {
      const m = n.info?.[verb];
      if (!m) continue;
      out.push({
        path: n.path,
        method: verb,
        allowtoken: m.allowtoken === undefined ? true : !!m.allowtoken,
        protected: !!m.protected,
        props: m.parameters?.properties,
        additionalProperties: !!m.parameters?.additionalProperties,
      });
    }
    for (const c of n.children ?? []) walk(c);
  };
  for (const r of tree) walk(r);
  return out;
}

/** 9.2 normalized definition -> apidoc-shaped definition */
function denormalize(d: Raw): Raw {
  const r: Raw = {};
  for (const [k, v] of Object.entries<Raw>(d)) {
    if (k === 'extra' || k === 'properties') continue;
    if (k === 'enum' && Array.isArray(v) && v.length === 0) continue;
    if (k === 'optional') {
      if (v) r.optional = 1;
      continue;
    }
    if (k === 'max_length') r.maxLength = v;
    else if (k === 'min_length') r.minLength = v;
    else if (k === 'items') r.items = denormalize(v);
    else r[k] = v;
  }
  for (const k of ['requires', 'type-property', 'instance-types', 'oneOf']) {
    if (d.extra?.[k] !== undefined) r[k] = d.extra[k];
  }
  if (d.properties && Object.keys(d.properties).length) r.properties = d.properties;
  return r;
}

function loadSnapshot(file: string, reference: SrcMethod[]): SrcMethod[] {
  const snap = JSON.parse(readFileSync(file, 'utf8')) as Raw;
  const ref = new Map(reference.map((m) => [`${m.method} ${m.path}`, m]));
  const out: SrcMethod[] = [];
  for (const p of snap.paths) {
    for (const m of p.methods) {
      const params: Raw[] = m.parameters;
      const old = ref.get(`${m.verb} ${p.path}`);
      let props: Record<string, Raw> | undefined = {};
      for (const q of params) props[q.name] = denormalize(q.definition);
      if (params.length === 0 && old && old.props === undefined) props = undefined;
      out.push({
        path: p.path,
        method: m.verb,
        allowtoken: !!m.allow_token,
        protected: !!m.protected,
        props,
        additionalProperties: old?.additionalProperties ?? false,
      });
    }
  }
  return out;
}

export function loadSources(dir: string): Record<Profile, SrcMethod[]> {
  const base = dir.endsWith('/') ? dir : `${dir}/`;
  const s64 = loadApidoc(base + SOURCES['6.4']);
  const s74 = loadApidoc(base + SOURCES['7.4']);
  const s84 = loadApidoc(base + SOURCES['8.4']);
  const s92 = loadSnapshot(base + SOURCES['9.2'], s84);
  return { '6.4': s64, '7.4': s74, '8.4': s84, '9.2': s92 };
}

// ---------------------------------------------------------------------------------------------
// Stripping to what validation needs.

const SCALAR_KEYS = ['type', 'enum', 'minimum', 'maximum', 'minLength', 'maxLength', 'requires', 'alias', 'keyAlias'];

interface Ctx {
  profile: Profile;
  formats: Map<string, { id: string; json: string }>;
  ids: Set<string>;
}

function canonical(v: Raw): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v && typeof v === 'object') {
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(v);
}

function strip(ctx: Ctx, def: Raw, hint: string): Raw {
  const r: Raw = {};
  for (const k of SCALAR_KEYS) {
    const v = def[k];
    if (v === undefined || v === null) continue;
    if (k === 'minimum' || k === 'maximum' || k === 'minLength' || k === 'maxLength') r[k] = Number(v);
    else if (k === 'enum') r[k] = v.map(String);
    else r[k] = v;
  }
  if (def.optional) r.optional = true;
  if (def.default_key) r.default_key = true;
  if (def.pattern !== undefined)
    r.pattern = perlToJs(String(def.pattern), ctx.profile === '8.4' || ctx.profile === '9.2');
  if (typeof def.format === 'string') r.format = def.format;
  else if (def.format && typeof def.format === 'object') r.format = `#${internFormat(ctx, def.format, hint)}`;
  if (def.items) r.items = strip(ctx, def.items, `${hint}-item`);
  if (def.oneOf || def['type-property'] || def['instance-types']) {
    throw new Error(`${ctx.profile}: oneOf/type-property schemas are not supported (${hint})`);
  }
  return r;
}

function internFormat(ctx: Ctx, fmt: Raw, hint: string): string {
  const stripped: Raw = {};
  for (const k of Object.keys(fmt).sort()) stripped[k] = strip(ctx, fmt[k], `${hint}.${k}`);
  const json = canonical(stripped);
  const found = ctx.formats.get(json);
  if (found) return found.id;
  const base = hint.replace(/\[n\]$/, '').replace(/[^A-Za-z0-9_.-]/g, '-');
  let id = base;
  for (let i = 2; ctx.ids.has(id); i++) id = `${base}-${i}`;
  ctx.ids.add(id);
  ctx.formats.set(json, { id, json });
  return id;
}

interface GenMethod {
  path: string;
  method: string;
  allowtoken: 0 | 1;
  protected?: 1;
  additionalProperties?: 1;
  noProperties?: 1;
  params: Record<string, Raw>;
}

export function generateProfile(profile: Profile, methods: SrcMethod[], source: string): string {
  const ctx: Ctx = { profile, formats: new Map(), ids: new Set() };
  const kept = methods
    .filter((m) => keepPath(m.path))
    .sort((a, b) =>
      a.path < b.path
        ? -1
        : a.path > b.path
          ? 1
          : METHODS.indexOf(a.method as 'GET') - METHODS.indexOf(b.method as 'GET'),
    );
  const out: GenMethod[] = [];
  for (const m of kept) {
    const g: GenMethod = { path: m.path, method: m.method, allowtoken: m.allowtoken ? 1 : 0, params: {} };
    if (m.protected) g.protected = 1;
    if (m.additionalProperties) g.additionalProperties = 1;
    if (m.props === undefined) g.noProperties = 1;
    for (const name of Object.keys(m.props ?? {}).sort()) {
      const def = m.props![name];
      const s = strip(ctx, def, name);
      if (name.endsWith('[n]')) s.n = familyMax(profile, name, def);
      else if (name.includes('[')) throw new Error(`${profile}: unexpected parameter name ${name}`);
      g.params[name] = s;
    }
    out.push(g);
  }
  const formats = [...ctx.formats.values()].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  const lines: string[] = [];
  lines.push('{');
  lines.push(`"profile": ${JSON.stringify(profile)},`);
  lines.push(`"source": ${JSON.stringify(source)},`);
  lines.push(`"generator": "scripts/gen-pve-schema.ts",`);
  lines.push('"formats": {');
  formats.forEach((f, i) => {
    lines.push(`${JSON.stringify(f.id)}: ${f.json}${i < formats.length - 1 ? ',' : ''}`);
  });
  lines.push('},');
  lines.push('"methods": [');
  out.forEach((g, i) => {
    const params = g.params;
    const head = { ...g } as Raw;
    delete head.params;
    const p = `{${Object.keys(params)
      .map((k) => `${JSON.stringify(k)}:${canonical(params[k])}`)
      .join(',')}}`;
    const headJson = canonical(head);
    lines.push(`${headJson.slice(0, -1)},"params":${p}}${i < out.length - 1 ? ',' : ''}`);
  });
  lines.push(']');
  lines.push('}');
  return `${lines.join('\n')}\n`;
}

/** All four generated files, keyed by file name, from the sources in `dir`. */
export function generateAll(dir: string = defaultApiDir()): Map<string, string> {
  const src = loadSources(dir);
  const res = new Map<string, string>();
  for (const p of PROFILES) res.set(`pve-${p}.json`, generateProfile(p, src[p], SOURCES[p]));
  return res;
}

function isMain(): boolean {
  const arg = process.argv[1];
  return arg !== undefined && fileURLToPath(import.meta.url) === arg;
}

if (isMain()) {
  const dir = defaultApiDir();
  const files = generateAll(dir);
  mkdirSync(OUT_DIR, { recursive: true });
  let total = 0;
  for (const [name, text] of files) {
    writeFileSync(OUT_DIR + name, text);
    total += text.length;
    console.log(`${name}: ${text.length} bytes`);
  }
  console.log(`total: ${total} bytes (from ${dir})`);
}
