/**
 * controller-runtime's controller metrics and client-go's workqueue metrics as the provider exports
 * them: names, types, labels and buckets of controller-runtime's
 * pkg/internal/controller/metrics/metrics.go and pkg/internal/metrics/workqueue.go, and what a real
 * work queue on a fake clock makes them say.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { PRIORITY_LOW, WorkQueue } from '../../src/engine/workqueue.ts';
import { managedControllerName, reconcileResultLabel } from '../../src/observability/controller-runtime.ts';
import { Metrics } from '../../src/observability/metrics.ts';
import { FakeClock } from '../helpers/fake-clock.ts';

const NAME = managedControllerName('ProxmoxVM', 'proxmox.sankofa.io');

async function values(m: Metrics, name: string) {
  const metric = m.registry.getSingleMetric(name);
  assert.ok(metric, name);
  return (await metric.get()).values as Array<{ metricName?: string; labels: Record<string, unknown>; value: number }>;
}

describe('controller-runtime metrics', () => {
  it("name a controller as crossplane-runtime's managed.ControllerName does", () => {
    assert.equal(NAME, 'managed/proxmoxvm.proxmox.sankofa.io');
  });

  it("have controller-runtime's names, types and buckets", async () => {
    const m = new Metrics({ defaults: false });
    const byName = new Map((await m.registry.getMetricsAsJSON()).map((x) => [x.name, x.type]));
    const expected: Record<string, string> = {
      controller_runtime_reconcile_total: 'counter',
      controller_runtime_reconcile_errors_total: 'counter',
      controller_runtime_terminal_reconcile_errors_total: 'counter',
      controller_runtime_reconcile_time_seconds: 'histogram',
      controller_runtime_max_concurrent_reconciles: 'gauge',
      controller_runtime_active_workers: 'gauge',
      workqueue_depth: 'gauge',
      workqueue_adds_total: 'counter',
      workqueue_queue_duration_seconds: 'histogram',
      workqueue_work_duration_seconds: 'histogram',
      workqueue_retries_total: 'counter',
      workqueue_unfinished_work_seconds: 'gauge',
      workqueue_longest_running_processor_seconds: 'gauge',
    };
    for (const [name, type] of Object.entries(expected)) assert.equal(byName.get(name), type, name);
    m.controllers.reconciled(NAME, { kind: 'done' }, 7);
    const buckets = (await values(m, 'controller_runtime_reconcile_time_seconds'))
      .filter((v) => v.metricName?.endsWith('_bucket'))
      .map((v) => v.labels.le);
    assert.equal(buckets.length, 41, 'the 40 buckets of ReconcileTime, and +Inf');
    assert.deepEqual(buckets.slice(0, 3), [0.005, 0.01, 0.025]);
  });

  it('label results as controller-runtime does: success, requeue_after, requeue, error (terminal when permanent)', async () => {
    assert.equal(reconcileResultLabel({ kind: 'done' }), 'success');
    assert.equal(reconcileResultLabel({ kind: 'requeueAfter', ms: 60_000 }), 'requeue_after');
    assert.equal(reconcileResultLabel({ kind: 'rateLimited' }), 'requeue', 'a conflict: a plain requeue');
    const m = new Metrics({ defaults: false });
    m.controllers.reconciled(NAME, { kind: 'rateLimited', error: new Error('x') }, 1);
    m.controllers.reconciled(NAME, { kind: 'rateLimited', error: new Error('x'), permanent: true }, 1);
    const total = await values(m, 'controller_runtime_reconcile_total');
    assert.deepEqual(
      total.map((v) => [v.labels.controller, v.labels.result, v.value]),
      [[NAME, 'error', 2]],
    );
    assert.equal((await values(m, 'controller_runtime_reconcile_errors_total'))[0]?.value, 2);
    assert.equal((await values(m, 'controller_runtime_terminal_reconcile_errors_total'))[0]?.value, 1);
  });

  it('read a real work queue: adds, retries, waits, work, depth by priority, unfinished work, workers', async () => {
    const clock = new FakeClock(1_000_000);
    const queue = new WorkQueue({ clock });
    const m = new Metrics({ defaults: false });
    m.controllers.instrument(NAME, { workers: 8, active: 1, queue });
    queue.add('a');
    queue.add('a'); // pending already: no add
    queue.add('poll', PRIORITY_LOW);
    queue.addAfter('later', 5000);
    clock.advance(2000);
    assert.equal(await queue.get(), 'a');
    clock.advance(3000);
    const one = async (name: string, labels: Record<string, unknown> = {}) =>
      (await values(m, name)).filter((v) => Object.entries(labels).every(([k, x]) => v.labels[k] === x));
    assert.deepEqual(
      (await one('workqueue_depth')).map((v) => [v.labels.priority, v.value]).sort(),
      [
        ['-100', 1],
        ['0', 1],
      ],
      'poll waits at -100; later (its delay is over) at 0',
    );
    assert.equal((await one('workqueue_adds_total'))[0]?.value, 3, 'a, poll, later');
    assert.equal((await one('workqueue_retries_total'))[0]?.value, 1, 'later: added after a delay');
    assert.equal((await one('workqueue_unfinished_work_seconds'))[0]?.value, 3);
    assert.equal((await one('workqueue_longest_running_processor_seconds'))[0]?.value, 3);
    queue.done('a');
    const work = await one('workqueue_work_duration_seconds', { le: 10 });
    assert.equal(work.find((v) => v.metricName?.endsWith('_bucket'))?.value, 1, 'a: 3 s of work');
    const waited = await one('workqueue_queue_duration_seconds');
    assert.equal(waited.find((v) => v.metricName?.endsWith('_sum'))?.value, 2, 'a waited 2 s');
    assert.deepEqual(
      (await one('controller_runtime_max_concurrent_reconciles')).map((v) => [v.labels.controller, v.value]),
      [[NAME, 8]],
    );
    assert.equal((await one('controller_runtime_active_workers'))[0]?.value, 1);
    m.controllers.forget(NAME);
    assert.deepEqual(await one('workqueue_depth'), [], 'a controller that stopped is not exported');
  });
});
