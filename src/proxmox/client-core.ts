/**
 * How a Proxmox VE client for one site (one cluster, one or more endpoint URLs) sends a request
 * and gets an answer; `PveClient` (client.ts) builds its typed API methods on top of this class.
 *
 * - `call(request)` runs a `PveRequest` (requests.ts) made by a builder of requests-cluster.ts or
 *   requests-qemu.ts: auth headers, form/query encoding, failover (transport.ts), the error
 *   taxonomy (errors.ts), retries of idempotent reads on transient errors with jittered backoff,
 *   one re-login + resend after a 401 with ticket auth, metrics hooks.
 * - Mutations are never retried: the caller checks state and decides.
 * - Secrets sent are scrubbed from every error; the site's capabilities are discovered once and cached.
 */
import {
  type Authenticator,
  type Credentials,
  type LoginResult,
  TicketAuth,
  type TicketAuthOptions,
  TokenAuth,
} from './auth.ts';
import { type Capabilities, capabilitiesFrom } from './capabilities.ts';
import { classifyResponse, type ErrorContext, isRetryable, ProtocolError, PveError } from './errors.ts';
import type { ClientHooks } from './metrics.ts';
import * as R from './requests.ts';
import * as Cluster from './requests-cluster.ts';
import { backoffDelay, sleep as realSleep } from './retry.ts';
import { scrub } from './secret.ts';
import { type TlsSettings, tlsMode } from './tls.ts';
import { type RawResponse, Transport } from './transport.ts';

/** The subset of a pino logger the client uses. */
export interface Logger {
  warn(obj: object, msg?: string): void;
  info?(obj: object, msg?: string): void;
  debug?(obj: object, msg?: string): void;
}

export interface RetryOptions {
  /** Attempts for idempotent reads, first included (default 4). */
  attempts?: number;
  baseMs?: number;
  capMs?: number;
}

export interface TaskWaitOptions {
  /** Give up after this long (default 15 min). The task keeps running in PVE. */
  timeoutMs?: number;
  /** First poll delay (default 250 ms), growing ×1.5 up to pollMaxMs (default 5 s). */
  pollInitialMs?: number;
  pollMaxMs?: number;
  signal?: AbortSignal;
}

export interface PveClientOptions {
  /** Site name (messages, metrics). Default: the first endpoint's host. */
  site?: string;
  endpoints: string[];
  credentials: Credentials;
  tls?: TlsSettings;
  connectTimeoutMs?: number;
  requestTimeoutMs?: number;
  connectionsPerEndpoint?: number;
  endpointCooldownMs?: number;
  retry?: RetryOptions;
  /** How long discovered capabilities are trusted (default 10 min). */
  capabilitiesTtlMs?: number;
  ticket?: Omit<TicketAuthOptions, 'now'>;
  task?: Omit<TaskWaitOptions, 'signal'>;
  hooks?: ClientHooks;
  logger?: Logger;
  /** Clock (ms); tests pass the simulator's. */
  now?: () => number;
  /** Sleep used between retries and task polls. */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  random?: () => number;
}

export interface CallOptions {
  signal?: AbortSignal;
  timeoutMs?: number;
}

function parseJson(text: string): unknown {
  if (!text) return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

function deepScrub(v: unknown, secrets: string[]): unknown {
  if (typeof v === 'string') return scrub(v, secrets);
  if (Array.isArray(v)) return v.map((x) => deepScrub(x, secrets));
  if (v && typeof v === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v as Record<string, unknown>)) out[k] = deepScrub(x, secrets);
    return out;
  }
  return v;
}

/** Sensitive values sent so far, in a true private field: never shown by inspect or JSON. */
class SentSecrets {
  readonly #values = new Set<string>();
  add(v: string): void {
    this.#values.add(v);
  }
  values(): string[] {
    return [...this.#values];
  }
  toJSON(): string {
    return '[redacted]';
  }
}

export class PveClientCore {
  readonly site: string;
  readonly auth: Authenticator;
  readonly transport: Transport;
  protected readonly opts: PveClientOptions;
  protected readonly now: () => number;
  protected readonly sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  /**
   * What every view of this client shares (see `withSignal`): the capability cache and every
   * sensitive value sent so far, so that a later error (a task's exit status) that echoes one of
   * them is scrubbed too, not only the reply to the request that carried it.
   */
  private readonly shared: {
    caps?: Capabilities;
    capsInflight?: Promise<Capabilities>;
    sensitive: SentSecrets;
    /** VM destroys sent through any view (see destroysSent). */
    destroys: number;
  } = { sensitive: new SentSecrets(), destroys: 0 };

  /**
   * How many VM destroys any view of this client has sent: a read of the nodes' destroy tasks
   * begun before the count moved may miss one of this process's own (src/vm/recent-destroys.ts).
   */
  get destroysSent(): number {
    return this.shared.destroys;
  }

  /** A VM destroy is being sent (counted before its answer: it may be applied whatever comes back). */
  protected noteDestroy(): void {
    this.shared.destroys++;
  }
  /** Aborts every call made through this view (a reconcile's context); see `withSignal`. */
  private scopeSignal: AbortSignal | undefined;

  constructor(opts: PveClientOptions) {
    this.opts = opts;
    this.now = opts.now ?? Date.now;
    this.sleep = opts.sleep ?? realSleep;
    this.transport = new Transport({
      endpoints: opts.endpoints,
      ...(opts.tls ? { tls: opts.tls } : {}),
      ...(opts.connectTimeoutMs !== undefined ? { connectTimeoutMs: opts.connectTimeoutMs } : {}),
      ...(opts.requestTimeoutMs !== undefined ? { requestTimeoutMs: opts.requestTimeoutMs } : {}),
      ...(opts.connectionsPerEndpoint !== undefined ? { connectionsPerEndpoint: opts.connectionsPerEndpoint } : {}),
      ...(opts.endpointCooldownMs !== undefined ? { endpointCooldownMs: opts.endpointCooldownMs } : {}),
      now: this.now,
      onEndpointFailure: (f) => this.opts.hooks?.onEndpointFailure?.({ site: this.site, ...f }),
    });
    this.site = opts.site ?? new URL(this.transport.endpoints[0]!).host;
    const c = opts.credentials;
    this.auth =
      c.kind === 'token'
        ? new TokenAuth(c)
        : new TicketAuth(c, (u, p) => this.login(u, p), { ...opts.ticket, now: this.now });
    if (opts.tls && tlsMode(opts.tls) === 'insecure') {
      opts.logger?.warn(
        { site: this.site, endpoints: this.transport.endpoints },
        'TLS verification is disabled (insecureSkipTLSVerify): anyone on the network path can read the credentials; pin the certificate fingerprint instead',
      );
    }
    if (this.transport.endpoints.some((e) => e.startsWith('http:'))) {
      opts.logger?.warn({ site: this.site }, 'plain http endpoint: credentials travel unencrypted');
    }
  }

  // --- core ------------------------------------------------------------------------------------

  private async login(username: string, password: string): Promise<LoginResult> {
    const renewal = password.startsWith('PVE:');
    try {
      const a = await this.exchange(Cluster.login(username, password), { authenticated: false }, 1);
      this.opts.hooks?.onLogin?.({ site: this.site, renewal, ok: true });
      return { username: a.username, ticket: a.ticket, csrf: a.CSRFPreventionToken };
    } catch (e) {
      this.opts.hooks?.onLogin?.({ site: this.site, renewal, ok: false });
      throw e;
    }
  }

  private secrets(r: R.PveRequest<unknown>): string[] {
    for (const k of r.sensitive ?? []) {
      const v = r.params[k];
      if (typeof v === 'string' && v.length >= 4) this.shared.sensitive.add(v);
    }
    return this.knownSecrets();
  }

  /** The credentials and every sensitive parameter value this client has sent. */
  protected knownSecrets(): string[] {
    return [...this.auth.secretValues(), ...this.shared.sensitive.values()];
  }

  /**
   * A view of this client whose every call is aborted by `signal` (and by the call's own signal):
   * one per reconcile, so that losing leadership or SIGTERM cancels whatever that reconcile still
   * waits for. The view shares the connection pool, credentials and caches.
   */
  withSignal(signal: AbortSignal | undefined): this {
    if (!signal) return this;
    const view = Object.create(this) as this;
    view.scopeSignal = this.scopeSignal ? AbortSignal.any([this.scopeSignal, signal]) : signal;
    return view;
  }

  /** One HTTP exchange (plus one resend after a ticket re-login). */
  private async exchange<T>(
    r: R.PveRequest<T>,
    o: CallOptions & { authenticated?: boolean },
    attempt: number,
  ): Promise<T> {
    const ctx: ErrorContext = { site: this.site, method: r.method, path: r.path };
    const path = R.buildPath(r.path, r.pathParams);
    const wire = R.wireParams(r.params, r.repeated);
    const inQuery = r.method === 'GET' || r.method === 'DELETE';
    const encoded = wire.length ? new URLSearchParams(wire).toString() : '';
    const authenticated = o.authenticated !== false;
    let resent = false;
    for (;;) {
      // The resend after a re-login counts as the next attempt.
      const n = attempt + (resent ? 1 : 0);
      const headers: Record<string, string> = { Accept: 'application/json' };
      if (!inQuery && encoded) headers['Content-Type'] = 'application/x-www-form-urlencoded';
      if (authenticated) Object.assign(headers, await this.auth.headers(r.method));
      const started = performance.now();
      let res: RawResponse;
      try {
        res = await this.transport.send(
          {
            method: r.method,
            path,
            ...(inQuery && encoded ? { query: encoded } : {}),
            ...(!inQuery && encoded ? { body: encoded } : {}),
            headers,
            idempotent: r.idempotent,
            ...(o.timeoutMs !== undefined ? { timeoutMs: o.timeoutMs } : {}),
            ...(o.signal ? { signal: o.signal } : {}),
          },
          ctx,
        );
      } catch (e) {
        this.report(r, 0, started, n, e);
        throw this.clean(e, r);
      }
      const secrets = this.secrets(r);
      const json = parseJson(res.body);
      const ectx = { ...ctx, endpoint: res.endpoint, status: res.status };
      if (res.status >= 200 && res.status < 300) {
        const env = json as { data?: unknown } | undefined;
        if (!env || typeof env !== 'object' || !('data' in env)) {
          const err = new ProtocolError(
            ectx,
            `HTTP ${res.status} without a JSON {"data":...} body: is this a Proxmox VE API endpoint?`,
          );
          this.report(r, res.status, started, n, err);
          throw err;
        }
        try {
          const out = r.decode(env.data);
          this.report(r, res.status, started, n);
          return out;
        } catch (e) {
          const err = new ProtocolError(ectx, scrub(e instanceof Error ? e.message : String(e), secrets));
          this.report(r, res.status, started, n, err);
          throw err;
        }
      }
      const err = classifyResponse(ectx, scrub(res.statusText, secrets), deepScrub(json, secrets));
      this.report(r, res.status, started, n, err);
      if (res.status === 401 && authenticated && !resent && this.auth.kind === 'ticket') {
        // PVE checks credentials before running anything: resending after a fresh login is safe.
        resent = true;
        await this.auth.recover();
        continue;
      }
      throw this.clean(err, r);
    }
  }

  private report(r: R.PveRequest<unknown>, status: number, started: number, attempt: number, err?: unknown): void {
    const hook = this.opts.hooks?.onRequest;
    if (!hook) return;
    try {
      hook({
        site: this.site,
        method: r.method,
        path: r.path,
        status,
        durationMs: performance.now() - started,
        attempt,
        ...(err instanceof PveError ? { errorKind: err.kind } : err ? { errorKind: 'unavailable' as const } : {}),
      });
    } catch {
      // a metrics hook must never break a call
    }
  }

  /** Last line of defence: no secret in message or stack, whatever produced the error. */
  private clean(e: unknown, r: R.PveRequest<unknown>): unknown {
    if (!(e instanceof Error)) return e;
    const secrets = this.secrets(r);
    e.message = scrub(e.message, secrets);
    if (e.stack) e.stack = scrub(e.stack, secrets);
    return e;
  }

  /** Run a request: reads are retried on transient errors (jittered backoff); mutations never. */
  async call<T>(r: R.PveRequest<T>, opts: CallOptions = {}): Promise<T> {
    const scope = this.scopeSignal;
    const o: CallOptions =
      scope && opts.signal
        ? { ...opts, signal: AbortSignal.any([scope, opts.signal]) }
        : scope
          ? { ...opts, signal: scope }
          : opts;
    o.signal?.throwIfAborted();
    const attempts = r.idempotent ? Math.max(1, this.opts.retry?.attempts ?? 4) : 1;
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.exchange(r, o, attempt);
      } catch (e) {
        if (attempt >= attempts || !isRetryable(e) || o.signal?.aborted) throw e;
        const delay = backoffDelay(attempt - 1, {
          baseMs: this.opts.retry?.baseMs ?? 250,
          capMs: this.opts.retry?.capMs ?? 5000,
          ...(this.opts.random ? { random: this.opts.random } : {}),
        });
        await this.sleep(delay, o.signal);
      }
    }
  }

  async close(): Promise<void> {
    await this.transport.close();
  }

  // --- capabilities ----------------------------------------------------------------------------

  /** Version and feature facts of the site, discovered once and cached (TTL, default 10 min). */
  async capabilities(opts: { refresh?: boolean } = {}): Promise<Capabilities> {
    const ttl = this.opts.capabilitiesTtlMs ?? 10 * 60_000;
    const shared = this.shared;
    if (!opts.refresh && shared.caps && this.now() - shared.caps.discoveredAt < ttl) return shared.caps;
    shared.capsInflight ??= (async () => {
      try {
        const info = await this.call(Cluster.version());
        shared.caps = capabilitiesFrom(
          info,
          { authId: this.auth.authId, kind: this.auth.kind, isRootTicket: this.auth.isRootTicket },
          this.now(),
        );
        return shared.caps;
      } finally {
        shared.capsInflight = undefined;
      }
    })();
    return shared.capsInflight;
  }

  invalidateCapabilities(): void {
    this.shared.caps = undefined;
  }
}
