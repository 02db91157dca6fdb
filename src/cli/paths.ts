/**
 * Files and directories named on the command line, checked before a command starts: one that does
 * not exist, is a directory where a file is wanted, or cannot be read is a usage error (exit 2,
 * docs/exit-codes.md: the command could not start as written) in one line, `<flag> <path>: no
 * such file or directory; pass ...`, the same for every command, instead of a raw ENOENT from
 * wherever the file happened to be read first, or a manifest problem (exit 1) for a mistyped `-f`.
 */
import { accessSync, constants, statSync } from 'node:fs';
import type { Command } from 'commander';

/** A path given with a flag: `what` names what the flag wants (`a fleet file`), for the fix. */
export interface GivenPath {
  flag: string;
  path: string | readonly string[] | undefined;
  /** `file` (the default), or `file-or-dir` (`-f`: manifests). */
  kind?: 'file' | 'file-or-dir';
  what: string;
}

/** What is wrong with one given path, or undefined when it can be read as `kind` says. */
export function pathProblem(flag: string, path: string, kind: GivenPath['kind'], what: string): string | undefined {
  const fix = `pass ${what}`;
  let dir: boolean;
  try {
    dir = statSync(path).isDirectory();
  } catch (e) {
    return `${flag} ${path}: ${reasonOf(e)}; ${fix}`;
  }
  if (dir && kind !== 'file-or-dir') return `${flag} ${path}: is a directory; ${fix}`;
  try {
    // A directory is walked: it must be listed (read) and entered (execute).
    accessSync(path, dir ? constants.R_OK | constants.X_OK : constants.R_OK);
  } catch (e) {
    return `${flag} ${path}: ${reasonOf(e)}; ${fix}, or make it readable`;
  }
  return undefined;
}

/** The first problem among `given`, in the order given. */
export function givenProblem(given: readonly GivenPath[]): string | undefined {
  for (const g of given) {
    const paths = typeof g.path === 'string' ? [g.path] : (g.path ?? []);
    for (const p of paths) {
      const problem = pathProblem(g.flag, p, g.kind, g.what);
      if (problem) return problem;
    }
  }
  return undefined;
}

/** Throw the first problem among `given` as a UsageError (runCommand: one line, exit 2). */
export async function checkGiven(given: readonly GivenPath[]): Promise<void> {
  const problem = givenProblem(given);
  if (!problem) return;
  // Loaded on use, as runCommand loads it: commands whose files are fine never pay for it.
  const { UsageError } = await import('../workspace/arguments.ts');
  throw new UsageError(problem);
}

/**
 * For the commands that run outside runCommand (sim, controller): the first problem among `given`
 * as commander reports a usage error (one line, exit 2).
 */
export function refuseGiven(cmd: Command, given: readonly GivenPath[]): void {
  const problem = givenProblem(given);
  if (problem) cmd.error(`provider-proxmox: ${problem}`, { exitCode: 2, code: 'provider-proxmox.givenPath' });
}

/** A system error as a person says it (`no such file or directory`), not its code. */
function reasonOf(e: unknown): string {
  switch ((e as NodeJS.ErrnoException).code) {
    case 'ENOENT':
      return 'no such file or directory';
    case 'ENOTDIR':
      return 'a part of the path is not a directory';
    case 'EACCES':
    case 'EPERM':
      return 'permission denied';
    case 'ELOOP':
      return 'too many symbolic links';
    default:
      return (e as Error).message;
  }
}

/** The ProviderConfig given with --config (most commands take it). */
export const configPath = (path: string | undefined): GivenPath => ({
  flag: '--config',
  path,
  what: 'a ProviderConfig YAML file (`provider-proxmox sim --print-config FILE` writes one for the simulator)',
});

/** The manifests given with -f. */
export const manifestPaths = (paths: readonly string[] | undefined): GivenPath => ({
  flag: '-f',
  path: paths,
  kind: 'file-or-dir',
  what: 'an existing manifest file or directory',
});
