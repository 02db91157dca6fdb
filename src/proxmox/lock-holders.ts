/**
 * Which PVE worker holds a VM's config lock, from the nodes' task lists. PVE's operations take a
 * VM's lock inside their worker (qemu-server `QemuMigrate.pm:836` phase1 writes `lock: migrate`;
 * the snapshot, rollback and suspend workers likewise) and drop it at their end, on success and on
 * error. A worker that vanished (a node reboot, an OOM kill, `kill -9`) drops nothing: PVE never
 * clears that lock again; an operator does (`qm unlock`). Used by the provider's reconciles
 * (vm/lock-holder.ts) and by `doctor`.
 *
 * Every worker that locks a VM runs under the VM's VMID as its task id (qemu-server
 * `API2/Qemu.pm`: fork_worker of `qmigrate` :5663 and :5865, `qmsnapshot` :6229, `qmrollback`
 * :6431, `qmdelsnapshot` :6507, `qmtunnel` :7228, the suspend :4125), except a backup of several
 * VMs, whose `vzdump` task has no id: for `backup`, any running `vzdump` on the site holds it.
 * `create` and `clone` are placeholders' locks (the create's own worker, judged by the task that
 * made the VM), `suspended` a hibernated VM's (no worker holds it; `qm resume` ends it): neither
 * is a worker's lock here.
 */
import type { PveClient } from './client.ts';
import type { ClusterResource, TaskListEntry } from './types.ts';

/** Locks a worker holds while it runs. */
export const WORKER_LOCKS: ReadonlySet<string> = new Set([
  'backup',
  'migrate',
  'rollback',
  'snapshot',
  'snapshot-delete',
  'suspending',
]);

/** The newest task of a VM that ended, as a look found it. */
export interface EndedTask {
  upid: string;
  status: string;
}

export type LockHolding = { kind: 'held'; upid: string } | { kind: 'none'; last?: EndedTask } | { kind: 'unknown' };

/**
 * The nodes whose task lists say what holds a lock, from a cluster's `/cluster/resources` entries:
 * every node, or undefined while one is not online (its workers, if any run, cannot be seen).
 */
export function nodesToRead(entries: ClusterResource[]): string[] | undefined {
  const nodes = entries.filter((e) => e.type === 'node');
  if (nodes.some((n) => n.status !== 'online')) return undefined;
  return nodes.map((n) => n.node ?? '').filter(Boolean);
}

/**
 * What holds `lock` of VM `vmid` now, from the task lists of `nodes` (nodesToRead): a running task (its UPID), none (and the newest of the VM's tasks that ended, if any is
 * listed), or unknown (a list could not be read: its node's workers may be running).
 */
export async function lockHolding(
  client: PveClient,
  nodes: string[],
  vmid: number,
  lock: string,
): Promise<LockHolding> {
  let last: (EndedTask & { endtime: number }) | undefined;
  for (const node of nodes) {
    let tasks: TaskListEntry[];
    try {
      tasks = await client.listTasks(node, { source: 'all', vmid, limit: 20 });
      if (lock === 'backup') tasks.push(...(await client.listTasks(node, { source: 'active', typefilter: 'vzdump' })));
    } catch {
      return { kind: 'unknown' };
    }
    for (const t of tasks) {
      const running = t.endtime === undefined && (t.status === undefined || /^running$/i.test(t.status));
      if (running) return { kind: 'held', upid: t.upid };
      if (t.endtime !== undefined && t.status && (!last || t.endtime > last.endtime))
        last = { upid: t.upid, status: t.status, endtime: t.endtime };
    }
  }
  return { kind: 'none', ...(last ? { last: { upid: last.upid, status: last.status } } : {}) };
}

/** What an operator checks, then runs, for VM `vmid` on `node` whose `lock` no worker holds. */
export function unlockAdvice(lock: string, vmid: number, node: string): string {
  return `${BEFORE_UNLOCK[lock]?.(vmid) ?? ''}then run \`qm unlock ${vmid}\` on node ${node}`;
}

/** What to look at before unlocking, per lock. */
const BEFORE_UNLOCK: Record<string, (vmid: number) => string> = {
  migrate: (vmid) =>
    `a migration that died may have left copies of the disks on the target node: there, every volume \`pvesm list STORAGE --vmid ${vmid}\` lists on a storage of that node alone (not shared) is one (the VM's own are on its node); remove them (\`pvesm free VOLID\`), or a second migration finds a cloud-init volume's name taken; `,
  snapshot: (vmid) =>
    `a snapshot half made is left with \`snapstate: prepare\` (\`qm listsnapshot ${vmid}\`; remove it with \`qm delsnapshot ${vmid} NAME --force\`), `,
  'snapshot-delete': (vmid) =>
    `a snapshot half removed is left with \`snapstate: delete\` (\`qm delsnapshot ${vmid} NAME --force\`), `,
  rollback: () => 'a rollback that died may have left the disks half rolled back (roll back again after unlocking), ',
  backup: () => 'a backup that died leaves a partial archive on its backup storage, ',
  suspending: (vmid) => `a hibernation that died may have left a state volume (\`qm config ${vmid}\`, \`vmstate\`), `,
};
