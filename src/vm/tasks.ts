/**
 * Proxmox worker tasks as the VM steps see them: whether the task we track has ended, and which
 * create or clone task made (or is still making) the VM at a VMID. The task list is the evidence
 * for whose a placeholder is when its worker died: PVE's task index keeps every task's type, id
 * and user (the UPID: `UPID:node:pid:pstart:starttime:type:id:user:`, pve-common
 * `src/PVE/Tools.pm` upid_encode; listed by pve-manager `PVE/API2/Tasks.pm` node_tasks). A create's
 * id is its VMID; a clone's id is the *source* VMID (qemu-server `src/PVE/API2/Qemu.pm` clone_vm
 * forks `qmclone` with `$vmid`).
 */
import { exitOutcome, parseUpid } from '../proxmox/upid.ts';
import type { StepContext } from './context.ts';

/**
 * Whether our task `upid` ended, and how. The node's shared task read (NodeTaskReads.nodeTasks, node-tasks.ts)
 * answers for every task followed there: running, or ended OK. A failure is read from the task
 * itself (its exit status and the tail of its log make the error), as is a task the shared read
 * does not show (older than the read covers, or a read that failed).
 */
export async function taskDone(ctx: StepContext, upid: string): Promise<{ finished: boolean; error?: Error }> {
  const node = upid.split(':')[1] ?? '';
  ctx.site.tasks.followTask(upid);
  try {
    const tasks = await ctx.site.tasks.nodeTasks(node, ctx.signal, false, ctx.memory);
    if (tasks.running.has(upid)) return { finished: false };
    const status = tasks.ended.get(upid);
    if (status !== undefined && exitOutcome(status).ok) {
      ctx.site.tasks.forgetTask(upid);
      return { finished: true };
    }
  } catch {
    // fall through to the per-task check
  }
  const check = await ctx.client.checkTask(upid);
  if (check.state === 'running') return { finished: false };
  ctx.site.tasks.forgetTask(upid);
  if (check.state === 'failed') return { finished: true, error: check.error };
  return { finished: true };
}

/** The full auth id of a UPID (`user@realm` or `user@realm!token`). */
export function taskAuthId(upid: string): string | undefined {
  const u = parseUpid(upid);
  if (!u) return undefined;
  return u.tokenId ? `${u.user}!${u.tokenId}` : u.user;
}

export interface MakerTask {
  upid: string;
  type: string;
  authId: string;
  starttime: number;
  running: boolean;
  /** The exit status of a finished task (`OK`, `WARNINGS: N`, an error). */
  status?: string;
}

/**
 * The create or clone tasks that may have made the VM at `vmid` on `node`, newest first: `qmcreate`
 * tasks with that id on the VM's node, and — for a clone, whose task id is the source — `qmclone`
 * tasks of the template on `sourceNode`; for a `lock: create` placeholder (no `clone`), the `qmtunnel`
 * tasks of that id on the node too: a remote migration's target is made by its `mtunnel` call as
 * such a placeholder (qemu-server Qemu.pm:6711-6712), at a VMID that another resource may name (a
 * spec's vmid, a VMID chosen before the VM there was destroyed). Seen as nobody's create, it was
 * reported left from a dead create while the migration ran, with the fix to destroy it (fault
 * search F93). Running and finished ones, from one task list each.
 */
export async function makerTasks(
  ctx: StepContext,
  vmid: number,
  node: string,
  clone?: { vmid: number; node: string },
): Promise<MakerTask[]> {
  const out: MakerTask[] = [];
  const add = (list: Array<{ upid: string; type: string; starttime: number; endtime?: number; status?: string }>) => {
    for (const t of list) {
      const authId = taskAuthId(t.upid);
      if (!authId) continue;
      const running = t.endtime === undefined && (t.status === undefined || /^running$/i.test(t.status));
      out.push({
        upid: t.upid,
        type: t.type,
        authId,
        starttime: t.starttime,
        running,
        ...(t.status ? { status: t.status } : {}),
      });
    }
  };
  add(await ctx.client.listTasks(node, { source: 'all', vmid, typefilter: 'qmcreate', limit: 50 }));
  if (clone)
    add(await ctx.client.listTasks(clone.node, { source: 'all', vmid: clone.vmid, typefilter: 'qmclone', limit: 50 }));
  if (!clone) add(await ctx.client.listTasks(node, { source: 'all', vmid, typefilter: 'qmtunnel', limit: 50 }));
  const unique = new Map(out.map((t) => [t.upid, t]));
  return [...unique.values()].sort((a, b) => b.starttime - a.starttime);
}
