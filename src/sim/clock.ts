/**
 * Simulated time. Wall-clock based (`now()` moves with real time), with an offset that tests can
 * advance (ticket expiry after 2 h without waiting 2 h), and a speed factor that divides every
 * simulated duration (task runtimes, the pvestatd interval, the agent's boot time).
 */
export class Clock {
  private offsetMs = 0;
  readonly speed: number;
  constructor(speed = 1) {
    if (!(speed > 0)) throw new Error(`speed must be > 0, got ${speed}`);
    this.speed = speed;
  }
  /** Milliseconds since the epoch, simulated. */
  now(): number {
    return Date.now() + this.offsetMs;
  }
  /** Seconds since the epoch, simulated. */
  epoch(): number {
    return Math.floor(this.now() / 1000);
  }
  advance(ms: number): void {
    this.offsetMs += ms;
  }
  /** Real milliseconds a simulated duration takes. */
  scaled(simMs: number): number {
    return simMs / this.speed;
  }
  /** Wait for a simulated duration. */
  sleep(simMs: number, signal?: AbortSignal): Promise<void> {
    const ms = this.scaled(simMs);
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      const t = setTimeout(() => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      }, ms);
      const onAbort = () => {
        clearTimeout(t);
        reject(signal?.reason);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }
}
