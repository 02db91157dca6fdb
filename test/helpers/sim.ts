/** Shared test helpers: an in-process simulator and a tiny raw HTTP client for protocol checks. */
import { type Simulator, type SimulatorOptions, startSimulator } from '../../src/sim/index.ts';

export const TOKEN_SECRET = 'c0ffee00-0000-4000-8000-000000000001';
export const TOKEN = `root@pam!test=${TOKEN_SECRET}`;
export const ROOT_PASSWORD = 'test-root-pw';
/**
 * A person's own token (not the provider's): what they destroy is not taken for a destroy of the
 * provider's that PVE may still apply late (src/vm/recent-destroys.ts).
 */
export const OPERATOR_TOKEN = 'root@pam!operator=c0ffee00-0000-4000-8000-000000000002';
export const AS_OPERATOR = { Authorization: `PVEAPIToken=${OPERATOR_TOKEN}` };

export function startTestSim(opts: SimulatorOptions = {}): Promise<Simulator> {
  return startSimulator({
    http: true,
    ephemeralPorts: true,
    speed: 1000,
    authFailDelayMs: 0,
    rootPassword: ROOT_PASSWORD,
    tokens: [TOKEN, OPERATOR_TOKEN],
    seed: 42,
    ...opts,
  });
}

export interface RawResponse {
  status: number;
  reason: string;
  headers: Headers;
  text: string;
  json: unknown;
}

/** A raw request with token auth unless `headers.Authorization` is given (or null for none). */
export async function raw(
  baseUrl: string,
  method: string,
  path: string,
  opts: { form?: Record<string, string>; json?: unknown; headers?: Record<string, string | null> } = {},
): Promise<RawResponse> {
  const headers: Record<string, string> = {};
  if (opts.headers?.Authorization !== null)
    headers.Authorization = opts.headers?.Authorization ?? `PVEAPIToken=${TOKEN}`;
  for (const [k, v] of Object.entries(opts.headers ?? {})) if (v !== null && k !== 'Authorization') headers[k] = v;
  let body: string | undefined;
  if (opts.form) {
    body = new URLSearchParams(opts.form).toString();
    headers['Content-Type'] = 'application/x-www-form-urlencoded';
  } else if (opts.json !== undefined) {
    body = JSON.stringify(opts.json);
    headers['Content-Type'] = 'application/json';
  }
  const res = await fetch(`${baseUrl}/api2/json${path}`, { method, headers, ...(body !== undefined ? { body } : {}) });
  const text = await res.text();
  let json: unknown;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  return { status: res.status, reason: res.statusText, headers: res.headers, text, json };
}

/** Poll a task until it stops (the simulator runs at a high speed factor in tests). */
export async function waitTask(
  baseUrl: string,
  node: string,
  upid: string,
): Promise<{ status: string; exitstatus?: string }> {
  for (let i = 0; i < 2000; i++) {
    const r = await raw(baseUrl, 'GET', `/nodes/${node}/tasks/${encodeURIComponent(upid)}/status`);
    const d = (r.json as { data: { status: string; exitstatus?: string } }).data;
    if (d.status === 'stopped') return d;
    await new Promise((resolve) => setImmediate(resolve));
  }
  throw new Error(`task ${upid} did not finish`);
}
