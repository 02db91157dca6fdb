/**
 * What a ProxmoxTemplate's template VMs are: their version (a hash of the image and the build
 * settings, in the VM name `<prefix>-<version>`), the config of the build (`POST
 * /nodes/{node}/qemu`: the image imported as scsi0, a cloud-init drive, the guest agent, a serial
 * console, the ownership marker of src/vm/spec.ts in the description), and which of the site's
 * VMs are this template's, read from Proxmox (name, then the marker in the config), so that a lost
 * status or a second runtime finds them instead of building again.
 *
 * Linked clones: PVE clones a template's disk as a linked clone where the storage plugin can
 * snapshot a base volume: lvmthin, zfspool, rbd, and file storages with qcow2 (pve-storage
 * `clone_image` of LvmThinPlugin, ZFSPoolPlugin, RBDPlugin and Plugin.pm for qcow2 files). LVM
 * (thick) can neither make a base volume nor clone one (LVMPlugin create_base and clone_image
 * die), so a template is refused there; a VM on lvm is a full clone of a template elsewhere.
 */
import { createHash } from 'node:crypto';
import type { ProxmoxImage } from '../api/proxmoximage.ts';
import type { ProxmoxTemplate } from '../api/proxmoxtemplate.ts';
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import type { Capabilities, PveClient } from '../proxmox/index.ts';
import type { StorageEntry } from '../proxmox/types.ts';
import { markerNames, ownershipMarker, parseMarker } from '../vm/spec.ts';
import { refuse } from './references.ts';

/** Storage types whose base volumes linked clones can be made from (qcow2 on the file ones). */
export const LINKED_CLONE_TYPES = new Set(['lvmthin', 'zfspool', 'rbd', 'dir', 'nfs', 'cifs', 'glusterfs', 'btrfs']);
/**
 * Storage types a template's disk can be converted on: `POST .../template` renames the disk to a
 * base volume with the plugin's create_base, which LVM (thick) does not have (pve-storage
 * src/PVE/Storage/LVMPlugin.pm create_base: `die "can't create base images in lvm storage"`).
 */
export const TEMPLATE_STORAGE_TYPES = LINKED_CLONE_TYPES;
const FILE_TYPES = new Set(['dir', 'nfs', 'cifs', 'glusterfs', 'btrfs', 'cephfs']);

/** The owner the marker names: only metadata is read (spec.ts's marker helpers take a ProxmoxVM). */
function owner(t: ProxmoxTemplate): ProxmoxVM {
  return { metadata: t.metadata } as ProxmoxVM;
}

export function templatePrefix(t: ProxmoxTemplate): string {
  return t.spec.forProvider.name ?? t.metadata.name;
}

/** 8 hex digits of what the template VM is made from: a change of any of these is a new version. */
export function templateVersion(t: ProxmoxTemplate, img: ProxmoxImage): string {
  const fp = t.spec.forProvider;
  const what = {
    image: img.status?.atProvider?.volid,
    url: img.spec.forProvider.url,
    checksum: img.spec.forProvider.checksum.value.toLowerCase(),
    storage: fp.storage ?? 'local-lvm',
    cpu: fp.cpu ?? 1,
    memory: fp.memory ?? 1024,
    network: fp.network ?? 'vmbr0',
  };
  return createHash('sha256').update(JSON.stringify(what)).digest('hex').slice(0, 8);
}

/** The import-from source of the image, as these credentials can use it (or ImageNotImportable). */
export function importSource(img: ProxmoxImage, caps: Capabilities, site: string): string {
  const volid = img.status!.atProvider!.volid!;
  if (!caps.importFrom)
    throw refuse(
      'ImageNotImportable',
      `PVE ${caps.version.text} on site ${site} has no import-from (added in 7.2): a template cannot be built from an image over the API; upgrade, or make the template by hand and clone it with spec.forProvider.template`,
    );
  const content = /^[^:]+:([a-z]+)\//.exec(volid)?.[1];
  if (content === 'import') return volid;
  const fix =
    "Fix: set the ProxmoxImage's content to import (PVE >= 8.3) on a storage with the import content type, or use root@pam password credentials";
  if (content === 'iso' && caps.rootTicket && volid.startsWith('local:'))
    return `/var/lib/vz/template/${volid.slice('local:'.length)}`;
  throw refuse(
    'ImageNotImportable',
    `${volid} is an ISO-content volume; Proxmox VE imports only 'images' or 'import' volumes with ${caps.authKind === 'token' ? 'an API token' : `user ${caps.authId}`} (an absolute path of storage local needs root@pam with a password). ${fix}`,
  );
}

/** The template's storage on a node: it must hold images. */
export function templateStorage(storages: StorageEntry[], id: string, node: string): StorageEntry {
  const s = storages.find((x) => x.storage === id);
  if (!s)
    throw refuse(
      'StorageNotFound',
      `storage '${id}' (spec.forProvider.storage) does not exist on node ${node} (storages: ${storages.map((x) => x.storage).join(', ')})`,
    );
  if (!s.content.split(',').includes('images'))
    throw refuse(
      'StorageCannotHoldImages',
      `storage '${id}' (spec.forProvider.storage) on node ${node} does not hold VM disks (content: ${s.content}); pick a storage with the 'images' content type`,
    );
  if (!TEMPLATE_STORAGE_TYPES.has(s.type))
    throw refuse(
      'StorageCannotHoldTemplates',
      `storage '${id}' (spec.forProvider.storage) on node ${node} is of type ${s.type}: Proxmox VE cannot convert a disk there into a template's base volume (LVM thick: "can't create base images in lvm storage"); use ${[...TEMPLATE_STORAGE_TYPES].join(', ')}`,
    );
  if (s.active === 0 || s.enabled === 0)
    throw refuse('StorageUnavailable', `storage '${id}' is not active on node ${node}`, true);
  return s;
}

export function buildConfig(
  t: ProxmoxTemplate,
  img: ProxmoxImage,
  opts: { vmid: number; version: string; installation: string; source: string; storage: StorageEntry },
): Record<string, string | number> {
  const fp = t.spec.forProvider;
  const storage = opts.storage.storage;
  // File storages get qcow2 (their default is raw, which cannot be a linked clone's base).
  const format = FILE_TYPES.has(opts.storage.type) ? ',format=qcow2' : '';
  const c = img.spec.forProvider.checksum;
  const description = [
    `ProxmoxTemplate ${t.metadata.namespace ?? 'default'}/${t.metadata.name}, version ${opts.version}`,
    `image: ${img.status?.atProvider?.volid} (${img.spec.forProvider.url}, ${c.algorithm} ${c.value.toLowerCase()})`,
    '',
    ownershipMarker(owner(t), { installation: opts.installation, vmid: opts.vmid }),
  ].join('\n');
  return {
    name: `${templatePrefix(t)}-${opts.version}`,
    description,
    tags: 'provider-proxmox;template',
    ostype: 'l26',
    cores: fp.cpu ?? 1,
    memory: fp.memory ?? 1024,
    scsihw: 'virtio-scsi-single',
    scsi0: `${storage}:0,import-from=${opts.source}${format}`,
    ide2: `${storage}:cloudinit`,
    boot: 'order=scsi0',
    agent: '1',
    serial0: 'socket',
    vga: 'serial0',
    net0: `virtio,bridge=${fp.network ?? 'vmbr0'}`,
  };
}

/** One of this template's VMs, as Proxmox holds it. */
export interface TemplateVm {
  vmid: number;
  host: string;
  version: string;
  /** Converted (`template: 1`). */
  template: boolean;
  lock?: string;
  /** The storage of its boot disk. */
  storage?: string;
}

/**
 * This template's VMs on the site: named `<prefix>-<8 hex>` in the bulk list, and carrying the
 * marker of this resource, this installation and their own VMID (a copy of one is a stranger).
 */
export async function findTemplateVms(
  client: PveClient,
  t: ProxmoxTemplate,
  installation: string,
): Promise<TemplateVm[]> {
  const prefix = `${templatePrefix(t)}-`;
  const out: TemplateVm[] = [];
  for (const e of await client.clusterResources('vm')) {
    if (e.type !== 'qemu' || !e.name?.startsWith(prefix) || !e.node) continue;
    const version = e.name.slice(prefix.length);
    if (!/^[0-9a-f]{8}$/.test(version)) continue;
    const vmid = Number(e.vmid);
    const cfg = await client.vmConfig(e.node, vmid).catch(() => undefined);
    if (!cfg) continue;
    if (!markerNames(parseMarker(cfg.values.description), owner(t), { installation, vmid })) continue;
    const storage = /^([^:]+):/.exec(cfg.values.scsi0 ?? '')?.[1];
    out.push({
      vmid,
      host: e.node,
      version,
      template: cfg.values.template === '1',
      ...(cfg.values.lock ? { lock: cfg.values.lock } : {}),
      ...(storage ? { storage } : {}),
    });
  }
  return out.sort((a, b) => a.vmid - b.vmid);
}

/**
 * The VMIDs of the linked clones whose disks still depend on a template VM's base volumes: the
 * volumes named `base-<vmid>-disk-N/...` on its storage (how PVE names a linked clone's disk,
 * e.g. `local-lvm:base-9000-disk-0/vm-101-disk-0`; PVE refuses to free a base volume that has
 * them: `base volume ... is still in use by linked clones`).
 */
export async function linkedClonesOf(client: PveClient, vm: TemplateVm): Promise<number[]> {
  if (!vm.storage) return [];
  const vols = await client.storageContent(vm.host, vm.storage, { content: 'images' });
  const re = new RegExp(`(^|/)base-${vm.vmid}-disk-\\d+(\\.[a-z0-9]+)?/`);
  const out = new Set<number>();
  for (const v of vols) {
    const name = v.volid.slice(v.volid.indexOf(':') + 1);
    if (re.test(name) && v.vmid !== undefined && v.vmid !== vm.vmid) out.add(v.vmid);
  }
  return [...out].sort((a, b) => a - b);
}
