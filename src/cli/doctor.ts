/** `provider-proxmox doctor`: commander wiring for src/doctor/doctor.ts. Exit 0 all good, 1 problems, 2 usage. */
import { readFile } from 'node:fs/promises';
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { ConfigError, loadProviderConfig } from '../api/provider-config.ts';
import {
  type DoctorOptions,
  type DoctorReport,
  type DoctorSite,
  doctorSitesFromConfig,
  renderText,
  runDoctor,
} from '../doctor/doctor.ts';
import { needsFromPath, type VmNeeds } from '../doctor/manifests.ts';
import { type Credentials, parseTokenString, passwordCredentials } from '../proxmox/auth.ts';
import { normalizeFingerprint } from '../proxmox/tls.ts';

export interface DoctorDeps {
  stdout?: (s: string) => void;
  stderr?: (s: string) => void;
  /** Receives the exit code (default: process.exitCode). */
  exit?: (code: number) => void;
  /** Client knobs (tests). */
  client?: DoctorOptions['client'];
}

interface Opts {
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
  output: 'text' | 'json';
  timeout: number;
}

const collect = (v: string, prev: string[] = []) => [...prev, v];

function fingerprintArg(v: string, prev: string[] = []): string[] {
  const fp = normalizeFingerprint(v);
  if (!fp)
    throw new InvalidArgumentError('expected a SHA-256 fingerprint (AB:CD:... 32 bytes), see `pvenode cert info`');
  return [...prev, fp];
}

function secondsArg(v: string): number {
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new InvalidArgumentError('expected a number of seconds > 0');
  return n;
}

class UsageError extends Error {}

async function readSecretFile(path: string, what: string): Promise<string> {
  try {
    return (await readFile(path, 'utf8')).replace(/\r?\n$/, '');
  } catch (e) {
    throw new UsageError(`cannot read ${what} ${path}: ${(e as NodeJS.ErrnoException).code ?? String(e)}`);
  }
}

async function flagCredentials(o: Opts): Promise<{ credentials: Credentials; source: string } | undefined> {
  const given = [o.token !== undefined, o.tokenFile !== undefined, o.user !== undefined].filter(Boolean).length;
  if (given > 1) throw new UsageError('give one of --token, --token-file, --user');
  try {
    if (o.token !== undefined) return { credentials: parseTokenString(o.token), source: '--token' };
    if (o.tokenFile !== undefined) {
      return {
        credentials: parseTokenString(await readSecretFile(o.tokenFile, 'token file')),
        source: `token file ${o.tokenFile}`,
      };
    }
    if (o.user !== undefined) {
      if (o.passwordFile === undefined) throw new UsageError('--user needs --password-file');
      return {
        credentials: passwordCredentials(o.user, await readSecretFile(o.passwordFile, 'password file')),
        source: `--user ${o.user} / ${o.passwordFile}`,
      };
    }
  } catch (e) {
    if (e instanceof UsageError) throw e;
    throw new UsageError((e as Error).message);
  }
  if (o.passwordFile !== undefined) throw new UsageError('--password-file needs --user');
  return undefined;
}

async function sitesFromFlags(o: Opts): Promise<DoctorSite[]> {
  const creds = await flagCredentials(o);
  if (!creds)
    throw new UsageError('--endpoint needs credentials: --token, --token-file, or --user with --password-file');
  const tlsGiven = [o.fingerprint.length > 0, o.caFile !== undefined, o.insecureSkipTlsVerify === true].filter(
    Boolean,
  ).length;
  if (tlsGiven > 1) throw new UsageError('give only one of --fingerprint, --ca-file, --insecure-skip-tls-verify');
  for (const e of o.endpoint) {
    if (!/^https?:\/\/[^\s/@]+\/?$/.test(e)) throw new UsageError(`--endpoint ${e}: expected https://HOST:8006`);
  }
  const caBundle = o.caFile !== undefined ? await readSecretFile(o.caFile, 'CA file') : undefined;
  return [
    {
      name: o.site ?? 'default',
      endpoints: o.endpoint,
      ...(o.node.length ? { nodes: o.node } : {}),
      tls: {
        ...(o.fingerprint.length ? { fingerprints: o.fingerprint } : {}),
        ...(caBundle !== undefined ? { caBundle } : {}),
        ...(o.insecureSkipTlsVerify ? { insecureSkipVerify: true } : {}),
      },
      credentials: creds.credentials,
      where: 'the --endpoint/--fingerprint flags',
      credentialsSource: creds.source,
    },
  ];
}

export function registerDoctor(program: Command, deps: DoctorDeps = {}): void {
  const out = deps.stdout ?? ((s: string) => void process.stdout.write(s));
  const err = deps.stderr ?? ((s: string) => void process.stderr.write(s));
  const exit =
    deps.exit ??
    ((code: number) => {
      process.exitCode = code;
    });
  program
    .command('doctor')
    .description(
      'Check that the provider can work against Proxmox VE: reachability and TLS, auth, version and capabilities, node health, bridges, storages, the images the manifests use, and the privileges of the credentials. Exit 0: all good; 1: problems (each with its fix); 2: usage error.',
    )
    .option('--config <file>', 'ProviderConfig / ClusterProviderConfig YAML (with its Secret, or see --secret-file)')
    .option('--secret-file <file>', 'a YAML file with the credentials Secret (repeatable)', collect, [])
    .option('--name <name>', 'which provider config of the file (when it has several)')
    .option('--site <name>', 'check only this site (with --endpoint: the name to report)')
    .option(
      '--endpoint <url>',
      'instead of --config: a PVE API URL, https://HOST:8006 (repeatable: nodes of one cluster)',
      collect,
      [],
    )
    .option('--node <name>', 'with --endpoint: a node to check (repeatable; default: all)', collect, [])
    .option(
      '--token <USER@REALM!ID=SECRET>',
      'with --endpoint: an API token (visible in the process list: prefer --token-file)',
    )
    .option('--token-file <file>', 'with --endpoint: a file holding USER@REALM!ID=SECRET')
    .option('--user <user@realm>', 'with --endpoint: user for password (ticket) auth')
    .option('--password-file <file>', 'with --user: a file holding the password')
    .option(
      '--fingerprint <sha256>',
      'with --endpoint: pin this certificate fingerprint (repeatable)',
      fingerprintArg,
      [],
    )
    .option('--ca-file <file>', 'with --endpoint: PEM CA bundle to verify the certificate')
    .option('--insecure-skip-tls-verify', 'with --endpoint: do not verify TLS at all')
    .option(
      '-f, --filename <path>',
      'manifests (file or directory) whose bridges, storages, images and templates to check (repeatable)',
      collect,
      [],
    )
    .addOption(new Option('-o, --output <format>', 'report format').choices(['text', 'json']).default('text'))
    .option('--timeout <seconds>', 'request timeout', secondsArg, 15)
    .addHelpText(
      'after',
      `
Examples:
  provider-proxmox doctor --config provider-config.yaml
  provider-proxmox doctor --config provider-config.yaml --site site-1 -f examples/production
  provider-proxmox doctor --endpoint https://pve1:8006 --token-file token.txt --fingerprint AB:CD:...`,
    )
    .action(async (o: Opts) => {
      const print = (report: DoctorReport) => {
        out(o.output === 'json' ? `${JSON.stringify(report, null, 2)}\n` : renderText(report));
        exit(report.ok ? 0 : 1);
      };
      let report: DoctorReport;
      try {
        if (o.config !== undefined && o.endpoint.length) throw new UsageError('give --config or --endpoint, not both');
        if (o.config === undefined && !o.endpoint.length) throw new UsageError('give --config FILE or --endpoint URL');
        let needs: VmNeeds[] = [];
        for (const f of o.filename) {
          try {
            needs.push(...(await needsFromPath(f)));
          } catch (e) {
            throw new UsageError(`-f ${f}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
          }
        }
        let sites: DoctorSite[];
        const client = {
          requestTimeoutMs: o.timeout * 1000,
          connectTimeoutMs: Math.min(o.timeout, 10) * 1000,
          ...deps.client,
        };
        if (o.config !== undefined) {
          if (
            o.token ||
            o.tokenFile ||
            o.user ||
            o.fingerprint.length ||
            o.caFile ||
            o.insecureSkipTlsVerify ||
            o.node.length
          ) {
            throw new UsageError(
              '--token/--user/--fingerprint/--ca-file/--node go with --endpoint; with --config they come from the file',
            );
          }
          let loaded: Awaited<ReturnType<typeof loadProviderConfig>>;
          try {
            loaded = await loadProviderConfig(o.config, {
              ...(o.name !== undefined ? { name: o.name } : {}),
              secretFiles: o.secretFile,
            });
          } catch (e) {
            if (e instanceof ConfigError && /cannot read/.test(e.message)) throw new UsageError(e.message);
            if (e instanceof ConfigError) {
              // The configuration itself is what is wrong: a finding, exit 1.
              report = {
                ok: false,
                problems: e.problems.length,
                warnings: 0,
                sites: [
                  {
                    site: '(config)',
                    endpoints: [],
                    checks: e.problems.map((p) => ({
                      id: 'config',
                      status: 'fail' as const,
                      detail: p,
                      fix: 'correct the file',
                    })),
                  },
                ],
              };
              return print(report);
            }
            throw e;
          }
          if (o.site !== undefined && !loaded.config.spec.sites.some((s) => s.name === o.site)) {
            throw new UsageError(
              `--site ${o.site}: no such site in ${o.config} (sites: ${loaded.config.spec.sites.map((s) => s.name).join(', ')})`,
            );
          }
          sites = doctorSitesFromConfig(loaded, o.site);
          if (o.site !== undefined) needs = needs.filter((n) => !n.site || n.site === o.site);
        } else {
          sites = await sitesFromFlags(o);
        }
        report = await runDoctor({ sites, needs, client });
      } catch (e) {
        if (e instanceof UsageError) {
          err(`provider-proxmox doctor: ${e.message}\n`);
          exit(2);
          return;
        }
        throw e;
      }
      print(report);
    });
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
