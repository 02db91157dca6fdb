/**
 * What a reconcile writes back to its managed resource, for ManagedReconciler (reconciler.ts): the
 * status with the events its condition changes are worth, the metadata, annotations that must land
 * despite a conflicting writer, the Normal event of each external mutation, and the error path,
 * which records a failed step as Synced False and picks the backoff that follows it.
 */
import {
  CANNOT,
  type ConditionView,
  conditionChanged,
  conditionEvent,
  type FailedStep,
  MUTATED,
  mutationMessage,
} from './events.ts';
import type { ReconcileResult, ReconcilerOptions } from './reconciler.ts';
import {
  ANNOTATION_RECONCILE_REQUESTED,
  annotation,
  externalName,
  getCondition,
  keyOf,
  type Managed,
  Reason,
  setAnnotation,
  setCondition,
} from './resource.ts';
import { ConflictError, ReasonedError, ReconcileAborted, type ResourceStore } from './types.ts';
import { CREATE_FAILURE_SCHEDULE_MS } from './workqueue.ts';

/** The reconciler's own options object (defaults applied), so conditions are stamped by the clock it runs on. */
type WriterOptions = Pick<ReconcilerOptions, 'log' | 'createFailureScheduleMs'> & { now: () => number };

export class ResourceWriter<R extends Managed = Managed> {
  private readonly store: ResourceStore<R>;
  /**
   * The reconciler's own map (see ManagedReconciler.createFailures), which it reads and forgets keys
   * of; the error path is where failed creates are counted into it.
   */
  private readonly createFailures: Map<string, { count: number; at: number }>;
  private readonly options: WriterOptions;

  constructor(
    store: ResourceStore<R>,
    createFailures: Map<string, { count: number; at: number }>,
    options: WriterOptions,
  ) {
    this.store = store;
    this.createFailures = createFailures;
    this.options = options;
  }

  get createSchedule(): number[] {
    return this.options.createFailureScheduleMs ?? CREATE_FAILURE_SCHEDULE_MS;
  }

  /**
   * Write status, with an event for each condition that changed as conditionEvent says (`cannot`:
   * the Crossplane reason of a Synced False) and one when a reconcile request is handled. Conflicts
   * requeue.
   */
  async writeStatus(r: R, before: string, cannot?: string): Promise<R> {
    r.status ??= {};
    r.status.observedGeneration = r.metadata.generation;
    const requested = annotation(r, ANNOTATION_RECONCILE_REQUESTED);
    if (requested) r.status.lastHandledReconcileAt = requested;
    const after = JSON.stringify(r.status);
    if (after === before) return r;
    const prev = JSON.parse(before || '{}') as { conditions?: ConditionView[]; lastHandledReconcileAt?: string };
    if (requested && requested !== prev.lastHandledReconcileAt)
      this.store.event(r, 'Normal', 'ReconcileRequestHandled', `Handling reconcile request ${requested}`);
    for (const c of r.status.conditions ?? []) {
      const p = prev.conditions?.find((x) => x.type === c.type);
      if (!conditionChanged(c, p)) continue;
      const e = conditionEvent(c, p, c.type === 'Synced' ? cannot : undefined);
      if (e) this.store.event(r, e.type, e.reason, e.message);
    }
    const stored = await this.store.updateStatus(r);
    r.metadata.resourceVersion = stored.metadata.resourceVersion;
    return r;
  }

  /** crossplane-runtime's Normal event for an external mutation of `r` (and for a create not yet seen). */
  mutated(r: R, what: keyof typeof MUTATED): void {
    this.store.event(r, 'Normal', MUTATED[what].reason, mutationMessage(what, externalName(r)));
  }

  async writeMeta(r: R): Promise<void> {
    const stored = await this.store.update(r);
    r.metadata.resourceVersion = stored.metadata.resourceVersion;
  }

  /**
   * Like writeMeta for `values` (annotation -> value, undefined: removed), but on conflict re-fetch
   * and re-apply them (5 tries), as crossplane-runtime does for create results.
   */
  async writeAnnotationRetry(r: R, key: string, values: Record<string, string | undefined>): Promise<void> {
    for (let i = 0; i < 5; i++) {
      try {
        for (const [k, v] of Object.entries(values)) setAnnotation(r, k, v);
        await this.writeMeta(r);
        return;
      } catch (e) {
        if (!(e instanceof ConflictError) || i === 4) throw e;
        const fresh = await this.store.get(key);
        if (!fresh) throw e;
        // Take the fresh spec too: writing our stale copy back would revert a concurrent spec edit.
        // Keep the generation we acted on, so status.observedGeneration does not claim the newer spec.
        r.metadata = { ...fresh.metadata, generation: r.metadata.generation };
        r.spec = fresh.spec;
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    }
  }

  async fail(r: R, before: string, e: unknown, what: FailedStep, schedule?: number[]): Promise<ReconcileResult> {
    if (e instanceof ConflictError) return { kind: 'rateLimited' };
    // Stopping (SIGTERM, lost leadership): write nothing; this process must not write any more.
    if (e instanceof ReconcileAborted) return { kind: 'done' };
    const err = e instanceof Error ? e : new Error(String(e));
    const reason = err instanceof ReasonedError ? err.reason : Reason.ReconcileError;
    const createFailed = schedule !== undefined || (err instanceof ReasonedError && err.createFailure);
    // A create whose Proxmox task failed is found by observe, but it is the create that failed.
    const cannot = err instanceof ReasonedError && err.createFailure ? CANNOT['create failed'] : CANNOT[what];
    const was = (JSON.parse(before || '{}') as { conditions?: ConditionView[] }).conditions?.find(
      (x) => x.type === 'Synced',
    );
    setCondition(
      r,
      {
        type: 'Synced',
        status: 'False',
        reason,
        message: `${what}: ${err.message}`,
        observedGeneration: r.metadata.generation,
      },
      this.options.now(),
    );
    const synced = getCondition(r, 'Synced')!;
    // Every failed create is an event, as crossplane-runtime records one per attempt (creates back
    // off over minutes; the create-loop runbook counts them). Other failures are an event when
    // they are new, not at each retry of the same error: an outage of a site would otherwise be a
    // write per resource and retry.
    if (createFailed && !conditionChanged(synced, was)) {
      const e = conditionEvent(synced, was, cannot);
      if (e) this.store.event(r, e.type, e.reason, e.message);
    }
    try {
      await this.writeStatus(r, before, cannot);
    } catch (we) {
      if (!(we instanceof ConflictError)) this.options.log?.('warn', 'cannot write status', { error: String(we) });
    }
    if (err instanceof ReasonedError && err.permanent && !err.createFailure)
      return { kind: 'rateLimited', error: err, permanent: true };
    const steps = err instanceof ReasonedError && err.createFailure ? this.createSchedule : schedule;
    const key = keyOf(r);
    if (!steps || (err instanceof ReasonedError && err.retryable)) {
      // A create refused for a reason that passes (a lock held by another: task-end.ts) is retried
      // at the normal backoff, not the failed creates' schedule; its failure is still recorded,
      // so that the next observe does not wait out the creation grace for the VM it did not make.
      if (err instanceof ReasonedError && err.createFailure)
        this.createFailures.set(key, { count: this.createFailures.get(key)?.count ?? 0, at: this.options.now() });
      return { kind: 'rateLimited', error: err };
    }
    // The n-th failed create in a row waits the n-th step of the schedule (see createFailures).
    const count = (this.createFailures.get(key)?.count ?? 0) + 1;
    this.createFailures.set(key, { count, at: this.options.now() });
    return { kind: 'rateLimited', schedule: [steps[Math.min(count, steps.length) - 1]!], error: err };
  }
}
