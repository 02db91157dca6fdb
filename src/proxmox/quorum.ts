/**
 * A cluster's quorum as `GET /cluster/status` reports it (Sys.Audit on /): the `cluster` row's
 * `quorate` and the `node` rows' `online`. Without quorum pmxcfs holds /etc/pve read-only and
 * Proxmox refuses every create, start, clone, migration and config change (pve-cluster
 * src/PVE/Cluster.pm:121-132 check_cfs_quorum) while the nodes that are up still answer reads.
 * A node that is in no cluster has no `cluster` row, and no quorum to lose. Read by `doctor`, by
 * `plan` and by `apply`'s plan, which say so before anything is sent.
 */

export interface Quorum {
  cluster: string;
  quorate: boolean;
  /** The cluster's nodes, and those not online. */
  nodes: number;
  down: string[];
}

/** The quorum in `/cluster/status`'s rows; undefined for a node in no cluster. */
export function quorumOf(rows: Array<Record<string, unknown>>): Quorum | undefined {
  const cluster = rows.find((r) => r.type === 'cluster');
  if (!cluster) return undefined;
  const nodes = rows.filter((r) => r.type === 'node');
  return {
    cluster: String(cluster.name),
    quorate: Number(cluster.quorate) === 1,
    nodes: nodes.length,
    down: nodes.filter((n) => Number(n.online) !== 1).map((n) => String(n.name)),
  };
}

/** `2 of 3 nodes online (down: pve-c)`. */
export function describeNodesUp(q: Quorum): string {
  return `${q.nodes - q.down.length} of ${q.nodes} nodes online${q.down.length ? ` (down: ${q.down.join(', ')})` : ''}`;
}

/** What to do about a cluster without quorum (doctor's fix, plan's warning). */
export function quorumFix(q: Quorum): string {
  return `bring ${q.down.length ? q.down.join(', ') : 'the missing nodes'} back (\`pvecm status\` on a node that is up shows the votes); for a node gone for good, \`pvecm expected <votes of the nodes up>\` once it is surely off; a QDevice keeps a two-node cluster quorate with one node down`;
}

/** A plan's warning for site `site` without quorum; `vms`: how many VMs of the plan are there, if known. */
export function noQuorumWarning(site: string, q: Quorum, vms?: number): string {
  const waits = vms === undefined ? 'the changes planned there' : `its ${vms} VM(s)`;
  return `site ${site}: cluster ${q.cluster} has no quorum (${describeNodesUp(q)}): Proxmox refuses creates, starts and config changes until it is back, and apply waits on ${waits} (NoQuorum). Fix: ${quorumFix(q)}`;
}
