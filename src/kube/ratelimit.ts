/**
 * The Kubernetes client's request rate limit: a token bucket as client-go's
 * (`flowcontrol.NewTokenBucketRateLimiter` over golang.org/x/time/rate): `qps` tokens a second,
 * at most `burst` saved up. A request takes a token or queues for one; the queue is served in the
 * order the requests asked. A request whose AbortSignal fires while it waits leaves the queue (the
 * ones behind it move up) and rejects with the signal's reason; nothing was sent.
 *
 * The clock is injected so the bucket is tested without waiting (test/kube/ratelimit.test.ts).
 */

export interface LimiterClock {
  now(): number;
  /** Resolve after `ms`; reject with the signal's reason when it aborts first. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

export const realClock: LimiterClock = {
  now: () => performance.now(),
  sleep: (ms, signal) =>
    new Promise<void>((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      const onAbort = () => {
        clearTimeout(t);
        reject(signal?.reason);
      };
      const t = setTimeout(() => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      }, ms);
      signal?.addEventListener('abort', onAbort, { once: true });
    }),
};

/**
 * client-go's defaults (5 QPS, burst 10) are for kubectl-sized clients. A controller of thousands
 * of objects needs a first status write per object after a start; crossplane-runtime derives its
 * providers' limits from the reconcile rate (`LimitRESTConfig`: QPS = 5 x rate, burst = 10 x rate,
 * pkg/ratelimiter/default.go) with a default of 10 reconciles a second: 50 and 100, taken here.
 */
export const DEFAULT_KUBE_QPS = 50;
export const DEFAULT_KUBE_BURST = 100;

interface Waiter {
  resolve: () => void;
  reject: (e: unknown) => void;
  signal: AbortSignal | undefined;
  onAbort: () => void;
}

export class TokenBucket {
  readonly qps: number;
  readonly burst: number;
  private readonly clock: LimiterClock;
  private tokens: number;
  private at: number;
  private readonly queue: Waiter[] = [];
  /** A timer runs until the queue's head can have a token. */
  private pumping = false;
  /** Requests that had to wait (for metrics and tests). */
  delayed = 0;

  /** `qps` <= 0 means no limit. */
  constructor(qps: number, burst: number, clock: LimiterClock = realClock) {
    if (!Number.isFinite(qps)) throw new Error(`kube QPS must be a number, got ${qps}`);
    if (qps > 0 && !(Number.isInteger(burst) && burst >= 1))
      throw new Error(`kube burst must be a whole number >= 1 when QPS is set, got ${burst}`);
    this.qps = qps;
    this.burst = burst;
    this.clock = clock;
    this.tokens = burst;
    this.at = clock.now();
  }

  get unlimited(): boolean {
    return this.qps <= 0;
  }

  /** Requests waiting for a token now. */
  get waiting(): number {
    return this.queue.length;
  }

  private refill(): void {
    const now = this.clock.now();
    if (now > this.at) {
      this.tokens = Math.min(this.burst, this.tokens + ((now - this.at) * this.qps) / 1000);
      this.at = now;
    }
  }

  /** Wait for a token, behind every request that asked before; rejects if `signal` aborts first. */
  acquire(signal?: AbortSignal): Promise<void> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.unlimited) return Promise.resolve();
    this.refill();
    if (this.queue.length === 0 && this.tokens >= 1) {
      this.tokens -= 1;
      return Promise.resolve();
    }
    this.delayed++;
    return new Promise<void>((resolve, reject) => {
      const w: Waiter = {
        resolve,
        reject,
        signal,
        onAbort: () => {
          const i = this.queue.indexOf(w);
          if (i >= 0) this.queue.splice(i, 1);
          reject(signal?.reason);
        },
      };
      signal?.addEventListener('abort', w.onAbort, { once: true });
      this.queue.push(w);
      this.pump();
    });
  }

  /** Hand out the tokens there are, in queue order; sleep until the next one while anyone waits. */
  private pump(): void {
    if (this.pumping) return;
    this.refill();
    while (this.queue.length > 0 && this.tokens >= 1) {
      this.tokens -= 1;
      const w = this.queue.shift()!;
      w.signal?.removeEventListener('abort', w.onAbort);
      w.resolve();
    }
    if (this.queue.length === 0) return;
    this.pumping = true;
    const ms = Math.max(1, Math.ceil(((1 - this.tokens) * 1000) / this.qps));
    void this.clock.sleep(ms).then(() => {
      this.pumping = false;
      this.pump();
    });
  }
}
