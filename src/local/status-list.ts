/**
 * The machine-readable documents of `status`, `apply` and `status --live` (`-o json|yaml`): one
 * TypeBox source for the TypeScript types, the JSON Schema and the check the tests (and anyone
 * reading our output) can run. Every value is typed (numbers, booleans, RFC 3339 times, lists),
 * every key is always present (`null` when not known), so `jq '.items[] | select(.ready == false)'`
 * works without guessing. docs/output.md documents the fields and the compatibility promise.
 */
import Type, { type Static } from 'typebox';
import Value from 'typebox/value';
import type { LiveRow, LiveView } from './render.ts';
import type { Row } from './resource-view.ts';

/** The version of these documents: a field removed, renamed or retyped makes it v2. */
export const OUTPUT_API_VERSION = 'provider-proxmox/v1';

const Nullable = <T extends Type.TSchema>(t: T, description: string) => Type.Union([t, Type.Null()], { description });
const Time = Type.String({ format: 'date-time' });

export const StatusItemSchema = Type.Object(
  {
    namespace: Type.String({ description: 'metadata.namespace of the ProxmoxVM.' }),
    name: Type.String({ description: 'metadata.name of the ProxmoxVM.' }),
    phase: Nullable(Type.String(), 'The rollout phase (annotation proxmox.sankofa.io/phase); null: none.'),
    site: Nullable(Type.String(), 'The site the VM is (to be) on; null while not known.'),
    node: Nullable(Type.String(), 'The Proxmox node; null while not placed.'),
    vmid: Nullable(Type.Integer(), 'The VMID; null before one is reserved.'),
    state: Nullable(Type.String(), "Proxmox's status of the VM (running, stopped...); null before it exists."),
    ipAddresses: Type.Array(Type.String(), { description: 'Addresses the guest agent reported (may be empty).' }),
    ready: Nullable(Type.Boolean(), 'The Ready condition; null: Unknown.'),
    synced: Nullable(Type.Boolean(), 'The Synced condition; null: Unknown.'),
    step: Type.String({
      description: 'What the provider is doing: Pending, Create, Import, Start..., Ready; Deleting[/step].',
    }),
    pendingChanges: Type.Array(Type.String(), {
      description: 'Config keys Proxmox holds until the next boot (status.atProvider.pendingChanges).',
    }),
    pendingReboot: Type.Boolean({ description: 'Whether a reboot is needed for the spec to take effect.' }),
    createdAt: Nullable(Time, 'metadata.creationTimestamp (RFC 3339).'),
    ageSeconds: Nullable(Type.Integer({ minimum: 0 }), 'Seconds from createdAt to the generatedAt of the list.'),
    reason: Nullable(Type.String(), 'Why it is not Ready or not Synced (a condition reason); null when fine.'),
    message: Nullable(Type.String(), 'What is wrong and how to fix it; null when fine.'),
  },
  { additionalProperties: false },
);
export type StatusItem = Static<typeof StatusItemSchema>;

export const StatusListSchema = Type.Object(
  {
    apiVersion: Type.Literal(OUTPUT_API_VERSION),
    kind: Type.Literal('StatusList'),
    generatedAt: Time,
    items: Type.Array(StatusItemSchema),
  },
  { additionalProperties: false },
);
export type StatusList = Static<typeof StatusListSchema>;

export const LiveItemSchema = Type.Object(
  {
    namespace: Type.String(),
    name: Type.String(),
    site: Type.String(),
    node: Type.String(),
    vmid: Type.Integer(),
    state: Type.String({ description: "Proxmox's status (running, stopped), or template." }),
    lock: Nullable(Type.String(), 'The Proxmox lock (create, clone, backup...); null: none.'),
    inState: Nullable(Type.Boolean(), 'Whether the state file knows this VM; null without a state file.'),
    marker: Type.Union([Type.Literal('current'), Type.Literal('legacy')], {
      description: 'legacy: the first marker format (no installation in it).',
    }),
    uid: Type.String({ description: 'The resource uid the ownership marker names.' }),
  },
  { additionalProperties: false },
);
export type LiveItem = Static<typeof LiveItemSchema>;

export const LiveStatusSchema = Type.Object(
  {
    apiVersion: Type.Literal(OUTPUT_API_VERSION),
    kind: Type.Literal('LiveStatus'),
    generatedAt: Time,
    installation: Type.String(),
    stateFile: Nullable(Type.String(), 'The state file inState compares with; null: none.'),
    items: Type.Array(LiveItemSchema),
    elsewhere: Type.Array(
      Type.Object(
        { installation: Type.String(), site: Type.String(), vms: Type.Integer() },
        { additionalProperties: false },
      ),
    ),
    copies: Type.Array(
      Type.Object(
        {
          site: Type.String(),
          node: Type.String(),
          vmid: Type.Integer(),
          namespace: Type.String(),
          name: Type.String(),
          writtenFor: Type.Integer({ description: 'The VMID the copied marker was written for.' }),
        },
        { additionalProperties: false },
      ),
    ),
    errors: Type.Array(Type.Object({ site: Type.String(), message: Type.String() }, { additionalProperties: false })),
  },
  { additionalProperties: false },
);
export type LiveStatus = Static<typeof LiveStatusSchema>;

const orNull = (s: string | undefined): string | null => (s ? s : null);
const condition = (s: string): boolean | null => (s === 'True' ? true : s === 'False' ? false : null);
/** A VMID as a number; an external name that is no whole number (InvalidExternalName) is null. */
const vmidOf = (s: string): number | null => (/^\d+$/.test(s) ? Number(s) : null);
const rfc3339 = (ms: number): string => new Date(ms).toISOString().replace(/\.\d+Z$/, 'Z');

/** One table row as its typed item; `now` is the list's generatedAt (ms). */
export function statusItem(r: Row, now: number): StatusItem {
  const created = r.createdAt ? Date.parse(r.createdAt) : Number.NaN;
  return {
    namespace: r.namespace,
    name: r.name,
    phase: orNull(r.phase),
    site: orNull(r.site),
    node: orNull(r.node),
    vmid: vmidOf(r.vmid),
    state: orNull(r.state),
    ipAddresses: [...r.ipAddresses],
    ready: condition(r.ready),
    synced: condition(r.synced),
    step: r.step,
    pendingChanges: [...r.pendingChanges],
    pendingReboot: r.pendingReboot,
    createdAt: Number.isNaN(created) ? null : rfc3339(created),
    ageSeconds: Number.isNaN(created) ? null : Math.max(0, Math.floor((now - created) / 1000)),
    reason: orNull(r.reason),
    message: orNull(r.message),
  };
}

export function statusList(rows: Row[], now = Date.now()): StatusList {
  return {
    apiVersion: OUTPUT_API_VERSION,
    kind: 'StatusList',
    generatedAt: rfc3339(now),
    items: rows.map((r) => statusItem(r, now)),
  };
}

const splitKey = (key: string): { namespace: string; name: string } => {
  const i = key.indexOf('/');
  return i < 0 ? { namespace: 'default', name: key } : { namespace: key.slice(0, i), name: key.slice(i + 1) };
};

function liveItem(r: LiveRow): LiveItem {
  return {
    ...splitKey(r.name),
    site: r.site,
    node: r.node,
    vmid: r.vmid,
    state: r.state,
    lock: orNull(r.lock),
    inState: r.inState === 'yes' ? true : r.inState === 'no' ? false : null,
    marker: r.marker,
    uid: r.uid,
  };
}

export function liveStatus(v: LiveView, now = Date.now()): LiveStatus {
  return {
    apiVersion: OUTPUT_API_VERSION,
    kind: 'LiveStatus',
    generatedAt: rfc3339(now),
    installation: v.installation,
    stateFile: v.stateFile ?? null,
    items: v.vms.map(liveItem),
    elsewhere: v.elsewhere.map((e) => ({ ...e })),
    copies: v.copies.map(({ name, ...c }) => ({
      site: c.site,
      node: c.node,
      vmid: c.vmid,
      ...splitKey(name),
      writtenFor: c.writtenFor,
    })),
    errors: v.errors.map((e) => ({ ...e })),
  };
}

/** Why `value` is not a valid document of `schema`: the first few errors, `path: message`. */
export function schemaErrors(schema: Type.TSchema, value: unknown): string[] {
  return [...Value.Errors(schema, value)].slice(0, 5).map((e) => `${e.instancePath || '/'}: ${e.message}`);
}

/** Parse `status -o json` (or apply's final document): throws when it is not a valid StatusList. */
export function parseStatusList(text: string): StatusList {
  const v: unknown = JSON.parse(text);
  const errors = schemaErrors(StatusListSchema, v);
  if (errors.length) throw new Error(`not a ${OUTPUT_API_VERSION} StatusList: ${errors.join('; ')}`);
  return v as StatusList;
}
