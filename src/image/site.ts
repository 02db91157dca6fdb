/**
 * Connects a ProxmoxImage or ProxmoxTemplate to its site, as VmConnector does for ProxmoxVMs: the
 * ProviderConfig (through the same ProviderConfigSource), the site, its credentials and one client
 * per site, kept while the config object stays the same. What must outlive a reconcile for these
 * kinds is small: the VMIDs handed to template builds in flight (so two builds of one process
 * never pick the same one).
 */
import { cliInstallation, installationOf, type ProviderConfig } from '../api/provider-config.ts';
import type { LoadedProviderConfig } from '../api/provider-config-load.ts';
import { findSite } from '../api/provider-config-site.ts';
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import type { Managed } from '../engine/resource.ts';
import { ReasonedError } from '../engine/types.ts';
import type { PveClient } from '../proxmox/index.ts';
import type { ClientHooks } from '../proxmox/metrics.ts';
import { clientForSite } from '../proxmox/site.ts';
import { type ProviderConfigSource, VmConnector } from '../vm/connector.ts';

export interface ImageSite {
  readonly name: string;
  readonly client: PveClient;
  /** The installation markers of this site name (the ProviderConfig's, else the runtime's default). */
  readonly installation: string;
  /** VMIDs handed out to template builds of this process that Proxmox may not list yet. */
  readonly reserved: Set<number>;
}

export interface SiteClientsOptions {
  clientHooks?: ClientHooks;
  installation?: (cfg: ProviderConfig) => string;
}

type SiteResource = Managed<{ site?: string }, unknown>;

export class SiteClients {
  private readonly source: ProviderConfigSource;
  private readonly opts: SiteClientsOptions;
  private readonly sites = new Map<string, { config: LoadedProviderConfig; site: ImageSite }>();

  constructor(source: ProviderConfigSource, opts: SiteClientsOptions = {}) {
    this.source = source;
    this.opts = opts;
  }

  async connect(r: SiteResource): Promise<ImageSite> {
    const ref = r.spec.providerConfigRef ?? { kind: 'ClusterProviderConfig', name: 'default' };
    let config: LoadedProviderConfig;
    try {
      config = await this.source.get(ref, r.metadata.namespace);
    } catch (e) {
      throw new ReasonedError('ProviderConfigNotFound', e instanceof Error ? e.message : String(e));
    }
    // The same rule as ProxmoxVM's (forProvider.site, or the only site); it reads nothing else.
    const siteName = VmConnector.siteName(r as unknown as ProxmoxVM, config);
    try {
      findSite(config.config, siteName);
    } catch (e) {
      throw new ReasonedError('SiteNotFound', `${(e as Error).message}; fix spec.forProvider.site`);
    }
    const { kind, metadata } = config.config;
    const key = `${kind}/${metadata.namespace ?? ''}/${metadata.name}/${siteName}`;
    const have = this.sites.get(key);
    if (have && have.config === config) return have.site;
    let client: PveClient;
    try {
      client = clientForSite(config, siteName, this.opts.clientHooks ? { hooks: this.opts.clientHooks } : {});
    } catch (e) {
      throw new ReasonedError('CredentialsNotFound', e instanceof Error ? e.message : String(e));
    }
    if (have) await have.site.client.close().catch(() => {});
    const site: ImageSite = {
      name: siteName,
      client,
      installation: installationOf(config.config, this.opts.installation ?? cliInstallation),
      reserved: have?.site.reserved ?? new Set(),
    };
    this.sites.set(key, { config, site });
    return site;
  }

  async close(): Promise<void> {
    await Promise.all([...this.sites.values()].map((s) => s.site.client.close().catch(() => {})));
    this.sites.clear();
  }
}
