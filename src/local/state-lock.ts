/**
 * The state's lock file, which keeps two applies (or an apply and a delete) off one state: only
 * the process holding `<state.db>.lock` may write the state. SQLite would let two writers take
 * turns, each commit safe; but two engines reconciling the same resources from two caches would
 * each act on a stale picture, so the second is refused outright (StateLockedError) instead.
 */
import { closeSync, openSync, readFileSync, unlinkSync, writeSync } from 'node:fs';
import { resolve } from 'node:path';

export class StateLockedError extends Error {}

/**
 * States locked by this process. The lock file's pid cannot tell a second store in this process
 * from a dead process whose pid we inherited (containers: pid 1 again after a restart).
 */
const lockedHere = new Set<string>();

/** A lock held on `file` (the state database); release() gives it up. */
export interface StateLock {
  release(): void;
}

/**
 * Take `file.lock` exclusively (O_EXCL, holding our pid); a lock left by a dead process is taken
 * over. Throws StateLockedError when a live process (or this one) holds it.
 */
export function lockState(file: string): StateLock {
  const lockFile = `${file}.lock`;
  const id = resolve(file);
  if (lockedHere.has(id)) throw new StateLockedError(`${file} is already open in this process (lock file ${lockFile})`);
  for (let attempt = 0; attempt < 2; attempt++) {
    let fd: number;
    try {
      fd = openSync(lockFile, 'wx', 0o600);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      let content: string;
      try {
        content = readFileSync(lockFile, 'utf8');
      } catch (re) {
        if ((re as NodeJS.ErrnoException).code === 'ENOENT') continue; // released meanwhile: try again
        throw re;
      }
      const pid = Number(content.trim());
      if (pid && pid !== process.pid && processAlive(pid)) {
        throw new StateLockedError(`${file} is in use by process ${pid} (lock file ${lockFile})`);
      }
      try {
        unlinkSync(lockFile); // stale: its process is gone
      } catch (ue) {
        if ((ue as NodeJS.ErrnoException).code !== 'ENOENT') throw ue; // another process took it over first
      }
      continue;
    }
    writeSync(fd, String(process.pid));
    lockedHere.add(id);
    let held = true;
    return {
      release() {
        if (!held) return;
        held = false;
        closeSync(fd);
        lockedHere.delete(id);
        try {
          unlinkSync(lockFile);
        } catch {
          // already gone
        }
      },
    };
  }
  throw new StateLockedError(`cannot lock ${file}`);
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}
