/**
 * The task watcher (src/vm/task-watch.ts) against any tasks, by fast-check: copies and starts on
 * one node that begin and end when the arbitrary says, whatever the watcher's predictions make of
 * them (a share's prediction from one copy is wrong for a copy of another size, a type's last
 * duration wrong for a slower task). Whatever it predicts, every task is woken after its end, no
 * later than the cadence it falls back on (a tenth of its age, at most the task poll), and the
 * reads of the node's list stay logarithmic in the tasks' durations: a prediction that keeps
 * falling just ahead must not turn the watcher into a poll at its floor.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { watcherOnClock } from './watcher-clock.ts';

interface Task {
  type: 'qmcreate' | 'qmstart';
  start: number;
  ms: number;
}

const task = fc.record({
  type: fc.constantFrom('qmcreate' as const, 'qmstart' as const),
  start: fc.integer({ min: 0, max: 5000 }),
  // From a fast simulator's 5 ms to a real import of a minute.
  ms: fc.oneof(fc.integer({ min: 5, max: 500 }), fc.integer({ min: 500, max: 60_000 })),
});

describe('task watcher: any tasks on a node', () => {
  it('wakes each after its end, within its fallback cadence, with reads logarithmic in the durations', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(task, { minLength: 1, maxLength: 8 }), async (tasks: Task[]) => {
        const upids = tasks.map(
          (t, i) => `UPID:pve1:${String(i).padStart(8, '0')}:00000000:00000000:${t.type}:${300 + i}:root@pam:`,
        );
        const ends = tasks.map((t) => t.start + t.ms);
        const { at, w, runTo, restore } = watcherOnClock(
          (clock) => new Set(upids.filter((_, i) => tasks[i]!.start <= clock && ends[i]! > clock)),
        );
        const woke = new Map<number, number>();
        try {
          const order = tasks.map((_, i) => i).sort((a, b) => tasks[a]!.start - tasks[b]!.start);
          for (const i of order) {
            await runTo(tasks[i]!.start);
            w.watch(upids[i]!, () => woke.set(i, at.clock));
          }
          await runTo(Math.max(...ends) + 3000);
          let budget = 0;
          for (const [i, t] of tasks.entries()) {
            const seen = woke.get(i);
            assert.ok(seen !== undefined && seen >= ends[i]!, `task ${i} woken at ${seen}, ends at ${ends[i]}`);
            // Its fallback: a tenth of its age, within the floor (minMs 50) and the task poll (2 s).
            const bound = Math.min(2000, Math.max(50, 0.1 * t.ms)) + 1;
            assert.ok(
              seen - ends[i]! <= bound,
              `task ${i} (${t.ms} ms) seen ${seen - ends[i]!} ms late, over ${bound}`,
            );
            // The cadence's reads (floor to a tenth of its age, then the task poll), and a
            // prediction's: a few looks, and a share of the time past each end it ran past.
            budget += Math.log(Math.max(t.ms, 10) / 10) / Math.log(1.1) + t.ms / 2000 + 40 * tasks.length;
          }
          assert.ok(w.reads <= budget, `${w.reads} reads for ${tasks.length} tasks (budget ${Math.round(budget)})`);
        } finally {
          restore();
        }
      }),
      { numRuns: 300 },
    );
  });
});
