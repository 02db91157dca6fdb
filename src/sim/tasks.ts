/**
 * Worker tasks (`fork_worker`): UPIDs, logs, exit status, and the fault hooks that fail, stall or
 * kill them. A worker is an async function; what it logs becomes the task log, what it throws
 * becomes `TASK ERROR: <message>`, and `warn()` lines make the exit status `WARNINGS: N` (a
 * success).
 *
 * A worker that dies (task fault `die`) ends differently: PVE's fork_worker writes the final
 * `TASK OK` / `TASK ERROR: …` line from the worker process itself (pve-common
 * src/PVE/RESTEnvironment.pm:650-667 at f665029), so a process that vanishes leaves a log without
 * it, and PVE::UPID::read_status reports such a log as `unexpected status`
 * (src/PVE/UPID.pm:70-86 at f665029; Tools::upid_read_status, src/PVE/Tools.pm:678, calls it).
 * Its error paths never run, so nothing is cleaned up; only what the kernel frees with the
 * process goes: its flocks.
 */
import type { AuthInfo } from './auth.ts';
import type { TaskFault } from './fault-spec.ts';
import type { Faults } from './faults.ts';
import type { ClusterState, TaskState } from './state.ts';

export interface TaskHandle {
  readonly upid: string;
  readonly signal: AbortSignal;
  log(line: string): void;
  warn(line: string): void;
  /** Wait a simulated duration (scaled by the speed factor); honours stall and die faults. */
  sleep(simMs: number): Promise<void>;
  /**
   * Wait for something the simulated world does in its own time (a copy reaching a point, see
   * bandwidth.ts): a step like `sleep`, for the stall and die faults. `until` gets the task's
   * abort signal.
   */
  wait<T>(until: (signal: AbortSignal) => Promise<T>): Promise<T>;
  /**
   * The worker's work is done and it is about to write its result (the final config, the unlock):
   * where a `die` fault `at: 'end'` kills it. Workers without such a write need not call it; the
   * runner then applies `die` at `end` after the worker returns.
   */
  endOfWork(): void;
}

/** Thrown inside a worker whose process is gone: no error path may act on it (see isWorkerDeath). */
export class WorkerDeath extends Error {
  constructor() {
    super('worker died');
  }
}

/** Error paths check this first: a dead worker cleans nothing up, it just stops. */
export function isWorkerDeath(e: unknown): e is WorkerDeath {
  return e instanceof WorkerDeath;
}

/**
 * How a task ended, for the caller's `onEnd`: `ran` is false when a fault acted before the worker
 * ran; `died` is true when the worker vanished (fault `die`), in which case nothing may be undone.
 */
export interface TaskEnd {
  ok: boolean;
  ran: boolean;
  died: boolean;
}

function hex(n: number, w: number): string {
  return n.toString(16).toUpperCase().padStart(w, '0');
}

export function parseUpid(
  upid: string,
):
  | { node: string; pid: number; pstart: number; starttime: number; type: string; id: string; user: string }
  | undefined {
  const m =
    /^UPID:([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?):([0-9A-Fa-f]{8}):([0-9A-Fa-f]{8,9}):([0-9A-Fa-f]{8}):([^:\s]+):([^:\s]*):([^:\s]+):$/.exec(
      upid,
    );
  if (!m) return undefined;
  return {
    node: m[1]!,
    pid: Number.parseInt(m[3]!, 16),
    pstart: Number.parseInt(m[4]!, 16),
    starttime: Number.parseInt(m[5]!, 16),
    type: m[6]!,
    id: m[7]!,
    user: m[8]!,
  };
}

/** Finished tasks kept per cluster (oldest dropped first). */
export const MAX_TASKS = 20_000;

/** The exit status PVE reads from a log without a final `TASK` line. */
export const UNEXPECTED_STATUS = 'unexpected status';

export class TaskRunner {
  private readonly c: ClusterState;
  private readonly faults: Faults;
  constructor(c: ClusterState, faults: Faults) {
    this.c = c;
    this.faults = faults;
  }

  /** Start a worker; returns its UPID at once, like `fork_worker`. */
  start(
    node: string,
    type: string,
    id: string,
    auth: AuthInfo,
    worker: (t: TaskHandle) => Promise<void>,
    /**
     * Called once the task has stopped. When a `fail` fault acted before the worker ran (`ran`
     * false, `died` false) the caller releases what it set up for the worker (locks, a
     * `lock: create` config), as the worker's own error path would have. When the worker died
     * (`died`), the caller only releases what the process held (flocks).
     */
    onEnd?: (end: TaskEnd) => void,
  ): string {
    const c = this.c;
    const pid = c.nextPid();
    const starttime = c.clock.epoch();
    const pstart = 0x2000000 + (c.nextPid() & 0xffff);
    const upid = `UPID:${node}:${hex(pid, 8)}:${hex(pstart, 8)}:${hex(starttime, 8)}:${type}:${id}:${auth.authid}:`;
    const abort = new AbortController();
    let warnings = 0;
    const task: TaskState = {
      upid,
      node,
      pid,
      pstart,
      starttime,
      type,
      id,
      user: auth.userid,
      ...(auth.tokenid ? { tokenid: auth.tokenid } : {}),
      status: 'running',
      log: [],
      done: Promise.resolve(),
      abort,
    };
    const faults = this.faults.taskFaults(node, type, id);
    const failAtStart = faults.find((f) => f.action === 'fail' && f.at === 'start');
    const failAtEnd = faults.find((f) => f.action === 'fail' && f.at !== 'start');
    const dieAtStart = faults.find((f) => f.action === 'die' && f.step === undefined && f.at === 'start');
    const dieAtEnd = faults.find((f) => f.action === 'die' && f.step === undefined && f.at !== 'start');
    const dieAtStep = faults.filter(
      (f): f is TaskFault & { step: number } => f.action === 'die' && f.step !== undefined,
    );
    let waits = 0;
    let died = false;
    const die = (): never => {
      died = true;
      throw new WorkerDeath();
    };
    // Dead by a fault, or killed from outside (its node crashed, killNode: the abort's reason).
    const dead = (): boolean => died || isWorkerDeath(abort.signal.reason);
    const handle: TaskHandle = {
      upid,
      signal: abort.signal,
      log: (line) => {
        if (!dead()) task.log.push(line);
      },
      warn: (line) => {
        if (dead()) return;
        warnings++;
        task.log.push(`WARN: ${line}`);
      },
      sleep: (ms) => handle.wait((signal) => c.clock.sleep(ms, signal)),
      wait: async (until) => {
        if (dead()) die();
        waits++;
        if (dieAtStep.some((f) => f.step === waits)) die();
        let v: Awaited<ReturnType<typeof until>>;
        try {
          v = await until(abort.signal);
          await this.faults.waitWhileStalled(faults, abort.signal, waits);
        } catch (e) {
          if (dead()) die();
          throw e;
        }
        if (dead()) die();
        return v;
      },
      endOfWork: () => {
        if (dead() || dieAtEnd) die();
      },
    };
    c.tasks.set(upid, task);
    const running = c.runningTasks.get(node) ?? new Set<TaskState>();
    c.runningTasks.set(node, running.add(task));
    // Like PVE's task archive rotation: keep the newest finished tasks, never a running one.
    if (c.tasks.size > MAX_TASKS) {
      for (const [id, t] of c.tasks) {
        if (c.tasks.size <= MAX_TASKS) break;
        if (t.status === 'stopped') c.tasks.delete(id);
      }
    }
    task.done = (async () => {
      let ok = false;
      let ran = false;
      try {
        // A worker forked on a node that crashed meanwhile (its handler ran on): the process is gone.
        if (dieAtStart || c.nodes.get(node)?.crashed) die();
        if (failAtStart) throw new Error(failAtStart.message);
        ran = true;
        await worker(handle);
        await this.faults.waitWhileStalled(faults, abort.signal);
        if (dieAtEnd || dead()) die();
        if (failAtEnd) throw new Error(failAtEnd.message);
        task.exitstatus = warnings ? `WARNINGS: ${warnings}` : 'OK';
        task.log.push(warnings ? `TASK WARNINGS: ${warnings}` : 'TASK OK');
        ok = true;
      } catch (e) {
        if (dead() || isWorkerDeath(e)) {
          // The process is gone: no final line, so the status reads as PVE reads such a log.
          died = true;
          task.exitstatus = UNEXPECTED_STATUS;
        } else {
          const msg = abort.signal.aborted ? UNEXPECTED_STATUS : e instanceof Error ? e.message : String(e);
          const line = msg.split('\n')[0]!.trim();
          task.exitstatus = line;
          task.log.push(`TASK ERROR: ${line}`);
        }
      }
      task.status = 'stopped';
      c.runningTasks.get(node)?.delete(task);
      const ended = c.endedTasks.get(node) ?? [];
      ended.push(task);
      // Rotated-out tasks (MAX_TASKS) are dropped from the index once it holds twice what the
      // cluster keeps: amortized O(1) per task, never more than 2 x MAX_TASKS entries.
      c.endedTasks.set(node, ended.length > 2 * MAX_TASKS ? ended.filter((t) => c.tasks.get(t.upid) === t) : ended);
      task.endtime = c.clock.epoch();
      task.endSeq = ++c.taskEnds;
      try {
        onEnd?.({ ok, ran, died });
      } catch {
        // callbacks must not break the task model
      }
    })();
    return upid;
  }

  /**
   * Every worker running on `node` dies (the node crashed): each stops at once where it waits
   * (a simulated step, a flock) with `unexpected status`, and its error paths never run.
   */
  killNode(node: string): void {
    for (const t of this.c.runningTasks.get(node) ?? []) t.abort.abort(new WorkerDeath());
  }
}
