/**
 * The per-VM `flock` on /var/lock/qemu-server/lock-<vmid>.conf: one holder at a time, waiters in
 * order, each waiter with its own timeout (10 s for config/start, 5 s for create, 1 s for clone).
 */
import type { Clock } from './clock.ts';
import { PveHttpError } from './errors.ts';

export class Flock {
  private held = false;
  private waiters: Array<{ grant: () => void }> = [];
  private readonly file: string;
  private readonly clock: Clock;
  constructor(file: string, clock: Clock) {
    this.file = file;
    this.clock = clock;
  }

  get isHeld(): boolean {
    return this.held;
  }

  /** Acquire within `timeoutMs` of simulated time; rejects `can't lock file ... - got timeout`. */
  acquire(timeoutMs: number): Promise<() => void> {
    if (!this.held) {
      this.held = true;
      return Promise.resolve(this.releaser());
    }
    return new Promise((resolve, reject) => {
      const w = {
        grant: () => {
          clearTimeout(timer);
          resolve(this.releaser());
        },
      };
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((x) => x !== w);
        reject(new PveHttpError(500, `can't lock file '${this.file}' - got timeout`));
      }, this.clock.scaled(timeoutMs));
      this.waiters.push(w);
    });
  }

  private releaser(): () => void {
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const next = this.waiters.shift();
      if (next) next.grant();
      else this.held = false;
    };
  }
}
