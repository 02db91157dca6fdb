/**
 * A suite's world for LocalRuntime tests: an in-process simulator and a directory for state files,
 * made before the suite's tests and removed after them, and runtimes on that simulator with short
 * polls (each with its state file in that directory).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before } from 'node:test';
import { LocalRuntime } from '../../src/local/runtime.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { simConfig, startSim } from '../vm/harness.ts';

export function localRuntimeWorld(prefix: string): {
  readonly sim: Simulator;
  runtime: (file: string, opts?: Partial<ConstructorParameters<typeof LocalRuntime>[0]>) => LocalRuntime;
} {
  let sim: Simulator | undefined;
  let dir = '';
  before(async () => {
    sim = await startSim();
    dir = mkdtempSync(join(tmpdir(), prefix));
  });
  after(async () => {
    await sim?.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return {
    get sim() {
      if (!sim) throw new Error('the simulator starts before the suite');
      return sim;
    },
    runtime: (file, opts = {}) =>
      new LocalRuntime({
        config: simConfig(sim!),
        stateFile: join(dir, file),
        taskPollMs: 20,
        agentPollMs: 50,
        backoff: { baseMs: 20, capMs: 200 },
        ...opts,
      }),
  };
}
