/**
 * ProxmoxVM's spec schemas: one schema source (TypeBox) for the TypeScript types (ForProvider, in
 * proxmoxvm.ts), the CRD's OpenAPI schema and validation. Accepts the seed's manifests as they are
 * (`forProvider`: name, site, node, cpu, memory, disk, storage, network, image, userData) plus what
 * users of the peers expect. The kind's constants and status types are proxmoxvm.ts's.
 */
import Type from 'typebox';
import { builtOnce } from './built-once.ts';
import { DNS1123_SUBDOMAIN_MAX, DNS1123_SUBDOMAIN_PATTERN } from './metadata.ts';
import { BRIDGE_PATTERN, NAME_PATTERN } from './proxmoxvm.ts';
import { QUANTITY_PATTERN } from './quantity.ts';

const Quantity = (description: string) =>
  Type.Union([Type.String({ pattern: QUANTITY_PATTERN }), Type.Integer({ minimum: 1 })], { description });
/**
 * The name of another Kubernetes object: a DNS-1123 subdomain, as Kubernetes names it. Nothing
 * else checks a reference, and the name goes into an API path (`../` would leave the namespace).
 */
const ObjectName = (description?: string) =>
  Type.String({
    minLength: 1,
    maxLength: DNS1123_SUBDOMAIN_MAX,
    pattern: DNS1123_SUBDOMAIN_PATTERN,
    ...(description ? { description } : {}),
  });

const SecretKeyRef = (description: string) =>
  Type.Object(
    {
      name: ObjectName('Name of the Secret.'),
      key: Type.String({ minLength: 1, description: 'Key of the Secret that holds the value.' }),
      namespace: Type.Optional(
        Type.String({
          description:
            "Refused by the CRD: the controller reads the Secret from the resource's namespace. Only `apply` reads it, to pick a Secret of another namespace among the manifests.",
        }),
      ),
    },
    { additionalProperties: false, description },
  );

/**
 * The spec schemas of a ProxmoxVM, built on first use (vmSchemas). Every command that reads a
 * manifest loads this module (and proxmoxvm.ts for its constants and types), but on the happy path
 * nothing reads a schema: the bundle checks specs with the checks generated at build time
 * (src/workspace/spec-check.ts), and TypeBox's builders, run interpreted in a fresh process, were
 * a noticeable part of validate's start-up.
 */
function buildSchemas() {
  const NetworkSchema = Type.Object(
    {
      bridge: Type.String({
        pattern: BRIDGE_PATTERN,
        description:
          'Linux bridge on the node, e.g. vmbr0 (1-15 characters). It must exist on the node: checked before the VM is created (BridgeNotFound).',
      }),
      model: Type.Optional(
        Type.Union(
          [
            Type.Literal('virtio'),
            Type.Literal('e1000'),
            Type.Literal('e1000e'),
            Type.Literal('rtl8139'),
            Type.Literal('vmxnet3'),
          ],
          { description: 'The NIC model. Default: virtio.' },
        ),
      ),
      vlan: Type.Optional(
        Type.Integer({ minimum: 1, maximum: 4094, description: 'VLAN tag of the interface (`tag=`).' }),
      ),
      firewall: Type.Optional(
        Type.Boolean({ description: "Enable Proxmox VE's firewall on this interface (`firewall=1`)." }),
      ),
      mtu: Type.Optional(Type.Integer({ minimum: 1, maximum: 65520, description: 'MTU of the interface (`mtu=`).' })),
      macaddr: Type.Optional(
        Type.String({
          pattern: '^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$',
          description:
            'MAC address, e.g. BC:24:11:00:00:01. Default: the one Proxmox VE generated, kept on later updates.',
        }),
      ),
    },
    { additionalProperties: false, description: 'A network interface (`netN`).' },
  );

  const DiskSchema = Type.Object(
    {
      size: Quantity(
        'Size: a quantity (100Gi, 1Ti) or a bare number of GiB, 1Gi-100Ti, rounded up to whole GiB. A larger size grows the disk; a smaller one is ignored (disks never shrink).',
      ),
      storage: Type.Optional(
        Type.String({
          minLength: 1,
          description: 'Storage of this disk; it must hold `images`. Default: spec.forProvider.storage.',
        }),
      ),
      /** Slot, e.g. scsi1. Default: scsi<N+1> for the N-th entry (counting from 0). */
      slot: Type.Optional(
        Type.String({
          pattern: '^(scsi([0-9]|[12][0-9]|30)|virtio([0-9]|1[0-5])|sata[0-5])$',
          description:
            'Bus and index of the disk: scsiN (N 1-30: scsi0 is the boot disk), virtioN (0-15) or sataN (0-5). Default: scsi1 for the first entry, scsi2 for the second, and so on.',
        }),
      ),
      iothread: Type.Optional(
        Type.Boolean({ description: 'Give the disk its own I/O thread (`iothread=1`), set when the disk is made.' }),
      ),
      discard: Type.Optional(
        Type.Boolean({
          description: "Pass the guest's TRIM/discard to the storage (`discard=on`), set when the disk is made.",
        }),
      ),
      ssd: Type.Optional(
        Type.Boolean({ description: 'Show the disk to the guest as an SSD (`ssd=1`), set when the disk is made.' }),
      ),
    },
    {
      additionalProperties: false,
      description:
        'An additional disk. Blank and imported VMs get it at create; a clone gets it added by a later config update.',
    },
  );

  const CloudInitSchema = Type.Object(
    {
      user: Type.Optional(
        Type.String({
          minLength: 1,
          description:
            "The default user (`ciuser`). Default: the first users[].name of userData; without either, the image's default user.",
        }),
      ),
      passwordSecretRef: Type.Optional(
        SecretKeyRef(
          "The default user's password (`cipassword`), from a Secret in the resource's namespace (`apply`: a Secret among the manifests). Sent when the VM is created, or later when the VM has none; Proxmox never shows it back, so a changed password is not applied. Never written to status, events or logs.",
        ),
      ),
      sshKeys: Type.Optional(
        Type.Array(Type.String({ minLength: 1 }), {
          description:
            'SSH public keys of the default user (`sshkeys`), one per entry. The keys of userData and of sshKeysSecretRef are added after these.',
        }),
      ),
      sshKeysSecretRef: Type.Optional(
        SecretKeyRef(
          "More SSH public keys, one per line, from a Secret in the resource's namespace (`apply`: a Secret among the manifests).",
        ),
      ),
      ipConfig: Type.Optional(
        Type.Array(
          Type.Object(
            {
              dhcp: Type.Optional(
                Type.Boolean({
                  description:
                    'Use DHCP on this interface, even when address is set (an entry without address uses DHCP too).',
                }),
              ),
              address: Type.Optional(
                Type.String({
                  description: 'Static IPv4 address with its prefix length (CIDR), e.g. 203.0.113.20/24.',
                }),
              ),
              gateway: Type.Optional(
                Type.String({ description: 'IPv4 gateway of the static address, e.g. 203.0.113.1.' }),
              ),
            },
            { additionalProperties: false, description: 'The IP configuration of one interface.' },
          ),
          {
            description:
              'IP configuration per network interface, in their order (`ipconfig0`, `ipconfig1`, ...). Default: DHCP on every interface without an entry with an address.',
          },
        ),
      ),
      dns: Type.Optional(
        Type.Object(
          {
            servers: Type.Optional(
              Type.Array(Type.String(), { description: 'Name servers (`nameserver`), e.g. 192.0.2.53.' }),
            ),
            searchDomain: Type.Optional(Type.String({ description: 'DNS search domain (`searchdomain`).' })),
          },
          { additionalProperties: false, description: "DNS settings of the guest. Default: the node's." },
        ),
      ),
      /** A snippet volume with full user-data (`local:snippets/web.yaml`): `cicustom user=`. */
      userDataSnippet: Type.Optional(
        Type.String({
          pattern: '^[^:\\s]+:snippets/\\S+$',
          description:
            'A snippet volume with the complete user-data, e.g. local:snippets/web.yaml (`cicustom user=`). The Proxmox VE API cannot upload snippets: put the file on a storage with the `snippets` content type first. PVE migrates disks, not snippets: on a node-local storage, a change of spec.forProvider.node waits (MigrationRefused) until the file is on the target node too.',
        }),
      ),
      storage: Type.Optional(
        Type.String({
          description: 'Storage of the cloud-init drive (`ide2`). Default: spec.forProvider.storage.',
        }),
      ),
      userDataMode: Type.Optional(
        Type.Union([Type.Literal('Auto'), Type.Literal('NativeOnly')], {
          description:
            "How userData reaches the guest. Auto: what the Proxmox VE API can set (users, SSH keys) is set natively when that is all there is; anything more (packages, runcmd, write_files...) makes the complete userData a snippet, uploaded over SSH (the site's ssh in the ProviderConfig) and referenced with `cicustom user=`; without ssh such a VM is refused before anything is created. NativeOnly: only the users and SSH keys are applied, and the CloudInit condition names the keys that were not (reason UserDataPartiallyApplied). Default: Auto.",
        }),
      ),
    },
    {
      additionalProperties: false,
      description: "Cloud-init settings, written to the VM's cloud-init drive (`ide2`) at create and kept in sync.",
    },
  );

  const ForProviderSchema = Type.Object(
    {
      name: Type.Optional(
        Type.String({
          minLength: 1,
          maxLength: 100,
          pattern: NAME_PATTERN,
          description:
            "The VM's name in Proxmox VE: 1-100 characters, letters, digits and hyphens, dots between labels. Default: metadata.name.",
        }),
      ),
      site: Type.Optional(
        Type.String({
          minLength: 1,
          description:
            "The site (a spec.sites[].name of the ProviderConfig) to create the VM in; required when the ProviderConfig has several sites. Changed while the VM exists, the VM is moved to the other cluster with its disks by a remote migration (`POST .../remote_migrate`, PVE >= 7.3; the target site needs API-token credentials), keeping its VMID when it is free there; where that is impossible the change is refused (the PlacementChangeRefused condition), unless replacePolicy allows a replacement. Default: the ProviderConfig's only site.",
        }),
      ),
      node: Type.Optional(
        Type.String({
          minLength: 1,
          description:
            "The Proxmox VE node of the VM; it must be online. Changed while the VM exists, the VM is migrated there (`POST .../migrate`: online when it runs, local disks copied with with-local-disks to spec.forProvider.storage), after the target's checks (online, room, bridge, PVE's migrate precondition); a userData snippet on a node-local storage is written on the target first (PVE migrates disks, not snippets) and removed from the node left. A VM moved by someone else (HA, a person) is followed and found by VMID and marker on its new node, its snippet written there too; see placementPolicy. Default: the online node of the site with the most free memory, chosen at create.",
        }),
      ),
      cpu: Type.Optional(
        Type.Integer({
          minimum: 1,
          maximum: 1024,
          description: "Cores per socket (`cores`); vCPUs are cpu x sockets, at most the node's. Default: 1.",
        }),
      ),
      sockets: Type.Optional(
        Type.Integer({ minimum: 1, maximum: 4, description: 'CPU sockets (`sockets`). Default: 1.' }),
      ),
      memory: Type.Optional(
        Quantity(
          "Memory: a quantity (4Gi, 512Mi) or a bare number of MiB, 128Mi-2Ti, set in whole MiB (`memory`); it must fit the free memory of the node at create. Decimal units are Kubernetes' (4G is 4,000,000,000 bytes, 3815 MiB): valid; validate, plan and apply warn about them in ProxmoxVM manifests. Default: 2048 MiB.",
        ),
      ),
      disk: Type.Optional(
        Quantity(
          'Size of the boot disk `scsi0`: a quantity (20Gi, 1Ti) or a bare number of GiB, 1Gi-100Ti, rounded up to whole GiB (20G, decimal as in Kubernetes, is 18.6 GiB: made 19G; validate, plan and apply warn about decimal units in ProxmoxVM manifests). A blank VM is created with it; an imported image or a clone is grown to it afterwards. Disks never shrink: a smaller size sets the DiskShrinkRefused condition. Default: 20Gi for a blank VM, else the size of the image or template.',
        ),
      ),
      storage: Type.Optional(
        Type.String({
          minLength: 1,
          description:
            'Storage of the boot disk (of a full clone too), of the cloud-init drive and of the extra disks that name none. It must exist on the node, hold the `images` content type and have room for the disk (checked before create). Default: local-lvm.',
        }),
      ),
      network: Type.Optional(
        Type.String({
          pattern: BRIDGE_PATTERN,
          description: 'Bridge of the one virtio interface `net0`, when networks is not set. Default: vmbr0.',
        }),
      ),
      image: Type.Optional(
        Type.String({
          minLength: 1,
          description:
            "A cloud image to import as the boot disk (`import-from`, PVE >= 7.2): a volume id (`local:import/noble.qcow2`: an `import` volume needs PVE >= 8.3; an `images` volume works from 7.2) or a file name, looked for on the node's storages with `import` content first, then `iso`, then `images`. An `iso` volume is importable only with root@pam password credentials, from storage `local`. Not together with template. Without image and template the VM gets a blank disk.",
        }),
      ),
      userData: Type.Optional(
        Type.String({
          description:
            "A #cloud-config document, applied completely: when it holds more than users and SSH keys (which the Proxmox VE API sets natively), the provider renders it (with cloudInit.user, sshKeys and the VM's hostname added where it lacks them) into a content-addressed snippet, uploads it over SSH (the site's ssh in the ProviderConfig) and sets `cicustom user=`. A change uploads a new snippet; Proxmox VE applies it at the next boot (PendingReboot). See cloudInit.userDataMode for sites without SSH.",
        }),
      ),
      agentTimeout: Type.Optional(
        Type.String({
          pattern: '^[0-9]+(s|m|h)$',
          errorMessage: 'must be a duration such as 90s, 10m or 1h',
          description:
            "How long a running VM's guest agent may stay silent after the VM started before the step becomes AgentNotResponding (the Ready condition False, with what to check) and the agent is asked only once per poll interval. A VM with a static address in cloudInit.ipConfig does not wait for the agent. Default: 10m.",
        }),
      ),
      template: Type.Optional(
        Type.Object(
          {
            name: Type.Optional(
              Type.String({ minLength: 1, description: 'Name of the template VM, on any node of the site.' }),
            ),
            vmid: Type.Optional(
              Type.Integer({ minimum: 100, description: 'VMID of the template VM; when set, name is not used.' }),
            ),
            full: Type.Optional(
              Type.Boolean({
                description:
                  "A full clone onto spec.forProvider.storage; false makes a linked clone, on the template's storage. Default: true.",
              }),
            ),
          },
          {
            additionalProperties: false,
            description:
              "Clone this template VM (`qm template`) instead of importing an image: by name or vmid (one is required). Not together with image. The clone gets the marker in its description at once; cores, memory, networks, cloud-init, disks and tags are set by config updates after it. A template on another node than spec.forProvider.node is cloned onto that node when spec.forProvider.storage is shared there; onto a node-local storage (PVE clones to another node only onto a shared one) the clone is made on the template's node, on its storage of that name, and migrated to spec.forProvider.node first (the CloneAcrossNodes reason when the template's node has no such storage).",
          },
        ),
      ),
      templateRef: Type.Optional(
        Type.Object(
          { name: ObjectName('Name of the ProxmoxTemplate, in the namespace of this VM.') },
          {
            additionalProperties: false,
            description:
              "Clone the ProxmoxTemplate of this name (same namespace, as Crossplane resolves references of namespaced resources): its template VM on the VM's node, or the site's one on a shared storage. A linked clone where the template's storage supports it (lvmthin, zfspool, rbd, dir/nfs with qcow2) and is spec.forProvider.storage (default local-lvm), a full clone onto spec.forProvider.storage otherwise. While the template is not built for the node the VM waits (Synced False, reason ReferenceNotReady). Not together with image or template.",
          },
        ),
      ),
      disks: Type.Optional(
        Type.Array(DiskSchema, {
          description: 'Disks besides the boot disk: added when missing, grown when smaller, never removed or shrunk.',
        }),
      ),
      networks: Type.Optional(
        Type.Array(NetworkSchema, {
          description:
            'Network interfaces `net0`, `net1`, ... in this order, instead of network; interfaces beyond the list are removed. Default: one virtio interface on spec.forProvider.network.',
        }),
      ),
      cloudInit: Type.Optional(CloudInitSchema),
      tags: Type.Optional(
        Type.Array(Type.String({ pattern: '^[a-zA-Z0-9_][a-zA-Z0-9_+.-]*$' }), {
          description:
            "Proxmox VE tags, lower-cased. The provider adds `provider-proxmox` (how it finds its VMs) and sets the VM's tags to exactly these: tags added by hand are removed.",
        }),
      ),
      pool: Type.Optional(
        Type.String({
          description: 'Resource pool to create the VM in (set only at create; the pool must exist).',
        }),
      ),
      description: Type.Optional(
        Type.String({
          maxLength: 8192,
          description:
            'Notes of the VM (`description`). The provider adds its ownership marker as the last line (`provider-proxmox.owner: NAMESPACE/NAME uid=UID vmid=VMID installation=ID`), so a text containing `provider-proxmox.owner:` is refused.',
        }),
      ),
      onBoot: Type.Optional(
        Type.Boolean({
          description: "Start the VM when its node boots (`onboot`). Default: unset (Proxmox VE's: no).",
        }),
      ),
      startup: Type.Optional(
        Type.String({
          pattern: '^(order=\\d+)?(,?(up|down)=\\d+)*$',
          description: 'Start order and delays at node boot (`startup`), e.g. order=2,up=30,down=60.',
        }),
      ),
      powerState: Type.Optional(
        Type.Union([Type.Literal('running'), Type.Literal('stopped')], {
          description:
            'running: the provider starts the VM whenever it is not running; stopped: it shuts a running VM down (60 s, then a hard stop). Default: running.',
        }),
      ),
      /**
       * What to do when Proxmox holds changes as pending until the next boot (cores, memory, a NIC
       * model... changed on a running VM): `Never` (the default) leaves the VM running and reports
       * the `PendingReboot` condition; `IfNeeded` reboots it (`POST .../status/reboot`, which applies
       * pending changes).
       */
      rebootPolicy: Type.Optional(
        Type.Union([Type.Literal('Never'), Type.Literal('IfNeeded')], {
          description:
            'What to do when Proxmox VE holds changes of a running VM until its next boot (cores, memory, a NIC model...: status.atProvider.pendingChanges): Never leaves the VM running and sets the PendingReboot condition to True; IfNeeded reboots the VM, which applies them. Default: Never.',
        }),
      ),
      placementPolicy: Type.Optional(
        Type.Union([Type.Literal('Follow'), Type.Literal('Enforce')], {
          description:
            'What to do when the VM was moved off spec.forProvider.node by someone else (HA, a person): Follow keeps it where it is and reports it (the NodeDrift condition True); Enforce migrates it back. A change of spec.forProvider.node is always carried out. Default: Follow.',
        }),
      ),
      replacePolicy: Type.Optional(
        Type.Union([Type.Literal('Never'), Type.Literal('CreateThenDelete')], {
          description:
            "What to do when a change of spec.forProvider.site cannot be made by a remote migration (a version before 7.3, a target site without API-token credentials, or one it cannot reach): Never refuses it (the PlacementChangeRefused condition names why, nothing changes); CreateThenDelete creates a new VM on the new site from the spec, and destroys the old one with its disks once the new one is Ready. The disks' data is lost: plan shows it as 'replace (data loss)'. Default: Never.",
        }),
      ),
      agent: Type.Optional(
        Type.Boolean({
          description:
            "Enable the QEMU guest agent (`agent`). With it, a running VM's addresses are read from the agent into status.atProvider.ipAddresses, and cloud-init's result into the CloudInit condition; until the agent answers the step is WaitingForAgent (the Ready condition is already True; apply waits), for at most agentTimeout. Without it (false), the addresses come from the static cloudInit.ipConfig, and a running VM is Ready without one. The guest must run qemu-guest-agent: the stock Ubuntu cloud image does not have it (add `packages: [qemu-guest-agent]` to userData). Default: true.",
        }),
      ),
      vmid: Type.Optional(
        Type.Integer({
          minimum: 100,
          maximum: 999999999,
          description:
            "The VMID to create the VM at, even outside the ProviderConfig's vmidRange. A VM there that is not this resource's is never touched (VMIDConflict). Cannot change while the VM exists. Default: the first free VMID from the cluster's nextid, within the vmidRange.",
        }),
      ),
    },
    { additionalProperties: false, description: 'The desired state of the Proxmox VE virtual machine.' },
  );

  /**
   * Crossplane's initProvider: forProvider with every field optional. Built field by field, the very
   * schema Type.Partial(ForProviderSchema) returns (test/api/proxmoxvm-schema.test.ts holds the two
   * equal), because Type.Partial is the one builder here that needs TypeBox's type engine, about
   * 125 KB that the bundle would otherwise load for every command that reads a manifest.
   */
  const InitProviderSchema = Type.Object(
    Object.fromEntries(Object.entries(ForProviderSchema.properties).map(([k, v]) => [k, Type.Optional(v)])),
  );

  const ProxmoxVMSpecSchema = Type.Object(
    {
      forProvider: ForProviderSchema,
      initProvider: Type.Optional(InitProviderSchema),
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
    {
      additionalProperties: false,
      description: "The desired state: the VM (forProvider) and Crossplane's managed-resource fields.",
    },
  );

  return { NetworkSchema, DiskSchema, CloudInitSchema, ForProviderSchema, ProxmoxVMSpecSchema };
}

export type VMSchemas = ReturnType<typeof buildSchemas>;

/** NetworkSchema, DiskSchema, CloudInitSchema, ForProviderSchema and ProxmoxVMSpecSchema, built once. */
export const vmSchemas: () => VMSchemas = builtOnce(buildSchemas);
