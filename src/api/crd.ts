/**
 * CustomResourceDefinitions (apiextensions.k8s.io/v1) generated from the TypeBox schemas: one source
 * for the TypeScript types, the engine's validation and the API server's.
 *
 * `toStructural()` turns a TypeBox (JSON Schema) schema into a Kubernetes structural schema:
 * - TypeBox-only keywords (`$id`, `errorMessage`, ...) are dropped; an unknown keyword is an error,
 *   so a new TypeBox feature cannot slip into a CRD unnoticed;
 * - `additionalProperties: false` is dropped (Kubernetes forbids it and prunes unknown fields anyway);
 * - unions of literals become `enum`; a string | integer union (the quantities: `4Gi` or `4096`)
 *   becomes `x-kubernetes-int-or-string` with the string's pattern, and a `maxLength` so that the API
 *   server can bound the CEL cost of rules on it; any other union cannot be structural and becomes
 *   `x-kubernetes-preserve-unknown-fields` (the engine validates it);
 * - `patternProperties` (TypeBox records) become `additionalProperties`; free-form objects keep
 *   unknown fields.
 *
 * On top of the converted schemas, this file adds what only Kubernetes has: the Crossplane v2
 * managed-resource fields and their defaults, CEL rules (`x-kubernetes-validations`) for the seed's
 * limits with the engine's messages (MESSAGES in proxmoxvm.ts), list types, printer columns,
 * categories and subresources.
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
import { ProviderConfigSpec } from './provider-config.ts';
import { type AtProvider, GROUP, LIMITS, MESSAGES, NAME_PATTERN, ProxmoxVMSpecSchema, VERSION } from './proxmoxvm.ts';
import { formatBytes, GiB, MiB } from './quantity.ts';
import { ProxmoxVMScaleSetSpecSchema, ProxmoxVMScaleSetStatusSchema } from './scaleset.ts';
import { ConditionsSchema, ProviderConfigUsageBodySchema } from './usage.ts';

export type JsonSchema = Record<string, unknown>;

// --- schema conversion -----------------------------------------------------------------------------

/** Keywords copied as they are (Kubernetes' JSONSchemaProps has them with the same meaning). */
const COPIED = new Set([
  'description',
  'title',
  'default',
  'minimum',
  'maximum',
  'multipleOf',
  'minLength',
  'maxLength',
  'pattern',
  'minItems',
  'maxItems',
  'minProperties',
  'maxProperties',
  'enum',
  'nullable',
]);

/** Keywords TypeBox (or our schemas) use that mean nothing to Kubernetes: dropped. */
const DROPPED = new Set(['$id', '$schema', '$comment', 'errorMessage', 'examples']);

/** Formats the Kubernetes OpenAPI validator knows (a subset of its list; extend when needed). */
const FORMATS = new Set([
  'int32',
  'int64',
  'float',
  'double',
  'byte',
  'date',
  'date-time',
  'duration',
  'uri',
  'email',
  'hostname',
  'ipv4',
  'ipv6',
  'cidr',
  'mac',
  'uuid',
  'password',
]);

/**
 * Upper bound for the string form of an int-or-string (a quantity is at most ~20 characters).
 * Kubernetes >= 1.34 uses it to estimate the cost of CEL rules on the value (older versions cost
 * every int-or-string as a 3 MiB string).
 */
export const INT_OR_STRING_MAX_LENGTH = 32;

const INT_OR_STRING_KEYWORDS = {
  integer: ['minimum', 'maximum', 'multipleOf', 'exclusiveMinimum', 'exclusiveMaximum'],
  string: ['pattern', 'minLength', 'maxLength'],
} as const;

function isObject(x: unknown): x is JsonSchema {
  return typeof x === 'object' && x !== null && !Array.isArray(x);
}

function jsonType(v: unknown): string {
  if (typeof v === 'string') return 'string';
  if (typeof v === 'boolean') return 'boolean';
  if (typeof v === 'number') return Number.isInteger(v) ? 'integer' : 'number';
  if (Array.isArray(v)) return 'array';
  return 'object';
}

function describe(s: JsonSchema): string {
  if ('const' in s) return JSON.stringify(s.const);
  if (s.type === 'array' && isObject(s.items)) return `a list (each ${describe(s.items)})`;
  if (s.type === 'object') return 'an object';
  return typeof s.type === 'string' ? `a ${s.type}` : 'a value';
}

/** JSON Schema (2020) numeric exclusive bounds -> OpenAPI v3.0 boolean ones. */
function copyBound(s: JsonSchema, out: JsonSchema, key: 'exclusiveMinimum' | 'exclusiveMaximum', at: string): void {
  const v = s[key];
  if (v === undefined) return;
  if (typeof v !== 'number') throw new Error(`${at}: ${key} must be a number`);
  const bound = key === 'exclusiveMinimum' ? 'minimum' : 'maximum';
  if (out[bound] !== undefined) throw new Error(`${at}: both ${bound} and ${key}`);
  out[bound] = v;
  out[key] = true;
}

/**
 * A Kubernetes structural schema from a JSON Schema (TypeBox). `at` names the node in errors.
 * Throws on what it cannot represent faithfully.
 */
export function toStructural(input: unknown, at = '$'): JsonSchema {
  if (!isObject(input)) throw new Error(`${at}: not a schema`);
  const s = input;
  const out: JsonSchema = {};
  const handled = new Set<string>([...DROPPED]);
  const copy = (key: string) => {
    handled.add(key);
    if (s[key] !== undefined) out[key] = structuredClone(s[key]);
  };
  for (const k of ['description', 'title', 'default']) copy(k);

  if (Array.isArray(s.anyOf)) {
    handled.add('anyOf');
    handled.add('type');
    convertUnion(s, s.anyOf, out, at);
  } else if ('const' in s) {
    handled.add('const');
    handled.add('type');
    out.type = typeof s.type === 'string' ? s.type : jsonType(s.const);
    out.enum = [structuredClone(s.const)];
  } else if (s.type === 'object') {
    handled.add('type');
    for (const k of ['properties', 'required', 'additionalProperties', 'patternProperties']) handled.add(k);
    convertObject(s, out, at);
  } else if (s.type === 'array') {
    handled.add('type');
    handled.add('items');
    out.type = 'array';
    if (!isObject(s.items)) throw new Error(`${at}: an array needs one items schema`);
    out.items = toStructural(s.items, `${at}[]`);
  } else if (s.type === 'string' || s.type === 'integer' || s.type === 'number' || s.type === 'boolean') {
    handled.add('type');
    out.type = s.type;
  } else if (s.type === undefined) {
    // Type.Unknown() / Type.Any(): anything goes, keep it as it is.
    out['x-kubernetes-preserve-unknown-fields'] = true;
  } else {
    throw new Error(`${at}: unsupported type ${JSON.stringify(s.type)}`);
  }

  for (const k of COPIED) if (!handled.has(k)) copy(k);
  if (s.format !== undefined) {
    handled.add('format');
    if (typeof s.format !== 'string' || !FORMATS.has(s.format)) {
      throw new Error(`${at}: format ${JSON.stringify(s.format)} is not one Kubernetes validates`);
    }
    out.format = s.format;
  }
  handled.add('exclusiveMinimum');
  handled.add('exclusiveMaximum');
  copyBound(s, out, 'exclusiveMinimum', at);
  copyBound(s, out, 'exclusiveMaximum', at);
  if (s.uniqueItems !== undefined) {
    handled.add('uniqueItems');
    if (s.uniqueItems === true) {
      // Kubernetes forbids uniqueItems; a set list says the same for scalars.
      out['x-kubernetes-list-type'] = 'set';
    }
  }
  for (const [k, v] of Object.entries(s)) {
    if (k.startsWith('x-kubernetes-')) {
      out[k] = structuredClone(v);
      continue;
    }
    if (!handled.has(k)) throw new Error(`${at}: unsupported JSON Schema keyword '${k}'`);
  }
  return out;
}

function convertObject(s: JsonSchema, out: JsonSchema, at: string): void {
  out.type = 'object';
  const props = s.properties;
  if (props !== undefined) {
    if (!isObject(props)) throw new Error(`${at}: properties must be an object`);
    const converted: JsonSchema = {};
    for (const [k, v] of Object.entries(props)) converted[k] = toStructural(v, `${at}.${k}`);
    if (Object.keys(converted).length) out.properties = converted;
  }
  if (Array.isArray(s.required) && s.required.length) out.required = [...(s.required as string[])];
  const hasProps = isObject(props) && Object.keys(props).length > 0;
  if (s.patternProperties !== undefined) {
    const pp = s.patternProperties;
    if (!isObject(pp) || Object.keys(pp).length !== 1 || hasProps || s.additionalProperties !== undefined) {
      throw new Error(`${at}: only a record (one patternProperties entry, no properties) is supported`);
    }
    const [pattern, value] = Object.entries(pp)[0]!;
    if (pattern !== '^.*$' && pattern !== '^(.*)$') {
      throw new Error(`${at}: record keys restricted by ${pattern} cannot be expressed in a CRD`);
    }
    out.additionalProperties = toStructural(value, `${at}.*`);
    return;
  }
  const ap = s.additionalProperties;
  if (ap === false) {
    // Kubernetes prunes unknown fields anyway, and forbids additionalProperties next to properties.
  } else if (ap === undefined) {
    // An object with properties keeps those (the rest is pruned); one without any is free-form.
    if (!hasProps) out['x-kubernetes-preserve-unknown-fields'] = true;
  } else if (ap === true) {
    out['x-kubernetes-preserve-unknown-fields'] = true;
  } else if (isObject(ap)) {
    if (hasProps) throw new Error(`${at}: properties and an additionalProperties schema cannot be combined`);
    out.additionalProperties = toStructural(ap, `${at}.*`);
  } else {
    throw new Error(`${at}: bad additionalProperties`);
  }
}

function convertUnion(s: JsonSchema, branches: unknown[], out: JsonSchema, at: string): void {
  if (!branches.every(isObject) || branches.length === 0) throw new Error(`${at}: bad anyOf`);
  const bs = branches as JsonSchema[];
  // A union of literals of one type: an enum.
  if (bs.every((b) => 'const' in b)) {
    const types = new Set(bs.map((b) => (typeof b.type === 'string' ? b.type : jsonType(b.const))));
    if (types.size === 1) {
      out.type = [...types][0];
      out.enum = bs.map((b) => structuredClone(b.const));
      return;
    }
  }
  // string | integer (a quantity): int-or-string, the branches' validations on the node (each keyword
  // applies to its own JSON type only), the anyOf exactly as Kubernetes requires it.
  const str = bs.find((b) => b.type === 'string' && !('const' in b));
  const int = bs.find((b) => b.type === 'integer' && !('const' in b));
  if (bs.length === 2 && str && int) {
    out['x-kubernetes-int-or-string'] = true;
    out.anyOf = [{ type: 'integer' }, { type: 'string' }];
    for (const [branch, allowed] of [
      [int, INT_OR_STRING_KEYWORDS.integer],
      [str, INT_OR_STRING_KEYWORDS.string],
    ] as const) {
      for (const [k, v] of Object.entries(branch)) {
        if (k === 'type' || k === 'description' || DROPPED.has(k)) continue;
        if (!(allowed as readonly string[]).includes(k)) {
          throw new Error(`${at}: keyword '${k}' in a ${branch.type} branch of an int-or-string`);
        }
        if (k === 'exclusiveMinimum' || k === 'exclusiveMaximum') copyBound(branch, out, k, at);
        else out[k] = structuredClone(v);
      }
    }
    out.maxLength ??= INT_OR_STRING_MAX_LENGTH;
    return;
  }
  // Anything else (e.g. string | list of strings) has no structural form: keep the value as it is
  // and say in the description what it may be; the engine validates it.
  out['x-kubernetes-preserve-unknown-fields'] = true;
  const alternatives = `One of: ${bs.map(describe).join('; ')}.`;
  out.description = typeof s.description === 'string' ? `${s.description} ${alternatives}` : alternatives;
}

/** The node at a dotted path (`spec.forProvider.disks[].size`) of a converted schema. */
export function schemaAt(root: JsonSchema, path: string): JsonSchema {
  let cur: JsonSchema = root;
  for (const seg of path.split('.')) {
    const isItems = seg.endsWith('[]');
    const name = isItems ? seg.slice(0, -2) : seg;
    const props = cur.properties as Record<string, JsonSchema> | undefined;
    const next = props?.[name];
    if (!next) throw new Error(`no schema at ${path} (${name})`);
    cur = next;
    if (isItems) {
      if (!isObject(cur.items)) throw new Error(`no items at ${path} (${name})`);
      cur = cur.items;
    }
  }
  return cur;
}

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
  /** Without forProvider.name, the VM is named after the resource: the same limit applies. */
  metadataName: {
    rule: `has(self.spec.forProvider.name) || size(self.metadata.name) <= ${LIMITS.name.max}`,
    message: `${MESSAGES.name}; metadata.name is the VM name unless spec.forProvider.name is set`,
  },
} as const satisfies Record<string, ValidationRule>;

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
  // Not disks[].size: see the top of this file.
  for (const ref of ['passwordSecretRef', 'sshKeysSecretRef'])
    addRule(schemaAt(fp, `cloudInit.${ref}`), RULES.localSecret);
}

// --- Crossplane v2 managed resource fields ----------------------------------------------------------

export const DEFAULT_PROVIDER_CONFIG_REF = { kind: 'ClusterProviderConfig', name: 'default' } as const;

/** The Crossplane fields of a managed resource's spec, as Crossplane v2 (namespaced) defines them. */
function managedSpec(spec: JsonSchema): JsonSchema {
  const props = spec.properties as Record<string, JsonSchema>;
  props.forProvider!.description = 'The desired state of the Proxmox VE virtual machine.';
  props.initProvider!.description =
    'Fields applied only when the VM is created (e.g. values managed elsewhere afterwards); same schema as forProvider, all optional.';
  props.providerConfigRef = {
    type: 'object',
    description:
      'The ProviderConfig (same namespace) or ClusterProviderConfig with the Proxmox VE sites and credentials.',
    default: { ...DEFAULT_PROVIDER_CONFIG_REF },
    properties: {
      kind: {
        type: 'string',
        enum: ['ProviderConfig', 'ClusterProviderConfig'],
        default: DEFAULT_PROVIDER_CONFIG_REF.kind,
        description: 'ProviderConfig or ClusterProviderConfig (default).',
      },
      name: { type: 'string', minLength: 1, description: 'Name of the provider config.' },
    },
    required: ['name'],
  };
  const mp = props.managementPolicies!;
  mp.default = ['*'];
  mp.description =
    'What the provider may do with the VM: Observe, Create, Update, Delete, LateInitialize, or * (all, the default). Without Delete the VM is left in place when the resource is deleted; [] pauses.';
  props.deletionPolicy!.description =
    'Legacy (Crossplane v1): Orphan leaves the VM in place when the resource is deleted. Prefer managementPolicies without Delete.';
  props.writeConnectionSecretToRef = {
    type: 'object',
    description:
      'A Secret in the namespace of the resource that receives the connection details (endpoint, node, vmid, IP addresses, user).',
    properties: { name: { type: 'string', minLength: 1, description: 'Name of the Secret.' } },
    required: ['name'],
  };
  forProviderRules(props.forProvider!);
  forProviderRules(props.initProvider!);
  return spec;
}

// --- status schemas ---------------------------------------------------------------------------------

/** `status.atProvider` of a ProxmoxVM (the AtProvider interface, checked below). */
export const ProxmoxVMAtProviderSchema = Type.Object({
  vmId: Type.Optional(Type.Integer({ description: 'The Proxmox VE VMID.' })),
  node: Type.Optional(Type.String({ description: 'The node the VM is on.' })),
  site: Type.Optional(Type.String({ description: 'The site (ProviderConfig entry) the VM is in.' })),
  state: Type.Optional(Type.String({ description: 'running, stopped, ...' })),
  qmpStatus: Type.Optional(Type.String({ description: 'The QEMU monitor status.' })),
  ipAddresses: Type.Optional(Type.Array(Type.String(), { description: 'Addresses the guest agent reports.' })),
  lock: Type.Optional(Type.String({ description: 'A Proxmox VE lock held on the VM (clone, migrate, ...).' })),
  task: Type.Optional(Type.String({ description: 'The in-flight Proxmox VE task (UPID).' })),
  step: Type.Optional(Type.String({ description: 'What the provider is doing now (create, import, start...).' })),
  pendingChanges: Type.Optional(Type.Array(Type.String(), { description: 'Fields waiting for a reboot.' })),
});

type Equals<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
/** Fails to compile when AtProvider (proxmoxvm.ts) and its CRD schema drift apart. */
export const AT_PROVIDER_IN_SYNC: Equals<Static<typeof ProxmoxVMAtProviderSchema>, AtProvider> = true;

const ManagedStatusSchema = Type.Object({
  atProvider: Type.Optional(ProxmoxVMAtProviderSchema),
  conditions: Type.Optional(ConditionsSchema),
  observedGeneration: Type.Optional(
    Type.Integer({ format: 'int64', minimum: 0, description: 'The metadata.generation last reconciled.' }),
  ),
  lastHandledReconcileAt: Type.Optional(
    Type.String({ description: 'The last crossplane.io/reconcile-requested-at value handled.' }),
  ),
});

const ProviderConfigStatusSchema = Type.Object({
  conditions: Type.Optional(ConditionsSchema),
  users: Type.Optional(Type.Integer({ format: 'int64', minimum: 0, description: 'Resources using this config.' })),
});

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
  const body = toStructural(ProviderConfigUsageBodySchema, kind);
  return {
    kind,
    plural: `${kind.toLowerCase()}s`,
    singular: kind.toLowerCase(),
    listKind: `${kind}List`,
    scope: cluster ? 'Cluster' : 'Namespaced',
    categories: PROVIDER_CATEGORIES,
    description: `A ${kind} records that a resource uses a ${cluster ? 'ClusterProviderConfig' : 'ProviderConfig'}; while one exists the config cannot be deleted.`,
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
  const vmSpec = managedSpec(toStructural(ProxmoxVMSpecSchema, 'ProxmoxVM.spec'));
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
      rules: [RULES.metadataName],
      columns: [
        READY,
        SYNCED,
        { name: 'EXTERNAL-NAME', type: 'string', jsonPath: '.metadata.annotations.crossplane\\.io/external-name' },
        { name: 'NODE', type: 'string', jsonPath: '.status.atProvider.node' },
        { name: 'STATE', type: 'string', jsonPath: '.status.atProvider.state' },
        { name: 'IP', type: 'string', jsonPath: '.status.atProvider.ipAddresses[0]' },
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

// --- what the controller needs from the API server ---------------------------------------------------

export interface Permission {
  apiGroup: string;
  resources: string[];
  verbs: string[];
  /** cluster: a ClusterRole; namespace: a Role in the controller's namespace. */
  scope: 'cluster' | 'namespace';
  why: string;
}

const OWN_KINDS_PLURALS = ['proxmoxvms', 'proxmoxvmscalesets', 'providerconfigs', 'clusterproviderconfigs'];

/**
 * The least the controller needs (deploy/rbac.yaml and the Helm chart implement it; test/api/deploy.test.ts
 * checks they cover it). Keep in step with src/kube.
 */
export const CONTROLLER_PERMISSIONS: readonly Permission[] = [
  {
    apiGroup: GROUP,
    resources: OWN_KINDS_PLURALS,
    verbs: ['get', 'list', 'watch', 'update', 'patch'],
    scope: 'cluster',
    why: 'watch the resources; finalizers, external-name and create annotations; in-use finalizer on provider configs',
  },
  {
    apiGroup: GROUP,
    resources: ['proxmoxvms'],
    verbs: ['create', 'delete'],
    scope: 'cluster',
    why: 'a scale set creates and deletes its ProxmoxVMs',
  },
  {
    apiGroup: GROUP,
    resources: OWN_KINDS_PLURALS.map((r) => `${r}/status`),
    verbs: ['get', 'update', 'patch'],
    scope: 'cluster',
    why: 'conditions and atProvider through the status subresource',
  },
  {
    apiGroup: GROUP,
    resources: ['proxmoxvms/finalizers', 'proxmoxvmscalesets/finalizers'],
    verbs: ['update'],
    scope: 'cluster',
    why: 'owner references with blockOwnerDeletion (usages, connection Secrets, scale set replicas) under OwnerReferencesPermissionEnforcement',
  },
  {
    apiGroup: GROUP,
    resources: ['providerconfigusages', 'clusterproviderconfigusages'],
    verbs: ['get', 'list', 'watch', 'create', 'update', 'delete'],
    scope: 'cluster',
    why: 'track which resources use which provider config',
  },
  {
    apiGroup: '',
    resources: ['events'],
    verbs: ['create', 'patch'],
    scope: 'cluster',
    why: 'an Event for every condition change (core/v1 Events)',
  },
  {
    apiGroup: 'events.k8s.io',
    resources: ['events'],
    verbs: ['create', 'patch'],
    scope: 'cluster',
    why: 'the same Events through events.k8s.io/v1',
  },
  {
    apiGroup: '',
    resources: ['secrets'],
    verbs: ['get'],
    scope: 'cluster',
    why: 'read the credentials Secrets a provider config names',
  },
  {
    apiGroup: '',
    resources: ['secrets'],
    verbs: ['create', 'update', 'delete'],
    scope: 'cluster',
    why: 'write connection Secrets (writeConnectionSecretToRef)',
  },
  {
    apiGroup: 'coordination.k8s.io',
    resources: ['leases'],
    verbs: ['get', 'create', 'update'],
    scope: 'namespace',
    why: 'leader election on a Lease in the controller namespace',
  },
];
