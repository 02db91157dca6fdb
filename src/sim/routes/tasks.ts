/** `/nodes/{node}/tasks`: list, status, log, stop. */
import { type AuthInfo, hasPriv } from '../auth.ts';
import { PveHttpError, paramError } from '../errors.ts';
import { Envelope, type Route } from '../server.ts';
import type { ClusterState, TaskState } from '../state.ts';
import { parseUpid } from '../tasks.ts';

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

function taskEntry(t: TaskState): Record<string, unknown> {
  return { ...upidFields(t), ...(t.status === 'stopped' ? { endtime: t.endtime, status: t.exitstatus } : {}) };
}

export function listTasks(
  c: ClusterState,
  auth: AuthInfo,
  node: string | undefined,
  opts: {
    source?: string;
    limit?: number;
    start?: number;
    vmid?: number;
    typefilter?: string;
    userfilter?: string;
    errors?: number;
  },
): Record<string, unknown>[] {
  const source = opts.source ?? 'archive';
  return [...c.tasks.values()]
    .filter((t) => (node === undefined || t.node === node) && visible(c, auth, t))
    .filter((t) =>
      source === 'active' ? t.status === 'running' : source === 'archive' ? t.status === 'stopped' : true,
    )
    .filter((t) => opts.vmid === undefined || t.id === String(opts.vmid))
    .filter((t) => !opts.typefilter || t.type === opts.typefilter)
    .filter((t) => !opts.userfilter || t.user.includes(opts.userfilter))
    .filter((t) => !opts.errors || (t.status === 'stopped' && t.exitstatus !== 'OK'))
    .sort((a, b) => b.starttime - a.starttime || b.pid - a.pid)
    .slice(opts.start ?? 0, (opts.start ?? 0) + (opts.limit ?? 50))
    .map(taskEntry);
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
    handler: ({ c, auth, params }) =>
      listTasks(c, auth, String(params.node), {
        source: params.source as string | undefined,
        limit: params.limit as number | undefined,
        start: params.start as number | undefined,
        vmid: params.vmid as number | undefined,
        typefilter: params.typefilter as string | undefined,
        userfilter: params.userfilter as string | undefined,
        errors: params.errors as number | undefined,
      }),
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
