/**
 * The CEL rules (`x-kubernetes-validations`) that the CRDs (crd.ts) carry: the seed's limits with the
 * engine's messages (MESSAGES in proxmoxvm.ts), the Secret references that must stay in the
 * resource's namespace, one source of the boot disk, and the placement that cannot change once the
 * VM exists.
 *
 * Kubernetes >= 1.29 (the CEL quantity library). The extra disks' sizes (`disks[].size`) get the
 * pattern but no CEL range rule: before 1.34 the API server costs a rule on an int-or-string as if
 * the value were a 3 MiB string (kubernetes/kubernetes#132837), and one such rule per list item
 * exceeds the CRD's budget, so the CRD would not install. The engine checks those sizes with the
 * same message.
 */
import { LIMITS, MESSAGES, NAME_PATTERN } from './proxmoxvm.ts';
import { formatBytes, GiB, MiB } from './quantity.ts';
import { type JsonSchema, schemaAt } from './structural.ts';

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

export function addRule(node: JsonSchema, rule: ValidationRule): void {
  const list = (node['x-kubernetes-validations'] as ValidationRule[] | undefined) ?? [];
  list.push({ ...rule });
  node['x-kubernetes-validations'] = list;
}

/** The seed's limits on a forProvider (or initProvider) node. */
export function forProviderRules(fp: JsonSchema): void {
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
