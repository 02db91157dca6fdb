/**
 * A node's facts that a create's checks read (preflight.ts): whether it answers, its bridges, its
 * storages with their free space, a storage's content. Read once per TTL and shared by every
 * resource of the site, so that a phase of a rollout starting 14 creates on one node reads each
 * fact once, not 14 times, and a resource woken for a slot checks again at no cost.
 *
 * What this process changes is never served stale: the facts its own creates and deletes change
 * (free space, a storage's volumes) are keyed with the site's epoch, which every mutation bumps
 * (SiteContext.invalidate); in-flight creates are counted apart (SiteContext.storageInFlight). A
 * node's health and its bridges change only by others, and are kept a few seconds.
 */

import { abortable } from '../proxmox/deadline.ts';
import type { StepContext } from './context.ts';
import type { SiteContext } from './site-cache.ts';

type Fact = 'status' | 'bridges' | 'storages' | 'content';

/** How long a fact serves; `mutable`: our own mutations change it (keyed with the epoch). */
const FACTS: Record<Fact, { ttlMs: number; mutable: boolean }> = {
  status: { ttlMs: 5_000, mutable: false },
  bridges: { ttlMs: 30_000, mutable: false },
  storages: { ttlMs: 1_000, mutable: true },
  content: { ttlMs: 5_000, mutable: true },
};

interface Entry {
  at: number;
  epoch: number;
  data: Promise<unknown>;
}

const cache = new WeakMap<SiteContext, Map<string, Entry>>();

/**
 * `read` of `fact` on `node` (`key` tells reads of one fact apart, e.g. a storage id), shared by
 * the site's resources. `read` gets the site's own client: a reconcile that is aborted stops
 * waiting, but the read goes on for the others.
 */
export function nodeFact<T>(
  ctx: StepContext,
  fact: Fact,
  node: string,
  read: (client: SiteContext['client']) => Promise<T>,
  key = '',
): Promise<T> {
  const site = ctx.site;
  let entries = cache.get(site);
  if (!entries) {
    entries = new Map();
    cache.set(site, entries);
  }
  const id = `${fact}\u0000${node}\u0000${key}`;
  const { ttlMs, mutable } = FACTS[fact];
  const now = site.now();
  const hit = entries.get(id);
  if (hit && now - hit.at < ttlMs && (!mutable || hit.epoch === site.epoch))
    return abortable(hit.data as Promise<T>, ctx.signal);
  const data = read(site.client);
  const entry: Entry = { at: now, epoch: site.epoch, data };
  entries.set(id, entry);
  data.catch(() => {
    if (entries.get(id) === entry) entries.delete(id);
  });
  return abortable(data, ctx.signal);
}
