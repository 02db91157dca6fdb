/**
 * Per-profile Proxmox VE API parameter validation, driven by the schemas PVE publishes
 * (generated into ./generated/ by scripts/gen-pve-schema.ts, plus the served methods it leaves out
 * by ./gen-extra.ts; this module never reads ../shared).
 *
 * - matchMethod(): PVE's method lookup (RESTHandler find_handler) over the paths the simulator
 *   serves; undefined means PVE has no such method+path (the server answers 501).
 * - validateParams(): JSONSchema.pm validate() for a method's parameters, returning PVE's
 *   per-parameter messages and the parameters coerced to JS types.
 */

import { hashFormat, PerlDie } from './formats.ts';
import extra64 from './generated/extra-6.4.json' with { type: 'json' };
import extra74 from './generated/extra-7.4.json' with { type: 'json' };
import extra84 from './generated/extra-8.4.json' with { type: 'json' };
import extra92 from './generated/extra-9.2.json' with { type: 'json' };
import pve64 from './generated/pve-6.4.json' with { type: 'json' };
import pve74 from './generated/pve-7.4.json' with { type: 'json' };
import pve84 from './generated/pve-8.4.json' with { type: 'json' };
import pve92 from './generated/pve-9.2.json' with { type: 'json' };
import type { FormatContext, HttpMethod, MethodSchema, ParamSchema, Profile, PropertyStringFormat } from './types.ts';
import {
  checkObject,
  coerce,
  type Errors,
  type ObjectSchema,
  parsePropertyString as parsePs,
  scalarString,
  valueIsTrue,
} from './validate.ts';

export { PerlDie } from './formats.ts';
export { splitList } from './perl.ts';
export type {
  FormatContext,
  HttpMethod,
  MethodSchema,
  ParamSchema,
  ParamType,
  Profile,
  PropertyStringFormat,
} from './types.ts';

export const SCHEMA_PROFILES: readonly Profile[] = ['6.4', '7.4', '8.4', '9.2'];

// --- loading -----------------------------------------------------------------------------------

type GenParam = Omit<ParamSchema, 'format' | 'items'> & { format?: string; items?: GenParam };
interface GenMethod {
  path: string;
  method: HttpMethod;
  allowtoken: 0 | 1;
  protected?: 1;
  additionalProperties?: 1;
  noProperties?: 1;
  params: Record<string, GenParam>;
}
interface GenFile {
  profile: Profile;
  formats: Record<string, Record<string, GenParam>>;
  methods: GenMethod[];
}

interface TreeNode {
  literal: Map<string, TreeNode>;
  param?: { name: string; node: TreeNode };
  methods: Map<HttpMethod, MethodSchema>;
}

interface Family {
  prefix: string;
  schema: ParamSchema;
  max: number;
}

interface Loaded {
  methods: MethodSchema[];
  tree: TreeNode;
  /** The tree node of `/nodes/{node}/storage/{storage}/content` (see matchMethod). */
  contentNode: TreeNode | undefined;
  ctx: FormatContext;
}

// JSON imports (not fs reads) so that `tsc -p tsconfig.build.json` copies them next to the output.
const GENERATED = { '6.4': pve64, '7.4': pve74, '8.4': pve84, '9.2': pve92 } as unknown as Record<Profile, GenFile>;
/** The served methods scripts/gen-pve-schema.ts does not keep (see ./gen-extra.ts); same form. */
const EXTRA = { '6.4': extra64, '7.4': extra74, '8.4': extra84, '9.2': extra92 } as unknown as Record<Profile, GenFile>;

const loaded = new Map<Profile, Loaded>();
const familiesOf = new WeakMap<MethodSchema, Map<string, Family>>();

function newNode(): TreeNode {
  return { literal: new Map(), methods: new Map() };
}

function addFile(profile: Profile, file: GenFile, tree: TreeNode, methods: MethodSchema[]): void {
  const formats = new Map<string, PropertyStringFormat>();
  const resolveFormat = (id: string): PropertyStringFormat => {
    let f = formats.get(id);
    if (f) return f;
    const src = file.formats[id];
    if (!src) throw new Error(`${profile} schema: unknown format reference #${id}`);
    const out: Record<string, ParamSchema> = {};
    formats.set(id, out); // before recursing: formats may share entries
    for (const [k, p] of Object.entries(src)) out[k] = resolveParam(p);
    f = Object.freeze(out);
    formats.set(id, f);
    return f;
  };
  const resolveParam = (p: GenParam): ParamSchema => {
    const { format, items, ...rest } = p;
    const r: { -readonly [K in keyof ParamSchema]: ParamSchema[K] } = { ...rest };
    if (format !== undefined) r.format = format.startsWith('#') ? resolveFormat(format.slice(1)) : format;
    if (items !== undefined) r.items = resolveParam(items);
    return Object.freeze(r);
  };

  for (const g of file.methods) {
    const params: Record<string, ParamSchema> = {};
    for (const [k, p] of Object.entries(g.params)) params[k] = resolveParam(p);
    const m: MethodSchema = Object.freeze({
      profile,
      path: g.path,
      method: g.method,
      allowToken: g.allowtoken === 1,
      protected: g.protected === 1,
      additionalProperties: g.additionalProperties === 1,
      noProperties: g.noProperties === 1,
      params: Object.freeze(params),
    });
    methods.push(m);
    let node = tree;
    for (const comp of g.path.split('/').filter(Boolean)) {
      const pm = /^\{([\w-]+)\}$/.exec(comp);
      if (pm) {
        node.param ??= { name: pm[1]!, node: newNode() };
        node = node.param.node;
      } else {
        let next = node.literal.get(comp);
        if (!next) {
          next = newNode();
          node.literal.set(comp, next);
        }
        node = next;
      }
    }
    node.methods.set(g.method, m);
  }
}

function load(profile: Profile): Loaded {
  const hit = loaded.get(profile);
  if (hit) return hit;
  if (!SCHEMA_PROFILES.includes(profile)) throw new Error(`unknown PVE schema profile '${profile}'`);
  const tree = newNode();
  const methods: MethodSchema[] = [];
  // Format ids are per file: each file resolves its own `#id` references.
  for (const file of [GENERATED[profile], EXTRA[profile]]) addFile(profile, file, tree, methods);

  let drives: Set<string> | undefined;
  let bootDevs: Set<string> | undefined;
  const qemuConfig = () =>
    methods.find((m) => m.method === 'POST' && m.path === '/nodes/{node}/qemu/{vmid}/config')?.params ?? {};
  const expand = (params: Readonly<Record<string, ParamSchema>>, prefixes: string[], into: Set<string>) => {
    for (const prefix of prefixes) {
      const max = params[`${prefix}[n]`]?.n;
      if (max !== undefined) for (let i = 0; i <= max; i++) into.add(`${prefix}${i}`);
    }
  };
  const ctx: FormatContext = {
    profile,
    driveNames() {
      if (!drives) {
        const p = qemuConfig();
        drives = new Set();
        expand(p, ['ide', 'sata', 'scsi', 'virtio'], drives);
        for (const k of ['efidisk0', 'tpmstate0']) if (p[k]) drives.add(k);
      }
      return drives;
    },
    bootDevices() {
      if (!bootDevs) {
        bootDevs = new Set([...this.driveNames()].filter((d) => !/^(efidisk|tpmstate)/.test(d)));
        expand(qemuConfig(), ['net', 'usb', 'hostpci'], bootDevs);
      }
      return bootDevs;
    },
  };

  const contentNode = tree.literal.get('nodes')?.param?.node.literal.get('storage')?.param?.node.literal.get('content');
  const res: Loaded = { methods, tree, ctx, contentNode };
  loaded.set(profile, res);
  return res;
}

function families(schema: MethodSchema): Map<string, Family> {
  let f = familiesOf.get(schema);
  if (!f) {
    f = new Map();
    for (const [k, s] of Object.entries(schema.params)) {
      if (k.endsWith('[n]') && s.n !== undefined)
        f.set(k.slice(0, -3), { prefix: k.slice(0, -3), schema: s, max: s.n });
    }
    familiesOf.set(schema, f);
  }
  return f;
}

// --- public API --------------------------------------------------------------------------------

/** All methods of a profile (only the paths the simulator serves or may serve). */
export function methodsOf(profile: Profile): MethodSchema[] {
  return [...load(profile).methods];
}

/** pve-http-server: uri_unescape() of the request path. */
function uriUnescape(p: string): string {
  return p.replace(/(?:%[0-9a-fA-F]{2})+/g, (seq) => {
    try {
      return decodeURIComponent(seq);
    } catch {
      return seq.replace(/%([0-9a-fA-F]{2})/g, (_, h: string) => String.fromCharCode(Number.parseInt(h, 16)));
    }
  });
}

/**
 * Find the schema method for a concrete request path, e.g. '/nodes/pve/qemu/100/config' ->
 * template '/nodes/{node}/qemu/{vmid}/config' and pathParams {node:'pve', vmid:'100'}. The path is
 * relative to /api2/json, as on the wire (it is percent-decoded here, like PVE does). Undefined when
 * PVE has no such method+path (the server then answers 501).
 */
export function matchMethod(
  profile: Profile,
  method: HttpMethod,
  path: string,
): { schema: MethodSchema; template: string; pathParams: Record<string, string> } | undefined {
  const loadedProfile = load(profile);
  let node = loadedProfile.tree;
  const pathParams: Record<string, string> = {};
  const comps = uriUnescape(path)
    .split(/\/+/)
    .filter((x) => x !== '');
  for (let i = 0; i < comps.length; i++) {
    let comp = comps[i]!;
    // pve-storage mounts Storage::Content at `{storage}/content` with `fragmentDelimiter => ''`
    // (src/PVE/API2/Storage/Status.pm): below it the rest of the URI is one component, because
    // volume ids contain '/' (RESTHandler map_path_to_methods joins the stack).
    if (node === loadedProfile.contentNode && i < comps.length - 1) {
      comp = comps.slice(i).join('/');
      i = comps.length;
    }
    const lit = node.literal.get(comp);
    if (lit) {
      node = lit;
      continue;
    }
    // RESTHandler: a `{name}` component matches m/^(\S+)$/
    if (node.param && /^\S+\n?$/.test(comp)) {
      pathParams[node.param.name] = comp.replace(/\n$/, '');
      node = node.param.node;
      continue;
    }
    return undefined;
  }
  const schema = node.methods.get(method);
  return schema ? { schema, template: schema.path, pathParams } : undefined;
}

/**
 * The schema of a parameter of a method, resolving `[n]` families (`net3` -> `net[n]` if 3 is
 * within its range). Undefined for parameters PVE does not know.
 */
export function paramSchema(schema: MethodSchema, name: string): ParamSchema | undefined {
  if (!name.includes('[') && Object.hasOwn(schema.params, name)) return schema.params[name];
  const m = /^(.*?)(0|[1-9][0-9]*)$/.exec(name);
  if (!m) return undefined;
  const fam = families(schema).get(m[1]!);
  if (!fam || Number(m[2]) > fam.max) return undefined;
  return fam.schema;
}

function objectSchema(schema: MethodSchema): ObjectSchema {
  return {
    *keys() {
      for (const [k, s] of Object.entries(schema.params)) if (!k.endsWith('[n]')) yield [k, s];
    },
    lookup: (k) => paramSchema(schema, k),
    isFamilyMember: (k) => !Object.hasOwn(schema.params, k) && paramSchema(schema, k) !== undefined,
  };
}

const listItem = (v: unknown): string => (typeof v === 'boolean' ? (v ? '1' : '0') : scalarString(v));

/**
 * Validate + coerce request parameters exactly like PVE's JSONSchema.pm validate(). `raw` values are
 * strings for form/query input (a repeated form key as an array of strings, a key without `=` as
 * undefined), or JSON values for JSON bodies. Path params are included by the caller. Returns the
 * coerced params (integers/numbers as numbers, booleans as 0/1, strings as strings; undefined/null
 * dropped) and, when validation fails, `errors` (param -> PVE message).
 */
export function validateParams(
  schema: MethodSchema,
  raw: Record<string, unknown>,
): { params: Record<string, unknown>; errors?: Record<string, string> } {
  // null prototypes: a parameter named `__proto__` must be handled like any other
  const params: Record<string, unknown> = Object.create(null);
  if (schema.noProperties) {
    // PVE: no `properties` -> check_prop() never calls check_object(): nothing is validated
    for (const [k, v] of Object.entries(raw)) if (v !== undefined && v !== null) params[k] = coerce(undefined, v);
    return { params: { ...params } };
  }
  const { ctx } = load(schema.profile);
  const value: Record<string, unknown> = Object.assign(Object.create(null), raw);

  if (schema.profile === '8.4' || schema.profile === '9.2') {
    // RESTHandler normalize_legacy_param_formats (pve-common 8.x)
    for (const k of Object.keys(value)) {
      const s = paramSchema(schema, k);
      const v = value[k];
      if (!s || !valueIsTrue(v)) continue;
      if (Array.isArray(v) && s.type === 'string' && typeof s.format === 'string' && /-list$/.test(s.format)) {
        value[k] = v.map(listItem).join(',');
      } else if (!Array.isArray(v) && s.type === 'array') {
        value[k] = [v];
      }
    }
  }

  const errors: Errors = Object.create(null);
  checkObject(ctx, '', objectSchema(schema), value, schema.additionalProperties, errors);
  for (const [k, v] of Object.entries(value)) {
    if (v === undefined || v === null) continue;
    params[k] = coerce(paramSchema(schema, k), v);
  }
  return Object.keys(errors).length ? { params: { ...params }, errors: { ...errors } } : { params: { ...params } };
}

/**
 * Parse a property string (`virtio=BC:24:11:00:00:01,bridge=vmbr0`) with the given format (a
 * format object from a ParamSchema, or a named hash format like 'pve-qm-ipconfig') the way PVE's
 * parse_property_string does, including validation. Aliases are resolved (`virtio=MAC` gives
 * `{model:'virtio', macaddr:'MAC'}`), booleans normalized to '1'/'0'. Throws PerlDie (its `text` is
 * PVE's message, e.g. "format error\nnet0.bogus: property is not defined ...\n").
 */
export function parsePropertyString(
  profile: Profile,
  format: PropertyStringFormat | string,
  value: string,
  path = '',
): Record<string, string> {
  const { ctx } = load(profile);
  const fmt = typeof format === 'string' ? hashFormat(format, profile) : format;
  if (!fmt) throw new PerlDie(`unknown format: ${format}\n`);
  return parsePs(ctx, fmt, value, path);
}
