/** `apply`, `delete`, `status`, `demo`: commander wiring for src/local/commands.ts. */
import { type Command, InvalidArgumentError, Option } from 'commander';
import {
  applyCommand,
  DEFAULT_STATE,
  deleteCommand,
  demoCommand,
  describeError,
  statusCommand,
  UsageError,
} from '../local/commands.ts';

function positive(v: string): number {
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new InvalidArgumentError('expected a number > 0');
  return n;
}

function duration(v: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(v);
  if (!m) throw new InvalidArgumentError('expected a duration like 90s, 30m or 2h');
  return Number(m[1]) * { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[(m[2] ?? 's') as 'ms' | 's' | 'm' | 'h'];
}

async function run(fn: () => Promise<number> | number): Promise<void> {
  try {
    process.exitCode = await fn();
  } catch (e) {
    process.stderr.write(`provider-proxmox: ${describeError(e)}\n`);
    process.exitCode = e instanceof UsageError ? 2 : 1;
  }
}

const output = () =>
  new Option('-o, --output <format>', 'output format').choices(['table', 'json', 'yaml']).default('table');

export function registerLocal(program: Command): void {
  program
    .command('apply')
    .description(
      'Reconcile ProxmoxVM manifests without a cluster until every VM is Ready (exit 0) or failed clearly (exit 1).',
    )
    .requiredOption(
      '-f, --filename <path...>',
      'manifest files or directories (YAML, several documents per file allowed)',
    )
    .option('--config <file>', 'ProviderConfig (+ Secret) YAML; default: the one among the manifests')
    .option('--state <file>', 'state file (resource annotations and status, written atomically)', DEFAULT_STATE)
    .option('--timeout <duration>', 'give up after this long', duration, 30 * 60_000)
    .option('--workers <n>', 'concurrent reconciles', positive, 8)
    .addOption(output())
    .option('-q, --quiet', 'no live progress, only the final table')
    .addHelpText(
      'after',
      `
Killing apply at any moment is safe: run it again and it continues from the state file, with exactly
one VM per manifest. Exit codes: 0 all ready, 1 some failed or timed out, 2 usage errors.

Example:
  provider-proxmox sim --print-config sim.yaml &
  provider-proxmox apply -f examples/production --config sim.yaml`,
    )
    .action(
      (o: {
        filename: string[];
        config?: string;
        state: string;
        timeout: number;
        workers: number;
        output: 'table';
        quiet?: boolean;
      }) =>
        run(() =>
          applyCommand({
            files: o.filename,
            ...(o.config ? { config: o.config } : {}),
            state: o.state,
            timeoutMs: o.timeout,
            workers: o.workers,
            output: o.output,
            quiet: Boolean(o.quiet),
          }),
        ),
    );

  program
    .command('delete')
    .description('Delete the VMs the manifests own (stop, destroy with purge, confirm gone).')
    .requiredOption('-f, --filename <path...>', 'manifest files or directories')
    .option('--config <file>', 'ProviderConfig (+ Secret) YAML; default: the one among the manifests')
    .option('--state <file>', 'state file', DEFAULT_STATE)
    .option('--timeout <duration>', 'give up after this long', duration, 30 * 60_000)
    .option('-q, --quiet', 'no live progress')
    .action((o: { filename: string[]; config?: string; state: string; timeout: number; quiet?: boolean }) =>
      run(() =>
        deleteCommand({
          files: o.filename,
          ...(o.config ? { config: o.config } : {}),
          state: o.state,
          timeoutMs: o.timeout,
          quiet: Boolean(o.quiet),
        }),
      ),
    );

  program
    .command('status')
    .description('Show the VMs of a state file: name, phase, site, node, VMID, state, IP, ready, synced, age, message.')
    .option('--state <file>', 'state file', DEFAULT_STATE)
    .addOption(output())
    .action((o: { state: string; output: 'table' }) => run(() => statusCommand({ state: o.state, output: o.output })));

  program
    .command('demo')
    .description(
      'Start the simulator with the seed topology and deploy the seed fleet (examples/production), with progress and the final table.',
    )
    .option('--speed <n>', 'simulator speed factor (1 = realistic durations)', positive, 40)
    .addOption(
      new Option('--profile <version>', 'Proxmox VE version to imitate')
        .choices(['6.4', '7.4', '8.4', '9.2'])
        .default('8.4'),
    )
    .option('-f, --filename <path...>', 'manifests to deploy', [
      new URL('../../examples/production', import.meta.url).pathname,
    ])
    .action((o: { speed: number; filename: string[]; profile: '8.4' }) =>
      run(() => demoCommand({ speed: o.speed, files: o.filename, profile: o.profile })),
    );
}
