/**
 * bench/fleet-images: the seed fleet's makespan (30 VMs over 2 sites, until every VM is Ready) on
 * the simulator at one speed, two ways:
 *   - perVmImport: examples/production, every VM imports the cloud image (import-from);
 *   - linkedClones: examples/templates, the image as a ProxmoxImage (adopted: the simulator's
 *     storages hold it already, as the per-VM run's do), a ProxmoxTemplate per site and storage,
 *     and the 30 VMs as linked clones of it. Its makespan includes building the templates.
 * Each run gets a fresh simulator. Simulated seconds are wall time times the speed factor.
 * Prints one JSON object.
 *
 * Usage: node bench/fleet-images.ts [--speed 100]
 */
import { createWriteStream, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { parseProviderConfig } from '../src/api/provider-config-load.ts';
import { applyCommand } from '../src/local/apply.ts';
import { startSimulator } from '../src/sim/index.ts';
import { providerConfigYaml } from '../src/sim/provider-config.ts';

const { values } = parseArgs({ options: { speed: { type: 'string', default: '100' } } });
const speed = Number(values.speed);

async function run(
  files: string[],
): Promise<{ exitCode: number; wallMs: number; simulatedSeconds: number; requests: Record<string, number> }> {
  const sim = await startSimulator({
    speed,
    ephemeralPorts: true,
    http: true,
    authFailDelayMs: 0,
    tokens: ['root@pam!bench=b0b0b0b0-0000-4000-8000-000000000000'],
  });
  const dir = mkdtempSync(join(tmpdir(), 'fleet-images-'));
  const sink = createWriteStream('/dev/null') as unknown as NodeJS.WriteStream;
  try {
    const config = parseProviderConfig(providerConfigYaml(sim), join(dir, 'providerconfig.yaml'));
    const started = Date.now();
    const exitCode = await applyCommand({
      files,
      loadedConfig: config,
      state: join(dir, 'state.json'),
      out: sink,
      err: sink,
      quiet: true,
      taskPollMs: Math.max(10, Math.round(2000 / speed)),
      agentPollMs: Math.max(10, Math.round(5000 / speed)),
      timeoutMs: 30 * 60_000,
    });
    const wallMs = Date.now() - started;
    const requests: Record<string, number> = {};
    for (const c of sim.clusters)
      for (const [k, v] of Object.entries(c.counters()))
        if (/^POST .*(qemu|clone|template|download-url)$/.test(k)) requests[k] = (requests[k] ?? 0) + v;
    return { exitCode, wallMs, simulatedSeconds: Math.round((wallMs * speed) / 1000), requests };
  } finally {
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

const perVmImport = await run(['examples/production']);
const linkedClones = await run(['examples/templates']);
process.stdout.write(
  `${JSON.stringify(
    {
      bench: 'fleet-images',
      speed,
      vms: 30,
      perVmImport,
      linkedClones,
      speedup: Number((perVmImport.simulatedSeconds / Math.max(1, linkedClones.simulatedSeconds)).toFixed(2)),
    },
    null,
    2,
  )}\n`,
);
