/** Running the real `provider-proxmox` CLI as a child process, and manifests for it. */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseStatusList, type StatusItem } from '../../src/local/status-list.ts';
import type { Simulator, SimulatorOptions } from '../../src/sim/index.ts';
import { providerConfigYaml } from '../../src/sim/provider-config.ts';
import { startTestSim } from './sim.ts';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const MAIN = join(ROOT, 'src/cli/main.ts');

/** What a CLI test starts from: a simulator, a temporary directory, and a ProviderConfig file for it. */
export interface CliFixture {
  sim: Simulator;
  dir: string;
  /** `<dir>/providerconfig.yaml`: the simulator's ProviderConfig and its Secret. */
  config: string;
  close(): Promise<void>;
}

export async function cliFixture(prefix: string, simulator: SimulatorOptions = {}): Promise<CliFixture> {
  const sim = await startTestSim(simulator);
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const config = join(dir, 'providerconfig.yaml');
  writeFileSync(config, providerConfigYaml(sim));
  return {
    sim,
    dir,
    config,
    close: async () => {
      await sim.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export interface CliResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export interface CliOptions {
  timeoutMs?: number;
  cwd?: string;
  /** Called for every complete stdout line (1-based count), with the child. */
  onLine?: (line: string, n: number, child: ChildProcess) => void;
}

/** The environment of a spawned CLI: no colours, and a shared compile cache (halves the start-up time). */
export function cliEnv(): NodeJS.ProcessEnv {
  return {
    ...process.env,
    NO_COLOR: '1',
    TERM: 'dumb',
    NODE_COMPILE_CACHE: join(tmpdir(), 'provider-proxmox-test-cc'),
  };
}

/** Start `node src/cli/main.ts ...args` (the Node running the tests: 24). */
export function spawnCli(args: string[], cwd = ROOT): ChildProcess & { stdout: NodeJS.ReadableStream } {
  return spawn(process.execPath, [MAIN, ...args], {
    cwd,
    env: cliEnv(),
    stdio: ['ignore', 'pipe', 'pipe'],
  }) as ChildProcess & {
    stdout: NodeJS.ReadableStream;
  };
}

/** Run the CLI to its end and collect its output. */
export function cli(args: string[], opts: CliOptions = {}): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [MAIN, ...args], {
      cwd: opts.cwd ?? ROOT,
      env: cliEnv(),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    let partial = '';
    let lines = 0;
    child.stdout.setEncoding('utf8');
    child.stderr.setEncoding('utf8');
    child.stdout.on('data', (d: string) => {
      stdout += d;
      partial += d;
      let i = partial.indexOf('\n');
      while (i >= 0) {
        const line = partial.slice(0, i);
        partial = partial.slice(i + 1);
        opts.onLine?.(line, ++lines, child);
        i = partial.indexOf('\n');
      }
    });
    child.stderr.on('data', (d: string) => {
      stderr += d;
    });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(
        new Error(
          `provider-proxmox ${args.join(' ')} did not finish in ${opts.timeoutMs ?? 60_000} ms\n${stdout}\n${stderr}`,
        ),
      );
    }, opts.timeoutMs ?? 60_000);
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

export interface VmManifest {
  name: string;
  site?: string;
  node?: string;
  network?: string;
  image?: string;
  template?: number;
  /** Default 1Gi. */
  memory?: string;
  extra?: string;
}

/** A small ProxmoxVM manifest (1 vCPU, 1 GiB, 4 GiB disk on local-lvm) as YAML. */
export function vmYaml(m: VmManifest): string {
  return `apiVersion: proxmox.sankofa.io/v1alpha1
kind: ProxmoxVM
metadata:
  name: ${m.name}
  namespace: default
spec:
  forProvider:
    name: ${m.name}
    site: ${m.site ?? 'site-1'}
    node: ${m.node ?? 'ml110-01'}
    cpu: 1
    memory: ${m.memory ?? '1Gi'}
    disk: 4Gi
    storage: local-lvm
    network: ${m.network ?? 'vmbr0'}
${m.template !== undefined ? `    template:\n      vmid: ${m.template}\n` : `    image: ${m.image ?? 'local:import/ubuntu-22.04-cloud.qcow2'}\n`}${m.extra ?? ''}  providerConfigRef:
    name: default
`;
}

/** Write manifests (one file each) into `dir`; returns their paths. */
export function writeManifests(dir: string, vms: VmManifest[]): string[] {
  return vms.map((m) => {
    const file = join(dir, `${m.name}.yaml`);
    writeFileSync(file, vmYaml(m));
    return file;
  });
}

/** One VM as `status -o json` prints it (docs/output.md). */
export type StatusRow = StatusItem;

/** The items of `status -o json` (or apply's -o json document); throws when it is no valid StatusList. */
export function statusItems(stdout: string): StatusItem[] {
  return parseStatusList(stdout).items;
}
