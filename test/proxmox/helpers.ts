/** Shared set-up for the client tests: an in-process simulator and clients pointed at it. */
import { createServer } from 'node:net';
import { connect } from 'node:tls';
import { inspect } from 'node:util';
import { parseTokenString, passwordCredentials } from '../../src/proxmox/auth.ts';
import { PveClient } from '../../src/proxmox/client.ts';
import type { PveClientOptions } from '../../src/proxmox/client-core.ts';
import type { RequestEvent } from '../../src/proxmox/metrics.ts';
import { type Profile, type Simulator, startSimulator } from '../../src/sim/index.ts';

export const TOKEN_SECRET = 'b7e1c0de-5ec2-4e7a-9f00-5ec12e75ec12';
export const ROOT_PASSWORD = 'r00t-Passw0rd-sim';
export const NODE = 'ml110-01';

export async function sim(profile: Profile = '8.4', opts: { http?: boolean } = {}): Promise<Simulator> {
  return startSimulator({
    profile,
    speed: 1000,
    http: opts.http ?? false,
    ephemeralPorts: true,
    authFailDelayMs: 0,
    rootPassword: ROOT_PASSWORD,
    tokens: [`root@pam!provider=${TOKEN_SECRET}`],
  });
}

export interface Recorded {
  events: RequestEvent[];
  logins: Array<{ renewal: boolean; ok: boolean }>;
  endpointFailures: Array<{ endpoint: string; cause: string; sent: boolean }>;
  warnings: Array<{ obj: object; msg?: string | undefined }>;
}

/** A client of site-1: token auth unless `password`, fingerprint pinning, no real waiting. */
export function client(
  s: Simulator,
  opts: Partial<PveClientOptions> & { password?: boolean; cluster?: string } = {},
): { c: PveClient; rec: Recorded } {
  const site = s.cluster(opts.cluster ?? 'site-1');
  const rec: Recorded = { events: [], logins: [], warnings: [], endpointFailures: [] };
  const { password, cluster: _cluster, ...rest } = opts;
  const c = new PveClient({
    site: site.name,
    endpoints: [site.url],
    credentials: password
      ? passwordCredentials('root@pam', ROOT_PASSWORD)
      : parseTokenString(`root@pam!provider=${TOKEN_SECRET}`),
    ...(site.tls ? { tls: { fingerprints: [site.fingerprint] } } : {}),
    now: () => s.clock.now(),
    retry: { attempts: 3, baseMs: 1, capMs: 2 },
    task: { pollInitialMs: 2, pollMaxMs: 10 },
    hooks: {
      onRequest: (e) => rec.events.push(e),
      onLogin: (e) => rec.logins.push({ renewal: e.renewal, ok: e.ok }),
      onEndpointFailure: (e) => rec.endpointFailures.push({ endpoint: e.endpoint, cause: e.cause, sent: e.sent }),
    },
    logger: { warn: (obj, msg) => rec.warnings.push({ obj, msg }) },
    ...rest,
  });
  return { c, rec };
}

/** A loopback port nothing listens on (connection refused). */
export async function deadPort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

/** The PEM certificate an endpoint presents. */
export async function fetchCertPem(url: string): Promise<string> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const sock = connect({ host: u.hostname, port: Number(u.port), rejectUnauthorized: false }, () => {
      const raw = sock.getPeerCertificate(true).raw;
      sock.end();
      const b64 = raw
        .toString('base64')
        .match(/.{1,64}/g)!
        .join('\n');
      resolve(`-----BEGIN CERTIFICATE-----\n${b64}\n-----END CERTIFICATE-----\n`);
    });
    sock.once('error', reject);
  });
}

/** Everything an error exposes (message, stack, fields, JSON, inspect). */
export function exposed(e: unknown): string {
  const parts = [String(e), inspect(e, { depth: 10, showHidden: true })];
  try {
    parts.push(JSON.stringify(e));
  } catch {
    // circular: inspect covers it
  }
  if (e instanceof Error) parts.push(e.message, e.stack ?? '');
  return parts.join('\n');
}

/** The error a promise rejects with. */
export async function rejection(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (e) {
    return e;
  }
  throw new Error('expected a rejection');
}

export function counters(s: Simulator, cluster = 'site-1'): Map<string, number> {
  return s.cluster(cluster).faults.counters;
}
