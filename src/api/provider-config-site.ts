/**
 * What one site of a loaded ProviderConfig resolves to: the Secret with its credentials, its SSH
 * access with the private key, its concurrency limits, VMID range and TLS fingerprints. Each is the
 * site's own setting, else spec's, else the default.
 */

import {
  type Concurrency,
  DEFAULT_CONCURRENCY,
  DEFAULT_VMID_RANGE,
  type ProviderConfig,
  type Site,
  type VmidRangeT,
} from './provider-config.ts';
import { ConfigError, type LoadedProviderConfig, type SecretData } from './provider-config-load.ts';

/** The Secret reference a site uses, namespace resolved. */
export function siteSecretRef(cfg: ProviderConfig, site: Site): { name: string; namespace: string; field: string } {
  const i = cfg.spec.sites.indexOf(site);
  const own = site.credentialsSecretRef;
  const ref = own ?? cfg.spec.credentials.secretRef;
  const field = own ? `spec.sites[${i}].credentialsSecretRef` : 'spec.credentials.secretRef';
  if (!ref) throw new Error(`site ${site.name}: no credentials Secret reference (${field})`);
  return { name: ref.name, namespace: ref.namespace ?? cfg.metadata.namespace ?? 'default', field };
}

/** Find the Secret of a site among the loaded ones; the error says where it was looked for. */
export function siteSecret(loaded: LoadedProviderConfig, siteName: string): SecretData {
  const site = findSite(loaded.config, siteName);
  const ref = siteSecretRef(loaded.config, site);
  const s = loaded.secrets.get(`${ref.namespace}/${ref.name}`);
  if (!s) {
    throw new ConfigError(loaded.file, [
      {
        line: loaded.lineOf(ref.field),
        field: ref.field,
        message: `Secret ${ref.namespace}/${ref.name} is not in this file; add it (kind: Secret with stringData tokenid + token, or username + password), or, for doctor, pass its own file with --secret-file`,
      },
    ]);
  }
  return s;
}

/** The SSH settings of a site with its private key from the loaded Secrets; undefined without ssh. */
export interface SiteSsh {
  user: string;
  port: number;
  privateKey: string;
  passphrase?: string;
  hostKeys: string[];
  nodes: Map<string, { host: string; port?: number }>;
  snippetsStorage?: string;
}

export function siteSsh(loaded: LoadedProviderConfig, siteName: string): SiteSsh | undefined {
  const site = findSite(loaded.config, siteName);
  const ssh = site.ssh;
  if (!ssh) return undefined;
  const i = loaded.config.spec.sites.indexOf(site);
  const field = `spec.sites[${i}].ssh.secretRef`;
  const ns = ssh.secretRef.namespace ?? loaded.config.metadata.namespace ?? 'default';
  const secret = loaded.secrets.get(`${ns}/${ssh.secretRef.name}`);
  const privateKey = secret?.data.privateKey;
  if (!privateKey)
    throw new ConfigError(loaded.file, [
      {
        line: loaded.lineOf(field),
        field,
        message: secret
          ? `Secret ${ns}/${ssh.secretRef.name} has no key privateKey; add the OpenSSH private key under stringData.privateKey`
          : `Secret ${ns}/${ssh.secretRef.name} is not in this file; add it (kind: Secret with stringData.privateKey: the OpenSSH private key), or, for doctor, pass its own file with --secret-file`,
      },
    ]);
  return {
    user: ssh.user ?? 'root',
    port: ssh.port ?? 22,
    privateKey,
    ...(secret.data.passphrase ? { passphrase: secret.data.passphrase } : {}),
    hostKeys: ssh.hostKeys,
    nodes: new Map((ssh.nodes ?? []).map((n) => [n.name, { host: n.host, ...(n.port ? { port: n.port } : {}) }])),
    ...(ssh.snippetsStorage ? { snippetsStorage: ssh.snippetsStorage } : {}),
  };
}

export function findSite(cfg: ProviderConfig, name: string): Site {
  const s = cfg.spec.sites.find((x) => x.name === name);
  if (!s)
    throw new Error(
      `no site '${name}' in ${cfg.kind} ${cfg.metadata.name} (sites: ${cfg.spec.sites.map((x) => x.name).join(', ')})`,
    );
  return s;
}

export function siteConcurrency(cfg: ProviderConfig, site: Site): Required<Concurrency> {
  return { ...DEFAULT_CONCURRENCY, ...cfg.spec.concurrency, ...site.concurrency };
}

/** The most a slot limit that adapts reaches (see src/vm/limits.ts). */
export const ADAPTIVE_SLOTS_MAX = 8;

/** Which slot limits of a site adapt: those neither the site nor spec.concurrency sets. */
export function adaptiveConcurrency(cfg: ProviderConfig, site: Site): { perNode: boolean; perStorage: boolean } {
  const set = (k: 'perNode' | 'perStorage') =>
    site.concurrency?.[k] !== undefined || cfg.spec.concurrency?.[k] !== undefined;
  return { perNode: !set('perNode'), perStorage: !set('perStorage') };
}

export function siteVmidRange(cfg: ProviderConfig, site: Site): VmidRangeT {
  return site.vmidRange ?? cfg.spec.vmidRange ?? DEFAULT_VMID_RANGE;
}

/** The site's fingerprints as a list (the field takes one or several). */
export function siteFingerprints(site: Site): string[] {
  const f = site.tls?.fingerprint;
  return f === undefined ? [] : Array.isArray(f) ? f : [f];
}
