/**
 * What a resource remembers between reconciles on its site, the only per-resource state that
 * outlives a reconcile (SiteContext.remember holds one per resource uid; `forget` drops it): its
 * last full observation, the Secrets and snippet its cloud-init is made of, what it saw of the
 * guest's boot, the changes planned after the one in flight, and its own view of the bulk list.
 */
import type { ClusterResource } from '../proxmox/types.ts';
import type { Change } from './drift.ts';
import type { ListIndex } from './list-index.ts';

/** What a resource remembers between reconciles (one entry per resource uid). */
export interface ResourceMemory {
  /**
   * The last full observation (config read): when, for which generation, the config digest, and
   * the name and tags the bulk list showed (a change there means a changed or another VM).
   */
  lastFull?: {
    at: number;
    generation: number;
    digest: string;
    node: string;
    name?: string;
    tags?: string;
    /** Whether its config has the agent on. */
    agent?: boolean;
  };
  /** Cloud-init values from Secret references, and when and for which references they were read. */
  secrets: { password?: string; sshKeys: string[] };
  secretsLoaded?: { at: number; refs: string };
  /**
   * The snippet this resource's userData renders to (see snippets.ts), computed by observe before
   * drift compares `cicustom`, and uploaded before a config change, create or move refers to it.
   * `checkedIn` is the reconcile (its signal) that wrote the file or found it on the node: only
   * that reconcile takes it as there. Any later one looks again, since the file may have gone
   * meanwhile: removed when the VM left the node (by this process or another one, F55), or by
   * `gc --snippets`.
   */
  snippet?: { volid: string; file: string; dir: string; node: string; content: string; checkedIn?: AbortSignal };
  /**
   * The running VM's uptime as last read (ms; PVE's, so in the cluster's own time), which the
   * agent wait counts, and the boot it belongs to: a smaller uptime is a new boot.
   */
  uptimeMs?: number;
  boot?: number;
  /** The boot whose cloud-init result status.atProvider.cloudInit holds. */
  cloudInitBoot?: number;
  /**
   * The site's epoch of this resource's last mutation (invalidate): every list it reads from then
   * on was begun after it (see clusterResources).
   */
  mutatedEpoch?: number;
  /** The guest agent answered during this boot. */
  agentAnswered?: boolean;
  /** A `cloud-init status` started in the guest whose result is still to be read. */
  cloudInitExec?: { pid: number; json: boolean; at: number };
  /** When uptimeMs was read or known (this process's clock): a guest poll counts on from it. */
  uptimeAt?: number;
  /**
   * The bulk list's uptime (ms) of the boot before this one, shown when this boot began: pvestatd's
   * list is a status cycle late, and its figure is not this boot's until it shows less (guest.ts).
   */
  listedBefore?: number;
  /** When this process sent the VM's start (its clock): the boot's first ask waits as long (guest-timing.ts). */
  startSentAt?: number;
  /** The node of our task in flight, found offline (node-offline.ts onOfflineTaskNode): not asked until the list shows it back. */
  offlineTaskNode?: string;
  /** The last resize this process sent (disk-size.ts): the same one planned again is looked into. */
  resizeSent?: { vmid: number; disk: string; size: string };
  /** The VMID whose disks a failed resize or start found gone (disk-missing.ts): looked at again before anything is sent to it. */
  diskMissing?: number;
  /**
   * The last look at what holds the VM's lock (lock-holder.ts): which lock at which VMID, when
   * (the site's clock), since when no task held it, and the LockWithoutTask message once confirmed.
   */
  lockLook?: {
    lock: string;
    vmid: number;
    at: number;
    unheldSince?: number;
    message?: string;
    /** Nodes not online at the last look: their task lists, where the lock's worker may run, cannot be read. */
    unseen?: string[];
  };
  /** The changes a full observe planned after the one being made (see known-outcome.ts). */
  planned?: PlannedChanges;
  /** The bulk list as this resource sees it after its last mutation (see SiteContext.ownView). */
  view?: OwnView;
}

/**
 * A resource's empty memory, with every field present from the start: V8 then keeps one compact
 * shape for all of them. A field added later, or deleted, turns an object into a dictionary of
 * about 450 bytes more (10,000 resources: 4.5 MB), so a field is cleared by setting it undefined.
 */
export function newResourceMemory(): ResourceMemory {
  return {
    lastFull: undefined,
    secrets: { sshKeys: [] },
    secretsLoaded: undefined,
    snippet: undefined,
    uptimeMs: undefined,
    boot: undefined,
    cloudInitBoot: undefined,
    mutatedEpoch: undefined,
    agentAnswered: undefined,
    cloudInitExec: undefined,
    uptimeAt: undefined,
    listedBefore: undefined,
    startSentAt: undefined,
    planned: undefined,
    view: undefined,
  };
}

/**
 * A site's bulk list with this resource's own VM as a read of that VM begun after the resource's
 * last mutation showed it (see SiteContext.ownView): `epoch`, the site's epoch when that read
 * began; `at`, when the list under it was begun.
 */
export interface OwnView {
  epoch: number;
  at: number;
  /** The list under the view, and the resource's own VM as read. */
  base: ClusterResource[];
  entry: ClusterResource;
  /** What the list with `entry` put in would index (patchedIndex): what the view is looked up by. */
  index: ListIndex;
  /** That list, made the first time a read asks for the list itself (see viewList). */
  list: ClusterResource[] | undefined;
}

/**
 * What the last full observe found still to do after the change it sent: that change (`head`),
 * the ones after it in their order, for which generation, VM and node, and the VM's power state
 * before `head`, with the full observation the plan came from (applyChange drops it: restored when
 * the plan holds). known-outcome.ts derives the rest (head's task type, the state after it).
 */
export interface PlannedChanges {
  generation: number;
  vmid: number;
  node: string;
  head: Change;
  before: string;
  rest: Change[];
  lastFull: NonNullable<ResourceMemory['lastFull']>;
}
