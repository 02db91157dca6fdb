/**
 * The `provider-proxmox` command line: commander wiring only. The wiring modules imported here
 * load nothing but commander; each command loads what it runs when it runs (bench/startup.ts
 * measures it), so `--help` or `validate` never pays for the simulator, Kubernetes, the Proxmox
 * client or the terminal UI.
 */
import { enableCompileCache } from 'node:module';
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

// V8's compiled code (and the stripped TypeScript) of every module a command loads from here on
// is kept in Node's compile cache ($NODE_COMPILE_CACHE, default <tmpdir>/node-compile-cache), so
// later runs skip the compile: about half the start-up of a command with many modules. A cache
// that cannot be written is skipped; NODE_DISABLE_COMPILE_CACHE=1 turns it off.
enableCompileCache?.();

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
