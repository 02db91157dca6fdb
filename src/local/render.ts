/** Terminal output of the local runtime: the status table and a live progress view. */
import { stringify } from 'yaml';
import type { Row } from './runtime.ts';

export interface Column {
  title: string;
  get: (r: Row) => string;
  max?: number;
}

export const STATUS_COLUMNS: Column[] = [
  { title: 'NAME', get: (r) => r.name },
  { title: 'PHASE', get: (r) => r.phase ?? '' },
  { title: 'SITE', get: (r) => r.site },
  { title: 'NODE', get: (r) => r.node },
  { title: 'VMID', get: (r) => r.vmid },
  { title: 'STATE', get: (r) => r.state },
  { title: 'IP', get: (r) => r.ip },
  { title: 'READY', get: (r) => r.ready },
  { title: 'SYNCED', get: (r) => r.synced },
  { title: 'AGE', get: (r) => r.age },
  // Never cut: the final table is where a failed VM says why and how to fix it (last column: it may wrap).
  { title: 'MESSAGE', get: (r) => (r.reason ? `${r.reason}: ${r.message}` : r.message) },
];

export const PROGRESS_COLUMNS: Column[] = [
  { title: 'NAME', get: (r) => r.name },
  { title: 'PHASE', get: (r) => r.phase ?? '' },
  { title: 'NODE', get: (r) => r.node },
  { title: 'VMID', get: (r) => r.vmid },
  { title: 'STEP', get: (r) => r.step },
  { title: 'STATE', get: (r) => r.state },
  { title: 'IP', get: (r) => r.ip },
  { title: 'MESSAGE', get: (r) => (r.reason ? `${r.reason}: ${r.message}` : r.message), max: 70 },
];

export function table(rows: Row[], columns: Column[] = STATUS_COLUMNS, width = Number.POSITIVE_INFINITY): string {
  const used = columns.filter((c) => c.title === 'NAME' || rows.some((r) => c.get(r)));
  const cells = rows.map((r) =>
    used.map((c) => {
      const v = c.get(r).replace(/\s+/g, ' ');
      return c.max && v.length > c.max ? `${v.slice(0, c.max - 1)}…` : v;
    }),
  );
  const widths = used.map((c, i) => Math.max(c.title.length, ...cells.map((row) => row[i]!.length)));
  const line = (vals: string[]) =>
    vals
      .map((v, i) => (i === vals.length - 1 ? v : v.padEnd(widths[i]!)))
      .join('   ')
      .slice(0, width)
      .trimEnd();
  return [line(used.map((c) => c.title)), ...cells.map(line)].join('\n');
}

export function formatRows(rows: Row[], output: 'table' | 'json' | 'yaml'): string {
  if (output === 'json') return JSON.stringify(rows, null, 2);
  if (output === 'yaml') return stringify(rows);
  return rows.length ? table(rows) : 'No resources.';
}

/** Live view: redraws in place on a terminal, prints changes as lines otherwise. */
export class Progress {
  private readonly out: NodeJS.WriteStream;
  private readonly tty: boolean;
  private lastLines = 0;
  private readonly last = new Map<string, string>();
  private readonly started = Date.now();
  constructor(out: NodeJS.WriteStream = process.stdout) {
    this.out = out;
    this.tty = Boolean(out.isTTY) && process.env.TERM !== 'dumb';
  }

  update(rows: Row[], header: string): void {
    if (this.tty) {
      const text = `${header}\n${table(rows, PROGRESS_COLUMNS, this.out.columns ?? 160)}\n`;
      if (this.lastLines) this.out.write(`\x1b[${this.lastLines}F\x1b[J`);
      this.out.write(text);
      this.lastLines = text.split('\n').length - 1;
      return;
    }
    const t = ((Date.now() - this.started) / 1000).toFixed(1).padStart(6);
    for (const r of rows) {
      const desc = `${r.step}${r.vmid ? ` vmid=${r.vmid}` : ''}${r.node ? ` node=${r.node}` : ''}${r.state ? ` state=${r.state}` : ''}${r.ip ? ` ip=${r.ip}` : ''}${r.reason ? ` ${r.reason}: ${r.message}` : ''}`;
      if (this.last.get(r.key) !== desc) {
        this.last.set(r.key, desc);
        this.out.write(`[${t}s] ${r.name}: ${desc}\n`);
      }
    }
  }

  done(): void {
    this.lastLines = 0;
  }
}
