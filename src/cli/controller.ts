/**
 * `provider-proxmox controller`: commander wiring for src/kube/controller.ts. Everything it
 * runs (the Kubernetes client, the controllers, pino, prom-client) is loaded when the command runs.
 */
import { type Command, InvalidArgumentError } from 'commander';
import { DEFAULT_KUBE_BURST, DEFAULT_KUBE_QPS } from '../kube/ratelimit.ts';
import { driftIntervalOption, durationOption, wholeNumber as int } from './args.ts';
import { refuseGiven } from './paths.ts';

/** `--kube-qps`: requests a second, a fraction allowed; 0 turns the limit off. */
function qps(v: string): number {
  const n = Number(v);
  if (v.trim() === '' || !Number.isFinite(n) || n < 0)
    throw new InvalidArgumentError('expected a number of requests a second >= 0 (0: no limit), e.g. 50');
  return n;
}

/** `--kube-burst`: at least one request must be able to go. */
function burst(v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('expected a whole number >= 1, e.g. 100');
  return n;
}

/**
 * An installation id as markers carry it, checked before anything connects: in the action, not
 * as an argument parser, since INSTALLATION_RE lives with the ProviderConfig schemas (typebox),
 * which the other commands' start-up need not load. Reported as commander reports a bad argument.
 */
async function checkInstallation(v: string | undefined, cmd: Command): Promise<void> {
  if (v === undefined) return;
  const { INSTALLATION_RE } = await import('../api/provider-config.ts');
  if (!new RegExp(INSTALLATION_RE).test(v))
    cmd.error(
      `error: option '--installation <id>' argument '${v}' is invalid. expected lowercase letters, digits, '-' and '.', starting and ending with a letter or digit`,
      { exitCode: 1, code: 'commander.invalidArgument' },
    );
}

export function registerController(program: Command): void {
  program
    .command('controller')
    .description(
      'Run the Kubernetes controller (ProxmoxVM, ProxmoxVMScaleSet, ProviderConfig) with leader election, /healthz, /readyz and /metrics.',
    )
    .option('--kubeconfig <file>', 'kubeconfig (default: in-cluster, then $KUBECONFIG, then ~/.kube/config)')
    .option(
      '--namespace <ns>',
      'namespace of the leader-election Lease; $POD_NAMESPACE when set, as in the Deployment',
      process.env.POD_NAMESPACE ?? 'crossplane-system',
    )
    .option('--leader-election <bool>', 'use leader election (true/false)', (v) => v !== 'false', true)
    .addOption(durationOption('--lease-duration <d>', 'leader lease duration; at least 1s', '15s', 1000))
    .addOption(durationOption('--renew-deadline <d>', 'leader renew deadline; at least 1s', '10s', 1000))
    .addOption(durationOption('--retry-period <d>', 'leader retry period; at least 100ms', '2s', 100))
    .option('--workers <n>', 'concurrent reconciles', int, 8)
    .addOption(durationOption('--poll <d>', 'poll interval of a ready resource; at least 1s', '1m', 1000))
    .addOption(driftIntervalOption())
    .option('--health-port <port>', 'port of /healthz and /readyz', int, 8081)
    .option('--metrics-port <port>', 'port of /metrics (Prometheus)', int, 8080)
    .addOption(durationOption('--orphan-scan <d>', 'orphan scan period (0 disables)', '1h'))
    .option(
      '--delete-orphans',
      "delete this installation's VMs whose ProxmoxVM is gone (default: report only); other installations' VMs, copies and old markers of unknown resources are never deleted",
    )
    .option(
      '--installation <id>',
      "installation of ProviderConfigs without spec.installation, written into every VM's ownership marker (default: k8s-<uid of the kube-system namespace>)",
    )
    .addOption(
      durationOption('--task-poll <d>', 'how soon to look at an in-flight Proxmox task again; at least 10ms', '2s', 10),
    )
    .option(
      '--kube-qps <n>',
      'Kubernetes API requests a second (client-go QPS; watches are not limited; 0: no limit)',
      qps,
      DEFAULT_KUBE_QPS,
    )
    .option(
      '--kube-burst <n>',
      'Kubernetes API requests allowed at once above --kube-qps (client-go burst)',
      burst,
      DEFAULT_KUBE_BURST,
    )
    .action(
      async (
        o: {
          kubeconfig?: string;
          namespace: string;
          leaderElection: boolean;
          leaseDuration: number;
          renewDeadline: number;
          retryPeriod: number;
          workers: number;
          poll: number;
          driftInterval: number;
          healthPort: number;
          metricsPort: number;
          orphanScan: number;
          deleteOrphans?: boolean;
          installation?: string;
          taskPoll: number;
          kubeQps: number;
          kubeBurst: number;
        },
        cmd: Command,
      ) => {
        await checkInstallation(o.installation, cmd);
        refuseGiven(cmd, [
          { flag: '--kubeconfig', path: o.kubeconfig, what: "a kubeconfig file (kubectl's ~/.kube/config)" },
        ]);
        // Loaded on use: the other commands start faster without the Kubernetes runtime.
        const { KubeApi, loadKubeConfig } = await import('../kube/api.ts');
        const { ProviderController } = await import('../kube/controller.ts');
        const { createLogger } = await import('../observability/log.ts');
        const log = createLogger();
        const api = new KubeApi(loadKubeConfig(o.kubeconfig), { qps: o.kubeQps, burst: o.kubeBurst });
        const ctl = new ProviderController({
          api,
          namespace: o.namespace,
          leaderElection: o.leaderElection,
          leaseDurationMs: o.leaseDuration,
          renewDeadlineMs: o.renewDeadline,
          retryPeriodMs: o.retryPeriod,
          workers: o.workers,
          pollIntervalMs: o.poll,
          driftIntervalMs: o.driftInterval,
          healthPort: o.healthPort,
          metricsPort: o.metricsPort,
          orphanScanMs: o.orphanScan,
          deleteOrphans: Boolean(o.deleteOrphans),
          ...(o.installation ? { installation: o.installation } : {}),
          taskPollMs: o.taskPoll,
          log: (level, msg, fields) => log[level](fields ?? {}, msg),
          onLostLeadership: () => {
            log.error('leadership lost; exiting so that a fresh process rejoins the election');
            process.exit(1);
          },
        });
        try {
          await ctl.start();
        } catch (e) {
          // Nothing may keep the process alive after a failed start (the API client's sockets).
          await ctl.stop().catch(() => {});
          api.close();
          throw e;
        }
        log.info({ server: api.server.origin, namespace: o.namespace, healthPort: o.healthPort }, 'controller started');
        await new Promise<void>((resolve) => {
          process.once('SIGTERM', resolve);
          process.once('SIGINT', resolve);
        });
        log.info('shutting down');
        await ctl.stop();
        api.close();
      },
    );
}
