/**
 * When to ask a booting guest again. No Proxmox API says when a guest agent starts answering or
 * when cloud-init ends in the guest, so both are polled, per VM. A fixed interval wastes half of
 * it on average at every milestone (the agent, then cloud-init), which for a fleet in phases adds
 * up phase after phase. Instead:
 *   - the first guest of a kind (its image or template) on a site is asked after a share (a quarter, pollDelay of task-watch.ts)
 *     of the time it has been up, within [floor, the agent poll]: seen within that share of its
 *     boot, for reads that grow with the log of the boot time;
 *   - the site learns from each boot it saw from the start (the VM was seen stopped, then running)
 *     two bounds of the milestone's time: the age of the first ask that hit (it was reached by
 *     then) and of the last ask that missed (not yet); each the mean of what was learned and the
 *     new boot's;
 *   - the next guest of that kind is first asked between the two (with no miss learned yet, a
 *     little before the hit), then, if that missed, at the learned hit, then as the first one. A
 *     first ask at the learned hit alone would never come earlier than the first guest's, whose
 *     hit is up to a share of its age late: phase after phase of a rollout would wait that long.
 *     Probing between the bounds costs at most one ask a boot and closes in on the milestone.
 * A command run in the guest through the agent (`cloud-init status`) is asked about the same way,
 * from when it was started, but from a lower floor and at twice its age (EXEC_FLOOR_MS), and once
 * the site saw one exit, between the bounds learned.
 * An ask is sent some time after the moment it was scheduled for: the requeue's timer fires late,
 * and the reconcile reads before it asks. What is learned is when the ask was sent, so an ask
 * scheduled at the learned time taught a time later by that lag, boot after boot: at speed 100
 * `cloud-init status` (3 ms) settled at 14 ms, and the agent 2 to 3 simulated seconds late. The
 * site learns that lag (ASK_LAG) and schedules an ask that much sooner, so that it is sent at the
 * time aimed at.
 * Times are this process's clock (a boot's PVE uptime is in the cluster's), and what is learned
 * lives as long as the site's context: a restarted provider asks as the first time.
 */
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { keyOf } from '../engine/resource.ts';
import type { StepContext } from './context.ts';
import type { ResourceMemory } from './resource-memory.ts';
import type { SiteContext } from './site-cache.ts';
import { pastExpected, pollDelay } from './task-watch.ts';

export type GuestMilestone = 'agent' | 'cloudInit';

/**
 * The shortest wait between two asks of one guest about a milestone of its boot. It matters only
 * for the first quarter of a second of a boot (past 200 ms a quarter of the age is more) and only
 * for a scout, whose lateness every later boot of its kind inherits until it is learned away: at
 * 100 ms, a boot of 250 ms (the simulator at speed 100) was seen up to 100 ms late; at 50, a real
 * boot of 25 s costs its scout three asks more.
 */
export const FLOOR_MS = 50;

/**
 * How a command run in the guest is asked about before the site has learned one: first after
 * EXEC_FLOOR_MS, then after as long again as it has run (its age doubles between two asks). Such
 * a command (`cloud-init status`) takes well under a second; asked from the milestones' floor, a
 * command of 3 ms was seen after 100 ms, and every later one was first asked at what the first
 * one had taught: the floor again. Doubling from 10 ms asks about a 300 ms command six times, as
 * the floor and a quarter of its age did, and one of 3 ms once.
 */
const EXEC_FLOOR_MS = 10;
const EXEC_GROWTH = 1;

/** One boot of one VM, as this process follows it. */
interface BootWatch {
  /** This process's clock when the VM was first seen running in this boot. */
  since: number;
  /** Whether the boot was seen from its start (the VM was seen stopped just before). */
  fromStart: boolean;
  /** Per milestone: the age at which it was first seen reached. */
  reachedAt: Partial<Record<GuestMilestone, number>>;
  /** Per milestone: the age of the last ask that found it not reached. */
  missedAt: Partial<Record<GuestMilestone, number>>;
  /** Per milestone: whether the site had learned it when this boot began (see askDelay). */
  known: Partial<Record<GuestMilestone, boolean>>;
  /** How long our start of this boot took, from its request to its end seen here (see guestPollMs). */
  startMs?: number;
}

/** What the site learned of a milestone (or a guest command's run): ms after its start. */
interface Bounds {
  /** Reached by then. */
  hit: number;
  /** Not reached then. */
  miss?: number;
}

/** With no miss learned, the first ask comes at this share of the learned hit. */
const PROBE = 0.85;

/**
 * Before a learned time, a boot is asked once a wait of this share of that time has passed, not
 * at every agent poll: at the poll (5 s by default) a real guest whose agent the site has seen
 * answer 25 s into its boot was asked five times before it could, and one of two minutes 24 times,
 * each ask a request to pveproxy and the guest agent. The seed fleet at speed 1 took 14 requests
 * per VM, 7.2 of them agent asks. One ask halfway still sees a guest that boots much faster than
 * those that taught the site (another package list, a warm cache) within half of their time, and
 * teaches the site its time. Once the bounds learned are narrow (NARROW: the kind's boots take
 * alike), a boot is asked at the hit alone. A learned time under twice the poll is asked as before.
 */
const LEARNED_WAIT = 0.5;

/**
 * Once the bounds learned are this close (a share of the hit), a boot's first ask is at the hit,
 * with no probe between them: a probe between close bounds misses about half the time, an ask
 * more for a gain of a few per cent of the boot. A command in the guest (EXEC_NARROW) is short,
 * and what a probe gains of it is smaller still. With probes to the end, the seed fleet took 9.5
 * to 10.3 requests per VM at speed 20, over the target of 10; with these, 9.1 to 9.5.
 */
const NARROW = 0.1;
const EXEC_NARROW = 0.5;

/**
 * A boot (or command) not reached at the learned hit is asked again after this share of the hit,
 * then after a share of the time past it (pastExpected of task-watch.ts): before, it was asked as
 * an unlearned one, after a quarter of its age, and a boot a few hundred milliseconds slower than
 * those that taught the hit (or whose start was seen sooner) was seen a quarter of its boot late,
 * 6 simulated seconds at speed 100. Costs an ask or two for such a boot.
 */
const PAST_HIT = 0.04;

/**
 * How a key is asked about: before it is learned, from `floorMs` at `growth` of its age (default
 * GROWTH of task-watch.ts); once learned, with no probe when the bounds are within `narrow`.
 */
interface Cadence {
  floorMs: number;
  growth?: number;
  narrow: number;
}

/**
 * The lag of an ask: a sample longer than LAG_MAX_MS is not a timer's lateness but a resource held
 * up (a backoff, a busy queue), and teaches nothing; and an ask is never scheduled sooner than half
 * its wait, so that a noisy lag cannot turn the asks into a poll at the floor.
 */
const LAG_MAX_MS = 250;
/** Per site: how late an ask is sent after the time it was scheduled for (moving average, ms). */
const askLag = new WeakMap<SiteContext, number>();
/** Per resource: its next ask comes before the learned time it aims at (see LEARNED_WAIT). */
const earlyAsk = new WeakSet<ResourceMemory>();
/** Per resource: when its next ask was scheduled for (this process's clock). */
const scheduledAsk = new WeakMap<ResourceMemory, number>();

const boots = new WeakMap<ResourceMemory, BootWatch>();
const stopped = new WeakSet<ResourceMemory>();
/** Per site, per kind of guest and milestone: the learned time (ms after the boot); and a guest command's run. */
const learned = new WeakMap<SiteContext, Map<string, Bounds>>();
/** A guest command's last ask that found it running: when it was started, and its age then. */
const execMissed = new WeakMap<ResourceMemory, { startedAt: number; age: number }>();
/** A guest command being asked about: when it was started, whether the site had learned one then. */
const execRuns = new WeakMap<ResourceMemory, { startedAt: number; known: boolean }>();

/**
 * Per site and learned key not learned yet: the boot that asks (the scout: the first one seen of
 * the kind, from its start) and the resources of the others, woken when the scout learns the key.
 * Boots of one kind that begin together (a rollout without phases) would each ask from the floor
 * up, as the first one does; they wait for its answer instead, then ask at its time.
 */
interface Scouting {
  scout: ResourceMemory;
  since: number;
  waiting: Map<ResourceMemory, () => void>;
}
const scouting = new WeakMap<SiteContext, Map<string, Scouting>>();

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
  const now = ctx.site.now();
  const sent = ctx.memory.startSentAt;
  ctx.memory.startSentAt = undefined;
  boots.set(ctx.memory, {
    since: now,
    fromStart,
    reachedAt: {},
    missedAt: {},
    known: {},
    ...(sent !== undefined && fromStart ? { startMs: now - sent } : {}),
  });
}

/**
 * This ask found `milestone` reached: learned for the site's next guest of this kind. `askedAt`:
 * when the ask was sent (default now). What is learned is the ask's age, not its answer's: with
 * the answer's, every boot taught a bound later by the ask's round trip than the one it was asked
 * at, and the next ones, asked at that bound, drifted later boot after boot.
 */
export function guestReached(
  ctx: StepContext,
  r: ProxmoxVM,
  milestone: GuestMilestone,
  askedAt = ctx.site.now(),
): void {
  noteLag(ctx, askedAt);
  const b = boots.get(ctx.memory);
  if (!b || b.reachedAt[milestone] !== undefined) return;
  const took = askedAt - b.since;
  b.reachedAt[milestone] = took;
  if (!b.fromStart) return;
  const key = learnedKey(r, milestone);
  learn(ctx, key, took, b.missedAt[milestone]);
  const s = scouting.get(ctx.site)?.get(key);
  if (!s) return;
  scouting.get(ctx.site)!.delete(key);
  for (const wake of s.waiting.values()) wake();
}

/** This ask (sent at `askedAt`) found `milestone` not reached yet. */
export function guestMissed(ctx: StepContext, milestone: GuestMilestone, askedAt = ctx.site.now()): void {
  noteLag(ctx, askedAt);
  // An ask before the learned time (halfway) found what the bounds said: taught as the boot's last
  // miss, it would widen the learned bounds (the mean), and every later boot would probe lower.
  if (earlyAsk.delete(ctx.memory)) return;
  const b = boots.get(ctx.memory);
  if (b && b.reachedAt[milestone] === undefined) b.missedAt[milestone] = askedAt - b.since;
}

/** How long to wait before asking the guest about `milestone` again. */
export function guestPollMs(ctx: StepContext, r: ProxmoxVM, milestone: GuestMilestone): number {
  const b = boots.get(ctx.memory);
  if (!b) return ctx.options.agentPollMs ?? 5000;
  const key = learnedKey(r, milestone);
  b.known[milestone] ??= learned.get(ctx.site)?.has(key) ?? false;
  if (b.fromStart && !learned.get(ctx.site)?.has(key)) {
    const wait = waitForScout(ctx, r, b, key, milestone);
    if (wait !== undefined) return wait;
  }
  // A first boot of its kind is asked from the floor up, but a boot this process started no sooner
  // than its start took (from the start's request to its task's end seen here), however young it
  // is. A guest's agent answers once its firmware, kernel and init have run, after QEMU started it,
  // which takes longer than PVE's start task (a few seconds; 27 ms at the simulator's speed 100,
  // where the whole boot is 250 ms). From the 50 ms floor, the first boot of a kind at speed 1 (its
  // agent at 25 s) was asked 26 times, 14 of them in its first two seconds.
  const floorMs = Math.max(FLOOR_MS, b.startMs ?? 0);
  return askDelay(ctx, b.since, key, b.known[milestone], { floorMs, narrow: NARROW });
}

/**
 * A boot of a kind the site has not learned: the scout asks (undefined: as the first guest does);
 * another one that began no sooner waits to be woken when the scout learns (the agent poll, if no
 * wake comes). A scout that went (stopped, rebooted) or reached it is replaced by the next asker.
 */
function waitForScout(
  ctx: StepContext,
  r: ProxmoxVM,
  b: BootWatch,
  key: string,
  milestone: GuestMilestone,
): number | undefined {
  let site = scouting.get(ctx.site);
  if (!site) {
    site = new Map();
    scouting.set(ctx.site, site);
  }
  const s = site.get(key);
  const live = s !== undefined && scoutLive(ctx, s, milestone);
  const wake = ctx.options.wake;
  if (!s || !live || s.scout === ctx.memory || b.since < s.since || !wake) {
    const waiting = s?.waiting ?? new Map<ResourceMemory, () => void>();
    waiting.delete(ctx.memory);
    if (!s || !live || b.since < s.since) site.set(key, { scout: ctx.memory, since: b.since, waiting });
    return undefined;
  }
  const resource = keyOf(r);
  s.waiting.set(ctx.memory, () => wake(resource));
  return ctx.options.agentPollMs ?? 5000;
}

/**
 * Whether this boot waits for its kind's scout (see waitForScout) about `milestone`: then the guest
 * is not asked; the scout's answer wakes it. The waiter is still reconciled at the agent poll (in
 * case the wake is lost, or the scout went), and each such reconcile asked its guest: the seed fleet
 * without phases, at speed 1, asked each of the 28 waiters about five times before the scouts
 * answered (5.4 agent asks a VM).
 */
export function waitsForScout(ctx: StepContext, r: ProxmoxVM, milestone: GuestMilestone): boolean {
  const b = boots.get(ctx.memory);
  if (!b?.fromStart) return false;
  const key = learnedKey(r, milestone);
  if (learned.get(ctx.site)?.has(key)) return false;
  const s = scouting.get(ctx.site)?.get(key);
  if (!s || s.scout === ctx.memory || !s.waiting.has(ctx.memory)) return false;
  return scoutLive(ctx, s, milestone);
}

/**
 * A scout that has not asked for this many agent polls (and at least SCOUT_SILENT_MIN_MS) has
 * stopped (its resource reconciled by another process now, paused, or held in a backoff): the next
 * boot of its kind takes its place. A scout asks at least once per agent poll while it is
 * reconciled; the floor keeps a busy process's late reconciles (agent polls of 20 ms in tests) from
 * passing the scouting on. Without it, a scout whose milestone another process saw (two `apply`
 * runs, or a CLI and the controller, on one fleet) stayed live here for good, and so did its
 * waiters, which do not ask. (This was first taken for the cause of a guest waited for for good in
 * the fault search; that search has no wakes, so no waiters: its cause was the search's own clock,
 * test/fault-search/clock.test.ts.)
 */
const SCOUT_SILENT_POLLS = 2;
const SCOUT_SILENT_MIN_MS = 1000;

/** Per resource: when it last asked its guest (any milestone or command): a scout that asks is live. */
const lastAsked = new WeakMap<ResourceMemory, number>();

/**
 * Whether a kind's scout is still the boot it was, has not reached `milestone` yet, and still asks
 * (SCOUT_SILENT_POLLS).
 */
function scoutLive(ctx: StepContext, s: Scouting, milestone: GuestMilestone): boolean {
  const scoutBoot = boots.get(s.scout);
  if (scoutBoot?.since !== s.since || scoutBoot.reachedAt[milestone] !== undefined) return false;
  const silent = ctx.site.now() - Math.max(s.since, lastAsked.get(s.scout) ?? s.since);
  return silent <= Math.max(SCOUT_SILENT_MIN_MS, SCOUT_SILENT_POLLS * (ctx.options.agentPollMs ?? 5000));
}

/** How long to wait before asking about a command started in the guest at `startedAt`. */
export function guestExecPollMs(ctx: StepContext, startedAt: number): number {
  let run = execRuns.get(ctx.memory);
  if (run?.startedAt !== startedAt) {
    run = { startedAt, known: learned.get(ctx.site)?.has(EXEC_KEY) ?? false };
    execRuns.set(ctx.memory, run);
  }
  return askDelay(ctx, startedAt, EXEC_KEY, run.known, {
    floorMs: EXEC_FLOOR_MS,
    growth: EXEC_GROWTH,
    narrow: EXEC_NARROW,
  });
}

/** A command started at `startedAt` was seen still running by an ask sent at `askedAt`. */
export function guestExecRunning(ctx: StepContext, startedAt: number, askedAt = ctx.site.now()): void {
  noteLag(ctx, askedAt);
  execMissed.set(ctx.memory, { startedAt, age: askedAt - startedAt });
}

/**
 * A command started at `startedAt` was seen exited by an ask sent at `askedAt`: learned for the
 * site's next one (the ask's age, as guestReached: a command of 3 ms, learned by its answers, was
 * asked about 16 to 29 ms after it began).
 */
export function guestExecExited(ctx: StepContext, startedAt: number, askedAt = ctx.site.now()): void {
  noteLag(ctx, askedAt);
  const missed = execMissed.get(ctx.memory);
  execMissed.delete(ctx.memory);
  learn(ctx, EXEC_KEY, askedAt - startedAt, missed?.startedAt === startedAt ? missed.age : undefined);
}

function learnedKey(r: ProxmoxVM, milestone: GuestMilestone): string {
  return `${kindOf(r)}\u0000${milestone}`;
}

/** The learned key of a guest command's run (no milestone is called `exec`). */
const EXEC_KEY = '\u0000exec';

/** Learn that `key` was reached `took` ms after its start (and not `missed` ms after): the mean with what was learned. */
function learn(ctx: StepContext, key: string, took: number, missed: number | undefined): void {
  let site = learned.get(ctx.site);
  if (!site) {
    site = new Map();
    learned.set(ctx.site, site);
  }
  const before = site.get(key);
  const hit = before === undefined ? took : (before.hit + took) / 2;
  const miss =
    missed === undefined || missed >= took
      ? before?.miss
      : before?.miss === undefined
        ? missed
        : (before.miss + missed) / 2;
  site.set(key, miss !== undefined && miss < hit ? { hit, miss } : { hit });
}

/**
 * How long to wait from `now` to ask about `key`, begun at `since`: at the first ask's time
 * learned (between the bounds), then at the learned hit, then a share of the age as the task
 * watcher does, within [floor, the agent poll]. `probe`: the site had learned `key` when this
 * boot (or command) began. One that began with others before anything was learned (a rollout
 * without phases boots them all at once) is well on its way when the first of them teaches the
 * site: it waits for the hit only, as a probe that misses would cost every one of them an ask.
 */
function askDelay(
  ctx: StepContext,
  since: number,
  key: string,
  probe: boolean,
  unlearned: Cadence = { floorMs: FLOOR_MS, narrow: NARROW },
): number {
  const wait = aimedDelay(ctx, since, key, probe, unlearned);
  const lag = askLag.get(ctx.site) ?? 0;
  const scheduled = wait - Math.min(lag, wait / 2);
  scheduledAsk.set(ctx.memory, ctx.site.now() + scheduled);
  return scheduled;
}

/** An ask sent at `askedAt` had been scheduled for scheduledAsk: how late it was, for the site's lag. */
function noteLag(ctx: StepContext, askedAt: number): void {
  lastAsked.set(ctx.memory, askedAt);
  const at = scheduledAsk.get(ctx.memory);
  if (at === undefined) return;
  scheduledAsk.delete(ctx.memory);
  const late = askedAt - at;
  // Sooner than scheduled: asked for another reason (a wake, a drift read), not by its timer.
  if (late < 0 || late > LAG_MAX_MS) return;
  const before = askLag.get(ctx.site);
  askLag.set(ctx.site, before === undefined ? late : (3 * before + late) / 4);
}

/** The wait askDelay aims at: when the ask should be sent. */
function aimedDelay(ctx: StepContext, since: number, key: string, probe: boolean, unlearned: Cadence): number {
  const cap = ctx.options.agentPollMs ?? 5000;
  const floorMs = Math.min(cap, unlearned.floorMs);
  const now = ctx.site.now();
  const l = learned.get(ctx.site)?.get(key);
  if (l) {
    const first = l.miss !== undefined ? (l.miss + l.hit) / 2 : l.hit * PROBE;
    // A target less than a millisecond ahead is the one just asked at: timers fire late, never
    // early. One less than the lag ahead, too: the ask scheduled sooner by the lag came a little early.
    const asked = Math.max(1, askLag.get(ctx.site) ?? 0);
    const age = now - since;
    // Bounds within a share of the hit: the probe would gain little for the ask it costs.
    const narrow = l.miss !== undefined && l.hit - l.miss <= unlearned.narrow * l.hit;
    for (const at of probe && !narrow ? [first, l.hit] : [l.hit]) {
      const due = at - age;
      if (due < asked) continue;
      // Not every agent poll until then, but once halfway while the kind's boots differ (LEARNED_WAIT).
      const wait = narrow ? due : Math.min(Math.max(cap, at * LEARNED_WAIT), due);
      if (wait < due) earlyAsk.add(ctx.memory);
      else earlyAsk.delete(ctx.memory);
      return wait;
    }
    earlyAsk.delete(ctx.memory);
    // Past the learned hit: this boot is slower than those that taught it (or was seen running
    // sooner after its start). Closely from the hit on, then a share of the time past it.
    const past = Math.max(0, age - l.hit);
    return Math.min(cap, pastExpected(l.hit * PAST_HIT, past, unlearned.growth));
  }
  earlyAsk.delete(ctx.memory);
  return pollDelay(
    { since, expectedMs: 0 },
    now,
    unlearned.growth === undefined ? { floorMs, maxMs: cap } : { floorMs, maxMs: cap, growth: unlearned.growth },
  );
}
