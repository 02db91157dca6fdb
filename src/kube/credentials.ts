/**
 * Kubernetes credentials, applied to every request the way `@kubernetes/client-node` 2.x applies
 * them (`KubeConfig.applyToHTTPSOptions` before each call), never cached for the process's life:
 * a token file (the in-cluster service-account token, which the kubelet rotates) is re-read by the
 * library at most every 60 s, as client-go does, and an exec credential plugin is re-run when its
 * credential expires.
 *
 * Two things client-node 2.0 does not do are added here, both as client-go behaves:
 * - a kubeconfig user's `tokenFile` (client-go's field, which client-node ignores) and
 *   `token-file` (which client-node reads once, at load) become the library's re-reading token
 *   file, the same authenticator the in-cluster config uses;
 * - a 401 answer drops every cached credential (client-go resets its token source and refreshes
 *   exec credentials on 401), so a token rotated and revoked within the 60 s, or an exec
 *   credential revoked before its expiry, costs one refused request, which is then sent again.
 */
import { existsSync, readFileSync } from 'node:fs';
import type https from 'node:https';
import { homedir } from 'node:os';
import { delimiter, dirname, isAbsolute, join } from 'node:path';
import { parse } from 'yaml';
import { KubeConfig, type User } from './client-node.ts';

/** The TLS material and headers for one request, and which credentials they were. */
export interface AppliedCredentials {
  options: https.RequestOptions;
  /** Changes when cached credentials are dropped; a 401 names the generation it refused. */
  generation: number;
}

export class KubeCredentials {
  private kc: KubeConfig;
  private generation = 0;
  /** Applications run one at a time, so that concurrent first requests run an exec plugin once. */
  private queue: Promise<unknown> = Promise.resolve();

  constructor(kc: KubeConfig) {
    this.kc = kc;
  }

  get config(): KubeConfig {
    return this.kc;
  }

  /** Whether the credentials can change while the process runs (token file, exec plugin, auth provider). */
  get renewable(): boolean {
    const u = this.kc.getCurrentUser();
    return Boolean(u?.exec || u?.authProvider);
  }

  /** Credentials for the next request (the agent is left out: the caller's shared agent carries it). */
  apply(): Promise<AppliedCredentials> {
    const kc = this.kc;
    const generation = this.generation;
    const run = async (): Promise<AppliedCredentials> => {
      const options: https.RequestOptions = {};
      await kc.applyToHTTPSOptions(options);
      delete options.agent;
      const headers = options.headers as Record<string, string> | undefined;
      // A token file written by hand often ends with a newline, which is not allowed in a header.
      if (headers?.Authorization) headers.Authorization = headers.Authorization.trim();
      return { options, generation };
    };
    const p = this.queue.then(run, run);
    this.queue = p.catch(() => undefined);
    return p;
  }

  /**
   * The server refused the credentials of `generation` (401). Drops the cached ones (a fresh
   * KubeConfig has fresh authenticators: the token file is read again, the exec plugin re-run);
   * concurrent 401s of the same generation drop them once. Returns whether a retry can help.
   */
  unauthorized(generation: number): boolean {
    if (!this.renewable) return false;
    if (generation === this.generation) {
      this.generation++;
      this.kc = copyConfig(this.kc);
    }
    return true;
  }
}

function copyConfig(kc: KubeConfig): KubeConfig {
  const fresh = new KubeConfig();
  fresh.loadFromOptions({
    clusters: kc.getClusters(),
    users: kc.getUsers(),
    contexts: kc.getContexts(),
    currentContext: kc.getCurrentContext(),
  });
  return fresh;
}

/** The kubeconfig files `KubeConfig.loadFromDefault()` reads, in its order (none in-cluster). */
export function defaultKubeconfigFiles(): string[] {
  const env = process.env.KUBECONFIG;
  if (env) return env.split(delimiter).filter(Boolean);
  const home = join(homedir(), '.kube', 'config');
  return existsSync(home) ? [home] : [];
}

/**
 * Users with a `tokenFile` (or `token-file`) in the given kubeconfig files get the token-file
 * authenticator the in-cluster config uses, so the file is re-read instead of read once or never.
 * A relative path is relative to its kubeconfig, as in client-go. The first file naming a user wins.
 */
export function withTokenFiles(kc: KubeConfig, files: string[]): KubeConfig {
  const tokenFiles = new Map<string, string>();
  for (const file of files) {
    let doc: unknown;
    try {
      doc = parse(readFileSync(file, 'utf8'));
    } catch {
      continue; // client-node loaded it already; what it could not read is not ours to report
    }
    const users = (doc as { users?: unknown } | null)?.users;
    if (!Array.isArray(users)) continue;
    for (const u of users as Array<{ name?: unknown; user?: Record<string, unknown> }>) {
      const path = u?.user?.tokenFile ?? u?.user?.['token-file'];
      if (typeof u?.name !== 'string' || typeof path !== 'string' || !path || tokenFiles.has(u.name)) continue;
      tokenFiles.set(u.name, isAbsolute(path) ? path : join(dirname(file), path));
    }
  }
  if (!tokenFiles.size) return kc;
  const users = kc.getUsers().map((u): User => {
    const path = tokenFiles.get(u.name);
    if (!path || u.exec || u.authProvider) return u;
    // client-go: the last value read from the file takes precedence over a static token.
    return { ...u, token: undefined, authProvider: { name: 'tokenFile', config: { tokenFile: path } } } as User;
  });
  const out = new KubeConfig();
  out.loadFromOptions({
    clusters: kc.getClusters(),
    users,
    contexts: kc.getContexts(),
    currentContext: kc.getCurrentContext(),
  });
  return out;
}
