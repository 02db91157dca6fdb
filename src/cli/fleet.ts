/**
 * `validate`, `plan`, `gc`: commander wiring for src/fleet/commands.ts. `plan` gets what apply
 * would do per resource from src/local (planChanges): the CLI is where fleet and local meet, since
 * neither imports the other.
 */
import type { Command } from 'commander';
import { outputOption, runCommand } from './args.ts';
import { autoApproveOption, yesOption } from './confirm.ts';
import { checkGiven, configPath, manifestPaths } from './paths.ts';

const fleet = () => import('../fleet/commands.ts');
const local = () => import('../local/commands.ts');
const run = runCommand;
const output = outputOption;

export function registerFleet(program: Command): void {
  program
    .command('validate')
    .description(
      'Check manifests without contacting anything: every problem with file:line:column, field, found and allowed. Exit 1 on errors.',
    )
    .requiredOption('-f, --filename <path...>', 'manifest files or directories')
    .option('--config <file>', 'ProviderConfig to check site and ProviderConfig references against')
    .addOption(output())
    .action((o: { filename: string[]; config?: string; output: 'table' }) =>
      run(async () => {
        await checkGiven([manifestPaths(o.filename), configPath(o.config)]);
        return (await fleet()).validateCommand({
          files: o.filename,
          ...(o.config ? { config: o.config } : {}),
          output: o.output,
        });
      }),
    );

  program
    .command('plan')
    .description(
      'What apply would do, read live and changing nothing: capacity per site, node and storage (requested CPU, memory and disk against what Proxmox has), then per VM create, adopt, update (field by field, and what waits for a reboot), reboot or unchanged. Exit 1 on hard violations or refused changes.',
    )
    .requiredOption('-f, --filename <path...>', 'manifest files or directories')
    .option('--config <file>', 'ProviderConfig (+ Secret) YAML; default: the one among the manifests')
    .option('--state <file>', "state file (default: the one apply writes for the config's installation)")
    .option(
      '--detailed-exitcode',
      'exit 3 when the plan changes something, 0 when there is nothing to do (1: violations or refusals, 2: usage errors)',
    )
    .addOption(output())
    .action((o: { filename: string[]; config?: string; state?: string; output: 'table'; detailedExitcode?: boolean }) =>
      run(async () => {
        await checkGiven([manifestPaths(o.filename), configPath(o.config)]);
        return (await fleet()).planCommand({
          files: o.filename,
          changesOf: (await local()).planChanges,
          ...(o.config ? { config: o.config } : {}),
          ...(o.state ? { state: o.state } : {}),
          output: o.output,
          detailedExitCode: Boolean(o.detailedExitcode),
        });
      }),
    );

  program
    .command('gc')
    .description(
      "Find this installation's VMs whose resource is gone (orphans), VMs stuck in a lock we set, half-created VMs; other installations' VMs and copies are listed, never deleted. Report first (exit 1 when there is something to collect); delete with --delete --yes.",
    )
    .option('--config <file>', 'ProviderConfig (+ Secret) YAML')
    .option(
      '--state <file>',
      "state file listing the resources that exist (default: the one apply writes for the config's installation)",
    )
    .option(
      '--delete',
      'delete the orphans whose uid this state file held (stop, unlock when the credentials may, destroy with purge); each is checked again right before',
    )
    .addOption(yesOption('confirm --delete'))
    .addOption(autoApproveOption())
    .option('--include-half-created', 'with --delete, also delete half-created and stuck VMs of existing resources')
    .option(
      '--include-unknown',
      "with --delete, also delete stopped VMs of this installation whose uid this state file never held (another state file's, or lost); running ones never",
    )
    .option(
      '--snippets',
      "also list this installation's cloud-init snippet files that no VM of any site reads (config, pending change or snapshot), written over an hour ago; with --delete they are removed (reads every VM's pending config and snapshot list)",
    )
    .addOption(output())
    .action(
      (o: {
        config?: string;
        state?: string;
        delete?: boolean;
        yes?: boolean;
        autoApprove?: boolean;
        includeHalfCreated?: boolean;
        includeUnknown?: boolean;
        snippets?: boolean;
        output: 'table';
      }) =>
        run(async () => {
          await checkGiven([configPath(o.config)]);
          return (await fleet()).gcCommand({
            ...(o.config ? { config: o.config } : {}),
            ...(o.state ? { state: o.state } : {}),
            delete: Boolean(o.delete),
            yes: Boolean(o.yes || o.autoApprove),
            includeHalfCreated: Boolean(o.includeHalfCreated),
            includeUnknown: Boolean(o.includeUnknown),
            snippets: Boolean(o.snippets),
            output: o.output,
          });
        }),
    );
}
