/**
 * Runs a reconciler over a store: a watch feeds the work queue, N workers reconcile, results
 * become requeues (poll interval, in-flight work) or per-item backoff. Bounded concurrency.
 *
 * Priorities (workqueue.ts): a change the watch saw, a wake, work in flight and retries go ahead
 * of the first list, periodic polls and resyncs, as controller-runtime's priority queue puts
 * edge-triggered work ahead of level-triggered work. Polls are spread with jitter (crossplane-
 * runtime's WithPollJitterHook: the interval plus a random duration in [-jitter, +jitter]), so
 * resources observed together do not come back together forever.
 */

import type { ManagedReconciler, ReconcileResult } from './reconciler.ts';
import { keyOf, type Managed } from './resource.ts';
import { ReconcileAborted, type ResourceStore } from './types.ts';
import { type BackoffOptions, PRIORITY_EVENT, PRIORITY_LOW, type QueueClock, WorkQueue } from './workqueue.ts';

export interface ControllerOptions {
  /** Concurrent reconciles. Default 4. */
  workers?: number;
  backoff?: Partial<BackoffOptions>;
  clock?: QueueClock;
  random?: () => number;
  /** Called after each reconcile with its result and the key's consecutive failures. */
  onResult?: (key: string, result: ReconcileResult, failures: number) => void;
  /** A poll's jitter, as a fraction of its interval (default 0; 0.1: 1m polls come back after 54-66 s). */
  pollJitter?: number;
  /**
   * The priority of the first list (default PRIORITY_EVENT: `apply` was asked to do all of it;
   * the Kubernetes controller, which starts over a cluster's whole fleet, says PRIORITY_LOW).
   */
  listPriority?: number;
  /**
   * The delay of a key's next poll after a reconcile that left nothing in flight (the reconciler's
   * poll interval, `ms`), or undefined for none: `apply` does not poll a VM it saw Ready again
   * (its run ends when every VM is; see src/local/runtime.ts). Default: `ms`.
   */
  pollOf?: (key: string, ms: number) => number | undefined;
}

export class Controller<R extends Managed = Managed> {
  readonly queue: WorkQueue;
  private readonly store: ResourceStore<R>;
  private readonly reconciler: ManagedReconciler<R>;
  /** Concurrent reconciles at most (controller-runtime's MaxConcurrentReconciles). */
  readonly workers: number;
  /** Workers reconciling now. */
  active = 0;
  private readonly onResult: ControllerOptions['onResult'];
  private readonly pollJitter: number;
  private readonly listPriority: number;
  private readonly pollOf: ControllerOptions['pollOf'];
  private readonly random: () => number;
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
    this.pollJitter = Math.min(1, Math.max(0, opts.pollJitter ?? 0));
    this.listPriority = opts.listPriority ?? PRIORITY_EVENT;
    this.random = opts.random ?? Math.random;
    this.pollOf = opts.pollOf;
    this.queue = new WorkQueue({
      ...(opts.backoff ? { backoff: opts.backoff } : {}),
      ...(opts.clock ? { clock: opts.clock } : {}),
      ...(opts.random ? { random: opts.random } : {}),
    });
  }

  async start(): Promise<void> {
    this.unwatch = this.store.watch((key) => this.queue.add(key, PRIORITY_EVENT));
    // At PRIORITY_LOW, a change seen meanwhile goes ahead of the first list.
    for (const r of await this.store.list()) this.queue.add(keyOf(r), this.listPriority);
    for (let i = 0; i < this.workers; i++) this.running.push(this.worker());
  }

  /**
   * Reconcile every one of `keys` again, behind any change (the runtime's periodic resync: it
   * bounds how long a resource can go without a reconcile should a requeue ever be lost).
   */
  resync(keys: Iterable<string>): void {
    if (this.stopped) return;
    for (const key of keys) this.queue.add(key, PRIORITY_LOW);
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
        this.active++;
        try {
          result = await this.reconciler.reconcile(key, this.lifetime.signal);
        } catch (e) {
          // A throw must not kill the worker (that would silently shrink concurrency): back off instead.
          result = { kind: 'rateLimited', error: e instanceof Error ? e : new Error(String(e)) };
        } finally {
          this.active--;
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
    // What this reconcile asks for replaces what an earlier one asked for: that one saw an older
    // state. Kept (the queue keeps the earliest time, as client-go's), the fallback requeue of a
    // create's watched task (20 s) fired after the create, resize and start had ended, and the VM,
    // waiting for its guest now, asked the guest agent once more for nothing: a request per VM.
    this.queue.cancelAfter(key);
    switch (result.kind) {
      case 'done':
        this.queue.forget(key);
        break;
      case 'requeueAfter':
        // Success resets the backoff; progress (work in flight) is not success yet.
        if (result.progress) this.queue.addAfter(key, result.ms, PRIORITY_EVENT);
        else {
          // Without work in flight, a requeue is the next poll.
          this.queue.forget(key);
          const ms = this.pollOf ? this.pollOf(key, result.ms) : result.ms;
          if (ms !== undefined) this.queue.addAfter(key, this.jittered(ms), PRIORITY_LOW);
        }
        break;
      case 'rateLimited':
        this.queue.addRateLimited(key, result.schedule, result.permanent, PRIORITY_EVENT);
        break;
    }
    this.onResult?.(key, result, this.queue.backoff.failuresOf(key));
  }

  /** A poll interval plus a random duration in [-jitter, +jitter] of it. */
  private jittered(ms: number): number {
    return Math.round(ms * (1 + this.pollJitter * (2 * this.random() - 1)));
  }

  /**
   * Reconcile `key` now, ahead of its requeue: what it waited for happened (its Proxmox task ended,
   * a concurrency slot was taken for it), so that it need not poll for it.
   */
  wake(key: string): void {
    if (!this.stopped) this.queue.add(key, PRIORITY_EVENT);
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
