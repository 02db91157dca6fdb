/**
 * What the benchmarks measure of their own process on Linux: the bytes it wrote (every write
 * syscall, /proc/self/io wchar) and the bytes a directory holds.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

/** Bytes written by this process so far (undefined where /proc/self/io is missing). */
export function wchar(): number | undefined {
  try {
    const m = /^wchar: (\d+)$/m.exec(readFileSync('/proc/self/io', 'utf8'));
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

/** The size of a directory's files (one level). */
export function dirBytes(dir: string): number {
  return readdirSync(dir).reduce((n, f) => n + statSync(join(dir, f)).size, 0);
}
