/**
 * Writes docs/reference.md, the field reference of every kind, from the CRDs that src/api/crd.ts
 * generates from the TypeBox schemas: every field of spec and status with its type, default,
 * allowed values (enums, patterns, limits, the CRD's CEL rules) and description, so that the page
 * says what the API server and `kubectl explain` say. `--check` writes nothing and exits 1 when the
 * committed page differs (test/docs/reference.test.ts does the same in the test suite).
 *
 *   npm run gen:reference            # regenerate
 *   npm run gen:reference -- --check # verify
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type CustomResourceDefinition, crds, type PrinterColumn } from '../src/api/crd.ts';
import type { ValidationRule } from '../src/api/crd-rules.ts';
import type { JsonSchema } from '../src/api/structural.ts';
import {
  ANNOTATION_CREATE_FAILED,
  ANNOTATION_CREATE_PENDING,
  ANNOTATION_CREATE_SUCCEEDED,
  ANNOTATION_EXTERNAL_NAME,
  ANNOTATION_PAUSED,
  ANNOTATION_POLL_INTERVAL,
  ANNOTATION_RECONCILE_REQUESTED,
} from '../src/engine/resource.ts';
import { ANNOTATION_INDEX, ANNOTATION_TEMPLATE_HASH, LABEL_SCALESET } from '../src/scaleset/reconcile.ts';
import { DEPENDS_ANNOTATION, PHASE_ANNOTATION } from '../src/workspace/phases.ts';

export const REFERENCE_FILE = 'docs/reference.md';

/** Subtrees written once and referred to elsewhere: kind -> path -> what to read instead. */
const SAME_AS: Record<string, Record<string, string>> = {
  ProxmoxVM: { 'spec.initProvider': 'as `spec.forProvider` above' },
  ProxmoxVMScaleSet: { 'spec.template.spec': 'as [ProxmoxVM](#proxmoxvm) `spec`' },
};

/** Hand-written notes after a kind's table: what the schema cannot say (annotations, conditions). */
const NOTES: Record<string, string> = {
  ProxmoxVM: `### Annotations

| annotation | set by | meaning |
|---|---|---|
| \`${ANNOTATION_EXTERNAL_NAME}\` | the provider, before the create; or you | the VMID of the VM. Set it yourself to take over an existing VM: the provider manages only a VM with its ownership marker (otherwise \`VMIDConflict\`); with \`managementPolicies: [Observe]\` it only watches it |
| \`${ANNOTATION_CREATE_PENDING}\`, \`${ANNOTATION_CREATE_SUCCEEDED}\`, \`${ANNOTATION_CREATE_FAILED}\` | the provider | when a create was sent, answered, or failed (Crossplane's create annotations) |
| \`${ANNOTATION_PAUSED}\` | you | \`"true"\` pauses reconciling (Synced=False, ReconcilePaused) |
| \`${ANNOTATION_POLL_INTERVAL}\` | you | how often a Ready VM is looked at: a Go duration such as \`5m\` (\`validate\` accepts 1ms to 24h). Default: the runtime's poll interval, 1m (\`controller --poll\`) |
| \`${ANNOTATION_RECONCILE_REQUESTED}\` | you | any new value makes the provider reconcile now; status.lastHandledReconcileAt echoes it |
| \`${PHASE_ANNOTATION}\`, \`${DEPENDS_ANNOTATION}\` | you | \`apply\` only: the rollout phase and the VMs to wait for (see [fleet.md](fleet.md#phased-rollout-apply)) |

### Conditions

| type | meaning |
|---|---|
| \`Ready\` | True (reason Available) when the VM runs, or is stopped as spec.forProvider.powerState asks, with nothing in flight. It is already True while the guest agent has not reported an address (status.atProvider.step WaitingForAgent). False with the reason otherwise: Creating, Unavailable, Locked (a task holds the VM's lock), LockWithoutTask (no task holds it: its worker died; the message says what to check before \`qm unlock\`), NodeOffline (its node is offline: its state is unknown, and nothing is sent to it, until the node is back), ... |
| \`Synced\` | True (ReconcileSuccess) when the last reconcile worked; False with the error's reason (BridgeNotFound, ImageNotImportable, VMIDConflict, ...) and a message that names the fix. NoQuorum: the site's cluster lost quorum (a node of a two-node cluster down, no QDevice), so Proxmox VE refuses creates, starts and config changes; retried until the nodes are back. DiskSizeStale: a disk's volume is larger than its config says (a resize whose config write failed); \`qm disk rescan\` mends it. TaskDied: a task of ours whose worker was killed before it ended (a node crash, an OOM kill); what it left is looked at again. NodeOffline: the VM is being deleted and its node is offline; nothing can destroy it until the node is back (the message says how to move its config to a node that is up). VMIDRecentlyDestroyed: the create's VMID (one you set, or one kept from an earlier create) was destroyed with the provider's credentials less than a minute ago, and PVE may still apply a destroy of it whose sender gave up; the create is sent once the minute has passed. VMProtected: the VM being deleted (or the VM a replacement retires) is one an operator protected (\`protection: 1\`), so Proxmox VE refuses the destroy; it is left as it is, not stopped, until the protection is removed (\`qm set N --protection 0\`), or, for a delete, the resource's deletionPolicy is Orphan |
| \`PendingReboot\` | True (ChangesPending) while Proxmox VE holds changes of the running VM until its next boot (see spec.forProvider.rebootPolicy) |
| \`CloudInit\` | False (UserDataPartiallyApplied) when spec.forProvider.userData has keys the Proxmox VE API cannot set |
| \`DiskShrinkRefused\` | True (ShrinkNotSupported) when spec.forProvider.disk is smaller than the boot disk, which Proxmox VE cannot shrink |
`,
  ProxmoxVMScaleSet: `Replicas carry the label \`${LABEL_SCALESET}: <name of the set>\` and the annotations \`${ANNOTATION_TEMPLATE_HASH}\` (which template they were made from) and \`${ANNOTATION_INDEX}\`.
`,
};

const INTRO = `# Field reference

Every field of the provider's kinds, generated from the TypeBox schemas in \`src/api\` (through the
CRDs that \`src/api/crd.ts\` builds from them) by \`scripts/gen-reference.ts\`: run
\`npm run gen:reference\` after changing a schema; \`test/docs/reference.test.ts\` fails when this page
is not what the generator writes. \`kubectl explain proxmoxvm.spec.forProvider\` shows the same
descriptions.

All kinds are in \`proxmox.sankofa.io/v1alpha1\`. In the tables a field is written with its full path
(\`[]\` marks the items of a list). **default** is what the API server fills in, or, in plain text,
what the provider uses when the field is not set; **allowed** is what the API server checks
(enumerations, patterns, limits and the CRD's CEL rules, with their messages).
`;

function esc(s: string): string {
  return s.replace(/\|/g, '\\|').replace(/\s*\n\s*/g, ' ');
}

function code(s: string): string {
  return `\`${esc(s)}\``;
}

function isObject(x: unknown): x is JsonSchema {
  return typeof x === 'object' && x !== null && !Array.isArray(x);
}

/** The type of a field, as Kubernetes API references write it. */
function typeOf(n: JsonSchema): string {
  if (n['x-kubernetes-int-or-string']) return 'integer or string';
  if (n['x-kubernetes-preserve-unknown-fields'] && n.type === undefined) return 'any';
  if (n.type === 'array' && isObject(n.items)) return `[]${typeOf(n.items)}`;
  if (n.type === 'object' && isObject(n.additionalProperties)) return `map[string]${typeOf(n.additionalProperties)}`;
  return String(n.type ?? 'any');
}

/** A description's last sentence `Default: X.` (the provider's default), split off. */
export function splitDefault(description: string): { text: string; default?: string } {
  const m = /(?:^|\.\s+)Default: ((?:[^.]|\.(?!\s))*?)\.?$/.exec(description);
  if (!m) return { text: description };
  const text = description.slice(0, m.index + (m[0].startsWith('.') ? 1 : 0)).trim();
  return { text, default: m[1]!.trim() };
}

function range(min: unknown, max: unknown, unit = ''): string | undefined {
  if (min !== undefined && max !== undefined) return `${min}-${max}${unit}`;
  if (min !== undefined) return `at least ${min}${unit}`;
  if (max !== undefined) return `at most ${max}${unit}`;
  return undefined;
}

/** What the API server checks on a node (not on its children). */
function constraints(n: JsonSchema): string[] {
  const out: string[] = [];
  if (Array.isArray(n.enum)) out.push(`one of ${n.enum.map((v) => code(String(v))).join(', ')}`);
  if (typeof n.pattern === 'string')
    out.push(`${n['x-kubernetes-int-or-string'] ? 'a string matches' : 'matches'} ${code(n.pattern)}`);
  const len = range(n.minLength, n.maxLength, ' characters');
  if (len) out.push(len === 'at least 1 characters' ? 'not empty' : len);
  const num = range(n.minimum, n.maximum);
  if (num) out.push(n['x-kubernetes-int-or-string'] ? `an integer is ${num}` : num);
  const items = range(n.minItems, n.maxItems, ' items');
  if (items) out.push(items === 'at least 1 items' ? 'at least 1 item' : items);
  if (typeof n.format === 'string') out.push(`format ${n.format}`);
  if (n['x-kubernetes-list-type'] === 'set') out.push('no duplicates');
  if (n['x-kubernetes-list-type'] === 'map')
    out.push(`unique by ${(n['x-kubernetes-list-map-keys'] as string[]).map((k) => code(k)).join(', ')}`);
  for (const r of (n['x-kubernetes-validations'] as ValidationRule[] | undefined) ?? [])
    out.push(`rule: ${esc(r.message)}`);
  return out;
}

/** The constraints of a scalar list's items, for the list's row. */
function itemConstraints(n: JsonSchema): string[] {
  if (n.type !== 'array' || !isObject(n.items) || n.items.type === 'object') return [];
  return constraints(n.items).map((c) => `each: ${c}`);
}

interface Row {
  path: string;
  type: string;
  default: string;
  allowed: string;
  description: string;
}

function rowsOf(kind: string, node: JsonSchema, path: string, required: boolean, rows: Row[]): void {
  const described = splitDefault(String(node.description ?? ''));
  const dflt =
    node.default !== undefined ? code(JSON.stringify(node.default)) : described.default ? esc(described.default) : '';
  const same = SAME_AS[kind]?.[path];
  const items = node.type === 'array' && isObject(node.items) ? node.items : undefined;
  const map =
    node.type === 'object' && isObject(node.additionalProperties)
      ? (node.additionalProperties as JsonSchema)
      : undefined;
  rows.push({
    path,
    type: `${typeOf(node)}${required ? ', required' : ''}`,
    default: dflt,
    allowed: [
      ...constraints(node),
      ...itemConstraints(node),
      ...(map ? constraints(map).map((c) => `each value: ${c}`) : []),
    ].join('; '),
    description: esc(`${described.text}${same ? ` Fields: ${same}.` : ''}`),
  });
  if (same) return;
  const obj = items?.type === 'object' ? items : node.type === 'object' ? node : undefined;
  if (!obj?.properties) return;
  const req = new Set((obj.required as string[] | undefined) ?? []);
  const prefix = items ? `${path}[]` : path;
  for (const [k, v] of Object.entries(obj.properties as Record<string, JsonSchema>)) {
    rowsOf(kind, v, `${prefix}.${k}`, req.has(k), rows);
  }
}

function table(rows: Row[]): string {
  const lines = ['| field | type | default | allowed | description |', '|---|---|---|---|---|'];
  for (const r of rows) lines.push(`| \`${r.path}\` | ${r.type} | ${r.default} | ${r.allowed} | ${r.description} |`);
  return `${lines.join('\n')}\n`;
}

function columns(cols: PrinterColumn[]): string {
  const main = cols.filter((c) => !c.priority).map((c) => c.name);
  const wide = cols.filter((c) => c.priority).map((c) => c.name);
  return `${main.join(', ')}${wide.length ? `; with \`-o wide\` also ${wide.join(', ')}` : ''}`;
}

function section(crd: CustomResourceDefinition): string {
  const { names, scope } = crd.spec;
  const version = crd.spec.versions[0]!;
  const root = version.schema.openAPIV3Schema;
  const out: string[] = [`## ${names.kind}`, '', esc(String(root.description ?? '')), ''];
  out.push(
    `\`apiVersion: ${crd.spec.group}/${version.name}\`, \`kind: ${names.kind}\`; ${scope === 'Namespaced' ? 'namespaced' : 'cluster-scoped'}; categories ${names.categories.map((c) => code(c)).join(', ')}. \`kubectl get ${names.plural}\` shows ${columns(version.additionalPrinterColumns)}.`,
  );
  const sub = Object.keys(version.subresources ?? {});
  if (sub.length) out.push(`Subresources: ${sub.join(', ')}.`);
  const rules = (root['x-kubernetes-validations'] as ValidationRule[] | undefined) ?? [];
  if (rules.length) {
    out.push('', 'Rules on the whole object:', '');
    for (const r of rules)
      out.push(`- ${r.fieldPath ? `${code(r.fieldPath.replace(/^\./, ''))}: ` : ''}${esc(r.message)}`);
  }
  out.push('');
  const rows: Row[] = [];
  const req = new Set((root.required as string[] | undefined) ?? []);
  for (const [k, v] of Object.entries(root.properties as Record<string, JsonSchema>)) {
    if (k === 'apiVersion' || k === 'kind' || k === 'metadata') continue;
    rowsOf(names.kind, v, k, req.has(k), rows);
  }
  out.push(table(rows));
  const notes = NOTES[names.kind];
  if (notes) out.push(notes);
  return out.join('\n');
}

/** The whole page. */
export function renderReference(): string {
  const all = crds();
  const toc = all.map((c) => `- [${c.spec.names.kind}](#${c.spec.names.kind.toLowerCase()})`).join('\n');
  return `${[INTRO, toc, '', ...all.map(section)]
    .join('\n')
    .replace(/\n{3,}/g, '\n\n')
    .trimEnd()}\n`;
}

function main(): void {
  const root = join(dirname(fileURLToPath(import.meta.url)), '..');
  const file = join(root, REFERENCE_FILE);
  const text = renderReference();
  const current = existsSync(file) ? readFileSync(file, 'utf8') : undefined;
  if (process.argv.includes('--check')) {
    if (current === text) {
      console.log(`${REFERENCE_FILE} is up to date`);
      return;
    }
    console.error(
      `${REFERENCE_FILE}: ${current === undefined ? 'missing' : 'differs from the generated page'}\nRun: npm run gen:reference`,
    );
    process.exit(1);
  }
  if (current === text) return;
  writeFileSync(file, text);
  console.log(`wrote ${REFERENCE_FILE}`);
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main();
