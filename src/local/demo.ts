/** `demo` (`npm start`): the simulator with the seed topology, and the seed fleet applied to it. */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseProviderConfig } from '../api/provider-config-load.ts';
import { startSimulator } from '../sim/index.ts';
import { providerConfigYaml } from '../sim/provider-config.ts';
import { applyCommand } from './apply.ts';

/** `demo`: the simulator with the seed topology, the seed fleet applied, progress and the final table. */
export async function demoCommand(args: {
  speed: number;
  files: string[];
  out?: NodeJS.WriteStream;
  keep?: boolean;
  profile?: '6.4' | '7.4' | '8.4' | '9.2';
}): Promise<number> {
  const out = args.out ?? process.stdout;
  const sim = await startSimulator({
    speed: args.speed,
    ephemeralPorts: true,
    tokens: ['root@pam!provider=demo-0000-4000-8000-000000000000'],
    ...(args.profile ? { profile: args.profile } : {}),
  });
  const dir = mkdtempSync(join(tmpdir(), 'provider-proxmox-demo-'));
  try {
    out.write(`Simulated Proxmox VE ${sim.profile} (speed x${args.speed}):\n`);
    for (const c of sim.clusters) out.write(`  ${c.name}  ${c.url}  node ${c.nodes.join(',')}\n`);
    const config = parseProviderConfig(providerConfigYaml(sim), join(dir, 'providerconfig.yaml'));
    const code = await applyCommand({
      files: args.files,
      loadedConfig: config,
      state: join(dir, 'state.json'),
      out,
      taskPollMs: Math.max(20, Math.round(2000 / args.speed)),
      agentPollMs: Math.max(20, Math.round(5000 / args.speed)),
      header: 'Deploying the seed fleet:',
    });
    return code;
  } finally {
    await sim.close();
    if (!args.keep) rmSync(dir, { recursive: true, force: true });
  }
}
