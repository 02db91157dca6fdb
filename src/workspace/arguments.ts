/**
 * What a cluster-less command's `--config` and `--state` resolve to on the operator's disk: the
 * ProviderConfig (the file given, or the one among the manifests) and the state file (the one
 * given, the old place in the current directory, or the installation's under the state root).
 * Every command (apply, delete, status, plan, gc) finds them the same way, so that they all look
 * at the same state file for the same manifests. A wrong argument is a UsageError (exit 2).
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { cliInstallation, installationOf } from '../api/provider-config.ts';
import {
  ConfigError,
  type LoadedProviderConfig,
  loadProviderConfig,
  parseProviderConfig,
} from '../api/provider-config-load.ts';
import { write } from './lines.ts';
import type { ManifestDoc } from './manifests.ts';
import {
  defaultStateFile,
  existingState,
  installationsWithState,
  LEGACY_STATE_FILE,
  readStateFile,
  STATE_FILE_NAME,
  stateRoot,
} from './state-file.ts';

/** The command line asks for something impossible: the CLI exits 2 (src/cli/args.ts runCommand). */
export class UsageError extends Error {}

/**
 * What validate, plan and apply say of paths that hold nothing they would act on (an empty
 * directory, the wrong one, only a ProviderConfig): a usage error, the same words from each.
 */
export function nothingToApply(files: string[]): UsageError {
  return new UsageError(
    `no ProxmoxVM, ProxmoxImage or ProxmoxTemplate in ${files.join(', ')}: pass the files or directories that hold the manifests`,
  );
}

// --- the ProviderConfig -----------------------------------------------------------------------------

/** --config FILE, loaded; a file that is unreadable or holds no usable ProviderConfig is a usage error (exit 2). */
export async function loadConfigArg(file: string): Promise<LoadedProviderConfig> {
  try {
    return await loadProviderConfig(file);
  } catch (e) {
    if (e instanceof ConfigError) throw new UsageError(e.message);
    throw e;
  }
}

/** The ProviderConfig among the manifests (read from its file, with the Secrets there), if any. */
export function configAmong(others: ManifestDoc[]): LoadedProviderConfig | undefined {
  const doc = others.find((d) => d.kind === 'ProviderConfig' || d.kind === 'ClusterProviderConfig');
  return doc ? parseProviderConfig(readFileSync(doc.file, 'utf8'), doc.file) : undefined;
}

/** The installation of a ProviderConfig as the CLI runs it (spec.installation, else cli-<name>). */
export function cliInstallationOf(config: LoadedProviderConfig): string {
  return installationOf(config.config, cliInstallation);
}

// --- the state file -----------------------------------------------------------------------------------

/** Which state file a command uses, and the note to print about it (the legacy place). */
export interface StateChoice {
  file: string;
  note?: string;
}

/**
 * The state file of a command: `--state`; else `./.provider-proxmox/state.json` (or the `.db` it
 * was imported into) when it exists in `cwd` (the old default, with a note naming the new place);
 * else the installation's file under the state root. Without an installation (a command that loads no ProviderConfig), the one
 * installation that has a state file there; several are a usage error; none: `{ none: why }`.
 */
export function stateFileFor(opts: {
  state?: string | undefined;
  installation?: string | undefined;
  cwd?: string | undefined;
}): StateChoice | { none: string } {
  if (opts.state) return { file: opts.state };
  // The JSON file an earlier version wrote there, or the database a later apply imported it into.
  const legacy = existingState(join(opts.cwd ?? process.cwd(), LEGACY_STATE_FILE));
  if (legacy) {
    const inst = opts.installation ?? peekInstallation(legacy);
    const target = inst ? defaultStateFile(inst) : join(stateRoot(), '<installation>', STATE_FILE_NAME);
    return {
      file: legacy,
      note: `note: using ${legacy}, the state file's old default place; the default is now ${target}, the same from every directory: move it there${inst ? ` (mkdir -p ${dirname(target)} && mv ${legacy} ${target})` : ''} while no apply runs, or pass --state`,
    };
  }
  if (opts.installation) return { file: defaultStateFile(opts.installation) };
  const root = stateRoot();
  const found = installationsWithState(root);
  if (found.length === 1) return { file: join(root, found[0]!, STATE_FILE_NAME) };
  if (found.length > 1)
    throw new UsageError(
      `${root} holds the state files of ${found.length} installations (${found.join(', ')}): pass --config FILE to pick its installation's, or --state FILE`,
    );
  return {
    none: `nothing has been applied: no state file under ${root} (apply writes one per installation there; pass --state FILE for one elsewhere)`,
  };
}

/** The installation a (legacy) state file records, for the note; nothing when it cannot say. */
export function peekInstallation(file: string): string | undefined {
  try {
    return readStateFile(file)?.installation;
  } catch {
    return undefined; // the command reading it next reports what is wrong with it
  }
}

/** The state file of a command that has its ProviderConfig; the legacy note goes to `err`. */
export function chooseState(
  args: { state?: string | undefined; cwd?: string | undefined; err?: NodeJS.WriteStream | undefined },
  config: LoadedProviderConfig,
): string {
  const c = stateFileFor({ state: args.state, installation: cliInstallationOf(config), cwd: args.cwd });
  if ('none' in c) throw new Error(c.none); // not reached: with an installation there always is a file
  if (c.note) write(args.err ?? process.stderr, c.note);
  return c.file;
}
