/**
 * Terminal output of the local runtime: the status table, a live progress view, and `status
 * --live` (this installation's VMs as Proxmox holds them).
 */
import { stringify } from 'yaml';
import type { Row } from './runtime.ts';

export interface Column<T = Row> {
  title: string;
  get: (r: T) => string;
  max?: number;
  /** Shown even when every row is empty (a column whose blanks mean something). */
  keep?: boolean;
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

export function table<T = Row>(
  rows: T[],
  columns: Column<T>[] = STATUS_COLUMNS as unknown as Column<T>[],
  width = Number.POSITIVE_INFINITY,
): string {
  const used = columns.filter((c) => c.title === 'NAME' || c.keep || rows.some((r) => c.get(r)));
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

/** One VM of this installation in Proxmox (`status --live`). */
export interface LiveRow {
  /** `namespace/name` of the resource, from the marker. */
  name: string;
  site: string;
  node: string;
  vmid: number;
  /** Proxmox's status (`running`, `stopped`), or `template`. */
  state: string;
  lock: string;
  /** Whether the state file knows this VM; `—` when there is no state file. */
  inState: 'yes' | 'no' | '—';
  /**
   * `legacy`: the first marker format, without installation or VMID: this installation's only when
   * the state file knows its uid (apply rewrites such a marker in the current format).
   */
  marker: 'current' | 'legacy';
  uid: string;
}

/** `status --live`: what Proxmox holds, by ownership marker, for one installation. */
export interface LiveView {
  installation: string;
  /** The state file the IN STATE column compares with; absent when there is none. */
  stateFile?: string;
  vms: LiveRow[];
  /** VMs of other installations, counted per installation and site. */
  elsewhere: Array<{ installation: string; site: string; vms: number }>;
  /** VMs whose marker was written for another VMID (an operator's clone of a marked VM): nobody's. */
  copies: Array<{ site: string; node: string; vmid: number; name: string; writtenFor: number }>;
  /** Sites that could not be read: the view is incomplete. */
  errors: Array<{ site: string; message: string }>;
}

export const LIVE_COLUMNS: Column<LiveRow>[] = [
  { title: 'NAME', get: (r) => r.name },
  { title: 'SITE', get: (r) => r.site },
  { title: 'NODE', get: (r) => r.node },
  { title: 'VMID', get: (r) => String(r.vmid) },
  { title: 'STATE', get: (r) => r.state },
  { title: 'LOCK', get: (r) => r.lock, keep: true },
  { title: 'IN STATE', get: (r) => r.inState, keep: true },
  // Only when there is one: most fleets have no VM of the first marker format left.
  { title: 'MARKER', get: (r) => (r.marker === 'legacy' ? 'legacy' : '') },
];

export function formatLive(v: LiveView, output: 'table' | 'json' | 'yaml'): string {
  if (output === 'json') return JSON.stringify(v, null, 2);
  if (output === 'yaml') return stringify(v);
  const lines = [
    `VMs of installation ${v.installation} in Proxmox (IN STATE: ${v.stateFile ? `known to ${v.stateFile}` : 'no state file'})`,
    '',
    v.vms.length ? table(v.vms, LIVE_COLUMNS) : `No VMs of installation ${v.installation}.`,
  ];
  const notes: string[] = [];
  if (v.vms.some((r) => r.marker === 'legacy'))
    notes.push(
      "legacy: the first marker format (no installation in it): this installation's only if the state file knows its uid",
    );
  const byInstallation = new Map<string, string[]>();
  for (const e of v.elsewhere)
    byInstallation.set(e.installation, [...(byInstallation.get(e.installation) ?? []), `${e.site}: ${e.vms}`]);
  for (const [inst, sites] of byInstallation) {
    const n = v.elsewhere.filter((e) => e.installation === inst).reduce((a, e) => a + e.vms, 0);
    notes.push(`managed elsewhere: installation ${inst}: ${n} VM(s) (${sites.join(', ')})`);
  }
  for (const c of v.copies)
    notes.push(
      `copied marker: ${c.site} VM ${c.vmid} on ${c.node} carries the marker of ${c.name} written for VM ${c.writtenFor} (a clone?): not this installation's`,
    );
  for (const e of v.errors) notes.push(`${e.site}: cannot read its VMs: ${e.message}`);
  if (notes.length) lines.push('', ...notes);
  return lines.join('\n');
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
