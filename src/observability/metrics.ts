/**
 * Prometheus metrics of the provider (prom-client), one registry per process. The Grafana
 * dashboard and the alerting rules in deploy/monitoring (and the Helm chart's files/) use these
 * names and labels; test/kube/monitoring.kube.ts checks that every name they use is exported.
 *
 * Beside the provider's own (`provider_proxmox_*`), the managed-resource metrics every
 * crossplane-runtime v2 provider exports, with their names, `gvk` label, types and buckets
 * (pkg/statemetrics/mr_state_metrics.go, pkg/reconciler/managed/metrics.go), so that a Crossplane
 * dashboard or alert works unchanged; managed-lifecycle.ts records the histograms. The reconcile
 * and work queue metrics are controller-runtime's (controller-runtime.ts).
 */
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import { ControllerRuntimeMetrics } from './controller-runtime.ts';

/** client_golang's ExponentialBuckets(start, factor, count). */
function exponentialBuckets(start: number, factor: number, count: number): number[] {
  return Array.from({ length: count }, (_, i) => start * factor ** i);
}

/** crossplane-runtime's buckets for readiness and deletion times, in seconds. */
const CROSSPLANE_LIFECYCLE_BUCKETS = [1, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600];
/** crossplane-runtime's ExponentialBuckets(10e-9, 10, 10): 10 ns to 10 s. */
const CROSSPLANE_EXPONENTIAL_BUCKETS = exponentialBuckets(10e-9, 10, 10);

export class Metrics {
  readonly registry = new Registry();
  /** controller-runtime's and client-go's controller and workqueue metrics (controller-runtime.ts). */
  readonly controllers = new ControllerRuntimeMetrics(this.registry);
  readonly pveRequests = new Counter({
    name: 'provider_proxmox_pve_requests_total',
    help: 'Proxmox VE API requests by site, method, path template and outcome class.',
    labelNames: ['site', 'method', 'path', 'class'],
    registers: [this.registry],
  });
  readonly pveSeconds = new Histogram({
    name: 'provider_proxmox_pve_request_duration_seconds',
    help: 'Proxmox VE API request latency by site, method and path template.',
    labelNames: ['site', 'method', 'path'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [this.registry],
  });
  readonly creates = new Counter({
    name: 'provider_proxmox_vm_creates_total',
    help: 'VM creates, by outcome: ok = Proxmox accepted the create; failed = it refused it, or its task failed; retried = its task was refused for a lock (storage lock contention) and the create is sent again.',
    labelNames: ['outcome'],
    registers: [this.registry],
  });
  readonly deletes = new Counter({
    name: 'provider_proxmox_vm_deletes_total',
    help: 'VM deletes, by outcome: ok = Proxmox accepted the delete; failed = a reconcile of a resource being deleted failed.',
    labelNames: ['outcome'],
    registers: [this.registry],
  });
  readonly createAttemptsMax = new Gauge({
    name: 'provider_proxmox_vm_create_attempts_max',
    help: 'The most create attempts one existing ProxmoxVM has had since this replica started leading: outcome=ok counts creates Proxmox accepted (above 1: more than one VM made for one resource), outcome=failed counts failed creates since its last accepted one (a create retried in a loop).',
    labelNames: ['outcome'],
    registers: [this.registry],
  });
  readonly conditionReasons = new Gauge({
    name: 'provider_proxmox_resource_condition_reasons',
    help: 'Managed resources whose Ready or Synced condition is False, by kind, condition and reason (Locked, ReconcileError, Creating...).',
    labelNames: ['kind', 'condition', 'reason'],
    registers: [this.registry],
  });
  readonly orphans = new Gauge({
    name: 'provider_proxmox_orphan_vms',
    help: 'VMs with our ownership marker and no resource, by site, at the last scan.',
    labelNames: ['site'],
    registers: [this.registry],
  });
  readonly byCondition = new Gauge({
    name: 'provider_proxmox_resources',
    help: 'Managed resources by kind and Ready/Synced condition status.',
    labelNames: ['kind', 'condition', 'status'],
    registers: [this.registry],
  });
  readonly leader = new Gauge({
    name: 'provider_proxmox_leader',
    help: '1 while this replica holds the leader lease.',
    registers: [this.registry],
  });
  readonly kubeRequests = new Counter({
    name: 'provider_proxmox_kube_requests_total',
    help: 'Kubernetes API requests by verb and status code.',
    labelNames: ['verb', 'code'],
    registers: [this.registry],
  });
  readonly kubeStatusWrites = new Counter({
    name: 'provider_proxmox_kube_status_writes_total',
    help: 'Status writes by kind and result: skipped = equal to the cached status, not sent; unchanged = sent, and the apiserver kept the object as it was; changed = written.',
    labelNames: ['kind', 'result'],
    registers: [this.registry],
  });

  readonly mrExists = new Gauge({
    name: 'crossplane_managed_resource_exists',
    help: 'The number of managed resources that exist',
    labelNames: ['gvk'],
    registers: [this.registry],
  });
  readonly mrReady = new Gauge({
    name: 'crossplane_managed_resource_ready',
    help: 'The number of managed resources in Ready=True state',
    labelNames: ['gvk'],
    registers: [this.registry],
  });
  readonly mrSynced = new Gauge({
    name: 'crossplane_managed_resource_synced',
    help: 'The number of managed resources in Synced=True state',
    labelNames: ['gvk'],
    registers: [this.registry],
  });
  readonly mrFirstTimeToReconcile = new Histogram({
    name: 'crossplane_managed_resource_first_time_to_reconcile_seconds',
    help: 'The time it took for a managed resource to be detected by the controller',
    labelNames: ['gvk'],
    buckets: CROSSPLANE_EXPONENTIAL_BUCKETS,
    registers: [this.registry],
  });
  readonly mrFirstTimeToReadiness = new Histogram({
    name: 'crossplane_managed_resource_first_time_to_readiness_seconds',
    help: 'The time it took for a managed resource to become ready first time after creation',
    labelNames: ['gvk'],
    buckets: CROSSPLANE_LIFECYCLE_BUCKETS,
    registers: [this.registry],
  });
  readonly mrDeletion = new Histogram({
    name: 'crossplane_managed_resource_deletion_seconds',
    help: 'The time it took for a managed resource to be deleted',
    labelNames: ['gvk'],
    buckets: CROSSPLANE_LIFECYCLE_BUCKETS,
    registers: [this.registry],
  });
  readonly mrDrift = new Histogram({
    name: 'crossplane_managed_resource_drift_seconds',
    help: 'ALPHA: How long since the previous successful reconcile when a resource was found to be out of sync; excludes restart of the provider',
    labelNames: ['gvk'],
    buckets: CROSSPLANE_EXPONENTIAL_BUCKETS,
    registers: [this.registry],
  });

  constructor(opts: { defaults?: boolean } = {}) {
    if (opts.defaults !== false) collectDefaultMetrics({ register: this.registry, prefix: 'provider_proxmox_' });
  }
}
