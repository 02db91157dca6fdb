/**
 * `gc`: VMs that carry our ownership marker but whose resource is gone (orphans), VMs of ours
 * stuck in a lock we set (create/clone with no task running), half-created VMs. A report first;
 * deletion only when asked, and only of VMs whose marker says they are ours. Foreign VMs (no
 * marker) are never touched.
 */
import type { LoadedProviderConfig } from '../api/provider-config.ts';
import type { PveClient } from '../proxmox/client.ts';
import { clientForSite } from '../proxmox/site.ts';
import { hasOwnerTag, MARKER_PREFIX, markerUid } from '../vm/spec.ts';

export type GcKind = 'orphan' | 'stuck-lock' | 'half-created';

export interface GcFinding {
  site: string;
  node: string;
  vmid: number;
  name: string;
  kind: GcKind;
  owner?: string;
  lock?: string;
  status: string;
  detail: string;
  action?: string;
}

function ownerName(description: string | undefined): string | undefined {
  const line = description?.split('\n').find((l) => l.startsWith(MARKER_PREFIX));
  return line ? /owner:\s*(\S+)/.exec(line)?.[1] : undefined;
}

/** Scan one site; `known` holds the uids of the resources that exist. */
export async function scanSite(client: PveClient, site: string, known: Set<string>): Promise<GcFinding[]> {
  const out: GcFinding[] = [];
  const res = await client.clusterResources('vm');
  const activeByNode = new Map<string, Set<string>>();
  for (const e of res) {
    if (e.type !== 'qemu' || e.vmid === undefined || !e.node || e.template === 1) continue;
    if (!hasOwnerTag(e.tags) && e.lock !== 'create' && e.lock !== 'clone') continue;
    const cfg = await client.vmConfig(e.node, Number(e.vmid)).catch(() => undefined);
    if (!cfg) continue;
    const uid = markerUid(cfg.values.description);
    if (!uid) continue; // not ours: never touched
    const lock = cfg.values.lock;
    const owner = ownerName(cfg.values.description);
    let active = activeByNode.get(e.node);
    if (!active) {
      active = new Set((await client.activeTasks(e.node)).map((t) => t.id));
      activeByNode.set(e.node, active);
    }
    const base = {
      site,
      node: e.node,
      vmid: Number(e.vmid),
      name: cfg.values.name ?? `VM ${e.vmid}`,
      ...(owner ? { owner } : {}),
      ...(lock ? { lock } : {}),
      status: e.status ?? 'unknown',
    };
    if (!known.has(uid)) {
      out.push({ ...base, kind: 'orphan', detail: `marker uid ${uid} matches no resource` });
    } else if ((lock === 'create' || lock === 'clone') && !active.has(String(e.vmid))) {
      out.push({
        ...base,
        kind: lock === 'create' ? 'half-created' : 'stuck-lock',
        detail: `locked '${lock}' with no task running`,
      });
    }
  }
  return out;
}

/** Scan every site of the config. */
export async function scanFleet(config: LoadedProviderConfig, known: Set<string>): Promise<GcFinding[]> {
  const out: GcFinding[] = [];
  for (const site of config.config.spec.sites) {
    const client = clientForSite(config, site.name);
    try {
      out.push(...(await scanSite(client, site.name, known)));
    } finally {
      await client.close();
    }
  }
  return out;
}

/** Delete orphans (stop, unlock when allowed, destroy with purge). Returns what happened per VM. */
export async function collect(
  config: LoadedProviderConfig,
  findings: GcFinding[],
  opts: { includeHalfCreated?: boolean } = {},
): Promise<GcFinding[]> {
  const done: GcFinding[] = [];
  for (const site of config.config.spec.sites) {
    const mine = findings.filter(
      (f) => f.site === site.name && (f.kind === 'orphan' || Boolean(opts.includeHalfCreated)),
    );
    if (!mine.length) continue;
    const client = clientForSite(config, site.name);
    try {
      const caps = await client.capabilities();
      for (const f of mine) {
        try {
          // Re-check the marker right before acting: never delete what is not ours.
          const cfg = await client.vmConfig(f.node, f.vmid);
          if (!markerUid(cfg.values.description)) {
            done.push({ ...f, action: 'skipped: no ownership marker any more' });
            continue;
          }
          if (cfg.values.lock) {
            if (!caps.rootTicket) {
              done.push({
                ...f,
                action: `skipped: locked (${cfg.values.lock}); only root@pam with a password can unlock over the API`,
              });
              continue;
            }
            await client.unlockVm(f.node, f.vmid);
          }
          const st = await client.vmStatus(f.node, f.vmid);
          if (st.status === 'running') await client.waitTask(await client.stopVm(f.node, f.vmid));
          await client.waitTask(await client.deleteVm(f.node, f.vmid, { purge: true, destroyUnreferencedDisks: true }));
          done.push({ ...f, action: 'deleted' });
        } catch (e) {
          done.push({ ...f, action: `failed: ${e instanceof Error ? e.message : String(e)}` });
        }
      }
    } finally {
      await client.close();
    }
  }
  return done;
}

export function formatGc(findings: GcFinding[]): string {
  if (!findings.length) return 'No orphaned, stuck or half-created VMs.';
  const rows = findings.map((f) => [
    f.site,
    f.node,
    String(f.vmid),
    f.name,
    f.kind,
    f.owner ?? '',
    f.status,
    f.lock ?? '',
    f.action ?? f.detail,
  ]);
  const head = ['SITE', 'NODE', 'VMID', 'NAME', 'KIND', 'OWNER', 'STATUS', 'LOCK', 'DETAIL'];
  const w = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (r: string[]) =>
    r
      .map((c, i) => (i === r.length - 1 ? c : c.padEnd(w[i]!)))
      .join('   ')
      .trimEnd();
  return [line(head), ...rows.map(line)].join('\n');
}
