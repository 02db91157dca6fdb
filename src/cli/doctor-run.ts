/**
 * What `provider-proxmox doctor` does once its options are parsed (doctor.ts wires them): the
 * credentials and TLS settings from the flags or the ProviderConfig, the manifests' needs, then
 * src/doctor/doctor.ts's checks, printed as text or JSON. Loaded only when the command runs.
 */
import { readFile } from 'node:fs/promises';
import type { Command } from 'commander';
import { stringify } from 'yaml';
import { ConfigError, loadProviderConfig } from '../api/provider-config-load.ts';
import type { DoctorSite } from '../doctor/connection.ts';
import { type DoctorReport, doctorSitesFromConfig, renderText, runDoctor } from '../doctor/doctor.ts';
import { needsFromPath, type VmNeeds } from '../doctor/manifests.ts';
import { type Credentials, parseTokenString, passwordCredentials } from '../proxmox/auth.ts';
import { normalizeFingerprint } from '../proxmox/tls.ts';
import type { DoctorDeps, Opts } from './doctor.ts';
import { configPath, givenProblem, manifestPaths } from './paths.ts';

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

/** `--fingerprint` values, normalized; a bad one ends the command as an invalid argument (exit 2). */
function fingerprints(values: string[], cmd: Command): string[] {
  return values.map((v) => {
    const fp = normalizeFingerprint(v);
    if (!fp)
      cmd.error(
        `error: option '--fingerprint <sha256>' argument '${v}' is invalid. expected a SHA-256 fingerprint (AB:CD:... 32 bytes), see \`pvenode cert info\``,
        { exitCode: 1, code: 'commander.invalidArgument' },
      );
    return fp!;
  });
}

export async function runDoctorCommand(given: Opts, cmd: Command, deps: DoctorDeps): Promise<void> {
  const o: Opts = { ...given, fingerprint: fingerprints(given.fingerprint, cmd) };
  const out = deps.stdout ?? ((s: string) => void process.stdout.write(s));
  const err = deps.stderr ?? ((s: string) => void process.stderr.write(s));
  const exit =
    deps.exit ??
    ((code: number) => {
      process.exitCode = code;
    });
  const print = (report: DoctorReport) => {
    if (o.output === 'json') out(`${JSON.stringify(report, null, 2)}\n`);
    else if (o.output === 'yaml') out(stringify(report));
    else out(renderText(report));
    exit(report.ok ? 0 : 1);
  };
  let report: DoctorReport;
  try {
    if (o.config !== undefined && o.endpoint.length) throw new UsageError('give --config or --endpoint, not both');
    if (o.config === undefined && !o.endpoint.length) throw new UsageError('give --config FILE or --endpoint URL');
    // A file named on the command line that is not there: one line, as every command says it.
    const missing = givenProblem([
      manifestPaths(o.filename),
      configPath(o.config),
      { flag: '--secret-file', path: o.secretFile, what: 'a YAML file with the credentials Secret' },
      { flag: '--token-file', path: o.tokenFile, what: 'a file holding USER@REALM!ID=SECRET' },
      { flag: '--password-file', path: o.passwordFile, what: 'a file holding the password' },
      { flag: '--ca-file', path: o.caFile, what: 'a PEM CA bundle' },
    ]);
    if (missing) throw new UsageError(missing);
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
      requestTimeoutMs: o.timeout,
      connectTimeoutMs: Math.min(o.timeout, 10_000),
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
                site: `ProviderConfig ${o.config}`,
                endpoints: [],
                checks: e.problems.map((p) => ({
                  id: 'config',
                  status: 'fail' as const,
                  detail: p,
                  fix: 'correct that field of the file (see docs/install.md for a ProviderConfig), then run doctor again',
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
}
