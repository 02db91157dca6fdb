/**
 * Model-based fault search: fast-check draws schedules of user edits, reconciles, crashes at
 * named steps, restarts, two writers, Proxmox faults and other Proxmox users; each runs against
 * the real engine (ManagedReconciler + VmConnector over a MemoryStore) and the in-process
 * simulator, then all faults end and the invariants of invariants.ts are checked. A failure
 * prints the seed, the path and the shrunk schedule; replay it with
 *   FAULT_SEARCH_SEED=<seed> FAULT_SEARCH_PATH=<path> FAULT_SEARCH_REPLAY=<replayPath> \
 *   npx node --test test/fault-search/search.test.ts
 * (the report prints that line; `replayPath` is fast-check's record of which commands ran).
 * A failure's report ends with the last lines of its journal (FAULT_SEARCH_JOURNAL_LINES, default
 * 120; each settle round's message cut at FAULT_SEARCH_ROUND_CHARS, default 100); FAULT_SEARCH_JOURNAL=1
 * prints the whole journal of every schedule that passes, for a replay that no longer fails (a timing case).
 *
 * Bounded in `npm test` (FAULT_SEARCH_RUNS runs, default 100, within FAULT_SEARCH_BUDGET_MS, default 60 s).
 * `npm run test:soak` keeps searching with fresh seeds until its budget is spent, records every
 * distinct failure in FAULT_SEARCH_LOG (one report each) and fails at the end if it found any.
 */
import assert from 'node:assert/strict';
import { appendFileSync } from 'node:fs';
import { test } from 'node:test';
import fc from 'fast-check';
import {
  commandsArb,
  type Extras,
  initialArb,
  nodeCommandsArb,
  nodeInitialArb,
  prepareCommandsArb,
  probeFaultKinds,
  replaceCommandsArb,
} from './arbitraries.ts';
import { type MoveStats, noMoves, runSchedule, ScheduleFailure } from './runner.ts';
import { World } from './world.ts';

const env = process.env;
const RUNS = Number(env.FAULT_SEARCH_RUNS ?? 100);
const BUDGET_MS = Number(env.FAULT_SEARCH_BUDGET_MS ?? 60_000);
const MAX_COMMANDS = Number(env.FAULT_SEARCH_MAX_COMMANDS ?? 24);
/** A schedule that takes longer than this (real ms) fails as a hang, and is shrunk like any failure. */
const SCHEDULE_TIMEOUT_MS = Number(env.FAULT_SEARCH_TIMEOUT_MS ?? 60_000);
/** A fixed seed by default, so that `npm test` explores the same schedules every time. */
const SEED =
  env.FAULT_SEARCH_SEED === 'random' ? (Date.now() ^ (process.pid << 8)) | 0 : Number(env.FAULT_SEARCH_SEED ?? 424242);
const PATH = env.FAULT_SEARCH_PATH;
/** The counterexample's `replayPath` (fast-check's record of which commands ran), for a replay. */
const REPLAY = env.FAULT_SEARCH_REPLAY;
/** Soak mode: go on after a failure with the next seed, until the runs or the budget are spent. */
const KEEP_GOING = env.FAULT_SEARCH_KEEP_GOING === '1';
const LOG = env.FAULT_SEARCH_LOG;
/** Schedules run so far (soak mode prints a line every hundred). */
const progress = { runs: 0, since: Date.now() };
/** What the passing schedules made the remote migration do, summed (reported at the end). */
const moves: MoveStats = noMoves();

/**
 * The schedule that runs or ran last. fast-check's time budget (interruptAfterTimeLimit) and its
 * timeout race a run and, when they win, go on without it: that world still runs, and two worlds
 * at once share one `Date.now` (EngineClock) and the machine's time.
 */
let inFlight: Promise<unknown> = Promise.resolve();

/** `run` ended, or a schedule's timeout passed (a hung one is not waited for for good). */
function settled(run: Promise<unknown>): Promise<unknown> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    run.catch(() => undefined),
    new Promise((resolve) => {
      timer = setTimeout(resolve, SCHEDULE_TIMEOUT_MS);
    }),
  ]).finally(() => clearTimeout(timer));
}

/**
 * The property: a schedule runs and every invariant holds. In soak mode a failure whose
 * signature was already found counts as seen, not as a new failure, so the search goes on
 * looking for other ones instead of shrinking the same one again.
 */
function property(extras: Extras, known: Map<string, number>, commands: typeof commandsArb, nodes: boolean) {
  const initial = nodes ? nodeInitialArb : initialArb;
  const schedule = fc
    .constantFrom('password' as const, 'token' as const)
    .chain((auth) => fc.tuple(fc.constant(auth), initial(), commands(extras, auth, MAX_COMMANDS, REPLAY)));
  return fc.asyncProperty(schedule, async ([auth, initial, cmds]) => {
    if (KEEP_GOING && ++progress.runs % 100 === 0) {
      process.stderr.write(
        `[fault-search] ${progress.runs} schedules, ${Math.round((Date.now() - progress.since) / 1000)} s\n`,
      );
    }
    const t0 = Date.now();
    // Each schedule before it runs (a hang shows which one hangs: it is the last printed).
    if (env.FAULT_SEARCH_TRACE === '1')
      process.stderr.write(`[fault-search] run: ${auth} ${initial.join(', ')} ${String(cmds)}\n`);
    // One world at a time: a schedule fast-check stopped waiting for (its time budget ran out, or
    // it timed out) still runs; the next one starts once it ended (or after a timeout's length).
    await settled(inFlight);
    const run = runSchedule(auth, initial, cmds, { nodes });
    inFlight = run;
    try {
      const res = await run;
      for (const k of Object.keys(moves) as Array<keyof MoveStats>) moves[k] += res.moves[k];
    } catch (e) {
      // Traced: the failure as it happened (a shrink that fails later would leave only its own error).
      if (env.FAULT_SEARCH_TRACE === '1') process.stderr.write(`[fault-search] failed: ${String(e).slice(0, 4000)}\n`);
      const sig = signature(e);
      if (!KEEP_GOING || !known.has(sig)) throw e;
      known.set(sig, known.get(sig)! + 1);
    } finally {
      // A schedule that takes long is a cost worth knowing about (and a hint of a hang).
      if (KEEP_GOING && Date.now() - t0 > 10_000) {
        process.stderr.write(
          `[fault-search] slow schedule (${Math.round((Date.now() - t0) / 1000)} s): ${auth} ${initial.join(', ')} ${String(cmds)}\n`,
        );
      }
    }
  });
}

/**
 * What makes two failures "the same": the invariant, and for a resource that never got there
 * whether it was being deleted and its Synced reason; otherwise the first detail line without
 * numbers and names.
 */
function signature(e: unknown): string {
  if (!(e instanceof ScheduleFailure)) return String(e).split('\n')[0]!.slice(0, 120);
  const first = e.message.split('\n')[0]!;
  if (e.invariant === 'did not converge') {
    const stuck = [...first.matchAll(/(\(deleting\))?: ext=\S+ step=\S+ Ready=\S+ Synced=(\S+)/g)];
    return `${e.invariant} :: ${[...new Set(stuck.map((m) => `${m[1] ? 'deleting' : 'live'} ${m[2]}`))].sort().join(', ')}`;
  }
  return `${e.invariant} :: ${first
    .replace(/vm-[a-z]/g, 'vm-X')
    .replace(/[0-9a-f-]{36}|\d+/g, 'N')
    .slice(0, 160)}`;
}

/** Progress goes to stderr as well: a soak runs for hours, and node:test prints diagnostics only at the end. */
function say(t: { diagnostic(m: string): void }, m: string): void {
  t.diagnostic(m);
  if (KEEP_GOING) process.stderr.write(`[fault-search] ${m}\n`);
}

/**
 * One search: schedules drawn by `commands`, from the seed on (the next seeds in soak mode), until
 * the runs or the budget are spent; every distinct failure is reported.
 */
async function search(
  t: { diagnostic(m: string): void },
  commands: typeof commandsArb,
  opts: { nodes?: boolean } = {},
): Promise<void> {
  await settled(inFlight);
  const nodes = opts.nodes === true;
  const probe = await World.start('password', { nodes });
  const extras = await probeFaultKinds(probe, nodes);
  await probe.close();
  say(t, `fault kinds this simulator lacks (so not drawn): ${extras.missing.join(', ') || 'none'}`);
  const started = Date.now();
  const found = new Map<string, string>();
  /** Signature -> how many more times it was met after it was found (soak mode). */
  const seen = new Map<string, number>();
  let seed = SEED;
  let runs = 0;
  for (;;) {
    const left = BUDGET_MS - (Date.now() - started);
    if (left <= 0 || runs >= RUNS) break;
    say(t, `seed ${seed}${PATH ? ` path ${PATH}` : ''}: up to ${RUNS - runs} runs, ${Math.round(left / 1000)} s left`);
    const details = await fc.check(property(extras, seen, commands, nodes), {
      seed,
      ...(PATH ? { path: PATH } : {}),
      // A path replays the run it names: fast-check needs at least that many runs to get there.
      numRuns: PATH ? Number(PATH.split(':')[0]) + 1 : RUNS - runs,
      timeout: SCHEDULE_TIMEOUT_MS,
      plugins: [fc.interruptAfterTimeLimit(left)],
    });
    runs += details.numRuns;
    // The budget ran out during the first schedule (fast-check reports no run as a failure with no
    // error): nothing failed.
    const cutShort = details.failed && details.interrupted && details.errorInstance == null;
    if (!details.failed || cutShort) {
      say(t, `seed ${seed}: ${details.numRuns} runs passed${details.interrupted ? ' (time budget reached)' : ''}`);
      if (!KEEP_GOING || details.interrupted) break;
    } else {
      const e = details.errorInstance;
      const sig = signature(e);
      const report = [
        fc.defaultReportMessage(details) ?? `seed ${seed} failed`,
        `Replay: FAULT_SEARCH_SEED=${details.seed} FAULT_SEARCH_PATH='${details.counterexamplePath}' FAULT_SEARCH_REPLAY='${/replayPath="([^"]*)"/.exec(fc.stringify(details.counterexample))?.[1] ?? ''}' npx node --test test/fault-search/search.test.ts`,
        e instanceof Error ? e.message : String(e),
      ].join('\n');
      if (!found.has(sig)) {
        found.set(sig, report);
        seen.set(sig, 0);
        if (LOG) appendFileSync(LOG, `=== ${new Date().toISOString()} ${sig}\n${report}\n\n`);
        if (KEEP_GOING) process.stderr.write(`${report}\n\n`);
      }
      say(t, `seed ${seed}: FAILED (${sig})`);
      if (!KEEP_GOING) break;
    }
    seed = (seed * 1103515245 + 12345) | 0;
  }
  say(t, `${runs} schedules in ${Math.round((Date.now() - started) / 1000)} s, ${found.size} distinct failure(s)`);
  say(
    t,
    `remote migrations (summed over the runs that passed, shrinking included): ${moves.sent} remote_migrate sent, ${moves.migrated} qmigrate OK, ${moves.failed} failed, ${moves.interrupted} interruptions at the move's steps`,
  );
  if (nodes)
    say(
      t,
      `migrations inside site-2 (the same runs): ${moves.nodeSent} migrate sent, ${moves.nodeInterrupted} interruptions at update-migrate, ${moves.unlocked} dead workers' locks reported and unlocked by the operator, ${moves.crashes} node crashes, ${moves.diedWorkers} workers died, ${moves.quorumRefusals} requests and workers refused for want of quorum, ${moves.rescans} stale disk sizes rescanned and ${moves.disklessDestroyed} VMs whose disks were gone destroyed by the operator`,
    );
  for (const [sig, n] of seen) say(t, `  ${sig}: met ${n} more time(s) after it was found`);
  assert.equal(found.size, 0, [...found.values()].join('\n\n'));
}

test('fault search: the invariants hold under every drawn schedule of faults, crashes and other actors', (t) =>
  search(t, commandsArb));

// The same search for a phased apply's preparing ahead (arbitraries.ts prepareCommandsArb); a
// replay of one of its failures runs this test alone (--test-name-pattern 'preparing ahead').
test('fault search, preparing ahead: no config names a snippet that is not there, and every invariant holds', (t) =>
  search(t, prepareCommandsArb));

// Moves that replace the VM where no remote migration can move it (arbitraries.ts
// replaceCommandsArb); a replay of one of its failures: --test-name-pattern 'replacements'.
test('fault search, replacements: every invariant holds while moves replace VMs where none can migrate', (t) =>
  search(t, replaceCommandsArb));

// Site-2 with two nodes, VMs migrated between them (arbitraries.ts nodeCommandsArb); a replay of one
// of its failures: --test-name-pattern 'inside a cluster'.
test('fault search, moves inside a cluster: every invariant holds while VMs migrate between two nodes', (t) =>
  search(t, nodeCommandsArb, { nodes: true }));
