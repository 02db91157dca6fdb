/**
 * The `provider-proxmox` command line: commander wiring only, loaded by src/cli/main.ts once
 * Node's compile cache is on. The wiring modules imported here load nothing but commander; each
 * command loads what it runs when it runs (bench/startup.ts measures it), so `--help` or
 * `validate` never pays for the simulator, Kubernetes, the Proxmox client or the terminal UI.
 */
import { Command, CommanderError } from 'commander';
import { registerCompletion } from './completion.ts';
import { registerController } from './controller.ts';
import { registerDoctor } from './doctor.ts';
import { registerFleet } from './fleet.ts';
import { registerLocal } from './local.ts';
import { exitOnClosedPipe } from './pipes.ts';
import { registerSim } from './sim.ts';

/**
 * Each command by name, with the function that registers it (and the commands beside it). A run
 * whose first argument is one of these registers that group alone: registering every command is
 * about 4 ms of each start (bench/startup.ts), and commander parses, helps and fails for a command
 * from that command alone. Anything else registers every command: --help and --version, `help`,
 * `completion` (it lists every command) and a mistyped command, which commander matches against
 * all of them. test/cli/program.test.ts holds this table to what each function registers.
 */
export const COMMAND_GROUPS: Readonly<Record<string, (program: Command) => void>> = {
  sim: registerSim,
  apply: registerLocal,
  delete: registerLocal,
  status: registerLocal,
  demo: registerLocal,
  doctor: registerDoctor,
  validate: registerFleet,
  plan: registerFleet,
  gc: registerFleet,
  controller: registerController,
};

/**
 * Commands whose run is over in moments and makes little garbage: V8's heap sizing is left as it
 * is for them, so that they do not load node:v8 (with its heap snapshot helpers, node:stream and
 * its kin: about 3% of validate's start-up, bench/startup.ts). Help, --version and usage errors run
 * no action, and so leave it too.
 */
const BRIEF_COMMANDS = new Set(['validate']);

/**
 * The heap grows by a fifth over what survived a collection, not V8's default (several times more
 * for a young heap): an apply of thousands of VMs makes much short-lived garbage (every bulk list
 * parsed), and the default let the heap, and the RSS, run far past what is live
 * (bench/local-apply.ts, 1,000 VMs: peak RSS 363 -> 268 MB, CPU 13.0 -> 12.6 s). The controller
 * runs with the same flag (Dockerfile). It takes effect for the heap's next sizing, long before an
 * action makes that much garbage.
 */
export function sizeHeapForLongRuns(program: Command, action: Command): void {
  if (action.parent === program && BRIEF_COMMANDS.has(action.name())) return;
  process.getBuiltinModule('node:v8').setFlagsFromString('--heap-growing-percent=20');
}

function registerAll(program: Command): void {
  registerSim(program);
  registerLocal(program);
  registerDoctor(program);
  registerFleet(program);
  registerController(program);
  registerCompletion(program);
}

/** The program for `argv` (process.argv: node, the script, then the arguments). */
export function buildProgram(argv: readonly string[]): Command {
  const program = new Command('provider-proxmox')
    .description(
      'Declarative Proxmox VE virtual machines: a Crossplane-style controller, a cluster-less CLI, and a Proxmox VE API simulator.',
    )
    .version('0.1.0')
    .showHelpAfterError('(run with --help for usage)')
    .exitOverride()
    .hook('preAction', (_, action) => sizeHeapForLongRuns(program, action));
  const name = argv[2];
  const group = name !== undefined && Object.hasOwn(COMMAND_GROUPS, name) ? COMMAND_GROUPS[name] : undefined;
  (group ?? registerAll)(program);
  return program;
}

/** Run the command `argv` names; sets process.exitCode (0, 1 failures, 2 usage errors). */
export async function runProgram(argv: readonly string[]): Promise<void> {
  // `provider-proxmox ... | head -1`: exit 141 when the reader goes away (src/cli/pipes.ts says why).
  exitOnClosedPipe();
  try {
    await buildProgram(argv).parseAsync([...argv]);
  } catch (e) {
    if (e instanceof CommanderError) {
      // --help / --version exit 0; usage errors exit 2.
      process.exitCode = e.exitCode === 0 ? 0 : 2;
    } else {
      process.stderr.write(`provider-proxmox: ${e instanceof Error ? e.message : String(e)}\n`);
      process.exitCode = 1;
    }
  }
}
