/**
 * controller-runtime's controller metrics and client-go's workqueue metrics, with their names,
 * labels, types and buckets (controller-runtime pkg/internal/controller/metrics/metrics.go,
 * pkg/internal/metrics/workqueue.go), for each of the provider's managed reconcilers. A controller
 * is named as crossplane-runtime names one (`managed.ControllerName`: `managed/` and the kind with
 * its group, in lower case), so a dashboard or an alert written for any Crossplane provider reads
 * these unchanged. Gauges are read from the controllers when Prometheus scrapes.
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { ReconcileResult } from '../engine/reconciler.ts';
import type { QueueMetrics } from '../engine/workqueue.ts';

/** What the metrics read of a controller (src/engine/controller.ts Controller). */
export interface InstrumentedController {
  readonly workers: number;
  readonly active: number;
  readonly queue: {
    metrics?: QueueMetrics;
    lengthsByPriority(): Map<number, number>;
    unfinished(): { totalMs: number; longestMs: number };
  };
}

/** crossplane-runtime's name for the managed reconciler of `kind` in API group `group`. */
export function managedControllerName(kind: string, group: string): string {
  return `managed/${kind.toLowerCase()}.${group}`;
}

/** controller-runtime's ReconcileTime buckets, in seconds. */
const RECONCILE_TIME_BUCKETS = [
  0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 1.75,
  2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60,
];
/** client_golang's ExponentialBuckets(10e-9, 10, 12): the workqueue durations. */
const QUEUE_BUCKETS = Array.from({ length: 12 }, (_, i) => 10e-9 * 10 ** i);

/**
 * controller-runtime's `result` label: an error is `error`; a requeue after a delay (a poll, work
 * in flight) `requeue_after`; a plain requeue (a conflict: crossplane-runtime's `Requeue: true`)
 * `requeue`; a reconcile with nothing to come back for `success`.
 */
export function reconcileResultLabel(result: ReconcileResult): 'success' | 'error' | 'requeue' | 'requeue_after' {
  if (result.kind === 'done') return 'success';
  if (result.kind === 'requeueAfter') return 'requeue_after';
  return result.error ? 'error' : 'requeue';
}

export class ControllerRuntimeMetrics {
  private readonly controllers = new Map<string, InstrumentedController>();
  private readonly total: Counter<'controller' | 'result'>;
  private readonly errors: Counter<'controller'>;
  private readonly terminal: Counter<'controller'>;
  private readonly time: Histogram<'controller'>;
  private readonly adds: Counter<'name' | 'controller'>;
  private readonly retries: Counter<'name' | 'controller'>;
  private readonly waited: Histogram<'name' | 'controller'>;
  private readonly worked: Histogram<'name' | 'controller'>;

  constructor(registry: Registry) {
    const registers = [registry];
    const controllers = this.controllers;
    const controller = ['controller'] as const;
    const queue = ['name', 'controller'] as const;
    /** A gauge read from every exported controller at scrape time. */
    const scraped = <L extends string>(
      name: string,
      help: string,
      labelNames: readonly L[],
      read: (name: string, c: InstrumentedController) => Iterable<[Record<L, string>, number]>,
    ) =>
      new Gauge<L>({
        name,
        help,
        labelNames,
        registers,
        collect() {
          this.reset();
          for (const [n, c] of controllers) for (const [labels, v] of read(n, c)) this.set(labels, v);
        },
      });
    this.total = new Counter({
      name: 'controller_runtime_reconcile_total',
      help: 'Total number of reconciliations per controller',
      labelNames: ['controller', 'result'],
      registers,
    });
    this.errors = new Counter({
      name: 'controller_runtime_reconcile_errors_total',
      help: 'Total number of reconciliation errors per controller',
      labelNames: controller,
      registers,
    });
    this.terminal = new Counter({
      name: 'controller_runtime_terminal_reconcile_errors_total',
      help: 'Total number of terminal reconciliation errors per controller',
      labelNames: controller,
      registers,
    });
    this.time = new Histogram({
      name: 'controller_runtime_reconcile_time_seconds',
      help: 'Length of time per reconciliation per controller',
      labelNames: controller,
      buckets: RECONCILE_TIME_BUCKETS,
      registers,
    });
    scraped(
      'controller_runtime_max_concurrent_reconciles',
      'Maximum number of concurrent reconciles per controller',
      controller,
      (n, c) => [[{ controller: n }, c.workers]],
    );
    scraped(
      'controller_runtime_active_workers',
      'Number of currently used workers per controller',
      controller,
      (n, c) => [[{ controller: n }, c.active]],
    );
    scraped(
      'workqueue_depth',
      'Current depth of workqueue by workqueue and priority',
      ['name', 'controller', 'priority'],
      (n, c) =>
        [...c.queue.lengthsByPriority()].map(([priority, depth]) => [
          { name: n, controller: n, priority: String(priority) },
          depth,
        ]),
    );
    scraped(
      'workqueue_unfinished_work_seconds',
      "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.",
      queue,
      (n, c) => [[{ name: n, controller: n }, c.queue.unfinished().totalMs / 1000]],
    );
    scraped(
      'workqueue_longest_running_processor_seconds',
      'How many seconds has the longest running processor for workqueue been running.',
      queue,
      (n, c) => [[{ name: n, controller: n }, c.queue.unfinished().longestMs / 1000]],
    );
    this.adds = new Counter({
      name: 'workqueue_adds_total',
      help: 'Total number of adds handled by workqueue',
      labelNames: queue,
      registers,
    });
    this.retries = new Counter({
      name: 'workqueue_retries_total',
      help: 'Total number of items added to the workqueue with a non-zero delay (rate-limited requeues, explicit RequeueAfter or AddAfter calls)',
      labelNames: queue,
      registers,
    });
    this.waited = new Histogram({
      name: 'workqueue_queue_duration_seconds',
      help: 'How long in seconds an item stays in workqueue before being requested',
      labelNames: queue,
      buckets: QUEUE_BUCKETS,
      registers,
    });
    this.worked = new Histogram({
      name: 'workqueue_work_duration_seconds',
      help: 'How long in seconds processing an item from workqueue takes.',
      labelNames: queue,
      buckets: QUEUE_BUCKETS,
      registers,
    });
  }

  /**
   * Export controller `c` as `name` (replacing a controller of that name: a new term as leader
   * starts new controllers); its queue reports to the workqueue metrics from now on.
   */
  instrument(name: string, c: InstrumentedController): void {
    this.controllers.set(name, c);
    const labels = { name, controller: name };
    c.queue.metrics = {
      added: () => this.adds.inc(labels),
      taken: (ms) => this.waited.observe(labels, ms / 1000),
      finished: (ms) => this.worked.observe(labels, ms / 1000),
      retried: () => this.retries.inc(labels),
    };
  }

  /** Stop exporting controller `name`'s gauges (it stopped: this replica lost the lead). */
  forget(name: string): void {
    this.controllers.delete(name);
  }

  /** One reconcile of controller `name`, its result and how long it took. */
  reconciled(name: string, result: ReconcileResult, ms: number): void {
    const controller = { controller: name };
    const label = reconcileResultLabel(result);
    this.total.inc({ ...controller, result: label });
    if (label === 'error') this.errors.inc(controller);
    if (result.kind === 'rateLimited' && result.permanent) this.terminal.inc(controller);
    this.time.observe(controller, ms / 1000);
  }
}
