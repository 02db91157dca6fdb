/**
 * What observe says of a VM whose node is offline (a crash, a power cut, a partition: the bulk
 * list shows the node `offline` and its VMs `status: unknown`, and PVE answers any request to the
 * node `595 No route to host`): Ready False (NodeOffline), what is unknown or waits until it is
 * back, and nothing sent to the node meanwhile. apply and delete stop waiting for it after
 * `--offline-grace` (local/runtime.ts offlineTooLong).
 */
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { atProvider, ready } from './conditions.ts';
import type { StepContext } from './context.ts';
import type { ObservedVm } from './lookup.ts';
import type { Observed } from './observe.ts';

/**
 * The node of our task in flight is offline: its end cannot be read until it is back (a task whose
 * node crashed died with it; what it left is judged then, as any ended task's). Ready False
 * (NodeOffline); nothing else is done meanwhile, as for a task still running, and nothing is sent
 * to the node until the list shows it back (memory.offlineTaskNode). Before, the failed read of the
 * task's status was a bare ReconcileError ("No route to host"), its retries at every reconcile.
 */
export function onOfflineTaskNode(ctx: StepContext, r: ProxmoxVM, vmid: number, node: string, task: string): Observed {
  return nodeOfflineReport(
    ctx,
    r,
    node,
    `the end of task ${task} (VM ${vmid}) cannot be read until it is back; a task whose node crashed died with it, and what it left is looked at then`,
  );
}

/**
 * The VM's node is offline: Ready False (NodeOffline) until it is back; nothing is sent to it.
 * Being deleted, the VM cannot be destroyed meanwhile, and the delete waits (deleteVm, which says
 * so as Synced False NodeOffline); before, its config read failed at every reconcile (`No route to
 * host`) and `delete` waited for its timeout.
 */
export function onOfflineNode(ctx: StepContext, r: ProxmoxVM, found: ObservedVm): Observed {
  if (r.metadata.deletionTimestamp)
    return nodeOfflineReport(ctx, r, found.node, destroyWaitsForNode(found.node, found.vmid));
  return nodeOfflineReport(
    ctx,
    r,
    found.node,
    `the state of VM ${found.vmid} is unknown until it is back. A node that lost power boots with its VMs stopped (Proxmox starts only those with onboot); the provider then brings VM ${found.vmid} back to spec.forProvider.powerState`,
  );
}

/** Ready False (NodeOffline), `what` saying what is unknown until `node` is back; the VM's state unknown. */
function nodeOfflineReport(ctx: StepContext, r: ProxmoxVM, node: string, what: string): Observed {
  atProvider(r).state = 'unknown';
  ready(r, 'False', 'NodeOffline', `node ${node} of site ${ctx.site.name} is offline: ${what}`);
  return { obs: { exists: true, upToDate: true } };
}

/**
 * What a delete of VM `vmid` on `node`, offline, waits for: its config lives in that node's
 * directory of /etc/pve, and only that node's services destroy it (qemu-server's destroy_vm runs
 * where the config is), so only the node's return, or the config moved to a node that is up, lets
 * it go on.
 */
export function destroyWaitsForNode(node: string, vmid: number): string {
  return `VM ${vmid} cannot be destroyed until it is back, and the delete waits for it. If the node is gone for good, move the VM's config to a node that is up (on that node: mv /etc/pve/nodes/${node}/qemu-server/${vmid}.conf /etc/pve/nodes/$(hostname)/qemu-server/), and the delete goes on there`;
}
