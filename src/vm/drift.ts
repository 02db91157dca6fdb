/**
 * Step 11-12: drift. The first difference between the spec and the VM's config, as one change
 * to make (one config POST with the digest, one disk resize, or a power action), so that one
 * reconcile makes at most one mutation. Disks only grow; a smaller size is reported, not applied.
 */
import type { ProxmoxVM, SiteMove } from '../api/proxmoxvm.ts';
import { GiB, MiB, parseQuantity } from '../api/quantity.ts';
import { setCondition } from '../engine/resource.ts';
import type { StepContext } from './context.ts';
import type { ObservedVm } from './lookup.ts';
import { placementChanges } from './migrate.ts';
import { sshKeys } from './secrets.ts';
import { isOwnSnippetRef, needsSnippet, snippetOwner } from './snippets.ts';
import {
  desiredDescription,
  desiredIpConfigs,
  desiredNets,
  desiredTags,
  diskBytes,
  diskOptions,
  driveSize,
  driveVolume,
  memoryBytes,
  parseNetValue,
  parseUserData,
  printNet,
  vmName,
  wholeGiB,
} from './spec.ts';

export interface Change {
  /** `retire-duplicate`: this VM duplicates the one kept (see duplicates.ts): stop it, then destroy it. */
  /** `discard-replacement`: a replacement's new VM, the spec back on the old VM's site (replace.ts): the same. */
  /** `reboot`: pending changes are applied by a reboot (rebootPolicy: IfNeeded). */
  /** `migrate` (to `target`, see migrate.ts) and `move-disk` (`disk` to `storage`, from `from`). */
  /** `reserve-site-move`, then `remote-migrate`: a move to another site (see site-move.ts). */
  kind:
    | 'config'
    | 'resize'
    | 'start'
    | 'stop'
    | 'reboot'
    | 'destroy-placeholder'
    | 'retire-duplicate'
    | 'discard-replacement'
    | 'migrate'
    | 'move-disk'
    | 'reserve-site-move'
    | 'remote-migrate'
    | 'reserve-replacement'
    | 'retire-replaced';
  why: string;
  /** reserve-site-move: the move to record; remote-migrate: the recorded move to send (site-move.ts). */
  move?: SiteMove;
  /** reserve-replacement: the VM the new one replaces (replace.ts). */
  replaced?: { site: string; node: string; vmid: number };
  set?: Record<string, string | number>;
  del?: string[];
  disk?: string;
  size?: string;
  /** resize: the disk's volume (`local-lvm:vm-100-disk-0`), whose own size tells a stale config (disk-size.ts). */
  volume?: string;
  /** The node of the VM (for destroy-placeholder, which comes before status.atProvider.node is trusted). */
  node?: string;
  /** retire-duplicate: the duplicate's VMID (this resource's own, or a stray twin's). */
  vmid?: number;
  /** retire-duplicate: whether the duplicate still runs (it is stopped first); migrate: online. */
  running?: boolean;
  /**
   * retire-duplicate, in a plan only: the twin's site, when it is on another site than the
   * resource's (duplicates-elsewhere.ts; a reconcile retires such a twin itself, not as a change).
   */
  site?: string;
  /** migrate: the target node; reserve-replacement: the new site. */
  target?: string;
  /** migrate: where local disks go; move-disk: the target storage. */
  storage?: string;
  /** move-disk: the storage the disk is on now. */
  from?: string;
  /** migrate, move-disk: how it is done and roughly how long it takes (`online, about 40 s`). */
  how?: string;
  /** migrate, move-disk, remote-migrate: the expected duration of its task (ms), from sizes. */
  expectedMs?: number;
}

/** SSH keys as PVE returns them (percent-encoded). */
function decodeSshKeys(v: string | undefined): string {
  if (!v) return '';
  try {
    return decodeURIComponent(v);
  } catch {
    return v;
  }
}

/** The first difference between spec and VM, as one change to make (one mutation per reconcile). */
export function diff(
  ctx: StepContext,
  r: ProxmoxVM,
  found: ObservedVm,
  cfg: Record<string, string>,
  state: string,
): Change | undefined {
  return changes(ctx, r, found, cfg, state)[0];
}

/**
 * Every difference between spec and VM, in the order they are made: the config (one POST), disks
 * grown or added, then the power state (the VM starts with its final config). `plan` shows them
 * all; a reconcile makes the first.
 */
export function changes(
  ctx: StepContext,
  r: ProxmoxVM,
  found: ObservedVm,
  cfg: Record<string, string>,
  state: string,
): Change[] {
  // The VM moves (with its data) before anything else about it changes.
  const out: Change[] = [...placementChanges(r, found, cfg, state)];
  const fp = r.spec.forProvider;
  const set: Record<string, string | number> = {};
  const del: string[] = [];
  const want = (k: string, v: string | number | undefined) => {
    if (v === undefined) return;
    if (String(cfg[k] ?? '') !== String(v)) set[k] = v;
  };
  want('name', vmName(r));
  want('cores', fp.cpu ?? 1);
  want('sockets', fp.sockets ?? 1);
  const mem = Math.round((memoryBytes(fp) ?? 2048 * MiB) / MiB);
  if (Number.parseInt(String(cfg.memory ?? '').replace(/^current=/, ''), 10) !== mem) set.memory = mem;
  const tags = desiredTags(r);
  const have = (cfg.tags ?? '')
    .split(/[;,\s]+/)
    .filter(Boolean)
    .sort()
    .join(';');
  if (have !== tags) set.tags = tags;
  want(
    'description',
    desiredDescription(r, { installation: ctx.site.installation, vmid: found.vmid }, cfg.description),
  );
  if (fp.onBoot !== undefined) want('onboot', fp.onBoot ? 1 : 0);
  if (fp.startup !== undefined) want('startup', fp.startup);
  const agent = fp.agent === false ? '0' : '1';
  if ((cfg.agent ?? '0').replace(/^enabled=/, '').split(',')[0] !== agent) set.agent = agent;
  const nets = desiredNets(fp);
  for (const n of nets) {
    const cur = cfg[n.key];
    const parsed = cur ? parseNetValue(cur) : undefined;
    const value = printNet(n, parsed?.mac);
    if (cur !== value) set[n.key] = value;
  }
  for (const k of Object.keys(cfg)) if (/^net\d+$/.test(k) && !nets.some((n) => n.key === k)) del.push(k);
  // Cloud-init.
  const ci = fp.cloudInit;
  const ud = parseUserData(fp.userData);
  const ciUser = ci?.user ?? ud.user;
  if (ciUser) want('ciuser', ciUser);
  const ips = desiredIpConfigs(fp, nets.length);
  for (const [i, v] of ips.entries()) want(`ipconfig${i}`, v);
  const keys = sshKeys(ctx, r, ud);
  if (keys.length && decodeSshKeys(cfg.sshkeys) !== keys.join('\n')) set.sshkeys = keys.join('\n');
  // Passwords read back as '**********': set when none is set (rotate by recreating or by hand).
  if (ctx.memory.secrets.password !== undefined && !cfg.cipassword) set.cipassword = ctx.memory.secrets.password;
  if (ci?.dns?.servers?.length) want('nameserver', ci.dns.servers.join(' '));
  if (ci?.dns?.searchDomain) want('searchdomain', ci.dns.searchDomain);
  if (ci?.userDataSnippet) want('cicustom', `user=${ci.userDataSnippet}`);
  else if (ctx.memory.snippet && needsSnippet(r)) want('cicustom', `user=${ctx.memory.snippet.volid}`);
  else if (isOwnSnippetRef(cfg.cicustom, snippetOwner(r, ctx.site.installation))) del.push('cicustom');
  if (Object.keys(set).length || del.length) {
    out.push({
      kind: 'config',
      why: `updating ${[...Object.keys(set), ...del].join(', ')}`,
      set,
      ...(del.length ? { del } : {}),
    });
  }
  // Disks: grow scsi0 to the requested size (never shrink).
  const wantDisk = diskBytes(fp);
  const d0 = cfg.scsi0;
  if (wantDisk && d0) {
    const size = driveSize(d0);
    const wantG = wholeGiB(wantDisk);
    if (size !== undefined && size < wantDisk) {
      out.push({
        kind: 'resize',
        why: `growing scsi0 to ${wantG}G`,
        disk: 'scsi0',
        size: `${wantG}G`,
        volume: driveVolume(d0),
      });
    }
    if (size !== undefined && size > wantG * GiB + GiB / 2) {
      setCondition(
        r,
        {
          type: 'DiskShrinkRefused',
          status: 'True',
          reason: 'ShrinkNotSupported',
          message: `scsi0 is ${Math.round(size / GiB)}G; Proxmox cannot shrink disks, the requested ${wantG}G is ignored`,
          observedGeneration: r.metadata.generation,
        },
        Date.now(),
      );
    }
  }
  for (const [i, d] of (fp.disks ?? []).entries()) {
    const slot = d.slot ?? `scsi${i + 1}`;
    const bytes = parseQuantity(d.size, GiB)!;
    const cur = cfg[slot];
    if (!cur) {
      const storage = d.storage ?? fp.storage ?? 'local-lvm';
      out.push({
        kind: 'config',
        why: `adding disk ${slot}`,
        set: { [slot]: [`${storage}:${wholeGiB(bytes)}`, ...diskOptions(d)].join(',') },
      });
      continue;
    }
    const size = driveSize(cur);
    if (size !== undefined && size < bytes)
      out.push({
        kind: 'resize',
        why: `growing ${slot}`,
        disk: slot,
        size: `${wholeGiB(bytes)}G`,
        volume: driveVolume(cur),
      });
  }
  // Power state last: the VM starts with its final config.
  const power = fp.powerState ?? 'running';
  if (power === 'running' && state !== 'running') out.push({ kind: 'start', why: `starting VM ${found.vmid}` });
  if (power === 'stopped' && state === 'running') out.push({ kind: 'stop', why: `stopping VM ${found.vmid}` });
  return out;
}
