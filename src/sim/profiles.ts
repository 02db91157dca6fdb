/**
 * Version profiles: the behaviour differences between the Proxmox VE releases the simulator
 * imitates. Every fact here is cited in ../shared/research/pve-api-fidelity.md (section 5).
 */
import type { Profile } from './schema/index.ts';

export type { Profile };

export interface ProfileFacts {
  profile: Profile;
  /** `GET /version` answer. */
  version: string;
  release: string;
  /** Length of the `repoid` (8 hex chars before PVE 8, 16 from 8). */
  repoidLength: number;
  /** `import-from` on disk options exists (qemu-server 7.1-5, PVE 7.2). */
  importFrom: boolean;
  /** `import` content type on dir storages usable as `import-from` source (PVE 8.3). */
  importContent: boolean;
  /** `PUT .../resize` returns a UPID and fails in the task (PVE 8.0). */
  asyncResize: boolean;
  /** `memory` in the VM config is a string (qemu-server 8.0.8, PVE 8.1). */
  memoryString: boolean;
  /** JSON error bodies carry `message` (libpve-http-server-perl 5.2.0). */
  errorMessageField: boolean;
  /** 401 reason is always `Authentication failed!` (pve-manager 9.1.5). */
  genericAuthFailure: boolean;
  /** Generated MACs use the Proxmox OUI BC:24:11 (PVE 8.1). */
  proxmoxOui: boolean;
  /** PVE 9 privileges: VM.Monitor replaced by VM.GuestAgent.* */
  guestAgentPrivs: boolean;
  /** PVE 9 adds `memhost` to VM status and resources. */
  memhost: boolean;
  /** ISO volumes on a disk slot need media=cdrom (qemu-server 8.3.10, PVE 8.4). */
  isoNeedsCdrom: boolean;
  /** Config updates normalise `tags` with get_unique_tags (qemu-server 7.3, commit db22080c). */
  updateNormalizesTags: boolean;
  /** Create normalises `tags` too (qemu-server 9.1.16, fix #7480); before, stored verbatim. */
  createNormalizesTags: boolean;
  /**
   * Clone forks its worker before it locks and writes the `# qmclone temporary file` config
   * (qemu-server commit dbecb46f "api: clone: fork before locking", 7.1-5, PVE 7.2). Before,
   * the handler took the flocks and wrote the temporary config itself.
   */
  cloneLocksInWorker: boolean;
  /**
   * Cloud-init options are fast-plug on a running VM and their changes are recorded in the
   * `[special:cloudinit]` section, listed by GET .../cloudinit (qemu-server 7.2-8, commits
   * 71d9006b and f16cf6c3). Before, they stay pending until the next start.
   */
  cloudinitFastplug: boolean;
  /**
   * A `cicustom` snippet is read through abs_filesystem_path, which activates its storage and
   * fails `can't find file '<volid>'` (qemu-server 8.1.0, 9946d6fa); before, file_get_contents
   * fails `can't open '<path>' - No such file or directory`.
   */
  snippetFileCheck: boolean;
  pveManagerVersion: string;
  kernel: string;
  qemuVersion: string;
}

export const PROFILES: Record<Profile, ProfileFacts> = {
  '6.4': {
    profile: '6.4',
    version: '6.4-15',
    release: '6.4',
    repoidLength: 8,
    importFrom: false,
    importContent: false,
    asyncResize: false,
    memoryString: false,
    errorMessageField: false,
    genericAuthFailure: false,
    proxmoxOui: false,
    guestAgentPrivs: false,
    memhost: false,
    isoNeedsCdrom: false,
    updateNormalizesTags: false,
    createNormalizesTags: false,
    cloneLocksInWorker: false,
    cloudinitFastplug: false,
    snippetFileCheck: false,
    pveManagerVersion: 'pve-manager/6.4-15/af7986e6',
    kernel: '5.4.203-1-pve',
    qemuVersion: '5.2.0',
  },
  '7.4': {
    profile: '7.4',
    version: '7.4-16',
    release: '7.4',
    repoidLength: 8,
    importFrom: true,
    importContent: false,
    asyncResize: false,
    memoryString: false,
    errorMessageField: false,
    genericAuthFailure: false,
    proxmoxOui: false,
    guestAgentPrivs: false,
    memhost: false,
    isoNeedsCdrom: false,
    updateNormalizesTags: true,
    createNormalizesTags: false,
    cloneLocksInWorker: true,
    cloudinitFastplug: true,
    snippetFileCheck: false,
    pveManagerVersion: 'pve-manager/7.4-16/0f39f621',
    kernel: '5.15.108-1-pve',
    qemuVersion: '7.2.0',
  },
  '8.4': {
    profile: '8.4',
    version: '8.4.5',
    release: '8.4',
    repoidLength: 16,
    importFrom: true,
    importContent: true,
    asyncResize: true,
    memoryString: true,
    errorMessageField: true,
    genericAuthFailure: false,
    proxmoxOui: true,
    guestAgentPrivs: false,
    memhost: false,
    isoNeedsCdrom: true,
    updateNormalizesTags: true,
    createNormalizesTags: false,
    cloneLocksInWorker: true,
    cloudinitFastplug: true,
    snippetFileCheck: true,
    pveManagerVersion: 'pve-manager/8.4.5/57892e8e686cb35b',
    kernel: '6.8.12-11-pve',
    qemuVersion: '9.2.0',
  },
  '9.2': {
    profile: '9.2',
    version: '9.2.3',
    release: '9.2',
    repoidLength: 16,
    importFrom: true,
    importContent: true,
    asyncResize: true,
    memoryString: true,
    errorMessageField: true,
    genericAuthFailure: true,
    proxmoxOui: true,
    guestAgentPrivs: true,
    memhost: true,
    isoNeedsCdrom: true,
    updateNormalizesTags: true,
    createNormalizesTags: true,
    cloneLocksInWorker: true,
    cloudinitFastplug: true,
    snippetFileCheck: true,
    pveManagerVersion: 'pve-manager/9.2.3/42db4a6cf33dac83',
    kernel: '6.17.2-1-pve',
    qemuVersion: '10.1.2',
  },
};

export const PROFILE_NAMES = Object.keys(PROFILES) as Profile[];

export function isProfile(v: string): v is Profile {
  return Object.hasOwn(PROFILES, v);
}
