/** `/healthz`, `/readyz` and `/metrics` on one HTTP listener. */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Metrics } from './metrics.ts';

export interface HealthChecks {
  /** Process alive and its loops not wedged. */
  live: () => boolean;
  /** Caches synced (a standby replica is ready too: it serves as a failover target). */
  ready: () => { ok: boolean; detail: string };
}

export async function startHealthServer(opts: {
  host?: string;
  port: number;
  metrics: Metrics;
  checks: HealthChecks;
}): Promise<{ server: Server; port: number; close(): Promise<void> }> {
  const server = createServer(async (req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (path === '/healthz') {
      const ok = opts.checks.live();
      res.writeHead(ok ? 200 : 500, { 'Content-Type': 'text/plain' }).end(ok ? 'ok\n' : 'not live\n');
    } else if (path === '/readyz') {
      const r = opts.checks.ready();
      res.writeHead(r.ok ? 200 : 503, { 'Content-Type': 'text/plain' }).end(`${r.detail}\n`);
    } else if (path === '/metrics') {
      try {
        const body = await opts.metrics.registry.metrics();
        res.writeHead(200, { 'Content-Type': opts.metrics.registry.contentType }).end(body);
      } catch (e) {
        res
          .writeHead(500, { 'Content-Type': 'text/plain' })
          .end(`metrics failed: ${e instanceof Error ? e.message : String(e)}\n`);
      }
    } else res.writeHead(404).end();
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host ?? '0.0.0.0', () => resolve());
  });
  return {
    server,
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
