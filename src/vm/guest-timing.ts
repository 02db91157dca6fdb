/**
 * When to ask a booting guest again. No Proxmox API says when a guest agent starts answering or
 * when cloud-init ends in the guest, so both are polled, per VM. A fixed interval wastes half of
 * it on average at every milestone (the agent, then cloud-init), which for a fleet in phases adds
 * up phase after phase. Instead:
 *   - the first guest of a kind (its image or template) on a site is asked after a share (a quarter, pollDelay of task-watch.ts)
 *     of the time it has been up, within [floor, the agent poll]: seen within that share of its
 *     boot, for reads that grow with the log of the boot time;
 *   - the site learns from each boot it saw from the start (the VM was seen stopped, then running)
 *     how long the milestone took: the first ask that hit (the last that missed came at most a
 *     share of the age before it);
 *   - the next guest of that kind is first asked at the learned time, then as the first one. For
 *     boots alike that is one ask, and no later than the ask after a miss at the last miss's time
 *     would have come (its share of the age later): learning saves a request without delaying.
 * A command run in the guest through the agent (`cloud-init status`) is asked about the same way,
 * from when it was started: after the floor, then a share of its age, and once the site saw one
 * exit, first at the time that took.
 * Times are this process's clock (a boot's PVE uptime is in the cluster's), and what is learned
 * lives as long as the site's context: a restarted provider asks as the first time.
 */
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import type { StepContext } from './context.ts';
import type { ResourceMemory, SiteContext } from './site-cache.ts';
import { pollDelay } from './task-watch.ts';

export type GuestMilestone = 'agent' | 'cloudInit';

/** The shortest wait between two asks of one guest. */
const FLOOR_MS = 100;

/** One boot of one VM, as this process follows it. */
interface BootWatch {
  /** This process's clock when the VM was first seen running in this boot. */
  since: number;
  /** Whether the boot was seen from its start (the VM was seen stopped just before). */
  fromStart: boolean;
  /** Per milestone: the age at which it was first seen reached. */
  reachedAt: Partial<Record<GuestMilestone, number>>;
}

const boots = new WeakMap<ResourceMemory, BootWatch>();
const stopped = new WeakSet<ResourceMemory>();
/** Per site, per kind of guest and milestone: the learned time (ms after the boot); and a guest command's run. */
const learned = new WeakMap<SiteContext, Map<string, number>>();

/** The kind of guest a VM runs, for what one boot teaches about the next. */
function kindOf(r: ProxmoxVM): string {
  const fp = r.spec.forProvider;
  return fp.image ?? (fp.template ? JSON.stringify(fp.template) : (fp.templateRef?.name ?? 'vm'));
}

/** The VM is not running: its next boot is seen from its start. */
export function guestStopped(memory: ResourceMemory): void {
  boots.delete(memory);
  stopped.add(memory);
}

/** A new boot was seen (the VM running, its uptime new or gone back). */
export function guestBooted(ctx: StepContext): void {
  const fromStart = stopped.has(ctx.memory);
  stopped.delete(ctx.memory);
  boots.set(ctx.memory, { since: ctx.site.now(), fromStart, reachedAt: {} });
}

/** This ask found `milestone` reached: learned for the site's next guest of this kind. */
export function guestReached(ctx: StepContext, r: ProxmoxVM, milestone: GuestMilestone): void {
  const b = boots.get(ctx.memory);
  if (!b || b.reachedAt[milestone] !== undefined) return;
  const took = ctx.site.now() - b.since;
  b.reachedAt[milestone] = took;
  if (b.fromStart) learn(ctx, learnedKey(r, milestone), took);
}

/** How long to wait before asking the guest about `milestone` again. */
export function guestPollMs(ctx: StepContext, r: ProxmoxVM, milestone: GuestMilestone): number {
  const b = boots.get(ctx.memory);
  if (!b) return ctx.options.agentPollMs ?? 5000;
  return askDelay(ctx, b.since, learnedKey(r, milestone));
}

/** How long to wait before asking about a command started in the guest at `startedAt`. */
export function guestExecPollMs(ctx: StepContext, startedAt: number): number {
  return askDelay(ctx, startedAt, EXEC_KEY);
}

/** A command started at `startedAt` was seen exited: learned for the site's next one. */
export function guestExecExited(ctx: StepContext, startedAt: number): void {
  learn(ctx, EXEC_KEY, ctx.site.now() - startedAt);
}

function learnedKey(r: ProxmoxVM, milestone: GuestMilestone): string {
  return `${kindOf(r)}\u0000${milestone}`;
}

/** The learned key of a guest command's run (no milestone is called `exec`). */
const EXEC_KEY = '\u0000exec';

/** Learn that `key` took `took` ms: the mean of what was learned and this. */
function learn(ctx: StepContext, key: string, took: number): void {
  let site = learned.get(ctx.site);
  if (!site) {
    site = new Map();
    learned.set(ctx.site, site);
  }
  const before = site.get(key);
  site.set(key, before === undefined ? took : (before + took) / 2);
}

/**
 * The task watcher's cadence from `since`: the learned time of `key` as an estimate at scale 1,
 * then a share of the age, within [floor, the agent poll].
 */
function askDelay(ctx: StepContext, since: number, key: string): number {
  const cap = ctx.options.agentPollMs ?? 5000;
  const expected = learned.get(ctx.site)?.get(key);
  return pollDelay({ since, expectedMs: expected ?? 0 }, ctx.site.now(), {
    floorMs: Math.min(cap, FLOOR_MS),
    maxMs: cap,
    scale: expected === undefined ? undefined : 1,
  });
}
