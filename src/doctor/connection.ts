/**
 * `doctor`'s vocabulary and its first look at a site: what a check and a doctor site are, and the
 * checks made before any other, per endpoint (reachability and TLS) and of the credentials (the fix
 * when PVE rejects a token or a password). doctor.ts runs them first, then cluster.ts's checks.
 */
import type { SiteSsh } from '../api/provider-config-site.ts';
import { authIdOf, type Credentials } from '../proxmox/auth.ts';
import { PveClient } from '../proxmox/client.ts';
import type { PveClientOptions } from '../proxmox/client-core.ts';
import { AuthenticationError, PermissionError, PveError, TlsError, UnavailableError } from '../proxmox/errors.ts';
import { probeCertificate, type TlsSettings, tlsFix, tlsMode } from '../proxmox/tls.ts';

export type CheckStatus = 'ok' | 'warn' | 'fail' | 'skip';

export interface Check {
  id: string;
  status: CheckStatus;
  detail: string;
  fix?: string;
}

export interface DoctorSite {
  name: string;
  endpoints: string[];
  /** Configured nodes (default: every node of the cluster). */
  nodes?: string[] | undefined;
  tls: TlsSettings;
  credentials?: Credentials | undefined;
  /** Why there are no credentials (a config problem), and its fix. */
  credentialsProblem?: { detail: string; fix: string } | undefined;
  /** Where the site is configured (`pc.yaml:20 (spec.sites[0])`, `--endpoint`), for fixes. */
  where: string;
  /** Where the credentials come from (`Secret ns/name`, `--token`), for fixes. */
  credentialsSource: string;
  /** SSH to the nodes (cloud-init snippets), when the ProviderConfig gives it. */
  ssh?: SiteSsh | undefined;
  /** Why the ssh section cannot be used (its Secret is missing), and its fix. */
  sshProblem?: string | undefined;
}

/** The client knobs doctor passes on to every PveClient it makes (tests: clock, retry, timeouts). */
export type DoctorClientOptions = Partial<Omit<PveClientOptions, 'endpoints' | 'credentials' | 'tls' | 'site'>>;

export function msg(e: unknown): string {
  return e instanceof PveError ? e.reason || e.message : e instanceof Error ? e.message : String(e);
}

export async function checkEndpoint(
  site: DoctorSite,
  endpoint: string,
  clientOpts: DoctorClientOptions | undefined,
): Promise<{
  check: Check;
  reachable: boolean;
  authError?: PveError;
}> {
  const id = `endpoint ${endpoint}`;
  let presented: string | undefined;
  const u = new URL(endpoint);
  if (u.protocol === 'https:') {
    try {
      presented = (await probeCertificate(endpoint, clientOpts?.connectTimeoutMs ?? 5000)).fingerprint256;
    } catch (e) {
      const code = (e as { code?: string }).code;
      return {
        reachable: false,
        check: {
          id,
          status: 'fail',
          detail: `unreachable: ${code === 'ECONNREFUSED' ? 'connection refused' : msg(e)}`,
          fix: `check the URL (the PVE API listens on https://NODE:8006), that pveproxy runs on the node (systemctl status pveproxy), and the firewalls between here and ${u.host}; fix the endpoint in ${site.where}`,
        },
      };
    }
  }
  if (!site.credentials) {
    return {
      reachable: true,
      check: {
        id,
        status: 'ok',
        detail: `reachable${presented ? `; certificate ${presented}` : ''} (no credentials: not authenticated)`,
      },
    };
  }
  const c = new PveClient({
    ...clientOpts,
    site: site.name,
    endpoints: [endpoint],
    credentials: site.credentials,
    tls: site.tls,
    retry: { attempts: 1 },
  });
  try {
    await c.version();
    return {
      reachable: true,
      check: {
        id,
        status: tlsMode(site.tls) === 'insecure' ? 'warn' : 'ok',
        detail: tlsDetail(site.tls, presented, u.protocol),
        ...(tlsMode(site.tls) === 'insecure'
          ? { fix: `pin the certificate instead: tls: { fingerprint: "${presented ?? 'AB:CD:...'}" } in ${site.where}` }
          : {}),
      },
    };
  } catch (e) {
    if (e instanceof AuthenticationError || e instanceof PermissionError) {
      return {
        reachable: true,
        authError: e,
        check: { id, status: 'ok', detail: `reachable; ${tlsDetail(site.tls, presented, u.protocol)}` },
      };
    }
    if (e instanceof TlsError) {
      const fix = tlsFix(tlsMode(site.tls), e.presentedFingerprint ?? presented, site.where, u.hostname);
      return { reachable: false, check: { id, status: 'fail', detail: `TLS: ${e.reason}`, fix } };
    }
    if (e instanceof UnavailableError) {
      return {
        reachable: false,
        check: {
          id,
          status: 'fail',
          detail: `unreachable: ${e.reason}`,
          fix: `check that pveproxy runs on the node and the path from here to ${u.host}; fix the endpoint in ${site.where}`,
        },
      };
    }
    return {
      reachable: false,
      check: {
        id,
        status: 'fail',
        detail: `not a working Proxmox VE API: ${msg(e)}`,
        fix: `point the endpoint at https://NODE:8006 in ${site.where}`,
      },
    };
  } finally {
    await c.close();
  }
}

function tlsDetail(tls: TlsSettings, presented: string | undefined, protocol: string): string {
  if (protocol === 'http:') return 'reachable over plain http (credentials travel unencrypted)';
  switch (tlsMode(tls)) {
    case 'fingerprint':
      return `reachable; TLS certificate matches the pinned fingerprint ${presented ?? ''}`.trim();
    case 'ca-bundle':
      return 'reachable; TLS certificate verified against tls.caBundle';
    case 'insecure':
      return `reachable; TLS NOT verified (insecureSkipTLSVerify); the node presents ${presented ?? '?'}`;
    default:
      return 'reachable; TLS certificate verified against the system CAs';
  }
}

export function authFix(site: DoctorSite, e: PveError): string {
  const creds = site.credentials;
  if (e instanceof PermissionError && e.needsTicket) return 'this PVE call needs user + password authentication';
  if (creds?.kind === 'token') {
    const id = creds.tokenId;
    const user = id.slice(0, id.indexOf('!'));
    const tok = id.slice(id.indexOf('!') + 1);
    return (
      `PVE rejected the API token ${id}. Check the tokenid and token keys of ${site.credentialsSource} ` +
      `(token id USER@REALM!NAME and its secret UUID); list tokens with \`pveum user token list ${user}\`, ` +
      `or create one with \`pveum user token add ${user} ${tok} --privsep 0\` and put the printed value in the Secret`
    );
  }
  return `PVE rejected user ${creds ? authIdOf(creds) : '?'}. Check the username (with its realm, e.g. root@pam) and password in ${site.credentialsSource}`;
}
