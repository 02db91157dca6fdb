/**
 * A provider "process" for the fault search: a VmConnector and a ManagedReconciler wired like
 * src/local/runtime.ts, over a view of the shared store that stops writing once the process is
 * dead, with EngineHooks through which a crash (or another actor) strikes at a named step. And
 * the run's clock, which every process, the store and the simulator share.
 */
import type { LoadedProviderConfig } from '../../src/api/provider-config-load.ts';
import type { ProxmoxVM } from '../../src/api/proxmoxvm.ts';
import { ManagedReconciler, type ReconcileResult } from '../../src/engine/reconciler.ts';
import { type ResourceStore, SimulatedCrash, type WatchEvent } from '../../src/engine/types.ts';
import { ItemBackoff } from '../../src/engine/workqueue.ts';
import { FileConfigSource } from '../../src/local/config-source.ts';
import type { MemoryStore } from '../../src/local/memory-store.ts';
import { VmConnector, vmidHoldersOf } from '../../src/vm/connector.ts';

/**
 * The run's clock: `Date.now()` of the whole process moves on before every reconcile by the
 * delay the work queue would have waited (the requeue or backoff the previous result asked for,
 * at least a second). So the engine's waits (creation grace, the wait for a create whose answer
 * was lost, the 10 s bulk-list cache, failed-create backoff) elapse as they would in production,
 * identically in every replay, and Kubernetes' one-second timestamps order the create-pending /
 * succeeded / failed annotations as they would. Moving `Date.now` itself keeps every reader
 * (reconciler, VM client, store, simulator) on one time; timers (setTimeout) stay real, so the
 * simulator's scaled task durations are unchanged.
 */
/**
 * The real clock, taken when this module loads: a world that never closed (a schedule abandoned
 * by the search's timeout) must not leave its offset in the next world's clock.
 */
const REAL_NOW = Date.now;

export class EngineClock {
  private offset = 0;
  private readonly realNow = REAL_NOW;
  private installed: (() => number) | undefined;
  install(): void {
    const real = this.realNow;
    this.installed = () => real() + this.offset;
    Date.now = this.installed;
  }
  /**
   * Back to the real clock, unless another world's clock was installed since: a schedule that
   * fast-check gave up on (its time budget or its timeout) still runs, and when it closed it put
   * the real clock back under the next world's schedule. That world's clock then stood still
   * whatever it ticked, and went back by its offset at once: a guest agent due a few seconds
   * after a boot was never due in its 250 settle rounds (the open "guest agent waited for for
   * good", met only in a search's first schedules, and never by a replay).
   */
  uninstall(): void {
    if (Date.now === this.installed) Date.now = this.realNow;
    this.installed = undefined;
  }
  tick(ms = 1000): void {
    this.offset += ms;
  }
  get elapsedMs(): number {
    return this.offset;
  }
}

/** A crash, or another actor, armed at the k-th time a reconcile reaches a named step (EngineHooks). */
export interface Interrupt {
  /** At this named step (EngineHooks), or at the nth step this reconcile reaches, whichever it is. */
  at: { step: string } | { nth: number };
  /** Runs inside the hook, while the reconcile waits at that step. Throw SimulatedCrash to crash. */
  act: (step: string) => Promise<void>;
}

/**
 * A provider process's view of the shared store: once the process is dead every write fails, so
 * that the reconciler's error path (which writes status) cannot act for a process that is gone.
 */
/** `src/local/runtime.ts` and `src/kube/controller.ts`: min(10 s, max(100 ms, poll interval / 2)). */
export const SITE_TTL_MS = 10_000;

export class ProcessStore implements ResourceStore<ProxmoxVM> {
  dead = false;
  private readonly s: MemoryStore<ProxmoxVM>;
  constructor(s: MemoryStore<ProxmoxVM>) {
    this.s = s;
  }
  private alive(): void {
    if (this.dead) throw new Error('the process is dead');
  }
  get(key: string): Promise<ProxmoxVM | undefined> {
    this.alive();
    return this.s.get(key);
  }
  list(): Promise<ProxmoxVM[]> {
    this.alive();
    return this.s.list();
  }
  watch(h: (key: string, event: WatchEvent, obj: ProxmoxVM | undefined) => void): () => void {
    return this.s.watch(h);
  }
  update(r: ProxmoxVM): Promise<ProxmoxVM> {
    this.alive();
    return this.s.update(r);
  }
  updateStatus(r: ProxmoxVM): Promise<ProxmoxVM> {
    this.alive();
    return this.s.updateStatus(r);
  }
  event(r: ProxmoxVM, type: 'Normal' | 'Warning', reason: string, message: string): void {
    if (!this.dead) this.s.event(r, type, reason, message);
  }
}

/** One provider process: everything in it is in memory and dies with it. */
export class Process {
  readonly name: string;
  readonly store: ProcessStore;
  readonly connector: VmConnector;
  readonly rec: ManagedReconciler<ProxmoxVM>;
  interrupt: (Interrupt & { seen: number; fired: boolean }) | undefined;

  /**
   * `ownViewFrom`: from how many list entries the process's resources read their own VM after a
   * mutation (cluster-list.ts ownView); the search's sites are small, so 0 is how that path is searched.
   */
  constructor(name: string, shared: MemoryStore<ProxmoxVM>, config: LoadedProviderConfig, ownViewFrom?: number) {
    this.name = name;
    this.store = new ProcessStore(shared);
    const hooks = {
      at: async (step: string) => {
        const i = this.interrupt;
        if (!i || i.fired) return;
        i.seen++;
        if ('step' in i.at ? step !== i.at.step : i.seen !== i.at.nth) return;
        i.fired = true;
        try {
          await i.act(step);
        } catch (e) {
          if (e instanceof SimulatedCrash) this.store.dead = true;
          throw e;
        }
      },
    };
    const onlySite = config.config.spec.sites.length === 1 ? config.config.spec.sites[0]!.name : undefined;
    // Production settings throughout: every wait is measured on the run's clock (EngineClock).
    this.connector = new VmConnector(new FileConfigSource(config), {
      hooks,
      // The bulk `/cluster/resources` cache as both runtimes configure it (10 s with the default
      // poll interval). Its age is measured on the run's clock, so a stale list is seen at the
      // same reconciles in every replay; and a stale list is what real PVE serves (pvestatd).
      siteTtlMs: SITE_TTL_MS,
      ...(ownViewFrom !== undefined ? { ownViewFrom } : {}),
      vmidHolders: (site) => vmidHoldersOf(shared.listSync(), site, onlySite),
    });
    this.rec = new ManagedReconciler<ProxmoxVM>(this.store, this.connector, { hooks });
  }

  /** The work queue's backoff (the Controller's, without jitter): it dies with the process too. */
  private readonly backoff = new ItemBackoff({ jitter: 0 });
  private readonly due = new Map<string, number>();

  /** How long the work queue would wait before reconciling `key` again (1 s the first time). */
  delayFor(key: string): number {
    return this.due.get(key) ?? 1000;
  }

  /** What Controller.handle does with a result: the delay until the next reconcile of `key`. */
  record(key: string, result: ReconcileResult): void {
    let ms: number;
    switch (result.kind) {
      case 'done':
        this.backoff.forget(key);
        ms = 1000;
        break;
      case 'requeueAfter':
        if (!result.progress) this.backoff.forget(key);
        ms = result.ms;
        break;
      case 'rateLimited':
        ms = this.backoff.when(key, result.schedule);
        break;
    }
    this.due.set(key, ms);
  }

  get dead(): boolean {
    return this.store.dead;
  }

  async kill(): Promise<void> {
    this.store.dead = true;
    await this.connector.close();
  }
}
