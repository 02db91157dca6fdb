/**
 * `provider-proxmox doctor`: commander wiring for src/doctor/doctor.ts. Exit 0 all good, 1
 * problems, 2 usage. The options only; what runs (the Proxmox client, the ProviderConfig
 * schemas) is doctor-run.ts, loaded when the command runs, so that every other command and
 * `--help` start without it.
 */
import { Command, CommanderError, Option } from 'commander';
import type { DoctorOptions } from '../doctor/doctor.ts';
import { durationOption } from './args.ts';

export interface DoctorDeps {
  stdout?: (s: string) => void;
  stderr?: (s: string) => void;
  /** Receives the exit code (default: process.exitCode). */
  exit?: (code: number) => void;
  /** Client knobs (tests). */
  client?: DoctorOptions['client'];
}

export interface Opts {
  config?: string;
  secretFile: string[];
  name?: string;
  site?: string;
  endpoint: string[];
  node: string[];
  token?: string;
  tokenFile?: string;
  user?: string;
  passwordFile?: string;
  fingerprint: string[];
  caFile?: string;
  insecureSkipTlsVerify?: boolean;
  filename: string[];
  /** `table` is `text` (the other commands' name for their human output). */
  output: 'text' | 'table' | 'json' | 'yaml';
  timeout: number;
}

/**
 * The options as commander gives them: a repeatable option never given is undefined (it has no
 * default, which --help would print as `(default: [])`).
 */
type Repeatable = 'secretFile' | 'endpoint' | 'node' | 'fingerprint' | 'filename';
type Parsed = Omit<Opts, Repeatable> & Partial<Pick<Opts, Repeatable>>;

const collect = (v: string, prev: string[] = []) => [...prev, v];

export function registerDoctor(program: Command, deps: DoctorDeps = {}): void {
  program
    .command('doctor')
    .description(
      'Check that the provider can work against Proxmox VE: reachability and TLS, auth, version and capabilities, node health, bridges, storages, the images the manifests use, and the privileges of the credentials. Exit 0: all good; 1: problems (each with its fix); 2: usage error.',
    )
    .option('--config <file>', 'ProviderConfig / ClusterProviderConfig YAML (with its Secret, or see --secret-file)')
    .option('--secret-file <file>', 'a YAML file with the credentials Secret (repeatable)', collect)
    .option('--name <name>', 'which provider config of the file (when it has several)')
    .option('--site <name>', 'check only this site (with --endpoint: the name to report)')
    .option(
      '--endpoint <url>',
      'instead of --config: a PVE API URL, https://HOST:8006 (repeatable: nodes of one cluster)',
      collect,
    )
    .option('--node <name>', 'with --endpoint: a node to check (repeatable; default: all)', collect)
    .option(
      '--token <USER@REALM!ID=SECRET>',
      'with --endpoint: an API token (visible in the process list: prefer --token-file)',
    )
    .option('--token-file <file>', 'with --endpoint: a file holding USER@REALM!ID=SECRET')
    .option('--user <user@realm>', 'with --endpoint: user for password (ticket) auth')
    .option('--password-file <file>', 'with --user: a file holding the password')
    // Collected as given: doctor-run.ts checks each (normalizeFingerprint lives with the TLS client,
    // which --help need not load) and reports a bad one as commander reports an invalid argument.
    .option('--fingerprint <sha256>', 'with --endpoint: pin this certificate fingerprint (repeatable)', collect)
    .option('--ca-file <file>', 'with --endpoint: PEM CA bundle to verify the certificate')
    .option('--insecure-skip-tls-verify', 'with --endpoint: do not verify TLS at all')
    .option(
      '-f, --filename <path>',
      'manifests (file or directory) whose bridges, storages, images and templates to check (repeatable)',
      collect,
    )
    .addOption(
      new Option('-o, --output <format>', 'report format (table is text)')
        .choices(['text', 'table', 'json', 'yaml'])
        .default('text'),
    )
    .addOption(durationOption('--timeout <d>', 'request timeout (a bare number is seconds)', '15s', 100))
    .addHelpText(
      'after',
      `
Examples:
  provider-proxmox doctor --config provider-config.yaml
  provider-proxmox doctor --config provider-config.yaml --site site-1 -f examples/production
  provider-proxmox doctor --endpoint https://pve1:8006 --token-file token.txt --fingerprint AB:CD:...`,
    )
    .action(async (o: Parsed, cmd: Command) =>
      (await import('./doctor-run.ts')).runDoctorCommand(
        {
          ...o,
          secretFile: o.secretFile ?? [],
          endpoint: o.endpoint ?? [],
          node: o.node ?? [],
          fingerprint: o.fingerprint ?? [],
          filename: o.filename ?? [],
        },
        cmd,
        deps,
      ),
    );
}

/** Run `doctor ARGS...` in a fresh program (tests, embedding); resolves with the exit code. */
export async function doctorMain(args: string[], deps: DoctorDeps = {}): Promise<number> {
  let code = 0;
  const program = new Command('provider-proxmox').exitOverride();
  const errw = deps.stderr ?? ((s: string) => void process.stderr.write(s));
  program.configureOutput({ writeOut: deps.stdout ?? ((s) => void process.stdout.write(s)), writeErr: errw });
  registerDoctor(program, { ...deps, exit: (c) => (code = c) });
  try {
    await program.parseAsync(['doctor', ...args], { from: 'user' });
  } catch (e) {
    if (e instanceof CommanderError) return e.exitCode === 0 ? 0 : 2;
    throw e;
  }
  return code;
}
