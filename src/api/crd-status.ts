/**
 * The status schemas of the CRDs (crd.ts): what the provider writes to a ProxmoxVM's status, with
 * `status.atProvider` kept in step with the AtProvider interface of proxmoxvm.ts by the compiler,
 * and what the controller writes to a provider config's status. TypeBox, converted to structural
 * schemas like the specs (structural.ts).
 */
import Type, { type Static } from 'typebox';
import { managedStatusSchema } from './managed-status.ts';
import type { AtProvider } from './proxmoxvm.ts';
import { usageSchemas } from './usage.ts';

/** `status.atProvider` of a ProxmoxVM (the AtProvider interface, checked below). */
export const ProxmoxVMAtProviderSchema = Type.Object(
  {
    vmId: Type.Optional(
      Type.Integer({
        description:
          'The VMID of the VM, set once the provider saw its ownership marker there (observe-only: once it found the VM). The external name holds the VMID from before the create.',
      }),
    ),
    node: Type.Optional(
      Type.String({ description: 'The node the VM is on (before the create: the node chosen for it).' }),
    ),
    site: Type.Optional(
      Type.String({ description: 'The site (spec.sites[].name of the ProviderConfig) the VM is in.' }),
    ),
    state: Type.Optional(
      Type.String({
        description: 'The VM status Proxmox VE reports: running, stopped, ...; absent when there is no VM.',
      }),
    ),
    qmpStatus: Type.Optional(
      Type.String({ description: 'The QEMU monitor status (running, paused, prelaunch, ...).' }),
    ),
    ipAddresses: Type.Optional(
      Type.Array(Type.String(), {
        description:
          'The addresses the guest agent reports for a running VM: IPv4 first, then IPv6, without loopback and link-local ones.',
      }),
    ),
    lock: Type.Optional(
      Type.String({
        description:
          'A Proxmox VE lock on the VM (create, clone, backup, migrate, snapshot, ...): the provider waits for it; it clears only the create/clone lock of its own interrupted create.',
      }),
    ),
    task: Type.Optional(Type.String({ description: 'The in-flight Proxmox VE task (UPID) the provider waits for.' })),
    step: Type.Optional(
      Type.String({
        description:
          'What the provider is doing now: CheckingNode, Placing, CheckingBridge, CheckingStorage, ResolvingImage, WaitingForSlot, ReservingVMID, Creating, Importing, Cloning, Configuring, Resizing, Starting, Stopping, Rebooting, UploadingSnippet, Migrating, MovingDisk, WaitingForAgent, AgentNotResponding, WaitingForCloudInit, Ready, Deleting (its checks before a stop or destroy), Destroying, ...; Failed after a failed task.',
      }),
    ),
    pendingChanges: Type.Optional(
      Type.Array(Type.String(), {
        description:
          'Config keys Proxmox VE holds for a running VM until its next boot (see spec.forProvider.rebootPolicy and the PendingReboot condition).',
      }),
    ),
    createOutcome: Type.Optional(
      Type.String({
        description:
          'Unknown while a create was sent but its answer never came; the VM may exist or appear later at the VMID of the external name.',
      }),
    ),
    unknownCreateSince: Type.Optional(
      Type.String({
        description:
          'When the earliest create of unknown outcome at this VMID was sent; until the wait after it has passed, the resource is neither created again nor let go.',
      }),
    ),
    smbiosUuid: Type.Optional(
      Type.String({
        description:
          "The SMBIOS UUID of the VM confirmed as this resource's own: a VM at the same VMID with another UUID is another VM.",
      }),
    ),
    placedNode: Type.Optional(
      Type.String({
        description:
          'The node the provider last put the VM on (its create or a migration it made); a VM found elsewhere with spec.forProvider.node unchanged was moved by someone else.',
      }),
    ),
    snippetLeftOn: Type.Optional(
      Type.String({
        description:
          "A node of the VM's site that it left (migrated by the provider, HA or a person) where its userData snippet, on a node-local storage, is still there: removed at the next reconcile that finds the VM elsewhere, after the status naming its new node was written.",
      }),
    ),
    siteMove: Type.Optional(
      Type.Object(
        {
          from: Type.String({ description: 'The site the VM leaves.' }),
          fromNode: Type.String({ description: 'Its node there.' }),
          fromVmid: Type.Integer({ description: 'Its VMID there.' }),
          to: Type.String({ description: 'The site it goes to (spec.forProvider.site).' }),
          vmid: Type.Integer({ description: 'Its VMID there: the same one (a VM keeps its VMID).' }),
          node: Type.String({ description: "The node there (the target endpoint's node)." }),
          at: Type.String({ description: 'When the move was recorded (RFC 3339).' }),
          upid: Type.Optional(Type.String({ description: 'The qmigrate task on the source, once sent.' })),
        },
        {
          description:
            'A move to another site (a remote migration), recorded before it is sent, as a create records its VMID first.',
        },
      ),
    ),
    sourceLeft: Type.Optional(
      Type.Object(
        {
          site: Type.String({ description: 'The site the VM left.' }),
          node: Type.String({ description: 'Its node there.' }),
          vmid: Type.Integer({ description: 'Its VMID there.' }),
        },
        {
          description:
            "A move's source that Proxmox failed to remove (condition SourceVmLeft), read again at each full read until it is gone.",
        },
      ),
    ),
    replacing: Type.Optional(
      Type.Object(
        {
          site: Type.String({ description: 'The old site.' }),
          node: Type.String({ description: 'The old node.' }),
          vmid: Type.Integer({ description: 'The old VM.' }),
          at: Type.String({ description: 'When the replacement was recorded (RFC 3339).' }),
          upid: Type.Optional(Type.String({ description: 'The stop or destroy task of the old VM, while it runs.' })),
        },
        {
          description:
            'The VM a replacement (replacePolicy: CreateThenDelete) leaves on the old site, destroyed once the new VM is Ready.',
        },
      ),
    ),
    ipSource: Type.Optional(
      Type.Union([Type.Literal('agent'), Type.Literal('ipConfig')], {
        description: 'Where ipAddresses came from: the guest agent, or the static spec.forProvider.cloudInit.ipConfig.',
      }),
    ),
    userDataSnippet: Type.Optional(
      Type.String({
        description:
          'The snippet volume the provider rendered spec.forProvider.userData into and uploaded over SSH (`cicustom user=`), e.g. local:snippets/provider-proxmox-<uid>-<hash>.yaml.',
      }),
    ),
    cloudInit: Type.Optional(
      Type.Object(
        {
          status: Type.String({
            description: "cloud-init's status in the guest (running, done, error, disabled, ...).",
          }),
          errors: Type.Optional(
            Type.Array(Type.String(), { description: "The failing modules' messages, as cloud-init reports them." }),
          ),
          for: Type.String({
            description: 'The user-data this result is for: the snippet volume, or native (set through the API).',
          }),
          bootedAt: Type.String({ description: 'When the boot this result is of began (RFC 3339).' }),
        },
        { description: "cloud-init's result in the guest, read through the guest agent (`cloud-init status`)." },
      ),
    ),
  },
  { description: 'What Proxmox VE holds, as the provider last observed it.' },
);

type Equals<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
/** Fails to compile when AtProvider (proxmoxvm.ts) and its CRD schema drift apart. */
export const AT_PROVIDER_IN_SYNC: Equals<Static<typeof ProxmoxVMAtProviderSchema>, AtProvider> = true;

/** The status of a ProxmoxVM: its atProvider in the status every managed resource writes. */
export const ManagedStatusSchema = managedStatusSchema(ProxmoxVMAtProviderSchema);

export const ProviderConfigStatusSchema = Type.Object(
  {
    conditions: Type.Optional(usageSchemas().ConditionsSchema),
    users: Type.Optional(
      Type.Integer({
        format: 'int64',
        minimum: 0,
        description: 'How many resources use this config (their ProviderConfigUsages).',
      }),
    ),
  },
  { description: 'The observed state, written by the controller.' },
);
