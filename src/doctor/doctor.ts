/**
 * `provider-proxmox doctor`: the seed's preflight, for a human. Runs each site's checks in order
 * (endpoints and credentials from connection.ts, version and capabilities, then the nodes, bridges,
 * storages, images, templates, pools and privileges from cluster.ts, and SSH), counts the problems
 * and renders the report; and makes the doctor sites of a ProviderConfig. Every failure names the
 * fix. No secret is ever printed.
 */
import type { LoadedProviderConfig } from '../api/provider-config-load.ts';
import { findSite, siteSecretRef, siteSsh } from '../api/provider-config-site.ts';
import { authIdOf } from '../proxmox/auth.ts';
import { type Capabilities, describeCapabilities } from '../proxmox/capabilities.ts';
import { PveClient } from '../proxmox/client.ts';
import { PveError } from '../proxmox/errors.ts';
import { scrub } from '../proxmox/secret.ts';
import { siteCredentials, siteTls } from '../proxmox/site.ts';
import {
  type Ctx,
  checkBridges,
  checkImagesAndTemplates,
  checkNodes,
  checkPools,
  checkPrivileges,
  checkStorages,
} from './cluster.ts';
import {
  authFix,
  type Check,
  type CheckStatus,
  checkEndpoint,
  type DoctorClientOptions,
  type DoctorSite,
  msg,
} from './connection.ts';
import { checkLocks } from './locks.ts';
import type { VmNeeds } from './manifests.ts';
import { checkQuorum } from './quorum.ts';
import { checkSsh } from './ssh.ts';

export interface SiteReport {
  site: string;
  endpoints: string[];
  version?: string;
  checks: Check[];
}

export interface DoctorReport {
  ok: boolean;
  problems: number;
  warnings: number;
  sites: SiteReport[];
}

export interface DoctorOptions {
  sites: DoctorSite[];
  needs?: VmNeeds[];
  /** Client knobs (tests: clock, retry, timeouts). */
  client?: DoctorClientOptions;
}

async function checkSite(
  site: DoctorSite,
  allNeeds: VmNeeds[],
  siteCount: number,
  clientOpts: DoctorOptions['client'],
): Promise<SiteReport> {
  const report: SiteReport = { site: site.name, endpoints: site.endpoints, checks: [] };
  const secrets: string[] = [];
  if (site.credentials?.kind === 'token') secrets.push(site.credentials.secret.reveal());
  if (site.credentials?.kind === 'password') secrets.push(site.credentials.password.reveal());
  const add = (c: Check) =>
    report.checks.push({
      ...c,
      detail: scrub(c.detail, secrets),
      ...(c.fix ? { fix: scrub(c.fix, secrets) } : {}),
    });
  if (!site.credentials) {
    add({
      id: 'credentials',
      status: 'fail',
      detail: site.credentialsProblem?.detail ?? 'no credentials',
      fix:
        site.credentialsProblem?.fix ?? 'give the site a credentials Secret (tokenid + token, or username + password)',
    });
  }
  let reachable = false;
  let authError: PveError | undefined;
  for (const ep of site.endpoints) {
    const r = await checkEndpoint(site, ep, clientOpts);
    add(r.check);
    reachable ||= r.reachable;
    authError ??= r.authError;
  }
  if (!reachable || !site.credentials) {
    add({ id: 'remaining checks', status: 'skip', detail: !reachable ? 'no endpoint reachable' : 'no credentials' });
    return report;
  }
  if (authError) {
    add({
      id: 'auth',
      status: 'fail',
      detail: `${authIdOf(site.credentials)}: ${authError.reason || authError.message}`,
      fix: authFix(site, authError),
    });
    add({ id: 'remaining checks', status: 'skip', detail: 'not authenticated' });
    return report;
  }
  const c = new PveClient({
    ...clientOpts,
    site: site.name,
    endpoints: site.endpoints,
    credentials: site.credentials,
    tls: site.tls,
  });
  try {
    let caps: Capabilities;
    try {
      caps = await c.capabilities();
    } catch (e) {
      add({ id: 'auth', status: 'fail', detail: msg(e), ...(e instanceof PveError ? { fix: authFix(site, e) } : {}) });
      return report;
    }
    add({
      id: 'auth',
      status: 'ok',
      detail: `${site.credentials.kind === 'token' ? 'API token' : 'user + password (ticket)'} ${authIdOf(site.credentials)}`,
    });
    report.version = caps.version.text;
    const old = !caps.importFrom;
    add({
      id: 'version',
      status: old || caps.version.major < 7 ? 'warn' : 'ok',
      detail: `Proxmox VE ${caps.version.text}; ${describeCapabilities(caps).join('; ')}`,
      ...(old
        ? {
            fix: 'PVE < 7.2 has no import-from: VMs must be cloned from templates (spec.forProvider.template); upgrading to 8.3+ also allows importing cloud images from import volumes',
          }
        : {}),
    });
    const needs = allNeeds.filter(
      (n) =>
        n.site === site.name ||
        (!n.site && (siteCount === 1 || (n.node !== undefined && (site.nodes ?? []).includes(n.node)))),
    );
    const ctx: Ctx = { site, c, caps, add, needs, secrets };
    const nodes = await checkNodes(ctx);
    await checkQuorum(ctx);
    const storagesUsed = new Set<string>();
    const bridgesUsed = new Set<string>();
    for (const node of nodes) {
      for (const b of await checkBridges(ctx, node)) bridgesUsed.add(b);
      const st = await checkStorages(ctx, node);
      for (const s of st.used) storagesUsed.add(s);
      for (const s of await checkImagesAndTemplates(ctx, node, st.storages)) storagesUsed.add(s);
    }
    if (site.sshProblem)
      add({ id: 'ssh', status: 'fail', detail: site.sshProblem, fix: 'add the Secret with stringData.privateKey' });
    else if (site.ssh) for (const check of await checkSsh(c, site.ssh, nodes)) add(check);
    const pools = await checkPools(ctx);
    await checkLocks(ctx);
    await checkPrivileges(ctx, {
      nodes,
      storages: [...storagesUsed],
      bridges: needs.length ? [...bridgesUsed] : [...bridgesUsed].slice(0, 1),
      pools,
    });
  } finally {
    await c.close();
  }
  return report;
}

export async function runDoctor(o: DoctorOptions): Promise<DoctorReport> {
  const sites: SiteReport[] = [];
  for (const s of o.sites) sites.push(await checkSite(s, o.needs ?? [], o.sites.length, o.client));
  // Manifests naming a site that is not configured.
  const names = new Set(o.sites.map((s) => s.name));
  const stray = (o.needs ?? []).filter((n) => n.site && !names.has(n.site));
  if (stray.length && sites[0]) {
    for (const n of stray) {
      sites[0].checks.push({
        id: `manifest ${n.name}`,
        status: 'fail',
        detail: `${n.at.site ?? n.where}: site '${n.site}' is not in the configuration (sites: ${[...names].join(', ')})`,
        fix: `fix spec.forProvider.site in ${n.at.site ?? n.where}, or add the site to the ProviderConfig`,
      });
    }
  }
  let problems = 0;
  let warnings = 0;
  for (const s of sites) {
    for (const c of s.checks) {
      if (c.status === 'fail') problems++;
      if (c.status === 'warn') warnings++;
    }
  }
  return { ok: problems === 0, problems, warnings, sites };
}

const MARK: Record<CheckStatus, string> = { ok: 'ok  ', warn: 'WARN', fail: 'FAIL', skip: 'skip' };

export function renderText(r: DoctorReport): string {
  const lines: string[] = [];
  for (const s of r.sites) {
    // (A report on the ProviderConfig file itself has no endpoints to name.)
    const where = s.endpoints.length ? ` (${s.endpoints.join(', ')})` : '';
    lines.push(
      `${s.endpoints.length ? `site ${s.site}` : s.site}${where}${s.version ? `: Proxmox VE ${s.version}` : ''}`,
    );
    const width = Math.min(36, Math.max(...s.checks.map((c) => c.id.length)));
    for (const c of s.checks) {
      lines.push(`  ${MARK[c.status]}  ${c.id.padEnd(width)}  ${c.detail}`);
      if (c.fix && c.status !== 'ok') lines.push(`  ${' '.repeat(4)}  ${' '.repeat(width)}  fix: ${c.fix}`);
    }
    lines.push('');
  }
  const verdict = r.ok ? 'everything the provider needs is there' : 'the provider cannot work as configured';
  lines.push(
    `${r.problems} problem${r.problems === 1 ? '' : 's'}, ${r.warnings} warning${r.warnings === 1 ? '' : 's'}: ${verdict}`,
  );
  return `${lines.join('\n')}\n`;
}

// --- targets ---------------------------------------------------------------------------------------

/** Doctor sites from a loaded ProviderConfig; credential problems become failed checks, not exceptions. */
export function doctorSitesFromConfig(loaded: LoadedProviderConfig, only?: string): DoctorSite[] {
  const sites = only ? [findSite(loaded.config, only)] : loaded.config.spec.sites;
  return sites.map((s) => {
    const i = loaded.config.spec.sites.indexOf(s);
    const ref = siteSecretRef(loaded.config, s);
    const line = loaded.lineOf(`spec.sites[${i}]`);
    const base: DoctorSite = {
      name: s.name,
      endpoints: s.endpoints,
      nodes: s.nodes,
      tls: siteTls(s),
      where: `${loaded.file}${line ? `:${line}` : ''} (spec.sites[${i}])`,
      credentialsSource: `Secret ${ref.namespace}/${ref.name}`,
    };
    try {
      base.ssh = siteSsh(loaded, s.name);
    } catch (e) {
      base.sshProblem = e instanceof Error ? e.message : String(e);
    }
    try {
      return { ...base, credentials: siteCredentials(loaded, s.name) };
    } catch (e) {
      return {
        ...base,
        credentialsProblem: {
          detail: e instanceof Error ? e.message : String(e),
          fix: `provide Secret ${ref.namespace}/${ref.name} with tokenid + token (or username + password): in ${loaded.file}, or with --secret-file`,
        },
      };
    }
  });
}
