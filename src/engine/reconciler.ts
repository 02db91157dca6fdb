/**
 * The managed reconciler: crossplane-runtime's `managed.Reconciler`, step by step (see
 * ../shared/research/crossplane-mr-contract.md), generic over a ResourceStore and a Connector.
 * One call of `reconcile(key)` makes at most one external mutation and says when to come back.
 */
import { deadline } from '../proxmox/deadline.ts';
import {
  ANNOTATION_CREATE_FAILED,
  ANNOTATION_CREATE_PENDING,
  ANNOTATION_CREATE_SUCCEEDED,
  ANNOTATION_EXTERNAL_NAME,
  ANNOTATION_PAUSED,
  ANNOTATION_POLL_INTERVAL,
  addFinalizer,
  annotation,
  createIncomplete,
  externalName,
  getCondition,
  hasFinalizer,
  type Managed,
  parseGoDuration,
  policyAllows,
  policySupported,
  Reason,
  removeFinalizer,
  rfc3339,
  setAnnotation,
  setCondition,
} from './resource.ts';
import {
  ConflictError,
  type Connector,
  type EngineHooks,
  type ExternalClient,
  ReasonedError,
  ReconcileAborted,
  type ResourceStore,
} from './types.ts';
import { MAX_DELAY_MS } from './workqueue.ts';
import { ResourceWriter } from './writeback.ts';

export type ReconcileResult =
  | { kind: 'done' }
  /**
   * Look again after `ms`. `progress`: work is in flight (a create, update or delete was issued, or a
   * task is running): not a success yet, so the key's backoff is kept. A task that fails keeps backing
   * off (start, fail, start, fail...) instead of starting over at the first step each time.
   */
  | { kind: 'requeueAfter'; ms: number; progress?: true }
  /** Back off (per-item exponential; `schedule` overrides the delays, e.g. for failed creates). */
  | { kind: 'rateLimited'; schedule?: number[]; error?: Error; permanent?: boolean };

export interface ReconcilerOptions {
  pollIntervalMs?: number;
  /** After a create succeeded, "not found" within this window is not yet an error. */
  creationGraceMs?: number;
  /** How soon to look again after a create or delete was issued. */
  shortWaitMs?: number;
  now?: () => number;
  hooks?: EngineHooks;
  /** Publishes connection details (Kubernetes: a Secret). */
  publishConnection?: (r: Managed, details: Record<string, string>) => Promise<void>;
  onResult?: (key: string, result: ReconcileResult, ms: number) => void;
  log?: (level: 'info' | 'warn' | 'error' | 'debug', msg: string, fields?: Record<string, unknown>) => void;
  /** Backoff after a failed create (default CREATE_FAILURE_SCHEDULE_MS: about 30 s, 1 m, 2 m, 5 m, 10 m). */
  createFailureScheduleMs?: number[];
  /**
   * Every reconcile ends within this (default 60 s, crossplane-runtime's reconcile timeout): its
   * external calls are aborted then. Long Proxmox work is a task, polled by later reconciles.
   */
  reconcileTimeoutMs?: number;
}

/**
 * How long after a create's success "not found" is taken for a listing that lags rather than a VM
 * gone (crossplane-runtime's creation grace period), unless set in ReconcilerOptions.
 */
export const CREATION_GRACE_MS = 30_000;

export class ManagedReconciler<R extends Managed = Managed> {
  private readonly store: ResourceStore<R>;
  private readonly connector: Connector<R>;
  /**
   * Consecutive failed creates per key, and when the last one failed. Kept here, not in the work
   * queue: a create that fails in its Proxmox task comes back after "progress" requeues (create
   * issued, task polled) that reset the queue's backoff, so the failed-create schedule would
   * never get past its first step.
   */
  private readonly createFailures = new Map<string, { count: number; at: number }>();
  /**
   * Per key, the create (its succeeded mark) whose grace wait was recorded: crossplane-runtime
   * records PendingExternalResource at every requeue of the wait, here it is once per create, as a
   * 10,000-resource rollout would otherwise write an event per resource and poll.
   */
  private readonly pendingRecorded = new Map<string, string>();
  /** Every write back to the resource, and the error path, which shares createFailures with it. */
  private readonly writer: ResourceWriter<R>;
  private readonly o: Required<
    Omit<
      ReconcilerOptions,
      'hooks' | 'publishConnection' | 'onResult' | 'log' | 'createFailureScheduleMs' | 'reconcileTimeoutMs'
    >
  > &
    ReconcilerOptions;

  constructor(store: ResourceStore<R>, connector: Connector<R>, opts: ReconcilerOptions = {}) {
    this.store = store;
    this.connector = connector;
    this.o = {
      pollIntervalMs: 60_000,
      creationGraceMs: CREATION_GRACE_MS,
      shortWaitMs: 2000,
      now: () => Date.now(),
      ...opts,
    };
    this.writer = new ResourceWriter(store, this.createFailures, this.o);
  }

  private async hook(step: string, key: string): Promise<void> {
    await this.o.hooks?.at?.(step, key);
  }

  private pollInterval(r: R): number {
    const a = annotation(r, ANNOTATION_POLL_INTERVAL);
    const ms = a ? parseGoDuration(a) : undefined;
    // Clamped: `1000h` would overflow the timer and turn into a hot loop.
    return ms && ms > 0 ? Math.min(ms, MAX_DELAY_MS) : this.o.pollIntervalMs;
  }

  /** One reconcile of `key`; `signal` (SIGTERM, lost leadership) aborts whatever it still waits for. */
  async reconcile(key: string, signal?: AbortSignal): Promise<ReconcileResult> {
    const started = this.o.now();
    let result: ReconcileResult;
    const bound = deadline(this.o.reconcileTimeoutMs ?? 60_000, signal);
    try {
      if (signal?.aborted) return { kind: 'done' };
      result = await this.reconcileOnce(key, bound.signal);
    } catch (e) {
      // A conflict is a plain requeue (crossplane-runtime's `Requeue: true`): no error condition, but
      // rate-limited, so a resource that keeps conflicting cannot hot-loop or reset its backoff.
      if (e instanceof ConflictError) result = { kind: 'rateLimited' };
      else result = { kind: 'rateLimited', error: e as Error };
    } finally {
      bound.release();
    }
    this.o.onResult?.(key, result, this.o.now() - started);
    return result;
  }

  private async reconcileOnce(key: string, signal: AbortSignal): Promise<ReconcileResult> {
    const found = await this.store.get(key);
    if (!found) {
      this.createFailures.delete(key);
      this.pendingRecorded.delete(key);
      return { kind: 'done' };
    }
    const r = structuredClone(found);
    const before = JSON.stringify(r.status ?? {});
    const now = this.o.now();
    const gen = r.metadata.generation;
    const policies = r.spec.managementPolicies;
    const synced = (status: 'True' | 'False', reason: string, message?: string) =>
      setCondition(
        r,
        { type: 'Synced', status, reason, ...(message ? { message } : {}), observedGeneration: gen },
        now,
      );
    const ready = (status: 'True' | 'False', reason: string, message?: string) =>
      setCondition(r, { type: 'Ready', status, reason, ...(message ? { message } : {}), observedGeneration: gen }, now);

    // 2. Paused.
    if (annotation(r, ANNOTATION_PAUSED) === 'true' || (policies && policies.length === 0)) {
      synced(
        'False',
        Reason.ReconcilePaused,
        'Reconciliation is paused via the pause annotation or empty managementPolicies',
      );
      await this.writer.writeStatus(r, before);
      return { kind: 'done' };
    }
    // 3. Unsupported policies.
    if (policies && !policySupported(policies)) {
      synced('False', Reason.ReconcileError, `unsupported management policy combination: [${policies.join(', ')}]`);
      await this.writer.writeStatus(r, before, 'CannotUseInvalidManagementPolicy');
      return { kind: 'done' };
    }
    const deleting = Boolean(r.metadata.deletionTimestamp);
    const deleteAllowed = policyAllows(policies, 'Delete') && r.spec.deletionPolicy !== 'Orphan';
    // 4. Deleting without permission to delete: orphan the external resource.
    if (deleting && !deleteAllowed) {
      await this.hook('orphan', key);
      this.createFailures.delete(key);
      this.pendingRecorded.delete(key);
      this.connector.forget?.(r.metadata.uid);
      if (hasFinalizer(r)) {
        removeFinalizer(r);
        await this.writer.writeMeta(r);
      }
      return { kind: 'done' };
    }

    // 7. Connect.
    let ext: ExternalClient<R>;
    try {
      ext = await this.connector.connect(r, signal);
    } catch (e) {
      return this.writer.fail(r, before, e, 'connect failed');
    }
    await this.hook('connected', key);

    // 8. Observe.
    let obs: Awaited<ReturnType<ExternalClient<R>['observe']>>;
    const nameBefore = externalName(r);
    const annotationsBefore = { ...r.metadata.annotations };
    try {
      obs = await ext.observe(r);
    } catch (e) {
      return this.writer.fail(r, before, e, 'observe failed');
    }
    await this.hook('observed', key);
    // Observe found the external resource under another name (adopted by its marker), or gave the
    // name up (the VM at it proved gone): record it before anything else, as crossplane-runtime
    // does when Observe changes the external name. A name given up and not written came back with
    // the next read of the object whenever the create that followed did not get as far as its
    // pending mark (a failed check, a wait for a slot): the next observe took the old name for its
    // own again, and another resource's VM made there meanwhile for this one's (FINDINGS.md F38).
    const nameAfter = externalName(r);
    // With every other annotation observe set beside it (the site it is on: F28), also after a
    // conflict; and those alone when the name stayed (a VM that moved to another site keeping its
    // VMID: left unwritten, the site recorded with the name was the old one, fault search F76).
    const changed = annotationChanges(annotationsBefore, r.metadata.annotations);
    if (nameAfter !== nameBefore || Object.keys(changed).length > 0) {
      await this.writer.writeAnnotationRetry(r, key, changed);
      if (nameAfter !== nameBefore && nameAfter !== undefined)
        this.store.event(r, 'Normal', 'AdoptedExternalResource', `external name is now ${nameAfter}`);
    }

    // Without prepareCreate: a create whose result was lost, but the resource exists (found by its
    // marker): the result is known now. Record it, so the create guard below cannot wedge this resource
    // later (e.g. once we deleted it). Clients with prepareCreate keep the annotations as they are: the
    // Proxmox client reads createIncomplete() to recognise its own half-created VM.
    if (obs.exists) this.pendingRecorded.delete(key);
    if (obs.exists && !ext.prepareCreate && createIncomplete(r)) {
      setAnnotation(r, ANNOTATION_CREATE_SUCCEEDED, rfc3339(now));
      await this.writer.writeMeta(r);
    }

    // Creation grace period: a resource created moments ago may not be visible yet (Proxmox's
    // /cluster/resources lags). This comes before deletion, as in crossplane-runtime: otherwise a
    // resource deleted right after its create would lose its finalizer and leak the VM.
    if (!obs.exists) {
      const succeeded = annotation(r, ANNOTATION_CREATE_SUCCEEDED);
      // Once we saw the resource and issued its delete (Ready: Deleting), "not found" is the delete's
      // result, not a lagging listing: waiting out the grace period would only delay the finalizer.
      const deleteIssued = deleting && getCondition(r, 'Ready')?.reason === Reason.Deleting;
      // A create known to have failed since it was issued (its task failed) is not lagging: no grace.
      const failedSince = (this.createFailures.get(key)?.at ?? 0) >= Date.parse(succeeded ?? '');
      if (
        succeeded &&
        now - Date.parse(succeeded) < this.o.creationGraceMs &&
        !createIsNewer(r) &&
        !deleteIssued &&
        !failedSince
      ) {
        if (this.pendingRecorded.get(key) !== succeeded) {
          this.pendingRecorded.set(key, succeeded);
          this.writer.mutated(r, 'pending');
        }
        return { kind: 'requeueAfter', ms: this.o.shortWaitMs, progress: true };
      }
      // 6. Create guard (crossplane's ExternalCreateIncomplete). A create may have happened without its
      // result being recorded. With the name chosen before create (prepareCreate) creating again is safe:
      // same name, and "already exists" is settled by the marker. Without it, observe's marker lookup
      // found nothing, but a lagging listing cannot prove absence: stop and ask a human rather than
      // risk a second object (or, when deleting, dropping the finalizer of an object that exists).
      if (!ext.prepareCreate && createIncomplete(r)) {
        ready('False', Reason.Creating, 'The external resource is being created');
        synced(
          'False',
          Reason.ReconcileError,
          `cannot determine creation result - remove the ${ANNOTATION_CREATE_PENDING} annotation if it is safe to proceed`,
        );
        await this.writer.writeStatus(r, before, 'CannotInitializeManagedResource');
        return { kind: 'done' };
      }
    }

    // 9. Deletion.
    if (deleting) {
      // Other finalizers: other controllers still depend on the external resource; wait for them.
      if ((r.metadata.finalizers?.length ?? 0) > 1) return { kind: 'rateLimited' };
      if (obs.exists) {
        let res: Awaited<ReturnType<ExternalClient<R>['delete']>>;
        try {
          res = await ext.delete(r);
        } catch (e) {
          ready('False', Reason.Deleting, 'Deleting the external resource');
          return this.writer.fail(r, before, e, 'delete failed');
        }
        // (outside the try: a crash here must not be recorded as a failed delete)
        await this.hook('delete-issued', key);
        this.writer.mutated(r, 'deleted');
        ready('False', Reason.Deleting, 'Deleting the external resource');
        synced('True', Reason.ReconcileSuccess);
        await this.writer.writeStatus(r, before);
        return { kind: 'requeueAfter', ms: res.requeueAfterMs ?? this.o.shortWaitMs, progress: true };
      }
      await this.hook('external-gone', key);
      this.createFailures.delete(key);
      this.pendingRecorded.delete(key);
      await ext.disconnect?.();
      this.connector.forget?.(r.metadata.uid);
      if (hasFinalizer(r)) {
        removeFinalizer(r);
        await this.writer.writeMeta(r);
      }
      return { kind: 'done' };
    }

    if (!obs.exists) {
      if (!policyAllows(policies, 'Create')) {
        ready('False', Reason.Unavailable, 'external resource does not exist');
        synced('False', Reason.ReconcileError, 'observe failed: external resource does not exist');
        await this.writer.writeStatus(r, before, 'CannotObserveExternalResource');
        return { kind: 'requeueAfter', ms: this.pollInterval(r) };
      }
    }

    // 10. Connection details, finalizer.
    if (obs.exists && obs.connectionDetails && this.o.publishConnection && r.spec.writeConnectionSecretToRef) {
      try {
        await this.o.publishConnection(r, obs.connectionDetails);
      } catch (e) {
        return this.writer.fail(r, before, e, 'cannot publish connection details');
      }
    }
    if (!hasFinalizer(r)) {
      addFinalizer(r);
      await this.writer.writeMeta(r);
      await this.hook('finalizer-added', key);
    }

    // 11. Create.
    if (!obs.exists) {
      if (ext.preflight) {
        let pf: { waitMs?: number; message?: string };
        try {
          pf = await ext.preflight(r);
        } catch (e) {
          ready('False', Reason.Unavailable, 'The external resource cannot be created yet');
          return this.writer.fail(r, before, e, 'cannot create');
        }
        await this.hook('preflight-passed', key);
        if (pf.waitMs !== undefined) {
          ready('False', 'Waiting', pf.message ?? 'waiting before creating the external resource');
          synced('True', Reason.ReconcileSuccess);
          await this.writer.writeStatus(r, before);
          return { kind: 'requeueAfter', ms: pf.waitMs, progress: true };
        }
      }
      if (ext.prepareCreate && !externalName(r)) {
        let prepared: { externalName: string };
        try {
          prepared = await ext.prepareCreate(r);
        } catch (e) {
          return this.writer.fail(r, before, e, 'create failed', this.writer.createSchedule);
        }
        setAnnotation(r, ANNOTATION_EXTERNAL_NAME, prepared.externalName);
      }
      // The external name and the pending mark land in one write, before anything is created.
      setAnnotation(r, ANNOTATION_CREATE_PENDING, rfc3339(this.o.now()));
      await this.writer.writeMeta(r);
      await this.hook('create-pending', key);
      let created: Awaited<ReturnType<ExternalClient<R>['create']>>;
      try {
        created = await ext.create(r);
      } catch (e) {
        await this.hook('create-failed', key);
        // Stopping while the create was sent: record nothing (neither failed nor unknown); the
        // pending mark stays the newest, which is what the next writer must see.
        if (e instanceof ReconcileAborted) return { kind: 'done' };
        if (e instanceof ReasonedError && e.outcomeUnknown) {
          // Sent, no answer: neither succeeded nor failed. The pending mark stays the newest, so the
          // next observe keeps looking for it at the same external name before anything is sent again.
          ready('False', Reason.Creating, 'The external resource is being created');
          return this.writer.fail(r, before, e, 'create outcome unknown');
        }
        await this.writer.writeAnnotationRetry(r, key, { [ANNOTATION_CREATE_FAILED]: rfc3339(this.o.now()) });
        ready('False', Reason.Creating, 'The external resource is being created');
        return this.writer.fail(r, before, e, 'create failed', this.writer.createSchedule);
      }
      await this.hook('create-issued', key);
      await this.writer.writeAnnotationRetry(r, key, { [ANNOTATION_CREATE_SUCCEEDED]: rfc3339(this.o.now()) });
      await this.hook('create-succeeded', key);
      this.writer.mutated(r, 'created');
      if (created.connectionDetails && this.o.publishConnection && r.spec.writeConnectionSecretToRef) {
        await this.o.publishConnection(r, created.connectionDetails);
      }
      ready('False', Reason.Creating, 'The external resource is being created');
      synced('True', Reason.ReconcileSuccess);
      await this.writer.writeStatus(r, before);
      return { kind: 'requeueAfter', ms: created.requeueAfterMs ?? this.o.shortWaitMs, progress: true };
    }

    // 12. Late initialization.
    if (obs.lateInitialized && policyAllows(policies, 'LateInitialize')) {
      await this.writer.writeMeta(r);
    }

    // 13. Up to date, or update.
    if (obs.upToDate || !policyAllows(policies, 'Update')) {
      if (obs.requeueAfterMs === undefined) this.createFailures.delete(key);
      synced('True', Reason.ReconcileSuccess);
      await this.writer.writeStatus(r, before);
      return obs.requeueAfterMs === undefined
        ? { kind: 'requeueAfter', ms: this.pollInterval(r) }
        : { kind: 'requeueAfter', ms: obs.requeueAfterMs, progress: true };
    }
    let res: Awaited<ReturnType<ExternalClient<R>['update']>>;
    try {
      res = await ext.update(r);
    } catch (e) {
      return this.writer.fail(r, before, e, 'update failed');
    }
    await this.hook('update-issued', key);
    this.writer.mutated(r, 'updated');
    synced('True', Reason.ReconcileSuccess);
    await this.writer.writeStatus(r, before);
    return {
      kind: 'requeueAfter',
      ms: res.requeueAfterMs ?? obs.requeueAfterMs ?? this.o.shortWaitMs,
      progress: true,
    };
  }
}

function createIsNewer(r: Managed): boolean {
  const p = Date.parse(annotation(r, ANNOTATION_CREATE_PENDING) ?? '') || 0;
  const s = Date.parse(annotation(r, ANNOTATION_CREATE_SUCCEEDED) ?? '') || 0;
  return p > s;
}

/** The annotations that differ between two sets (undefined: removed). */
function annotationChanges(
  before: Record<string, string>,
  after: Record<string, string> | undefined,
): Record<string, string | undefined> {
  const out: Record<string, string | undefined> = {};
  for (const [k, v] of Object.entries(after ?? {})) if (before[k] !== v) out[k] = v;
  for (const k of Object.keys(before)) if (!after || !(k in after)) out[k] = undefined;
  return out;
}
