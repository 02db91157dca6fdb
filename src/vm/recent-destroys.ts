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
 * A node whose read fails (listed online, its API not answering: pveproxy or pvedaemon hung, a
 * partition between nodes) fails only the choices whose VM is to be made on it (NodeUnreachable,
 * retried), and is not asked again for the late-request bound, so that choices elsewhere do not
 * wait for its timeout each time. A late destroy reaches a VM only on the node it was sent to:
 * pveproxy hands `/nodes/{node}/...` to that node, and destroy_vm loads the config from the node it
 * runs on (qemu-server src/PVE/QemuConfig.pm:67-71 cfs_config_path at e6352be6, `$nodename` when
 * none is given). So a create on another node (placedOn) is clear of it; one failed read held every
 * create of the site until that node answered. What is not covered then: the new VM moved onto the
 * silent node within the window while a destroy sent there is still to be applied. With no
 * placement given (a move's target, which may change with the endpoint's failover before it is
 * sent), every node must be read.
 */
import { abortable } from '../proxmox/deadline.ts';
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

/** One look: the destroys of the nodes that answered, and the error of each node that did not. */
interface Look {
  destroys: RecentDestroys;
  unread: Map<string, unknown>;
}

interface Read {
  at: number;
  /** The client's destroysSent when it began. */
  destroys: number;
  data: Promise<Look>;
}

/** How long a read serves the site's choices (this process's clock). */
const SERVES_MS = 1000;

const reads = new WeakMap<SiteContext, Read>();

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
 * made on (see the top of this file); a node among them (or any, without it) whose list could not
 * be read fails the call with that read's error.
 */
export async function recentlyDestroyed(
  ctx: StepContext,
  nodes: ClusterResource[],
  placedOn?: readonly string[],
): Promise<RecentDestroys> {
  const look = await sharedLook(ctx, nodes);
  for (const [node, error] of look.unread) {
    if (placedOn && !placedOn.includes(node)) continue;
    // Credentials and certificates are the site's to fix, reported as such; anything else is this
    // node not answering: retried, the node named.
    if (error instanceof AuthenticationError || error instanceof PermissionError || error instanceof TlsError)
      throw error;
    throw reason(
      'NodeUnreachable',
      `node ${node} of site ${ctx.site.name} did not answer the read of its destroy tasks (${error instanceof Error ? error.message : String(error)}); ${placedOn ? `the VM is made there once it answers` : 'no VMID is chosen on the site until it answers'}, as a destroy sent there before may still be applied`,
      true,
    );
  }
  return look.destroys;
}

function sharedLook(ctx: StepContext, nodes: ClusterResource[]): Promise<Look> {
  const at = ctx.site.now();
  const destroys = ctx.site.client.destroysSent;
  const cur = reads.get(ctx.site);
  if (cur && cur.destroys === destroys && at - cur.at < SERVES_MS) return abortable(cur.data, ctx.signal);
  const data = readDestroys(ctx, nodes, at);
  reads.set(ctx.site, { at, destroys, data });
  data.catch(() => {
    if (reads.get(ctx.site)?.data === data) reads.delete(ctx.site);
  });
  return abortable(data, ctx.signal);
}

/** Per site, the nodes whose last read failed: when, and its error. */
const silent = new WeakMap<SiteContext, Map<string, { at: number; error: unknown }>>();

async function readDestroys(ctx: StepContext, nodes: ClusterResource[], at: number): Promise<Look> {
  // The site's own client: a caller aborted stops waiting, the read goes on for the others.
  const client = ctx.site.client;
  const from = Math.floor((at - lateDestroyWindowMs(ctx)) / 1000);
  const withSince = (await client.capabilities()).version.major >= 7;
  const out: RecentDestroys = new Map();
  // A node not online cannot apply a request, nor be asked; its VMs stay in the list meanwhile.
  const online = nodes.filter((n) => n.status === 'online' && n.node);
  const quiet = silent.get(ctx.site) ?? new Map<string, { at: number; error: unknown }>();
  silent.set(ctx.site, quiet);
  const unread = new Map<string, unknown>();
  const asked = online.filter((n) => {
    const q = quiet.get(n.node!);
    // Taken as silent, unasked, for the late-request bound (this process's clock): the choices
    // for VMs on other nodes do not wait for its timeout each time.
    if (q && at - q.at < (ctx.options.unknownOutcomeWaitMs ?? 30_000)) unread.set(n.node!, q.error);
    return !unread.has(n.node!);
  });
  const lists = await Promise.allSettled(
    asked.map((n) =>
      client.listTasks(n.node!, {
        source: 'all',
        typefilter: 'qmdestroy',
        ...(withSince ? { since: from - LONGEST_DESTROY_S, limit: 500 } : { limit: 50 }),
      }),
    ),
  );
  for (const [i, l] of lists.entries()) {
    const node = asked[i]!.node!;
    if (l.status === 'fulfilled') quiet.delete(node);
    else {
      unread.set(node, l.reason);
      quiet.set(node, { at, error: l.reason });
    }
  }
  for (const t of lists.flatMap((l) => (l.status === 'fulfilled' ? l.value : []))) {
    const vmid = Number(t.id);
    if (!Number.isInteger(vmid)) continue;
    if (t.endtime !== undefined && t.endtime < from) continue;
    const by = out.get(vmid) ?? new Set<string>();
    by.add(taskAuthId(t.upid) ?? t.user);
    out.set(vmid, by);
  }
  return { destroys: out, unread };
}
