/**
 * ProxmoxVM spec -> what Proxmox should hold: validation with the seed's limits (step 1 of the
 * flow), the desired config keys, and the ownership marker.
 */
import { parse as parseYaml } from 'yaml';
import { BRIDGE_PATTERN, type ForProvider, LIMITS, MESSAGES, NAME_PATTERN, type ProxmoxVM } from '../api/proxmoxvm.ts';
import { GiB, MiB, parseQuantity } from '../api/quantity.ts';

export const OWNER_TAG = 'provider-proxmox';
export const MARKER_PREFIX = 'provider-proxmox.owner:';

export interface Problem {
  /** Field path, e.g. `spec.forProvider.memory`. */
  field: string;
  message: string;
}

const FP = 'spec.forProvider';

export function vmName(r: ProxmoxVM): string {
  return r.spec.forProvider.name ?? r.metadata.name;
}

export function memoryBytes(fp: ForProvider): number | undefined {
  return fp.memory === undefined ? 2048 * MiB : parseQuantity(fp.memory, MiB);
}

/** The VM's vCPUs: cores times sockets (PVE's defaults 1 and 1). */
export function vcpus(fp: ForProvider): number {
  return (fp.cpu ?? 1) * (fp.sockets ?? 1);
}

export function diskBytes(fp: ForProvider): number | undefined {
  return fp.disk === undefined ? undefined : parseQuantity(fp.disk, GiB);
}

/**
 * The whole GiB a disk of `bytes` is made or grown to (PVE's `storage:N` and resize `NG`): the
 * next one up, never less than asked. Rounded to the nearest, `10.4Gi` was resized to 10G, which
 * stayed short of the spec, and every reconcile resized to 10G again (PVE writes nothing for a
 * resize to the size it has: qemu-server Qemu.pm resize_vm), reported as a stale config.
 */
export function wholeGiB(bytes: number): number {
  return Math.max(1, Math.ceil(bytes / GiB));
}

/** scsi0 of a VM made with no image nor template and no `disk` (create.ts). */
export const BLANK_DISK_BYTES = 20 * GiB;

/** A disk as its storage will hold it: where, how many bytes, and the spec field that names the storage. */
export interface DiskAllocation {
  storage: string;
  bytes: number;
  /** Under spec.forProvider: `storage` or `disks[i].storage`. */
  field: string;
}

/**
 * What the VM's disks take on their storages once made, each in whole GiB up as PVE makes them
 * (wholeGiB): scsi0 first (0 bytes when the spec leaves its size to the image or template), then
 * each extra disk. Capacity checks (preflight's, `plan`'s) count these, not the bytes asked: ten
 * disks of `10.4Gi` take 110 GiB, not 104.
 */
export function diskAllocations(fp: ForProvider): DiskAllocation[] {
  const storage = fp.storage ?? 'local-lvm';
  const blank = !fp.image && !fp.template && !fp.templateRef;
  const disk = diskBytes(fp) ?? (blank ? BLANK_DISK_BYTES : undefined);
  const out: DiskAllocation[] = [{ storage, bytes: disk === undefined ? 0 : wholeGiB(disk) * GiB, field: 'storage' }];
  for (const [i, d] of (fp.disks ?? []).entries()) {
    const b = parseQuantity(d.size, GiB);
    out.push({
      storage: d.storage ?? storage,
      bytes: b === undefined ? 0 : wholeGiB(b) * GiB,
      field: `disks[${i}].storage`,
    });
  }
  return out;
}

/**
 * diskAllocations added up per storage, in order of first use (the first disk there names the
 * field): what a create needs on each storage, every disk of it at once. Checked one by one, a
 * `disk: 30Gi` and a `disks[0]` of 30Gi on one storage with 50 GiB free each passed, and PVE
 * refused the create.
 */
export function storageNeeds(fp: ForProvider): DiskAllocation[] {
  const out = new Map<string, DiskAllocation>();
  for (const d of diskAllocations(fp)) {
    const seen = out.get(d.storage);
    if (seen) seen.bytes += d.bytes;
    else out.set(d.storage, { ...d });
  }
  return [...out.values()];
}

/** Step 1: every problem of the spec, each with its field and what is allowed. */
export function validateSpec(r: ProxmoxVM): Problem[] {
  const fp = r.spec.forProvider ?? ({} as ForProvider);
  const out: Problem[] = [];
  const name = fp.name ?? r.metadata.name;
  if (name.length < LIMITS.name.min || name.length > LIMITS.name.max || !new RegExp(NAME_PATTERN).test(name)) {
    out.push({
      field: fp.name !== undefined ? `${FP}.name` : 'metadata.name',
      message: `${MESSAGES.name}; got '${name}'`,
    });
  }
  if (fp.cpu !== undefined && (!Number.isInteger(fp.cpu) || fp.cpu < LIMITS.cpu.min || fp.cpu > LIMITS.cpu.max)) {
    out.push({ field: `${FP}.cpu`, message: `${MESSAGES.cpu}; got ${fp.cpu}` });
  }
  const mem = memoryBytes(fp);
  if (mem === undefined || mem < LIMITS.memoryBytes.min || mem > LIMITS.memoryBytes.max) {
    out.push({ field: `${FP}.memory`, message: `${MESSAGES.memory}; got '${fp.memory}'` });
  }
  if (fp.disk !== undefined) {
    const d = diskBytes(fp);
    if (d === undefined || d < LIMITS.diskBytes.min || d > LIMITS.diskBytes.max)
      out.push({ field: `${FP}.disk`, message: `${MESSAGES.disk}; got '${fp.disk}'` });
  }
  for (const [i, d] of (fp.disks ?? []).entries()) {
    const b = parseQuantity(d.size, GiB);
    if (b === undefined || b < LIMITS.diskBytes.min || b > LIMITS.diskBytes.max)
      out.push({ field: `${FP}.disks[${i}].size`, message: `${MESSAGES.disk}; got '${d.size}'` });
  }
  if (fp.network !== undefined && !new RegExp(BRIDGE_PATTERN).test(fp.network))
    out.push({ field: `${FP}.network`, message: `${MESSAGES.bridge}; got '${fp.network}'` });
  for (const [i, n] of (fp.networks ?? []).entries()) {
    if (!new RegExp(BRIDGE_PATTERN).test(n.bridge))
      out.push({ field: `${FP}.networks[${i}].bridge`, message: `${MESSAGES.bridge}; got '${n.bridge}'` });
  }
  if (fp.image !== undefined && fp.template !== undefined) {
    out.push({
      field: `${FP}.template`,
      message: 'set either image (import a cloud image) or template (clone a template VM), not both',
    });
  }
  if (fp.templateRef !== undefined && (fp.image !== undefined || fp.template !== undefined)) {
    out.push({
      field: `${FP}.templateRef`,
      message: `set one of image, template and templateRef, not ${fp.image !== undefined ? 'image' : 'template'} and templateRef`,
    });
  }
  if (fp.template && fp.template.name === undefined && fp.template.vmid === undefined) {
    out.push({ field: `${FP}.template`, message: 'template needs name or vmid' });
  }
  if (fp.description?.includes(MARKER_PREFIX)) {
    out.push({
      field: `${FP}.description`,
      message: `the description may not contain '${MARKER_PREFIX}': that line is the ownership marker the provider writes itself; remove it`,
    });
  } else if (!markerRoundTrips(r)) {
    // The marker must read back as written; a namespace or name outside Kubernetes' rules would break it.
    out.push({
      field: r.metadata.namespace !== undefined ? 'metadata.namespace' : 'metadata.name',
      message: `metadata.namespace must be a DNS-1123 label and metadata.name a DNS-1123 subdomain (lowercase letters, digits, '-' and, in names, '.'); got '${r.metadata.namespace ?? ''}/${r.metadata.name}'`,
    });
  }
  if (fp.image !== undefined && !/^([^:\s/]+:)?[^\s]+$/.test(fp.image)) {
    out.push({
      field: `${FP}.image`,
      message: `image must be a volume id (local:import/ubuntu.qcow2) or a file name (ubuntu-22.04-cloud.img); got '${fp.image}'`,
    });
  }
  return out;
}

/**
 * Where a marker is written: the installation the VM belongs to and the VMID it is written for.
 * A VM whose marker names another VMID is a copy (an operator's clone of one of ours copies the
 * description), never the resource's own VM.
 */
export interface MarkerPlace {
  installation: string;
  vmid: number;
}

/** An ownership marker as read back. `vmid` and `installation` are absent in the first format. */
export interface Marker {
  namespace?: string;
  name: string;
  uid: string;
  vmid?: number;
  installation?: string;
}

/**
 * The description line that marks a VM as ours:
 * `provider-proxmox.owner: <namespace>/<name> uid=<uid> vmid=<vmid> installation=<id>`.
 */
export function ownershipMarker(r: ProxmoxVM, at: MarkerPlace): string {
  const ns = r.metadata.namespace ? `${r.metadata.namespace}/` : '';
  return `${MARKER_PREFIX} ${ns}${r.metadata.name} uid=${r.metadata.uid} vmid=${at.vmid} installation=${at.installation}`;
}

/**
 * The marker is the *last* line of the description and must match its grammar exactly (names as
 * Kubernetes allows them): a line that a user wrote into the description above it can never be
 * taken for it. The first format (`… uid=<uid>`, before installations) is still read.
 */
const MARKER_RE =
  /^provider-proxmox\.owner: (?:([a-z0-9]([-a-z0-9]*[a-z0-9])?)\/)?([a-z0-9]([-a-z0-9.]*[a-z0-9])?) uid=([0-9a-zA-Z-]+)(?: vmid=([1-9][0-9]{2,8}) installation=([a-z0-9](?:[-a-z0-9.]*[a-z0-9])?))?$/;

/** The owner a description's marker names, or undefined. */
export function parseMarker(description: string | undefined): Marker | undefined {
  if (!description) return undefined;
  const lines = description.replace(/\s+$/, '').split('\n');
  const m = MARKER_RE.exec(lines[lines.length - 1]!.trim());
  if (!m) return undefined;
  return {
    ...(m[1] ? { namespace: m[1] } : {}),
    name: m[3]!,
    uid: m[5]!,
    ...(m[6] ? { vmid: Number(m[6]), installation: m[7]! } : {}),
  };
}

/** `namespace/name` of a marker (or of a resource's metadata), as status and gc print it. */
export function ownerKey(o: { namespace?: string | undefined; name: string }): string {
  return `${o.namespace ? `${o.namespace}/` : ''}${o.name}`;
}

/** Whether a marker names this resource (namespace/name) in this installation at this VMID (any uid). */
export function markerNames(m: Marker | undefined, r: ProxmoxVM, at: MarkerPlace): boolean {
  return (
    m !== undefined &&
    m.installation === at.installation &&
    m.vmid === at.vmid &&
    m.name === r.metadata.name &&
    (m.namespace ?? '') === (r.metadata.namespace ?? '')
  );
}

/** Whether the marker written for `r` reads back as exactly its namespace, name and uid. */
function markerRoundTrips(r: ProxmoxVM): boolean {
  const m = parseMarker(
    ownershipMarker(
      { ...r, metadata: { ...r.metadata, uid: r.metadata.uid || '0' } },
      { vmid: 100, installation: 'x' },
    ),
  );
  return (
    m !== undefined &&
    m.name === r.metadata.name &&
    (m.namespace ?? '') === (r.metadata.namespace ?? '') &&
    r.metadata.name.length <= 253 &&
    (r.metadata.namespace ?? '').length <= 63 &&
    !(r.metadata.namespace ?? '').includes('.')
  );
}

export function markerUid(description: string | undefined): string | undefined {
  return parseMarker(description)?.uid;
}

/**
 * The description PVE should hold: the user's text, then the marker. A marker that already names
 * this resource at this place is kept as it is (its uid may be another incarnation's: a second
 * state file, a re-created Kubernetes object), so that two runtimes of one installation never
 * rewrite it in turn; any other marker (the first format, another place) is replaced by ours.
 */
export function desiredDescription(r: ProxmoxVM, at: MarkerPlace, current?: string): string {
  const have = parseMarker(current);
  const marker = markerNames(have, r, at)
    ? current!.replace(/\s+$/, '').split('\n').at(-1)!.trim()
    : ownershipMarker(r, at);
  const d = r.spec.forProvider.description?.trimEnd();
  return d ? `${d}\n\n${marker}` : marker;
}

/** Whether a VM config's `agent` option turns the guest agent on (`1`, `enabled=1,...`). */
export function agentEnabled(agent: string | undefined): boolean {
  return /^(1|enabled=1)/.test(agent ?? '');
}

/** The locks a create or clone holds until its worker has written the final config. */
export function isPlaceholderLock(lock: string | undefined): lock is 'create' | 'clone' {
  return lock === 'create' || lock === 'clone';
}

/** Whether a `/cluster/resources` tags value (`a;b`, PVE also accepts `,` and spaces) holds OWNER_TAG. */
export function hasOwnerTag(tags: string | undefined): boolean {
  // (The substring test first: it runs for every VM of every bulk list, list-index.ts.)
  return tags?.includes(OWNER_TAG) === true && tags.split(/[;,\s]/).includes(OWNER_TAG);
}

export function desiredTags(r: ProxmoxVM): string {
  const tags = new Set((r.spec.forProvider.tags ?? []).map((t) => t.toLowerCase()));
  tags.add(OWNER_TAG);
  return [...tags].sort().join(';');
}

export interface NetSpec {
  key: string;
  bridge: string;
  model: string;
  vlan?: number;
  firewall?: boolean;
  mtu?: number;
  macaddr?: string;
}

export function desiredNets(fp: ForProvider): NetSpec[] {
  const list = fp.networks?.length ? fp.networks : [{ bridge: fp.network ?? 'vmbr0' }];
  return list.map((n, i) => ({
    key: `net${i}`,
    bridge: n.bridge,
    model: ('model' in n && n.model) || 'virtio',
    ...('vlan' in n && n.vlan !== undefined ? { vlan: n.vlan } : {}),
    ...('firewall' in n && n.firewall !== undefined ? { firewall: n.firewall } : {}),
    ...('mtu' in n && n.mtu !== undefined ? { mtu: n.mtu } : {}),
    ...('macaddr' in n && n.macaddr ? { macaddr: n.macaddr.toUpperCase() } : {}),
  }));
}

/** `virtio=MAC,bridge=vmbr0,firewall=1,mtu=9000,tag=5` (MAC kept from `currentMac` when not specified). */
export function printNet(n: NetSpec, currentMac?: string): string {
  const mac = n.macaddr ?? currentMac;
  const parts = [mac ? `${n.model}=${mac}` : n.model, `bridge=${n.bridge}`];
  if (n.firewall) parts.push('firewall=1');
  if (n.mtu !== undefined) parts.push(`mtu=${n.mtu}`);
  if (n.vlan !== undefined) parts.push(`tag=${n.vlan}`);
  return parts.join(',');
}

export function parseNetValue(v: string): { model: string; mac?: string; opts: Record<string, string> } {
  const opts: Record<string, string> = {};
  let model = 'virtio';
  let mac: string | undefined;
  for (const [i, part] of v.split(',').entries()) {
    const eq = part.indexOf('=');
    const k = eq < 0 ? part : part.slice(0, eq);
    const val = eq < 0 ? '' : part.slice(eq + 1);
    if (i === 0 && (eq < 0 || /^[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}$/.test(val))) {
      model = k;
      if (val) mac = val;
    } else if (k === 'model') model = val;
    else if (k === 'macaddr') mac = val;
    else opts[k] = val;
  }
  return { model, ...(mac ? { mac } : {}), opts };
}

/** Sizes as qemu-server prints them (`size=20G`) -> bytes. */
export function parsePveSize(s: string | undefined): number | undefined {
  if (!s) return undefined;
  const m = /^(\d+(?:\.\d+)?)([KMGT]?)$/.exec(s);
  if (!m) return undefined;
  const f = { '': 1, K: 1024, M: MiB, G: GiB, T: 1024 * GiB }[m[2] as '' | 'K' | 'M' | 'G' | 'T'];
  return Math.round(Number(m[1]) * f);
}

/** A drive's volume: its first field, or its `file=` (`local-lvm:vm-100-disk-0`). */
export function driveVolume(value: string): string {
  const first = value.split(',')[0] ?? '';
  return first.includes('=') ? (/(?:^|,)file=([^,]+)/.exec(value)?.[1] ?? '') : first;
}

/**
 * A volume as a storage's listing can name it: its storage and its own name. lvm-thin lists a
 * linked clone's LV by its own name (`local-lvm:vm-100-disk-0`) where the config names it with its
 * base (`local-lvm:base-9000-disk-0/vm-100-disk-0`: pve-storage LvmThinPlugin.pm:170-181 at
 * 0c56bad); a directory storage and RBD list the whole path. Compared whole, such a disk was
 * not found (disk-missing.ts would have reported it gone, disk-size.ts never stale).
 */
export function listedAs(volid: string): string {
  const colon = volid.indexOf(':');
  const name = volid.slice(colon + 1);
  return `${volid.slice(0, colon)}:${name.slice(name.lastIndexOf('/') + 1)}`;
}

/** The size of a drive value (`local-lvm:vm-100-disk-0,iothread=1,size=20G`), in bytes. */
export function driveSize(value: string): number | undefined {
  return parsePveSize(/(?:^|,)size=([^,]+)/.exec(value)?.[1]);
}

/** The options of an additional disk (`iothread=1`, `discard=on`, `ssd=1`). */
export function diskOptions(d: { iothread?: boolean; discard?: boolean; ssd?: boolean }): string[] {
  return [d.iothread ? 'iothread=1' : '', d.discard ? 'discard=on' : '', d.ssd ? 'ssd=1' : ''].filter(Boolean);
}

/** Cloud-init `ipconfigN` values. */
export function desiredIpConfigs(fp: ForProvider, nets: number): string[] {
  const cfg = fp.cloudInit?.ipConfig;
  const out: string[] = [];
  for (let i = 0; i < nets; i++) {
    const c = cfg?.[i];
    if (!c || c.dhcp || !c.address) out.push('ip=dhcp');
    else out.push(`ip=${c.address}${c.gateway ? `,gw=${c.gateway}` : ''}`);
  }
  return out;
}

/** What parseUserData finds in a userData; shared between callers, so read-only. */
export interface UserDataKeys {
  readonly user?: string;
  readonly sshKeys: readonly string[];
  readonly unsupported: readonly string[];
}

/**
 * A userData's YAML parsed once, for every reconcile of every resource that holds it: each
 * reconcile asks for it (needsSnippet, the snippet, drift, the guest step), and parsing the seed
 * fleet's documents again at each one was the client's largest CPU cost in a rollout. Bounded
 * (the oldest entry goes), keyed by the text itself, which the resources already hold.
 */
const USER_DATA_CACHE_SIZE = 4096;
const parsedDocs = new Map<string, { doc: unknown } | { error: true }>();
const parsedKeys = new Map<string, UserDataKeys>();

function remember<V>(cache: Map<string, V>, key: string, value: V): V {
  if (cache.size >= USER_DATA_CACHE_SIZE) cache.delete(cache.keys().next().value as string);
  cache.set(key, value);
  return value;
}

/** Deeply frozen, so that no holder of the shared document can change it for the others. */
function deepFreeze<T>(v: T): T {
  if (v && typeof v === 'object' && !Object.isFrozen(v)) {
    Object.freeze(v);
    for (const x of Object.values(v)) deepFreeze(x);
  }
  return v;
}

/** A userData's YAML document (deeply frozen, shared), or `error` when it is not valid YAML. */
export function userDataDocument(userData: string): { doc: unknown } | { error: true } {
  const known = parsedDocs.get(userData);
  if (known) return known;
  let parsed: { doc: unknown } | { error: true };
  try {
    parsed = { doc: deepFreeze(parseYaml(userData) as unknown) };
  } catch {
    parsed = { error: true };
  }
  return remember(parsedDocs, userData, parsed);
}

/** What a `#cloud-config` userData can give the native cloud-init keys; the rest is reported. */
export function parseUserData(userData: string | undefined): UserDataKeys {
  if (!userData?.trim()) return NO_USER_DATA;
  return parsedKeys.get(userData) ?? remember(parsedKeys, userData, Object.freeze(userDataKeys(userData)));
}

const NO_USER_DATA: UserDataKeys = Object.freeze({ sshKeys: Object.freeze([]), unsupported: Object.freeze([]) });

function userDataKeys(userData: string): UserDataKeys {
  const out = { sshKeys: [] as string[], unsupported: [] as string[] } as {
    user?: string;
    sshKeys: string[];
    unsupported: string[];
  };
  const parsed = userDataDocument(userData);
  if ('error' in parsed) {
    out.unsupported.push('userData (not valid YAML)');
    return out;
  }
  const doc = parsed.doc;
  if (!doc || typeof doc !== 'object' || Array.isArray(doc)) {
    out.unsupported.push('userData (not a #cloud-config mapping)');
    return out;
  }
  const native = new Set(['users', 'ssh_authorized_keys', 'hostname', 'fqdn', 'manage_etc_hosts', 'preserve_hostname']);
  const d = doc as Record<string, unknown>;
  const keys = (v: unknown) => (Array.isArray(v) ? v.filter((k): k is string => typeof k === 'string') : []);
  out.sshKeys.push(...keys(d.ssh_authorized_keys));
  if (Array.isArray(d.users)) {
    for (const u of d.users) {
      if (u && typeof u === 'object' && typeof (u as { name?: unknown }).name === 'string') {
        out.user ??= (u as { name: string }).name;
        out.sshKeys.push(...keys((u as { ssh_authorized_keys?: unknown }).ssh_authorized_keys));
      }
    }
  }
  for (const k of Object.keys(d)) if (!native.has(k)) out.unsupported.push(k);
  Object.freeze(out.sshKeys);
  Object.freeze(out.unsupported);
  return out;
}

/**
 * Whether this resource's userData needs a snippet: it holds keys the API cannot set, the user did
 * not name a snippet of their own, and userDataMode is not NativeOnly.
 */
export function needsSnippet(r: ProxmoxVM): boolean {
  const fp = r.spec.forProvider;
  if (fp.cloudInit?.userDataSnippet || fp.cloudInit?.userDataMode === 'NativeOnly') return false;
  return parseUserData(fp.userData).unsupported.length > 0;
}
