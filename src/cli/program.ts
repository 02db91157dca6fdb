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
    .exitOverride();
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
