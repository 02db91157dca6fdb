/**
 * Runs a reconciler over a store: a watch feeds the work queue, N workers reconcile, results
 * become requeues (poll interval, in-flight work) or per-item backoff. Bounded concurrency.
 */

import type { ManagedReconciler, ReconcileResult } from './reconciler.ts';
import { keyOf, type Managed } from './resource.ts';
import { ReconcileAborted, type ResourceStore } from './types.ts';
import { type BackoffOptions, type QueueClock, WorkQueue } from './workqueue.ts';

export interface ControllerOptions {
  /** Concurrent reconciles. Default 4. */
  workers?: number;
  backoff?: Partial<BackoffOptions>;
  clock?: QueueClock;
  random?: () => number;
  /** Called after each reconcile with its result and the key's consecutive failures. */
  onResult?: (key: string, result: ReconcileResult, failures: number) => void;
}

export class Controller<R extends Managed = Managed> {
  readonly queue: WorkQueue;
  private readonly store: ResourceStore<R>;
  private readonly reconciler: ManagedReconciler<R>;
  private readonly workers: number;
  private readonly onResult: ControllerOptions['onResult'];
  private unwatch: (() => void) | undefined;
  private running: Promise<void>[] = [];
  private stopped = false;
  /** Aborted by stop(): in-flight reconciles give up what they wait for before another writer may start. */
  private readonly lifetime = new AbortController();

  constructor(store: ResourceStore<R>, reconciler: ManagedReconciler<R>, opts: ControllerOptions = {}) {
    this.store = store;
    this.reconciler = reconciler;
    this.workers = opts.workers ?? 4;
    this.onResult = opts.onResult;
    this.queue = new WorkQueue({
      ...(opts.backoff ? { backoff: opts.backoff } : {}),
      ...(opts.clock ? { clock: opts.clock } : {}),
      ...(opts.random ? { random: opts.random } : {}),
    });
  }

  async start(): Promise<void> {
    this.unwatch = this.store.watch((key) => this.queue.add(key));
    for (const r of await this.store.list()) this.queue.add(keyOf(r));
    for (let i = 0; i < this.workers; i++) this.running.push(this.worker());
  }

  private async worker(): Promise<void> {
    for (;;) {
      const key = await this.queue.get();
      if (key === undefined) return;
      if (this.stopped) {
        this.queue.done(key);
        return;
      }
      try {
        let result: ReconcileResult;
        try {
          result = await this.reconciler.reconcile(key, this.lifetime.signal);
        } catch (e) {
          // A throw must not kill the worker (that would silently shrink concurrency): back off instead.
          result = { kind: 'rateLimited', error: e instanceof Error ? e : new Error(String(e)) };
        }
        try {
          this.handle(key, result);
        } catch {
          // a failing onResult callback must not kill the worker either; the requeue already happened
        }
      } finally {
        this.queue.done(key);
      }
    }
  }

  private handle(key: string, result: ReconcileResult): void {
    switch (result.kind) {
      case 'done':
        this.queue.forget(key);
        break;
      case 'requeueAfter':
        // Success resets the backoff; progress (work in flight) is not success yet.
        if (!result.progress) this.queue.forget(key);
        this.queue.addAfter(key, result.ms);
        break;
      case 'rateLimited':
        this.queue.addRateLimited(key, result.schedule, result.permanent);
        break;
    }
    this.onResult?.(key, result, this.queue.backoff.failuresOf(key));
  }

  /**
   * Reconcile `key` now, ahead of its requeue: what it waited for happened (its Proxmox task ended,
   * a concurrency slot was taken for it), so that it need not poll for it.
   */
  wake(key: string): void {
    if (!this.stopped) this.queue.add(key);
  }

  /**
   * Stop taking work, abort what in-flight reconciles wait for (Proxmox calls, task polls), and
   * wait for them to return: after this resolves, this controller sends nothing more. A request
   * already on the wire may still be applied by Proxmox; the next writer's observe settles that
   * (an unknown-outcome create is looked for at its persisted VMID).
   */
  async stop(): Promise<void> {
    this.stopped = true;
    this.unwatch?.();
    this.queue.shutdown();
    this.lifetime.abort(new ReconcileAborted());
    await Promise.all(this.running);
  }
}
