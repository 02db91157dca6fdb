/** JSON logs (pino). Secrets never reach here: clients scrub their errors before they are logged. */
import pino from 'pino';

export type Logger = pino.Logger;

export function createLogger(opts: { level?: string; name?: string } = {}): Logger {
  return pino({
    name: opts.name ?? 'provider-proxmox',
    level: opts.level ?? process.env.LOG_LEVEL ?? 'info',
    base: { pid: process.pid },
  });
}
