/**
 * A re-implementation of the parts of pve-common's src/PVE/JSONSchema.pm that validate API
 * parameters: validate() -> check_prop() -> check_type() / check_object() / check_format() /
 * parse_property_string(), with PVE's messages. Differences between the four profiles:
 *
 * - JSON `true`/`false`: rejected for boolean parameters before pve-common 8.0 (fix #4778,
 *   June 2023: `type check ('boolean') failed - got JSON::PP::Boolean`), accepted from 8.x.
 * - `-alist` formats behave like `-list` before 8.0.
 * - `requires` message: `missing property - 'x' requires this property` before pve-common 9,
 *   `missing property required by 'x'` from 9.0.
 * - 9.x: aliases are remapped before validation (`cannot set both ...`), a second value for an
 *   aliased property-string key fails (`key 'x' is already defined (via alias)`), and a
 *   default-key boolean accepts on/yes/true.
 * - 8.x+: RESTHandler joins arrays given for `-list` string parameters with ',' and wraps single
 *   values given for `array` parameters (normalize_legacy_param_formats).
 *
 * Perl's hash order decides the order of joined messages and of the `key: msg` lines of a nested
 * format error; this implementation sorts them (PVE's order is random).
 */
import { CODE_FORMATS, hashFormat, PerlDie } from './formats.ts';
import { isInteger, isNumber, parseBoolean, perlLength, perlNumber, perlSplit, perlTrue, splitList } from './perl.ts';
import type { FormatContext, ParamSchema, PropertyStringFormat } from './types.ts';

export type Errors = Record<string, string>;

const NOT_DEFINED = 'property is not defined in schema and the schema does not allow additional properties';
const JSON_BOOL = 'JSON::PP::Boolean';

function addError(errors: Errors, path: string, msg: string): void {
  const p = path || '_root';
  // Perl: join('\n', ...) in single quotes, i.e. a literal backslash and n
  errors[p] = errors[p] !== undefined ? `${errors[p]}\\n${msg}` : msg;
}

const after90 = (ctx: FormatContext) => ctx.profile === '9.2';
const after80 = (ctx: FormatContext) => ctx.profile === '8.4' || ctx.profile === '9.2';

/** Perl `ref()` of a decoded JSON value ('' for plain scalars). */
function refOf(v: unknown): string {
  if (Array.isArray(v)) return 'ARRAY';
  if (typeof v === 'boolean') return JSON_BOOL;
  if (v !== null && typeof v === 'object') return 'HASH';
  return '';
}

/** A plain scalar as Perl would print it. */
export function scalarString(v: unknown): string {
  if (typeof v === 'number') return perlNumber(v);
  return String(v);
}

function compileCache(): (src: string) => RegExp {
  const cache = new Map<string, RegExp>();
  return (src) => {
    let re = cache.get(src);
    if (!re) {
      // m/^$pattern$/ without grouping, with Perl's `$`
      re = new RegExp(`^${src}(?=\\n?$)`);
      cache.set(src, re);
    }
    return re;
  };
}
const patternRe = compileCache();

function checkType(
  ctx: FormatContext,
  path: string,
  type: string | undefined,
  value: unknown,
  errors: Errors,
): boolean {
  if (!type || type === 'any') return true;
  if (type === 'null') {
    addError(errors, path, `type check ('${type}') failed - value is not null`);
    return false;
  }
  const vt = refOf(value);
  if (type === 'array' || type === 'object' || type === 'coderef') {
    const want = type === 'array' ? 'ARRAY' : type === 'object' ? 'HASH' : 'CODE';
    if (vt !== want) {
      addError(errors, path, `type check ('${type}') failed`);
      return false;
    }
    return true;
  }
  if (vt) {
    if (type === 'boolean' && vt === JSON_BOOL && after80(ctx)) return true;
    addError(errors, path, `type check ('${type}') failed - got ${vt}`);
    return false;
  }
  const s = scalarString(value);
  if (type === 'boolean') {
    if (s === '1' || s === '0') return true;
  } else if (type === 'integer') {
    if (isInteger(s)) return true;
  } else if (type === 'number') {
    if (isNumber(s)) return true;
  } else {
    return true; // 'string' and unknown types
  }
  addError(errors, path, `type check ('${type}') failed - got '${s}'`);
  return false;
}

/** check_prop() */
export function checkProp(ctx: FormatContext, value: unknown, schema: ParamSchema, path: string, errors: Errors): void {
  // aliases are optional and remapped (9.x: skipped explicitly; before: nothing to check on them)
  if (schema.alias) return;
  if (value === undefined || value === null) {
    if (schema.type === 'null') return;
    if (!schema.optional) addError(errors, path, 'property is missing and it is not optional');
    return;
  }
  if (!checkType(ctx, path, schema.type, value, errors)) return;

  if (Array.isArray(value)) {
    if (schema.items) {
      value.forEach((el, i) => {
        checkProp(ctx, el, schema.items!, `${path}[${i}]`, errors);
      });
    }
    return;
  }
  if (refOf(value)) return; // JSON boolean or object: nothing more is checked

  const s = scalarString(value);
  if (schema.format !== undefined && schema.format !== '') {
    try {
      checkFormat(ctx, schema.format, s, path);
    } catch (e) {
      if (!(e instanceof PerlDie)) throw e;
      addError(errors, path, `invalid format - ${e.text}`);
      return;
    }
  }
  if (schema.pattern && !patternRe(schema.pattern).test(s)) {
    addError(errors, path, 'value does not match the regex pattern');
    return;
  }
  if (schema.maxLength !== undefined && perlLength(s) > schema.maxLength) {
    addError(errors, path, `value may only be ${perlNumber(schema.maxLength)} characters long`);
    return;
  }
  if (schema.minLength !== undefined && perlLength(s) < schema.minLength) {
    addError(errors, path, `value must be at least ${perlNumber(schema.minLength)} characters long`);
    return;
  }
  if (isNumber(s)) {
    const n = Number(s);
    if (schema.maximum !== undefined && n > schema.maximum) {
      addError(errors, path, `value must have a maximum value of ${perlNumber(schema.maximum)}`);
      return;
    }
    if (schema.minimum !== undefined && n < schema.minimum) {
      addError(errors, path, `value must have a minimum value of ${perlNumber(schema.minimum)}`);
      return;
    }
  }
  if (schema.enum && !schema.enum.includes(s)) {
    addError(errors, path, `value '${s}' does not have a value in the enumeration '${schema.enum.join(', ')}'`);
  }
}

export interface ObjectSchema {
  /** Declared keys (iterated for "missing" checks). */
  keys(): Iterable<[string, ParamSchema]>;
  /** Schema of a present key (families resolved), undefined when unknown. */
  lookup(key: string): ParamSchema | undefined;
  /** True when `lookup(key)` resolves a key that keys() does not list (a `[n]` family member). */
  isFamilyMember(key: string): boolean;
}

export function plainObjectSchema(format: PropertyStringFormat): ObjectSchema {
  return {
    keys: () => Object.entries(format),
    lookup: (k) => (Object.hasOwn(format, k) ? format[k] : undefined),
    isFamilyMember: () => false,
  };
}

/** check_object() */
export function checkObject(
  ctx: FormatContext,
  path: string,
  schema: ObjectSchema,
  value: Record<string, unknown>,
  additionalProperties: boolean,
  errors: Errors,
): void {
  const sub = (k: string) => (path ? `${path}.${k}` : k);
  if (after90(ctx)) {
    for (const k of Object.keys(value).sort()) {
      const alias = schema.lookup(k)?.alias;
      if (alias === undefined) continue;
      if (value[alias] !== undefined && value[alias] !== null) {
        addError(errors, sub(k), `cannot set both '${k}' and its alias target '${alias}'`);
      } else {
        value[alias] = value[k];
        delete value[k];
      }
    }
  }
  for (const [k, s] of schema.keys()) checkProp(ctx, value[k], s, sub(k), errors);
  for (const k of Object.keys(value).sort()) {
    const s = schema.lookup(k);
    if (s) {
      if (schema.isFamilyMember(k)) checkProp(ctx, value[k], s, sub(k), errors);
      const req = s.requires;
      if (req !== undefined && (value[req] === undefined || value[req] === null)) {
        addError(
          errors,
          sub(req),
          after90(ctx)
            ? `missing property required by '${sub(k)}'`
            : `missing property - '${sub(k)}' requires this property`,
        );
      }
      continue;
    }
    if (!additionalProperties) addError(errors, sub(k), NOT_DEFINED);
  }
}

/** check_format(); throws PerlDie. Unknown named formats are accepted (see formats.ts). */
export function checkFormat(
  ctx: FormatContext,
  format: string | PropertyStringFormat,
  value: string,
  path: string,
): void {
  if (typeof format !== 'string') {
    parsePropertyString(ctx, format, value, path);
    return;
  }
  if (format === 'regex') return;
  const m = (after80(ctx) ? /^(.*?)(?:-(list|opt))?$/ : /^(.*?)(?:-a?(list|opt))?$/).exec(format)!;
  const name = m[1]!;
  const kind = m[2] ?? 'none';
  const code = CODE_FORMATS[name];
  const hash = code ? undefined : hashFormat(name, ctx.profile);
  if (!code && !hash) return;
  if (kind !== 'none' && hash) throw new PerlDie(`'-${kind}' format must have code ref, not hash\n`);
  if (kind === 'list') {
    for (const v of splitList(value)) code!(v, ctx);
  } else if (kind === 'opt') {
    if (perlTrue(value)) code!(value, ctx);
  } else if (hash) {
    parsePropertyString(ctx, hash, value, path);
  } else {
    code!(value, ctx);
  }
}

/**
 * parse_property_string(): parses `virtio,bridge=vmbr0,tag=5` against a property-string format and
 * validates it; returns the keys (aliases resolved, booleans as '1'/'0'). Throws PerlDie with PVE's
 * message (`format error\n<path>.<key>: <msg>\n` for key errors).
 */
export function parsePropertyString(
  ctx: FormatContext,
  format: PropertyStringFormat,
  data: string,
  path: string,
): Record<string, string> {
  // null prototype: keys like `__proto__` must be stored like any other (and reported as unknown)
  const res: Record<string, string> = Object.create(null);
  const has = (k: string) => Object.hasOwn(res, k);
  let defaultKey: string | undefined;
  for (const part of perlSplit(data, ',')) {
    if (/^\s*$/.test(part)) continue;
    const kv = /^([^=]+)=([^\n]+)\n?$/.exec(part);
    if (kv) {
      let k = kv[1]!;
      let v = kv[2]!;
      if (has(k)) throw new PerlDie(`duplicate key in comma-separated list property: ${k}\n`);
      // an unknown key autovivifies `$schema` to {} in Perl, so it is stored and reported by
      // check_object as "not defined in schema" rather than as "invalid key"
      let schema: ParamSchema | undefined = Object.hasOwn(format, k) ? format[k] : {};
      const alias = schema?.alias;
      if (alias !== undefined) {
        const keyAlias = schema!.keyAlias;
        if (keyAlias !== undefined) {
          if (has(keyAlias)) throw new PerlDie(`key alias '${keyAlias}' is already defined\n`);
          res[keyAlias] = k;
        }
        k = alias;
        schema = Object.hasOwn(format, k) ? format[k] : undefined;
        if (after90(ctx) && has(k)) throw new PerlDie(`key '${k}' is already defined (via alias)\n`);
      }
      if (!schema) throw new PerlDie(`invalid key in comma-separated list property: ${k}\n`);
      if (schema.type === 'boolean') v = parseBoolean(v) ?? v;
      res[k] = v;
    } else if (!part.includes('=')) {
      if (defaultKey !== undefined)
        throw new PerlDie(`duplicate key in comma-separated list property: ${defaultKey}\n`);
      for (const [key, s] of Object.entries(format)) {
        if (!s.default_key) continue;
        defaultKey = key;
        if (perlTrue(res[key])) throw new PerlDie(`duplicate key in comma-separated list property: ${defaultKey}\n`);
        res[key] = after90(ctx) && s.type === 'boolean' ? (parseBoolean(part) ?? part) : part;
        break;
      }
      if (defaultKey === undefined) throw new PerlDie('value without key, but schema does not define a default key\n');
    } else {
      throw new PerlDie('missing key in comma-separated list property\n');
    }
  }
  const errors: Errors = Object.create(null);
  checkObject(ctx, path, plainObjectSchema(format), res, false, errors);
  const keys = Object.keys(errors).sort();
  if (keys.length) {
    throw new PerlDie(`format error\n${keys.map((k) => `${k}: ${errors[k]}\n`).join('')}`, { ...errors });
  }
  return { ...res };
}

/** Perl truthiness of a decoded request value (for normalize_legacy_param_formats). */
export function valueIsTrue(v: unknown): boolean {
  if (v === undefined || v === null || v === false) return false;
  if (typeof v === 'object') return true;
  return perlTrue(scalarString(v));
}

/** Coerce a validated value: integers/numbers to numbers, booleans to 0/1, strings to strings. */
export function coerce(schema: ParamSchema | undefined, v: unknown): unknown {
  if (v === undefined || v === null) return v;
  if (Array.isArray(v)) return v.map((el) => coerce(schema?.items, el));
  if (typeof v === 'boolean') return schema?.type === 'boolean' ? (v ? 1 : 0) : v;
  if (typeof v === 'object') return v;
  const s = scalarString(v);
  switch (schema?.type) {
    case 'integer':
    case 'number':
      return isNumber(s) ? Number(s) : s;
    case 'boolean':
      return s === '1' ? 1 : s === '0' ? 0 : s;
    default:
      return s;
  }
}
