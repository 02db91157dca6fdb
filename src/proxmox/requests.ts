/**
 * What a request to PVE is, and its wire form. A `PveRequest` is a method, a PVE path template,
 * path parameters, parameters, and how to read the answer; the builders of requests-cluster.ts and
 * requests-qemu.ts make theirs with req() and the answer decoders here, and client-core.ts sends
 * them with buildPath() and wireParams(). Nothing here does I/O.
 *
 * Parameter values are what the caller means (`true`, `['net1','ide2']`, plain ssh keys); wireParams()
 * turns them into what PVE expects on the wire (`1`, `net1,ide2`, percent-encoded keys).
 */
import type { HttpMethod } from './transport.ts';

export type { HttpMethod };

export type ParamValue = string | number | boolean | readonly string[] | undefined;

export interface PveRequest<T> {
  readonly method: HttpMethod;
  /** PVE path template (`/nodes/{node}/qemu/{vmid}/config`): also the metrics label. */
  readonly path: string;
  readonly pathParams: Readonly<Record<string, string | number>>;
  readonly params: Readonly<Record<string, ParamValue>>;
  /** Reads (and login) may be resent after a network failure and are retried with backoff. */
  readonly idempotent: boolean;
  /** Parameter names whose values are secrets: scrubbed from every error. */
  readonly sensitive?: readonly string[];
  /** Turns `data` of the answer into T. */
  readonly decode: (data: unknown) => T;
  /** Array parameters sent as one pair per element (schema type `array`), not comma-joined. */
  readonly repeated?: readonly string[];
}

/** A UPID (a worker task was started). */
export type Upid = string;

const asIs = <T>(d: unknown): T => d as T;

export function req<T>(
  method: HttpMethod,
  path: string,
  pathParams: Record<string, string | number>,
  params: Record<string, ParamValue> = {},
  extra: { decode?: (d: unknown) => T; sensitive?: string[]; idempotent?: boolean; repeated?: string[] } = {},
): PveRequest<T> {
  const clean: Record<string, ParamValue> = {};
  for (const [k, v] of Object.entries(params)) if (v !== undefined) clean[k] = v;
  return {
    method,
    path,
    pathParams,
    params: clean,
    idempotent: extra.idempotent ?? method === 'GET',
    ...(extra.sensitive ? { sensitive: extra.sensitive } : {}),
    ...(extra.repeated ? { repeated: extra.repeated } : {}),
    decode: extra.decode ?? asIs,
  };
}

export function upid(d: unknown): Upid {
  if (typeof d !== 'string' || !d.startsWith('UPID:'))
    throw new TypeError(`expected a task UPID, got ${JSON.stringify(d)}`);
  return d;
}

export function upidOrNull(d: unknown): Upid | null {
  return d === null || d === undefined || d === '' ? null : upid(d);
}

export function list<T>(d: unknown): T[] {
  return Array.isArray(d) ? (d as T[]) : [];
}

/**
 * The wire form of parameters: booleans as 0/1, lists comma-joined, `sshkeys` percent-encoded
 * (PVE's `urlencoded` format: `%20` for a space, never `+`; form encoding then encodes it again).
 */
export function wireParams(
  params: Readonly<Record<string, ParamValue>>,
  repeated: readonly string[] = [],
): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined) continue;
    // A parameter of schema type `array` (PVE 8's agent exec `command`): one pair per element,
    // which PVE's HTTP server collects into the list.
    if (Array.isArray(v) && repeated.includes(k)) {
      for (const x of v) out.push([k, String(x)]);
      continue;
    }
    let s: string;
    if (typeof v === 'boolean') s = v ? '1' : '0';
    else if (Array.isArray(v)) s = v.join(',');
    else s = String(v);
    if (k === 'sshkeys') s = encodeURIComponent(s);
    out.push([k, s]);
  }
  return out;
}

/** `/nodes/{node}/qemu/{vmid}` + `{node:'pve', vmid:100}` -> `/nodes/pve/qemu/100`, segments encoded. */
export function buildPath(template: string, pathParams: Readonly<Record<string, string | number>>): string {
  return template.replace(/\{([^}]+)\}/g, (_m, name: string) => {
    const v = pathParams[name];
    if (v === undefined || v === '') throw new TypeError(`path parameter '${name}' of ${template} is missing`);
    return encodeURIComponent(String(v));
  });
}
