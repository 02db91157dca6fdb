/** Helpers for qemu-server config values: property strings, drives, NICs, tags, typed output. */
import { createHash } from 'node:crypto';
import type { SnapshotState } from './guest-state.ts';
import type { ProfileFacts } from './profiles.ts';

export const DRIVE_KEY_RE = /^(ide\d|sata\d+|scsi\d+|virtio\d+|efidisk0|tpmstate0)$/;
export const NET_KEY_RE = /^net\d+$/;
export const UNUSED_KEY_RE = /^unused\d+$/;
/** qemu-server's `$NEW_DISK_RE`: `STORAGE:SIZE_IN_GiB`. */
export const NEW_DISK_RE = /^(([^/:\s]+):)?(\d+(\.\d+)?)$/;
export const NIC_MODELS = [
  'e1000',
  'e1000-82540em',
  'e1000-82544gc',
  'e1000-82545em',
  'e1000e',
  'i82551',
  'i82557b',
  'i82559er',
  'ne2k_isa',
  'ne2k_pci',
  'pcnet',
  'rtl8139',
  'virtio',
  'vmxnet3',
];

export interface PropString {
  /** The value of the default key (a drive's file, a NIC's model) if given without `key=`. */
  head?: string;
  opts: Array<[string, string]>;
}

export function parseProp(value: string): PropString {
  const out: PropString = { opts: [] };
  value.split(',').forEach((part, i) => {
    const eq = part.indexOf('=');
    if (i === 0 && eq < 0) out.head = part;
    else if (eq < 0) out.opts.push([part, '']);
    else out.opts.push([part.slice(0, eq), part.slice(eq + 1)]);
  });
  return out;
}

export function getOpt(p: PropString, key: string): string | undefined {
  return p.opts.find(([k]) => k === key)?.[1];
}

export function setOpt(p: PropString, key: string, value: string | undefined): void {
  const i = p.opts.findIndex(([k]) => k === key);
  if (value === undefined) {
    if (i >= 0) p.opts.splice(i, 1);
  } else if (i >= 0) p.opts[i] = [key, value];
  else p.opts.push([key, value]);
}

export interface DriveSpec {
  file: string;
  p: PropString;
}

export function parseDrive(value: string): DriveSpec {
  const p = parseProp(value);
  const file = p.head ?? getOpt(p, 'file') ?? '';
  if (p.head === undefined) setOpt(p, 'file', undefined);
  p.head = file;
  return { file, p };
}

export function isCdrom(d: DriveSpec): boolean {
  return getOpt(d.p, 'media') === 'cdrom' || d.file === 'cdrom' || d.file === 'none';
}

export function isCloudinit(d: DriveSpec): boolean {
  return /(^|:)(vm-\d+-)?cloudinit(\.qcow2)?$/.test(d.file);
}

export interface NicSpec {
  model: string;
  mac?: string;
  p: PropString;
}

export function parseNic(value: string): NicSpec {
  const p = parseProp(value);
  let model = getOpt(p, 'model');
  let mac = getOpt(p, 'macaddr');
  if (p.head !== undefined) {
    model = p.head;
    p.head = undefined;
  }
  for (const m of NIC_MODELS) {
    const v = getOpt(p, m);
    if (v !== undefined) {
      model = m;
      mac = v || undefined;
      setOpt(p, m, undefined);
    }
  }
  setOpt(p, 'model', undefined);
  setOpt(p, 'macaddr', undefined);
  return { model: model ?? 'virtio', ...(mac ? { mac } : {}), p };
}

export function printNic(n: NicSpec): string {
  const rest = n.p.opts.map(([k, v]) => `${k}=${v}`);
  return [`${n.model}=${n.mac ?? ''}`, ...rest].join(',');
}

/** `get_unique_tags`: lower-case, sorted, unique, `;`-joined. */
export function normalizeTags(tags: string): string {
  const list = tags
    .split(/[;,\s]+/)
    .map((t) => t.trim().toLowerCase())
    .filter(Boolean);
  return [...new Set(list)].sort().join(';');
}

/** Config keys whose values are numbers in API answers (schema type integer/number/boolean). */
const NUMERIC_KEYS = new Set([
  'acpi',
  'autostart',
  'balloon',
  'cores',
  'cpulimit',
  'cpuunits',
  'freeze',
  'keephugepages',
  'kvm',
  'localtime',
  'migrate_downtime',
  'migrate_speed',
  'numa',
  'onboot',
  'protection',
  'reboot',
  'shares',
  'sockets',
  'tablet',
  'template',
  'vcpus',
]);

/** `memory` in MiB (`4096` or, from PVE 8.1, `current=4096`); 512 when unset. */
export function configMemoryMiB(config: Record<string, string>): number {
  return Number.parseInt((config.memory ?? '512').replace(/^current=/, ''), 10);
}

/** vCPUs: `cores` x `sockets`. */
export function configCpus(config: Record<string, string>): number {
  return Number(config.cores ?? 1) * Number(config.sockets ?? 1);
}

/** A config as GET config answers it: typed values, hidden password. */
export function typedConfig(config: Record<string, string>, profile: ProfileFacts): Record<string, string | number> {
  const out: Record<string, string | number> = {};
  for (const [k, v] of Object.entries(config)) {
    if (k === 'cipassword') out[k] = '**********';
    else if (NUMERIC_KEYS.has(k) && v !== '' && Number.isFinite(Number(v))) out[k] = Number(v);
    else if (k === 'memory' && !profile.memoryString && /^\d+$/.test(v)) out[k] = Number(v);
    else out[k] = v;
  }
  return out;
}

/** The privilege `check_vm_modify_config_perm` asks for a config key. */
export function privForKey(key: string): string {
  if (DRIVE_KEY_RE.test(key) || UNUSED_KEY_RE.test(key)) return 'VM.Config.Disk';
  if (NET_KEY_RE.test(key)) return 'VM.Config.Network';
  if (/^(cores|sockets|vcpus|cpu|cpulimit|cpuunits|affinity|numa\d*)$/.test(key)) return 'VM.Config.CPU';
  if (/^(memory|balloon|shares|hugepages)$/.test(key)) return 'VM.Config.Memory';
  if (CLOUDINIT_KEYS.test(key)) return 'VM.Config.Cloudinit';
  if (
    /^(name|description|onboot|startup|tags|protection|agent|ostype|boot|bootdisk|hotplug|tablet|localtime|keyboard|acpi|kvm|freeze|reboot|startdate|vmstatestorage|hookscript)$/.test(
      key,
    )
  ) {
    return 'VM.Config.Options';
  }
  return 'VM.Config.HWType';
}

/** Keys qemu-server applies at once even while the VM runs (`$fast_plug_option`). */
export const FAST_PLUG = new Set([
  'name',
  'description',
  'onboot',
  'protection',
  'startup',
  'tags',
  'lock',
  'vmstatestorage',
  'hookscript',
  'agent',
]);
/**
 * Cloud-init keys (`$confdesc_cloudinit`). On a running VM they are fast-plug from qemu-server
 * 7.2-8 (recorded in `[special:cloudinit]` until the drive is regenerated, ./cloudinit.ts); in 6.4
 * they stay pending until the next start.
 */
export const CLOUDINIT_KEYS =
  /^(ciuser|cipassword|citype|cicustom|ipconfig\d+|sshkeys|nameserver|searchdomain|ciupgrade)$/;

/** A crypt(3)-looking hash, as qemu-server stores `cipassword`. */
export function fakeCrypt(pw: string, salt: string): string {
  return `$5$${salt}$${createHash('sha256').update(`${salt}:${pw}`).digest('base64').replace(/[+=/]/g, '').slice(0, 43)}`;
}

/** The config file's digest: a SHA-1 of the file as write_vm_config writes it. */
export function configDigest(
  config: Record<string, string>,
  pending: Record<string, string>,
  pendingDelete: Set<string>,
  snapshots?: ReadonlyMap<string, SnapshotState>,
  cloudinit?: Record<string, string>,
): string {
  let text = '';
  for (const [k, v] of Object.entries(config)) {
    if (k === 'description') text = `#${v.replace(/\n/g, '\n#')}\n${text}`;
    else text += `${k}: ${v}\n`;
  }
  const pend = Object.entries(pending);
  if (pend.length || pendingDelete.size) {
    text += '\n[PENDING]\n';
    for (const [k, v] of pend) text += `${k}: ${v}\n`;
    if (pendingDelete.size) text += `delete: ${[...pendingDelete].join(',')}\n`;
  }
  // write_vm_config: special sections between [PENDING] and the snapshots (QemuServer.pm:2183-2187).
  if (cloudinit && Object.keys(cloudinit).length) {
    text += '\n[special:cloudinit]\n';
    for (const [k, v] of Object.entries(cloudinit)) text += `${k}: ${v}\n`;
  }
  // The digest is over the whole file, snapshot sections included (write_vm_config order).
  for (const [name, snap] of snapshots ?? []) {
    text += `\n[${name}]\n`;
    if (snap.description !== undefined) text += `#${snap.description.replace(/\n/g, '\n#')}\n`;
    for (const [k, v] of Object.entries(snap.config)) text += `${k}: ${v}\n`;
    if (snap.parent) text += `parent: ${snap.parent}\n`;
    text += `snaptime: ${snap.snaptime}\n`;
    if (snap.snapstate) text += `snapstate: ${snap.snapstate}\n`;
    if (snap.vmstate) text += `vmstate: ${snap.vmstate}\n`;
  }
  return createHash('sha1').update(text).digest('hex');
}
