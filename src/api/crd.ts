/**
 * CustomResourceDefinitions (apiextensions.k8s.io/v1) generated from the TypeBox schemas: one source
 * for the TypeScript types, the engine's validation and the API server's. structural.ts converts the
 * schemas; this file adds what only Kubernetes has: the Crossplane v2 managed-resource fields and
 * their defaults, CEL rules (`x-kubernetes-validations`) for the seed's limits with the engine's
 * messages (MESSAGES in proxmoxvm.ts) and for the placement that cannot change once the VM exists,
 * list types, printer columns, categories and subresources.
 *
 * Kubernetes >= 1.29 (the CEL quantity library). The extra disks' sizes (`disks[].size`) get the
 * pattern but no CEL range rule: before 1.34 the API server costs a rule on an int-or-string as if
 * the value were a 3 MiB string (kubernetes/kubernetes#132837), and one such rule per list item
 * exceeds the CRD's budget, so the CRD would not install. The engine checks those sizes with the
 * same message.
 *
 * `scripts/gen-crds.ts` writes the files (CRD_DIRS); test/api/crds.test.ts fails when they differ.
 */
import Type, { type Static } from 'typebox';
import { stringify } from 'yaml';
import { DNS1123_SUBDOMAIN_MAX, DNS1123_SUBDOMAIN_PATTERN } from './metadata.ts';
import { ProviderConfigSpec } from './provider-config.ts';
import { imageCrdSpec } from './proxmoximage.ts';
import { templateCrdSpec } from './proxmoxtemplate.ts';
import { type AtProvider, GROUP, LIMITS, MESSAGES, NAME_PATTERN, VERSION, vmSchemas } from './proxmoxvm.ts';
import { formatBytes, GiB, MiB } from './quantity.ts';
import { ProxmoxVMScaleSetSpecSchema, ProxmoxVMScaleSetStatusSchema } from './scaleset.ts';
import { type JsonSchema, schemaAt, toStructural } from './structural.ts';
import { usageSchemas } from './usage.ts';

// --- CEL rules ------------------------------------------------------------------------------------

export interface ValidationRule {
  rule: string;
  message: string;
  reason?: 'FieldValueInvalid' | 'FieldValueForbidden' | 'FieldValueRequired' | 'FieldValueDuplicate';
  fieldPath?: string;
}

/** A CEL string literal. */
export function celString(s: string): string {
  return `'${s.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
}

function quantityRange(x: string, lo: string, hi: string): string {
  return (
    `isQuantity(${x}) && quantity(${x}).compareTo(quantity(${celString(lo)})) >= 0` +
    ` && quantity(${x}).compareTo(quantity(${celString(hi)})) <= 0`
  );
}

/**
 * A CEL rule on an int-or-string size, with the engine's reading of it (src/api/quantity.ts): an
 * integer or a bare number is in `bareUnit` bytes (MiB for memory, GiB for disks); otherwise a
 * Kubernetes quantity, except that `K` (decimal kilo, accepted by the engine) is Kubernetes' `k`.
 */
export function sizeRule(minBytes: number, maxBytes: number, bareUnit: number): string {
  const bareMin = minBytes / bareUnit;
  const bareMax = maxBytes / bareUnit;
  if (!Number.isInteger(bareMin) || !Number.isInteger(bareMax)) throw new Error('limits must be whole bare units');
  const lo = formatBytes(minBytes);
  const hi = formatBytes(maxBytes);
  const bare = [...'0123456789'].map((d) => `self.endsWith('${d}')`).join(' || ');
  return [
    `type(self) == int ? self >= ${bareMin} && self <= ${bareMax}`,
    `: (${bare}) ? ${quantityRange('self', String(bareMin), String(bareMax))}`,
    `: self.endsWith('K') ? ${quantityRange("self.replace('K', 'k')", lo, hi)}`,
    `: ${quantityRange('self', lo, hi)}`,
  ].join(' ');
}

export const RULES = {
  name: {
    rule: `size(self) >= ${LIMITS.name.min} && size(self) <= ${LIMITS.name.max} && self.matches(${celString(NAME_PATTERN)})`,
    message: MESSAGES.name,
  },
  cpu: { rule: `self >= ${LIMITS.cpu.min} && self <= ${LIMITS.cpu.max}`, message: MESSAGES.cpu },
  memory: {
    rule: sizeRule(LIMITS.memoryBytes.min, LIMITS.memoryBytes.max, MiB),
    message: MESSAGES.memory,
  },
  disk: { rule: sizeRule(LIMITS.diskBytes.min, LIMITS.diskBytes.max, GiB), message: MESSAGES.disk },
  /**
   * A resource reads Secrets of its own namespace only; a namespace would let the user of one
   * namespace have the provider read another namespace's Secrets.
   */
  localSecret: {
    rule: '!has(self.namespace)',
    message: 'namespace is not allowed: a ProxmoxVM reads Secrets of its own namespace',
  },
  /** One source of the boot disk: an image to import, a template VM, or a ProxmoxTemplate. */
  oneSource: {
    rule: '(has(self.image) ? 1 : 0) + (has(self.template) ? 1 : 0) + (has(self.templateRef) ? 1 : 0) <= 1',
    message:
      'set at most one of image (import a cloud image), template (clone a template VM) and templateRef (clone a ProxmoxTemplate)',
  },
  /** Without forProvider.name, the VM is named after the resource: the same limit applies. */
  metadataName: {
    rule: `has(self.spec.forProvider.name) || size(self.metadata.name) <= ${LIMITS.name.max}`,
    message: `${MESSAGES.name}; metadata.name is the VM name unless spec.forProvider.name is set`,
  },
} as const satisfies Record<string, ValidationRule>;

/**
 * The placement fields that cannot change once the VM exists: a VMID is the VM's identity. A node
 * change is a migration, a storage change a disk move, a site change a remote migration (which
 * keeps the VMID where it is free on the target; see src/vm/site-move.ts).
 */
export const PLACEMENT_FIELDS = ['vmid'] as const;

/** The message of the placement rules: why, and what to do instead (the API server names the field). */
export const PLACEMENT_MESSAGE =
  'cannot change while the VM exists (status.atProvider.vmId is set): a VMID is the identity of a VM; revert the field, or delete and recreate the resource. A node change is a migration and a site change a remote migration; both are allowed';

/**
 * A transition rule on the root (only the root sees both spec and status): while the old object
 * has `status.atProvider.vmId`, `spec.forProvider.<field>` must stay as it was, set or unset. A
 * status write leaves the spec as it is, so the controller's own writes always pass.
 */
export function placementRule(field: (typeof PLACEMENT_FIELDS)[number]): ValidationRule {
  const now = `self.spec.forProvider`;
  const before = `oldSelf.spec.forProvider`;
  return {
    rule:
      '!has(oldSelf.status) || !has(oldSelf.status.atProvider) || !has(oldSelf.status.atProvider.vmId)' +
      ` || (has(${now}.${field}) == has(${before}.${field}) && (!has(${now}.${field}) || ${now}.${field} == ${before}.${field}))`,
    // The API server prefixes the fieldPath (`spec.forProvider.site: Forbidden: ...`).
    message: PLACEMENT_MESSAGE,
    reason: 'FieldValueForbidden',
    fieldPath: `.spec.forProvider.${field}`,
  };
}

function addRule(node: JsonSchema, rule: ValidationRule): void {
  const list = (node['x-kubernetes-validations'] as ValidationRule[] | undefined) ?? [];
  list.push({ ...rule });
  node['x-kubernetes-validations'] = list;
}

/** The seed's limits on a forProvider (or initProvider) node. */
function forProviderRules(fp: JsonSchema): void {
  const name = schemaAt(fp, 'name');
  // A maxLength error ("Too long") would stop the API server from evaluating CEL rules at all and
  // hide the message; the rule bounds the length instead.
  delete name.maxLength;
  addRule(name, RULES.name);
  addRule(schemaAt(fp, 'cpu'), RULES.cpu);
  addRule(schemaAt(fp, 'memory'), RULES.memory);
  addRule(schemaAt(fp, 'disk'), RULES.disk);
  addRule(fp, RULES.oneSource);
  // Not disks[].size: see the top of this file.
  for (const ref of ['passwordSecretRef', 'sshKeysSecretRef'])
    addRule(schemaAt(fp, `cloudInit.${ref}`), RULES.localSecret);
}

// --- Crossplane v2 managed resource fields ----------------------------------------------------------

export const DEFAULT_PROVIDER_CONFIG_REF = { kind: 'ClusterProviderConfig', name: 'default' } as const;

/** The name of another object (a DNS-1123 subdomain): it goes into API paths, where `../` would leave the namespace. */
function objectName(): JsonSchema {
  return { type: 'string', minLength: 1, maxLength: DNS1123_SUBDOMAIN_MAX, pattern: DNS1123_SUBDOMAIN_PATTERN };
}

/** The Crossplane fields of a managed resource's spec, as Crossplane v2 (namespaced) defines them. */
function managedSpec(spec: JsonSchema): JsonSchema {
  const props = spec.properties as Record<string, JsonSchema>;
  props.forProvider!.description = 'The desired state of the Proxmox VE virtual machine.';
  props.initProvider!.description =
    "Crossplane's initProvider: the fields of forProvider, all optional, with the same limits. Accepted but not read by this version of the provider: set every field in forProvider.";
  props.providerConfigRef = {
    type: 'object',
    description:
      'The ProviderConfig (same namespace) or ClusterProviderConfig with the Proxmox VE sites and credentials. Default: the ClusterProviderConfig named default.',
    default: { ...DEFAULT_PROVIDER_CONFIG_REF },
    properties: {
      kind: {
        type: 'string',
        enum: ['ProviderConfig', 'ClusterProviderConfig'],
        default: DEFAULT_PROVIDER_CONFIG_REF.kind,
        description: 'ProviderConfig or ClusterProviderConfig (default).',
      },
      name: { ...objectName(), description: 'Name of the provider config.' },
    },
    required: ['name'],
  };
  const mp = props.managementPolicies!;
  mp.default = ['*'];
  mp.description =
    'What the provider may do with the VM: Observe, Create, Update, Delete, LateInitialize, or * (all, the default), in the combinations crossplane-runtime supports (others: Synced=False). Without Create and Update the VM at the external name is only observed; without Delete it is left in place when the resource is deleted; [] pauses. LateInitialize changes nothing: the provider late-initializes no field.';
  props.deletionPolicy!.description =
    'Legacy (Crossplane v1): Orphan leaves the VM in place when the resource is deleted. Prefer managementPolicies without Delete.';
  props.writeConnectionSecretToRef = {
    type: 'object',
    description:
      'A Secret in the namespace of the resource that the controller writes the connection details to (keys endpoint, node and vmid; ip and ipAddresses once the guest agent reported addresses; user when cloudInit.user is set); owned by the resource. `apply` writes none.',
    properties: { name: { ...objectName(), description: 'Name of the Secret.' } },
    required: ['name'],
  };
  forProviderRules(props.forProvider!);
  forProviderRules(props.initProvider!);
  return spec;
}

// --- status schemas ---------------------------------------------------------------------------------

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
          'What the provider is doing now: CheckingNode, Placing, CheckingBridge, CheckingStorage, ResolvingImage, WaitingForSlot, ReservingVMID, Creating, Importing, Cloning, Configuring, Resizing, Starting, Stopping, Rebooting, UploadingSnippet, Migrating, MovingDisk, WaitingForAgent, AgentNotResponding, WaitingForCloudInit, Ready, Destroying, ...; Failed after a failed task.',
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

const ManagedStatusSchema = Type.Object(
  {
    atProvider: Type.Optional(ProxmoxVMAtProviderSchema),
    conditions: Type.Optional(usageSchemas().ConditionsSchema),
    observedGeneration: Type.Optional(
      Type.Integer({ format: 'int64', minimum: 0, description: 'The metadata.generation last reconciled.' }),
    ),
    lastHandledReconcileAt: Type.Optional(
      Type.String({ description: 'The last crossplane.io/reconcile-requested-at value handled.' }),
    ),
  },
  { description: 'The observed state, written by the provider.' },
);

const ProviderConfigStatusSchema = Type.Object(
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

// --- provider configs -------------------------------------------------------------------------------

function providerConfigSpec(cluster: boolean): JsonSchema {
  const spec = toStructural(ProviderConfigSpec, 'ProviderConfig.spec');
  const sites = schemaAt(spec, 'sites');
  sites['x-kubernetes-list-type'] = 'map';
  sites['x-kubernetes-list-map-keys'] = ['name'];
  schemaAt(spec, 'sites[].endpoints')['x-kubernetes-list-type'] = 'set';
  schemaAt(spec, 'sites[].nodes')['x-kubernetes-list-type'] = 'set';
  const minMax = { rule: 'self.min <= self.max', message: 'min must not be greater than max' };
  addRule(schemaAt(spec, 'vmidRange'), minMax);
  addRule(schemaAt(spec, 'sites[].vmidRange'), minMax);
  addRule(spec, {
    rule: 'has(self.credentials.secretRef) || self.sites.all(s, has(s.credentialsSecretRef))',
    message: 'spec.credentials.secretRef is required unless every site has its own credentialsSecretRef',
  });
  if (cluster) {
    const ns = (ref: string) => ({
      rule: `!has(self.${ref}) || has(self.${ref}.namespace)`,
      message: `${ref}.namespace is required in a ClusterProviderConfig`,
    });
    addRule(schemaAt(spec, 'credentials'), ns('secretRef'));
    addRule(schemaAt(spec, 'sites[]'), ns('credentialsSecretRef'));
  } else {
    // A namespaced ProviderConfig may only read Secrets of its own namespace: a namespace user must
    // not be able to point the provider at another namespace's Secrets.
    const local = (ref: string) => ({
      rule: `!has(self.${ref}) || !has(self.${ref}.namespace)`,
      message: `${ref}.namespace is not allowed in a ProviderConfig: it reads Secrets of its own namespace (use a ClusterProviderConfig for another namespace)`,
    });
    addRule(schemaAt(spec, 'credentials'), local('secretRef'));
    addRule(schemaAt(spec, 'sites[]'), local('credentialsSecretRef'));
  }
  return spec;
}

// --- the CRDs ---------------------------------------------------------------------------------------

export interface PrinterColumn {
  name: string;
  type: 'string' | 'integer' | 'number' | 'boolean' | 'date';
  jsonPath: string;
  description?: string;
  priority?: number;
}

export interface CrdSpec {
  kind: string;
  plural: string;
  singular: string;
  listKind: string;
  scope: 'Namespaced' | 'Cluster';
  categories: string[];
  description: string;
  /** Properties of the root besides apiVersion, kind and metadata. */
  properties: Record<string, JsonSchema>;
  required: string[];
  rules?: ValidationRule[];
  columns: PrinterColumn[];
  status: boolean;
  scale?: { specReplicasPath: string; statusReplicasPath: string; labelSelectorPath?: string };
}

export interface CustomResourceDefinition {
  apiVersion: 'apiextensions.k8s.io/v1';
  kind: 'CustomResourceDefinition';
  metadata: { name: string; labels?: Record<string, string> };
  spec: {
    group: string;
    names: { kind: string; listKind: string; plural: string; singular: string; categories: string[] };
    scope: 'Namespaced' | 'Cluster';
    versions: Array<{
      name: string;
      served: boolean;
      storage: boolean;
      schema: { openAPIV3Schema: JsonSchema };
      subresources?: Record<string, unknown>;
      additionalPrinterColumns: PrinterColumn[];
    }>;
  };
}

const MANAGED_CATEGORIES = ['crossplane', 'managed', 'proxmox'];
const PROVIDER_CATEGORIES = ['crossplane', 'provider', 'proxmox'];

const READY: PrinterColumn = {
  name: 'READY',
  type: 'string',
  jsonPath: ".status.conditions[?(@.type=='Ready')].status",
};
const SYNCED: PrinterColumn = {
  name: 'SYNCED',
  type: 'string',
  jsonPath: ".status.conditions[?(@.type=='Synced')].status",
};
const AGE: PrinterColumn = { name: 'AGE', type: 'date', jsonPath: '.metadata.creationTimestamp' };

function providerConfigCrd(cluster: boolean): CrdSpec {
  const kind = cluster ? 'ClusterProviderConfig' : 'ProviderConfig';
  return {
    kind,
    plural: `${kind.toLowerCase()}s`,
    singular: kind.toLowerCase(),
    listKind: `${kind}List`,
    scope: cluster ? 'Cluster' : 'Namespaced',
    categories: PROVIDER_CATEGORIES,
    description: cluster
      ? 'A ClusterProviderConfig says where Proxmox VE sites are and how to reach them, for resources of every namespace.'
      : 'A ProviderConfig says where Proxmox VE sites are and how to reach them, for resources of its namespace.',
    properties: {
      spec: providerConfigSpec(cluster),
      status: toStructural(ProviderConfigStatusSchema, `${kind}.status`),
    },
    required: ['spec'],
    columns: [
      AGE,
      { name: 'SECRET-NAME', type: 'string', jsonPath: '.spec.credentials.secretRef.name', priority: 1 },
      { name: 'USERS', type: 'integer', jsonPath: '.status.users', priority: 1 },
    ],
    status: true,
  };
}

function usageCrd(cluster: boolean): CrdSpec {
  const kind = cluster ? 'ClusterProviderConfigUsage' : 'ProviderConfigUsage';
  const body = toStructural(usageSchemas().ProviderConfigUsageBodySchema, kind);
  return {
    kind,
    plural: `${kind.toLowerCase()}s`,
    singular: kind.toLowerCase(),
    listKind: `${kind}List`,
    scope: cluster ? 'Cluster' : 'Namespaced',
    categories: PROVIDER_CATEGORIES,
    description: cluster
      ? 'A ClusterProviderConfigUsage records that a cluster-scoped resource uses a provider config. This provider has no cluster-scoped resources and never writes one: a ProxmoxVM records its use of either kind of config in a namespaced ProviderConfigUsage. Defined for Crossplane compatibility.'
      : 'A ProviderConfigUsage records that a ProxmoxVM (the usage is named after its UID) uses a ProviderConfig or ClusterProviderConfig; while one names a config, the config keeps the in-use.crossplane.io finalizer and its deletion waits.',
    properties: body.properties as Record<string, JsonSchema>,
    required: body.required as string[],
    columns: [
      AGE,
      { name: 'CONFIG-NAME', type: 'string', jsonPath: '.providerConfigRef.name' },
      { name: 'RESOURCE-KIND', type: 'string', jsonPath: '.resourceRef.kind' },
      { name: 'RESOURCE-NAME', type: 'string', jsonPath: '.resourceRef.name' },
    ],
    status: false,
  };
}

/** The provider's kinds, as CRD specs (before rendering). */
export function crdSpecs(): CrdSpec[] {
  const vmSpec = managedSpec(toStructural(vmSchemas().ProxmoxVMSpecSchema, 'ProxmoxVM.spec'));
  const ssSpec = toStructural(ProxmoxVMScaleSetSpecSchema, 'ProxmoxVMScaleSet.spec');
  managedSpec(schemaAt(ssSpec, 'template.spec'));
  return [
    {
      kind: 'ProxmoxVM',
      plural: 'proxmoxvms',
      singular: 'proxmoxvm',
      listKind: 'ProxmoxVMList',
      scope: 'Namespaced',
      categories: MANAGED_CATEGORIES,
      description: 'A ProxmoxVM is a Proxmox VE virtual machine, managed as a Crossplane managed resource.',
      properties: { spec: vmSpec, status: toStructural(ManagedStatusSchema, 'ProxmoxVM.status') },
      required: ['spec'],
      rules: [RULES.metadataName, ...PLACEMENT_FIELDS.map(placementRule)],
      columns: [
        READY,
        SYNCED,
        { name: 'EXTERNAL-NAME', type: 'string', jsonPath: '.metadata.annotations.crossplane\\.io/external-name' },
        // A VMID is unique within a site only: the site it is on names the VM with it.
        { name: 'SITE', type: 'string', jsonPath: '.status.atProvider.site' },
        { name: 'NODE', type: 'string', jsonPath: '.status.atProvider.node' },
        { name: 'STATE', type: 'string', jsonPath: '.status.atProvider.state' },
        { name: 'IP', type: 'string', jsonPath: '.status.atProvider.ipAddresses[0]' },
        { name: 'PENDING-REBOOT', type: 'string', jsonPath: ".status.conditions[?(@.type=='PendingReboot')].status" },
        AGE,
      ],
      status: true,
    },
    {
      kind: 'ProxmoxVMScaleSet',
      plural: 'proxmoxvmscalesets',
      singular: 'proxmoxvmscaleset',
      listKind: 'ProxmoxVMScaleSetList',
      scope: 'Namespaced',
      categories: MANAGED_CATEGORIES,
      description: 'A ProxmoxVMScaleSet keeps a number of ProxmoxVMs made from one template, spread over the nodes.',
      properties: { spec: ssSpec, status: toStructural(ProxmoxVMScaleSetStatusSchema, 'ProxmoxVMScaleSet.status') },
      required: ['spec'],
      columns: [
        READY,
        SYNCED,
        { name: 'DESIRED', type: 'integer', jsonPath: '.spec.replicas' },
        { name: 'CURRENT', type: 'integer', jsonPath: '.status.replicas' },
        { name: 'READY-REPLICAS', type: 'integer', jsonPath: '.status.readyReplicas' },
        { name: 'UP-TO-DATE', type: 'integer', jsonPath: '.status.updatedReplicas' },
        AGE,
      ],
      status: true,
      scale: {
        specReplicasPath: '.spec.replicas',
        statusReplicasPath: '.status.replicas',
        labelSelectorPath: '.status.selector',
      },
    },
    imageCrdSpec(MANAGED_CATEGORIES),
    templateCrdSpec(MANAGED_CATEGORIES),
    providerConfigCrd(false),
    providerConfigCrd(true),
    usageCrd(false),
    usageCrd(true),
  ];
}

const ROOT_DOCS = {
  apiVersion: {
    type: 'string',
    description:
      'APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values.',
  },
  kind: {
    type: 'string',
    description:
      'Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. In CamelCase.',
  },
  // Nothing but `type` here: the apiserver refuses a CRD whose schema says anything more about
  // metadata than name and generateName (a description included).
  metadata: { type: 'object' },
};

export function toCrd(c: CrdSpec): CustomResourceDefinition {
  const root: JsonSchema = {
    type: 'object',
    description: c.description,
    properties: { ...structuredClone(ROOT_DOCS), ...c.properties },
    required: c.required,
  };
  if (c.rules?.length) root['x-kubernetes-validations'] = c.rules.map((r) => ({ ...r }));
  const subresources: Record<string, unknown> = {};
  if (c.status) subresources.status = {};
  if (c.scale) subresources.scale = { ...c.scale };
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${c.plural}.${GROUP}` },
    spec: {
      group: GROUP,
      names: {
        kind: c.kind,
        listKind: c.listKind,
        plural: c.plural,
        singular: c.singular,
        categories: [...c.categories],
      },
      scope: c.scope,
      versions: [
        {
          name: VERSION,
          served: true,
          storage: true,
          schema: { openAPIV3Schema: root },
          ...(Object.keys(subresources).length ? { subresources } : {}),
          additionalPrinterColumns: c.columns.map((col) => ({ ...col })),
        },
      ],
    },
  };
}

/** Every CRD of the provider. */
export function crds(): CustomResourceDefinition[] {
  return crdSpecs().map(toCrd);
}

export const GENERATED_HEADER =
  '# Generated from the TypeBox schemas in src/api by scripts/gen-crds.ts (npm run gen:crds). Do not edit.\n';

export function renderCrd(crd: CustomResourceDefinition): string {
  // The header is a comment of the (only) document: no empty document before it, which some package
  // parsers reject.
  return `${GENERATED_HEADER}${stringify(crd, { sortMapEntries: true, lineWidth: 0 })}`;
}

/** Where the CRDs go: plain manifests, the Helm chart's crds/, the Crossplane package. */
export const CRD_DIRS = ['deploy/crds', 'deploy/helm/provider-proxmox/crds', 'package/crds'] as const;

export function crdFileName(crd: CustomResourceDefinition): string {
  return `${crd.spec.group}_${crd.spec.names.plural}.yaml`;
}

/** Every generated file, by path relative to the repository root. */
export function generatedFiles(): Map<string, string> {
  const out = new Map<string, string>();
  for (const crd of crds()) {
    const text = renderCrd(crd);
    for (const dir of CRD_DIRS) out.set(`${dir}/${crdFileName(crd)}`, text);
  }
  return out;
}
