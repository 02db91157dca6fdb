/**
 * Runs one schedule from start to verdict: a fresh simulator and store, the commands in order
 * (fast-check's asyncModelRun), then the end of all faults, the settle phase and the final
 * invariants. A violation comes back as an error whose message carries the invariant, its details
 * and the run's journal, so a shrunk counterexample explains itself.
 */
import fc from 'fast-check';
import { UNEXPECTED_STATUS } from '../../src/sim/tasks.ts';
import type { Apply, Model } from './commands.ts';
import { checkFinal, InvariantViolation } from './invariants.ts';
import { settle } from './settle.ts';
import { World } from './world.ts';

/** Lines of the journal kept in a failure's message (the end of the run is what matters). */
const JOURNAL_LINES = Number(process.env.FAULT_SEARCH_JOURNAL_LINES ?? 120);

export class ScheduleFailure extends Error {
  readonly invariant: string;
  constructor(invariant: string, message: string) {
    super(message);
    this.name = 'ScheduleFailure';
    this.invariant = invariant;
  }
}

/** What a schedule made the remote migration do (the search reports the sums: a path never taken is no evidence). */
export interface MoveStats {
  /** `remote_migrate` requests received, on either cluster. */
  sent: number;
  /** `qmigrate` tasks that ended OK, or with an error. */
  migrated: number;
  failed: number;
  /** Crashes and other interruptions at the move's two steps. */
  interrupted: number;
  /** `migrate` requests inside a cluster (the fourth search), and interruptions at update-migrate. */
  nodeSent: number;
  nodeInterrupted: number;
  /** Locks of dead workers reported (LockWithoutTask) and unlocked by the settle's operator. */
  unlocked: number;
  /** Node crashes (the fourth search), and workers that died (a crash, a `die` fault) on either cluster. */
  crashes: number;
  diedWorkers: number;
  /**
   * Requests and workers refused for want of quorum (a two-node site with a node down), stale disk
   * sizes rescanned by the operator, and VMs whose disks were gone destroyed by it.
   */
  quorumRefusals: number;
  rescans: number;
  disklessDestroyed: number;
}

/** No moves yet: the sum a search starts from. */
export function noMoves(): MoveStats {
  return {
    sent: 0,
    migrated: 0,
    failed: 0,
    interrupted: 0,
    nodeSent: 0,
    nodeInterrupted: 0,
    unlocked: 0,
    crashes: 0,
    diedWorkers: 0,
    quorumRefusals: 0,
    rescans: 0,
    disklessDestroyed: 0,
  };
}

function moveStats(w: World): MoveStats {
  const out = noMoves();
  for (const c of w.sim.clusters) {
    out.sent += c.counters()['POST /nodes/{node}/qemu/{vmid}/remote_migrate'] ?? 0;
    out.nodeSent += c.counters()['POST /nodes/{node}/qemu/{vmid}/migrate'] ?? 0;
    for (const n of c.state.nodes.values()) out.crashes += n.crashes ?? 0;
    out.quorumRefusals += c.state.quorumRefusals;
    for (const t of c.state.tasks.values()) if (t.exitstatus === UNEXPECTED_STATUS) out.diedWorkers++;
    for (const t of c.state.tasks.values())
      if (t.type === 'qmigrate' && t.status === 'stopped') {
        if (t.exitstatus === 'OK') out.migrated++;
        else out.failed++;
      }
  }
  out.interrupted = w.journal.filter((l) => /^ {2}at update-(reserve-site-move|remote-migrate):/.test(l)).length;
  out.nodeInterrupted = w.journal.filter((l) => /^ {2}at update-migrate:/.test(l)).length;
  out.unlocked = w.journal.filter((l) => /^ {2}operator: .*qm unlock/.test(l)).length;
  out.rescans = w.journal.filter((l) => /^ {2}operator: qm disk rescan/.test(l)).length;
  out.disklessDestroyed = w.journal.filter((l) => /^ {2}operator: qm destroy .*reported its disks gone/.test(l)).length;
  return out;
}

export async function runSchedule(
  auth: 'password' | 'token',
  initial: Apply[],
  cmds: Iterable<fc.AsyncCommand<Model, World>>,
  opts: { strict?: boolean; nodes?: boolean } = {},
): Promise<{ settleRounds: number; journal: string[]; moves: MoveStats }> {
  const w = await World.start(auth, { nodes: opts.nodes === true });
  if (opts.strict) w.strict = true;
  try {
    try {
      const model: Model = { applied: new Set() };
      for (const a of initial) await a.run(model, w);
      await fc.asyncModelRun(() => ({ model, real: w }), cmds);
      const s = await settle(w);
      w.log(`settle: ${s.converged ? 'converged' : 'did not converge'} after ${s.rounds} rounds`);
      checkFinal(w, s);
      // A replay that passes (a timing case) still shows what its schedule did (search.test.ts).
      if (process.env.FAULT_SEARCH_JOURNAL) process.stderr.write(`${w.journal.join('\n')}\n`);
      return { settleRounds: s.rounds, journal: w.journal, moves: moveStats(w) };
    } catch (e) {
      const invariant = e instanceof InvariantViolation ? e.invariant : 'the run threw';
      const detail =
        e instanceof Error ? (e instanceof InvariantViolation ? e.message : (e.stack ?? e.message)) : String(e);
      const journal = w.journal.slice(-JOURNAL_LINES).join('\n');
      throw new ScheduleFailure(invariant, `${detail}\n--- journal (auth ${auth}) ---\n${journal}`);
    }
  } finally {
    await w.close();
  }
}
