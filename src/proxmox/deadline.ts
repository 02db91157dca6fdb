/**
 * A signal that aborts when its parent does or after `ms`, whichever comes first, and that lets go
 * of its timer and of its listener on the parent once the work it bounds is over (`release`).
 * `AbortSignal.timeout` with `AbortSignal.any` keeps the timer, the signal and the parent's listener
 * alive until the timeout fires, however soon the work ended: a controller reconciling 170
 * resources a second with a 60 s bound held about 10,000 of them (issue 17's memory profile).
 * The timeout's reason is a `TimeoutError` DOMException, as AbortSignal.timeout's.
 *
 * Also `abortable`: a wait on shared work that one caller's signal ends without ending the work.
 */
export interface Deadline {
  signal: AbortSignal;
  release(): void;
}

export function deadline(ms: number, parent?: AbortSignal): Deadline {
  const c = new AbortController();
  const timer = setTimeout(
    () => c.abort(new DOMException('The operation was aborted due to timeout', 'TimeoutError')),
    ms,
  );
  timer.unref?.();
  const onAbort = () => c.abort(parent?.reason);
  if (parent?.aborted) onAbort();
  else parent?.addEventListener('abort', onAbort, { once: true });
  return {
    signal: c.signal,
    release: () => {
      clearTimeout(timer);
      parent?.removeEventListener('abort', onAbort);
    },
  };
}

/**
 * A shared read, as one reconcile waits for it: that reconcile stops waiting when its signal
 * aborts, while the read itself goes on for every other resource waiting on it. Its failure is
 * each waiter's to handle; one that nobody waits for any more (every waiter aborted, the client
 * closed under it) is no unhandled rejection.
 */
export function abortable<T>(p: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return p;
  if (signal.aborted) {
    p.catch(() => undefined);
    return Promise.reject(signal.reason);
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}
