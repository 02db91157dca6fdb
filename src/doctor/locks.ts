/**
 * `doctor`'s look for VMs whose lock no worker holds (proxmox/lock-holders.ts, which the
 * provider's reconciles share through vm/lock-holder.ts): a warning, since the provider can work
 * around such a VM but not change it.
 */
import { lockHolding, nodesToRead, unlockAdvice, WORKER_LOCKS } from '../proxmox/lock-holders.ts';
import type { ClusterResource } from '../proxmox/types.ts';
import type { Ctx } from './cluster.ts';
import { msg } from './connection.ts';

/**
 * VMs whose lock no running task holds (proxmox/lock-holders.ts): the worker died with its node or
 * was killed, and PVE keeps the lock until someone runs `qm unlock`. The provider waits on such a
 * VM no more (it reports LockWithoutTask), but it cannot change, migrate, back up or delete it: a
 * warning here, with what to check first. One look: a worker that ends between the VM list and
 * the task lists shows as a lock no task holds; run doctor again to confirm.
 */
export async function checkLocks(ctx: Ctx): Promise<void> {
  let vms: ClusterResource[];
  let nodes: string[] | undefined;
  try {
    const all = await ctx.c.clusterResources();
    nodes = nodesToRead(all);
    if (!nodes) {
      ctx.add({ id: 'locks', status: 'skip', detail: 'a node is not online: its workers cannot be seen' });
      return;
    }
    vms = all.filter((e) => (e.type === 'qemu' || e.type === 'lxc') && e.lock && WORKER_LOCKS.has(e.lock));
  } catch (e) {
    ctx.add({ id: 'locks', status: 'skip', detail: `cannot list VMs: ${msg(e)}` });
    return;
  }
  const dead: string[] = [];
  const fixes: string[] = [];
  for (const vm of vms) {
    const vmid = Number(vm.vmid);
    const holding = await lockHolding(ctx.c, nodes, vmid, vm.lock!);
    if (holding.kind !== 'none') continue;
    const last = holding.last ? `; its last task ${holding.last.upid} ended: ${holding.last.status}` : '';
    dead.push(
      `VM ${vmid}${vm.name ? ` (${vm.name})` : ''} on ${vm.node} is locked (${vm.lock}) and no task holds it${last}`,
    );
    fixes.push(`VM ${vmid}: ${unlockAdvice(vm.lock!, vmid, vm.node ?? 'its node')}`);
  }
  if (!dead.length) {
    ctx.add({
      id: 'locks',
      status: 'ok',
      detail: `no lock without a task (${vms.length} VM(s) locked by a running task)`,
    });
    return;
  }
  ctx.add({
    id: 'locks',
    status: 'warn',
    detail: `${dead.join('; ')}: the worker died (a node restart, an OOM kill), and Proxmox VE never clears such a lock`,
    fix: fixes.join('; '),
  });
}
