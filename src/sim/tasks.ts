/**
 * Worker tasks (`fork_worker`): UPIDs, logs, exit status, and the fault hooks that fail or stall
 * them. A worker is an async function; what it logs becomes the task log, what it throws becomes
 * `TASK ERROR: <message>`, and `warn()` lines make the exit status `WARNINGS: N` (a success).
 */
import type { AuthInfo } from './auth.ts';
import type { Faults } from './faults.ts';
import type { ClusterState, TaskState } from './state.ts';

export interface TaskHandle {
  readonly upid: string;
  readonly signal: AbortSignal;
  log(line: string): void;
  warn(line: string): void;
  /** Wait a simulated duration (scaled by the speed factor); honours stall faults. */
  sleep(simMs: number): Promise<void>;
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
     * Called once the task has stopped. `ran` is false when a fault failed the task at its start,
     * before the worker ran: the caller then releases what it set up for the worker (locks, a
     * `lock: create` config), as the worker's own error path would have.
     */
    onEnd?: (ok: boolean, ran: boolean) => void,
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
    const handle: TaskHandle = {
      upid,
      signal: abort.signal,
      log: (line) => task.log.push(line),
      warn: (line) => {
        warnings++;
        task.log.push(`WARN: ${line}`);
      },
      sleep: async (ms) => {
        await c.clock.sleep(ms, abort.signal);
        await this.faults.waitWhileStalled(faults, abort.signal);
      },
    };
    c.tasks.set(upid, task);
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
        if (failAtStart) throw new Error(failAtStart.message);
        ran = true;
        await worker(handle);
        await this.faults.waitWhileStalled(faults, abort.signal);
        if (failAtEnd) throw new Error(failAtEnd.message);
        task.exitstatus = warnings ? `WARNINGS: ${warnings}` : 'OK';
        task.log.push(warnings ? `TASK WARNINGS: ${warnings}` : 'TASK OK');
        ok = true;
      } catch (e) {
        const msg = abort.signal.aborted ? 'unexpected status' : e instanceof Error ? e.message : String(e);
        const line = msg.split('\n')[0]!.trim();
        task.exitstatus = line;
        task.log.push(`TASK ERROR: ${line}`);
      }
      task.status = 'stopped';
      task.endtime = c.clock.epoch();
      try {
        onEnd?.(ok, ran);
      } catch {
        // callbacks must not break the task model
      }
    })();
    return upid;
  }
}
