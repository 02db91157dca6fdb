/**
 * What a move to another site sends (site-move.ts tells the steps): the checks and choices of
 * step 1, `ReservingTarget`, before the move is recorded (the source's version and the target's
 * credentials, the target's node, room, bridges, storages and snippet, the VMID, the storage and
 * bridge maps), and step 2's request, `remote_migrate` with `delete=1` after the snippet is on the
 * target node. Proxmox's facts for both are in site-move.ts's opening comment.
 */
import type { ProxmoxVM, SiteMove } from '../api/proxmoxvm.ts';
import { rfc3339 } from '../engine/resource.ts';
import { reason } from './conditions.ts';
import { type StepContext, stepContext } from './context.ts';
import type { Change } from './drift.ts';
import { listIndex } from './list-index.ts';
import type { ObservedVm } from './lookup.ts';
import { estimate, vmDisks, wantedStorage } from './migrate.ts';
import { checkBridges, checkCapacity, checkStorage } from './preflight.ts';
import { lateDestroyWindowMs } from './recent-destroys.ts';
import { awaitQuorumAfterRefusal } from './site-quorum.ts';
import { checkSnippetPossible, desiredSnippet, needsSnippet, writeSnippetOn } from './snippets.ts';
import { desiredNets, memoryBytes, parseNetValue } from './spec.ts';
import { freeVmids } from './vmid.ts';

/** The context of the target site, for the same resource and reconcile. */
export function targetContext(ctx: StepContext, r: ProxmoxVM): StepContext {
  return stepContext(ctx.target!, r, ctx.options, ctx.signal);
}

/** The storage each disk goes to on the target: its own spec storage, else spec.forProvider.storage, else the same id. */
function storageMap(r: ProxmoxVM, cfg: Record<string, string>): Map<string, string> {
  const fp = r.spec.forProvider;
  const out = new Map<string, string>();
  for (const d of vmDisks(cfg)) out.set(d.storage, wantedStorage(r, d.key) ?? d.storage);
  // The cloud-init drive is copied too (PVE maps every volume).
  for (const [k, v] of Object.entries(cfg))
    if (/^(ide|sata|scsi)\d+$/.test(k) && /cloudinit/.test(v)) {
      const sid = v.split(':')[0]!;
      if (!out.has(sid)) out.set(sid, fp.storage ?? sid);
    }
  return out;
}

/** The bridge each NIC goes to on the target: the spec's bridge of that NIC, else the same one. */
function bridgeMap(r: ProxmoxVM, cfg: Record<string, string>): Map<string, string> {
  const nets = desiredNets(r.spec.forProvider);
  const out = new Map<string, string>();
  for (const [k, v] of Object.entries(cfg)) {
    const m = /^net(\d+)$/.exec(k);
    if (!m) continue;
    const bridge = parseNetValue(v).opts.bridge;
    if (bridge) out.set(bridge, nets[Number(m[1])]?.bridge ?? bridge);
  }
  return out;
}

function idMap(m: Map<string, string>): string {
  return [...m].map(([from, to]) => `${from}:${to}`).join(',');
}

/**
 * The target endpoint's own node: where PVE puts the VM (the `local` entry of its /cluster/status,
 * read here unless the caller read it).
 */
async function endpointNode(tctx: StepContext, read?: Array<Record<string, unknown>>): Promise<string> {
  const status = read ?? (await tctx.client.clusterStatus());
  const local = status.find((e) => e.type === 'node' && (e.local === 1 || e.local === true));
  const name = typeof local?.name === 'string' ? local.name : undefined;
  if (!name)
    throw reason(
      'MigrationRefused',
      `site ${tctx.site.name}: /cluster/status names no local node for endpoint ${tctx.site.access?.endpoint}`,
    );
  return name;
}

/** The VMID on the target: its own when free there (the marker and VMID stay), else the first free one. */
async function targetVmid(tctx: StepContext, r: ProxmoxVM, vmid: number): Promise<number> {
  const free = await freeVmids(tctx, r);
  if (free(vmid)) return vmid;
  if (free.destroyedLately.has(vmid))
    throw reason(
      'MigrationRefused',
      `VMID ${vmid} on site ${tctx.site.name} was destroyed less than ${lateDestroyWindowMs(tctx) / 1000} s ago, and PVE may still apply a destroy of it that was sent earlier; the move is tried again once that time has passed`,
      true,
    );
  // A VM keeps its VMID: a marker names it, and every runtime of the installation must recognise
  // the moved VM by it at once (a VM moved to another VMID carried a marker naming the old one, and
  // another state file took it for a copy: fault-search F26).
  throw reason(
    'MigrationRefused',
    `VMID ${vmid} is in use on site ${tctx.site.name} (by another VM, or held by another resource); a VM keeps its VMID when it moves, so nothing was moved. Fix: free VMID ${vmid} there, or give each site its own spec.sites[].vmidRange so that VMIDs stay unique across them`,
    true,
  );
}

/**
 * What makes a remote migration impossible here (then PlacementChangeRefused, nothing moves): the
 * source's version, the target's credentials. The message names the fix.
 */
export async function remoteMigrationBlocker(ctx: StepContext, tctx: StepContext): Promise<string | undefined> {
  const caps = await ctx.client.capabilities();
  const v = caps.version;
  if (v.major < 7 || (v.major === 7 && v.minor < 3))
    return `site ${ctx.site.name} runs Proxmox VE ${v.text}; remote migration (remote_migrate) needs 7.3 or later`;
  const access = tctx.site.access;
  if (access?.credentials.kind !== 'token')
    return `site ${tctx.site.name} has user and password credentials; a remote migration authenticates to the target with an API token (target-endpoint apitoken=). Fix: give site ${tctx.site.name} a Secret with tokenid and token`;
  return undefined;
}

/**
 * The checks and choices of a move, before it is recorded: target node, VMID, maps, room.
 * `blocker`: what remoteMigrationBlocker said (the caller asked it already, to choose a replacement).
 */
export async function planSiteMove(
  ctx: StepContext,
  tctx: StepContext,
  r: ProxmoxVM,
  here: ObservedVm,
  cfg: Record<string, string>,
  blocker: string | undefined,
): Promise<{ move: SiteMove; how: string; from: string; fromNode: string; to: string; node: string; vmid: number }> {
  if (blocker)
    throw reason(
      'PlacementChangeRefused',
      `spec.forProvider.site changed from '${ctx.site.name}' to '${tctx.site.name}', but VM ${here.vmid} cannot be migrated there: ${blocker}; nothing was moved or created. Or revert spec.forProvider.site`,
    );
  const node = await endpointNode(tctx);
  const nodeEntry = listIndex(await tctx.site.clusterResources(false, tctx.signal, tctx.memory)).nodes.find(
    (e) => e.node === node,
  );
  if (nodeEntry?.status !== 'online')
    throw reason(
      'MigrationRefused',
      `node ${node} of site ${tctx.site.name} is ${nodeEntry?.status ?? 'unknown'}; VM ${here.vmid} stays on site ${ctx.site.name} until it is back`,
      true,
    );
  await checkCapacity(tctx, r, node);
  await checkBridges(tctx, r, node);
  const storages = await tctx.client.nodeStorages(node);
  const disks = vmDisks(cfg);
  const map = storageMap(r, cfg);
  for (const [from, to] of map) {
    const bytes = disks.filter((d) => d.storage === from).reduce((s, d) => s + d.bytes, 0);
    checkStorage(storages, to, bytes, `the target of storage ${from} (spec.forProvider.storage)`);
  }
  if (needsSnippet(r)) {
    checkSnippetPossible(tctx, r);
    await desiredSnippet(tctx, r, node);
  }
  const vmid = await targetVmid(tctx, r, here.vmid);
  // Held until it is visible there (observe on the target unreserves it), as a create's VMID is.
  if (!ctx.readOnly) tctx.site.reserved.set(vmid, r.metadata.uid);
  const bytes = disks.reduce((s, d) => s + d.bytes, 0);
  const online = here.entry.status === 'running';
  const how = `${online ? 'online' : 'offline'}, storage ${idMap(map)}, ${estimate(bytes, memoryBytes(r.spec.forProvider) ?? 0, online)}`;
  const move: SiteMove = {
    from: ctx.site.name,
    fromNode: here.node,
    fromVmid: here.vmid,
    to: tctx.site.name,
    vmid,
    node,
    at: rfc3339(Date.now()),
  };
  return { move, how, from: move.from, fromNode: move.fromNode, to: move.to, node, vmid };
}

/** `target-endpoint`: the target's API token and pinned fingerprint (a secret: only in the request body). */
function targetEndpoint(tctx: StepContext): string {
  const access = tctx.site.access!;
  if (access.credentials.kind !== 'token') throw reason('PlacementChangeRefused', 'the target needs an API token');
  const url = new URL(access.endpoint);
  const parts = [
    `apitoken=PVEAPIToken=${access.credentials.tokenId}=${access.credentials.secret.reveal()}`,
    `host=${url.hostname.replace(/^\[|\]$/g, '')}`,
    ...(url.port ? [`port=${url.port}`] : []),
    // One pinned certificate is the endpoint's; with several, or none (a CA), PVE checks it itself.
    ...(access.fingerprints.length === 1 ? [`fingerprint=${access.fingerprints[0]}`] : []),
  ];
  return parts.join(',');
}

/**
 * Send the recorded move: the snippet to the target node first (the VM's config names it, and a
 * VM started there reads it), then `remote_migrate` with `delete=1`. Returns the UPID. The target
 * node is read again: PVE puts the VM on the node that answers the target endpoint when the
 * migration starts (qemu-server Qemu.pm:5844-5858), and the recorded one may have gone down since
 * (a VIP failed over): its snippet went over SSH to a node that did not answer, 15 s per attempt
 * (the fourth fault search, one run past its minute), and would have been missing where the VM
 * arrived. The record takes the node read (update.ts writes the move with its UPID).
 */
export async function sendSiteMove(ctx: StepContext, r: ProxmoxVM, change: Change): Promise<string> {
  const move = change.move!;
  const tctx = targetContext(ctx, r);
  const cfg = (await ctx.client.vmConfig(move.fromNode, move.fromVmid)).values;
  // One read of the target's /cluster/status for both: its quorum, after a refusal, and its node.
  const status = await tctx.client.clusterStatus();
  await awaitQuorumAfterRefusal(tctx, r, `VM ${move.fromVmid} moves to site ${move.to}`, status);
  move.node = await endpointNode(tctx, status);
  await writeSnippetOn(tctx, r, move.node);
  return ctx.client.remoteMigrateVm(move.fromNode, move.fromVmid, {
    targetEndpoint: targetEndpoint(tctx),
    targetStorage: idMap(storageMap(r, cfg)),
    targetBridge: idMap(bridgeMap(r, cfg)) || '1',
    targetVmid: move.vmid,
    ...(change.running ? { online: true } : {}),
    delete: true,
  });
}
