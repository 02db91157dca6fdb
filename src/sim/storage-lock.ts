/**
 * The storage lock PVE takes around every volume allocation, so that concurrent creates on one
 * storage allocate one at a time: pve-storage's vdisk_alloc runs the plugin's alloc_image (for
 * lvm-thin `lvcreate --thinpool`, LvmThinPlugin.pm:99-131) inside
 * `$plugin->cluster_lock_storage($storeid, $scfg->{shared}, undef, ...)` (src/PVE/Storage.pm:1150-1184
 * at 0c56bad); vdisk_clone (linked clones, :1078-1099) and vdisk_free (:1186-1219) take the same
 * lock. cluster_lock_storage (src/PVE/Storage/Plugin.pm:759-774) flocks
 * /var/lock/pve-manager/pve-storage-<id> on the node for a local storage, and takes the
 * cluster-wide pmxcfs lock `storage-<id>` (pve-cluster src/PVE/Cluster.pm:704-710, cfs_lock
 * :606-692 at 7091d92) for a shared one. Neither gets a timeout, so both wait their default 10 s
 * (pve-common src/PVE/Tools.pm:206 lock_file_full at f665029; Cluster.pm:615) and then fail:
 * `can't lock file '…' - got timeout` (Tools.pm:264) or
 * `cfs-lock 'storage-<id>' error: got lock request timeout` (Cluster.pm:628, :683).
 *
 * The copy that follows an allocation (qemu-img convert, ImportDisk.pm:35-42 then :88 at
 * e6352be) runs outside the lock; only the allocation itself is serialised.
 */
import type { Clock } from './clock.ts';
import { Flock } from './flock.ts';
import type { StorageState } from './storage.ts';

/** cluster_lock_storage passes no timeout: lock_file_full's and cfs_lock's default, 10 s. */
export const STORAGE_LOCK_TIMEOUT_MS = 10_000;

const locks = new WeakMap<StorageState, Flock>();

/**
 * The lock of a storage as a node sees it: a shared storage is one object for the whole cluster
 * (ClusterState keeps one StorageState per shared id), so its lock is cluster-wide; a local
 * storage is one object per node, so its lock is that node's flock.
 */
export function storageLock(s: StorageState, clock: Clock): Flock {
  let f = locks.get(s);
  if (!f) {
    f = s.shared
      ? new Flock(`storage-${s.id}`, clock, `cfs-lock 'storage-${s.id}' error: got lock request timeout`)
      : new Flock(`/var/lock/pve-manager/pve-storage-${s.id}`, clock);
    locks.set(s, f);
  }
  return f;
}

/**
 * Run `fn` (an allocation, with the time it takes) under the storage's lock, as vdisk_alloc
 * does. The lock goes with the worker whatever happens (a flock dies with its process).
 */
export async function underStorageLock<T>(s: StorageState, clock: Clock, fn: () => Promise<T> | T): Promise<T> {
  const release = await storageLock(s, clock).acquire(STORAGE_LOCK_TIMEOUT_MS);
  try {
    return await fn();
  } finally {
    release();
  }
}
