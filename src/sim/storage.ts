/**
 * The storages of a simulated node and the volumes on them, as pve-storage keeps them: each
 * storage's type, content types, size and free space, its volumes (images, ISOs, imports,
 * snippets) and the files written over SFTP; the error a storage gives when it is out of space,
 * and disk sizes as qemu-server prints them.
 */
import { type FsFile, volumeBytes } from './storage-files.ts';
import type { StorageType, TopologyStorage } from './topology.ts';

export const GiB = 1024 ** 3;
export const MiB = 1024 ** 2;

export interface Volume {
  volid: string;
  storage: string;
  /** Volume name inside the storage: `iso/x.img`, `vm-100-disk-0`, `100/vm-100-disk-0.qcow2`. */
  volname: string;
  content: string;
  format: string;
  size: number;
  vmid?: number;
  ctime: number;
  /** For linked clones: the base volume this one depends on. */
  parent?: string;
  /**
   * Whether the guest installed in this image runs qemu-guest-agent (import and ISO volumes; the
   * topology's `guestAgent`, default false). A VM imported from it inherits this.
   */
  guestAgent?: boolean;
  /** Storage snapshots of this volume, oldest first (names of the VM snapshots that made them). */
  snapshots?: string[];
  /** The bytes of a `snippets` volume (written over SFTP); its size is theirs. */
  file?: FsFile;
}

export class StorageState {
  readonly id: string;
  readonly type: StorageType;
  content: Set<string>;
  total: number;
  baseUsed: number;
  readonly path: string | undefined;
  readonly shared: boolean;
  /** MB/s. */
  readonly bandwidth: number;
  readonly volumes = new Map<string, Volume>();
  /** Files written over SFTP below the path, outside `snippets/` (relative path): the API sees none. */
  readonly files = new Map<string, FsFile>();
  /** Directories made over SFTP (relative paths); the content directories exist anyway. */
  readonly dirs = new Set<string>();
  enabled = true;
  active = true;
  /** Fault: behave as if no space is left. */
  forcedFull = false;
  constructor(t: TopologyStorage) {
    this.id = t.id;
    this.type = t.type;
    this.content = new Set(t.content);
    this.total = t.total;
    this.baseUsed = t.used ?? 0;
    // Network file storages are mounted at /mnt/pve/<id> too (pve-storage NFSPlugin/CephFSPlugin).
    this.path =
      t.path ?? (t.type === 'dir' || t.type === 'nfs' || t.type === 'cephfs' ? `/mnt/pve/${t.id}` : undefined);
    this.shared = t.shared ?? false;
    this.bandwidth = t.bandwidth ?? 200;
  }
  get used(): number {
    let u = this.baseUsed;
    for (const v of this.volumes.values()) if (!v.parent) u += volumeBytes(v);
    for (const f of this.files.values()) u += f.data.length;
    return u;
  }
  get avail(): number {
    return this.forcedFull ? 0 : Math.max(0, this.total - this.used);
  }
  /** Storages with a file system hold qcow2 files; block storages hold raw volumes. */
  get isFileBased(): boolean {
    return this.type === 'dir' || this.type === 'nfs' || this.type === 'cephfs';
  }
}

export function outOfSpaceMessage(s: StorageState, volname: string, size: number): string {
  const avail = s.avail;
  switch (s.type) {
    case 'lvm':
    case 'lvmthin': {
      const ext = 4 * MiB;
      return `lvcreate 'pve/${volname}' error:   Volume group "pve" has insufficient free space (${Math.floor(avail / ext)} extents): ${Math.ceil(size / ext)} required.`;
    }
    case 'rbd':
      return `rbd create '${volname}' error: rbd: create error: (28) No space left on device`;
    case 'zfspool':
      return `zfs error: cannot create 'rpool/data/${volname}': out of space`;
    default:
      return `unable to create image: qemu-img: ${s.path}/images/${volname}: Could not preallocate metadata: No space left on device`;
  }
}

/**
 * activate_volumes' die for a volume its storage does not hold (a resize, a start): lvm-thin looks
 * the LV up in its list (pve-storage src/PVE/Storage/LvmThinPlugin.pm:247 at 0c56bad), a storage
 * with a path tests the file (Plugin.pm:2054-2059). Other types fail later, each its own way; they
 * get the path plugin's text here.
 */
export function missingVolumeMessage(s: StorageState | undefined, volid: string): string {
  const volname = volid.slice(volid.indexOf(':') + 1);
  if (s?.type === 'lvmthin') return `no such logical volume pve/${volname}`;
  return `volume '${volid}' does not exist`;
}

/** `size=32G` as qemu-server prints disk sizes. */
export function formatSize(bytes: number): string {
  const units: Array<[string, number]> = [
    ['T', 1024 ** 4],
    ['G', GiB],
    ['M', MiB],
    ['K', 1024],
  ];
  // PVE::JSONSchema::format_size: the largest unit that divides the size exactly.
  for (const [u, f] of units) if (bytes >= f && bytes % f === 0) return `${bytes / f}${u}`;
  return String(bytes);
}
