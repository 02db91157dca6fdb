/**
 * Connects a ProxmoxVM to its site: resolves the ProviderConfig (from Kubernetes or a file, via
 * a ProviderConfigSource), the site, its credentials, and keeps one client + caches per site and
 * one VmExternal per resource (so drift bookkeeping survives between reconciles).
 */
import { cliInstallation, installationOf, type ProviderConfig } from '../api/provider-config.ts';
import type { LoadedProviderConfig } from '../api/provider-config-load.ts';
import {
  ADAPTIVE_SLOTS_MAX,
  adaptiveConcurrency,
  findSite,
  type SiteSsh,
  siteConcurrency,
  siteFingerprints,
  siteSsh,
  siteVmidRange,
} from '../api/provider-config-site.ts';
import { ANNOTATION_SITE, type ProxmoxVM } from '../api/proxmoxvm.ts';
import { annotation, externalName } from '../engine/resource.ts';
import { type Connector, ReasonedError } from '../engine/types.ts';
import type { Credentials } from '../proxmox/auth.ts';
import type { ClientHooks } from '../proxmox/metrics.ts';
import { clientForSite, siteCredentials } from '../proxmox/site.ts';
import { type VmClientOptions, VmExternal } from './external.ts';
import { SlotLimiter } from './limits.ts';
import { SiteContext } from './site-cache.ts';

export interface ProviderConfigSource {
  /** The ProviderConfig a resource refers to (`spec.providerConfigRef`, default `default`). */
  get(ref: { kind?: string; name: string }, namespace: string | undefined): Promise<LoadedProviderConfig>;
}

export interface ConnectorOptions extends VmClientOptions {
  clientHooks?: ClientHooks;
  /** Cache TTL of the per-site bulk observation (default 1 s). */
  siteTtlMs?: number;
  /** The fewest entries of a site's list for which a resource reads its own VM after a mutation (cluster-list.ts OWN_VIEW_FROM). */
  ownViewFrom?: number;
  /**
   * The installation of a config without `spec.installation` (the runtime's default: the
   * controller's cluster, the CLI's config name). Default: cliInstallation.
   */
  installation?: (cfg: ProviderConfig) => string;
}

export class VmConnector implements Connector<ProxmoxVM> {
  private readonly source: ProviderConfigSource;
  private readonly opts: ConnectorOptions;
  private readonly sites = new Map<string, { config: LoadedProviderConfig; ctx: SiteContext }>();

  constructor(source: ProviderConfigSource, opts: ConnectorOptions = {}) {
    this.source = source;
    this.opts = opts;
  }

  /** Which site a resource belongs to: `forProvider.site`, or the only site. */
  static siteName(r: ProxmoxVM, config: LoadedProviderConfig): string {
    const sites = config.config.spec.sites;
    if (r.spec.forProvider.site) return r.spec.forProvider.site;
    if (sites.length === 1) return sites[0]!.name;
    throw new ReasonedError(
      'SiteNotSpecified',
      `spec.forProvider.site is required: ProviderConfig ${config.config.metadata.name} has several sites (${sites.map((s) => s.name).join(', ')})`,
    );
  }

  /**
   * Where the resource's VM is: the site it was last seen on while a change of
   * spec.forProvider.site has not moved it yet (then the reconcile runs there, and the spec's site
   * is the target of the move), else the spec's site.
   */
  static placedSiteName(r: ProxmoxVM, config: LoadedProviderConfig): string {
    const wanted = VmConnector.siteName(r, config);
    const known = (s: string | undefined) => s !== undefined && hasSite(config, s);
    // A recorded move is followed to its end whatever the spec says now (it may have been sent).
    const move = r.status?.atProvider?.siteMove;
    if (move && known(move.from)) return move.from;
    const at = placedSite(r);
    // A task of ours in flight is followed where it was sent, with or without a VMID recorded now:
    // a deleting resource whose VMID was given up while its create's task ran followed that task
    // on the spec's site, where the task's node does not exist, for good (fault search F53).
    if (at && at !== wanted && (externalName(r) || r.status?.atProvider?.task) && known(at)) return at;
    return wanted;
  }

  /** The site a move in flight goes to, else the spec's site. */
  static targetSiteName(r: ProxmoxVM, config: LoadedProviderConfig): string {
    const move = r.status?.atProvider?.siteMove;
    if (move && hasSite(config, move.to)) return move.to;
    return VmConnector.siteName(r, config);
  }

  /** A client for this reconcile: every Proxmox call it makes is aborted with `signal`. */
  async connect(r: ProxmoxVM, signal?: AbortSignal): Promise<VmExternal> {
    const ref = r.spec.providerConfigRef ?? { kind: 'ClusterProviderConfig', name: 'default' };
    let config: LoadedProviderConfig;
    try {
      config = await this.source.get(ref, r.metadata.namespace);
    } catch (e) {
      throw new ReasonedError('ProviderConfigNotFound', e instanceof Error ? e.message : String(e));
    }
    const wanted = VmConnector.targetSiteName(r, config);
    const placed = VmConnector.placedSiteName(r, config);
    const site = await this.siteContext(config, placed);
    const target = placed === wanted ? undefined : await this.siteContext(config, wanted);
    // A replacement's old VM, until it is destroyed (replace.ts).
    const old = r.status?.atProvider?.replacing?.site;
    const previous = old && old !== placed && hasSite(config, old) ? await this.siteContext(config, old) : undefined;
    // The config's other sites, for a resource that looks for its VM by marker (adoption).
    const elsewhere = async () => {
      const others = config.config.spec.sites.map((s) => s.name).filter((n) => n !== placed);
      return Promise.all(others.map((n) => this.siteContext(config, n)));
    };
    return new VmExternal(site, this.opts, signal, { target, previous, elsewhere });
  }

  /** The shared context of one site of a config (made on first use, again when the config changed). */
  private async siteContext(config: LoadedProviderConfig, siteName: string): Promise<SiteContext> {
    let s: ReturnType<typeof findSite>;
    try {
      s = findSite(config.config, siteName);
    } catch (e) {
      throw new ReasonedError('SiteNotFound', `${(e as Error).message}; fix spec.forProvider.site`);
    }
    // Namespaced ProviderConfigs of the same name in two namespaces are two configs.
    const { kind, metadata } = config.config;
    const siteKey = `${kind}/${metadata.namespace ?? ''}/${metadata.name}/${siteName}`;
    let site = this.sites.get(siteKey);
    if (site && site.config === config) return site.ctx;
    const conc = siteConcurrency(config.config, s);
    let client: ReturnType<typeof clientForSite>;
    let credentials: Credentials;
    try {
      credentials = siteCredentials(config, siteName);
      client = clientForSite(config, siteName, {
        credentials,
        ...(this.opts.clientHooks ? { hooks: this.opts.clientHooks } : {}),
      });
    } catch (e) {
      throw new ReasonedError('CredentialsNotFound', e instanceof Error ? e.message : String(e));
    }
    let ssh: SiteSsh | undefined;
    try {
      ssh = siteSsh(config, siteName);
    } catch (e) {
      await client.close().catch(() => {});
      throw new ReasonedError('CredentialsNotFound', e instanceof Error ? e.message : String(e));
    }
    if (site) {
      site.ctx.stop();
      await site.ctx.client.close().catch(() => {});
    }
    site = {
      config,
      ctx: new SiteContext({
        name: siteName,
        client,
        // A limit the config leaves out adapts (limits.ts); one it sets is kept.
        limiter: new SlotLimiter(
          { perNode: conc.perNode, perStorage: conc.perStorage },
          { adaptive: { ...adaptiveConcurrency(config.config, s), max: ADAPTIVE_SLOTS_MAX } },
        ),
        vmidRange: siteVmidRange(config.config, s),
        installation: installationOf(config.config, this.opts.installation ?? cliInstallation),
        ssh,
        access: { endpoint: s.endpoints[0]!, fingerprints: siteFingerprints(s), credentials },
        ...(this.opts.siteTtlMs !== undefined ? { ttlMs: this.opts.siteTtlMs } : {}),
        ...(this.opts.ownViewFrom !== undefined ? { ownViewFrom: this.opts.ownViewFrom } : {}),
      }),
    };
    this.sites.set(siteKey, site);
    return site.ctx;
  }

  /**
   * The resource left the engine (deleted, orphaned, renamed): release its slots, VMIDs and memory
   * on every site (a few; a map of the sites each resource was connected to cost 10,000 resources
   * 2 MB).
   */
  forget(uid: string): void {
    for (const s of this.sites.values()) s.ctx.forget(uid);
  }

  async close(): Promise<void> {
    for (const s of this.sites.values()) s.ctx.stop();
    await Promise.all([...this.sites.values()].map((s) => s.ctx.client.close().catch(() => {})));
    this.sites.clear();
  }
}

/**
 * VMID -> uid (or what `label` makes of the resource) of the resources of `site` that hold an
 * external name: `vmidHolders` for VMID choice, and gc's owners of placeholders.
 */
export function vmidHoldersOf(
  resources: Iterable<ProxmoxVM>,
  site: string,
  onlySite: string | undefined,
  label: (r: ProxmoxVM) => string = (r) => r.metadata.uid,
): Map<number, string> {
  const out = new Map<number, string>();
  for (const r of resources) for (const h of heldVmids(r, onlySite)) if (h.site === site) out.set(h.vmid, label(r));
  return out;
}

/**
 * The VMIDs one resource holds, and on which site: its external name where its VM is (or was being
 * made), not where the spec now says it goes (F25); a recorded move holds its VMID on the target
 * too. `onlySite`: the site of a resource that names none (a ProviderConfig with one site).
 */
export function heldVmids(r: ProxmoxVM, onlySite: string | undefined): Array<{ site: string; vmid: number }> {
  const out: Array<{ site: string; vmid: number }> = [];
  const s = placedSite(r) ?? r.spec.forProvider.site ?? onlySite;
  const ext = Number(externalName(r));
  if (s !== undefined && Number.isInteger(ext) && ext >= 100) out.push({ site: s, vmid: ext });
  const move = r.status?.atProvider?.siteMove;
  if (move?.to !== undefined) out.push({ site: move.to, vmid: move.vmid });
  return out;
}

function hasSite(config: LoadedProviderConfig, name: string): boolean {
  return config.config.spec.sites.some((s) => s.name === name);
}

/**
 * The site a resource's VM is on (or its create was sent to): status.atProvider.site, else the
 * site recorded with the external name before the create (`proxmox.sankofa.io/site`), which a
 * crash before the first status write leaves alone (F21). A status that names no VM
 * (`atProvider.vmId`), written before the external name was (a reconcile that failed before
 * choosing or adopting a VM), is older than the site written with it: a VM adopted on another
 * site, the process dead before the status said so, was looked for on the old site, where
 * another VM at that VMID refused the resource's move for good (fault search F74). A replacement
 * or a recorded move writes its site into the status on purpose, and names it there.
 */
export function placedSite(r: ProxmoxVM): string | undefined {
  const a = r.status?.atProvider;
  const noted = annotation(r, ANNOTATION_SITE);
  if (noted && a?.site && a.vmId === undefined && externalName(r) && !a.replacing && !a.siteMove) return noted;
  return a?.site ?? noted;
}
