/**
 * How the cluster-less commands print: whole lines. A result, a note or an error message that
 * ends without a line break would run into the shell prompt or the next line, so every write of
 * theirs goes through here (src/local/output.ts adds the stdout/stderr split of `-o json|yaml`).
 */

/** Write `s` as one or more whole lines (stdout unless `out` is given). */
export function write(out: NodeJS.WriteStream | undefined, s: string): void {
  (out ?? process.stdout).write(s.endsWith('\n') ? s : `${s}\n`);
}
