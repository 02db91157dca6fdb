/**
 * The cluster-less commands that run the engine (the CLI only wires options to these): `apply`,
 * `delete`, `status`, and what they share (setup.ts). What they read from the operator's disk
 * (manifests, phases, --config, the state file) is src/workspace, shared with src/fleet. `demo`
 * (demo.ts) is loaded on its own: it starts the simulator, which the others must not load (ssh2
 * alone, with its WebAssembly, costs an apply about 16 MB of memory).
 */
import { ConfigError } from '../api/provider-config-load.ts';
import { formatProblem, ManifestError } from '../workspace/manifests.ts';
import { StateFileError } from '../workspace/state-file.ts';

export * from './apply.ts';
export * from './delete.ts';
export * from './setup.ts';
export * from './status.ts';

/** One clean message for an error of any cluster-less command (fleet's too: src/cli/args.ts runCommand). */
export function describeError(e: unknown): string {
  if (e instanceof ManifestError) return e.problems.map(formatProblem).join('\n');
  if (e instanceof StateFileError) return stateFileLine(e.message);
  if (e instanceof ConfigError) return e.message;
  return e instanceof Error ? e.message : String(e);
}

/**
 * A StateFileError in one line. The JSON parser's own message quotes the file's first bytes, line
 * breaks and all (a text file given as --state broke the line in three); what the reader needs
 * instead is what the file should have been.
 */
function stateFileLine(message: string): string {
  return message
    .replace(
      /: it is not JSON \([\s\S]*\); the state file is only/,
      ': it is neither a state database (SQLite, as apply writes) nor valid JSON (a state file of an earlier version); the state file is only',
    )
    .replace(/\s*\n\s*/g, ' ');
}
