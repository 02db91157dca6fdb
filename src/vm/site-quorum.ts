/**
 * A site's quorum, for a plan (plan.ts): without it Proxmox refuses every create, start and
 * config change (src/proxmox/quorum.ts), and `apply` would wait on `NoQuorum` after a plan that
 * showed its changes as if they could be made. One `GET /cluster/status` per site, begun with the
 * plan's first read of the site and shared by its resources; nothing is said when it cannot be
 * read (no Sys.Audit on /), as `plan` and `doctor` do.
 */
import { abortable } from '../proxmox/deadline.ts';
import { type Quorum, quorumOf } from '../proxmox/quorum.ts';
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
