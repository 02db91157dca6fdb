/** The two seams of the engine: where resources live (ResourceStore) and what they manage (ExternalClient). */
import type { Managed } from './resource.ts';

export class ConflictError extends Error {
  constructor(message = 'the object has been modified; please apply your changes to the latest version and try again') {
    super(message);
    this.name = 'ConflictError';
  }
}

export type WatchEvent = 'ADDED' | 'MODIFIED' | 'DELETED';

/**
 * Where managed resources live: Kubernetes (src/kube) or local files (src/local).
 * Writes use optimistic concurrency: a stale `resourceVersion` throws ConflictError.
 */
export interface ResourceStore<R extends Managed = Managed> {
  get(key: string): Promise<R | undefined>;
  list(): Promise<R[]>;
  /** Calls back on every change; returns an unsubscribe function. */
  watch(handler: (key: string, event: WatchEvent, obj: R | undefined) => void): () => void;
  /** Write metadata (annotations, finalizers) and spec (late-initialized fields). Returns the stored object. */
  update(r: R): Promise<R>;
  /** Write `status` only (status subresource). */
  updateStatus(r: R): Promise<R>;
  event(r: R, type: 'Normal' | 'Warning', reason: string, message: string): void;
}

export interface ExternalObservation {
  exists: boolean;
  upToDate: boolean;
  /** Spec fields were filled from the external resource (late initialization). */
  lateInitialized?: boolean;
  connectionDetails?: Record<string, string>;
  /** Work is in flight (a Proxmox task): check again after this many ms instead of the poll interval. */
  requeueAfterMs?: number;
}

/**
 * A failure with a reason a user can act on (`BridgeNotFound`, `Locked`...). `retryable: false`
 * errors back off to the cap; `retryable: true` ones (locks, outages) use the normal backoff.
 */
export class ReasonedError extends Error {
  readonly reason: string;
  readonly retryable: boolean;
  /** Back off on the failed-create schedule (about 30 s, 1 m, 2 m, 5 m, 10 m). */
  createFailure = false;
  /**
   * Nothing but a change elsewhere (the spec, the credentials, the cluster) can fix it: after one
   * confirmation at the base delay, retried only at the backoff cap. The cluster-less runtime stops
   * waiting for such a resource once it is confirmed.
   */
  permanent = false;
  /**
   * A create that was sent but whose answer never came: it may exist. The reconciler records
   * neither success nor failure, so the next observe keeps looking for it at the same name.
   */
  outcomeUnknown = false;
  constructor(reason: string, message: string, retryable = false) {
    super(message);
    this.name = 'ReasonedError';
    this.reason = reason;
    this.retryable = retryable;
  }
}

export interface ExternalClient<R extends Managed = Managed> {
  observe(r: R): Promise<ExternalObservation>;
  /**
   * Before create (and before any external name is chosen): check that a create can succeed now.
   * Throw a ReasonedError when it cannot (nothing is created, nothing reserved); return `waitMs`
   * when it must wait (a concurrency slot), which requeues without counting as a failure.
   */
  preflight?(r: R): Promise<{ waitMs?: number; message?: string }>;
  /**
   * Before create: choose the external name (for Proxmox: the VMID) so that it can be persisted,
   * together with `external-create-pending`, before anything is created.
   */
  prepareCreate?(r: R): Promise<{ externalName: string }>;
  create(r: R): Promise<{ connectionDetails?: Record<string, string>; requeueAfterMs?: number }>;
  update(r: R): Promise<{ requeueAfterMs?: number }>;
  /** Returns a requeue delay while deletion is in progress; resolves once the delete was issued. */
  delete(r: R): Promise<{ requeueAfterMs?: number }>;
  /** Called when the resource left the engine (deleted or orphaned): release per-resource caches. */
  disconnect?(): Promise<void>;
}

export interface Connector<R extends Managed = Managed> {
  /**
   * A client for one reconcile (crossplane-runtime connects per reconcile). Every external call it
   * makes must end when `signal` aborts: the reconcile's deadline, SIGTERM, or lost leadership.
   */
  connect(r: R, signal?: AbortSignal): Promise<ExternalClient<R>>;
  /** The resource (uid) left the engine: release whatever the connector holds for it. */
  forget?(uid: string): void;
}

/** Deterministic crash points for crash-safety tests: throw from `at` to stop the reconciler there. */
export interface EngineHooks {
  at?(step: string, key: string): void | Promise<void>;
}

/**
 * The reason a stopping controller aborts in-flight reconciles with (SIGTERM, lost leadership):
 * not a failure of the resource, so nothing is written for it; the next writer reconciles again.
 */
export class ReconcileAborted extends Error {
  constructor(message = 'controller stopped') {
    super(message);
    this.name = 'ReconcileAborted';
  }
}

export class SimulatedCrash extends Error {
  constructor(step: string) {
    super(`simulated crash at ${step}`);
    this.name = 'SimulatedCrash';
  }
}
