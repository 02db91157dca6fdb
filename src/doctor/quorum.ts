/**
 * `doctor`'s look at the cluster's quorum (`GET /cluster/status`, Sys.Audit on /). A cluster
 * without quorum holds /etc/pve read-only: Proxmox refuses every create, start, clone, migration
 * and config change (pve-cluster src/PVE/Cluster.pm:121-132 check_cfs_quorum) while the nodes that
 * are up still answer reads, so the other checks can all pass on a site where nothing can be made.
 * A node that is not in a cluster has no cluster entry there, and nothing to lose.
 */
import { PermissionError } from '../proxmox/errors.ts';
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
  const cluster = rows.find((r) => r.type === 'cluster');
  if (!cluster) return;
  const nodes = rows.filter((r) => r.type === 'node');
  const down = nodes.filter((n) => Number(n.online) !== 1).map((n) => String(n.name));
  const up = `${nodes.length - down.length} of ${nodes.length} nodes online${down.length ? ` (down: ${down.join(', ')})` : ''}`;
  if (Number(cluster.quorate) === 1) {
    add({ id: 'quorum', status: 'ok', detail: `cluster ${String(cluster.name)} is quorate: ${up}` });
    return;
  }
  add({
    id: 'quorum',
    status: 'fail',
    detail: `cluster ${String(cluster.name)} has no quorum: ${up}. /etc/pve is read-only: Proxmox refuses creates, starts, clones, migrations and config changes until the nodes that are up hold a majority of its votes`,
    fix: `bring ${down.length ? down.join(', ') : 'the missing nodes'} back (\`pvecm status\` on a node that is up shows the votes); for a node gone for good, \`pvecm expected <votes of the nodes up>\` once it is surely off; a QDevice keeps a two-node cluster quorate with one node down`,
  });
}
