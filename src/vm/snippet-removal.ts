/**
 * Removing a resource's snippet files from a node once nothing there reads them (its VM deleted,
 * moved away, or naming a newer file), and the reading of `cicustom` values that says what a VM
 * reads. Best effort and careful: only the resource's own files (their names carry its identity),
 * and none that another resource's VM of the same name may read (namedByTwins: a second state
 * file of the installation renders files of the same names). What is left stays, named for the
 * resource, for `gc --snippets` (src/fleet/gc-snippets.ts).
 */
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { externalName } from '../engine/resource.ts';
import { NotFoundError } from '../proxmox/errors.ts';
import type { ClusterResource, PendingEntry } from '../proxmox/types.ts';
import { atProvider } from './conditions.ts';
import type { StepContext } from './context.ts';
import { listIndex } from './list-index.ts';
import {
  forgetSnippetFile,
  snippetOwner,
  snippetStore,
  snippetsOf,
  withSnippetFiles,
  writeSnippetOn,
} from './snippets.ts';
import { isPlaceholderLock, needsSnippet, parseMarker, vmName } from './spec.ts';

/**
 * After this resource's VM left `node` for another site (its source destroyed by the migration, or
 * removed by the operator once left behind): its snippet files there are read by nothing. Removed
 * only from a storage that is not shared: a shared one (NFS, CephFS) may be the very export the
 * target site mounts too, where the file of the same name (its content's hash) serves the moved VM.
 * Best effort, once: what a failure leaves is named for the resource.
 */
export async function removeSnippetsLeftOn(ctx: StepContext, r: ProxmoxVM, node: string): Promise<number> {
  if (!ctx.site.ssh || (!needsSnippet(r) && !r.status?.atProvider?.userDataSnippet)) return 0;
  const store = await snippetStore(ctx, node).catch(() => undefined);
  if (!store || store.shared) return 0;
  return removeSnippets(ctx, r, node);
}

/**
 * Record the node the VM is on as Proxmox shows it on this site (status.atProvider.node). Seen on
 * another node of the site than the last time (migrated by this provider, by HA or by a person),
 * its snippet follows it: PVE migrates a VM's drives, not the files `cicustom` names (qemu-server
 * QemuMigrate.pm scan_local_volumes walks QemuServer.pm foreach_volid, drives only), and a VM reads
 * its snippet when it starts. On a node-local snippet storage (`local`) the file is written on the
 * new node now (this provider's own migration wrote it before it was sent: a stat), and the node
 * left is recorded (`snippetLeftOn`); its copy is removed at a later reconcile that still finds the
 * VM elsewhere, once the status naming the new node was written. Removed at once, a crash before
 * that write left the status on the old node: the VM moved back there then named a file that was
 * gone, and no node change was ever seen again (fault search F71). A failed write throws (the VM
 * could not start there); the removal is best effort. `writes` false (a plan's or an Observe-only
 * look): nothing is written or removed. A node this site does not list (the VM came from another
 * site) is the site move's to clean up (site-move.ts).
 */
export async function noteNode(
  ctx: StepContext,
  r: ProxmoxVM,
  node: string,
  writes: boolean,
  lock?: string,
): Promise<void> {
  const a = atProvider(r);
  const last = a.node;
  a.node = node;
  if (!writes) return;
  const left = a.snippetLeftOn;
  // Not while the VM is locked `migrate`: a migration in flight (this process's or another's) may
  // be taking it back to the node left, where it reads the file when it starts (fault search F75).
  // The lock as the config has it now, not as a list (this process's, up to its TTL old) showed
  // it: another runtime's migration back, sent since, had its copy there removed (F80).
  if (left !== undefined && lock !== 'migrate') {
    const now = left !== node ? await lockNow(ctx, r, node) : undefined;
    if (now !== 'migrate' && now !== 'unknown') {
      if (left !== node) await removeSnippetsLeftOn(ctx, r, left).catch(() => 0);
      delete a.snippetLeftOn;
    }
  }
  // A config may name our snippet with no record of it: a create whose answer was lost (F73).
  if (!last || last === node || !ctx.site.ssh || !(a.userDataSnippet || needsSnippet(r))) return;
  const nodes = listIndex(await ctx.site.clusterResources(false, ctx.signal, ctx.memory)).nodes;
  if (!nodes.some((e) => e.node === last)) return;
  try {
    await writeSnippetOn(ctx, r, node);
  } catch (e) {
    // Not recorded on its new node until its snippet is there: recorded at once, the next
    // reconcile took the move as seen and never wrote the file (sshd down there: fault search F95).
    a.node = last;
    throw e;
  }
  a.snippetLeftOn = last;
}

/** The VM's config lock on `node` as PVE has it now ('unknown' when it cannot be read). */
async function lockNow(ctx: StepContext, r: ProxmoxVM, node: string): Promise<string | undefined> {
  const vmid = Number(externalName(r));
  if (!Number.isInteger(vmid)) return 'unknown';
  return ctx.client.vmConfig(node, vmid).then(
    (c) => c.values.lock,
    () => 'unknown',
  );
}

/** Every snippet volid a `cicustom` value names (`user=local:snippets/a.yaml,meta=...`). */
export function cicustomVolids(value: unknown): string[] {
  if (typeof value !== 'string') return [];
  return value
    .split(',')
    .map((part) => /^(?:user|network|meta|vendor)=(.+)$/.exec(part.trim())?.[1])
    .filter((v): v is string => v !== undefined);
}

/** The snippet volids a VM's `cicustom` names in its pending list: the current value and the pending one. */
export function pendingCicustomVolids(pending: PendingEntry[]): string[] {
  return pending
    .filter((p) => p.key === 'cicustom')
    .flatMap((p) => [...cicustomVolids(p.value), ...cicustomVolids(p.pending)]);
}

/**
 * The snippet files on `node` that another resource's VM of this one's identity names there, in
 * its config or its pending change: a twin of another state file of the installation, whose
 * files have the same names (the identity and the content make the name). Undefined when one of
 * them could not be read, or when a create or clone that this process did not send is in flight
 * on the node: then nothing is removed. Such a VM is a placeholder (`lock: create` or `clone`, from
 * the live config) whose name is not written yet (qemu-server `src/PVE/API2/Qemu.pm` create_vm
 * writes the placeholder with `create_and_lock_config` before it forks the worker, the config at
 * the worker's end), and it may be the twin's, naming these very files once written (fault search
 * F56). A VM listed as `VM <vmid>` or with no name is read too: the list's name is pvestatd's (its
 * last tick), so a create that has just ended shows so for up to ten seconds, config and all
 * written. Costs a fresh bulk list, and a read per VM of the resource's name (or of no name yet)
 * on the node (its own VM, at a config change; none at a delete or a move).
 */
async function namedByTwins(ctx: StepContext, r: ProxmoxVM, node: string): Promise<Set<string> | undefined> {
  const index = listIndex(await ctx.site.clusterResources(true, ctx.signal, ctx.memory));
  const name = vmName(r);
  const onNode = (e: ClusterResource) => e.node === node && e.type === 'qemu' && e.template !== 1;
  // Ours (our tag, or a placeholder's lock) are what a twin's VM can be, whatever its listed name.
  // A placeholder of a create this process sent is not another state file's.
  const ours = index.tagged.filter(onNode);
  if (ours.some((e) => isPlaceholderLock(e.lock) && !ctx.site.ownCreates.has(Number(e.vmid)))) return undefined;
  // (A placeholder left here is one of this process's creates: it names nothing yet, and is not read.)
  const unnamed = ours.filter((e) => !isPlaceholderLock(e.lock) && (e.name === undefined || e.name === `VM ${e.vmid}`));
  const candidates = new Set([...(index.byName.get(name) ?? []).filter(onNode), ...unnamed]);
  const out = new Set<string>();
  for (const e of candidates) {
    let pending: PendingEntry[];
    try {
      pending = await ctx.client.vmPending(node, Number(e.vmid));
    } catch (err) {
      if (err instanceof NotFoundError) continue;
      return undefined;
    }
    const value = (key: string) => String(pending.find((p) => p.key === key)?.value ?? '');
    if (value('name') !== name || parseMarker(value('description'))?.uid === r.metadata.uid) continue;
    for (const v of pendingCicustomVolids(pending)) out.add(v.replace(/^.*\//, ''));
  }
  return out;
}

/**
 * Remove this resource's snippet files on `node` but `keep` (best effort: what is left stays, named
 * for the resource, until `gc --snippets`). Only its own files are touched: their names carry its
 * identity. A file that another resource's VM names there (a twin of another state file, with
 * files of the same names) stays, and all of them while a create this process did not send is in
 * flight on the node (see namedByTwins): removed under it, that VM named a file its node no longer had (fault search F56).
 */
export async function removeSnippets(ctx: StepContext, r: ProxmoxVM, node: string, keep?: string): Promise<number> {
  if (!ctx.site.ssh) return 0;
  const store = await snippetStore(ctx, node).catch(() => undefined);
  if (!store) return 0;
  try {
    return await withSnippetFiles(ctx, node, async (files) => {
      const owner = snippetOwner(r, ctx.site.installation);
      let old = snippetsOf(owner, await files.list(store.dir)).filter((n) => n !== keep);
      if (!old.length) return 0;
      const named = await namedByTwins(ctx, r, node);
      if (!named) return 0;
      old = old.filter((n) => !named.has(n));
      for (const n of old) {
        forgetSnippetFile(ctx, node, store.dir, n);
        await files.remove(`${store.dir}/${n}`);
      }
      return old.length;
    });
  } catch {
    return 0;
  }
}
