/**
 * `cloud-init status` output, as cloud-init 24.4 prints it (cloudinit/cmd/status.py at 04eacd06e):
 * `status: X` (tabular), `--long` (TABULAR_LONG_TMPL, :80-86), `--format json` (print_status,
 * :166-229: sorted keys, indent 2, the status.json `v1` stages merged in) and `yaml`; the exit
 * code is 1 after an error and 2 after recoverable errors only (handle_status_args :232-256,
 * from cloud-init 23.4, 70acb7f2a "Add support for cloud-init degraded state").
 *
 * Stage times are cloud-init's own `util.uptime()` seconds, so `last_update` is famously a date
 * in January 1970 (status.py :484-488 formats them as epoch times).
 */
import { stringify } from 'yaml';

export const STAGES = ['init-local', 'init', 'modules-config', 'modules-final'] as const;
export type StageName = (typeof STAGES)[number];

export interface StageStatus {
  /** Uptime seconds, or null before the stage started / finished. */
  start: number | null;
  finished: number | null;
  errors: string[];
  recoverable: Record<string, string[]>;
}

export interface StatusDetails {
  running: 'not started' | 'running' | 'done' | 'disabled';
  bootCode: 'enabled-by-generator' | 'disabled-by-generator';
  /** status.json's `v1`; undefined when there is none (not started, disabled). */
  v1?: { datasource: string | null; stage: StageName | null; stages: Record<StageName, StageStatus> };
  /** Clock ms at which the run ends (for `--wait`). */
  doneAt: number;
}

/** A Python float in JSON (`3.0`, not `3`). */
class PyFloat {
  readonly v: number;
  constructor(v: number) {
    this.v = v;
  }
}

/** json.dumps(obj, indent=2, sort_keys=True, separators=(",", ": ")), ensure_ascii included. */
export function pyJson(v: unknown, indent = ''): string {
  const inner = `${indent}  `;
  if (v === null || v === undefined) return 'null';
  if (v instanceof PyFloat) return Number.isInteger(v.v) ? `${v.v}.0` : String(v.v);
  if (typeof v === 'string')
    return JSON.stringify(v).replace(
      /[\u007f-\uffff]/g,
      (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`,
    );
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  if (Array.isArray(v)) return v.length ? `[\n${v.map((x) => inner + pyJson(x, inner)).join(',\n')}\n${indent}]` : '[]';
  const keys = Object.keys(v as object).sort();
  if (!keys.length) return '{}';
  return `{\n${keys.map((k) => `${inner}${pyJson(k)}: ${pyJson((v as Record<string, unknown>)[k], inner)}`).join(',\n')}\n${indent}}`;
}

/** The dict with its floats as plain numbers (for YAML). */
function plain(v: unknown): unknown {
  if (v instanceof PyFloat) return v.v;
  if (Array.isArray(v)) return v.map(plain);
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)]));
  return v;
}

const BOOT_REASON = {
  'enabled-by-generator': 'Cloud-init enabled by systemd cloud-init-generator',
  'disabled-by-generator': 'Cloud-init disabled by cloud-init-generator',
};

function lastUpdate(secs: number): string {
  return new Date(Math.floor(secs * 1000)).toUTCString().replace(/GMT$/, '+0000');
}

export function formatStatus(d: StatusDetails, format: string, long: boolean): { out: string; exitcode: number } {
  const errors: string[] = [];
  const recoverable: Record<string, string[]> = {};
  let latest = 0;
  const v1out: Record<string, unknown> = {};
  if (d.v1) {
    // get_errors walks sorted(status_v1.items()).
    for (const name of [...STAGES].sort()) {
      const s = d.v1.stages[name];
      errors.push(...s.errors);
      for (const [k, list] of Object.entries(s.recoverable)) recoverable[k] = [...(recoverable[k] ?? []), ...list];
      latest = Math.max(latest, s.start ?? 0, s.finished ?? 0);
      v1out[name] = {
        errors: s.errors,
        finished: s.finished === null ? null : new PyFloat(s.finished),
        recoverable_errors: s.recoverable,
        start: s.start === null ? null : new PyFloat(s.start),
      };
    }
    v1out.stage = d.v1.stage;
  }
  const condition = errors.length ? 'error' : Object.keys(recoverable).length ? 'degraded' : 'healthy';
  const running = d.running;
  let status: string = running;
  let extended: string = running;
  if (condition === 'error') {
    status = 'error';
    extended = `error - ${running}`;
  } else if (condition === 'degraded' && (running === 'done' || running === 'running'))
    extended = `degraded ${running}`;
  const dsFull = d.v1?.datasource;
  const datasource = d.v1 ? (dsFull ? dsFull.split(' ')[0]!.toLowerCase().replace('datasource', '') : null) : '';
  const detail = dsFull || (d.v1?.stage ? `Running in stage: ${d.v1.stage}` : BOOT_REASON[d.bootCode]);
  const exitcode = condition === 'error' ? 1 : condition === 'degraded' ? 2 : 0;
  const dict: Record<string, unknown> = {
    datasource,
    boot_status_code: d.bootCode,
    status,
    extended_status: extended,
    detail,
    errors,
    recoverable_errors: recoverable,
    last_update: latest ? lastUpdate(latest) : '',
    ...v1out,
  };
  if (format === 'json') return { out: `${pyJson(dict)}\n`, exitcode };
  if (format === 'yaml') return { out: `---\n${stringify(plain(dict), { sortMapEntries: true })}...\n\n`, exitcode };
  let out = `status: ${status}\n`;
  if (long) {
    const errs = errors.length ? `\n\t- ${errors.join('\n\t- ')}` : ' []';
    const recs = Object.keys(recoverable).length
      ? `\n${Object.entries(recoverable)
          .map(([k, l]) => `${k}:\n\t- ${l.map((i) => i.replace(/\n/g, ' ')).join('\n\t- ')}`)
          .join('\n')}`
      : ' {}';
    out +=
      `extended_status: ${extended}\nboot_status_code: ${d.bootCode}\n` +
      `${latest ? `last_update: ${lastUpdate(latest)}\n` : ''}detail: ${detail}\nerrors:${errs}\nrecoverable_errors:${recs}\n`;
  }
  return { out, exitcode };
}
