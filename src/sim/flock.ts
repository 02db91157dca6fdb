/**
 * The per-VM `flock` on /var/lock/qemu-server/lock-<vmid>.conf: exclusive holders one at a time,
 * shared holders together (a clone of a stopped VM takes its source's lock shared, so clones of
 * one template run side by side), waiters in order, each waiter with its own timeout (10 s for
 * config/start, 5 s for create's placeholder, 1 s for the create and clone workers).
 *
 * The lock belongs to the VMID, not to a config: ClusterState keeps one per VMID, so a VM that is
 * destroyed and created again, or a VMID a clone worker is about to write, shares it.
 */
import type { Clock } from './clock.ts';
import { PveHttpError } from './errors.ts';

/**
 * Flock timeouts run at most this much faster than real time, whatever the speed factor. A worker
 * is many short simulated steps, and each takes at least 1 ms of real time (the timer floor), so
 * at high speed factors a worker takes longer, relative to a waiter's timeout, than at speed 1:
 * without this floor a second create would give up on a create worker that, at speed 1, lets the
 * flock go well within the 5 s (PVE then answers "already exists", not "can't lock file").
 */
export const FLOCK_MAX_SPEED = 100;

interface Waiter {
  shared: boolean;
  grant: () => void;
}

export class Flock {
  /** Exclusive holder present. */
  private exclusive = false;
  /** Number of shared holders. */
  private sharedHolders = 0;
  private waiters: Waiter[] = [];
  private readonly clock: Clock;
  private readonly timeoutMessage: string;
  /** `timeoutMessage`: what a waiter that gives up reads (default: lock_file's `can't lock file`). */
  constructor(file: string, clock: Clock, timeoutMessage?: string) {
    this.clock = clock;
    this.timeoutMessage = timeoutMessage ?? `can't lock file '${file}' - got timeout`;
  }

  get isHeld(): boolean {
    return this.exclusive || this.sharedHolders > 0;
  }

  /**
   * Acquire within `timeoutMs` of simulated time; rejects `can't lock file ... - got timeout`.
   * `shared`: PVE's lock_config_shared (LOCK_SH), compatible with other shared holders. Like
   * flock(2), a shared request is granted while only shared holders hold the lock, even if an
   * exclusive request waits.
   */
  acquire(timeoutMs: number, opts: { shared?: boolean; signal?: AbortSignal } = {}): Promise<() => void> {
    const shared = opts.shared === true;
    const signal = opts.signal;
    // A waiter whose process is gone (a worker whose node crashed) stops waiting: rejects with the reason.
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.grantable(shared)) {
      this.take(shared);
      return Promise.resolve(this.releaser(shared));
    }
    return new Promise((resolve, reject) => {
      const leave = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        this.waiters = this.waiters.filter((x) => x !== w);
      };
      const onAbort = () => {
        leave();
        reject(signal?.reason);
      };
      const w: Waiter = {
        shared,
        grant: () => {
          leave();
          this.take(shared);
          resolve(this.releaser(shared));
        },
      };
      const timer = setTimeout(
        () => {
          leave();
          reject(new PveHttpError(500, this.timeoutMessage));
        },
        Math.max(this.clock.scaled(timeoutMs), timeoutMs / FLOCK_MAX_SPEED),
      );
      signal?.addEventListener('abort', onAbort, { once: true });
      this.waiters.push(w);
    });
  }

  private grantable(shared: boolean): boolean {
    return shared ? !this.exclusive : !this.isHeld;
  }

  private take(shared: boolean): void {
    if (shared) this.sharedHolders++;
    else this.exclusive = true;
  }

  private releaser(shared: boolean): () => void {
    let done = false;
    return () => {
      if (done) return;
      done = true;
      if (shared) this.sharedHolders--;
      else this.exclusive = false;
      this.wake();
    };
  }

  /** Grant waiters in order while they fit: one exclusive, or a run of shared ones. */
  private wake(): void {
    while (this.waiters.length && this.grantable(this.waiters[0]!.shared)) {
      this.waiters.shift()!.grant();
    }
  }
}
