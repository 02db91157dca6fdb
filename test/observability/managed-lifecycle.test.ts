/**
 * crossplane-runtime's managed-resource metrics as the provider exports them: the names, `gvk`
 * label, types and buckets of pkg/statemetrics/mr_state_metrics.go and
 * pkg/reconciler/managed/metrics.go (crossplane-runtime v2), and what ManagedLifecycle records
 * on a fixed clock: first reconcile, first readiness, drift and deletion.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  countStates,
  gvkLabel,
  ManagedLifecycle,
  type ManagedView,
} from '../../src/observability/managed-lifecycle.ts';
import { Metrics } from '../../src/observability/metrics.ts';

const GVK = gvkLabel('proxmox.sankofa.io', 'v1alpha1', 'ProxmoxVM');
const T0 = Date.parse('2025-06-01T12:00:00Z');

function vm(uid: string, conditions: Array<[string, string]> = [], extra: Partial<ManagedView['metadata']> = {}) {
  return {
    metadata: { uid, creationTimestamp: new Date(T0).toISOString(), ...extra },
    status: { conditions: conditions.map(([type, status]) => ({ type, status })) },
  };
}

/** count and sum of one histogram's series for GVK. */
async function histogram(m: Metrics, name: string): Promise<{ count: number; sum: number }> {
  const values = await series(m, name);
  const value = (suffix: string) =>
    values.find((v) => v.metricName === `${name}_${suffix}` && v.labels.gvk === GVK)?.value ?? 0;
  return { count: value('count'), sum: value('sum') };
}

/** Every series of metric `name`, with its series name (`_bucket`, `_sum`...). */
async function series(m: Metrics, name: string) {
  const metric = m.registry.getSingleMetric(name);
  assert.ok(metric, name);
  return (await metric.get()).values as Array<{ metricName?: string; labels: Record<string, unknown>; value: number }>;
}

describe('crossplane-runtime managed-resource metrics', () => {
  it('have crossplane-runtime v2 names, types, the gvk label and its buckets', async () => {
    const m = new Metrics({ defaults: false });
    const byName = new Map((await m.registry.getMetricsAsJSON()).map((x) => [x.name, x]));
    const expo = [1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1, 10];
    const lifecycle = [1, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600];
    const expected: Record<string, { type: string; buckets?: number[] }> = {
      crossplane_managed_resource_exists: { type: 'gauge' },
      crossplane_managed_resource_ready: { type: 'gauge' },
      crossplane_managed_resource_synced: { type: 'gauge' },
      crossplane_managed_resource_first_time_to_reconcile_seconds: { type: 'histogram', buckets: expo },
      crossplane_managed_resource_first_time_to_readiness_seconds: { type: 'histogram', buckets: lifecycle },
      crossplane_managed_resource_deletion_seconds: { type: 'histogram', buckets: lifecycle },
      crossplane_managed_resource_drift_seconds: { type: 'histogram', buckets: expo },
    };
    // One observation each, so that the buckets and labels show.
    countStates(m, GVK, [vm('a', [['Ready', 'True']])]);
    for (const h of [m.mrFirstTimeToReconcile, m.mrFirstTimeToReadiness, m.mrDeletion, m.mrDrift])
      h.observe({ gvk: GVK }, 1);
    for (const [name, want] of Object.entries(expected)) {
      assert.equal(byName.get(name)?.type, want.type, name);
      const values = await series(m, name);
      assert.ok(
        values.every((v) => Object.keys(v.labels).every((l) => l === 'gvk' || l === 'le')),
        `${name}: gvk only`,
      );
      if (want.buckets) {
        const les = values
          .filter((v) => v.metricName === `${name}_bucket`)
          .map((v) => v.labels.le)
          .filter((le) => le !== '+Inf')
          .map(Number);
        assert.equal(les.length, want.buckets.length, name);
        for (const [i, le] of les.entries()) {
          const b = want.buckets[i]!;
          assert.ok(Math.abs(le - b) <= b * 1e-9, `${name}: bucket ${le}, crossplane-runtime's ${b}`);
        }
      }
    }
    assert.equal(GVK, 'proxmox.sankofa.io/v1alpha1, Kind=ProxmoxVM', "Go's GroupVersionKind.String()");
  });

  it('state gauges count what exists, is Ready and is Synced', async () => {
    const m = new Metrics({ defaults: false });
    countStates(m, GVK, [
      vm('a', [
        ['Ready', 'True'],
        ['Synced', 'True'],
      ]),
      vm('b', [
        ['Ready', 'False'],
        ['Synced', 'True'],
      ]),
      vm('c'),
    ]);
    const text = await m.registry.metrics();
    assert.match(text, /crossplane_managed_resource_exists\{gvk="proxmox.sankofa.io\/v1alpha1, Kind=ProxmoxVM"\} 3/);
    assert.match(text, /crossplane_managed_resource_ready\{gvk="[^"]+"\} 1/);
    assert.match(text, /crossplane_managed_resource_synced\{gvk="[^"]+"\} 2/);
  });

  it('first reconcile and first readiness: once per resource, only for resources first reconciled here', async () => {
    const clock = { t: T0 + 2000 };
    const m = new Metrics({ defaults: false });
    const l = new ManagedLifecycle(m, () => clock.t);
    l.reconciling(GVK, vm('new'));
    l.reconciling(GVK, vm('new')); // a second read of the same reconcile (a conflict's retry)
    l.reconciling(GVK, vm('old', [['Synced', 'True']])); // reconciled before this process
    assert.deepEqual(await histogram(m, 'crossplane_managed_resource_first_time_to_reconcile_seconds'), {
      count: 1,
      sum: 2,
    });
    clock.t = T0 + 45_000;
    l.reconciled(GVK, vm('new', [['Ready', 'False']]));
    l.reconciled(GVK, vm('old', [['Ready', 'True']]));
    assert.equal((await histogram(m, 'crossplane_managed_resource_first_time_to_readiness_seconds')).count, 0);
    l.reconciled(GVK, vm('new', [['Ready', 'True']]));
    l.reconciled(GVK, vm('new', [['Ready', 'True']]));
    assert.deepEqual(await histogram(m, 'crossplane_managed_resource_first_time_to_readiness_seconds'), {
      count: 1,
      sum: 45,
    });
  });

  it('drift: the time since the last up-to-date observe, when an update corrects it; none without one', async () => {
    const clock = { t: T0 };
    const m = new Metrics({ defaults: false });
    const l = new ManagedLifecycle(m, () => clock.t);
    l.updated(GVK, vm('a')); // never seen up to date by this process (a restart): no sample
    l.unchanged(vm('a'));
    clock.t += 90_000;
    l.updated(GVK, vm('a'));
    clock.t += 10_000;
    l.updated(GVK, vm('a')); // the update just before is the last in-sync point
    assert.deepEqual(await histogram(m, 'crossplane_managed_resource_drift_seconds'), { count: 2, sum: 100 });
  });

  it('deletion: from the deletionTimestamp to the object being gone; forgets the resource', async () => {
    const clock = { t: T0 + 60_000 };
    const m = new Metrics({ defaults: false });
    const l = new ManagedLifecycle(m, () => clock.t);
    l.reconciling(GVK, vm('a'));
    l.unchanged(vm('a'));
    l.deleted(GVK, vm('a', [], { deletionTimestamp: new Date(T0 + 48_000).toISOString() }));
    l.deleted(GVK, vm('b')); // deleted without ever being marked for deletion: nothing to time
    assert.deepEqual(await histogram(m, 'crossplane_managed_resource_deletion_seconds'), { count: 1, sum: 12 });
    l.updated(GVK, vm('a'));
    l.reconciled(GVK, vm('a', [['Ready', 'True']]));
    assert.equal((await histogram(m, 'crossplane_managed_resource_drift_seconds')).count, 0);
    assert.equal((await histogram(m, 'crossplane_managed_resource_first_time_to_readiness_seconds')).count, 0);
  });
});
