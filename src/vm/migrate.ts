/**
 * Step 12, for placement: an existing VM moves with its data, never by a recreate. A node change
 * inside the cluster is one `POST .../migrate` (online for a running VM; local disks copied with
 * `with-local-disks` to spec.forProvider.storage), after the target's checks: online, room for
 * the VM's memory and CPUs, the bridge, and PVE's own precondition (`GET .../migrate?target=`:
 * storages the target cannot see, local resources). A storage change is a `POST .../move_disk`
 * per disk with `delete=1`: PVE removes the source only after the copy completed (qemu-server
 * API2/Qemu.pm move_vm_disk), so a failed move leaves the disk where it was.
 *
 * A VM moved by someone else (HA, a person) is followed: it is found by VMID and marker on its new
 * node. `status.atProvider.placedNode` tells the two apart: a spec whose node differs from the
 * node the provider last put the VM on asks for a migration; a VM away from an unchanged spec was
 * moved, and is migrated back only with placementPolicy: Enforce (else: the NodeDrift condition).
 */
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { GiB, MiB } from '../api/quantity.ts';
import { setCondition } from '../engine/resource.ts';
import { atProvider, reason } from './conditions.ts';
import type { StepContext } from './context.ts';
import type { Change } from './drift.ts';
import { listIndex } from './list-index.ts';
import type { ObservedVm } from './lookup.ts';
import { checkBridges, checkCapacity, checkStorage } from './preflight.ts';
import { driveSize, memoryBytes } from './spec.ts';

/** Disk keys that hold a VM disk (not the cloud-init drive, not a CD-ROM). */
const DISK_KEY = /^(scsi|virtio|sata|ide)\d+$/;

/** The storage of a drive value (`local-lvm:vm-100-disk-0,size=8G` -> `local-lvm`). */
export function driveStorage(value: string | undefined): string | undefined {
  if (!value || /media=cdrom|cloudinit/.test(value)) return undefined;
  const id = value.split(',')[0]!;
  return id.includes(':') ? id.split(':')[0] : undefined;
}

/** The VM's disks with their storage and size, in key order. */
export function vmDisks(cfg: Record<string, string>): Array<{ key: string; storage: string; bytes: number }> {
  const out: Array<{ key: string; storage: string; bytes: number }> = [];
  for (const [k, v] of Object.entries(cfg)) {
    if (!DISK_KEY.test(k)) continue;
    const storage = driveStorage(v);
    if (storage) out.push({ key: k, storage, bytes: driveSize(v) ?? 0 });
  }
  return out.sort((a, b) => a.key.localeCompare(b.key, 'en', { numeric: true }));
}

/** The storage each disk should be on: disks[] own, else spec.forProvider.storage (when set). */
export function wantedStorage(r: ProxmoxVM, key: string): string | undefined {
  const fp = r.spec.forProvider;
  const i = (fp.disks ?? []).findIndex((d, j) => (d.slot ?? `scsi${j + 1}`) === key);
  if (i >= 0) return fp.disks![i]!.storage ?? fp.storage;
  return key === 'scsi0' ? fp.storage : undefined;
}

/**
 * The placement changes, first of all changes (the VM moves before it is configured): a
 * migration, or a disk move per disk on the wrong storage. Sets NodeDrift.
 */
export function placementChanges(
  r: ProxmoxVM,
  found: ObservedVm,
  cfg: Record<string, string>,
  state: string,
): Change[] {
  const fp = r.spec.forProvider;
  const a = atProvider(r);
  const want = fp.node;
  const here = found.node;
  if (want && want !== here) {
    const specChanged = a.placedNode === undefined || a.placedNode !== want;
    if (specChanged || fp.placementPolicy === 'Enforce') {
      nodeDrift(r, undefined);
      const bytes = vmDisks(cfg).reduce((s, d) => s + d.bytes, 0);
      const online = state === 'running';
      const how = `${online ? 'online' : 'offline'}, ${estimate(bytes, memoryBytes(fp) ?? 0, online)}`;
      return [
        {
          kind: 'migrate',
          why: `migrating VM ${found.vmid} ${here} -> ${want}${specChanged ? '' : ' (back: placementPolicy Enforce)'} (${how})`,
          how,
          expectedMs: estimateMs(bytes, memoryBytes(fp) ?? 0, online),
          node: here,
          target: want,
          running: state === 'running',
          ...(fp.storage ? { storage: fp.storage } : {}),
        },
      ];
    }
    nodeDrift(
      r,
      `VM ${found.vmid} is on node ${here}, but spec.forProvider.node says ${want}: it was moved outside the provider (HA, a person) and is followed there (placementPolicy: Follow). Set placementPolicy: Enforce to migrate it back, or set node: ${here}`,
    );
  } else nodeDrift(r, undefined);
  const out: Change[] = [];
  for (const d of vmDisks(cfg)) {
    const to = wantedStorage(r, d.key);
    if (!to || to === d.storage) continue;
    const how = `${Math.round(d.bytes / GiB)} GiB, ${estimate(d.bytes, 0, false)}`;
    out.push({
      kind: 'move-disk',
      why: `moving disk ${d.key} ${d.storage} -> ${to} (${how})`,
      how,
      expectedMs: estimateMs(d.bytes, 0, false),
      disk: d.key,
      storage: to,
      from: d.storage,
    });
  }
  return out;
}

/** A rough duration from sizes (disk copies at ~100 MiB/s, memory at ~500 MiB/s), in ms. */
export function estimateMs(diskBytes: number, memBytes: number, online: boolean): number {
  return 1000 * Math.ceil(diskBytes / (100 * MiB) + (online ? memBytes / (500 * MiB) : 0));
}

/** The same, for plans. */
export function estimate(diskBytes: number, memBytes: number, online: boolean): string {
  const s = estimateMs(diskBytes, memBytes, online) / 1000;
  return s < 90 ? `about ${Math.max(1, s)} s` : `about ${Math.round(s / 60)} min`;
}

function nodeDrift(r: ProxmoxVM, message: string | undefined): void {
  const had = r.status?.conditions?.some((c) => c.type === 'NodeDrift');
  if (!message && !had) return;
  setCondition(
    r,
    message
      ? {
          type: 'NodeDrift',
          status: 'True',
          reason: 'MovedOutsideProvider',
          message,
          observedGeneration: r.metadata.generation,
        }
      : { type: 'NodeDrift', status: 'False', reason: 'OnSpecNode', observedGeneration: r.metadata.generation },
    Date.now(),
  );
}

/**
 * Before a migration is sent: the target is online, has room, has the bridges, and PVE's own
 * precondition lets it. Returns the migrate options; throws (nothing moved) with the reason.
 */
export async function checkMigration(
  ctx: StepContext,
  r: ProxmoxVM,
  node: string,
  vmid: number,
  change: Change,
): Promise<{ withLocalDisks: boolean; targetStorage?: string }> {
  const target = change.target!;
  const entry = listIndex(await ctx.site.clusterResources(true, ctx.signal, ctx.memory)).nodes.find(
    (e) => e.node === target,
  );
  if (!entry)
    throw reason(
      'MigrationRefused',
      `spec.forProvider.node: node ${target} is not a node of site ${ctx.site.name}; nothing was moved`,
    );
  if (entry.status !== 'online')
    throw reason(
      'MigrationRefused',
      `node ${target} is ${entry.status ?? 'not online'}; VM ${vmid} stays on ${node} until it is back`,
      true,
    );
  await checkCapacity(ctx, r, target);
  await checkBridges(ctx, r, target);
  const pre = await ctx.client.migratePrecondition(node, vmid, target);
  const blocked = pre.not_allowed_nodes?.[target];
  if (blocked && Object.keys(blocked).length)
    throw reason(
      'MigrationRefused',
      `Proxmox VE will not migrate VM ${vmid} to ${target}: ${blocked.unavailable_storages?.length ? `storages ${blocked.unavailable_storages.join(', ')} are not available there` : `resources ${(blocked['unavailable-resources'] ?? []).join(', ')} are not mapped there`}; nothing was moved`,
    );
  if (pre.local_resources?.length)
    throw reason(
      'MigrationRefused',
      `VM ${vmid} uses local resources (${pre.local_resources.join(', ')}) that cannot migrate; nothing was moved`,
    );
  await checkUserSnippetOn(ctx, r, target, vmid);
  const local = (pre.local_disks ?? []).filter((d) => !d.is_unused);
  if (!local.length) return { withLocalDisks: false };
  // Local disks are copied: to spec.forProvider.storage on the target (or the same storage id).
  const storages = await ctx.client.nodeStorages(target);
  const dest = change.storage ?? local[0]!.volid.split(':')[0]!;
  const bytes = local.reduce((s, d) => s + (d.size ?? 0), 0);
  checkStorage(
    storages,
    dest,
    bytes,
    change.storage ? 'spec.forProvider.storage' : `the storage of ${local[0]!.volid}`,
  );
  return { withLocalDisks: true, targetStorage: dest };
}

/**
 * A snippet the user names (spec.forProvider.cloudInit.userDataSnippet) is theirs to place: PVE
 * migrates a VM's disks, not the files `cicustom` names (qemu-server QemuMigrate.pm
 * scan_local_volumes walks QemuServer.pm foreach_volid, drives only), and a VM reads its snippet
 * when it starts. On a node-local storage it must be on the target already, or the migrated VM
 * would fail its next start there; the migration is refused until it is (this provider's own
 * snippets it writes there itself: snippet-removal.ts noteNode).
 */
async function checkUserSnippetOn(ctx: StepContext, r: ProxmoxVM, target: string, vmid: number): Promise<void> {
  const volid = r.spec.forProvider.cloudInit?.userDataSnippet;
  if (!volid?.includes(':')) return;
  const sid = volid.slice(0, volid.indexOf(':'));
  const entry = (await ctx.client.nodeStorages(target)).find((s) => s.storage === sid);
  if (entry?.shared === 1) return;
  const there = entry ? await ctx.client.storageContent(target, sid, { content: 'snippets' }) : [];
  if (there.some((v) => v.volid === volid)) return;
  throw reason(
    'MigrationRefused',
    `spec.forProvider.cloudInit.userDataSnippet ${volid} is not on node ${target}${entry ? ` (storage '${sid}' is not shared)` : ` (it has no storage '${sid}')`}: Proxmox VE migrates disks, not snippets, and VM ${vmid} would not start there. Copy the file to ${target}, or keep it on a shared storage; nothing was moved`,
    true,
  );
}
