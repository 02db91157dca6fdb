/**
 * ProxmoxVM: the kind's constants (group and version, the seed's limits and the messages users
 * see, the name and bridge patterns) and its TypeScript types: the spec's ForProvider, derived
 * from the TypeBox schemas of proxmoxvm-schema.ts, and the hand-written status (AtProvider).
 */
import type Type from 'typebox';
import type { Managed } from '../engine/resource.ts';
import type { VMSchemas } from './proxmoxvm-schema.ts';

export const GROUP = 'proxmox.sankofa.io';
/**
 * The site a create was sent to, written with the external name before the create (the engine's
 * one metadata write): a crash before the first status write still says where the VM is.
 */
export const ANNOTATION_SITE = 'proxmox.sankofa.io/site';
export const VERSION = 'v1alpha1';
export const API_VERSION = `${GROUP}/${VERSION}`;

/** The seed's limits, with the messages users see (CRD CEL rules and the engine share them). */
export const LIMITS = {
  name: { min: 1, max: 100 },
  cpu: { min: 1, max: 1024 },
  memoryBytes: { min: 128 * 1024 ** 2, max: 2 * 1024 ** 4 },
  diskBytes: { min: 1024 ** 3, max: 100 * 1024 ** 4 },
} as const;

export const MESSAGES = {
  name: 'name must be 1-100 characters: letters, digits and hyphens (a DNS name; dots separate labels)',
  cpu: 'cpu must be between 1 and 1024 cores',
  memory: 'memory must be between 128Mi and 2Ti (units Ki, Mi, Gi, Ti; a bare number is MiB)',
  disk: 'disk must be between 1Gi and 100Ti (units Mi, Gi, Ti; a bare number is GiB)',
  bridge: 'network bridge must look like vmbr0 (a Linux bridge name, 1-15 characters)',
} as const;

export const NAME_PATTERN = '^[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?(\\.[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)*$';
export const BRIDGE_PATTERN = '^[a-zA-Z][a-zA-Z0-9_.-]{0,14}$';

export type ForProvider = Type.Static<VMSchemas['ForProviderSchema']>;

export interface AtProvider {
  vmId?: number;
  node?: string;
  site?: string;
  state?: string;
  qmpStatus?: string;
  ipAddresses?: string[];
  lock?: string;
  /** In-flight Proxmox task (UPID). */
  task?: string;
  /** What the provider is doing now (create, import, start...). */
  step?: string;
  pendingChanges?: string[];
  /**
   * `Unknown` while a create (or clone) was sent and its answer never came (connection reset,
   * timeout): it may exist, or appear later, at the VMID of the external name.
   */
  createOutcome?: string;
  /**
   * When the earliest create of unknown outcome at this VMID was sent (RFC 3339). Until
   * `unknownOutcomeWaitMs` after it, PVE may still apply that request: the resource is neither
   * created again nor let go before then.
   */
  unknownCreateSince?: string;
  /**
   * The SMBIOS UUID of the VM this resource confirmed as its own (PVE generates one per create
   * and per clone): a VM at the same VMID with another UUID is another VM, not ours with its
   * marker edited away.
   */
  smbiosUuid?: string;
  /**
   * The node the provider last put the VM on (its create, or a migration it made): a VM found
   * elsewhere with the spec unchanged was moved by someone else (placementPolicy).
   */
  placedNode?: string;
  /** A node the VM left whose copy of its snippet is still to be removed (snippet-removal.ts noteNode). */
  snippetLeftOn?: string;
  /**
   * A move to another site (a remote migration) chosen and recorded before it is sent, as a create
   * records its VMID first: the sites, the VM's VMID and node there and here, and the UPID once sent.
   */
  siteMove?: SiteMove;
  /**
   * The VM a replacement (replacePolicy: CreateThenDelete) leaves behind on the old site: destroyed
   * once the new VM is Ready (its task's UPID while that runs).
   */
  replacing?: { site: string; node: string; vmid: number; at: string; upid?: string };
  /**
   * A move's source that Proxmox failed to remove (condition SourceVmLeft): read again at each
   * full read of the VM until it is gone or no longer this resource's, then the condition clears.
   */
  sourceLeft?: { site: string; node: string; vmid: number };
  /** Where ipAddresses came from: the guest agent, or the static cloudInit.ipConfig. */
  ipSource?: 'agent' | 'ipConfig';
  /** The snippet volume of the rendered userData (`cicustom user=`), when one is used. */
  userDataSnippet?: string;
  /** cloud-init's result in the guest, read through the guest agent. */
  cloudInit?: CloudInitResult;
}

export interface SiteMove {
  /** The site and node the VM leaves, and its VMID there. */
  from: string;
  fromNode: string;
  fromVmid: number;
  /** The site it goes to, its VMID there (the same: a VM keeps its VMID), and the node the target endpoint is. */
  to: string;
  vmid: number;
  node: string;
  /** When it was recorded (RFC 3339). */
  at: string;
  /** The `qmigrate` task on the source, once sent. */
  upid?: string;
}

export interface CloudInitResult {
  /** `cloud-init status`: running, done, error, disabled, not-run, degraded done. */
  status: string;
  /** The failing modules' messages (`errors` of `cloud-init status --format json`). */
  errors?: string[];
  /** The user-data the result is for (the snippet volume, or `native`). */
  for: string;
  /** When the guest's boot was that this result is of (RFC 3339, from the VM's uptime). */
  bootedAt: string;
}

export type ProxmoxVM = Managed<ForProvider, AtProvider>;
