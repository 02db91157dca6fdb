/** Argument parsers and the run-and-exit wrapper shared by the commands. */
import { InvalidArgumentError, Option } from 'commander';
import { LEGACY_STATE_FILE, STATE_DIR_ENV } from '../workspace/state-file.ts';

/**
 * The state file's old default place, relative to the current directory: still used when it
 * exists (with a note). Every command finds its state file with stateFileFor
 * (src/workspace/arguments.ts), from one definition in src/workspace/state-file.ts.
 */
export const DEFAULT_STATE = LEGACY_STATE_FILE;

/** `--state`'s help: where the state file is when the option is not given. */
export const STATE_HELP = `state file (a SQLite database), a cache of what Proxmox holds (default: \${XDG_STATE_HOME:-~/.local/state}/provider-proxmox/<installation>/state.db, the root overridden by $${STATE_DIR_ENV}; ./${LEGACY_STATE_FILE} if it exists here); a FILE.json of an earlier version is imported into FILE.db`;

export function positive(v: string): number {
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new InvalidArgumentError('expected a number > 0');
  return n;
}

export function wholeNumber(v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError('expected a whole number >= 0');
  return n;
}

/** `90s`, `30m`, `2h`, `500ms`, a bare number is seconds -> ms. */
export function duration(v: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(v);
  if (!m) throw new InvalidArgumentError('expected a duration like 90s, 30m or 2h');
  return Number(m[1]) * { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[(m[2] ?? 's') as 'ms' | 's' | 'm' | 'h'];
}

/** A duration as `text` writes it back: `100ms`, `1s`, `90s`. */
function spelled(ms: number): string {
  return ms < 1000 ? `${ms}ms` : `${ms / 1000}s`;
}

/**
 * A duration of at least `minMs`: what a value below it would do (check without pause, give up at
 * once) is never what the flag is for, so it is refused (exit 2) instead of a busy loop or a run
 * that times out before it starts.
 */
export function durationAtLeast(minMs: number, example: string): (v: string) => number {
  return (v) => {
    const ms = duration(v);
    if (ms < minMs)
      throw new InvalidArgumentError(`expected a duration of at least ${spelled(minMs)}, like ${example}`);
    return ms;
  };
}

/** `-o`: with json or yaml, stdout holds the document alone (docs/output.md). */
export const outputOption = () =>
  new Option('-o, --output <format>', 'output format; json and yaml leave stdout to the document alone')
    .choices(['table', 'json', 'yaml'])
    .default('table');

/** Run a command: its result is the exit code; errors print one clean line (usage errors exit 2). */
export async function runCommand(fn: () => Promise<number> | number): Promise<void> {
  try {
    process.exitCode = await fn();
  } catch (e) {
    const [{ describeError }, { UsageError }] = await Promise.all([
      import('../local/commands.ts'),
      import('../workspace/arguments.ts'),
    ]);
    process.stderr.write(`provider-proxmox: ${describeError(e)}\n`);
    process.exitCode = e instanceof UsageError ? 2 : 1;
  }
}

/**
 * A duration option whose help shows the default as written (`30m`), not in milliseconds. `minMs`:
 * the least value it takes (see durationAtLeast); without it, 0 is allowed and the help says what
 * it means.
 */
export function durationOption(flags: string, description: string, defaultText: string, minMs?: number): Option {
  return new Option(flags, description)
    .argParser(minMs === undefined ? duration : durationAtLeast(minMs, defaultText))
    .default(duration(defaultText), defaultText);
}

/**
 * `--drift-interval`: what the bulk list cannot show is only seen in a VM's config, so each Ready
 * VM's config is read once per interval, at a moment of its own (spread, never in one burst).
 */
export function driftIntervalOption(): Option {
  return durationOption(
    '--drift-interval <d>',
    "how often each Ready VM's config is read in full, for drift only the config shows; every poll checks status, cpu, memory, disk size, name, tags, lock and node from the bulk list (/cluster/resources); the reads are spread over the interval; 0: every poll",
    '5m',
  );
}
