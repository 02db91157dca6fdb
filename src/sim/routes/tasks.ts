/**
 * `/nodes/{node}/tasks`: list, status, log, stop; and the cluster-wide `/cluster/tasks` list.
 *
 * The node list follows pve-manager PVE/API2/Tasks.pm node_tasks (:40-257 at 14a22df3; the same
 * rules in 6.4-1 8e9a0d57 and 7.4-1 800be957). Running tasks come from the `active` file
 * (source `active` or `all`), finished ones from the archive index (`archive` or `all`):
 * - A running task is listed with `status: "RUNNING"` (:233) and `saved: "0"` (the active file's
 *   flag, pve-common src/PVE/INotify.pm:685-709 at f665029), and with `user` as its UPID has it:
 *   the full `user@realm!token` for a token's task, because only archived entries go through
 *   `$convert_token_task` (:219). An archived task has `user` and `tokenid` split, `endtime` and
 *   its exit status as `status`. Both carry the UPID's fields (`upid`, `node`, `pid`, `pstart`,
 *   `starttime`, `type`, `id`).
 * - Running tasks come first, oldest first (the active file keeps registration order,
 *   pve-common src/PVE/RESTEnvironment.pm:296-400), then the archive newest first (it is read
 *   backwards, :241).
 * - `userfilter` is a case-insensitive substring of `user` (:189); `errors=1` drops only tasks
 *   whose status is OK (:178, statusfilter ok=0), so running tasks (status type unknown) and
 *   warnings stay; `typefilter`, `vmid`, `since`, `until` and `statusfilter` (7.4+) as PVE; `total`
 *   counts every match (:202, :255).
 * - Visibility (:27-37, :190): `Sys.Audit` on the node, or the task's user: a token sees its own
 *   tasks, a user its own and its tokens' archived ones; a running token task is the token's only.
 */
import { type AuthInfo, hasPriv } from '../auth.ts';
import { PveHttpError, paramError } from '../errors.ts';
import { Envelope, type Route } from '../server.ts';
import type { ClusterState, TaskState } from '../state.ts';
import { parseUpid, UNEXPECTED_STATUS } from '../tasks.ts';

/** `$check_task_user` on a task as the status, log and archive see it (user and token split). */
function visible(c: ClusterState, auth: AuthInfo, t: TaskState): boolean {
  const owner = t.tokenid ? `${t.user}!${t.tokenid}` : t.user;
  return (
    owner === auth.authid ||
    (auth.kind === 'ticket' && t.user === auth.userid) ||
    hasPriv(c, auth, `/nodes/${t.node}`, 'Sys.Audit')
  );
}

/** The UPID's fields, as both the task list and the task status give them. */
function upidFields(t: TaskState): Record<string, unknown> {
  return {
    upid: t.upid,
    node: t.node,
    pid: t.pid,
    pstart: t.pstart,
    starttime: t.starttime,
    type: t.type,
    id: t.id,
    user: t.user,
    ...(t.tokenid ? { tokenid: t.tokenid } : {}),
  };
}

/** The authid in the UPID: `user@realm` or `user@realm!token`. */
function upidUser(t: TaskState): string {
  return t.tokenid ? `${t.user}!${t.tokenid}` : t.user;
}

/** PVE::UPID::normalize_status_type (pve-common src/PVE/UPID.pm:94-106 at f665029). */
function statusType(t: TaskState): 'ok' | 'warning' | 'error' | 'unknown' {
  if (t.status === 'running' || !t.exitstatus) return 'unknown';
  if (t.exitstatus === 'OK') return 'ok';
  if (/^WARNINGS: \d+$/.test(t.exitstatus)) return 'warning';
  if (t.exitstatus === UNEXPECTED_STATUS) return 'unknown';
  return 'error';
}

/** A running task as the `active` file lists it. */
function activeEntry(t: TaskState): Record<string, unknown> {
  const { tokenid: _split, ...fields } = upidFields(t);
  return { ...fields, user: upidUser(t), saved: '0', status: 'RUNNING' };
}

/** A finished task as the archive index lists it. */
function archiveEntry(t: TaskState): Record<string, unknown> {
  return { ...upidFields(t), endtime: t.endtime, status: t.exitstatus };
}

export interface TaskListOptions {
  source?: string;
  limit?: number;
  start?: number;
  vmid?: number;
  typefilter?: string;
  userfilter?: string;
  errors?: number | boolean;
  since?: number;
  until?: number;
  statusfilter?: string;
}

/** `GET /nodes/{node}/tasks`: the entries and `total`. */
export function listTasks(
  c: ClusterState,
  auth: AuthInfo,
  node: string,
  opts: TaskListOptions,
): { entries: Record<string, unknown>[]; total: number } {
  const source = opts.source ?? 'archive';
  const start = opts.start ?? 0;
  const limit = opts.limit ?? 50;
  const types = new Set(['ok', 'warning', 'error', 'unknown']);
  if (opts.statusfilter !== undefined && !opts.errors) {
    types.clear();
    for (const f of opts.statusfilter.split(/[,;\s]+/).filter(Boolean)) types.add(f.toLowerCase());
  } else if (opts.errors) types.delete('ok');
  const auditor = hasPriv(c, auth, `/nodes/${node}`, 'Sys.Audit');
  const userfilter = opts.userfilter?.toLowerCase();
  const matches = (t: TaskState, user: string, mine: boolean): boolean =>
    !(userfilter && !user.toLowerCase().includes(userfilter)) &&
    (auditor || mine) &&
    !(opts.typefilter && t.type !== opts.typefilter) &&
    !(opts.vmid && t.id !== String(opts.vmid)) &&
    !(opts.since !== undefined && t.starttime < opts.since) &&
    !(opts.until !== undefined && t.starttime > opts.until) &&
    types.has(statusType(t));
  // Every match counts in `total`; only the page's are rendered.
  const entries: Record<string, unknown>[] = [];
  let total = 0;
  const offer = (entry: () => Record<string, unknown>) => {
    if (total >= start && entries.length < limit) entries.push(entry());
    total++;
  };
  if (source === 'active' || source === 'all') {
    for (const t of [...(c.runningTasks.get(node) ?? [])].sort((a, b) => a.starttime - b.starttime || a.pid - b.pid)) {
      // The active file holds the UPID's user: only that exact identity (or an auditor) sees it.
      if (matches(t, upidUser(t), upidUser(t) === auth.authid)) offer(() => activeEntry(t));
    }
  }
  if (source !== 'active') {
    // Newest first: the node's ended tasks are kept in the order they ended (ClusterState.endedTasks).
    const ended = c.endedTasks.get(node) ?? [];
    for (let i = ended.length - 1; i >= 0; i--) {
      const t = ended[i]!;
      // Every task further back ended before this one, so began before `since` too: none matches.
      if (opts.since !== undefined && (t.endtime ?? 0) < opts.since) break;
      if (c.tasks.get(t.upid) !== t) continue; // rotated out of the archive (MAX_TASKS)
      if (matches(t, t.user, visible(c, auth, t))) offer(() => archiveEntry(t));
    }
  }
  return { entries, total };
}

/**
 * `GET /cluster/tasks` (pve-manager PVE/API2/Cluster.pm:730-770 at 14a22df3): every node's
 * broadcast task list, i.e. its running tasks plus finished ones up to 25 in all (pve-common
 * src/PVE/RESTEnvironment.pm active_workers, :388-394 at f665029), tokens split into `user` and
 * `tokenid`. Without `Sys.Audit` on `/` only tasks whose `user` equals the caller are listed,
 * which no token's are.
 */
export function clusterTasks(c: ClusterState, auth: AuthInfo): Record<string, unknown>[] {
  const all = hasPriv(c, auth, '/', 'Sys.Audit');
  const out: Record<string, unknown>[] = [];
  for (const node of c.nodes.keys()) {
    const mine = [...c.tasks.values()].filter((t) => t.node === node);
    const running = mine.filter((t) => t.status === 'running').sort((a, b) => a.starttime - b.starttime);
    const done = mine
      .filter((t) => t.status === 'stopped')
      .sort((a, b) => b.starttime - a.starttime || (b.endSeq ?? 0) - (a.endSeq ?? 0))
      .slice(0, Math.max(0, 25 - running.length));
    for (const t of [...running, ...done]) {
      if (!all && t.user !== auth.authid) continue;
      const { pstart: _pstart, pid, ...fields } = upidFields(t);
      out.push(t.status === 'running' ? { ...fields, pid } : { ...fields, endtime: t.endtime, status: t.exitstatus });
    }
  }
  return out;
}

function findTask(c: ClusterState, auth: AuthInfo, node: string, upid: string): TaskState {
  const parsed = parseUpid(upid);
  if (!parsed) paramError({ upid: 'unable to parse worker upid' });
  const t = c.tasks.get(upid);
  if (!t || t.node !== node) paramError({ upid: 'no such task' });
  if (!visible(c, auth, t)) throw new PveHttpError(403, 'Permission check failed');
  return t;
}

export const taskRoutes: Route[] = [
  {
    method: 'GET',
    path: '/nodes/{node}/tasks',
    handler: ({ c, auth, params }) => {
      const { entries, total } = listTasks(c, auth, String(params.node), params as TaskListOptions);
      return new Envelope(entries, { total });
    },
  },
  {
    method: 'GET',
    path: '/nodes/{node}/tasks/{upid}',
    handler: ({ c, auth, params }) => {
      findTask(c, auth, String(params.node), String(params.upid));
      return [{ name: 'log' }, { name: 'status' }];
    },
  },
  {
    method: 'GET',
    path: '/nodes/{node}/tasks/{upid}/status',
    handler: ({ c, auth, params }) => {
      const t = findTask(c, auth, String(params.node), String(params.upid));
      return {
        ...upidFields(t),
        status: t.status,
        ...(t.status === 'stopped' ? { exitstatus: t.exitstatus } : {}),
      };
    },
  },
  {
    method: 'GET',
    path: '/nodes/{node}/tasks/{upid}/log',
    handler: ({ c, auth, params }) => {
      const node = String(params.node);
      const upid = String(params.upid);
      const start = Number(params.start ?? 0);
      const limit = Number(params.limit ?? 50);
      // read_task_log: no status check for the file; an unknown task is a missing log file.
      if (!parseUpid(upid)) paramError({ upid: 'unable to parse worker upid' });
      const known = c.tasks.get(upid);
      if (!known || known.node !== node) {
        return new Envelope([{ n: 1, t: 'unable to open file - No such file or directory' }], { total: 1 });
      }
      const t = findTask(c, auth, node, upid);
      // PVE::Tools::dump_logfile: `limit` 0 reads to the end; `n` is 1-based; an empty file
      // (count 0) answers one "no content" line.
      const lines = t.log;
      if (!lines.length) return new Envelope([{ n: 1, t: 'no content' }], { total: 1 });
      const end = limit === 0 ? lines.length : start + limit;
      const slice = lines.slice(start, end).map((text, i) => ({ n: start + i + 1, t: text }));
      return new Envelope(slice, { total: lines.length });
    },
  },
  {
    method: 'DELETE',
    path: '/nodes/{node}/tasks/{upid}',
    handler: ({ c, auth, params }) => {
      const t = findTask(c, auth, String(params.node), String(params.upid));
      if (t.status === 'running') t.abort.abort(new Error('received interrupt'));
      return null;
    },
  },
];
