/**
 * A thin Kubernetes REST client: `@kubernetes/client-node` loads the kubeconfig and applies its
 * credentials and TLS; requests and watches go through one shared keep-alive agent. Errors become
 * KubeError with the API's status, reason and message (409 -> the engine's ConflictError).
 */
import http from 'node:http';
import https from 'node:https';
import { KubeConfig } from '@kubernetes/client-node';
import { ConflictError } from '../engine/types.ts';

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
  return kc;
}

export class KubeApi {
  readonly kc: KubeConfig;
  readonly server: URL;
  private readonly agent: http.Agent;
  private base: https.RequestOptions | undefined;
  /** Requests by verb and outcome, for metrics. */
  onRequest?: (verb: string, status: number) => void;

  constructor(kc: KubeConfig) {
    this.kc = kc;
    const cluster = kc.getCurrentCluster();
    if (!cluster) throw new Error('kubeconfig has no current cluster');
    this.server = new URL(cluster.server);
    this.agent =
      this.server.protocol === 'https:'
        ? new https.Agent({ keepAlive: true, maxSockets: 32 })
        : new http.Agent({ keepAlive: true, maxSockets: 32 });
  }

  private async options(): Promise<https.RequestOptions> {
    if (!this.base) {
      const o: https.RequestOptions = {};
      await this.kc.applyToHTTPSOptions(o);
      this.base = o;
    }
    const o = { ...this.base, headers: { ...(this.base.headers as Record<string, string>) } };
    return o;
  }

  async request<T>(
    method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE',
    path: string,
    opts: {
      body?: unknown;
      contentType?: string;
      query?: Record<string, string | number | boolean | undefined>;
      signal?: AbortSignal;
      timeoutMs?: number;
    } = {},
  ): Promise<T> {
    const url = new URL(path, this.server);
    for (const [k, v] of Object.entries(opts.query ?? {})) if (v !== undefined) url.searchParams.set(k, String(v));
    const base = await this.options();
    const body = opts.body === undefined ? undefined : Buffer.from(JSON.stringify(opts.body));
    const headers: Record<string, string | number> = {
      ...(base.headers as Record<string, string>),
      Accept: 'application/json',
    };
    if (body) {
      headers['Content-Type'] = opts.contentType ?? 'application/json';
      headers['Content-Length'] = body.length;
    }
    const mod = url.protocol === 'https:' ? https : http;
    return new Promise<T>((resolve, reject) => {
      const req = mod.request(
        url,
        {
          ...base,
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
            this.onRequest?.(method, status);
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
      req.on('timeout', () => req.destroy(new Error(`${method} ${url.pathname}: timed out`)));
      req.on('error', reject);
      if (body) req.write(body);
      req.end();
    });
  }

  /**
   * Stream a watch: calls `onEvent` per event, resolves when the server closes the stream,
   * rejects on errors. Abort with `signal`.
   */
  async watch<T>(
    path: string,
    query: Record<string, string | number | boolean | undefined>,
    onEvent: (e: WatchEvent<T>) => void,
    signal: AbortSignal,
  ): Promise<void> {
    const url = new URL(path, this.server);
    for (const [k, v] of Object.entries({ ...query, watch: 1 }))
      if (v !== undefined) url.searchParams.set(k, String(v));
    const base = await this.options();
    const mod = url.protocol === 'https:' ? https : http;
    return new Promise<void>((resolve, reject) => {
      const req = mod.request(url, { ...base, method: 'GET', agent: this.agent, signal }, (res) => {
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
      req.on('error', (e) => (signal.aborted ? resolve() : reject(e)));
      req.end();
    });
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
