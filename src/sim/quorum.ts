/**
 * The cluster's quorum, and what Proxmox refuses without it. Every node has one corosync vote (a
 * QDevice one more, the topology's `qdevice`); the cluster is quorate while the nodes that are up
 * hold more than half of the votes. A node that crashed or is cut off (`node-crash`,
 * `node-offline`) takes its vote away, so a two-node cluster without a QDevice loses quorum with
 * either node, and pmxcfs on the other one turns /etc/pve read-only.
 *
 * Without quorum:
 *   - the handlers that call `PVE::Cluster::check_cfs_quorum()` die at once with `cluster not
 *     ready - no quorum?` (pve-cluster src/PVE/Cluster.pm:121-132 at the mirror's HEAD): create_vm,
 *     vm_start, clone_vm, migrate_vm and its GET precondition, remote_migrate_vm and mtunnel
 *     (qemu-server src/PVE/API2/Qemu.pm:1289, :3627, :4469, :5397, :5569, :5741, :6709 at e6352be);
 *   - every other write of a VM's config fails where it is written: file_set_contents opens
 *     `<file>.tmp.<pid>` on the read-only pmxcfs (pve-common src/PVE/File.pm:49-60), `unable to
 *     open file '/etc/pve/nodes/N/qemu-server/V.conf.tmp.P' - Permission denied`. What the worker
 *     did before that write stays done: a resize has grown the volume, a destroy has freed the disks.
 * Reads (the config, the lists, the guest agent) and what writes no config (stop, shutdown) work.
 */
import { die } from './errors.ts';
import type { ClusterState } from './state.ts';

/** Whether the nodes that are up hold a majority of the cluster's votes (one node alone is its own majority). */
export function quorate(c: ClusterState): boolean {
  const nodes = [...c.nodes.values()];
  const votes = nodes.length + (c.qdevice ? 1 : 0);
  const up = nodes.filter((n) => n.online).length + (c.qdevice ? 1 : 0);
  return 2 * up > votes;
}

/**
 * The node that answers the cluster's API (`/cluster/status`'s `local`): the endpoint's, the first,
 * or while it is down the first node up, as a VIP or load balancer in front of pveproxy fails over
 * (a crashed node answering is a state real PVE cannot show). remote_migrate puts the VM there
 * (qemu-server Qemu.pm:5844-5858).
 */
export function answeringNode(c: ClusterState): string | undefined {
  const nodes = [...c.nodes.values()];
  return (nodes.find((n) => n.online) ?? nodes[0])?.name;
}

/** PVE::Cluster::check_cfs_quorum: the handlers that need quorum die before anything else. */
export function checkCfsQuorum(c: ClusterState): void {
  if (quorate(c)) return;
  c.quorumRefusals++;
  die('cluster not ready - no quorum?');
}

/**
 * A write of VM `vmid`'s config on `node` (write_config, destroy_config): refused while the
 * cluster has no quorum, with the text of file_set_contents' failed open on the read-only pmxcfs.
 */
export function checkConfigWrite(c: ClusterState, node: string, vmid: number): void {
  if (quorate(c)) return;
  c.quorumRefusals++;
  // (The worker's pid: any; one taken from the seeded random stream would shift every later draw.)
  const pid = 4096 + (vmid % 28672);
  throw new Error(
    `unable to open file '/etc/pve/nodes/${node}/qemu-server/${vmid}.conf.tmp.${pid}' - Permission denied`,
  );
}
