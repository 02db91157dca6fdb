/**
 * The orphan scan of a cluster's installation: the Kubernetes side of the fleet's garbage
 * collection (src/fleet/gc.ts). It lists the VMs on every site of every ProviderConfig and
 * ClusterProviderConfig, and reports those that carry this installation's ownership marker while
 * no ProxmoxVM in the informer cache names them: a metric per site, a Warning event on the config,
 * a log line; deleted only with `--delete-orphans`. The controller runs it while it leads
 * (runnables.ts) and on demand (ProviderController.orphanScan).
 */
import { installationOf } from '../api/provider-config.ts';
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { GROUP, VERSION } from '../api/proxmoxvm.ts';
import { collect, knownResources, scanSite } from '../fleet/gc.ts';
import type { Metrics } from '../observability/metrics.ts';
import { clientForSite } from '../proxmox/site.ts';
import type { Informer, KubeObject } from './informer.ts';
import type { KubeConfigSource } from './providerconfig.ts';
import type { EventRecorder } from './store.ts';

/** What an orphan scan reads: the controller's options, caches, configs, recorder and metrics. */
export interface OrphanScan {
  /** The options of the controller (ControllerOptions) that the scan reads. */
  o: {
    deleteOrphans?: boolean;
    now?: () => number;
    log?: (level: 'info' | 'warn' | 'error' | 'debug', msg: string, fields?: Record<string, unknown>) => void;
  };
  vms: Informer<ProxmoxVM>;
  pcs: Informer<KubeObject & Record<string, unknown>>;
  cpcs: Informer<KubeObject & Record<string, unknown>>;
  configSource: KubeConfigSource;
  recorder: EventRecorder;
  metrics: Metrics;
  /** The controller's default installation (ProviderController.installation). */
  installation: () => string;
}

/**
 * This installation's VMs with a marker and no ProxmoxVM: metric, event on the ProviderConfig,
 * log; deleted only if configured. The cluster is its installation's only store, so an orphan of
 * its installation is one for sure; other installations' VMs, copies and old markers with a uid
 * no ProxmoxVM has are never deleted. Each deletion re-checks the VM and the informer cache.
 */
export async function scanOrphans(c: OrphanScan): Promise<void> {
  // An unsynced cache lists no resources: every VM would look like an orphan.
  if (!c.vms.hasSynced) {
    c.o.log?.('info', 'orphan scan skipped: the ProxmoxVM cache has not synced');
    return;
  }
  const known = () => knownResources(c.vms.cache.values());
  const source = c.configSource;
  const recorder = c.recorder;
  for (const [kind, inf] of [
    ['ProviderConfig', c.pcs],
    ['ClusterProviderConfig', c.cpcs],
  ] as const) {
    for (const pc of inf.cache.values()) {
      try {
        const loaded = await source.get({ kind, name: pc.metadata.name }, pc.metadata.namespace);
        const installation = installationOf(loaded.config, c.installation);
        for (const site of loaded.config.spec.sites) {
          const client = clientForSite(loaded, site.name);
          try {
            const all = await scanSite(
              client,
              site.name,
              { installation, known: known(), soleStore: true, storeName: 'this cluster' },
              c.o.now ? { now: c.o.now } : {},
            );
            const found = all.filter((f) => f.kind === 'orphan' && f.deletable);
            c.metrics.orphans.set({ site: site.name }, found.length);
            for (const f of all.filter((x) => x.kind === 'legacy-unknown'))
              c.o.log?.('info', 'VM with an old marker naming no ProxmoxVM of this cluster: never deleted', {
                site: f.site,
                vmid: f.vmid,
                owner: f.owner,
              });
            for (const f of found) {
              c.o.log?.('warn', 'orphaned VM', {
                site: f.site,
                node: f.node,
                vmid: f.vmid,
                name: f.name,
                owner: f.owner,
                installation,
              });
              recorder.record(
                {
                  apiVersion: `${GROUP}/${VERSION}`,
                  kind,
                  metadata: {
                    name: pc.metadata.name,
                    ...(pc.metadata.namespace ? { namespace: pc.metadata.namespace } : {}),
                    uid: pc.metadata.uid ?? '',
                  },
                },
                'Warning',
                'OrphanedVM',
                `VM ${f.vmid} (${f.name}) on ${f.site}/${f.node} carries the ownership marker of ${f.owner ?? 'a resource'} that no longer exists${c.o.deleteOrphans ? '; deleting it' : '; run provider-proxmox gc or enable orphan deletion'}`,
              );
            }
            if (c.o.deleteOrphans && found.length) {
              for (const d of await collect(loaded, found, { known }))
                c.o.log?.(d.action === 'deleted' ? 'info' : 'warn', `orphaned VM ${d.action}`, {
                  site: d.site,
                  vmid: d.vmid,
                  owner: d.owner,
                });
            }
          } finally {
            await client.close();
          }
        }
      } catch (e) {
        c.o.log?.('warn', 'orphan scan failed', { config: pc.metadata.name, error: String(e) });
      }
    }
  }
}
