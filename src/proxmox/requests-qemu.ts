/**
 * The requests of a qemu VM (`/nodes/{node}/qemu/...`), as pure builders: list, create, clone,
 * config (read, change, pending, cloud-init), snapshots, migration (in the cluster and to another
 * one), disks (move, resize), power, delete, template, and the guest agent. Nothing here does I/O,
 * so a test can walk all of them and check each against the PVE API schema of every supported
 * version (test/proxmox/schema.test.ts).
 */
import { list, type ParamValue, type PveRequest, req, type Upid, upid, upidOrNull } from './requests.ts';
import type {
  AgentExecStatus,
  AgentInterface,
  CloudInitPendingEntry,
  MigratePrecondition,
  PendingEntry,
  VmConfig,
  VmListEntry,
  VmStatus,
} from './types.ts';

/** Keys of a VM config (`name`, `cores`, `scsi0`, `net0`...) with the values to set. */
export type QemuConfigInput = Record<string, string | number | boolean>;

/** `{cores: 2, memory: "2048", ...}` -> all strings, `digest` apart. */
export function decodeConfig(d: unknown): VmConfig {
  const values: Record<string, string> = {};
  let digest = '';
  if (d && typeof d === 'object') {
    for (const [k, v] of Object.entries(d as Record<string, unknown>)) {
      if (v === null || v === undefined) continue;
      if (k === 'digest') digest = String(v);
      else values[k] = String(v);
    }
  }
  return { digest, values };
}

const SENSITIVE_CONFIG = ['cipassword'];

export function listVms(node: string): PveRequest<VmListEntry[]> {
  return req('GET', '/nodes/{node}/qemu', { node }, {}, { decode: list<VmListEntry> });
}

export interface CreateOptions {
  pool?: string;
  /** Start the VM after creation (a `qmstart` task follows the `qmcreate` one). */
  start?: boolean;
  /** Default storage for `ide2: cloudinit`-style shorthand values. */
  storage?: string;
  /** Mark the VM HA-managed (PVE >= 9.1). */
  haManaged?: boolean;
}

/**
 * `POST /nodes/{node}/qemu` -> `qmcreate` task. New disks are `storage:SIZE_IN_GiB`
 * (`local-lvm:32`), imports `storage:0,import-from=VOLID` (PVE >= 7.2).
 */
export function createVm(
  node: string,
  vmid: number,
  config: QemuConfigInput,
  opts: CreateOptions = {},
): PveRequest<Upid> {
  return req(
    'POST',
    '/nodes/{node}/qemu',
    { node },
    { vmid, ...config, pool: opts.pool, start: opts.start, storage: opts.storage, 'ha-managed': opts.haManaged },
    { decode: upid, sensitive: SENSITIVE_CONFIG },
  );
}

export interface CloneOptions {
  name?: string;
  description?: string;
  pool?: string;
  snapname?: string;
  /** Target storage (full clones only). */
  storage?: string;
  format?: 'raw' | 'qcow2' | 'vmdk';
  /** Full copy; PVE's default is full for VMs and linked for templates. */
  full?: boolean;
  /** Target node (shared storage, or `storage` given). */
  target?: string;
}

/** `POST .../clone` -> `qmclone` task whose UPID id is the *source* vmid. */
export function cloneVm(node: string, vmid: number, newid: number, opts: CloneOptions = {}): PveRequest<Upid> {
  return req(
    'POST',
    '/nodes/{node}/qemu/{vmid}/clone',
    { node, vmid },
    {
      newid,
      name: opts.name,
      description: opts.description,
      pool: opts.pool,
      snapname: opts.snapname,
      storage: opts.storage,
      format: opts.format,
      full: opts.full,
      target: opts.target,
    },
    { decode: upid },
  );
}

/** `GET .../config`: pending values merged in unless `current`. */
export function vmConfig(node: string, vmid: number, opts: { current?: boolean } = {}): PveRequest<VmConfig> {
  return req(
    'GET',
    '/nodes/{node}/qemu/{vmid}/config',
    { node, vmid },
    { current: opts.current },
    { decode: decodeConfig },
  );
}

export interface ConfigChange {
  set?: QemuConfigInput;
  /** Keys to remove. */
  delete?: string[];
  /** Pending changes to drop. */
  revert?: string[];
  /** Only apply when the config still has this digest (else `conflict`). */
  digest?: string;
  /** root@pam (ticket) only. */
  skiplock?: boolean;
}

function changeParams(change: ConfigChange): Record<string, ParamValue> {
  return {
    ...change.set,
    delete: change.delete?.length ? change.delete : undefined,
    revert: change.revert?.length ? change.revert : undefined,
    digest: change.digest,
    skiplock: change.skiplock,
  };
}

/** `POST .../config`: asynchronous, a `qmconfig` UPID (or null when PVE finished at once). */
export function updateVmConfigAsync(node: string, vmid: number, change: ConfigChange): PveRequest<Upid | null> {
  return req('POST', '/nodes/{node}/qemu/{vmid}/config', { node, vmid }, changeParams(change), {
    decode: upidOrNull,
    sensitive: SENSITIVE_CONFIG,
  });
}

/** `PUT .../config`: synchronous, answers null. */
export function updateVmConfigSync(node: string, vmid: number, change: ConfigChange): PveRequest<null> {
  return req('PUT', '/nodes/{node}/qemu/{vmid}/config', { node, vmid }, changeParams(change), {
    decode: () => null,
    sensitive: SENSITIVE_CONFIG,
  });
}

/** `PUT .../config delete=lock skiplock=1`: the API's `qm unlock`, root@pam with a ticket only. */
export function unlockVm(node: string, vmid: number): PveRequest<null> {
  return updateVmConfigSync(node, vmid, { delete: ['lock'], skiplock: true });
}

export function vmPending(node: string, vmid: number): PveRequest<PendingEntry[]> {
  return req('GET', '/nodes/{node}/qemu/{vmid}/pending', { node, vmid }, {}, { decode: list<PendingEntry> });
}

/** Cloud-init values changed since the drive was generated (PVE >= 7.2: `pending` set). */
export function cloudInitPending(node: string, vmid: number): PveRequest<CloudInitPendingEntry[]> {
  return req('GET', '/nodes/{node}/qemu/{vmid}/cloudinit', { node, vmid }, {}, { decode: list<CloudInitPendingEntry> });
}

/** A VM's snapshots (`current`, the running state, is always the last entry). */
export function vmSnapshots(node: string, vmid: number): PveRequest<Array<{ name: string; parent?: string }>> {
  return req('GET', '/nodes/{node}/qemu/{vmid}/snapshot', { node, vmid }, {}, { decode: list<{ name: string }> });
}

/** The config a snapshot holds (what a rollback puts back). */
export function snapshotConfig(node: string, vmid: number, snapname: string): PveRequest<Record<string, unknown>> {
  return req('GET', '/nodes/{node}/qemu/{vmid}/snapshot/{snapname}/config', { node, vmid, snapname });
}

/** `GET .../migrate?target=`: what stands in the way of a migration (qemu-server migrate_vm_precondition). */
export function migratePrecondition(node: string, vmid: number, target?: string): PveRequest<MigratePrecondition> {
  return req('GET', '/nodes/{node}/qemu/{vmid}/migrate', { node, vmid }, { target });
}

/** `POST .../migrate`: a `qmigrate` task that moves the VM (and, with-local-disks, its local disks). */
export function migrateVm(
  node: string,
  vmid: number,
  opts: { target: string; online?: boolean; withLocalDisks?: boolean; targetStorage?: string },
): PveRequest<Upid> {
  return req(
    'POST',
    '/nodes/{node}/qemu/{vmid}/migrate',
    { node, vmid },
    {
      target: opts.target,
      online: opts.online ? true : undefined,
      'with-local-disks': opts.withLocalDisks ? true : undefined,
      targetstorage: opts.targetStorage,
    },
    { decode: upid },
  );
}

/**
 * `POST .../remote_migrate` (PVE >= 7.3): a `qmigrate` task on the source that moves the VM to
 * another cluster. `targetEndpoint` carries the target's API token, so it is a secret: the
 * request is sent in the body (a POST), and nothing logs bodies. `targetStorage` and
 * `targetBridge` are PVE id maps (`src:dst,...`, or one id that maps all).
 */
export function remoteMigrateVm(
  node: string,
  vmid: number,
  opts: {
    targetEndpoint: string;
    targetStorage: string;
    targetBridge: string;
    targetVmid?: number;
    online?: boolean;
    delete?: boolean;
  },
): PveRequest<Upid> {
  return req(
    'POST',
    '/nodes/{node}/qemu/{vmid}/remote_migrate',
    { node, vmid },
    {
      'target-endpoint': opts.targetEndpoint,
      'target-storage': opts.targetStorage,
      'target-bridge': opts.targetBridge,
      'target-vmid': opts.targetVmid,
      online: opts.online ? true : undefined,
      delete: opts.delete ? true : undefined,
    },
    { decode: upid },
  );
}

/** `POST .../move_disk`: a task copying one disk to another storage (`delete`: the source goes after). */
export function moveDisk(
  node: string,
  vmid: number,
  opts: { disk: string; storage: string; delete?: boolean; digest?: string },
): PveRequest<Upid> {
  return req(
    'POST',
    '/nodes/{node}/qemu/{vmid}/move_disk',
    { node, vmid },
    { disk: opts.disk, storage: opts.storage, delete: opts.delete ? true : undefined, digest: opts.digest },
    { decode: upid },
  );
}

/**
 * `PUT .../resize`: `size` is absolute (`32G`) or relative (`+8G`). PVE >= 8.0 answers a `resize`
 * UPID, older versions null (and fail synchronously).
 */
export function resizeDisk(
  node: string,
  vmid: number,
  disk: string,
  size: string,
  opts: { digest?: string; skiplock?: boolean } = {},
): PveRequest<Upid | null> {
  return req(
    'PUT',
    '/nodes/{node}/qemu/{vmid}/resize',
    { node, vmid },
    { disk, size, digest: opts.digest, skiplock: opts.skiplock },
    { decode: upidOrNull },
  );
}

export function vmStatus(node: string, vmid: number): PveRequest<VmStatus> {
  return req('GET', '/nodes/{node}/qemu/{vmid}/status/current', { node, vmid });
}

export type PowerAction = 'start' | 'stop' | 'shutdown' | 'reboot';

export interface PowerOptions {
  /** Seconds (stop/shutdown/reboot: wait this long). */
  timeout?: number;
  /** shutdown: hard stop when the timeout passes. */
  forceStop?: boolean;
  /** root@pam (ticket) only. */
  skiplock?: boolean;
}

/** `POST .../status/{action}` -> `qmstart`/`qmstop`/`qmshutdown`/`qmreboot` (HA: `hastart`/`hastop`). */
export function vmPower(node: string, vmid: number, action: PowerAction, opts: PowerOptions = {}): PveRequest<Upid> {
  const params: Record<string, ParamValue> = { skiplock: action === 'reboot' ? undefined : opts.skiplock };
  if (action !== 'start') params.timeout = opts.timeout;
  if (action === 'shutdown') params.forceStop = opts.forceStop;
  return req('POST', `/nodes/{node}/qemu/{vmid}/status/${action}`, { node, vmid }, params, { decode: upid });
}

export interface DeleteOptions {
  /** Remove from HA, replication, backup jobs and pools. */
  purge?: boolean;
  /** Also free disks not referenced in the config. */
  destroyUnreferencedDisks?: boolean;
  skiplock?: boolean;
}

/** `DELETE /nodes/{node}/qemu/{vmid}` -> `qmdestroy` task. Parameters go in the query string. */
export function deleteVm(node: string, vmid: number, opts: DeleteOptions = {}): PveRequest<Upid> {
  return req(
    'DELETE',
    '/nodes/{node}/qemu/{vmid}',
    { node, vmid },
    {
      purge: opts.purge,
      'destroy-unreferenced-disks': opts.destroyUnreferencedDisks,
      skiplock: opts.skiplock,
    },
    { decode: upid },
  );
}

/** `POST .../template` -> `qmtemplate` task. */
export function templateVm(node: string, vmid: number, opts: { disk?: string } = {}): PveRequest<Upid> {
  return req('POST', '/nodes/{node}/qemu/{vmid}/template', { node, vmid }, { disk: opts.disk }, { decode: upid });
}

export function agentNetworkInterfaces(node: string, vmid: number): PveRequest<AgentInterface[]> {
  return req(
    'GET',
    '/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces',
    { node, vmid },
    {},
    {
      decode: (d) => {
        const r = (d as { result?: unknown } | null)?.result;
        return Array.isArray(r) ? (r as AgentInterface[]) : [];
      },
    },
  );
}

export function agentPing(node: string, vmid: number): PveRequest<null> {
  return req(
    'POST',
    '/nodes/{node}/qemu/{vmid}/agent/ping',
    { node, vmid },
    {},
    { decode: () => null, idempotent: true },
  );
}

/**
 * Run a program in the guest (qemu-guest-agent `guest-exec`). PVE < 8 takes `command` as one
 * string split on whitespace; 8+ as an array (the schemas in pve-api/): `array` chooses.
 */
export function agentExec(node: string, vmid: number, command: string[], array: boolean): PveRequest<{ pid: number }> {
  return req(
    'POST',
    '/nodes/{node}/qemu/{vmid}/agent/exec',
    { node, vmid },
    { command: array ? command : command.join(' ') },
    array ? { repeated: ['command'] } : {},
  );
}

export function agentExecStatus(node: string, vmid: number, pid: number): PveRequest<AgentExecStatus> {
  return req('GET', '/nodes/{node}/qemu/{vmid}/agent/exec-status', { node, vmid }, { pid });
}
