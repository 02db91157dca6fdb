/** Exponential backoff with full jitter (AWS style): delay = random(0, min(cap, base * 2^attempt)). */

export interface BackoffOptions {
  /** First delay ceiling (ms). */
  baseMs: number;
  /** Largest delay (ms). */
  capMs: number;
  /** Random source in [0, 1) (injectable for deterministic tests). */
  random?: () => number;
}

export function backoffDelay(attempt: number, o: BackoffOptions): number {
  const ceiling = Math.min(o.capMs, o.baseMs * 2 ** Math.max(0, attempt));
  return Math.floor((o.random ?? Math.random)() * ceiling);
}

/** A sleep that ends early (rejecting) when the signal aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason ?? new Error('aborted'));
      return;
    }
    if (ms <= 0) {
      resolve();
      return;
    }
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal?.reason ?? new Error('aborted'));
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
