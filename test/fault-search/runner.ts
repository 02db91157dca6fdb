/**
 * Runs one schedule from start to verdict: a fresh simulator and store, the commands in order
 * (fast-check's asyncModelRun), then the end of all faults, the settle phase and the final
 * invariants. A violation comes back as an error whose message carries the invariant, its details
 * and the run's journal, so a shrunk counterexample explains itself.
 */
import fc from 'fast-check';
import type { Apply, Model } from './commands.ts';
import { checkFinal, InvariantViolation, settle } from './invariants.ts';
import { World } from './world.ts';

/** Lines of the journal kept in a failure's message (the end of the run is what matters). */
const JOURNAL_LINES = 120;

export class ScheduleFailure extends Error {
  readonly invariant: string;
  constructor(invariant: string, message: string) {
    super(message);
    this.name = 'ScheduleFailure';
    this.invariant = invariant;
  }
}

export async function runSchedule(
  auth: 'password' | 'token',
  initial: Apply[],
  cmds: Iterable<fc.AsyncCommand<Model, World>>,
): Promise<{ settleRounds: number; journal: string[] }> {
  const w = await World.start(auth);
  try {
    try {
      const model: Model = { applied: new Set() };
      for (const a of initial) await a.run(model, w);
      await fc.asyncModelRun(() => ({ model, real: w }), cmds);
      const s = await settle(w);
      w.log(`settle: ${s.converged ? 'converged' : 'did not converge'} after ${s.rounds} rounds`);
      checkFinal(w, s);
      return { settleRounds: s.rounds, journal: w.journal };
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
