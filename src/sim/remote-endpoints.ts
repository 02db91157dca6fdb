/**
 * How a simulated cluster reaches another one for `remote_migrate`: every listening cluster of
 * every simulator in this process registers its API endpoint here, and a `target-endpoint`
 * (`host`, `port`) is resolved against them. The calls then run in-process on the target's state,
 * with the target's own authentication (its token table, its 401 texts), TLS fingerprint and
 * faults (`unavailable`, its nodes' `node-offline`), and fail as PVE::APIClient::LWP reports it:
 * `<status> <reason>` plus one `param: message` line per parameter error (APIClient::Exception
 * stringify), `Can't connect to HOST:PORT (…)` for an endpoint nobody listens on, and
 * `fingerprint '…' not verified, abort!` for a certificate the caller did not pin.
 *
 * Sources: pve-apiclient src/PVE/APIClient/LWP.pm:243-370 (manual_verify_fingerprint, call) and
 * src/PVE/APIClient/Exception.pm:104-135 (stringify) at a561528; qemu-server
 * src/PVE/API2/Qemu.pm:5732-5760 at e6352be (the connection arguments: https, port 8006 by default,
 * the fingerprint pinned upper-case).
 */
import { type AuthInfo, authenticate } from './auth.ts';
import { PveHttpError } from './errors.ts';
import type { Faults } from './faults.ts';
import type { ClusterState } from './state.ts';
import type { TaskRunner } from './tasks.ts';

export interface SimEndpoint {
  state: ClusterState;
  tasks: TaskRunner;
  faults: Faults;
  tls: boolean;
  /** SHA-256 of the certificate, `AA:BB:…` ('' without TLS). */
  fingerprint: string;
  /** The address the API listens on (`127.0.0.1`, `::1`, `0.0.0.0`). */
  host: string;
  port: number;
}

const endpoints = new Set<SimEndpoint>();

/** Make a cluster reachable; returns the function that takes it away again (on close). */
export function registerEndpoint(ep: SimEndpoint): () => void {
  endpoints.add(ep);
  return () => endpoints.delete(ep);
}

const LOOPBACK = new Set(['localhost', '127.0.0.1', '::1', '[::1]']);

function resolve(host: string, port: number): SimEndpoint | undefined {
  const h = host.replace(/^\[|\]$/g, '');
  for (const ep of endpoints) {
    if (ep.port !== port) continue;
    if (ep.host === h || ep.host === '0.0.0.0' || ep.host === '::') return ep;
    if (LOOPBACK.has(h) && LOOPBACK.has(ep.host)) return ep;
  }
  return undefined;
}

/** An error as PVE::APIClient raises it; `message` is its stringified form. */
export class RemoteError extends Error {}

/** APIClient::Exception stringify of an answer that was not a success. */
export function remoteErrorText(status: number, message: string, errors?: Record<string, string>): string {
  const reason = message.split('\n')[0]!.trim();
  let text = /^\s*\d{3}[\s:,]/.test(reason) ? reason : `${status} ${reason}`;
  for (const [k, v] of Object.entries(errors ?? {})) text += `\n${k}: ${v.replace(/\n+$/, '')}`;
  return text;
}

/** `proxmox-remote`: `apitoken=PVEAPIToken=…,host=…[,port=…][,fingerprint=…]`. */
export interface RemoteSpec {
  host: string;
  port: number;
  apitoken: string;
  fingerprint?: string;
}

export function parseRemote(value: string): RemoteSpec {
  const out: Record<string, string> = {};
  for (const part of value.split(',')) {
    const eq = part.indexOf('=');
    if (eq > 0) out[part.slice(0, eq)] = part.slice(eq + 1);
  }
  return {
    host: out.host ?? '',
    port: out.port ? Number(out.port) : 8006,
    apitoken: out.apitoken ?? '',
    ...(out.fingerprint ? { fingerprint: out.fingerprint.toUpperCase() } : {}),
  };
}

/** A connection to a remote cluster's API with a token, as PVE::APIClient::LWP makes it. */
export class RemoteApi {
  readonly spec: RemoteSpec;
  constructor(spec: RemoteSpec) {
    this.spec = spec;
  }

  /**
   * Connect (the endpoint, its availability, the certificate) and authenticate. Without a
   * pinned fingerprint the source's OpenSSL does not trust the simulator's self-signed
   * certificate either, so that fails the same way (as it does against PVE's own certificate).
   */
  connect(): { ep: SimEndpoint; auth: AuthInfo } {
    const { host, port } = this.spec;
    const ep = resolve(host, port);
    const where = `${host}:${port}`;
    if (!ep) {
      const literal = LOOPBACK.has(host) || /^[\d.]+$/.test(host) || host.includes(':');
      throw new RemoteError(
        `500 Can't connect to ${where} (${literal ? 'Connection refused' : 'Name or service not known'})`,
      );
    }
    const f = ep.faults;
    if (f.unavailableUntil > ep.state.clock.now()) {
      if (f.unavailableMode === '503') throw new RemoteError('503 Service Unavailable');
      throw new RemoteError(`500 Can't connect to ${where} (Connection reset by peer)`);
    }
    if (ep.tls && this.spec.fingerprint !== ep.fingerprint.toUpperCase())
      throw new RemoteError(`fingerprint '${ep.fingerprint}' not verified, abort!`);
    try {
      return { ep, auth: authenticate(ep.state, undefined, this.spec.apitoken) };
    } catch (e) {
      if (e instanceof PveHttpError) throw new RemoteError(remoteErrorText(e.status, e.message));
      throw e;
    }
  }

  /**
   * One API call: connect, authenticate, run `fn` on the target's state (as its handler would)
   * and turn what it throws into the client's error text.
   */
  async call<T>(fn: (ep: SimEndpoint, auth: AuthInfo) => T | Promise<T>): Promise<T> {
    const { ep, auth } = this.connect();
    try {
      return await fn(ep, auth);
    } catch (e) {
      if (e instanceof PveHttpError) throw new RemoteError(remoteErrorText(e.status, e.message, e.errors));
      throw e;
    }
  }
}
