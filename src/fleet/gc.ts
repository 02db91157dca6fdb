/**
 * `gc`: VMs that carry our ownership marker but whose resource is gone (orphans), VMs of ours
 * stuck in a lock we set (create/clone with no task running), half-created VMs. A report first;
 * deletion only when asked, and only of VMs whose marker says they are ours. Foreign VMs (no
 * marker) are never touched.
 */
import type { LoadedProviderConfig } from '../api/provider-config.ts';
import type { PveClient } from '../proxmox/client.ts';
import { clientForSite } from '../proxmox/site.ts';
import { manualCleanup } from '../vm/ownership.ts';
import { hasOwnerTag, isPlaceholderLock, markerUid, parseMarker } from '../vm/spec.ts';

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
  /** A create/clone placeholder without a marker yet, at a VMID one of our resources holds. */
  placeholder?: boolean;
}

function ownerName(description: string | undefined): string | undefined {
  const m = parseMarker(description);
  return m ? `${m.namespace ? `${m.namespace}/` : ''}${m.name}` : undefined;
}

/**
 * Scan one site; `known` holds the uids of the resources that exist, `holders` the VMIDs they hold
 * as external names (VMID -> namespace/name), so that a create/clone placeholder whose worker
 * died before it wrote the marker is listed too (it has no marker, only `lock: create|clone`).
 */
export async function scanSite(
  client: PveClient,
  site: string,
  known: Set<string>,
  holders: Map<number, string> = new Map(),
): Promise<GcFinding[]> {
  const out: GcFinding[] = [];
  const res = await client.clusterResources('vm');
  const activeByNode = new Map<string, Set<string>>();
  for (const e of res) {
    if (e.type !== 'qemu' || e.vmid === undefined || !e.node || e.template === 1) continue;
    if (!hasOwnerTag(e.tags) && !isPlaceholderLock(e.lock)) continue;
    const cfg = await client.vmConfig(e.node, Number(e.vmid)).catch(() => undefined);
    if (!cfg) continue;
    const uid = markerUid(cfg.values.description);
    const lock = cfg.values.lock;
    const holder = holders.get(Number(e.vmid));
    let active = activeByNode.get(e.node);
    if (!active) {
      active = new Set((await client.activeTasks(e.node)).map((t) => t.id));
      activeByNode.set(e.node, active);
    }
    if (!uid) {
      // Not ours by marker: never touched, unless it is the placeholder of one of our creates.
      if (isPlaceholderLock(lock) && holder && !active.has(String(e.vmid))) {
        out.push({
          site,
          node: e.node,
          vmid: Number(e.vmid),
          name: cfg.values.name ?? `VM ${e.vmid}`,
          owner: holder,
          lock,
          status: e.status ?? 'unknown',
          kind: 'half-created',
          placeholder: true,
          detail: `'${lock}' placeholder with no task running at the VMID ${holder} holds (its worker died)`,
        });
      }
      continue;
    }
    const owner = ownerName(cfg.values.description);
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
    } else if (isPlaceholderLock(lock) && !active.has(String(e.vmid))) {
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
export async function scanFleet(
  config: LoadedProviderConfig,
  known: Set<string>,
  holdersOf: (site: string) => Map<number, string> = () => new Map(),
): Promise<GcFinding[]> {
  const out: GcFinding[] = [];
  for (const site of config.config.spec.sites) {
    const client = clientForSite(config, site.name);
    try {
      out.push(...(await scanSite(client, site.name, known, holdersOf(site.name))));
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
          const lock = cfg.values.lock;
          const placeholderLock = isPlaceholderLock(lock);
          if (!markerUid(cfg.values.description) && !(f.placeholder && placeholderLock)) {
            done.push({ ...f, action: 'skipped: no ownership marker any more' });
            continue;
          }
          // Only the create/clone lock we set, with no task running, is ours to clear (skiplock on
          // destroy, root@pam only). backup, migrate, snapshot, suspended... belong to somebody else.
          if (lock && !placeholderLock) {
            done.push({ ...f, action: `skipped: locked (${lock}) by another operation; such locks are never cleared` });
            continue;
          }
          if (placeholderLock) {
            const running = (await client.activeTasks(f.node, { vmid: f.vmid })).length > 0;
            if (running) {
              done.push({ ...f, action: `skipped: locked (${lock}) by a task still running` });
              continue;
            }
            if (!caps.rootTicket) {
              done.push({
                ...f,
                action: `skipped: locked (${lock}); only root@pam with a password can clear it over the API. Fix: ${manualCleanup(f.node, f.vmid)}`,
              });
              continue;
            }
          }
          const st = await client.vmStatus(f.node, f.vmid);
          if (st.status === 'running') await client.waitTask(await client.stopVm(f.node, f.vmid));
          await client.waitTask(
            await client.deleteVm(f.node, f.vmid, {
              purge: true,
              destroyUnreferencedDisks: true,
              ...(placeholderLock ? { skiplock: true } : {}),
            }),
          );
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
