/**
 * Metrics hooks: the client reports every HTTP exchange (one per attempt) to `onRequest`. The
 * labels are low-cardinality: method, PVE path *template* (never a concrete path with a vmid or a
 * UPID), status, error class. `promClientHooks()` binds them to prom-client.
 */
import type { Counter, Histogram, Registry } from 'prom-client';
import type { PveErrorKind } from './errors.ts';

export interface RequestEvent {
  site: string;
  method: string;
  /** PVE path template (`/nodes/{node}/qemu/{vmid}/status/current`). */
  path: string;
  /** HTTP status; 0 when no answer came (network / TLS). */
  status: number;
  durationMs: number;
  /** Set when the exchange failed. */
  errorKind?: PveErrorKind;
  /** 1 for the first attempt, 2.. for retries and the resend after a re-login. */
  attempt: number;
}

export interface ClientHooks {
  onRequest?(e: RequestEvent): void;
  /** Ticket login or renewal (never with credentials). */
  onLogin?(e: { site: string; renewal: boolean; ok: boolean }): void;
  /** An endpoint failed at the connection level (the request then fails over, or fails). */
  onEndpointFailure?(e: { site: string; endpoint: string; cause: string; sent: boolean }): void;
}

export interface PromClientHooksOptions {
  registry?: Registry;
  prefix?: string;
}

/**
 * Prometheus metrics:
 * - `<prefix>requests_total{site,method,path,status}`
 * - `<prefix>request_duration_seconds{site,method,path}` (histogram)
 * - `<prefix>errors_total{site,class}`
 * - `<prefix>logins_total{site,kind,result}`
 * - `<prefix>endpoint_failures_total{site,endpoint}`
 */
export async function promClientHooks(opts: PromClientHooksOptions = {}): Promise<ClientHooks> {
  const prom = await import('prom-client');
  const prefix = opts.prefix ?? 'proxmox_api_';
  const registers = opts.registry ? [opts.registry] : [prom.register];
  const get = <T>(name: string, make: () => T): T =>
    ((opts.registry ?? prom.register).getSingleMetric(name) as T | undefined) ?? make();
  const requests = get<Counter<string>>(
    `${prefix}requests_total`,
    () =>
      new prom.Counter({
        name: `${prefix}requests_total`,
        help: 'Proxmox VE API requests by site, method, path template and HTTP status (0: no answer).',
        labelNames: ['site', 'method', 'path', 'status'],
        registers,
      }),
  );
  const latency = get<Histogram<string>>(
    `${prefix}request_duration_seconds`,
    () =>
      new prom.Histogram({
        name: `${prefix}request_duration_seconds`,
        help: 'Proxmox VE API request latency by site, method and path template.',
        labelNames: ['site', 'method', 'path'],
        buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
        registers,
      }),
  );
  const errors = get<Counter<string>>(
    `${prefix}errors_total`,
    () =>
      new prom.Counter({
        name: `${prefix}errors_total`,
        help: 'Failed Proxmox VE API requests by site and error class.',
        labelNames: ['site', 'class'],
        registers,
      }),
  );
  const logins = get<Counter<string>>(
    `${prefix}logins_total`,
    () =>
      new prom.Counter({
        name: `${prefix}logins_total`,
        help: 'Ticket logins and renewals by site and result.',
        labelNames: ['site', 'kind', 'result'],
        registers,
      }),
  );
  const endpointFailures = get<Counter<string>>(
    `${prefix}endpoint_failures_total`,
    () =>
      new prom.Counter({
        name: `${prefix}endpoint_failures_total`,
        help: 'Connection-level failures per endpoint (each one triggers failover).',
        labelNames: ['site', 'endpoint'],
        registers,
      }),
  );
  return {
    onEndpointFailure(e) {
      endpointFailures.inc({ site: e.site, endpoint: e.endpoint });
    },
    onRequest(e) {
      requests.inc({ site: e.site, method: e.method, path: e.path, status: String(e.status) });
      latency.observe({ site: e.site, method: e.method, path: e.path }, e.durationMs / 1000);
      if (e.errorKind) errors.inc({ site: e.site, class: e.errorKind });
    },
    onLogin(e) {
      logins.inc({ site: e.site, kind: e.renewal ? 'renewal' : 'login', result: e.ok ? 'ok' : 'failed' });
    },
  };
}

/** Combine several hook sets (e.g. Prometheus + a test recorder). */
export function combineHooks(...hooks: Array<ClientHooks | undefined>): ClientHooks {
  const hs = hooks.filter((h): h is ClientHooks => h !== undefined);
  return {
    onRequest: (e) => {
      for (const h of hs) h.onRequest?.(e);
    },
    onLogin: (e) => {
      for (const h of hs) h.onLogin?.(e);
    },
    onEndpointFailure: (e) => {
      for (const h of hs) h.onEndpointFailure?.(e);
    },
  };
}
