/**
 * HTTP transport to one Proxmox VE cluster: an undici keep-alive pool per endpoint (node URL),
 * connect and request timeouts, TLS per tls.ts, and failover between the endpoints of a site.
 *
 * Failover rule: a request moves to the next endpoint only when it certainly did not reach the
 * previous one (connection refused, DNS, connect timeout, TLS refused), or when it is idempotent.
 * A mutation whose connection broke after it was sent is never resent: the caller gets
 * `UnavailableError{requestSent: true}` and must look at the state first.
 */
import { Pool } from 'undici';
import { deadline } from './deadline.ts';
import { type EndpointFailure, type ErrorContext, TlsError, UnavailableError } from './errors.ts';
import { CERT_ERROR_CODES, makeConnector, type TlsSettings, TlsVerifyError } from './tls.ts';

export type HttpMethod = 'GET' | 'POST' | 'PUT' | 'DELETE';

export interface TransportOptions {
  /** Base URLs of the cluster's API (`https://pve1:8006`); a trailing `/api2/json` is ignored. */
  endpoints: string[];
  tls?: TlsSettings;
  /** TCP + TLS handshake limit per endpoint (default 10 s). */
  connectTimeoutMs?: number;
  /** Limit for the answer's headers and for body inactivity (default 60 s). */
  requestTimeoutMs?: number;
  /** Keep-alive connections per endpoint (default 8). */
  connectionsPerEndpoint?: number;
  /** How long an endpoint that failed is tried after the others (default 30 s). */
  endpointCooldownMs?: number;
  now?: () => number;
  /** Told about every endpoint that failed (before failover or the final error). */
  onEndpointFailure?: (f: EndpointFailure) => void;
}

export interface RawRequest {
  method: HttpMethod;
  /** Encoded path relative to `/api2/json` (`/nodes/pve/qemu/100/config`). */
  path: string;
  /** Encoded query string without `?`. */
  query?: string;
  headers: Record<string, string>;
  body?: string;
  /** Safe to send again after the connection broke mid-request. */
  idempotent: boolean;
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface RawResponse {
  status: number;
  statusText: string;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  endpoint: string;
}

interface Described {
  cause: string;
  sent: boolean;
  tls: boolean;
  fingerprint?: string | undefined;
}

function codeOf(e: unknown): string {
  const x = e as { code?: unknown; cause?: { code?: unknown } } | undefined;
  return String(x?.code ?? x?.cause?.code ?? '');
}

/** Classify a connection-level error without keeping the error object (it may hold request data). */
export function describeNetworkError(e: unknown): Described {
  const code = codeOf(e);
  const msg = e instanceof Error ? e.message : String(e);
  if (e instanceof TlsVerifyError)
    return { cause: e.message, sent: false, tls: true, fingerprint: e.presentedFingerprint };
  if (CERT_ERROR_CODES.has(code))
    return { cause: `TLS certificate not trusted (${code}: ${msg})`, sent: false, tls: true };
  if (/^ERR_SSL_|^EPROTO$/.test(code) || /SSL routines|wrong version number/i.test(msg)) {
    return { cause: `TLS handshake failed (${code || msg}); is this an https endpoint?`, sent: false, tls: true };
  }
  switch (code) {
    case 'ECONNREFUSED':
      return { cause: 'connection refused', sent: false, tls: false };
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return { cause: 'host name not found', sent: false, tls: false };
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
    case 'EHOSTDOWN':
      return { cause: 'host unreachable', sent: false, tls: false };
    case 'UND_ERR_CONNECT_TIMEOUT':
      return { cause: 'connect timeout', sent: false, tls: false };
    case 'ETIMEDOUT':
      return { cause: 'connection timed out', sent: false, tls: false };
    case 'UND_ERR_HEADERS_TIMEOUT':
    case 'UND_ERR_BODY_TIMEOUT':
      return { cause: 'no answer within the request timeout', sent: true, tls: false };
    case 'ECONNRESET':
    case 'EPIPE':
    case 'UND_ERR_SOCKET':
    case 'UND_ERR_CLOSED':
      return { cause: 'connection closed by the server', sent: true, tls: false };
    default:
      return { cause: code ? `network error (${code})` : 'network error', sent: true, tls: false };
  }
}

export function normalizeEndpoint(url: string): string {
  const u = new URL(url);
  if (u.protocol !== 'https:' && u.protocol !== 'http:')
    throw new Error(`endpoint '${u.origin}' must be an https:// URL`);
  if (u.username || u.password) throw new Error('endpoint URLs must not contain credentials');
  return u.origin;
}

export class Transport {
  readonly endpoints: readonly string[];
  private readonly pools = new Map<string, Pool>();
  private readonly badUntil = new Map<string, number>();
  private preferred = 0;
  private readonly opts: Required<Omit<TransportOptions, 'tls' | 'endpoints' | 'onEndpointFailure'>> & {
    tls: TlsSettings;
  };
  private readonly onEndpointFailure: ((f: EndpointFailure) => void) | undefined;
  private closed = false;

  constructor(opts: TransportOptions) {
    if (!opts.endpoints.length) throw new Error('a site needs at least one endpoint');
    this.endpoints = Object.freeze(opts.endpoints.map(normalizeEndpoint));
    this.opts = {
      tls: opts.tls ?? {},
      connectTimeoutMs: opts.connectTimeoutMs ?? 10_000,
      requestTimeoutMs: opts.requestTimeoutMs ?? 60_000,
      connectionsPerEndpoint: opts.connectionsPerEndpoint ?? 8,
      endpointCooldownMs: opts.endpointCooldownMs ?? 30_000,
      now: opts.now ?? Date.now,
    };
    this.onEndpointFailure = opts.onEndpointFailure;
  }

  private pool(origin: string): Pool {
    let p = this.pools.get(origin);
    if (!p) {
      p = new Pool(origin, {
        connections: this.opts.connectionsPerEndpoint,
        connect: makeConnector(this.opts.tls, this.opts.connectTimeoutMs),
        keepAliveTimeout: 4_000,
        keepAliveMaxTimeout: 30_000,
        headersTimeout: this.opts.requestTimeoutMs,
        bodyTimeout: this.opts.requestTimeoutMs,
      });
      this.pools.set(origin, p);
    }
    return p;
  }

  /** Endpoints in the order to try: the last good one first, endpoints in cooldown last. */
  private order(): string[] {
    const n = this.endpoints.length;
    const rotated = Array.from({ length: n }, (_, i) => this.endpoints[(this.preferred + i) % n]!);
    const now = this.opts.now();
    const ok = rotated.filter((e) => (this.badUntil.get(e) ?? 0) <= now);
    const bad = rotated.filter((e) => (this.badUntil.get(e) ?? 0) > now);
    return [...ok, ...bad];
  }

  async send(req: RawRequest, ctx: ErrorContext): Promise<RawResponse> {
    if (this.closed) throw new UnavailableError(ctx, 'client closed');
    const failures: EndpointFailure[] = [];
    let tlsFingerprint: string | undefined;
    let tlsFailures = 0;
    const timeoutMs = req.timeoutMs ?? this.opts.requestTimeoutMs;
    for (const endpoint of this.order()) {
      const url = `/api2/json${req.path}${req.query ? `?${req.query}` : ''}`;
      // undici's own timers have a 1 s resolution: an AbortSignal makes the limit exact.
      const bound = deadline(timeoutMs, req.signal);
      const { signal } = bound;
      try {
        const res = await this.pool(endpoint).request({
          path: url,
          method: req.method,
          headers: req.headers,
          ...(req.body !== undefined ? { body: req.body } : {}),
          headersTimeout: timeoutMs,
          bodyTimeout: timeoutMs,
          signal,
        });
        const body = await res.body.text();
        this.badUntil.delete(endpoint);
        this.preferred = this.endpoints.indexOf(endpoint);
        return { status: res.statusCode, statusText: res.statusText ?? '', headers: res.headers, body, endpoint };
      } catch (e) {
        if (req.signal?.aborted) throw req.signal.reason ?? e;
        const d: Described =
          signal.aborted && !req.signal?.aborted
            ? { cause: `no answer within the request timeout (${timeoutMs} ms)`, sent: true, tls: false }
            : describeNetworkError(e);
        const failure = { endpoint, cause: d.cause, sent: d.sent };
        failures.push(failure);
        try {
          this.onEndpointFailure?.(failure);
        } catch {
          // observers must not change the outcome
        }
        if (d.fingerprint) tlsFingerprint = d.fingerprint;
        if (d.tls) tlsFailures++;
        this.badUntil.set(endpoint, this.opts.now() + this.opts.endpointCooldownMs);
        if (d.sent && !req.idempotent) {
          throw new UnavailableError(
            { ...ctx, endpoint },
            `${endpoint}: ${d.cause} (the request may have been applied)`,
            {
              requestSent: true,
              failures,
            },
          );
        }
      } finally {
        bound.release();
      }
    }
    const summary = failures.map((f) => `${f.endpoint}: ${f.cause}`).join('; ');
    const reason = failures.length > 1 ? `all ${failures.length} endpoints failed: ${summary}` : summary;
    const anySent = failures.some((f) => f.sent);
    // Only TLS refusals everywhere: a configuration problem, not an outage.
    if (failures.length > 0 && tlsFailures === failures.length) {
      throw new TlsError({ ...ctx, endpoint: failures[0]?.endpoint }, reason, tlsFingerprint, failures);
    }
    throw new UnavailableError(ctx, reason, { requestSent: anySent, failures });
  }

  /**
   * Close the connections: requests in flight get a second to finish, then their sockets are
   * destroyed. A closing client (shutdown, a replaced ProviderConfig) must not wait for a slow
   * answer nobody will read.
   */
  async close(graceMs = 1000): Promise<void> {
    this.closed = true;
    await Promise.all(
      [...this.pools.values()].map(async (p) => {
        let timer: NodeJS.Timeout | undefined;
        const grace = new Promise<'late'>((resolve) => {
          timer = setTimeout(() => resolve('late'), graceMs);
          timer.unref?.();
        });
        const outcome = await Promise.race([p.close().then(() => 'closed' as const), grace]).catch(() => 'closed');
        clearTimeout(timer);
        if (outcome === 'late') await p.destroy().catch(() => undefined);
      }),
    );
    this.pools.clear();
  }
}
