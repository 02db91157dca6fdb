/**
 * `plan`: per site, node and storage, what the manifests ask for against what Proxmox has (read
 * live), the VMs already there, overcommit warnings, a site without quorum, hard violations, the
 * placement of unpinned VMs and the phase order. Nothing is changed.
 */

import type { LoadedProviderConfig } from '../api/provider-config-load.ts';
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { GiB } from '../api/quantity.ts';
import { formatImagePlans, type ImagePlan } from '../image/plan.ts';
import { noQuorumWarning, type Quorum, quorumOf } from '../proxmox/quorum.ts';
import { clientForSite } from '../proxmox/site.ts';
import type { ClusterResource, StorageEntry } from '../proxmox/types.ts';
import { diskAllocations, hasOwnerTag, memoryBytes, vcpus, vmName } from '../vm/spec.ts';
import { comparePhases, DEFAULT_PHASE, planRollout, type RolloutPlan } from '../workspace/phases.ts';

export interface StoragePlan {
  storage: string;
  type: string;
  content: string;
  imagesAllowed: boolean;
  /** Shared by the nodes of the site (Ceph RBD, NFS...): its requests add up across nodes. */
  shared: boolean;
  total: number;
  used: number;
  /** Free bytes as Proxmox reports them (`avail`; total - used when it does not say). */
  free: number;
  requested: number;
  /** Manifests that put disks here. */
  vms: string[];
}

export interface NodePlan {
  site: string;
  node: string;
  online: boolean;
  cpus: number;
  memory: number;
  memoryUsed: number;
  /** VMs already on the node (not from these manifests): their vCPUs and memory. */
  existing: { count: number; cpus: number; memory: number };
  requested: { count: number; cpus: number; memory: number; disk: number };
  /** Manifests (already deployed ones included, counted once). */
  vms: Array<{
    name: string;
    cpus: number;
    memory: number;
    disk: number;
    storage: string;
    placed: boolean;
    deployed: boolean;
    phase: string;
  }>;
  storages: StoragePlan[];
}

export interface Finding {
  severity: 'violation' | 'warning';
  site: string;
  node?: string;
  storage?: string;
  vm?: string;
  message: string;
}

export interface PlanResult {
  nodes: NodePlan[];
  findings: Finding[];
  phases: Array<{ name: string; members: string[] }>;
  totals: { vms: number; cpus: number; memory: number; disk: number };
  /** What apply would do for the ProxmoxImages and ProxmoxTemplates (planImages), before the VMs. */
  images?: ImagePlan[];
}

interface SiteFacts {
  nodes: ClusterResource[];
  vms: ClusterResource[];
  storages: Map<string, StorageEntry[]>;
  /** Undefined for a node in no cluster, or when it cannot be read (Sys.Audit on / missing). */
  quorum?: Quorum | undefined;
}

async function readSite(config: LoadedProviderConfig, site: string): Promise<SiteFacts> {
  const client = clientForSite(config, site);
  try {
    const res = await client.clusterResources();
    const nodes = res.filter((r) => r.type === 'node');
    const storages = new Map<string, StorageEntry[]>();
    for (const n of nodes) if (n.status === 'online' && n.node) storages.set(n.node, await client.nodeStorages(n.node));
    // Our tagged VMs whose name a manifest has count as already deployed (see planFleet).
    const vms = res.filter((r) => r.type === 'qemu' && r.template !== 1);
    // Without quorum Proxmox refuses every change here: the plan says so before apply waits on it.
    const quorum = await client.clusterStatus().then(quorumOf, () => undefined);
    return { nodes, vms, storages, quorum };
  } finally {
    await client.close();
  }
}

export async function planFleet(
  vms: ProxmoxVM[],
  config: LoadedProviderConfig,
  opts: { read?: typeof readSite } = {},
): Promise<PlanResult> {
  const read = opts.read ?? readSite;
  const rollout: RolloutPlan = planRollout(vms);
  const phaseOf = new Map(rollout.phases.flatMap((p) => p.members.map((m) => [m.split('/')[1]!, p.name] as const)));
  const sites = config.config.spec.sites;
  const findings: Finding[] = [];
  const nodes: NodePlan[] = [];
  // A VM whose site is unknown (or not given with several sites) would be left out of every sum.
  for (const vm of vms) {
    const s = vm.spec.forProvider.site;
    if (s ? sites.some((x) => x.name === s) : sites.length === 1) continue;
    const name = vmName(vm);
    const known = sites.map((x) => x.name).join(', ');
    findings.push({
      severity: 'violation',
      site: s ?? '',
      vm: name,
      message: s
        ? `${name}: unknown site '${s}' (sites of ${config.config.metadata.name}: ${known})`
        : `${name}: no site given and ${config.config.metadata.name} has several (${known})`,
    });
  }
  for (const site of sites) {
    const mine = vms.filter(
      (v) => (v.spec.forProvider.site ?? (sites.length === 1 ? site.name : undefined)) === site.name,
    );
    if (!mine.length) continue;
    let facts: SiteFacts;
    try {
      facts = await read(config, site.name);
    } catch (e) {
      findings.push({
        severity: 'violation',
        site: site.name,
        message: `cannot read site ${site.name}: ${e instanceof Error ? e.message : String(e)}`,
      });
      continue;
    }
    if (facts.quorum && !facts.quorum.quorate)
      findings.push({
        severity: 'warning',
        site: site.name,
        message: noQuorumWarning(site.name, facts.quorum, mine.length),
      });
    const plans = new Map<string, NodePlan>();
    for (const n of facts.nodes) {
      const storages = (facts.storages.get(n.node!) ?? []).map((s) => ({
        storage: s.storage,
        type: s.type,
        content: s.content,
        imagesAllowed: s.content.split(',').includes('images'),
        shared: s.shared === 1,
        total: s.total ?? 0,
        used: s.used ?? 0,
        free: s.avail ?? Math.max(0, (s.total ?? 0) - (s.used ?? 0)),
        requested: 0,
        vms: [] as string[],
      }));
      plans.set(n.node!, {
        site: site.name,
        node: n.node!,
        online: n.status === 'online',
        cpus: n.maxcpu ?? 0,
        memory: n.maxmem ?? 0,
        memoryUsed: n.mem ?? 0,
        existing: { count: 0, cpus: 0, memory: 0 },
        requested: { count: 0, cpus: 0, memory: 0, disk: 0 },
        vms: [],
        storages,
      });
    }
    const names = new Set(mine.map((v) => vmName(v)));
    const deployedNames = new Set<string>();
    for (const e of facts.vms) {
      const p = plans.get(e.node ?? '');
      if (!p) continue;
      const ours = hasOwnerTag(e.tags) && names.has(e.name ?? '');
      if (ours) {
        deployedNames.add(e.name!);
        continue;
      }
      p.existing.count++;
      p.existing.cpus += e.maxcpu ?? 0;
      p.existing.memory += e.maxmem ?? 0;
    }
    // Pinned VMs first, then placement of the others (most free memory that fits).
    const ordered = [...mine].sort((a, b) => Number(!a.spec.forProvider.node) - Number(!b.spec.forProvider.node));
    for (const vm of ordered) {
      const fp = vm.spec.forProvider;
      const name = vmName(vm);
      const cpus = vcpus(fp);
      const memory = memoryBytes(fp) ?? 0;
      // One count of the VM's disks for its total, its placement and each storage's bars.
      const allocations = diskAllocations(fp);
      const disk = allocations.reduce((sum, d) => sum + d.bytes, 0);
      const storage = fp.storage ?? 'local-lvm';
      let nodeName = fp.node;
      let placed = false;
      if (!nodeName) {
        // The node with the most free memory among those whose storage can take the disk.
        const own = allocations[0]!.bytes;
        const best = [...plans.values()]
          .filter(
            (p) =>
              p.online &&
              p.storages.some((s) => s.storage === storage && s.imagesAllowed && s.free - s.requested >= own),
          )
          .map((p) => ({
            p,
            free: p.memory - p.memoryUsed - newMemory(p),
          }))
          .filter((x) => x.free >= memory)
          .sort((a, b) => b.free - a.free || a.p.node.localeCompare(b.p.node))[0];
        if (!best) {
          findings.push({
            severity: 'violation',
            site: site.name,
            vm: name,
            message: `${name}: ${whyNowhere(site.name, [...plans.values()], storage, own, memory)}`,
          });
          continue;
        }
        nodeName = best.p.node;
        placed = true;
      }
      const p = plans.get(nodeName);
      if (!p) {
        findings.push({
          severity: 'violation',
          site: site.name,
          vm: name,
          message: `${name}: node '${nodeName}' is not in site ${site.name}`,
        });
        continue;
      }
      const deployed = deployedNames.has(name);
      p.vms.push({
        name,
        cpus,
        memory,
        disk,
        storage,
        placed,
        deployed,
        phase: phaseOf.get(vm.metadata.name) ?? DEFAULT_PHASE,
      });
      p.requested.count++;
      p.requested.cpus += cpus;
      p.requested.memory += memory;
      p.requested.disk += disk;
      const addDisk = (sid: string, bytes: number, field: string) => {
        if (!p.online) return; // an offline node lists no storages: its own finding says so
        const s = p.storages.find((x) => x.storage === sid);
        if (!s) {
          findings.push({
            severity: 'violation',
            site: site.name,
            node: p.node,
            vm: name,
            message: `${name}: storage '${sid}' (${field}) does not exist on ${p.node}`,
          });
          return;
        }
        if (!s.imagesAllowed) {
          findings.push({
            severity: 'violation',
            site: site.name,
            node: p.node,
            storage: sid,
            vm: name,
            message: `${name}: storage '${sid}' cannot hold VM disks (content: ${s.content})`,
          });
        }
        s.requested += deployed ? 0 : bytes;
        if (!s.vms.includes(name)) s.vms.push(name);
      };
      for (const d of allocations) addDisk(d.storage, d.bytes, d.field);
      // An offline node reports no CPUs nor memory (0): its own finding says it is offline.
      if (p.online && cpus > p.cpus) {
        findings.push({
          severity: 'violation',
          site: site.name,
          node: p.node,
          vm: name,
          message: `${name}: ${cpus} vCPUs but ${p.node} has ${p.cpus}; Proxmox will not start it`,
        });
      }
    }
    const sharedRequested = new Map<string, number>();
    const sharedReported = new Set<string>();
    for (const p of plans.values())
      for (const s of p.storages)
        if (s.shared) sharedRequested.set(s.storage, (sharedRequested.get(s.storage) ?? 0) + s.requested);
    for (const p of plans.values()) {
      if (!p.vms.length) continue;
      if (!p.online) {
        findings.push({
          severity: 'violation',
          site: site.name,
          node: p.node,
          message: `${p.node} is offline; ${p.vms.length} VM(s) are meant for it`,
        });
        // Its CPUs and memory read 0 while it is down: no overcommit to tell ("on 0 cores (Infinity%)").
        continue;
      }
      const vcpus = p.existing.cpus + p.requested.cpus;
      if (vcpus > p.cpus) {
        findings.push({
          severity: 'warning',
          site: site.name,
          node: p.node,
          message: `${p.node}: CPU overcommit ${vcpus} vCPUs on ${p.cpus} cores (${Math.round((100 * vcpus) / p.cpus)}%)`,
        });
      }
      const newMem = newMemory(p);
      if (p.memoryUsed + newMem > p.memory) {
        findings.push({
          severity: 'warning',
          site: site.name,
          node: p.node,
          message: `${p.node}: memory overcommit: ${(newMem / GiB).toFixed(1)} GiB requested, ${((p.memory - p.memoryUsed) / GiB).toFixed(1)} GiB free of ${(p.memory / GiB).toFixed(1)} GiB`,
        });
      }
      for (const s of p.storages) {
        if (!s.requested) continue;
        // A shared storage is one pool for the whole site: the requests of every node add up (reported once).
        if (s.shared && sharedReported.has(s.storage)) continue;
        const requested = s.shared ? (sharedRequested.get(s.storage) ?? 0) : s.requested;
        if (s.shared) sharedReported.add(s.storage);
        if (requested > s.free) {
          findings.push({
            severity: 'violation',
            site: site.name,
            node: p.node,
            storage: s.storage,
            message: `${s.shared ? `${site.name}/${s.storage} (shared)` : `${p.node}/${s.storage}`}: ${gib(requested)} GiB of disks requested, ${gib(s.free)} GiB free of ${gib(s.total)} GiB`,
          });
        }
      }
    }
    nodes.push(...plans.values());
  }
  const all = nodes.flatMap((n) => n.vms);
  return {
    nodes,
    findings,
    phases: rollout.phases.map((p) => ({ name: p.name, members: p.members.map((m) => m.split('/')[1]!) })),
    totals: {
      vms: all.length,
      cpus: all.reduce((a, v) => a + v.cpus, 0),
      memory: all.reduce((a, v) => a + v.memory, 0),
      disk: all.reduce((a, v) => a + v.disk, 0),
    },
  };
}

/** Memory of the node's manifests that are not deployed yet (deployed ones are in its `memoryUsed`). */
function newMemory(n: NodePlan): number {
  return n.vms.filter((v) => !v.deployed).reduce((a, v) => a + v.memory, 0);
}

function gib(b: number): string {
  const g = b / GiB;
  return Number.isInteger(g) ? `${g}` : g.toFixed(1);
}

/** `1 VM`, `2 VMs`. */
function count(n: number, one: string): string {
  return `${n} ${one}${n === 1 ? '' : 's'}`;
}

function bar(used: number, extra: number, total: number, width = 30): string {
  if (total <= 0) return ''.padEnd(width + 2);
  const u = Math.min(width, Math.round((used / total) * width));
  const e = Math.min(width - u, Math.round((extra / total) * width));
  const over = used + extra > total;
  return `[${'#'.repeat(u)}${'+'.repeat(e)}${'.'.repeat(Math.max(0, width - u - e))}]${over ? '!' : ' '}`;
}

/** The human report: per node bars (# in use, + requested, ! over capacity), findings, phases. */
export function formatPlan(p: PlanResult): string {
  const out: string[] = [];
  for (const n of p.nodes) {
    if (!n.vms.length) continue;
    const sw = Math.max(8, ...n.storages.filter((s) => s.requested || s.vms.length).map((s) => s.storage.length));
    out.push(
      `site ${n.site} / node ${n.node}${n.online ? '' : ' (OFFLINE)'}: ${n.vms.length} VM(s) from the manifests, ${n.existing.count} other VM(s) already there`,
    );
    const vcpus = n.existing.cpus + n.requested.cpus;
    out.push(
      `  ${'cpu'.padEnd(sw)} ${bar(n.existing.cpus, n.requested.cpus, n.cpus)} ${vcpus} vCPUs / ${n.cpus} cores (${n.cpus ? Math.round((100 * vcpus) / n.cpus) : 0}%)`,
    );
    const newMem = newMemory(n);
    out.push(
      `  ${'memory'.padEnd(sw)} ${bar(n.memoryUsed, newMem, n.memory)} ${gib(n.memoryUsed)} GiB used + ${gib(newMem)} GiB requested / ${gib(n.memory)} GiB`,
    );
    for (const s of n.storages) {
      if (!s.requested && !s.vms.length) continue;
      out.push(
        `  ${s.storage.padEnd(sw)} ${bar(s.used, s.requested, s.total)} ${gib(s.used)} GiB used + ${gib(s.requested)} GiB requested / ${gib(s.total)} GiB${s.imagesAllowed ? '' : ' (cannot hold VM disks)'}`,
      );
    }
    const w = Math.max(...n.vms.map((v) => v.name.length));
    const byPhase = [...n.vms].sort((a, b) => comparePhases(a.phase, b.phase) || a.name.localeCompare(b.name));
    for (const v of byPhase) {
      out.push(
        `    ${v.name.padEnd(w)}  phase ${v.phase.padEnd(3)} ${String(v.cpus).padStart(3)} cpu ${gib(v.memory).padStart(5)} GiB ${gib(v.disk).padStart(6)} GiB on ${v.storage}${v.placed ? '  (placed here)' : ''}${v.deployed ? '  (already deployed)' : ''}`,
      );
    }
    out.push('');
  }
  if (p.images?.length) out.push('images and templates (before the VMs):', ...formatImagePlans(p.images), '');
  out.push(
    `total: ${count(p.totals.vms, 'VM')}, ${count(p.totals.cpus, 'vCPU')}, ${gib(p.totals.memory)} GiB memory, ${gib(p.totals.disk)} GiB disk`,
  );
  out.push(`phases: ${p.phases.map((x) => `${x.name} (${x.members.length})`).join(' -> ')}`);
  const v = p.findings.filter((f) => f.severity === 'violation');
  const w = p.findings.filter((f) => f.severity === 'warning');
  if (w.length) out.push('', 'warnings:', ...w.map((f) => `  - ${f.message}`));
  if (v.length) out.push('', 'violations (apply would fail):', ...v.map((f) => `  - ${f.message}`));
  for (const i of p.images ?? []) if (i.action === 'refused') out.push(`  - ${i.kind} ${i.key}: ${i.message}`);
  if (!v.length) out.push('', 'no hard violations');
  return out.join('\n');
}

/**
 * Why an unpinned VM fits on no node of a site, naming what is wrong first: a storage no online
 * node has (with the ones they have), one that cannot hold disks, then room on it, then memory. Said
 * all at once ("no node has the memory and room on storage X"), a storage that does not exist read
 * as a shortage of memory.
 */
function whyNowhere(
  site: string,
  nodes: Array<{
    online: boolean;
    memory: number;
    memoryUsed: number;
    storages: Array<{ storage: string; imagesAllowed: boolean; free: number; requested: number }>;
  }>,
  storage: string,
  disk: number,
  memory: number,
): string {
  const online = nodes.filter((p) => p.online);
  if (!online.length) return `no node of ${site} is online`;
  const having = online.filter((p) => p.storages.some((s) => s.storage === storage));
  if (!having.length) {
    const known = [...new Set(online.flatMap((p) => p.storages.filter((s) => s.imagesAllowed).map((s) => s.storage)))];
    return `no online node of ${site} has storage '${storage}' (spec.forProvider.storage; storages for VM disks there: ${known.sort().join(', ') || 'none'})`;
  }
  const images = having.filter((p) => p.storages.some((s) => s.storage === storage && s.imagesAllowed));
  if (!images.length) return `storage '${storage}' of ${site} cannot hold VM disks (its content has no 'images')`;
  const room = images.filter((p) =>
    p.storages.some((s) => s.storage === storage && s.imagesAllowed && s.free - s.requested >= disk),
  );
  if (!room.length) return `no online node of ${site} has room for ${gib(disk)} GiB on storage '${storage}'`;
  return `no online node of ${site} with room on storage '${storage}' has ${gib(memory)} GiB of free memory`;
}
