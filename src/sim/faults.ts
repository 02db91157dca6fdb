/**
 * Fault injection, deterministic: a fault matches by method/path/parameter and fires on the Nth
 * matching request (1-based) for `count` requests (-1: forever). Served at `/_sim/faults` on each
 * cluster's port (root@pam only) and as `SimCluster.faults` in-process. See docs/simulator.md.
 *
 * Besides refusals (request, task fail, lock, offline, full, unavailable) there are the failures
 * that leave the outcome unknown to the client, which a zero-duplicate engine has to survive:
 * a reply that never arrives after the request was applied (`reply-lost`), a request applied
 * only after the client gave up (`applied-late`), and a worker that vanishes mid-task, leaving
 * its intermediate state behind (task action `die`).
 */
import type { ActiveFault, FaultSpec, LateOutcome, RequestMatch, TaskFault } from './fault-spec.ts';
import type { ClusterState } from './state.ts';

/** How long (simulated ms) a lock fault waits for a VM's flock held by a running worker. */
const LOCK_FAULT_WAIT_MS = 24 * 3600 * 1000;

export class FaultError extends Error {}

/**
 * The worker a `lock` fault's config lock stands for: in PVE only a running worker holds such a
 * lock (qemu-server `API2/Qemu.pm` forks each with the VMID as its task id; vzdump likewise for
 * one VM), so the fault runs one, as root@pam, until it is removed. A lock with no task is what a
 * worker that died leaves (task action `die`), never a live operation. `create` and `clone` are
 * placeholders' locks, made by the create and clone routes themselves. A backup's worker is a job
 * of several VMs, whose task has no id (pve-manager API2/VZDump.pm sets it for one VM only).
 */
const HOLDER_TASK: Record<string, string> = {
  backup: 'vzdump',
  migrate: 'qmigrate',
  rollback: 'qmrollback',
  snapshot: 'qmsnapshot',
  'snapshot-delete': 'qmdelsnapshot',
  suspending: 'qmsuspend',
};

function templateToRegex(t: string): RegExp {
  if (t.startsWith('re:')) return new RegExp(t.slice(3));
  const esc = t.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\\?\{[^}]+\\?\}/g, '[^/]+');
  return new RegExp(`^${esc}$`);
}

export class Faults {
  private readonly c: ClusterState;
  private seq = 0;
  readonly active = new Map<number, ActiveFault>();
  readonly counters = new Map<string, number>();
  unavailableUntil = 0;
  unavailableMode: 'reset' | '503' = 'reset';
  /** Told when a node's `ssh-refused` state changes (the SSH listeners close or reopen). */
  onSshRefused: ((node: string) => void) | undefined;
  /** Told when a node crashes (`node-crash` added) and when it boots again (the last one removed). */
  onNodeCrash: ((node: string) => void) | undefined;
  onNodeBoot: ((node: string) => void) | undefined;
  /** Starts the worker a `lock` fault stands for, running until `until` (set by the cluster: see HOLDER_TASK). */
  startHolder: ((node: string, type: string, id: string, until: Promise<void>) => void) | undefined;
  private closing = false;
  private endShutdown: () => void = () => {};
  private readonly shutdownSignal: Promise<void>;

  constructor(c: ClusterState) {
    this.c = c;
    this.shutdownSignal = new Promise((resolve) => {
      this.endShutdown = resolve;
    });
  }

  add(spec: FaultSpec): number {
    this.check(spec);
    const id = ++this.seq;
    let release: () => void = () => {};
    const released = new Promise<void>((r) => {
      release = r;
    });
    const f: ActiveFault = { id, spec, seen: 0, fired: 0, release, released };
    if (
      (spec.kind === 'request' ||
        spec.kind === 'latency' ||
        spec.kind === 'reply-lost' ||
        spec.kind === 'applied-late') &&
      spec.path
    )
      f.pathRe = templateToRegex(spec.path);
    this.active.set(id, f);
    switch (spec.kind) {
      case 'lock': {
        const vm = this.c.vms.get(spec.vmid)!;
        if (spec.lock) vm.config.lock = spec.lock;
        const holder = spec.lock ? HOLDER_TASK[spec.lock] : undefined;
        // A backup job of several VMs (the nightly `vzdump --all`) has no task id.
        if (holder) this.startHolder?.(vm.node, holder, spec.lock === 'backup' ? '' : String(spec.vmid), released);
        if (spec.flock !== false) {
          // Held from now on, or as soon as the current holder (a running worker) lets go; until removed.
          vm.flock.acquire(LOCK_FAULT_WAIT_MS).then(
            (unlock) => void released.then(unlock),
            () => {},
          );
        }
        break;
      }
      case 'node-offline':
        this.c.nodes.get(spec.node)!.online = false;
        break;
      case 'node-crash': {
        const n = this.c.nodes.get(spec.node)!;
        n.online = false;
        if (!n.crashed) {
          n.crashed = true;
          n.crashes = (n.crashes ?? 0) + 1;
          for (const f of this.active.values()) {
            if (f.spec.kind !== 'lock' || this.c.vms.get(f.spec.vmid)?.node !== spec.node) continue;
            f.holderDied = true;
            f.release?.();
          }
          this.onNodeCrash?.(spec.node);
        }
        break;
      }
      case 'stats-stalled':
        this.c.nodes.get(spec.node)!.statsStalled = true;
        break;
      case 'storage-full':
        this.c.storage(spec.node, spec.storage)!.forcedFull = true;
        break;
      case 'unavailable':
        // `ms` is simulated time, like every other duration: scaled by the speed factor.
        this.unavailableUntil = this.c.clock.now() + this.c.clock.scaled(spec.ms);
        this.unavailableMode = spec.mode ?? 'reset';
        break;
      case 'ssh-refused':
        this.onSshRefused?.(spec.node);
        break;
    }
    return id;
  }

  private check(spec: FaultSpec): void {
    const bad = (m: string): never => {
      throw new FaultError(m);
    };
    // A bad `re:` pattern is refused here rather than failing every later request.
    const checkPath = (path: string): void => {
      try {
        templateToRegex(path);
      } catch (e) {
        bad(`invalid path: ${e instanceof Error ? e.message : String(e)}`);
      }
    };
    switch (spec.kind) {
      case 'request':
        if (typeof spec.path !== 'string' || !spec.path) bad('request fault needs a path');
        if (!(spec.status >= 400 && spec.status <= 599)) bad('request fault needs a status between 400 and 599');
        if (typeof spec.message !== 'string') bad('request fault needs a message');
        checkPath(spec.path);
        break;
      case 'reply-lost':
      case 'applied-late':
        if (typeof spec.path !== 'string' || !spec.path) bad(`${spec.kind} fault needs a path`);
        checkPath(spec.path);
        if (spec.kind === 'applied-late' && !(typeof spec.delayMs === 'number' && spec.delayMs >= 0))
          bad('applied-late fault needs delayMs >= 0');
        break;
      case 'task':
        if (spec.action !== 'fail' && spec.action !== 'stall' && spec.action !== 'die')
          bad("task fault action must be 'fail', 'stall' or 'die'");
        if (spec.at !== undefined && spec.at !== 'start' && spec.at !== 'end')
          bad("task fault at must be 'start' or 'end'");
        if (spec.step !== undefined) {
          if (!(Number.isInteger(spec.step) && spec.step >= 1)) bad('task fault step must be an integer >= 1');
          if (spec.action === 'fail') bad("task fault step applies to 'stall' and 'die' only");
        }
        break;
      case 'latency':
        if (!(spec.ms >= 0)) bad('latency fault needs ms >= 0');
        if (spec.path) checkPath(spec.path);
        break;
      case 'lock': {
        const vm = this.c.vms.get(spec.vmid);
        if (!vm) bad(`lock fault: VM ${spec.vmid} does not exist`);
        // Its worker would run on a node that is down (a lock no worker holds is task action `die`'s).
        else if (spec.lock && HOLDER_TASK[spec.lock] && this.c.nodes.get(vm.node)?.crashed)
          bad(
            `lock fault: VM ${spec.vmid}'s node '${vm.node}' is down: no ${HOLDER_TASK[spec.lock]} worker can run there`,
          );
        break;
      }
      case 'node-offline':
      case 'node-crash':
      case 'stats-stalled':
        if (!this.c.nodes.has(spec.node)) bad(`${spec.kind} fault: no node '${spec.node}'`);
        break;
      case 'storage-full':
        if (!this.c.storage(spec.node, spec.storage))
          bad(`storage-full fault: no storage '${spec.storage}' on '${spec.node}'`);
        break;
      case 'unavailable':
        if (!(spec.ms > 0)) bad('unavailable fault needs ms > 0');
        break;
      case 'ssh-refused':
      case 'ssh-auth':
        if (!this.c.nodes.has(spec.node)) bad(`${spec.kind} fault: no node '${spec.node}'`);
        break;
      default:
        bad(`unknown fault kind '${(spec as { kind: string }).kind}'`);
    }
  }

  remove(id: number): boolean {
    const f = this.active.get(id);
    if (!f) return false;
    this.active.delete(id);
    f.release?.();
    const spec = f.spec;
    switch (spec.kind) {
      case 'lock': {
        const vm = this.c.vms.get(spec.vmid);
        if (vm && spec.lock && vm.config.lock === spec.lock && !f.holderDied) delete vm.config.lock;
        break;
      }
      case 'node-offline':
      case 'node-crash': {
        const n = this.c.nodes.get(spec.node)!;
        const held = (kind: string) =>
          [...this.active.values()].some((o) => o.spec.kind === kind && 'node' in o.spec && o.spec.node === spec.node);
        if (n.crashed && !held('node-crash')) {
          n.crashed = false;
          n.online = !held('node-offline');
          this.onNodeBoot?.(spec.node);
        } else if (!n.crashed && !held('node-offline')) {
          n.online = true;
        }
        break;
      }
      case 'stats-stalled':
        if (![...this.active.values()].some((o) => o.spec.kind === 'stats-stalled' && o.spec.node === spec.node)) {
          this.c.nodes.get(spec.node)!.statsStalled = false;
        }
        break;
      case 'storage-full': {
        const s = this.c.storage(spec.node, spec.storage);
        if (s) s.forcedFull = false;
        break;
      }
      case 'unavailable':
        this.unavailableUntil = 0;
        break;
      case 'ssh-refused':
        this.onSshRefused?.(spec.node);
        break;
    }
    return true;
  }

  /**
   * Whether the node's open SSH sessions are cut: an `ssh-refused` fault that drops them, or a
   * crash (whose port then takes connections and never answers, as an offline node's does).
   */
  sshSessionsDropped(node: string): boolean {
    if (this.c.nodes.get(node)?.crashed) return true;
    return [...this.active.values()].some(
      (f) => f.spec.kind === 'ssh-refused' && f.spec.node === node && f.spec.dropSessions === true,
    );
  }

  /** Whether an `ssh-refused` fault holds the node's SSH port closed. */
  sshRefused(node: string): boolean {
    return [...this.active.values()].some((f) => f.spec.kind === 'ssh-refused' && f.spec.node === node);
  }

  /** Whether an `ssh-auth` fault fails every login to the node (counted as fired). */
  sshAuthFails(node: string): boolean {
    let fails = false;
    for (const f of this.active.values())
      if (f.spec.kind === 'ssh-auth' && f.spec.node === node) {
        f.seen++;
        f.fired++;
        fails = true;
      }
    return fails;
  }

  clear(): void {
    for (const id of [...this.active.keys()]) this.remove(id);
  }

  list(): Array<{ id: number; fired: number; seen: number; spec: FaultSpec }> {
    return [...this.active.values()].map((f) => ({ id: f.id, fired: f.fired, seen: f.seen, spec: f.spec }));
  }

  /** Whether this occurrence fires, counting matches: nth (1-based) .. nth+count-1. */
  private fires(f: ActiveFault, nth = 1, count = 1): boolean {
    f.seen++;
    const fire = f.seen >= nth && (count < 0 || f.seen < nth + count);
    if (fire) f.fired++;
    return fire;
  }

  /** Whether a request-like fault selects this request (before counting it). */
  private selects(f: ActiveFault, s: RequestMatch, method: string, path: string, params: Record<string, unknown>) {
    if (s.method && s.method.toUpperCase() !== method) return false;
    if (!f.pathRe?.test(path)) return false;
    if (s.param) {
      if (!(s.param.name in params)) return false;
      if (s.param.value !== undefined && String(params[s.param.name]) !== s.param.value) return false;
    }
    return true;
  }

  matchRequest(
    method: string,
    path: string,
    params: Record<string, unknown>,
  ): { status: number; message: string } | undefined {
    for (const f of this.active.values()) {
      const s = f.spec;
      if (s.kind !== 'request' || !this.selects(f, s, method, path, params)) continue;
      if (this.fires(f, s.nth, s.count)) return { status: s.status, message: s.message };
    }
    return undefined;
  }

  /** A `reply-lost` fault fires for this request: it is applied, and its answer never sent. */
  replyLost(method: string, path: string, params: Record<string, unknown>): boolean {
    let lost = false;
    for (const f of this.active.values()) {
      const s = f.spec;
      if (s.kind !== 'reply-lost' || !this.selects(f, s, method, path, params)) continue;
      if (this.fires(f, s.nth, s.count)) lost = true;
    }
    return lost;
  }

  /** The `applied-late` fault that fires for this request, if any (the first one). */
  appliedLate(method: string, path: string, params: Record<string, unknown>): ActiveFault | undefined {
    for (const f of this.active.values()) {
      const s = f.spec;
      if (s.kind !== 'applied-late' || !this.selects(f, s, method, path, params)) continue;
      if (this.fires(f, s.nth, s.count)) return f;
    }
    return undefined;
  }

  /**
   * Hold an `applied-late` request: `delayMs` simulated ms (a timer, not the clock offset), or
   * until its fault is removed. Nothing the client does (closing the connection) ends it early.
   */
  holdLate(f: ActiveFault): Promise<LateOutcome> {
    return this.hold((f.spec as { delayMs: number }).delayMs, [f]);
  }

  /**
   * Wait `ms` simulated ms, or until one of `faults` is removed, or the simulator closes (then
   * 'drop'). The timer is cleared either way, so a long hold does not keep a closed simulator's
   * process alive.
   */
  async hold(ms: number, faults: ActiveFault[]): Promise<LateOutcome> {
    if (!this.closing) {
      const done = new AbortController();
      await Promise.race([
        this.c.clock.sleep(ms, done.signal).catch(() => {}),
        ...faults.map((f) => f.released),
        this.shutdownSignal,
      ]);
      done.abort();
    }
    return this.closing ? 'drop' : 'run';
  }

  /** The simulator is closing: held requests are dropped, not run. */
  shutdown(): void {
    this.closing = true;
    this.endShutdown();
  }

  /**
   * The latency faults that fire for this request and their summed delay. The request is held
   * with `hold`: removing one of them ends the delay early, closing the simulator drops it.
   */
  latencyFor(method: string, path: string): { ms: number; faults: ActiveFault[] } {
    let ms = 0;
    const faults: ActiveFault[] = [];
    for (const f of this.active.values()) {
      const s = f.spec;
      if (s.kind !== 'latency') continue;
      if (s.method && s.method.toUpperCase() !== method) continue;
      if (f.pathRe && !f.pathRe.test(path)) continue;
      if (this.fires(f, 1, s.count ?? -1)) {
        ms += s.ms;
        faults.push(f);
      }
    }
    return { ms, faults };
  }

  /** Every task fault that fires for this task (they compose: e.g. stall, then fail). */
  taskFaults(node: string, type: string, id: string): TaskFault[] {
    const out: TaskFault[] = [];
    for (const f of this.active.values()) {
      const s = f.spec;
      if (s.kind !== 'task') continue;
      if (s.type && s.type !== type) continue;
      if (s.id !== undefined && String(s.id) !== id) continue;
      if (s.node && s.node !== node) continue;
      if (!this.fires(f, s.nth, s.count ?? 1)) continue;
      out.push({
        action: s.action,
        message: s.message ?? 'simulated task failure',
        at: s.at ?? 'end',
        fault: f,
        ...(s.step !== undefined ? { step: s.step } : {}),
        ...(s.durationMs !== undefined ? { durationMs: s.durationMs } : {}),
      });
    }
    return out;
  }

  /**
   * Hold a task at a stall fault: until the fault is removed, its `durationMs` has passed, or the
   * task is aborted. A task stalls once per fault (the first time it gets here), not at every step;
   * a fault with `step` only at that wait (`wait` is the 1-based number of this wait, 0 at the end).
   */
  async waitWhileStalled(tfs: TaskFault[], signal: AbortSignal, wait = 0): Promise<void> {
    for (const tf of tfs) {
      if (tf.action !== 'stall') continue;
      if (tf.step !== undefined && tf.step !== wait) continue;
      if (!tf.stalled) {
        if (!this.active.has(tf.fault.id)) continue;
        const done = new AbortController();
        const waits: Promise<unknown>[] = [tf.fault.released];
        if (tf.durationMs !== undefined)
          waits.push(this.c.clock.sleep(tf.durationMs, AbortSignal.any([signal, done.signal])).catch(() => {}));
        waits.push(
          new Promise((resolve) => {
            if (signal.aborted) resolve(undefined);
            signal.addEventListener('abort', () => resolve(undefined), { once: true });
          }),
        );
        tf.fault.reached = true;
        tf.stalled = Promise.race(waits).then(() => done.abort());
      }
      await tf.stalled;
    }
  }

  count(key: string): void {
    this.counters.set(key, (this.counters.get(key) ?? 0) + 1);
  }
}
