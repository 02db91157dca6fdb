/** `provider-proxmox sim`: run the Proxmox VE API simulator. */
import { chmodSync, writeFileSync } from 'node:fs';
import { type Command, InvalidArgumentError, Option } from 'commander';
import { PROFILE_NAMES } from '../sim/profiles.ts';
import { parseTokenArg } from '../sim/token-arg.ts';
import { refuseGiven } from './paths.ts';

function speedArg(v: string): number {
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0)
    throw new InvalidArgumentError('expected a number > 0 (1 = realistic durations, 100 = 100x faster)');
  return n;
}

function tokenArg(v: string, prev: string[] = []): string[] {
  try {
    parseTokenArg(v);
  } catch (e) {
    throw new InvalidArgumentError((e as Error).message);
  }
  return [...prev, v];
}

export function registerSim(program: Command): void {
  program
    .command('sim')
    .description('Run the Proxmox VE API simulator (one listener per simulated cluster) until SIGINT/SIGTERM.')
    .option('--topology <file>', 'topology YAML (default: the seed fleet, site-1 on :8006 and site-2 on :8007)')
    .addOption(new Option('--profile <version>', 'Proxmox VE version to imitate').choices(PROFILE_NAMES).default('8.4'))
    .option('--speed <n>', 'divide every simulated duration by N', speedArg, 1)
    .option('--http', 'serve plain HTTP instead of HTTPS')
    .option('--root-password <pw>', 'password of root@pam (default: proxmox-sim)')
    .option(
      '--token <USER@REALM!ID=SECRET>',
      'an API token with full rights (its user gets Administrator on /; repeatable; default: one random root@pam!provider token)',
      tokenArg,
    )
    .option('--state <file>', 'load simulator state from FILE at start and save it there while running and at exit')
    .option('--print-config <file>', 'write a ProviderConfig + Secret YAML pointing at the simulated sites')
    .addHelpText(
      'after',
      `
Fault injection and test controls are served under /_sim/ on every cluster's port (root@pam only);
see docs/simulator.md.

Examples:
  provider-proxmox sim
  provider-proxmox sim --profile 7.4 --speed 50 --http
  provider-proxmox sim --token 'automation@pve!ci=3f9c...' --print-config sim-config.yaml`,
    )
    .action(
      async (
        o: {
          topology?: string;
          profile: string;
          speed: number;
          http?: boolean;
          rootPassword?: string;
          token?: string[];
          state?: string;
          printConfig?: string;
        },
        cmd: Command,
      ) => {
        refuseGiven(cmd, [{ flag: '--topology', path: o.topology, what: 'a topology YAML file (docs/simulator.md)' }]);
        const { startSimulator } = await import('../sim/index.ts');
        const { loadState, saveState } = await import('../sim/persist.ts');
        const { providerConfigYaml } = await import('../sim/provider-config.ts');
        const { defaultTopology, loadTopologyFile } = await import('../sim/topology.ts');
        const topology = o.topology ? loadTopologyFile(o.topology) : defaultTopology();
        const tokens = o.token ?? [`root@pam!provider=${globalThis.crypto.randomUUID()}`];
        const sim = await startSimulator({
          topology,
          profile: o.profile as '8.4',
          speed: o.speed,
          http: Boolean(o.http),
          ...(o.rootPassword ? { rootPassword: o.rootPassword } : {}),
          tokens,
        });
        if (o.state) loadState(sim, o.state);
        const out = process.stdout;
        out.write(`Proxmox VE simulator: profile ${sim.profile}, speed ${o.speed}, ${o.http ? 'HTTP' : 'HTTPS'}\n`);
        const w = Math.max(...sim.clusters.map((c) => c.name.length));
        const wu = Math.max(...sim.clusters.map((c) => c.url.length));
        for (const c of sim.clusters) {
          out.write(
            `  ${c.name.padEnd(w)}  ${c.url.padEnd(wu)}  node ${c.nodes.join(',')}${c.fingerprint ? `  fingerprint ${c.fingerprint}` : ''}\n`,
          );
        }
        out.write(`Credentials (every cluster):\n  user      root@pam  password ${sim.credentials.rootPassword}\n`);
        for (const t of sim.credentials.tokens) out.write(`  token     ${t.tokenid}=${t.secret}\n`);
        if (o.printConfig) {
          // It holds the token secret (or the root password): readable by the owner only.
          writeFileSync(o.printConfig, providerConfigYaml(sim), { mode: 0o600 });
          chmodSync(o.printConfig, 0o600);
          out.write(`ProviderConfig written to ${o.printConfig}\n`);
        }
        out.write('Press Ctrl-C to stop.\n');
        let saver: NodeJS.Timeout | undefined;
        if (o.state) {
          const file = o.state;
          saver = setInterval(() => saveState(sim, file), 2000);
          saver.unref();
        }
        await new Promise<void>((resolve) => {
          const stop = () => resolve();
          process.once('SIGINT', stop);
          process.once('SIGTERM', stop);
        });
        if (saver) clearInterval(saver);
        if (o.state) saveState(sim, o.state);
        await sim.close();
        out.write('simulator stopped\n');
      },
    );
}
