/**
 * Steps 3-7 of the seed's flow, before anything is reserved or created: the node (or a placement),
 * its health, the bridges, the storages and their room, the image or template and whether these
 * credentials can import it on this PVE version, and the node's capacity. Each failure is a
 * ReasonedError whose message names the fix. `preflight` then takes a concurrency slot.
 */
import { ANNOTATION_SITE, type ProxmoxVM } from '../api/proxmoxvm.ts';
import { GiB, MiB } from '../api/quantity.ts';
import { externalName, setAnnotation } from '../engine/resource.ts';
import { PveError } from '../proxmox/index.ts';
import type { ClusterResource, StorageEntry } from '../proxmox/types.ts';
import { atProvider, explain, reason, setStep } from './conditions.ts';
import { hook, type StepContext, slotWait, slotWake } from './context.ts';
import { listIndex } from './list-index.ts';
import { findTemplate } from './lookup.ts';
import { nodeFact } from './node-facts.ts';
import {
  checkSnippetPossible,
  desiredSnippet,
  prepareSnippet,
  snippetChecked,
  snippetStore,
  uploadSnippet,
  warmSnippetConnection,
} from './snippets.ts';
import { desiredNets, diskAllocations, memoryBytes, needsSnippet, storageNeeds, vcpus } from './spec.ts';

export type CreateSource =
  | { kind: 'blank' }
  | { kind: 'import'; from: string }
  /** `full`: decided here for a templateRef (linked where the storage can); else spec.forProvider.template.full. */
  | { kind: 'template'; vmid: number; node: string; full?: boolean };

/** What preflight resolved, for create (in the same reconcile). */
export interface CreatePlan {
  node: string;
  storage: string;
  ciStorage: string;
  source: CreateSource;
  /**
   * A clone made on its template's node, not on `node` (cloneOnTemplateNode): PVE clones to another node only
   * onto a shared storage. The VM is migrated to `node` next (migrate.ts placementChanges).
   */
  cloneOnSource?: boolean;
}

/** The nodes a create's VM is made on: its node, and its template's first when cloned there (cloneOnSource). */
export function placedOn(plan: CreatePlan): string[] {
  return plan.cloneOnSource && plan.source.kind === 'template' ? [plan.source.node, plan.node] : [plan.node];
}

/** Steps 3-7 and capacity, then a concurrency slot: nothing is reserved or created unless all pass. */
export async function preflight(
  ctx: StepContext,
  r: ProxmoxVM,
): Promise<{ plan?: CreatePlan; waitMs?: number; message?: string }> {
  const fp = r.spec.forProvider;
  // A userData that needs a snippet the site cannot take is refused before anything is chosen.
  checkSnippetPossible(ctx, r);
  setStep(r, 'CheckingNode');
  const node = await resolveNode(ctx, r);
  atProvider(r).node = node;
  readAhead(ctx, r, node);
  await desiredSnippet(ctx, r, node);
  const { storage, ciStorage, entry, source, cloneOnSource } = await checkOnNode(ctx, r, node);
  if (ctx.memory.snippet && !snippetChecked(ctx) && source.kind !== 'template') {
    // The snippet before the VM: a failed upload leaves no VM, at worst a file named for this
    // resource; no config ever names a file that is not on the node. (A clone gets its snippet
    // when drift sets cicustom.)
    setStep(r, 'UploadingSnippet');
    await uploadSnippet(ctx);
    await hook(ctx, 'create-snippet-uploaded', r);
  }
  // A node's local storage is a slot per node, a shared one a slot for the site; a freed slot is
  // taken for the oldest waiter and wakes it (limits.ts), so a waiter need not poll for one.
  // A clone made on its template's node writes that node's storage.
  const writes = cloneOnSource && source.kind === 'template' ? source.node : node;
  if (
    !ctx.site.limiter.tryAcquire(r.metadata.uid, writes, [{ storage, shared: entry.shared === 1 }], slotWake(ctx, r))
  ) {
    setStep(r, 'WaitingForSlot');
    return {
      waitMs: slotWait(ctx),
      message: `waiting for a free slot on node ${writes} / storage ${storage} (concurrency limits of the ProviderConfig)`,
    };
  }
  ctx.site.reserveCapacity(
    r.metadata.uid,
    node,
    memoryBytes(fp) ?? 0,
    vcpus(fp),
    storageNeeds(fp).map((d) => ({ id: d.storage, bytes: d.bytes })),
  );
  // A replacement's new VM made at the VMID carried from the old site (no VMID chosen, which
  // writes the site with it): the site written with the name is the new one from this create on,
  // in the pending mark's write. Left on the old site, a delete that had retired the old VM and
  // sent the new one's destroy followed that task on the old site for good (fault search F99).
  if (atProvider(r).replacing && externalName(r) !== undefined) setAnnotation(r, ANNOTATION_SITE, ctx.site.name);
  return { plan: { node, storage, ciStorage, source, ...(cloneOnSource ? { cloneOnSource } : {}) } };
}

/**
 * Steps 4-7 and capacity on `node`: its bridges, the storages of the disks, the image or template,
 * and room for the VM. Reads only (the shared node facts): preflight's, and the plan's look at
 * what a create would be refused for (plan-create.ts).
 */
export async function checkOnNode(
  ctx: StepContext,
  r: ProxmoxVM,
  node: string,
): Promise<{ storage: string; ciStorage: string; entry: StorageEntry; source: CreateSource; cloneOnSource: boolean }> {
  const fp = r.spec.forProvider;
  setStep(r, 'CheckingBridge');
  await checkBridges(ctx, r, node);
  setStep(r, 'CheckingStorage');
  const storage = fp.storage ?? 'local-lvm';
  const storages = await nodeFact(ctx, 'storages', node, (c) => c.nodeStorages(node));
  // Every disk of the VM on a storage counts at once, with what creates already in flight hold
  // there: their disks are not in Proxmox's numbers yet.
  const checked = storageNeeds(fp).map((d) =>
    checkStorage(
      storages,
      d.storage,
      d.bytes + ctx.site.storageInFlight(node, d.storage, r.metadata.uid),
      `spec.forProvider.${d.field}`,
    ),
  );
  // (The first is scsi0's storage, with whatever other disks go there too.)
  const entry = checked[0]!;
  const ciStorage = fp.cloudInit?.storage ?? storage;
  if (ciStorage !== storage) checkStorage(storages, ciStorage, 4 * MiB, 'spec.forProvider.cloudInit.storage');
  setStep(r, 'ResolvingImage');
  const source = await resolveSource(ctx, r, node, storages);
  const cloneOnSource = await cloneOnTemplateNode(ctx, r, node, storage, entry, source);
  await checkCapacity(ctx, r, node);
  return { storage, ciStorage, entry, source, cloneOnSource };
}

/**
 * Whether a full clone is made on its template's node and migrated to `node` afterwards, instead of
 * being sent there with `target`. PVE clones to another node only onto a shared storage
 * (qemu-server API2/Qemu.pm clone_vm: `die "can't clone to non-shared storage '$storage'"` when
 * `target` is set and the storage is not shared), so a template on one node's `local-lvm` could not
 * be cloned onto another's, and the create was refused on every retry. The storage of that name on
 * the template's node takes the clone (checked for room here), and the migration of the next
 * reconcile (migrate.ts placementChanges: a VM never placed is moved to spec.forProvider.node before
 * anything else) copies its disk to `node`. A linked clone stays on the template's storage: PVE's
 * own checks apply to it.
 */
async function cloneOnTemplateNode(
  ctx: StepContext,
  r: ProxmoxVM,
  node: string,
  storage: string,
  entry: StorageEntry,
  source: CreateSource,
): Promise<boolean> {
  if (source.kind !== 'template' || source.node === node || entry.shared === 1) return false;
  if ((source.full ?? r.spec.forProvider.template?.full ?? true) === false) return false;
  const there = await nodeFact(ctx, 'storages', source.node, (c) => c.nodeStorages(source.node));
  if (!there.some((x) => x.storage === storage))
    throw reason(
      'CloneAcrossNodes',
      `template ${source.vmid} is on node ${source.node}, and PVE clones to another node only onto a shared storage: storage '${storage}' on node ${node} is not shared, and node ${source.node} has none of that name to clone onto before a migration. Fix: a shared storage in spec.forProvider.storage, node: ${source.node}, or a template on node ${node}`,
    );
  checkStorage(there, storage, diskAllocations(r.spec.forProvider)[0]!.bytes, 'spec.forProvider.storage');
  return true;
}

/**
 * Start at once the reads the checks below make one after another (the node's bridges and
 * storages, the image's storage content, the PVE version) and the SSH connection a snippet will
 * need: each check still awaits its own read in its order and fails as it did, but a create no
 * longer waits for five round trips and a key exchange in a row before it is sent. The reads are
 * the shared node facts (node-facts.ts): what is read here is what the checks get.
 */
function readAhead(ctx: StepContext, r: ProxmoxVM, node: string): void {
  const fp = r.spec.forProvider;
  const ignore = () => {};
  nodeFact(ctx, 'bridges', node, (c) => c.bridges(node)).catch(ignore);
  nodeFact(ctx, 'storages', node, (c) => c.nodeStorages(node)).catch(ignore);
  if (fp.image && !fp.template && !fp.templateRef) {
    ctx.client.capabilities().catch(ignore);
    if (fp.image.includes(':')) {
      const sid = fp.image.slice(0, fp.image.indexOf(':'));
      nodeFact(ctx, 'content', node, (c) => c.storageContent(node, sid), sid).catch(ignore);
    }
  }
  warmSnippetConnection(ctx, r, node);
}

/**
 * What a create's preflight on its node will read, started now: the node's health, the storage
 * its snippet goes to, the reads of readAhead and the SSH connection of its snippet. For a plan that an apply carries out at
 * once (LocalRuntime.plan with readAhead): the first creates of a rollout otherwise began these
 * only once the plan was shown and the resources stored and queued, a fifth of a phase's ideal
 * time at speed 100. Best effort: a read that fails here is read again by the check that needs it.
 * Only a pinned node (spec.forProvider.node): where the scheduler places one is known at its create.
 */
export function readAheadCreate(ctx: StepContext, r: ProxmoxVM): void {
  const node = r.spec.forProvider.node;
  if (!node) return;
  const ignore = () => {};
  nodeStatus(ctx, node).catch(ignore);
  // (Not in readAhead: in preflight, desiredSnippet reads it at once.)
  if (ctx.site.ssh && needsSnippet(r)) snippetStore(ctx, node).catch(ignore);
  readAhead(ctx, r, node);
}

/**
 * What a create that has to wait can do ahead of it: upload its snippet (snippets.ts
 * prepareSnippet) to its pinned node. For the next phase of a rollout, while the phase before it
 * boots (src/local/apply.ts): nothing is created or reserved, and the reads its checks make are
 * left to them, since the phase before may still change what they read. Best effort.
 */
export async function prepareCreate(ctx: StepContext, r: ProxmoxVM): Promise<void> {
  const node = r.spec.forProvider.node;
  if (!node || r.spec.forProvider.template || r.spec.forProvider.templateRef) return;
  await prepareSnippet(ctx, r, node).catch(() => {});
}

/** The node's status (whether it answers), shared by the site's resources (node-facts.ts). */
function nodeStatus(ctx: StepContext, node: string): Promise<unknown> {
  return nodeFact(ctx, 'status', node, (c) => c.nodeStatus(node));
}

/** Step 3 (+ placement when no node is given). */
export async function resolveNode(ctx: StepContext, r: ProxmoxVM): Promise<string> {
  const fp = r.spec.forProvider;
  const nodes = listIndex(await ctx.site.clusterResources(true, ctx.signal, ctx.memory)).nodes;
  if (fp.node) {
    const n = nodes.find((x) => x.node === fp.node);
    if (!n)
      throw reason(
        'NodeNotFound',
        `node '${fp.node}' is not part of site ${ctx.site.name} (nodes: ${nodes.map((x) => x.node).join(', ') || 'none'}); fix spec.forProvider.node`,
      );
    await checkNodeHealth(ctx, fp.node, n);
    return fp.node;
  }
  setStep(r, 'Placing');
  const mem = memoryBytes(fp) ?? 0;
  const candidates = nodes
    .filter((n) => n.status === 'online')
    .map((n) => {
      const inf = ctx.site.inflight.get(n.node!) ?? { memory: 0, cpu: 0 };
      return { node: n.node!, free: (n.maxmem ?? 0) - (n.mem ?? 0) - inf.memory };
    })
    .filter((n) => n.free >= mem)
    .sort((x, y) => y.free - x.free);
  const best = candidates[0];
  const biggest = Math.max(0, ...nodes.filter((n) => n.status === 'online').map((n) => n.maxmem ?? 0));
  if (!best && nodes.some((n) => n.status === 'online') && mem > biggest)
    throw reason(
      'InsufficientCapacity',
      `${(mem / GiB).toFixed(1)} GiB of memory requested, but the largest online node of site ${ctx.site.name} has ${(biggest / GiB).toFixed(1)} GiB in all; lower spec.forProvider.memory`,
    );
  if (!best)
    throw reason(
      'InsufficientCapacity',
      `no online node of site ${ctx.site.name} has ${Math.round(mem / GiB)} GiB of free memory; free memory or pin spec.forProvider.node`,
      true,
    );
  await checkNodeHealth(ctx, best.node, nodes.find((x) => x.node === best.node)!);
  return best.node;
}

async function checkNodeHealth(ctx: StepContext, node: string, entry: ClusterResource): Promise<void> {
  if (entry.status !== 'online')
    throw reason(
      'NodeUnhealthy',
      `node ${node} is ${entry.status ?? 'unknown'} in the cluster; it must be online before a VM is created there`,
      true,
    );
  try {
    await nodeStatus(ctx, node);
  } catch (e) {
    if (e instanceof PveError && e.kind === 'permission') throw explain(ctx.site.name, e);
    throw reason(
      'NodeUnhealthy',
      `node ${node} does not answer (GET /nodes/${node}/status: ${e instanceof Error ? e.message : String(e)})`,
      true,
    );
  }
}

/** Step 4. */
export async function checkBridges(ctx: StepContext, r: ProxmoxVM, node: string): Promise<void> {
  const bridges = new Set((await nodeFact(ctx, 'bridges', node, (c) => c.bridges(node))).map((i) => i.iface));
  for (const n of desiredNets(r.spec.forProvider)) {
    if (!bridges.has(n.bridge)) {
      throw reason(
        'BridgeNotFound',
        `bridge '${n.bridge}' does not exist on node ${node} (bridges: ${[...bridges].sort().join(', ') || 'none'}); create it in Proxmox or fix the network of spec.forProvider`,
      );
    }
  }
}

/** Step 5. */
export function checkStorage(storages: StorageEntry[], id: string, bytes: number, field: string): StorageEntry {
  const s = storages.find((x) => x.storage === id);
  if (!s)
    throw reason(
      'StorageNotFound',
      `storage '${id}' (${field}) does not exist on this node (storages: ${storages.map((x) => x.storage).join(', ')})`,
    );
  if (!s.content.split(',').includes('images')) {
    throw reason(
      'StorageCannotHoldImages',
      `storage '${id}' (${field}) does not hold VM disks (content: ${s.content}); pick a storage with the 'images' content type`,
    );
  }
  if (s.active === 0 || s.enabled === 0)
    throw reason('StorageUnavailable', `storage '${id}' is not active on this node`, true);
  if (s.total !== undefined && bytes > s.total) {
    // Bigger than the whole storage: no amount of freeing space helps.
    throw reason(
      'InsufficientCapacity',
      `${(bytes / GiB).toFixed(1)} GiB needed on storage '${id}', which holds ${(s.total / GiB).toFixed(1)} GiB in all; make ${field} smaller or pick a larger storage`,
    );
  }
  if (s.avail !== undefined && bytes > s.avail) {
    throw reason(
      'StorageFull',
      `storage '${id}' has ${(s.avail / GiB).toFixed(1)} GiB free, ${(bytes / GiB).toFixed(1)} GiB needed; free space or pick another storage for ${field}`,
      true,
    );
  }
  return s;
}

export async function checkCapacity(ctx: StepContext, r: ProxmoxVM, node: string): Promise<void> {
  const fp = r.spec.forProvider;
  const n = listIndex(await ctx.site.clusterResources(false, ctx.signal, ctx.memory)).nodes.find(
    (e) => e.node === node,
  );
  if (!n) return;
  const cores = vcpus(fp);
  if (n.maxcpu !== undefined && cores > n.maxcpu) {
    throw reason(
      'InsufficientCapacity',
      `${cores} vCPUs requested but node ${node} has ${n.maxcpu}; Proxmox will not start a VM with more vCPUs than the host has`,
    );
  }
  const mem = memoryBytes(fp) ?? 0;
  const inf = ctx.site.inflight.get(node);
  const free = (n.maxmem ?? 0) - (n.mem ?? 0) - (inf && !inf.holders.has(r.metadata.uid) ? inf.memory : 0);
  if (n.maxmem !== undefined && mem > n.maxmem) {
    throw reason(
      'InsufficientCapacity',
      `${(mem / GiB).toFixed(1)} GiB memory requested but node ${node} has ${(n.maxmem / GiB).toFixed(1)} GiB in all; lower spec.forProvider.memory or pick another node`,
    );
  }
  if (n.maxmem !== undefined && mem > free) {
    throw reason(
      'InsufficientCapacity',
      `${(mem / GiB).toFixed(1)} GiB memory requested but node ${node} has ${(free / GiB).toFixed(1)} GiB free`,
      true,
    );
  }
}

/** Step 7: the image (a volume to import) or the template to clone, and whether it can be used. */
export async function resolveSource(
  ctx: StepContext,
  r: ProxmoxVM,
  node: string,
  storages: StorageEntry[],
): Promise<CreateSource> {
  const fp = r.spec.forProvider;
  if (fp.templateRef) {
    if (!ctx.options.templateOnNode)
      throw reason(
        'TemplateNotFound',
        `spec.forProvider.templateRef: this runtime resolves no ProxmoxTemplate references; use spec.forProvider.template (a template VM by name or vmid)`,
      );
    const t = ctx.options.templateOnNode(r, node);
    // A linked clone stays on the template's storage and needs a storage that can make one; the
    // VM's storage (default local-lvm, as everywhere) must be it, or drift would move the disk.
    const linked = t.linkedClone && (fp.storage ?? 'local-lvm') === t.storage;
    return { kind: 'template', vmid: t.vmid, node: t.host, full: !linked };
  }
  if (fp.template) {
    const t = findTemplate(await ctx.site.clusterResources(false, ctx.signal, ctx.memory), fp.template);
    const what = fp.template.vmid !== undefined ? `VMID ${fp.template.vmid}` : `'${fp.template.name}'`;
    if (!t)
      throw reason(
        'TemplateNotFound',
        `no template ${what} on site ${ctx.site.name}; convert a VM to a template or fix spec.forProvider.template`,
      );
    return { kind: 'template', vmid: Number(t.vmid), node: t.node! };
  }
  if (!fp.image) return { kind: 'blank' };
  const caps = await ctx.client.capabilities();
  // Before looking for the image: without import-from no image can be imported, wherever it is.
  if (!caps.importFrom) {
    throw reason(
      'ImageNotImportable',
      `PVE ${caps.version.text} on site ${ctx.site.name} has no import-from (added in 7.2), so ${fp.image} cannot be imported over the API. Fix: create a template VM and set spec.forProvider.template, or upgrade to PVE >= 7.2`,
    );
  }
  let volid: string | undefined;
  let content: string | undefined;
  const searched: string[] = [];
  if (fp.image.includes(':')) {
    const sid = fp.image.slice(0, fp.image.indexOf(':'));
    if (!storages.some((s) => s.storage === sid))
      throw reason('ImageNotFound', `image ${fp.image}: storage '${sid}' does not exist on node ${node}`);
    const vols = await nodeFact(ctx, 'content', node, (c) => c.storageContent(node, sid), sid);
    const v = vols.find((x) => x.volid === fp.image);
    searched.push(sid);
    if (v) {
      volid = v.volid;
      content = v.content;
    }
  } else {
    const file = fp.image;
    const order = (s: StorageEntry) => (s.content.includes('import') ? 0 : s.content.includes('iso') ? 1 : 2);
    for (const s of [...storages].sort((x, y) => order(x) - order(y))) {
      if (!/\b(import|iso|images)\b/.test(s.content)) continue;
      searched.push(s.storage);
      const vols = await nodeFact(ctx, 'content', node, (c) => c.storageContent(node, s.storage), s.storage);
      const v = vols.find((x) => x.volid.endsWith(`/${file}`));
      if (v) {
        volid = v.volid;
        content = v.content;
        break;
      }
    }
  }
  // Not there yet, and a ProxmoxImage of the manifests brings it first (a plan's look only).
  const coming = volid ? undefined : ctx.options.imageToCome?.(r, node);
  if (coming) {
    content = coming.content ?? (caps.importContent ? 'import' : 'iso');
    volid = `${coming.storage}:${content}/${coming.file}`;
  }
  if (!volid) {
    throw reason(
      'ImageNotFound',
      `image '${fp.image}' was not found on node ${node} (searched: ${searched.join(', ') || 'no storage'}); upload it (content type 'import' on PVE >= 8.3) or fix spec.forProvider.image`,
    );
  }
  const fixes =
    'Fix: (1) put the image in a storage with the `import` content type (PVE >= 8.3), e.g. local:import/<name>.qcow2, and set spec.forProvider.image to it; (2) clone a template with spec.forProvider.template; or (3) use root@pam password credentials';
  if (content === 'import') {
    if (!caps.importContent)
      throw reason(
        'ImageNotImportable',
        `${volid} is an 'import' volume, which PVE ${caps.version.text} cannot import from (needs 8.3). ${fixes}`,
      );
    return { kind: 'import', from: volid };
  }
  if (content === 'images') return { kind: 'import', from: volid };
  if (content === 'iso') {
    if (caps.rootTicket) {
      const sid = volid.slice(0, volid.indexOf(':'));
      const base = sid === 'local' ? '/var/lib/vz' : undefined;
      if (base) return { kind: 'import', from: `${base}/template/${volid.slice(volid.indexOf(':') + 1)}` };
    }
    throw reason(
      'ImageNotImportable',
      `${volid} is an ISO-content volume; Proxmox imports only 'images' or 'import' volumes with ${caps.authKind === 'token' ? 'an API token' : `user ${caps.authId}`}. ${fixes}`,
    );
  }
  throw reason(
    'ImageNotImportable',
    `${volid} has content type '${content}', which cannot be imported as a disk. ${fixes}`,
  );
}
