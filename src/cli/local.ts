/** `apply`, `delete`, `status`, `demo`: commander wiring for src/local/commands.ts. */
import { type Command, Option } from 'commander';
import {
  driftIntervalOption,
  durationAtLeast,
  durationOption,
  outputOption,
  positive,
  runCommand,
  STATE_HELP,
} from './args.ts';
import { autoApproveOption, confirmer, yesOption } from './confirm.ts';
import { checkGiven, configPath, manifestPaths } from './paths.ts';

/** Loaded on use, so that every command starts fast. */
const local = () => import('../local/commands.ts');
const run = runCommand;

/**
 * The shortest `status --watch --interval`: the least `watch -n` takes. Below it the loop spins
 * (0 ran at 95% CPU) with nothing more to show.
 */
const MIN_POLL_MS = 100;

/** The shortest `--task-poll`: a simulator sped up a hundredfold ends a task in tens of ms. */
const MIN_TASK_POLL_MS = 10;

/** In-flight work: Proxmox tasks at most every DURATION, a booting guest at most every 2.5x that (or halfway to its kind's learned time). */
const taskPoll = () =>
  new Option(
    '--task-poll <duration>',
    `the longest wait between two checks of an in-flight Proxmox task, default 2s (a booting guest: 2.5x that, or once halfway to the time guests of its kind took, if longer); a task or guest is checked sooner while it is young or expected to end, see docs/architecture.md; at least ${MIN_TASK_POLL_MS}ms`,
  ).argParser(durationAtLeast(MIN_TASK_POLL_MS, '2s'));

function pollArgs(ms: number | undefined): { taskPollMs?: number; agentPollMs?: number } {
  return ms === undefined ? {} : { taskPollMs: ms, agentPollMs: Math.round(ms * 2.5) };
}

const output = outputOption;

/** The confirmation to ask before changing anything, unless --yes. */
function confirmArg(yes: boolean | undefined, command: string, question: string): { confirm?: () => Promise<boolean> } {
  const confirm = confirmer({ yes, command, question });
  return confirm ? { confirm } : {};
}

/** `--offline-grace` of apply and delete (runtime.ts offlineTooLong). */
function offlineGrace(): Option {
  return durationOption(
    '--offline-grace <duration>',
    'stop waiting for a VM whose node has been offline this long (Ready False NodeOffline); a node that reboots is back within minutes. 0: at once',
    '10m',
  );
}

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
    .option('--state <file>', STATE_HELP)
    .addOption(durationOption('--timeout <duration>', 'give up after this long; at least 1s', '30m', 1000))
    .addOption(offlineGrace())
    .option('--workers <n>', 'concurrent reconciles', positive, 8)
    .option(
      '--fleet <file>',
      'fleet file with phases (phases: [{name, members: [...], maxParallel}]); overrides the phase annotations',
    )
    .option('--no-wait', 'start every phase at once instead of waiting for the previous one to be Ready')
    .option(
      '--max-parallel <n>',
      "at most N VMs of a phase in progress at once (default: no limit; a fleet file's maxParallel sets it per phase; --workers bounds the reconciles at once)",
      positive,
    )
    .option(
      '--dry-run',
      'print the phases and, read from Proxmox, what would be created, adopted or changed, field by field; change nothing',
    )
    .addOption(yesOption('apply without asking (needed when stdin is not a terminal)'))
    .addOption(autoApproveOption())
    .addOption(
      new Option(
        '--reboot-policy <policy>',
        'for manifests without spec.forProvider.rebootPolicy: IfNeeded reboots a running VM to apply changes Proxmox holds until its next boot; Never (the default) only reports them (PendingReboot)',
      ).choices(['Never', 'IfNeeded']),
    )
    .addOption(taskPoll())
    .addOption(driftIntervalOption())
    .addOption(output())
    .option('-q, --quiet', 'no live progress, only the final table')
    .addHelpText(
      'after',
      `
Phases come from the annotation proxmox.sankofa.io/phase (numbers run in order, names after) or
--fleet; proxmox.sankofa.io/depends-on: a,b makes a VM wait for others. A phase starts when every
earlier phase is Ready, so a failing VM in phase 1 holds phase 2.

Every run reconciles every VM: apply is done when each was observed Ready in this run (or failed
for good), so a VM stopped, resized or destroyed by hand since the last run is repaired.

Before anything changes, apply prints the plan read from Proxmox (create, adopt, update, update
that waits for a reboot, reboot, unchanged) and asks for 'yes' on a terminal; without a terminal it
needs --yes.

Killing apply at any moment is safe: run it again and it continues from the state file, with exactly
one VM per manifest. The state file is one per installation (the ProviderConfig's spec.installation,
default cli-<its metadata.name>), the same from every directory; it is only a cache of what Proxmox
holds (status --live shows Proxmox's side). Exit codes: 0 all ready, 1 some failed or timed out or
an unusable state file, 2 usage errors.

Example:
  provider-proxmox sim --print-config sim.yaml &
  provider-proxmox apply -f examples/production --config sim.yaml`,
    )
    .action(
      (o: {
        filename: string[];
        config?: string;
        state?: string;
        timeout: number;
        offlineGrace: number;
        workers: number;
        output: 'table';
        quiet?: boolean;
        fleet?: string;
        wait: boolean;
        maxParallel?: number;
        dryRun?: boolean;
        taskPoll?: number;
        driftInterval: number;
        yes?: boolean;
        autoApprove?: boolean;
        rebootPolicy?: 'Never' | 'IfNeeded';
      }) =>
        run(async () => {
          await checkGiven([
            manifestPaths(o.filename),
            configPath(o.config),
            { flag: '--fleet', path: o.fleet, what: 'a fleet file (phases: [{name, members: [...]}])' },
          ]);
          return (await local()).applyCommand({
            files: o.filename,
            ...confirmArg(o.yes || o.autoApprove, 'apply', 'Apply these changes?'),
            ...(o.rebootPolicy ? { rebootPolicy: o.rebootPolicy } : {}),
            ...(o.fleet ? { fleet: o.fleet } : {}),
            noWait: !o.wait,
            ...(o.maxParallel ? { maxParallel: o.maxParallel } : {}),
            dryRun: Boolean(o.dryRun),
            ...(o.config ? { config: o.config } : {}),
            ...(o.state ? { state: o.state } : {}),
            timeoutMs: o.timeout,
            offlineGraceMs: o.offlineGrace,
            workers: o.workers,
            output: o.output,
            quiet: Boolean(o.quiet),
            ...pollArgs(o.taskPoll),
            driftIntervalMs: o.driftInterval,
          });
        }),
    );

  program
    .command('delete')
    .description(
      'Delete the VMs the manifests own: shows which VMs will be destroyed and asks, then stops them, destroys them with purge and confirms they are gone.',
    )
    .requiredOption('-f, --filename <path...>', 'manifest files or directories')
    .option('--config <file>', 'ProviderConfig (+ Secret) YAML; default: the one among the manifests')
    .option('--state <file>', STATE_HELP)
    .addOption(durationOption('--timeout <duration>', 'give up after this long; at least 1s', '30m', 1000))
    .addOption(offlineGrace())
    .option('-q, --quiet', 'no live progress')
    .option('--dry-run', 'print which VMs would be destroyed (read from Proxmox); destroy nothing')
    .addOption(yesOption('delete without asking (needed when stdin is not a terminal)'))
    .addOption(autoApproveOption())
    .addOption(taskPoll())
    .action(
      (o: {
        filename: string[];
        config?: string;
        state?: string;
        timeout: number;
        offlineGrace: number;
        quiet?: boolean;
        taskPoll?: number;
        dryRun?: boolean;
        yes?: boolean;
        autoApprove?: boolean;
      }) =>
        run(async () => {
          await checkGiven([manifestPaths(o.filename), configPath(o.config)]);
          return (await local()).deleteCommand({
            files: o.filename,
            dryRun: Boolean(o.dryRun),
            ...confirmArg(o.yes || o.autoApprove, 'delete', 'Destroy these VMs?'),
            ...(o.config ? { config: o.config } : {}),
            ...(o.state ? { state: o.state } : {}),
            timeoutMs: o.timeout,
            offlineGraceMs: o.offlineGrace,
            quiet: Boolean(o.quiet),
            ...pollArgs(o.taskPoll),
          });
        }),
    );

  program
    .command('status')
    .description(
      'Show the VMs of a state file (or of a cluster, or with --live of Proxmox itself): name, phase, site, node, VMID, state, IP, ready, synced, age, message.',
    )
    .option('--state <file>', STATE_HELP)
    .option(
      '--config <file>',
      "ProviderConfig (+ Secret) YAML: its installation's state file; with --live, the sites to read",
    )
    .option(
      '--live',
      "list this installation's VMs as Proxmox holds them (by ownership marker, every site of --config), with whether the state file knows each; works without a state file",
    )
    .option('--kubeconfig <file>', 'list the ProxmoxVMs of a cluster (the controller runtime) instead of a state file')
    .option('-n, --namespace <ns>', 'with --kubeconfig: one namespace (default: all); without it, a usage error')
    .addOption(output())
    .option(
      '-w, --watch',
      'redraw until Ctrl-C: in place on a terminal, otherwise printed again when something changes (JSON: one line per change)',
    )
    .addOption(
      new Option('--interval <duration>', `with --watch: how often the state file is read; at least ${MIN_POLL_MS}ms`)
        .argParser(durationAtLeast(MIN_POLL_MS, '2s'))
        .default(2000, '2s'),
    )
    .addHelpText(
      'after',
      `
Without --state and --config, status reads the state file of the one installation that has one
under the state root; with several, pass --config or --state. An unusable state file (empty, not
JSON, not a state file, a newer version) exits 1 naming it.

Examples:
  provider-proxmox status --watch
  provider-proxmox status --live --config sim.yaml      # from Proxmox, even without a state file`,
    )
    .action(
      (o: {
        state?: string;
        config?: string;
        live?: boolean;
        output: 'table';
        watch?: boolean;
        interval: number;
        kubeconfig?: string;
        namespace?: string;
      }) =>
        run(async () => {
          await checkGiven([
            configPath(o.config),
            { flag: '--kubeconfig', path: o.kubeconfig, what: "a kubeconfig file (kubectl's ~/.kube/config)" },
          ]);
          return (await local()).statusCommand({
            ...(o.state ? { state: o.state } : {}),
            ...(o.config ? { config: o.config } : {}),
            ...(o.live ? { live: true } : {}),
            ...(o.kubeconfig ? { kubeconfig: o.kubeconfig } : {}),
            ...(o.namespace ? { namespace: o.namespace } : {}),
            output: o.output,
            ...(o.watch ? { watch: true, intervalMs: o.interval } : {}),
          });
        }),
    );

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
      run(async () => {
        await checkGiven([manifestPaths(o.filename)]);
        return (await import('../local/demo.ts')).demoCommand({
          speed: o.speed,
          files: o.filename,
          profile: o.profile,
        });
      }),
    );
}
