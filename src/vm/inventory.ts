/**
 * A site's VMs as their ownership markers tell it: which installation, which resource
 * (namespace/name) and which VMID each marker was written for. Proxmox is the source of truth; a
 * state file or a Kubernetes cache only remembers it. gc, `status --live`, orphan scans and the
 * adoption of VMs whose resource lost its state all read this one inventory.
 *
 * Candidates are the VMs `/cluster/resources` shows tagged `provider-proxmox` or under a
 * create/clone lock (a placeholder has no tag yet); only their configs hold the marker.
 */
import { NotFoundError } from '../proxmox/errors.ts';
import type { PveClient } from '../proxmox/index.ts';
import type { ClusterResource } from '../proxmox/types.ts';
import { isVmEntry } from './list-index.ts';
import { hasOwnerTag, isPlaceholderLock, type Marker, parseMarker } from './spec.ts';

export interface MarkedVm {
  vmid: number;
  node: string;
  /** The VM's name in its config (the bulk list's when the config has none). */
  name: string;
  status: string;
  lock?: string;
  template: boolean;
  /**
   * A ProxmoxTemplate's VM before its conversion (tags `provider-proxmox;template`, see
   * src/image/template-build.ts): its resource is a template, never an orphan of the VM store.
   */
  templateBuild?: boolean;
  /** An operator protected it (`protection: 1`): Proxmox refuses to destroy it (ownership.ts isProtected). */
  protected?: boolean;
  marker?: Marker;
  /** When PVE created it (the config's `meta: …,ctime=<epoch>`, written by create), seconds. */
  ctime?: number;
  /** The config's digest when it was read (for a re-check right before acting). */
  digest: string;
}

/**
 * Whose a marked VM is, seen from installation `installation`:
 * - `ours`: this installation's marker, written for this VMID;
 * - `legacy`: the first marker format (no installation, no VMID): ours only if its uid is known;
 * - `copy`: a marker written for another VMID (an operator's clone of a VM copies its description);
 * - `elsewhere`: another installation's;
 * - `unmarked`: no marker (a placeholder, or a tag without a marker).
 */
export type MarkerClass = 'ours' | 'legacy' | 'copy' | 'elsewhere' | 'unmarked';

export function classify(vm: Pick<MarkedVm, 'vmid' | 'marker'>, installation: string): MarkerClass {
  const m = vm.marker;
  if (!m) return 'unmarked';
  if (m.installation === undefined) return 'legacy';
  if (m.vmid !== vm.vmid) return 'copy';
  return m.installation === installation ? 'ours' : 'elsewhere';
}

/** `ctime` out of a `meta` config value (`creation-qemu=8.1.5,ctime=1700000000`). */
export function metaCtime(meta: string | undefined): number | undefined {
  const m = /(?:^|,)ctime=(\d+)/.exec(meta ?? '');
  return m ? Number(m[1]) : undefined;
}

/**
 * Whether a bulk-list entry may carry our marker: a qemu VM tagged by us, a create/clone
 * placeholder, or one named `name`. A clone gets its marker in the clone call but its tag only
 * with the first config update after it (PVE's clone takes no tags), so a clone whose resource
 * lost its state before that is known by its name alone.
 */
export function mayBeMarked(e: ClusterResource, name?: string): boolean {
  return (
    isVmEntry(e) &&
    e.vmid !== undefined &&
    Boolean(e.node) &&
    (hasOwnerTag(e.tags) || isPlaceholderLock(e.lock) || (name !== undefined && e.name === name))
  );
}

/**
 * One candidate's config, as a MarkedVm; undefined when the VM vanished between the list and the
 * read. Any other failure is thrown: an inventory with holes must not pass for a complete one.
 */
export async function readMarkedVm(client: PveClient, e: ClusterResource): Promise<MarkedVm | undefined> {
  const vmid = Number(e.vmid);
  let cfg: Awaited<ReturnType<PveClient['vmConfig']>>;
  try {
    cfg = await client.vmConfig(e.node!, vmid);
  } catch (err) {
    if (err instanceof NotFoundError) return undefined;
    throw err;
  }
  const v = cfg.values;
  const marker = parseMarker(v.description);
  const ctime = metaCtime(v.meta);
  return {
    vmid,
    node: e.node!,
    name: v.name ?? e.name ?? `VM ${vmid}`,
    status: e.status ?? 'unknown',
    ...(v.lock ? { lock: v.lock } : {}),
    template: e.template === 1 || v.template === '1',
    ...(hasOwnerTag(v.tags) && (v.tags ?? '').split(/[;,\s]/).includes('template') ? { templateBuild: true } : {}),
    ...(v.protection === '1' ? { protected: true } : {}),
    ...(marker ? { marker } : {}),
    ...(ctime !== undefined ? { ctime } : {}),
    digest: cfg.digest,
  };
}

/** Configs read at once while taking an inventory (the client caps requests per site as well). */
const PARALLEL_READS = 4;

/** Every VM of the site that may carry a marker, with its config read (see readMarkedVm). */
export async function inventory(
  client: PveClient,
  opts: { list?: ClusterResource[]; filter?: (e: ClusterResource) => boolean } = {},
): Promise<MarkedVm[]> {
  const list = opts.list ?? (await client.clusterResources('vm'));
  const candidates = list.filter((e) => mayBeMarked(e) && (opts.filter?.(e) ?? true));
  const out: MarkedVm[] = [];
  let next = 0;
  const worker = async () => {
    while (next < candidates.length) {
      const vm = await readMarkedVm(client, candidates[next++]!);
      if (vm) out.push(vm);
    }
  };
  await Promise.all(Array.from({ length: Math.min(PARALLEL_READS, candidates.length) }, worker));
  return out.sort((a, b) => a.vmid - b.vmid);
}
