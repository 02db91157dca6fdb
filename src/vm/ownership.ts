/**
 * Whose is the VM at a resource's VMID? The answer decides everything the provider may do to it,
 * so it rests only on what Proxmox itself shows:
 *
 * - the ownership marker (the last line of the description, written in the create or clone call);
 * - the placeholder a create or clone leaves while its worker runs: PVE writes a config holding
 *   only `lock: create` in the API handler before the worker starts (qemu-server
 *   `src/PVE/API2/Qemu.pm` create_vm, `create_and_lock_config`), and a clone writes
 *   `# qmclone temporary file` + `lock: clone`, then the config with the new description after each
 *   disk (clone_vm). Until the worker ends such a VM has no marker yet, or has it under `lock: clone`;
 * - the task list, when the worker died (node reboot, killed worker) and left the placeholder and
 *   its lock behind: a create/clone task for that VMID by our credentials, started since we persisted
 *   the VMID, makes it ours.
 *
 * A placeholder is presumed ours only while we may have sent a create at this VMID; it is never
 * renamed away as foreign while its worker runs.
 */
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import {
  ANNOTATION_CREATE_FAILED,
  ANNOTATION_CREATE_PENDING,
  ANNOTATION_CREATE_SUCCEEDED,
  annotation,
} from '../engine/resource.ts';
import type { ExternalObservation } from '../engine/types.ts';
import type { PveClient } from '../proxmox/index.ts';
import type { VmConfig } from '../proxmox/types.ts';
import { atProvider, ready, reason } from './conditions.ts';
import type { StepContext } from './context.ts';
import type { Change } from './drift.ts';
import { findTemplate } from './lookup.ts';
import { isPlaceholderLock, type Marker, type MarkerPlace, markerNames, ownerKey, parseMarker } from './spec.ts';
import { type MakerTask, makerTasks } from './tasks.ts';
import { confirmedAt, vmidChosenByUs } from './vmid.ts';

export type Ownership =
  /**
   * Our marker is on it: this installation, this namespace/name, this VMID (any uid: another state
   * file's or an earlier incarnation's), or the first format's marker with our uid. `lock` is a
   * create/clone lock still held (in progress or interrupted).
   */
  | { kind: 'ours'; lock?: 'create' | 'clone' }
  /** A create/clone placeholder without a marker yet, made (or presumed made) by us. */
  | { kind: 'placeholder'; lock: 'create' | 'clone' }
  /**
   * Another resource's marker: another installation's, another resource's of ours, or a copy of a
   * VM of ours (an operator's clone copies the description; its marker names another VMID).
   */
  | { kind: 'other'; uid: string; why: string }
  /** No marker, and not a placeholder of ours: somebody else's VM. */
  | { kind: 'foreign'; lock?: string };

/**
 * Whether a create by this resource may exist at its external name: one was sent (pending), and
 * it is not known to have been refused (a synchronous failure newer than the pending mark, with no
 * earlier send of unknown outcome).
 */
export function mayHaveCreated(r: ProxmoxVM): boolean {
  const pending = Date.parse(annotation(r, ANNOTATION_CREATE_PENDING) ?? '');
  if (!pending) return false;
  if (r.status?.atProvider?.createOutcome === 'Unknown') return true;
  const failed = Date.parse(annotation(r, ANNOTATION_CREATE_FAILED) ?? '') || 0;
  const succeeded = Date.parse(annotation(r, ANNOTATION_CREATE_SUCCEEDED) ?? '') || 0;
  return !(failed >= pending && failed > succeeded);
}

/** Why a marker that is not ours is not: in words for conditions and gc. */
export function whoseMarker(m: Marker, at: MarkerPlace): string {
  if (m.vmid !== undefined && m.vmid !== at.vmid)
    return `a copy of VM ${m.vmid} of ${ownerKey(m)} (its marker was written for VMID ${m.vmid})`;
  if (m.installation !== undefined && m.installation !== at.installation)
    return `managed elsewhere: installation '${m.installation}' (${ownerKey(m)})`;
  return `it belongs to ${ownerKey(m)} (uid ${m.uid})`;
}

/** What an operator runs on the node to remove a placeholder only root@pam may clear. */
export function manualCleanup(node: string, vmid: number): string {
  return `on node ${node} run 'qm unlock ${vmid} && qm destroy ${vmid} --purge'`;
}

/**
 * Whether an operator protected the VM (`qm set N --protection 1`): Proxmox refuses to destroy it
 * (qemu-server src/PVE/API2/Qemu.pm:2829 at e6352be6, destroy_vm's early checks). A delete, a
 * replacement's retirement and gc look first, and leave it as it is rather than stop it for a
 * destroy that is then refused.
 */
export function isProtected(cfg: VmConfig['values']): boolean {
  return cfg.protection === '1';
}

/** Whether the VM is protected by its config read from PVE now (a marker or list read may be old). */
export async function protectedNow(client: PveClient, node: string, vmid: number): Promise<boolean> {
  return isProtected((await client.vmConfig(node, vmid)).values);
}

/** What a delete or a replacement says of a protected VM (`what`: which VM, where). */
export function protectedVm(what: string): string {
  return `${what} is protected (protection: 1): Proxmox refuses to destroy it, so it is left as it is (running or not)`;
}

/** The command that lets a protected VM go, and where to run it. */
export function unprotect(vmid: number, node: string, site: string): string {
  return `on node ${node} of site ${site} run 'qm set ${vmid} --protection 0' (GUI: VM ${vmid} > Options > Protection)`;
}

/**
 * Before a duplicate or a discarded replacement is stopped and destroyed: refused (VMProtected,
 * retried) when an operator protected it, read from PVE right then. Stopped first, it was left
 * stopped by a destroy PVE refused, again at every retry; the operator's protection may have been
 * meant for it (`why`: why it was to go).
 */
export async function refuseProtected(ctx: StepContext, node: string, vmid: number, why: string): Promise<void> {
  if (!(await protectedNow(ctx.client, node, vmid))) return;
  throw reason(
    'VMProtected',
    `${protectedVm(`VM ${vmid} on node ${node} of site ${ctx.site.name}`)}; it was to go: ${why}. Fix: if it is to go, ${unprotect(vmid, node, ctx.site.name)}`,
    true,
  );
}

/** Whose is this config, read at VMID `at.vmid` by a resource of installation `at.installation`? */
export function ownershipOf(r: ProxmoxVM, cfg: VmConfig['values'], at: MarkerPlace): Ownership {
  const m = parseMarker(cfg.description);
  const lock = cfg.lock;
  const mine = m && (m.installation === undefined ? m.uid === r.metadata.uid : markerNames(m, r, at));
  // A resource being deleted that had a VM of its own (it recorded its SMBIOS UUID) destroys only
  // that VM: another one of the same identity was made by a newer resource of the same name
  // (another state file's) after this one's was gone (found by the fault search: a delete in one
  // state file and an apply in another took turns destroying and creating it). A resource that
  // never saw its VM (a lost state file) still finds it by marker.
  if (mine && r.metadata.deletionTimestamp && m.uid !== r.metadata.uid && anotherVm(r, cfg))
    return { kind: 'other', uid: m.uid, why: 'made for a newer resource of the same name' };
  if (mine) return isPlaceholderLock(lock) ? { kind: 'ours', lock } : { kind: 'ours' };
  if (m) return { kind: 'other', uid: m.uid, why: whoseMarker(m, at) };
  if (isPlaceholderLock(lock) && mayHaveCreated(r)) return { kind: 'placeholder', lock };
  return lock ? { kind: 'foreign', lock } : { kind: 'foreign' };
}

/** The resource recorded the SMBIOS UUID of its VM, and this VM has another: it is another VM. */
function anotherVm(r: ProxmoxVM, cfg: VmConfig['values']): boolean {
  const known = r.status?.atProvider?.smbiosUuid;
  const uuid = smbiosUuid(cfg.smbios1);
  return known !== undefined && uuid !== undefined && known !== uuid;
}

/**
 * Whether the VM at `vmid`, which is not ours (`own`), proves our VM is not there: a VMID we chose
 * (vmidChosenByUs) or a replacement carried to its new site, where we never confirmed ours, or one
 * where ours was confirmed and another VM holds it now (ours destroyed, by another state file's
 * delete or a person, and the VMID reused): another resource's marker, or no marker and an SMBIOS
 * UUID other than the one recorded when ours was confirmed (PVE makes one per create and per clone),
 * or a create/clone placeholder without a marker. Ours with its description edited keeps
 * its UUID: not this. A VMID the spec pins is the resource's identity: never. Observe then gives
 * the VMID up (notOurs), and a move finds our VM gone from its source (site-move.ts).
 */
export function ourVmNotAt(r: ProxmoxVM, vmid: number, own: Ownership, smbios1: string | undefined): boolean {
  // A replacement's VMID on its new site is the old VM's, carried over for the new one where it is
  // free (replace.ts), and the old VM may have been adopted (made by another state file of the
  // installation) with no create of ours marked: like a VMID we chose, until ours is confirmed.
  const carried = r.spec.forProvider.vmid === undefined && r.status?.atProvider?.replacing !== undefined;
  if ((vmidChosenByUs(r) || carried) && !confirmedAt(r, vmid)) return true;
  if (r.spec.forProvider.vmid !== undefined || !confirmedAt(r, vmid)) return false;
  if (own.kind === 'other') return true;
  // A create or clone placeholder with no marker: a VM made at this VMID since ours was confirmed
  // there, which PVE does only where no VM is (qemu-server API2/Qemu.pm create_vm and clone_vm
  // refuse a VMID in use), so ours is gone. It has no SMBIOS UUID to compare yet, and its worker
  // may have died and left it for good (fault search F79: VMIDConflict for ever).
  if (own.kind === 'foreign' && isPlaceholderLock(own.lock)) return true;
  const uuid = smbiosUuid(smbios1);
  const was = r.status?.atProvider?.smbiosUuid;
  return own.kind === 'foreign' && !own.lock && was !== undefined && uuid !== undefined && uuid !== was;
}

/** The `uuid=` of an `smbios1` config value. */
export function smbiosUuid(smbios1: string | undefined): string | undefined {
  return /(?:^|,)uuid=([^,]+)/.exec(smbios1 ?? '')?.[1];
}

/**
 * Record `found`, whose marker names this resource, as its VM: its VMID (confirmedAt) and its
 * SMBIOS UUID, by which a VM made at that VMID once ours has gone is told from ours with its marker
 * edited away (ourVmNotAt, anotherVm); none recorded when its config has none.
 */
export function confirmOwnVm(r: ProxmoxVM, found: { vmid: number; config?: VmConfig | undefined }): void {
  const a = atProvider(r);
  a.vmId = found.vmid;
  const uuid = smbiosUuid(found.config?.values.smbios1);
  if (uuid) a.smbiosUuid = uuid;
  else delete a.smbiosUuid;
}

export type PlaceholderFate =
  /** Its worker still runs (or may: the evidence could not be read): wait. */
  | { kind: 'in-progress' }
  /** No worker runs; the task list shows our credentials made it since we persisted the VMID. */
  | { kind: 'ours-interrupted'; task: MakerTask }
  /** No worker runs; the task list shows somebody else made it. */
  | { kind: 'foreign'; task: MakerTask }
  /** No worker runs, and the task list holds no trace of who made it (rotated away). */
  | { kind: 'unknown' };

/** Clock skew allowed between this process and the Proxmox node when comparing task start times. */
const SKEW_S = 300;

/**
 * Is a create/clone placeholder at `vmid` still being worked on, and if not, whose is it?
 * `clone` names the template we clone from (a clone's task id is the source VMID); without it, a
 * remote migration's `qmtunnel` counts as a maker too (see makerTasks).
 */
export async function placeholderFate(
  ctx: StepContext,
  r: ProxmoxVM,
  vmid: number,
  node: string,
  clone: { vmid: number; node: string } | undefined,
): Promise<PlaceholderFate> {
  let tasks: MakerTask[];
  try {
    tasks = await makerTasks(ctx, vmid, node, clone);
  } catch {
    return { kind: 'in-progress' }; // no evidence: never act on a guess
  }
  if (tasks.some((t) => t.running)) return { kind: 'in-progress' };
  const since = (Date.parse(annotation(r, ANNOTATION_CREATE_PENDING) ?? '') || 0) / 1000 - SKEW_S;
  // A maker that ended well left a complete VM, not a placeholder: only an abnormal end counts.
  const newest = tasks.find((t) => t.starttime >= since && !/^(OK|WARNINGS)/.test(t.status ?? ''));
  if (!newest) return { kind: 'unknown' };
  if (newest.authId === ctx.client.auth.authId) return { kind: 'ours-interrupted', task: newest };
  return { kind: 'foreign', task: newest };
}

/** The template a clone of this resource comes from (a clone task's id is the source VMID). */
export async function cloneSource(ctx: StepContext, r: ProxmoxVM): Promise<{ vmid: number; node: string } | undefined> {
  const node = r.status?.atProvider?.node;
  if (r.spec.forProvider.templateRef && ctx.options.templateOnNode && node) {
    // The ProxmoxTemplate's VM serving the VM's node (ReferenceNotReady: not known, so no evidence).
    try {
      const served = ctx.options.templateOnNode(r, node);
      return { vmid: served.vmid, node: served.host };
    } catch {
      return undefined;
    }
  }
  const t = r.spec.forProvider.template;
  if (!t) return undefined;
  const e = findTemplate(await ctx.site.clusterResources(false, ctx.signal, ctx.memory), t);
  return e?.node ? { vmid: Number(e.vmid), node: e.node } : undefined;
}

/**
 * Our create or clone was interrupted (its worker died) and the credentials may clear its lock
 * (root@pam): the change that destroys the placeholder, so that the VM is made again.
 */
export function clearPlaceholder(
  r: ProxmoxVM,
  vmid: number,
  lock: 'create' | 'clone',
  node: string,
): { obs: ExternalObservation; change: Change } {
  ready(r, 'False', 'Creating', `VM ${vmid}: our ${lock} was interrupted; clearing its placeholder to create it again`);
  return {
    obs: { exists: true, upToDate: false },
    change: {
      kind: 'destroy-placeholder',
      why: `destroying the '${lock}' placeholder of interrupted VM ${vmid}`,
      node,
    },
  };
}
