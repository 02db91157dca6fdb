/**
 * The VMIDs a destroy may still reach. PVE applies a request it received even after the client
 * gave up or died, and a destroy names only the VMID: qemu-server 9.2.6 (e6352be)
 * `src/PVE/API2/Qemu.pm:2776` destroy_vm takes no digest nor any expectation of the VM, and runs
 * as a `qmdestroy` task with the VMID as its id (`:2893`). So a `DELETE` whose answer was lost can
 * be applied after another destroy removed the VM, and then destroys whatever was made at that
 * VMID meanwhile: after a lost state file, a re-applied resource cloned at the VMID such a destroy
 * then reached (fault-search F89). No state of ours survives to say a destroy is pending; PVE's task
 * lists do: a VMID whose destroy ended within the late-request bound (the engine's
 * `unknownOutcomeWaitMs`, 30 s) and the clock skew allowed is not taken for a create or a move
 * (vmid.ts freeVmids). A destroy still pending was sent before the destroy the list shows (the VM
 * was there when it was sent), so it is applied within the bound of that one's end.
 *
 * One read per online node of the site (`typefilter=qmdestroy`), shared by the choices of the
 * next second while this process sends no destroy (PveClient destroysSent): a destroy of its own
 * is never missed, and one of another's that ended in that second is missed as the bulk list's
 * own freshness allows for (cluster-list.ts): no read can promise more. (At 10,000 VMs, where
 * resources read their own view rather than a shared list, a read per choice's list was nearly a
 * read per create.) A node the list shows offline is not read: it can apply nothing, and its VMs
 * stay listed.
 *
 * A node is read once at a time, whoever asks. One that does not answer (listed online, its API
 * hung: pveproxy or pvedaemon, a partition between nodes) fails only the choices whose VM is to be
 * made on it (NodeUnreachable, retried); a choice placed elsewhere waits for it at most BESIDE_MS
 * once its own nodes answered, and goes on without its destroys. A late destroy reaches a VM only
 * on the node it was sent to: pveproxy hands `/nodes/{node}/...` to that node, and destroy_vm loads
 * the config from the node it runs on (qemu-server src/PVE/QemuConfig.pm:67-71 cfs_config_path at
 * e6352be6, `$nodename` when none is given). So a create on another node (placedOn) is clear of it;
 * one node that did not answer held every create of the site until it did. What is not covered
 * then: the new VM moved onto that node within the window while a destroy sent there is still to
 * be applied. With no placement given (a move's target, which may change with the endpoint's
 * failover before it is sent), every node is waited for.
 */
import { abortable, deadline } from '../proxmox/deadline.ts';
import { AuthenticationError, PermissionError, TlsError } from '../proxmox/index.ts';
import type { ClusterResource } from '../proxmox/types.ts';
import { reason } from './conditions.ts';
import type { StepContext } from './context.ts';
import type { SiteContext } from './site-cache.ts';
import { taskAuthId } from './tasks.ts';

/**
 * How long before the window a destroy may have begun and still end in it (the task list's `since`
 * is a start time): a destroy that ran longer is not seen (PVE >= 7; PVE 6 lists the newest 50).
 */
const LONGEST_DESTROY_S = 600;

/** VMID -> the auth ids (`user@realm` or `user@realm!token`) of its destroys in the window. */
export type RecentDestroys = Map<number, Set<string>>;

/**
 * One node's destroy tasks as last read, and the read under way: one at a time per node, shared
 * by every choice, so a node that hangs holds one request, not one per choice.
 */
interface NodeRead {
  /** When the last read began (this process's clock), and the client's destroysSent then. */
  at: number;
  sent: number;
  /** What the last read that ended gave: the node's destroys in the window, or why it failed. */
  result?: { destroys: RecentDestroys } | { error: unknown };
  pending?: Promise<void>;
}

/** How long a read serves the site's choices (this process's clock). */
const SERVES_MS = 1000;

/** How long a choice waits for the nodes it is not placed on once its own answered (this process's clock). */
const BESIDE_MS = 2000;

const reads = new WeakMap<SiteContext, Map<string, NodeRead>>();

/**
 * The window of a late destroy, in ms: the late-request bound, and as much again for the clock
 * skew between this process and the nodes (NTP keeps them far closer; a wider look only skips
 * more VMIDs, or waits longer).
 */
export function lateDestroyWindowMs(ctx: StepContext): number {
  return 2 * (ctx.options.unknownOutcomeWaitMs ?? 30_000);
}

/**
 * The VMIDs of the site whose destroy runs or ended within lateDestroyWindowMs, from the task
 * lists of the `nodes` (the bulk list's node entries) online. `placedOn`: the nodes the VM will be
 * made on (see the top of this file). Those (all, without it) are waited for, and one whose list
 * could not be read fails the call; the others are waited for up to BESIDE_MS more, and read
 * where they answer.
 */
export async function recentlyDestroyed(
  ctx: StepContext,
  nodes: ClusterResource[],
  placedOn?: readonly string[],
): Promise<RecentDestroys> {
  const at = ctx.site.now();
  const sent = ctx.site.client.destroysSent;
  const byNode = reads.get(ctx.site) ?? new Map<string, NodeRead>();
  reads.set(ctx.site, byNode);
  const needed = (node: string) => !placedOn || placedOn.includes(node);
  // A node not online cannot apply a request, nor be asked; its VMs stay in the list meanwhile.
  const looks = nodes
    .filter((n) => n.status === 'online' && n.node)
    .map((n) => {
      const node = n.node!;
      let r = byNode.get(node);
      const fresh = r?.result && 'destroys' in r.result && r.sent === sent && at - r.at < SERVES_MS;
      if (!r?.pending && !fresh) r = startRead(ctx, byNode, node, at, sent);
      return { node, r: r! };
    });
  await abortable(Promise.all(looks.filter((l) => needed(l.node)).map((l) => l.r.pending)), ctx.signal);
  const beside = looks.filter((l) => !needed(l.node) && l.r.pending).map((l) => l.r.pending);
  if (beside.length) {
    const d = deadline(BESIDE_MS, ctx.signal);
    try {
      await abortable(Promise.all(beside), d.signal);
    } catch (e) {
      if (ctx.signal?.aborted) throw e; // (past BESIDE_MS: go on without them)
    } finally {
      d.release();
    }
  }
  const out: RecentDestroys = new Map();
  for (const { node, r } of looks) {
    const res = r.result;
    if (res && 'destroys' in res) {
      for (const [vmid, by] of res.destroys) out.set(vmid, new Set([...(out.get(vmid) ?? []), ...by]));
    } else if (needed(node)) throw unanswered(ctx, node, res?.error, placedOn !== undefined);
  }
  return out;
}

/** Why a choice placed on `node` waits: its destroys could not be read. */
function unanswered(ctx: StepContext, node: string, error: unknown, placed: boolean): Error {
  // Credentials and certificates are the site's to fix, reported as such.
  if (error instanceof AuthenticationError || error instanceof PermissionError || error instanceof TlsError)
    return error;
  return reason(
    'NodeUnreachable',
    `node ${node} of site ${ctx.site.name} did not answer the read of its destroy tasks (${error instanceof Error ? error.message : String(error)}); ${placed ? `the VM is made there once it answers` : 'no VMID is chosen on the site until it answers'}, as a destroy sent there earlier (by anyone) may still be applied to what is made at its VMID. Check: systemctl status pveproxy pvedaemon on node ${node}${placed ? ', or pin spec.forProvider.node to another node' : ''}`,
    true,
  );
}

/** Begin a read of `node`'s destroy tasks; the read ends with its result recorded, never rejected. */
function startRead(ctx: StepContext, byNode: Map<string, NodeRead>, node: string, at: number, sent: number): NodeRead {
  const r: NodeRead = byNode.get(node) ?? { at, sent };
  r.at = at;
  r.sent = sent;
  r.pending = readNode(ctx, node, at).then(
    (destroys) => {
      r.result = { destroys };
    },
    (error: unknown) => {
      r.result = { error };
    },
  );
  r.pending.finally(() => {
    r.pending = undefined;
  });
  byNode.set(node, r);
  return r;
}

async function readNode(ctx: StepContext, node: string, at: number): Promise<RecentDestroys> {
  // The site's own client: a caller aborted stops waiting, the read goes on for the others.
  const client = ctx.site.client;
  const from = Math.floor((at - lateDestroyWindowMs(ctx)) / 1000);
  const withSince = (await client.capabilities()).version.major >= 7;
  const out: RecentDestroys = new Map();
  const tasks = await client.listTasks(node, {
    source: 'all',
    typefilter: 'qmdestroy',
    ...(withSince ? { since: from - LONGEST_DESTROY_S, limit: 500 } : { limit: 50 }),
  });
  for (const t of tasks) {
    const vmid = Number(t.id);
    if (!Number.isInteger(vmid)) continue;
    if (t.endtime !== undefined && t.endtime < from) continue;
    const by = out.get(vmid) ?? new Set<string>();
    by.add(taskAuthId(t.upid) ?? t.user);
    out.set(vmid, by);
  }
  return out;
}
