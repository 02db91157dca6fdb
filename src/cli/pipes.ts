/**
 * A closed stdout or stderr (`provider-proxmox apply ... | head -1`): exit at once, without a
 * stack trace, with status 141 (128 + SIGPIPE), what the shell reports for git, kubectl or
 * terraform killed by SIGPIPE. Not 0: apply's 0 means "every VM is Ready", and with `set -o
 * pipefail` a pipeline whose reader stopped early must not read as a finished apply. Stopping
 * mid-apply is safe (the state file and the ownership markers make the next run continue).
 * Node ignores SIGPIPE, so a write to a closed pipe fails with EPIPE instead, emitted as an
 * 'error' event that would otherwise crash with a stack trace.
 */

/** The exit status after a write to a closed pipe. */
export const CLOSED_PIPE_EXIT = 141;

/** Whether `e` says the reading end of the pipe (or socket) is gone. */
export function isClosedPipe(e: unknown): boolean {
  const code = (e as NodeJS.ErrnoException | undefined)?.code;
  return code === 'EPIPE' || code === 'ERR_STREAM_DESTROYED';
}

/** On EPIPE from any of `streams`, `exit(141)`; other stream errors are thrown as before. */
export function exitOnClosedPipe(
  streams: NodeJS.WritableStream[] = [process.stdout, process.stderr],
  exit: (code: number) => void = (code) => process.exit(code),
): void {
  for (const s of streams)
    s.on('error', (e: unknown) => {
      if (!isClosedPipe(e)) throw e;
      exit(CLOSED_PIPE_EXIT);
    });
}
