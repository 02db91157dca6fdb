/**
 * The cluster-less commands (the CLI only wires options to these): `apply`, `delete`, `status`,
 * `demo`, and what they share (setup.ts).
 */
import { ConfigError } from '../api/provider-config.ts';
import { formatProblem, ManifestError } from './manifests.ts';
import { StateFileError } from './store.ts';

export * from './apply.ts';
export * from './delete.ts';
export * from './demo.ts';
export * from './setup.ts';
export * from './status.ts';

export function describeError(e: unknown): string {
  if (e instanceof ManifestError) return e.problems.map(formatProblem).join('\n');
  if (e instanceof ConfigError || e instanceof StateFileError) return e.message;
  return e instanceof Error ? e.message : String(e);
}
