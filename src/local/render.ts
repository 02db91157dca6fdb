/**
 * Terminal output of the local runtime: the status table for humans and its typed JSON/YAML
 * document (src/local/status-list.ts), the live views of apply/delete (Progress) and of `status
 * --watch` (StatusScreen) fitted to the terminal (columns dropped by priority, rows cut with a
 * "… N more" line, never wrapped), and `status --live`.
 */
import { stringify } from 'yaml';
import type { Row } from './resource-view.ts';
import { liveStatus, statusList } from './status-list.ts';
import {
  colorsEnabled,
  ellipsis,
  isLiveTerminal,
  type OutStream,
  paint,
  Screen,
  type Style,
  terminalSize,
  wrapText,
} from './terminal.ts';

export interface Column<T = Row> {
  title: string;
  get: (r: T) => string;
  max?: number;
  /** Shown even when every row is empty (a column whose blanks mean something). */
  keep?: boolean;
  /** What a shown column prints for an empty cell (PENDING: `-`); empty cells alone do not show it. */
  blank?: string;
  /** On a narrow terminal, columns are dropped in this order (lowest first); never when absent. */
  drop?: number;
  /** On a narrow terminal, cut (…) down to this width: before any column is dropped when it has `drop`, after all were otherwise. */
  min?: number;
  /** The colour of a cell, in the live views (when colours are on). */
  style?: (value: string, r: T) => Style | undefined;
}

const message = (r: Row) => (r.reason ? `${r.reason}: ${r.message}` : r.message);
const condition = (v: string): Style => (v === 'True' ? 'green' : v === 'False' ? 'red' : 'yellow');
const failing = (_: string, r: Row): Style | undefined => (r.reason ? 'red' : undefined);

/**
 * The status table. NAME, READY and SYNCED are never dropped; on a narrow terminal AGE goes first,
 * then IP, PHASE, SITE, NODE, PENDING, STATE, VMID, and MESSAGE last (cut to 20 columns first).
 */
export const STATUS_COLUMNS: Column[] = [
  { title: 'NAME', get: (r) => r.name, min: 12 },
  { title: 'PHASE', get: (r) => r.phase ?? '', drop: 2 },
  { title: 'SITE', get: (r) => r.site, drop: 3 },
  { title: 'NODE', get: (r) => r.node, drop: 4 },
  { title: 'VMID', get: (r) => r.vmid, drop: 7 },
  { title: 'STATE', get: (r) => r.state, drop: 6 },
  { title: 'IP', get: (r) => r.ip, drop: 1 },
  { title: 'READY', get: (r) => r.ready, style: condition },
  { title: 'SYNCED', get: (r) => r.synced, style: condition },
  // Shown only when some VM has changes waiting for a reboot (the others then show -).
  { title: 'PENDING', get: (r) => r.pendingChanges.join(','), blank: '-', drop: 5 },
  { title: 'AGE', get: (r) => r.age, drop: 0 },
  // Never cut in the final table: it is where a failed VM says why and how to fix it (last column: it may wrap).
  { title: 'MESSAGE', get: message, drop: 8, min: 20, style: failing },
];

/** The live view of apply and delete: what each VM is doing (STEP), and whether it is there yet. */
export const PROGRESS_COLUMNS: Column[] = [
  { title: 'NAME', get: (r) => r.name, min: 12 },
  { title: 'PHASE', get: (r) => r.phase ?? '', drop: 2 },
  { title: 'NODE', get: (r) => r.node, drop: 3 },
  { title: 'VMID', get: (r) => r.vmid, drop: 6 },
  { title: 'STEP', get: (r) => r.step, drop: 8 },
  { title: 'STATE', get: (r) => r.state, drop: 5 },
  { title: 'IP', get: (r) => r.ip, drop: 1 },
  { title: 'READY', get: (r) => r.ready, style: condition },
  { title: 'SYNCED', get: (r) => r.synced, style: condition },
  { title: 'PENDING', get: (r) => r.pendingChanges.join(','), blank: '-', drop: 4 },
  { title: 'MESSAGE', get: message, max: 200, drop: 7, min: 20, style: failing },
];

interface Layout<T> {
  columns: Column<T>[];
  widths: number[];
}

function cell<T>(c: Column<T>, r: T): string {
  const v = c.get(r).replace(/\s+/g, ' ');
  if (!v) return c.blank ?? '';
  return c.max && v.length > c.max ? `${v.slice(0, c.max - 1)}…` : v;
}

/**
 * Which columns fit in `width`, and how wide each is: the shown columns (NAME, `keep`, and those
 * some row has a value for) at their natural width; when too wide, droppable columns with a `min`
 * are cut, then columns are dropped by `drop` (each drop gives the cut ones their width back), and
 * last the undroppable ones are cut. Whatever is still too wide is cut at the width by the caller.
 */
function layout<T>(rows: T[], columns: Column<T>[], width: number, sep: number): Layout<T> {
  let used = columns.filter((c) => c.title === 'NAME' || c.keep || rows.some((r) => c.get(r)));
  for (;;) {
    const widths = used.map((c) => Math.max(c.title.length, ...rows.map((r) => cell(c, r).length)));
    let excess = widths.reduce((a, w) => a + w, 0) + sep * Math.max(0, used.length - 1) - width;
    const shrink = (droppable: boolean) =>
      used.forEach((c, i) => {
        if (excess <= 0 || c.min === undefined || (c.drop !== undefined) !== droppable) return;
        const cut = Math.min(excess, widths[i]! - Math.max(c.min, c.title.length));
        if (cut > 0) {
          widths[i]! -= cut;
          excess -= cut;
        }
      });
    shrink(true);
    const droppable = used.filter((c) => c.drop !== undefined);
    if (excess > 0 && droppable.length) {
      const victim = droppable.reduce((a, c) => (c.drop! < a.drop! ? c : a));
      used = used.filter((c) => c !== victim);
      continue;
    }
    shrink(false);
    return { columns: used, widths };
  }
}

interface LineOptions {
  width: number;
  sep: number;
  color: boolean;
}

function line<T>(vals: string[], lay: Layout<T>, o: LineOptions, styles?: Array<Style | undefined>): string {
  const last = vals.length - 1;
  const parts = vals.map((v, i) => {
    const t = ellipsis(v, lay.widths[i]!);
    return { text: t, pad: i === last ? '' : ' '.repeat(lay.widths[i]! - t.length) };
  });
  const join = (texts: string[]) =>
    texts
      .map((t, i) => t + parts[i]!.pad)
      .join(' '.repeat(o.sep))
      .trimEnd();
  const plain = join(parts.map((p) => p.text));
  // Colour only what fits: a cut would leave an escape sequence open.
  if (!o.color || !styles || plain.length > o.width) return plain.slice(0, o.width).trimEnd();
  return join(parts.map((p, i) => paint(true, styles[i], p.text)));
}

/** The title row and one line per row; `measure`: the rows the column widths are taken from. */
function tableLines<T>(rows: T[], columns: Column<T>[], o: LineOptions, measure: T[] = rows): string[] {
  const lay = layout(measure, columns, o.width, o.sep);
  return [titleLine(lay, o), ...rows.map((r) => rowLine(r, lay, o))];
}

function titleLine<T>(lay: Layout<T>, o: LineOptions): string {
  return line(
    lay.columns.map((c) => c.title),
    lay,
    o,
  );
}

function rowLine<T>(r: T, lay: Layout<T>, o: LineOptions): string {
  return line(
    lay.columns.map((c) => cell(c, r)),
    lay,
    o,
    o.color ? lay.columns.map((c) => c.style?.(c.get(r), r)) : undefined,
  );
}

/** Lines written per call by writeTable. */
const TABLE_CHUNK = 256;

/**
 * table(), written to `write` a few hundred lines at a time rather than made as one string: the
 * table of a 10,000-VM apply is about 2 MB, and made whole (its lines, their join, the join's
 * copy) at the apply's end it grew V8's old space by 20-30 MB just when the apply's own memory
 * was at its peak.
 */
export function writeTable<T = Row>(
  write: (text: string) => void,
  rows: T[],
  columns: Column<T>[] = STATUS_COLUMNS as unknown as Column<T>[],
): void {
  const o: LineOptions = { width: Number.POSITIVE_INFINITY, sep: 3, color: false };
  const lay = layout(rows, columns, o.width, o.sep);
  const chunk = [titleLine(lay, o)];
  for (const r of rows) {
    chunk.push(rowLine(r, lay, o));
    if (chunk.length === TABLE_CHUNK) {
      write(`${chunk.join('\n')}\n`);
      chunk.length = 0;
    }
  }
  if (chunk.length) write(`${chunk.join('\n')}\n`);
}

/**
 * The table for humans: every column at its full width, as kubectl prints it (a narrow terminal
 * wraps it; a pipe gets it whole). With a finite `width`, fitted to it as the live views are:
 * columns dropped by priority (READY and SYNCED never), MESSAGE cut.
 */
export function table<T = Row>(
  rows: T[],
  columns: Column<T>[] = STATUS_COLUMNS as unknown as Column<T>[],
  width = Number.POSITIVE_INFINITY,
): string {
  return tableLines(rows, columns, { width, sep: 3, color: false }).join('\n');
}

export interface FormatOptions {
  /** The time ageSeconds and generatedAt are taken at (ms; default now). */
  now?: number;
}

/** `status` and apply's final output: the table, or the typed StatusList document (docs/output.md). */
export function formatRows(rows: Row[], output: 'table' | 'json' | 'yaml', opts: FormatOptions = {}): string {
  if (output === 'json') return JSON.stringify(statusList(rows, opts.now), null, 2);
  if (output === 'yaml') return stringify(statusList(rows, opts.now));
  return rows.length ? table(rows) : 'No resources.';
}

/** `status --watch -o json`: one StatusList per line. */
export function formatRowsLine(rows: Row[], now = Date.now()): string {
  return JSON.stringify(statusList(rows, now));
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
  if (output === 'json') return JSON.stringify(liveStatus(v), null, 2);
  if (output === 'yaml') return stringify(liveStatus(v));
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

/** How much a row matters when not all fit: failed first, then in progress, waiting, ready. */
function interest(r: Row): number {
  if (r.reason && (r.ready === 'False' || r.synced === 'False')) return 0;
  if (r.ready === 'True' && r.synced === 'True' && !r.step.startsWith('Deleting')) return 3;
  return r.step === 'Pending' ? 2 : 1;
}
const INTEREST = ['failed', 'in progress', 'pending', 'ready'];

export interface FrameOptions {
  width: number;
  /** Lines the frame may take (the terminal's height less the line the cursor waits on). */
  height: number;
  color: boolean;
  /** What to print instead of the table when there are no rows. */
  empty?: string;
}

/**
 * A live frame: the `head` lines, then the table fitted to the width; when the rows do not fit the
 * height, the failed and busy ones are kept (in their order) and the others counted in a last
 * "… N more (…)" line. No line is wider than `width`, and there are at most `height` lines.
 */
export function fitFrame(head: string[], rows: Row[], columns: Column[], o: FrameOptions): string[] {
  const lines = head.map((h, i) => paint(o.color && i === 0, 'bold', ellipsis(h, o.width))).slice(0, o.height);
  const room = o.height - lines.length;
  if (room <= 0) return lines;
  if (!rows.length) return o.empty ? [...lines, ellipsis(o.empty, o.width)] : lines;
  const opts = { width: o.width, sep: 2, color: o.color };
  if (rows.length + 1 <= room) return [...lines, ...tableLines(rows, columns, opts)];
  // Keep room for the title row and the "more" line.
  const keep = Math.max(0, room - 2);
  const order = rows.map((r, i) => ({ r, i, w: interest(r) })).sort((a, b) => a.w - b.w || a.i - b.i);
  const shown = new Set(order.slice(0, keep).map((x) => x.i));
  const hidden = order.slice(keep);
  const counts = INTEREST.map((what, w) => [hidden.filter((x) => x.w === w).length, what] as const)
    .filter(([n]) => n)
    .map(([n, what]) => `${n} ${what}`);
  const more = paint(o.color, 'dim', ellipsis(`… ${hidden.length} more (${counts.join(', ')})`, o.width));
  if (room === 1) return [...lines, more];
  const body = tableLines(
    rows.filter((_, i) => shown.has(i)),
    columns,
    opts,
    rows,
  );
  return [...lines, ...body, more];
}

/** The line-log clock: seconds since the view started, as `[  12.3s]`. */
function stamp(started: number): string {
  return `[${((Date.now() - started) / 1000).toFixed(1).padStart(6)}s]`;
}

/**
 * The live view of apply and delete. On a terminal (not TERM=dumb): one frame redrawn in place,
 * fitted to its width and height, redrawn on resize; at done() only the header line is left.
 * Otherwise (a pipe, a file, CI): one line per change of each VM, `[  12.3s] name: step vmid=...`,
 * and no escape sequence. `null`: no output at all (--quiet).
 */
export class Progress {
  private readonly out: OutStream | null;
  private readonly screen: Screen | undefined;
  private readonly color: boolean;
  private rows: Row[] = [];
  private header = '';
  /** Per resource: the row last seen and the line it printed. */
  private readonly last = new Map<string, { row: Row; desc: string }>();
  private lastLog = '';
  private readonly started = Date.now();

  constructor(out: OutStream | null = process.stdout, env: NodeJS.ProcessEnv = process.env) {
    this.out = out;
    this.color = out ? colorsEnabled(out, env) : false;
    this.screen = out && isLiveTerminal(out, env) ? new Screen(out, () => this.frame()) : undefined;
  }

  /** Whether this view redraws in place (else: lines, or nothing). */
  get live(): boolean {
    return this.screen !== undefined;
  }

  update(rows: Row[], header: string): void {
    if (!this.out) return;
    this.rows = rows;
    this.header = header;
    if (this.screen) return this.screen.draw();
    for (const r of rows) {
      // The runtime hands back the same row object while a resource is unchanged (runtime.ts rows).
      const seen = this.last.get(r.key);
      if (seen?.row === r) continue;
      const desc = `${r.step}${r.vmid ? ` vmid=${r.vmid}` : ''}${r.node ? ` node=${r.node}` : ''}${r.state ? ` state=${r.state}` : ''}${r.ip ? ` ip=${r.ip}` : ''}${r.pendingChanges.length ? ` pending=${r.pendingChanges.join(',')}` : ''}${r.reason ? ` ${r.reason}: ${r.message}` : ''}`;
      this.last.set(r.key, { row: r, desc });
      if (seen?.desc !== desc) this.out.write(`${stamp(this.started)} ${r.name}: ${desc}\n`);
    }
  }

  /**
   * A line of the line log (apply's "phases 1:2/2 2:0/8"), printed when it differs from the last
   * one. A live view shows such news in its header instead: nothing is printed there.
   */
  log(text: string): void {
    if (!this.out || this.screen || text === this.lastLog) return;
    this.lastLog = text;
    this.out.write(`${stamp(this.started)} ${text}\n`);
  }

  done(): void {
    this.screen?.done({
      erase: true,
      leave: this.header ? ellipsis(this.header, terminalSize(this.out!).width) : undefined,
    });
  }

  private frame(): string[] {
    const { width, height } = terminalSize(this.out!);
    return fitFrame([this.header], this.rows, PROGRESS_COLUMNS, { width, height: height - 1, color: this.color });
  }
}

/**
 * `status --watch` on a terminal: the head line, a blank line and the status table (or what to say
 * instead, e.g. that there is no state file yet), fitted to the terminal and redrawn in place.
 */
export class StatusScreen {
  private readonly out: OutStream;
  private readonly screen: Screen;
  private readonly color: boolean;
  private head = '';
  private body: Row[] | string = [];

  constructor(out: OutStream, env: NodeJS.ProcessEnv = process.env) {
    this.out = out;
    this.color = colorsEnabled(out, env);
    this.screen = new Screen(out, () => this.frame());
  }

  draw(head: string, body: Row[] | string): void {
    this.head = head;
    this.body = body;
    this.screen.draw();
  }

  /** Stop redrawing: the last frame stays on the screen. */
  done(): void {
    this.screen.done();
  }

  private frame(): string[] {
    const { width, height } = terminalSize(this.out);
    const o = { width, height: height - 1, color: this.color };
    if (typeof this.body === 'string')
      return fitFrame([this.head, '', ...wrapText(this.body, width)], [], STATUS_COLUMNS, o);
    return fitFrame([this.head, ''], this.body, STATUS_COLUMNS, { ...o, empty: 'No resources.' });
  }
}

export { isLiveTerminal };
