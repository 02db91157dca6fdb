/**
 * Test support: every method of a Proxmox VE release with its return schema, read from the API
 * descriptions in ../shared/pve-api (the generated schemas in src/sim keep parameters only), and
 * a checker that compares an answer with a return schema the way PVE's JSONSchema would see its
 * shape: types, enums, required properties, array items. Undeclared properties are allowed: real
 * PVE answers carry them too (`/nodes` has `id` and `type`, for one), and PVE does not verify
 * returns at run time.
 */
import { existsSync, readFileSync } from 'node:fs';
import { defaultApiDir } from '../../scripts/gen-pve-schema.ts';
import type { HttpMethod, Profile } from '../../src/sim/schema/index.ts';

// biome-ignore lint/suspicious/noExplicitAny: raw third-party JSON
type Raw = any;

export interface ReturnSchema {
  type?: string;
  optional?: boolean;
  enum?: string[];
  items?: ReturnSchema;
  properties?: Record<string, ReturnSchema>;
}

export interface ApiMethod {
  method: HttpMethod;
  path: string;
  returns: ReturnSchema | undefined;
}

const FILES: Record<Profile, string> = {
  '6.4': 'apidoc-6.4-15.json',
  '7.4': 'apidoc-7.4-16.json',
  '8.4': 'apidoc-8.4.5.json',
  '9.2': 'snapshot-9.2.3.json',
};

export const API_DIR = defaultApiDir();
export const HAVE_API = existsSync(API_DIR);

/** The 9.2 snapshot's normalized definitions (`enum: []`, `properties: {}` everywhere) in apidoc form. */
function denorm(d: Raw): ReturnSchema | undefined {
  if (!d || typeof d !== 'object') return undefined;
  const r: ReturnSchema = {};
  if (d.type) r.type = d.type;
  if (d.optional) r.optional = true;
  if (Array.isArray(d.enum) && d.enum.length) r.enum = d.enum.map(String);
  if (d.items) r.items = denorm(d.items);
  if (d.properties && Object.keys(d.properties).length) {
    r.properties = {};
    for (const [k, v] of Object.entries<Raw>(d.properties)) r.properties[k] = denorm(v)!;
  }
  return r;
}

/**
 * `GET /`: PVE::API2 `index` (pve-manager PVE/API2.pm), left out of the published description,
 * which starts below the root.
 */
const ROOT: ApiMethod = {
  method: 'GET',
  path: '/',
  returns: { type: 'array', items: { type: 'object', properties: { subdir: { type: 'string' } } } },
};

const cache = new Map<Profile, ApiMethod[]>();

export function apiMethods(profile: Profile): ApiMethod[] {
  const hit = cache.get(profile);
  if (hit) return hit;
  const raw = JSON.parse(readFileSync(`${API_DIR}/${FILES[profile]}`, 'utf8')) as Raw;
  const out: ApiMethod[] = [ROOT];
  if (profile === '9.2') {
    for (const p of raw.paths)
      for (const m of p.methods) out.push({ method: m.verb, path: p.path, returns: denorm(m.returns) });
  } else {
    const walk = (n: Raw) => {
      for (const verb of ['GET', 'POST', 'PUT', 'DELETE'] as const) {
        const m = n.info?.[verb];
        if (m) out.push({ method: verb, path: n.path, returns: denorm(m.returns) });
      }
      for (const c of n.children ?? []) walk(c);
    };
    for (const r of raw) walk(r);
  }
  cache.set(profile, out);
  return out;
}

/** Where an answer departs from its return schema; empty when it fits. */
export function checkReturn(schema: ReturnSchema | undefined, value: unknown, at = 'data'): string[] {
  if (!schema) return [];
  const errs: string[] = [];
  if (value === null || value === undefined) {
    // `returns => { type => 'null' }`, or nothing declared beyond a type PVE may answer undef for.
    if (schema.type === 'null' || schema.type === undefined) return [];
    return [`${at}: null, expected ${schema.type}`];
  }
  switch (schema.type) {
    case 'null':
      return [`${at}: expected null, got ${JSON.stringify(value).slice(0, 60)}`];
    case 'string':
      if (typeof value !== 'string') return [`${at}: expected string, got ${typeof value}`];
      if (schema.enum && !schema.enum.includes(value)) return [`${at}: '${value}' not in [${schema.enum}]`];
      return [];
    case 'integer':
      return Number.isInteger(value) ? [] : [`${at}: expected integer, got ${JSON.stringify(value)}`];
    case 'number':
      return typeof value === 'number' ? [] : [`${at}: expected number, got ${JSON.stringify(value)}`];
    case 'boolean':
      return value === 0 || value === 1 || typeof value === 'boolean'
        ? []
        : [`${at}: expected boolean, got ${JSON.stringify(value)}`];
    case 'array':
      if (!Array.isArray(value)) return [`${at}: expected array, got ${typeof value}`];
      for (const [i, v] of value.entries()) errs.push(...checkReturn(schema.items, v, `${at}[${i}]`));
      return errs;
    case 'object': {
      if (typeof value !== 'object' || Array.isArray(value)) return [`${at}: expected object`];
      const o = value as Record<string, unknown>;
      for (const [k, s] of Object.entries(schema.properties ?? {})) {
        if (!(k in o) || o[k] === undefined) {
          if (!s.optional) errs.push(`${at}.${k}: missing`);
          continue;
        }
        errs.push(...checkReturn(s, o[k], `${at}.${k}`));
      }
      return errs;
    }
    default:
      return [];
  }
}
