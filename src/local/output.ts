/**
 * Where a command's output goes, so that `-o json|yaml` leaves stdout to the document alone:
 * the result (the table, or the JSON/YAML document) on stdout; human lines ("all 30 VMs ready",
 * "2 VM(s) failed ...") on stdout for tables and on stderr for JSON/YAML; notes always on stderr;
 * live progress on stdout for tables, on stderr for JSON/YAML, and none with --quiet.
 * docs/output.md describes the documents and this split.
 */
import { formatRows, Progress, writeTable } from './render.ts';
import type { Row } from './resource-view.ts';
import type { OutStream } from './terminal.ts';

export type OutputFormat = 'table' | 'json' | 'yaml';

export interface OutputArgs {
  output?: OutputFormat | undefined;
  quiet?: boolean | undefined;
  /** stdout (tests: a capture). */
  out?: OutStream | undefined;
  /** stderr (tests: a capture). */
  err?: OutStream | undefined;
}

/** Write `s` as whole lines (a trailing line break added when missing). */
function lines(to: OutStream, s: string): void {
  to.write(s.endsWith('\n') ? s : `${s}\n`);
}

export class CommandOutput {
  readonly format: OutputFormat;
  /** JSON or YAML: stdout holds the document and nothing else. */
  readonly machine: boolean;
  readonly quiet: boolean;
  readonly out: OutStream;
  readonly err: OutStream;

  constructor(args: OutputArgs) {
    this.format = args.output ?? 'table';
    this.machine = this.format !== 'table';
    this.quiet = Boolean(args.quiet);
    this.out = args.out ?? process.stdout;
    this.err = args.err ?? process.stderr;
  }

  /** The command's result: the table or the document, on stdout. */
  result(text: string): void {
    lines(this.out, text);
  }

  /** A status table as the result, after an empty line, written a few hundred rows at a time (writeTable). */
  resultTable(rows: Row[]): void {
    if (!rows.length) return this.result(`\n${formatRows(rows, 'table')}`);
    this.out.write('\n');
    writeTable((text) => this.out.write(text), rows);
  }

  /** A line for a human reading the result: next to a table on stdout; with JSON/YAML on stderr. */
  say(text: string): void {
    lines(this.machine ? this.err : this.out, text);
  }

  /** A note about how the command ran (the state file's old place): stderr. */
  note(text: string): void {
    lines(this.err, text);
  }

  /** The stream live progress goes to, or null with --quiet. */
  get progressStream(): OutStream | null {
    if (this.quiet) return null;
    return this.machine ? this.err : this.out;
  }

  /** A live view on progressStream (a silent one with --quiet). */
  progress(env: NodeJS.ProcessEnv = process.env): Progress {
    return new Progress(this.progressStream, env);
  }
}

export function outputFor(args: OutputArgs): CommandOutput {
  return new CommandOutput(args);
}
