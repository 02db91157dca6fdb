/**
 * A site's quorum, for a plan (plan.ts) and for a destroy or a move to another site sent again
 * after a refusal for want of it (delete.ts, site-move-request.ts): without it Proxmox
 * refuses every create, start and config change (src/proxmox/quorum.ts), and `apply` would wait on
 * `NoQuorum` after a plan that showed its changes as if they could be made. One
 * `GET /cluster/status` per site, begun with the plan's first read of the site and shared by its
 * resources; nothing is said when it cannot be read (no Sys.Audit on /), as `plan` and `doctor` do.
 */
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { getCondition } from '../engine/resource.ts';
import { abortable } from '../proxmox/deadline.ts';
import { describeNodesUp, type Quorum, quorumOf } from '../proxmox/quorum.ts';
import { noQuorum } from './conditions.ts';
import type { StepContext } from './context.ts';
import type { SiteContext } from './site-cache.ts';

/** How long one read serves the plans of a site (a plan's reads take about as long). */
const SERVES_MS = 10_000;

const reads = new WeakMap<SiteContext, { at: number; data: Promise<Quorum | undefined> }>();

/** The site's quorum, undefined when it cannot be read or the node is in no cluster. */
export function siteQuorum(ctx: StepContext): Promise<Quorum | undefined> {
  const now = ctx.site.now();
  let read = reads.get(ctx.site);
  if (!read || now - read.at >= SERVES_MS) {
    // The site's own client: a plan aborted stops waiting, the read goes on for the others.
    read = { at: now, data: ctx.site.client.clusterStatus().then(quorumOf, () => undefined) };
    reads.set(ctx.site, read);
  }
  return abortable(read.data, ctx.signal);
}

/**
 * Before a request whose worker failed for want of quorum is sent again (the resource's Synced says
 * NoQuorum). A destroy: qemu-server's destroy_vm does not check quorum before it forks its worker
 * (src/PVE/API2/Qemu.pm:2776-2893 at the mirror's HEAD), which then fails at its first write of
 * the config (`unable to open file '/etc/pve/nodes/N/qemu-server/V.conf.tmp.PID' - Permission
 * denied`). A move to another site: remote_migrate_vm checks the source's quorum (:5741), and the
 * target's mtunnel refuses inside the source's worker (:6709, `migration aborted`). Without this
 * read every retry added a failed task to the node's log while the quorum stayed lost (F91). A
 * fresh read (not the plans' shared one) of `ctx`'s site: the request goes as soon as the quorum
 * is back. Throws NoQuorum while it is lost, `what` saying what waits; nothing when it cannot be
 * read. `status`: the site's `/cluster/status`, when the caller read it for something else.
 */
export async function awaitQuorumAfterRefusal(
  ctx: StepContext,
  r: ProxmoxVM,
  what: string,
  status?: Array<Record<string, unknown>>,
): Promise<void> {
  if (getCondition(r, 'Synced')?.reason !== 'NoQuorum') return;
  const q = status ? quorumOf(status) : await ctx.client.clusterStatus().then(quorumOf, () => undefined);
  if (q && !q.quorate)
    throw noQuorum(
      ctx.site.name,
      `${what} once cluster ${q.cluster} has quorum again (${describeNodesUp(q)}); the last try failed without it`,
    );
}
