/**
 * CustomResourceDefinitions (apiextensions.k8s.io/v1) generated from the TypeBox schemas: one source
 * for the TypeScript types, the engine's validation and the API server's. structural.ts converts the
 * schemas; this file adds what only Kubernetes has: the Crossplane v2 managed-resource fields and
 * their defaults, list types, printer columns, categories and subresources, and renders the CRDs.
 * The CEL rules (`x-kubernetes-validations`) come from crd-rules.ts, the status schemas from
 * crd-status.ts.
 *
 * `scripts/gen-crds.ts` writes the files (CRD_DIRS); test/api/crds.test.ts fails when they differ.
 */
import { stringify } from 'yaml';
import { addRule, forProviderRules, PLACEMENT_FIELDS, placementRule, RULES, type ValidationRule } from './crd-rules.ts';
import { ManagedStatusSchema, ProviderConfigStatusSchema } from './crd-status.ts';
import { DNS1123_SUBDOMAIN_MAX, DNS1123_SUBDOMAIN_PATTERN } from './metadata.ts';
import { ProviderConfigSpec } from './provider-config.ts';
import { imageCrdSpec } from './proxmoximage.ts';
import { templateCrdSpec } from './proxmoxtemplate.ts';
import { GROUP, VERSION } from './proxmoxvm.ts';
import { vmSchemas } from './proxmoxvm-schema.ts';
import { ProxmoxVMScaleSetSpecSchema, ProxmoxVMScaleSetStatusSchema } from './scaleset.ts';
import { type JsonSchema, schemaAt, toStructural } from './structural.ts';
import { usageSchemas } from './usage.ts';

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
