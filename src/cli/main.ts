/** The `provider-proxmox` command line: commander wiring only. */
import { Command, CommanderError } from 'commander';
import { registerCompletion } from './completion.ts';
import { registerController } from './controller.ts';
import { registerDoctor } from './doctor.ts';
import { registerFleet } from './fleet.ts';
import { registerLocal } from './local.ts';
import { exitOnClosedPipe } from './pipes.ts';
import { registerSim } from './sim.ts';

// `provider-proxmox ... | head -1`: exit 141 when the reader goes away (src/cli/pipes.ts says why).
exitOnClosedPipe();

export const program = new Command('provider-proxmox')
  .description(
    'Declarative Proxmox VE virtual machines: a Crossplane-style controller, a cluster-less CLI, and a Proxmox VE API simulator.',
  )
  .version('0.1.0')
  .showHelpAfterError('(run with --help for usage)')
  .exitOverride();

registerSim(program);
registerLocal(program);
registerDoctor(program);
registerFleet(program);
registerController(program);
registerCompletion(program);

try {
  await program.parseAsync(process.argv);
} catch (e) {
  if (e instanceof CommanderError) {
    // --help / --version exit 0; usage errors exit 2.
    process.exitCode = e.exitCode === 0 ? 0 : 2;
  } else {
    process.stderr.write(`provider-proxmox: ${e instanceof Error ? e.message : String(e)}\n`);
    process.exitCode = 1;
  }
}
