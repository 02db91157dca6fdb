/**
 * `doctor`'s look at the cluster's quorum (`GET /cluster/status`, Sys.Audit on /; read in
 * proxmox/quorum.ts): without it every other check can pass on a site where nothing can be made.
 */
import { PermissionError } from '../proxmox/errors.ts';
import { describeNodesUp, quorumFix, quorumOf } from '../proxmox/quorum.ts';
import type { Ctx } from './cluster.ts';
import { msg } from './connection.ts';

export async function checkQuorum(ctx: Ctx): Promise<void> {
  const { c, add } = ctx;
  let rows: Array<Record<string, unknown>>;
  try {
    rows = await c.clusterStatus();
  } catch (e) {
    add({
      id: 'quorum',
      status: e instanceof PermissionError ? 'skip' : 'warn',
      detail: `cannot read the cluster's quorum: ${msg(e)}`,
      ...(e instanceof PermissionError ? { fix: 'grant Sys.Audit on / to see it (GET /cluster/status)' } : {}),
    });
    return;
  }
  const q = quorumOf(rows);
  if (!q) return;
  const up = describeNodesUp(q);
  if (q.quorate) {
    add({ id: 'quorum', status: 'ok', detail: `cluster ${q.cluster} is quorate: ${up}` });
    return;
  }
  add({
    id: 'quorum',
    status: 'fail',
    detail: `cluster ${q.cluster} has no quorum: ${up}. /etc/pve is read-only: Proxmox refuses creates, starts, clones, migrations and config changes until the nodes that are up hold a majority of its votes`,
    fix: quorumFix(q),
  });
}
