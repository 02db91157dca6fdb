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
  if (e instanceof ConfigError || e instanceof StateFileError) return e.message;
  return e instanceof Error ? e.message : String(e);
}
