/**
 * TypeBox (JSON Schema) schemas as Kubernetes structural schemas, for the CRDs (crd.ts):
 * - TypeBox-only keywords (`$id`, `errorMessage`, ...) are dropped; an unknown keyword is an error,
 *   so a new TypeBox feature cannot slip into a CRD unnoticed;
 * - `additionalProperties: false` is dropped (Kubernetes forbids it and prunes unknown fields anyway);
 * - unions of literals become `enum`; a string | integer union (the quantities: `4Gi` or `4096`)
 *   becomes `x-kubernetes-int-or-string` with the string's pattern, and a `maxLength` so that the API
 *   server can bound the CEL cost of rules on it; any other union cannot be structural and becomes
 *   `x-kubernetes-preserve-unknown-fields` (the engine validates it);
 * - `patternProperties` (TypeBox records) become `additionalProperties`; free-form objects keep
 *   unknown fields.
 */

export type JsonSchema = Record<string, unknown>;

/** Keywords copied as they are (Kubernetes' JSONSchemaProps has them with the same meaning). */
const COPIED = new Set([
  'description',
  'title',
  'default',
  'minimum',
  'maximum',
  'multipleOf',
  'minLength',
  'maxLength',
  'pattern',
  'minItems',
  'maxItems',
  'minProperties',
  'maxProperties',
  'enum',
  'nullable',
]);

/** Keywords TypeBox (or our schemas) use that mean nothing to Kubernetes: dropped. */
const DROPPED = new Set(['$id', '$schema', '$comment', 'errorMessage', 'examples']);

/** Formats the Kubernetes OpenAPI validator knows (a subset of its list; extend when needed). */
const FORMATS = new Set([
  'int32',
  'int64',
  'float',
  'double',
  'byte',
  'date',
  'date-time',
  'duration',
  'uri',
  'email',
  'hostname',
  'ipv4',
  'ipv6',
  'cidr',
  'mac',
  'uuid',
  'password',
]);

/**
 * Upper bound for the string form of an int-or-string (a quantity is at most ~20 characters).
 * Kubernetes >= 1.34 uses it to estimate the cost of CEL rules on the value (older versions cost
 * every int-or-string as a 3 MiB string).
 */
export const INT_OR_STRING_MAX_LENGTH = 32;

const INT_OR_STRING_KEYWORDS = {
  integer: ['minimum', 'maximum', 'multipleOf', 'exclusiveMinimum', 'exclusiveMaximum'],
  string: ['pattern', 'minLength', 'maxLength'],
} as const;

function isObject(x: unknown): x is JsonSchema {
  return typeof x === 'object' && x !== null && !Array.isArray(x);
}

function jsonType(v: unknown): string {
  if (typeof v === 'string') return 'string';
  if (typeof v === 'boolean') return 'boolean';
  if (typeof v === 'number') return Number.isInteger(v) ? 'integer' : 'number';
  if (Array.isArray(v)) return 'array';
  return 'object';
}

function describe(s: JsonSchema): string {
  if ('const' in s) return JSON.stringify(s.const);
  if (s.type === 'array' && isObject(s.items)) return `a list (each ${describe(s.items)})`;
  if (s.type === 'object') return 'an object';
  return typeof s.type === 'string' ? `a ${s.type}` : 'a value';
}

/** JSON Schema (2020) numeric exclusive bounds -> OpenAPI v3.0 boolean ones. */
function copyBound(s: JsonSchema, out: JsonSchema, key: 'exclusiveMinimum' | 'exclusiveMaximum', at: string): void {
  const v = s[key];
  if (v === undefined) return;
  if (typeof v !== 'number') throw new Error(`${at}: ${key} must be a number`);
  const bound = key === 'exclusiveMinimum' ? 'minimum' : 'maximum';
  if (out[bound] !== undefined) throw new Error(`${at}: both ${bound} and ${key}`);
  out[bound] = v;
  out[key] = true;
}

/**
 * A Kubernetes structural schema from a JSON Schema (TypeBox). `at` names the node in errors.
 * Throws on what it cannot represent faithfully.
 */
export function toStructural(input: unknown, at = '$'): JsonSchema {
  if (!isObject(input)) throw new Error(`${at}: not a schema`);
  const s = input;
  const out: JsonSchema = {};
  const handled = new Set<string>([...DROPPED]);
  const copy = (key: string) => {
    handled.add(key);
    if (s[key] !== undefined) out[key] = structuredClone(s[key]);
  };
  for (const k of ['description', 'title', 'default']) copy(k);

  if (Array.isArray(s.anyOf)) {
    handled.add('anyOf');
    handled.add('type');
    convertUnion(s, s.anyOf, out, at);
  } else if ('const' in s) {
    handled.add('const');
    handled.add('type');
    out.type = typeof s.type === 'string' ? s.type : jsonType(s.const);
    out.enum = [structuredClone(s.const)];
  } else if (s.type === 'object') {
    handled.add('type');
    for (const k of ['properties', 'required', 'additionalProperties', 'patternProperties']) handled.add(k);
    convertObject(s, out, at);
  } else if (s.type === 'array') {
    handled.add('type');
    handled.add('items');
    out.type = 'array';
    if (!isObject(s.items)) throw new Error(`${at}: an array needs one items schema`);
    out.items = toStructural(s.items, `${at}[]`);
  } else if (s.type === 'string' || s.type === 'integer' || s.type === 'number' || s.type === 'boolean') {
    handled.add('type');
    out.type = s.type;
  } else if (s.type === undefined) {
    // Type.Unknown() / Type.Any(): anything goes, keep it as it is.
    out['x-kubernetes-preserve-unknown-fields'] = true;
  } else {
    throw new Error(`${at}: unsupported type ${JSON.stringify(s.type)}`);
  }

  for (const k of COPIED) if (!handled.has(k)) copy(k);
  if (s.format !== undefined) {
    handled.add('format');
    if (typeof s.format !== 'string' || !FORMATS.has(s.format)) {
      throw new Error(`${at}: format ${JSON.stringify(s.format)} is not one Kubernetes validates`);
    }
    out.format = s.format;
  }
  handled.add('exclusiveMinimum');
  handled.add('exclusiveMaximum');
  copyBound(s, out, 'exclusiveMinimum', at);
  copyBound(s, out, 'exclusiveMaximum', at);
  if (s.uniqueItems !== undefined) {
    handled.add('uniqueItems');
    if (s.uniqueItems === true) {
      // Kubernetes forbids uniqueItems; a set list says the same for scalars.
      out['x-kubernetes-list-type'] = 'set';
    }
  }
  for (const [k, v] of Object.entries(s)) {
    if (k.startsWith('x-kubernetes-')) {
      out[k] = structuredClone(v);
      continue;
    }
    if (!handled.has(k)) throw new Error(`${at}: unsupported JSON Schema keyword '${k}'`);
  }
  return out;
}

function convertObject(s: JsonSchema, out: JsonSchema, at: string): void {
  out.type = 'object';
  const props = s.properties;
  if (props !== undefined) {
    if (!isObject(props)) throw new Error(`${at}: properties must be an object`);
    const converted: JsonSchema = {};
    for (const [k, v] of Object.entries(props)) converted[k] = toStructural(v, `${at}.${k}`);
    if (Object.keys(converted).length) out.properties = converted;
  }
  if (Array.isArray(s.required) && s.required.length) out.required = [...(s.required as string[])];
  const hasProps = isObject(props) && Object.keys(props).length > 0;
  if (s.patternProperties !== undefined) {
    const pp = s.patternProperties;
    if (!isObject(pp) || Object.keys(pp).length !== 1 || hasProps || s.additionalProperties !== undefined) {
      throw new Error(`${at}: only a record (one patternProperties entry, no properties) is supported`);
    }
    const [pattern, value] = Object.entries(pp)[0]!;
    if (pattern !== '^.*$' && pattern !== '^(.*)$') {
      throw new Error(`${at}: record keys restricted by ${pattern} cannot be expressed in a CRD`);
    }
    out.additionalProperties = toStructural(value, `${at}.*`);
    return;
  }
  const ap = s.additionalProperties;
  if (ap === false) {
    // Kubernetes prunes unknown fields anyway, and forbids additionalProperties next to properties.
  } else if (ap === undefined) {
    // An object with properties keeps those (the rest is pruned); one without any is free-form.
    if (!hasProps) out['x-kubernetes-preserve-unknown-fields'] = true;
  } else if (ap === true) {
    out['x-kubernetes-preserve-unknown-fields'] = true;
  } else if (isObject(ap)) {
    if (hasProps) throw new Error(`${at}: properties and an additionalProperties schema cannot be combined`);
    out.additionalProperties = toStructural(ap, `${at}.*`);
  } else {
    throw new Error(`${at}: bad additionalProperties`);
  }
}

function convertUnion(s: JsonSchema, branches: unknown[], out: JsonSchema, at: string): void {
  if (!branches.every(isObject) || branches.length === 0) throw new Error(`${at}: bad anyOf`);
  const bs = branches as JsonSchema[];
  // A union of literals of one type: an enum.
  if (bs.every((b) => 'const' in b)) {
    const types = new Set(bs.map((b) => (typeof b.type === 'string' ? b.type : jsonType(b.const))));
    if (types.size === 1) {
      out.type = [...types][0];
      out.enum = bs.map((b) => structuredClone(b.const));
      return;
    }
  }
  // string | integer (a quantity): int-or-string, the branches' validations on the node (each keyword
  // applies to its own JSON type only), the anyOf exactly as Kubernetes requires it.
  const str = bs.find((b) => b.type === 'string' && !('const' in b));
  const int = bs.find((b) => b.type === 'integer' && !('const' in b));
  if (bs.length === 2 && str && int) {
    out['x-kubernetes-int-or-string'] = true;
    out.anyOf = [{ type: 'integer' }, { type: 'string' }];
    for (const [branch, allowed] of [
      [int, INT_OR_STRING_KEYWORDS.integer],
      [str, INT_OR_STRING_KEYWORDS.string],
    ] as const) {
      for (const [k, v] of Object.entries(branch)) {
        if (k === 'type' || k === 'description' || DROPPED.has(k)) continue;
        if (!(allowed as readonly string[]).includes(k)) {
          throw new Error(`${at}: keyword '${k}' in a ${branch.type} branch of an int-or-string`);
        }
        if (k === 'exclusiveMinimum' || k === 'exclusiveMaximum') copyBound(branch, out, k, at);
        else out[k] = structuredClone(v);
      }
    }
    out.maxLength ??= INT_OR_STRING_MAX_LENGTH;
    return;
  }
  // Anything else (e.g. string | list of strings) has no structural form: keep the value as it is
  // and say in the description what it may be; the engine validates it.
  out['x-kubernetes-preserve-unknown-fields'] = true;
  const alternatives = `One of: ${bs.map(describe).join('; ')}.`;
  out.description = typeof s.description === 'string' ? `${s.description} ${alternatives}` : alternatives;
}

/** The node at a dotted path (`spec.forProvider.disks[].size`) of a converted schema. */
export function schemaAt(root: JsonSchema, path: string): JsonSchema {
  let cur: JsonSchema = root;
  for (const seg of path.split('.')) {
    const isItems = seg.endsWith('[]');
    const name = isItems ? seg.slice(0, -2) : seg;
    const props = cur.properties as Record<string, JsonSchema> | undefined;
    const next = props?.[name];
    if (!next) throw new Error(`no schema at ${path} (${name})`);
    cur = next;
    if (isItems) {
      if (!isObject(cur.items)) throw new Error(`no items at ${path} (${name})`);
      cur = cur.items;
    }
  }
  return cur;
}
