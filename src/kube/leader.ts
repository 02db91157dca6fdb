/**
 * Leader election on a coordination.k8s.io/v1 Lease with client-go's semantics: a candidate
 * takes the lease only when the record it observed has not changed for a full lease duration,
 * judged by its own clock from the moment it observed the record (not from `renewTime`, which
 * another machine wrote); the leader renews every retry period and steps down if it cannot renew
 * within the renew deadline. Defaults: lease 15 s, renew deadline 10 s, retry 2 s.
 *
 * Lease requests bypass the client's rate limit: behind a queue of status writes (a start-up of
 * thousands of resources) a renewal would miss its deadline and the leader step down. client-go
 * gets the same by giving leader election its own client, hence its own token bucket.
 */
import { type KubeApi, KubeError } from './api.ts';

export interface LeaderOptions {
  namespace: string;
  name: string;
  identity: string;
  leaseDurationMs?: number;
  renewDeadlineMs?: number;
  retryPeriodMs?: number;
  now?: () => number;
  onStartedLeading: () => void;
  onStoppedLeading: () => void;
  onNewLeader?: (identity: string) => void;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
}

interface Lease {
  apiVersion: 'coordination.k8s.io/v1';
  kind: 'Lease';
  metadata: { name: string; namespace: string; resourceVersion?: string };
  spec: {
    holderIdentity?: string;
    leaseDurationSeconds?: number;
    acquireTime?: string;
    renewTime?: string;
    leaseTransitions?: number;
  };
}

function microTime(ms: number): string {
  return new Date(ms).toISOString().replace('Z', '000Z');
}

export class LeaderElector {
  private readonly api: KubeApi;
  private readonly o: Required<Omit<LeaderOptions, 'onNewLeader' | 'log'>> & LeaderOptions;
  private observedRecord = '';
  private observedAt = 0;
  private lastRenew = 0;
  private leading = false;
  private stopped = false;
  private timer: NodeJS.Timeout | undefined;
  private wake: (() => void) | undefined;
  private loop: Promise<void> | undefined;
  currentLeader = '';

  constructor(api: KubeApi, opts: LeaderOptions) {
    const o = { leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 2000, now: () => Date.now(), ...opts };
    if (!(o.leaseDurationMs > o.renewDeadlineMs && o.renewDeadlineMs > 1.2 * o.retryPeriodMs)) {
      throw new Error('leader election needs leaseDuration > renewDeadline > 1.2 x retryPeriod');
    }
    this.api = api;
    this.o = o;
  }

  get isLeader(): boolean {
    return this.leading;
  }

  private get path(): string {
    return `/apis/coordination.k8s.io/v1/namespaces/${this.o.namespace}/leases`;
  }

  start(): void {
    this.loop ??= (async () => {
      while (!this.stopped) {
        // A leader must know within its renew deadline whether it still holds the lease: a round
        // that hangs (a slow apiserver, a dead connection) is cut off there, not after the request
        // timeout, by which time another replica may have taken the lease over.
        const budget = this.leading ? this.lastRenew + this.o.renewDeadlineMs - this.o.now() : this.o.renewDeadlineMs;
        const ok = await this.tryAcquireOrRenew(AbortSignal.timeout(Math.max(1, budget))).catch((e) => {
          this.o.log?.('lease update failed', { error: e instanceof Error ? e.message : String(e) });
          return false;
        });
        const now = this.o.now();
        if (ok) {
          this.lastRenew = now;
          if (!this.leading) {
            this.leading = true;
            this.o.log?.('became leader', { identity: this.o.identity });
            this.o.onStartedLeading();
          }
        } else if (this.leading && now - this.lastRenew >= this.o.renewDeadlineMs) {
          this.leading = false;
          this.o.log?.('lost leadership', { identity: this.o.identity });
          this.o.onStoppedLeading();
        }
        await new Promise<void>((r) => {
          this.wake = r;
          this.timer = setTimeout(r, this.o.retryPeriodMs * (this.leading ? 1 : 1 + Math.random() * 0.2));
        });
      }
    })();
  }

  /** One round: create, take over an expired lease, or renew ours. */
  async tryAcquireOrRenew(signal?: AbortSignal): Promise<boolean> {
    const now = this.o.now();
    const desiredSpec = (old?: Lease['spec']): Lease['spec'] => ({
      holderIdentity: this.o.identity,
      leaseDurationSeconds: Math.ceil(this.o.leaseDurationMs / 1000),
      acquireTime: old?.holderIdentity === this.o.identity && old.acquireTime ? old.acquireTime : microTime(now),
      renewTime: microTime(now),
      leaseTransitions:
        (old?.leaseTransitions ?? 0) + (old?.holderIdentity && old.holderIdentity !== this.o.identity ? 1 : 0),
    });
    const opts = { rateLimited: false, ...(signal ? { signal } : {}) };
    let lease: Lease;
    try {
      lease = await this.api.request<Lease>('GET', `${this.path}/${this.o.name}`, opts);
    } catch (e) {
      if (!(e instanceof KubeError) || e.status !== 404) throw e;
      const created = await this.api.request<Lease>('POST', this.path, {
        ...opts,
        body: {
          apiVersion: 'coordination.k8s.io/v1',
          kind: 'Lease',
          metadata: { name: this.o.name, namespace: this.o.namespace },
          spec: desiredSpec(),
        },
      });
      this.observe(JSON.stringify(created.spec), now, this.o.identity);
      return true;
    }
    const record = JSON.stringify(lease.spec);
    if (record !== this.observedRecord) this.observe(record, now, lease.spec.holderIdentity ?? '');
    const holder = lease.spec.holderIdentity ?? '';
    const duration = (lease.spec.leaseDurationSeconds ?? Math.ceil(this.o.leaseDurationMs / 1000)) * 1000;
    if (holder && holder !== this.o.identity && this.observedAt + duration > now) return false;
    const updated: Lease = { ...lease, spec: desiredSpec(lease.spec) };
    const stored = await this.api.request<Lease>('PUT', `${this.path}/${this.o.name}`, { ...opts, body: updated });
    this.observe(JSON.stringify(stored.spec), now, this.o.identity);
    return true;
  }

  private observe(record: string, at: number, holder: string): void {
    this.observedRecord = record;
    this.observedAt = at;
    if (holder !== this.currentLeader) {
      this.currentLeader = holder;
      if (holder) this.o.onNewLeader?.(holder);
    }
  }

  /** Stop; a leader releases the lease so that another replica takes over at once. */
  async stop(release = true): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.wake?.();
    await this.loop;
    if (release && this.leading) {
      try {
        const lease = await this.api.request<Lease>('GET', `${this.path}/${this.o.name}`, { rateLimited: false });
        if (lease.spec.holderIdentity === this.o.identity) {
          await this.api.request('PUT', `${this.path}/${this.o.name}`, {
            rateLimited: false,
            body: {
              ...lease,
              spec: { ...lease.spec, holderIdentity: '', leaseDurationSeconds: 1, renewTime: microTime(this.o.now()) },
            },
          });
        }
      } catch {
        // the lease expires by itself
      }
    }
    if (this.leading) {
      this.leading = false;
      this.o.onStoppedLeading();
    }
  }
}
