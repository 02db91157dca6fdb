/**
 * ProxmoxVM: one schema source (TypeBox) for the TypeScript types, the CRD's OpenAPI schema and
 * validation. Accepts the seed's manifests as they are (`forProvider`: name, site, node, cpu,
 * memory, disk, storage, network, image, userData) plus what users of the peers expect.
 */
import Type from 'typebox';
import type { Managed } from '../engine/resource.ts';
import { DNS1123_SUBDOMAIN_MAX, DNS1123_SUBDOMAIN_PATTERN } from './metadata.ts';
import { QUANTITY_PATTERN } from './quantity.ts';

export const GROUP = 'proxmox.sankofa.io';
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

const Quantity = Type.Union([Type.String({ pattern: QUANTITY_PATTERN }), Type.Integer({ minimum: 1 })]);
/**
 * The name of another Kubernetes object: a DNS-1123 subdomain, as Kubernetes names it. Nothing
 * else checks a reference, and the name goes into an API path (`../` would leave the namespace).
 */
const ObjectName = () =>
  Type.String({ minLength: 1, maxLength: DNS1123_SUBDOMAIN_MAX, pattern: DNS1123_SUBDOMAIN_PATTERN });

const SecretKeyRef = Type.Object(
  { name: ObjectName(), key: Type.String({ minLength: 1 }), namespace: Type.Optional(Type.String()) },
  { additionalProperties: false },
);

export const NetworkSchema = Type.Object(
  {
    bridge: Type.String({ pattern: BRIDGE_PATTERN, description: 'Linux bridge on the node, e.g. vmbr0' }),
    model: Type.Optional(
      Type.Union([
        Type.Literal('virtio'),
        Type.Literal('e1000'),
        Type.Literal('e1000e'),
        Type.Literal('rtl8139'),
        Type.Literal('vmxnet3'),
      ]),
    ),
    vlan: Type.Optional(Type.Integer({ minimum: 1, maximum: 4094 })),
    firewall: Type.Optional(Type.Boolean()),
    mtu: Type.Optional(Type.Integer({ minimum: 1, maximum: 65520 })),
    macaddr: Type.Optional(Type.String({ pattern: '^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$' })),
  },
  { additionalProperties: false },
);

export const DiskSchema = Type.Object(
  {
    size: Quantity,
    storage: Type.Optional(Type.String({ minLength: 1 })),
    /** Slot, e.g. scsi1. Default: the next free scsiN. */
    slot: Type.Optional(Type.String({ pattern: '^(scsi([0-9]|[12][0-9]|30)|virtio([0-9]|1[0-5])|sata[0-5])$' })),
    iothread: Type.Optional(Type.Boolean()),
    discard: Type.Optional(Type.Boolean()),
    ssd: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);

export const CloudInitSchema = Type.Object(
  {
    user: Type.Optional(Type.String({ minLength: 1 })),
    passwordSecretRef: Type.Optional(SecretKeyRef),
    sshKeys: Type.Optional(Type.Array(Type.String({ minLength: 1 }))),
    sshKeysSecretRef: Type.Optional(SecretKeyRef),
    ipConfig: Type.Optional(
      Type.Array(
        Type.Object(
          {
            dhcp: Type.Optional(Type.Boolean()),
            address: Type.Optional(Type.String({ description: 'CIDR, e.g. 203.0.113.20/24' })),
            gateway: Type.Optional(Type.String()),
          },
          { additionalProperties: false },
        ),
      ),
    ),
    dns: Type.Optional(
      Type.Object(
        { servers: Type.Optional(Type.Array(Type.String())), searchDomain: Type.Optional(Type.String()) },
        { additionalProperties: false },
      ),
    ),
    /** A snippet volume with full user-data (`local:snippets/web.yaml`): `cicustom user=`. */
    userDataSnippet: Type.Optional(Type.String({ pattern: '^[^:\\s]+:snippets/\\S+$' })),
    storage: Type.Optional(Type.String()),
  },
  { additionalProperties: false },
);

export const ForProviderSchema = Type.Object(
  {
    name: Type.Optional(Type.String({ minLength: 1, maxLength: 100, pattern: NAME_PATTERN })),
    site: Type.Optional(Type.String({ minLength: 1 })),
    node: Type.Optional(Type.String({ minLength: 1 })),
    cpu: Type.Optional(Type.Integer({ minimum: 1, maximum: 1024 })),
    sockets: Type.Optional(Type.Integer({ minimum: 1, maximum: 4 })),
    memory: Type.Optional(Quantity),
    disk: Type.Optional(Quantity),
    storage: Type.Optional(Type.String({ minLength: 1 })),
    network: Type.Optional(Type.String({ pattern: BRIDGE_PATTERN })),
    image: Type.Optional(Type.String({ minLength: 1 })),
    userData: Type.Optional(Type.String()),
    template: Type.Optional(
      Type.Object(
        {
          name: Type.Optional(Type.String({ minLength: 1 })),
          vmid: Type.Optional(Type.Integer({ minimum: 100 })),
          full: Type.Optional(Type.Boolean()),
        },
        { additionalProperties: false },
      ),
    ),
    disks: Type.Optional(Type.Array(DiskSchema)),
    networks: Type.Optional(Type.Array(NetworkSchema)),
    cloudInit: Type.Optional(CloudInitSchema),
    tags: Type.Optional(Type.Array(Type.String({ pattern: '^[a-zA-Z0-9_][a-zA-Z0-9_+.-]*$' }))),
    pool: Type.Optional(Type.String()),
    description: Type.Optional(Type.String({ maxLength: 8192 })),
    onBoot: Type.Optional(Type.Boolean()),
    startup: Type.Optional(Type.String({ pattern: '^(order=\\d+)?(,?(up|down)=\\d+)*$' })),
    powerState: Type.Optional(Type.Union([Type.Literal('running'), Type.Literal('stopped')])),
    /**
     * What to do when Proxmox holds changes as pending until the next boot (cores, memory, a NIC
     * model... changed on a running VM): `Never` (the default) leaves the VM running and reports
     * the `PendingReboot` condition; `IfNeeded` reboots it (`POST .../status/reboot`, which applies
     * pending changes).
     */
    rebootPolicy: Type.Optional(Type.Union([Type.Literal('Never'), Type.Literal('IfNeeded')])),
    agent: Type.Optional(Type.Boolean()),
    vmid: Type.Optional(Type.Integer({ minimum: 100, maximum: 999999999 })),
  },
  { additionalProperties: false },
);

export type ForProvider = Type.Static<typeof ForProviderSchema>;

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
}

export type ProxmoxVM = Managed<ForProvider, AtProvider>;

export const ProxmoxVMSpecSchema = Type.Object(
  {
    forProvider: ForProviderSchema,
    initProvider: Type.Optional(Type.Partial(ForProviderSchema)),
    providerConfigRef: Type.Optional(Type.Object({ kind: Type.Optional(Type.String()), name: ObjectName() })),
    managementPolicies: Type.Optional(
      Type.Array(
        Type.Union(['Observe', 'Create', 'Update', 'Delete', 'LateInitialize', '*'].map((x) => Type.Literal(x))),
      ),
    ),
    deletionPolicy: Type.Optional(Type.Union([Type.Literal('Delete'), Type.Literal('Orphan')])),
    writeConnectionSecretToRef: Type.Optional(
      Type.Object({ name: ObjectName(), namespace: Type.Optional(Type.String()) }),
    ),
  },
  { additionalProperties: false },
);
