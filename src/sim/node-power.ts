/**
 * A node that loses power and boots again (the `node-crash` fault). The crash is what a power cut
 * or a hard reset does to PVE: every worker process on the node is gone (its task reads
 * `unexpected status`, its error paths never run, so its locks, placeholders and copies stay),
 * every QEMU process is gone (the VMs are stopped, without a shutdown), and the node is offline.
 * The boot is what pve-guests.service does: `pvesh create /nodes/localhost/startall`, whose
 * `startall` worker (pve-manager PVE/API2/Nodes.pm startall :2127-2295 at 14a22df) waits for the
 * cluster's quorum (a second at a time, :2194-2200; quorum.ts), removes the backup locks a dead
 * vzdump left (:2094-2112, "removed left over backup lock"), then starts the
 * VMs with `onboot` set that HA does not manage (get_start_stop_list :2068-2091), in `startup`
 * order then by VMID, 3 s apart (or the order's `up`), at most min(cpus - 1, 8) starts at a time,
 * and logs `Starting VM <id> failed: <status>` for each start that failed (a VM still locked by a
 * dead migration: `VM is locked (migrate)`); it fails when the quorum goes again between two
 * starts (:2235).
 */

import type { AuthInfo } from './auth.ts';
import { powerOff } from './guest-cloudinit.ts';
import { checkCfsQuorum, quorate } from './quorum.ts';
import { startWorker } from './routes/qemu-power.ts';
import type { ClusterState, TaskState, VmState } from './state.ts';
import type { TaskHandle, TaskRunner } from './tasks.ts';

const ROOT: AuthInfo = { authid: 'root@pam', userid: 'root@pam', kind: 'ticket' };

/** How often startall looks for quorum while it waits for it (`sleep(1)`). */
const QUORUM_POLL_MS = 1000;

/** startall's pause after each VM start "to reduce load" ($default_delay for qemu). */
const DEFAULT_START_DELAY_MS = 3000;

/** The crash: workers killed, QEMU processes gone. (The fault has already taken the node offline.) */
export function crashNode(c: ClusterState, tasks: TaskRunner, node: string): void {
  tasks.killNode(node);
  for (const vm of c.vms.values()) {
    if (vm.node !== node || vm.status !== 'running') continue;
    powerOff(c, vm);
  }
  for (const ct of c.containers.values()) if (ct.node === node) ct.status = 'stopped';
}

/** The boot: a new boot time, then the `startall` worker. (The fault has already brought the node online.) */
export function bootNode(c: ClusterState, tasks: TaskRunner, node: string): void {
  const n = c.nodes.get(node);
  if (!n) return;
  n.bootTime = c.clock.epoch();
  tasks.start(node, 'startall', '', ROOT, (t) => startAll(c, tasks, t, node));
}

/** `startup: order=N,up=S` of a config, as pve_parse_startup_order reads what startall uses. */
function startupOrder(vm: VmState): { order: number; upMs: number | undefined } {
  const s = vm.config.startup ?? '';
  const order = /(?:^|,)order=(\d+)/.exec(s);
  const up = /(?:^|,)up=(\d+)/.exec(s);
  return {
    order: order ? Number(order[1]) : Number.MAX_SAFE_INTEGER,
    upMs: up ? Number(up[1]) * 1000 : undefined,
  };
}

async function startAll(c: ClusterState, tasks: TaskRunner, t: TaskHandle, node: string): Promise<void> {
  // A node that boots into a cluster without quorum (the others still down) waits for it, a
  // second at a time, for as long as it takes (Nodes.pm:2194-2200).
  if (!quorate(c)) {
    t.log('waiting for quorum ...');
    while (!quorate(c)) await t.sleep(QUORUM_POLL_MS);
    t.log('got quorum');
  }
  for (const vm of c.vms.values()) {
    if (vm.node !== node || vm.config.lock !== 'backup') continue;
    delete vm.config.lock;
    t.log(`removed left over backup lock from '${vm.vmid}'!`);
  }
  const cpus = c.nodes.get(node)?.cpus ?? 2;
  const maxWorkers = Math.min(Math.max(1, cpus - 1), 8);
  const byOrder = new Map<number, VmState[]>();
  for (const vm of c.vms.values()) {
    if (vm.node !== node || vm.haManaged || !/^(1|yes|on|true)$/.test(vm.config.onboot ?? '')) continue;
    const { order } = startupOrder(vm);
    byOrder.set(order, [...(byOrder.get(order) ?? []), vm]);
  }
  const running = new Map<TaskState, number>();
  const finish = async (all: boolean): Promise<void> => {
    while (running.size && (all || running.size >= maxWorkers)) {
      await t.wait(() => Promise.race([...running.keys()].map((task) => task.done)));
      for (const [task, vmid] of running) {
        if (task.status !== 'stopped') continue;
        running.delete(task);
        if (task.exitstatus !== 'OK' && !task.exitstatus?.startsWith('WARNINGS'))
          t.log(`Starting VM ${vmid} failed: ${task.exitstatus}`);
      }
    }
  };
  for (const order of [...byOrder.keys()].sort((a, b) => a - b)) {
    for (const vm of byOrder.get(order)!.sort((a, b) => a.vmid - b.vmid)) {
      // A VM destroyed or migrated away while startall waited is not this node's any more.
      if (c.vms.get(vm.vmid) !== vm || vm.node !== node || vm.status === 'running') continue;
      // "abort when we loose quorum" (:2235): the task fails with check_cfs_quorum's die.
      checkCfsQuorum(c);
      t.log(`Starting VM ${vm.vmid}`);
      const upid = tasks.start(node, 'qmstart', String(vm.vmid), ROOT, (w) => startWorker(c, w, vm, false));
      running.set(c.tasks.get(upid)!, vm.vmid);
      const { upMs } = startupOrder(vm);
      if (upMs !== undefined) t.log(`Waiting for ${upMs / 1000} seconds (startup delay)`);
      await t.sleep(upMs ?? DEFAULT_START_DELAY_MS);
      await finish(false);
    }
    await finish(true);
  }
}
