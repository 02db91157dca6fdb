/**
 * A thin Kubernetes REST client: `@kubernetes/client-node` loads the kubeconfig and applies its
 * credentials and TLS to every request, asked afresh for each one (credentials.ts: rotated token
 * files and expiring exec credentials are picked up); requests and watches go through one shared
 * keep-alive agent. Requests (not watches, as in client-go) pass a client-side rate limit, a token
 * bucket of `qps`/`burst` (ratelimit.ts), before their credentials are applied. Errors become
 * KubeError with the API's status, reason and message (409 -> the engine's ConflictError). Every
 * write names its field manager (FIELD_MANAGER), as a controller-runtime client's does, so that
 * `managedFields` say which fields the provider wrote instead of `unknown`.
 */
import http from 'node:http';
import https from 'node:https';
import { ConflictError } from '../engine/types.ts';
import { KubeConfig } from './client-node.ts';
import { type AppliedCredentials, defaultKubeconfigFiles, KubeCredentials, withTokenFiles } from './credentials.ts';
import { DEFAULT_KUBE_BURST, DEFAULT_KUBE_QPS, TokenBucket } from './ratelimit.ts';

/** The field manager of every create, update and patch this client sends. */
export const FIELD_MANAGER = 'provider-proxmox';
/** The methods whose requests take `fieldManager` (the apiserver's create, update and patch). */
const WRITES = new Set(['POST', 'PUT', 'PATCH']);

export class KubeError extends Error {
  readonly status: number;
  readonly reason: string;
  constructor(status: number, reason: string, message: string) {
    super(message);
    this.name = 'KubeError';
    this.status = status;
    this.reason = reason;
  }
}

export interface WatchEvent<T> {
  type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  object: T;
}

export function loadKubeConfig(file?: string): KubeConfig {
  const kc = new KubeConfig();
  if (file) kc.loadFromFile(file);
  else kc.loadFromDefault();
  if (!kc.getCurrentCluster())
    throw new Error(
      file
        ? `${file}: no current cluster in the kubeconfig`
        : 'no kubeconfig found (in-cluster, $KUBECONFIG or ~/.kube/config)',
    );
  return withTokenFiles(kc, file ? [file] : defaultKubeconfigFiles());
}

type Query = Record<string, string | number | boolean | undefined>;

export interface KubeApiOptions {
  /** Requests a second, as client-go's `QPS` (default 50; <= 0: no limit). Watches are not limited. */
  qps?: number;
  /** Requests that may go at once after a quiet spell, as client-go's `Burst` (default 100). */
  burst?: number;
  /** A bucket of one's own (tests: one on an injected clock); wins over qps/burst. */
  limiter?: TokenBucket;
}

export class KubeApi {
  readonly credentials: KubeCredentials;
  readonly server: URL;
  readonly limiter: TokenBucket;
  private readonly agent: http.Agent;
  /** Requests by verb and outcome, for metrics (lists are `LIST`, watches `WATCH`). */
  onRequest?: (verb: string, status: number) => void;
  /** Connections opened (the rest reused a kept-alive one). */
  connections = 0;

  constructor(kc: KubeConfig, opts: KubeApiOptions = {}) {
    this.limiter = opts.limiter ?? new TokenBucket(opts.qps ?? DEFAULT_KUBE_QPS, opts.burst ?? DEFAULT_KUBE_BURST);
    this.credentials = new KubeCredentials(kc);
    const cluster = kc.getCurrentCluster();
    if (!cluster) throw new Error('kubeconfig has no current cluster');
    this.server = new URL(cluster.server);
    this.agent =
      this.server.protocol === 'https:'
        ? new https.Agent({ keepAlive: true, maxSockets: 32 })
        : new http.Agent({ keepAlive: true, maxSockets: 32 });
  }

  /** The URL of an API path; a path that a URL would change (`..`, `%2F`, spaces...) is refused. */
  private url(path: string, query: Query): URL {
    const url = new URL(path, this.server);
    // A reference name such as `../../other-namespace/secrets/x` would otherwise reach another
    // namespace's object: the WHATWG URL resolves dot segments (encoded ones too).
    if (url.pathname !== path || url.search || url.hash)
      throw new KubeError(400, 'InvalidPath', `not a valid Kubernetes API path: ${JSON.stringify(path)}`);
    for (const [k, v] of Object.entries(query)) if (v !== undefined) url.searchParams.set(k, String(v));
    return url;
  }

  /**
   * Run `send` with the current credentials; after a 401 with credentials that can change, once
   * more with fresh ones (a 401 means the request was not processed, so a write is safe to resend).
   * With `limit`, each attempt first waits for a token (client-go's retries pass its limiter too),
   * and only then asks for credentials, so a long wait never sends stale ones.
   */
  private async withCredentials<T>(
    send: (c: AppliedCredentials) => Promise<T>,
    limit?: { signal: AbortSignal | undefined; limiter: TokenBucket },
  ): Promise<T> {
    if (limit) await limit.limiter.acquire(limit.signal);
    const first = await this.credentials.apply();
    try {
      return await send(first);
    } catch (e) {
      if (!(e instanceof KubeError && e.status === 401 && this.credentials.unauthorized(first.generation))) throw e;
    }
    if (limit) await limit.limiter.acquire(limit.signal);
    return send(await this.credentials.apply());
  }

  private counted(req: http.ClientRequest): void {
    req.once('socket', () => {
      if (!req.reusedSocket) this.connections++;
    });
  }

  async request<T>(
    method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE',
    path: string,
    opts: {
      body?: unknown;
      contentType?: string;
      query?: Query;
      signal?: AbortSignal;
      timeoutMs?: number;
      /** The verb reported to `onRequest` (default: the method; the informer's lists say LIST). */
      verb?: string;
      /** false: not behind the rate limit (the leader's lease renewals, which have a deadline). */
      rateLimited?: boolean;
      /** Another bucket than the client's (events have their own, as client-go's event sink). */
      limiter?: TokenBucket;
    } = {},
  ): Promise<T> {
    const url = this.url(
      path,
      WRITES.has(method) ? { fieldManager: FIELD_MANAGER, ...opts.query } : (opts.query ?? {}),
    );
    const body = opts.body === undefined ? undefined : Buffer.from(JSON.stringify(opts.body));
    const mod = url.protocol === 'https:' ? https : http;
    return this.withCredentials(
      ({ options }) =>
        new Promise<T>((resolve, reject) => {
          const headers: Record<string, string | number> = {
            ...(options.headers as Record<string, string>),
            Accept: 'application/json',
          };
          if (body) {
            headers['Content-Type'] = opts.contentType ?? 'application/json';
            headers['Content-Length'] = body.length;
          }
          const req = mod.request(
            url,
            {
              ...options,
              method,
              headers,
              agent: this.agent,
              ...(opts.signal ? { signal: opts.signal } : {}),
              timeout: opts.timeoutMs ?? 60_000,
            },
            (res) => {
              const chunks: Buffer[] = [];
              res.on('data', (c: Buffer) => chunks.push(c));
              res.on('end', () => {
                const text = Buffer.concat(chunks).toString('utf8');
                const status = res.statusCode ?? 0;
                this.onRequest?.(opts.verb ?? method, status);
                let json: unknown;
                try {
                  json = text ? JSON.parse(text) : undefined;
                } catch {
                  json = undefined;
                }
                if (status >= 200 && status < 300) return resolve(json as T);
                const st = json as { reason?: string; message?: string } | undefined;
                const message = `${method} ${url.pathname}: ${status} ${st?.message ?? text.slice(0, 200)}`;
                if (status === 409 && st?.reason === 'Conflict') return reject(new ConflictError(message));
                reject(new KubeError(status, st?.reason ?? String(status), message));
              });
              res.on('error', reject);
            },
          );
          this.counted(req);
          req.on('timeout', () => req.destroy(new Error(`${method} ${url.pathname}: timed out`)));
          req.on('error', reject);
          if (body) req.write(body);
          req.end();
        }),
      opts.rateLimited === false ? undefined : { signal: opts.signal, limiter: opts.limiter ?? this.limiter },
    );
  }

  /**
   * Stream a watch: calls `onEvent` per event, resolves when the server closes the stream,
   * rejects on errors. Abort with `signal`.
   */
  async watch<T>(path: string, query: Query, onEvent: (e: WatchEvent<T>) => void, signal: AbortSignal): Promise<void> {
    const url = this.url(path, { ...query, watch: 1 });
    const mod = url.protocol === 'https:' ? https : http;
    return this.withCredentials(
      ({ options }) =>
        new Promise<void>((resolve, reject) => {
          const req = mod.request(url, { ...options, method: 'GET', agent: this.agent, signal }, (res) => {
            const status = res.statusCode ?? 0;
            this.onRequest?.('WATCH', status);
            if (status !== 200) {
              const chunks: Buffer[] = [];
              res.on('data', (c: Buffer) => chunks.push(c));
              res.on('end', () =>
                reject(
                  new KubeError(
                    status,
                    String(status),
                    `WATCH ${url.pathname}: ${status} ${Buffer.concat(chunks).toString('utf8').slice(0, 200)}`,
                  ),
                ),
              );
              return;
            }
            let buf = '';
            res.setEncoding('utf8');
            res.on('data', (chunk: string) => {
              buf += chunk;
              let i = buf.indexOf('\n');
              while (i >= 0) {
                const line = buf.slice(0, i).trim();
                buf = buf.slice(i + 1);
                if (line) {
                  try {
                    onEvent(JSON.parse(line) as WatchEvent<T>);
                  } catch (e) {
                    req.destroy(e as Error);
                    return;
                  }
                }
                i = buf.indexOf('\n');
              }
            });
            res.on('end', () => resolve());
            res.on('error', reject);
          });
          this.counted(req);
          req.on('error', (e) => (signal.aborted ? resolve() : reject(e)));
          req.end();
        }),
    );
  }

  close(): void {
    this.agent.destroy();
  }
}

/** API path of a resource collection. */
export function collectionPath(group: string, version: string, plural: string, namespace?: string): string {
  const prefix = group ? `/apis/${group}/${version}` : `/api/${version}`;
  return namespace ? `${prefix}/namespaces/${namespace}/${plural}` : `${prefix}/${plural}`;
}
