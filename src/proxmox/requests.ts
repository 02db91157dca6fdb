/**
 * Every request the client can send, as pure builders: method, PVE path template, path parameters,
 * parameters, and how to read the answer. Nothing here does I/O, so a test can walk all of them and
 * check each against the PVE API schema of every supported version (test/proxmox/schema.test.ts).
 *
 * Parameter values are what the caller means (`true`, `['net1','ide2']`, plain ssh keys); wireParams()
 * turns them into what PVE expects on the wire (`1`, `net1,ide2`, percent-encoded keys).
 */
import type { HttpMethod } from './transport.ts';
import type {
  AgentExecStatus,
  AgentInterface,
  CloudInitPendingEntry,
  ClusterResource,
  ClusterResourceType,
  MigratePrecondition,
  NetworkInterface,
  NodeListEntry,
  NodeStatus,
  PendingEntry,
  Permissions,
  PoolInfo,
  PoolListEntry,
  StorageConfig,
  StorageEntry,
  StorageStatus,
  StorageVolume,
  TaskListEntry,
  TaskLogLine,
  TaskStatus,
  VersionInfo,
  VmConfig,
  VmListEntry,
  VmStatus,
} from './types.ts';

export type { HttpMethod };

export type ParamValue = string | number | boolean | readonly string[] | undefined;

export interface PveRequest<T> {
  readonly method: HttpMethod;
  /** PVE path template (`/nodes/{node}/qemu/{vmid}/config`): also the metrics label. */
  readonly path: string;
  readonly pathParams: Readonly<Record<string, string | number>>;
  readonly params: Readonly<Record<string, ParamValue>>;
  /** Reads (and login) may be resent after a network failure and are retried with backoff. */
  readonly idempotent: boolean;
  /** Parameter names whose values are secrets: scrubbed from every error. */
  readonly sensitive?: readonly string[];
  /** Turns `data` of the answer into T. */
  readonly decode: (data: unknown) => T;
  /** Array parameters sent as one pair per element (schema type `array`), not comma-joined. */
  readonly repeated?: readonly string[];
}

/** A UPID (a worker task was started). */
export type Upid = string;

/** Keys of a VM config (`name`, `cores`, `scsi0`, `net0`...) with the values to set. */
export type QemuConfigInput = Record<string, string | number | boolean>;

const asIs = <T>(d: unknown): T => d as T;

function req<T>(
  method: HttpMethod,
  path: string,
  pathParams: Record<string, string | number>,
  params: Record<string, ParamValue> = {},
  extra: { decode?: (d: unknown) => T; sensitive?: string[]; idempotent?: boolean; repeated?: string[] } = {},
): PveRequest<T> {
  const clean: Record<string, ParamValue> = {};
  for (const [k, v] of Object.entries(params)) if (v !== undefined) clean[k] = v;
  return {
    method,
    path,
    pathParams,
    params: clean,
    idempotent: extra.idempotent ?? method === 'GET',
    ...(extra.sensitive ? { sensitive: extra.sensitive } : {}),
    ...(extra.repeated ? { repeated: extra.repeated } : {}),
    decode: extra.decode ?? asIs,
  };
}

function upid(d: unknown): Upid {
  if (typeof d !== 'string' || !d.startsWith('UPID:'))
    throw new TypeError(`expected a task UPID, got ${JSON.stringify(d)}`);
  return d;
}

function upidOrNull(d: unknown): Upid | null {
  return d === null || d === undefined || d === '' ? null : upid(d);
}

function list<T>(d: unknown): T[] {
  return Array.isArray(d) ? (d as T[]) : [];
}

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

/**
 * The wire form of parameters: booleans as 0/1, lists comma-joined, `sshkeys` percent-encoded
 * (PVE's `urlencoded` format: `%20` for a space, never `+`; form encoding then encodes it again).
 */
export function wireParams(
  params: Readonly<Record<string, ParamValue>>,
  repeated: readonly string[] = [],
): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined) continue;
    // A parameter of schema type `array` (PVE 8's agent exec `command`): one pair per element,
    // which PVE's HTTP server collects into the list.
    if (Array.isArray(v) && repeated.includes(k)) {
      for (const x of v) out.push([k, String(x)]);
      continue;
    }
    let s: string;
    if (typeof v === 'boolean') s = v ? '1' : '0';
    else if (Array.isArray(v)) s = v.join(',');
    else s = String(v);
    if (k === 'sshkeys') s = encodeURIComponent(s);
    out.push([k, s]);
  }
  return out;
}

/** `/nodes/{node}/qemu/{vmid}` + `{node:'pve', vmid:100}` -> `/nodes/pve/qemu/100`, segments encoded. */
export function buildPath(template: string, pathParams: Readonly<Record<string, string | number>>): string {
  return template.replace(/\{([^}]+)\}/g, (_m, name: string) => {
    const v = pathParams[name];
    if (v === undefined || v === '') throw new TypeError(`path parameter '${name}' of ${template} is missing`);
    return encodeURIComponent(String(v));
  });
}

// --- access --------------------------------------------------------------------------------------

export function version(): PveRequest<VersionInfo> {
  return req('GET', '/version', {});
}

export interface LoginAnswer {
  username: string;
  ticket: string;
  CSRFPreventionToken: string;
  cap?: Record<string, Record<string, number>>;
  clustername?: string;
}

/** `POST /access/ticket`; `password` may be a valid ticket (renewal). */
export function login(username: string, password: string): PveRequest<LoginAnswer> {
  return req('POST', '/access/ticket', {}, { username, password }, { sensitive: ['password'], idempotent: true });
}

export function permissions(opts: { path?: string; userid?: string } = {}): PveRequest<Permissions> {
  return req('GET', '/access/permissions', {}, { path: opts.path, userid: opts.userid });
}

// --- cluster -------------------------------------------------------------------------------------

/** `GET /cluster/nextid`: PVE answers a JSON string (`"100"`); decoded to a number. */
export function nextId(vmid?: number): PveRequest<number> {
  return req(
    'GET',
    '/cluster/nextid',
    {},
    { vmid },
    {
      decode: (d) => {
        const n = Number(d);
        if (!Number.isInteger(n)) throw new TypeError(`unexpected nextid answer ${JSON.stringify(d)}`);
        return n;
      },
    },
  );
}

export function clusterResources(type?: ClusterResourceType): PveRequest<ClusterResource[]> {
  return req('GET', '/cluster/resources', {}, { type }, { decode: list<ClusterResource> });
}

export function clusterStatus(): PveRequest<Array<Record<string, unknown>>> {
  return req('GET', '/cluster/status', {}, {}, { decode: list<Record<string, unknown>> });
}

export function listPools(): PveRequest<PoolListEntry[]> {
  return req('GET', '/pools', {}, {}, { decode: list<PoolListEntry> });
}

export function getPool(poolid: string): PveRequest<PoolInfo> {
  return req('GET', '/pools/{poolid}', { poolid });
}

export function createPool(poolid: string, comment?: string): PveRequest<null> {
  return req('POST', '/pools', {}, { poolid, comment }, { decode: () => null });
}

// --- nodes ---------------------------------------------------------------------------------------

export function listNodes(): PveRequest<NodeListEntry[]> {
  return req('GET', '/nodes', {}, {}, { decode: list<NodeListEntry> });
}

export function nodeStatus(node: string): PveRequest<NodeStatus> {
  return req('GET', '/nodes/{node}/status', { node });
}

export type NetworkTypeFilter = 'bridge' | 'bond' | 'eth' | 'alias' | 'vlan' | 'OVSBridge' | 'any_bridge';

export function nodeNetwork(node: string, type?: NetworkTypeFilter): PveRequest<NetworkInterface[]> {
  return req('GET', '/nodes/{node}/network', { node }, { type }, { decode: list<NetworkInterface> });
}

export function nodeStorages(
  node: string,
  opts: { content?: string; enabled?: boolean; storage?: string } = {},
): PveRequest<StorageEntry[]> {
  return req(
    'GET',
    '/nodes/{node}/storage',
    { node },
    { content: opts.content, enabled: opts.enabled, storage: opts.storage },
    { decode: list<StorageEntry> },
  );
}

/** The cluster-wide config of a storage (`path`, `content`, `shared`...); needs Datastore.Allocate. */
export function storageConfig(storage: string): PveRequest<StorageConfig> {
  return req('GET', '/storage/{storage}', { storage });
}

/** Cloud-init values changed since the drive was generated (PVE >= 7.2: `pending` set). */
export function cloudInitPending(node: string, vmid: number): PveRequest<CloudInitPendingEntry[]> {
  return req('GET', '/nodes/{node}/qemu/{vmid}/cloudinit', { node, vmid }, {}, { decode: list<CloudInitPendingEntry> });
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

export function storageStatus(node: string, storage: string): PveRequest<StorageStatus> {
  return req('GET', '/nodes/{node}/storage/{storage}/status', { node, storage });
}

export function storageContent(
  node: string,
  storage: string,
  opts: { content?: string; vmid?: number } = {},
): PveRequest<StorageVolume[]> {
  return req(
    'GET',
    '/nodes/{node}/storage/{storage}/content',
    { node, storage },
    { content: opts.content, vmid: opts.vmid },
    { decode: list<StorageVolume> },
  );
}

export interface DownloadUrlOptions {
  url: string;
  content: 'iso' | 'vztmpl' | 'import';
  filename: string;
  checksum?: { algorithm: 'md5' | 'sha1' | 'sha224' | 'sha256' | 'sha384' | 'sha512'; value: string };
  verifyCertificates?: boolean;
}

/**
 * `POST .../download-url` -> `download` task: the node fetches the URL itself and, with a checksum,
 * hashes the file and refuses it on a mismatch before it is renamed into place (pve-storage
 * `PVE/API2/Storage/Status.pm` download_url; in the API from PVE 7).
 */
export function downloadUrl(node: string, storage: string, opts: DownloadUrlOptions): PveRequest<Upid> {
  return req(
    'POST',
    '/nodes/{node}/storage/{storage}/download-url',
    { node, storage },
    {
      url: opts.url,
      content: opts.content,
      filename: opts.filename,
      checksum: opts.checksum?.value,
      'checksum-algorithm': opts.checksum?.algorithm,
      'verify-certificates': opts.verifyCertificates,
    },
    { decode: upid },
  );
}

/** `DELETE .../content/{volume}` -> `imgdel` task (null only with `delay`, which is not sent). */
export function deleteVolume(node: string, storage: string, volume: string): PveRequest<Upid | null> {
  return req(
    'DELETE',
    '/nodes/{node}/storage/{storage}/content/{volume}',
    { node, storage, volume },
    {},
    {
      decode: upidOrNull,
    },
  );
}

// --- qemu ----------------------------------------------------------------------------------------

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

/** A VM's snapshots (`current`, the running state, is always the last entry). */
export function vmSnapshots(node: string, vmid: number): PveRequest<Array<{ name: string; parent?: string }>> {
  return req('GET', '/nodes/{node}/qemu/{vmid}/snapshot', { node, vmid }, {}, { decode: list<{ name: string }> });
}

/** The config a snapshot holds (what a rollback puts back). */
export function snapshotConfig(node: string, vmid: number, snapname: string): PveRequest<Record<string, unknown>> {
  return req('GET', '/nodes/{node}/qemu/{vmid}/snapshot/{snapname}/config', { node, vmid, snapname });
}

/**
 * `PUT .../resize`: `size` is absolute (`32G`) or relative (`+8G`). PVE >= 8.0 answers a `resize`
 * UPID, older versions null (and fail synchronously).
 */
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

// --- tasks ---------------------------------------------------------------------------------------

export interface TaskListOptions {
  /** `active` lists running tasks (default `archive`: finished ones). */
  source?: 'active' | 'archive' | 'all';
  vmid?: number;
  typefilter?: string;
  userfilter?: string;
  errors?: boolean;
  /** Only tasks started at or after this UNIX time (PVE >= 7). */
  since?: number;
  start?: number;
  limit?: number;
}

export function listTasks(node: string, opts: TaskListOptions = {}): PveRequest<TaskListEntry[]> {
  return req(
    'GET',
    '/nodes/{node}/tasks',
    { node },
    {
      source: opts.source,
      vmid: opts.vmid,
      typefilter: opts.typefilter,
      userfilter: opts.userfilter,
      errors: opts.errors,
      since: opts.since,
      start: opts.start,
      limit: opts.limit,
    },
    { decode: list<TaskListEntry> },
  );
}

export function taskStatus(node: string, upidValue: string): PveRequest<TaskStatus> {
  return req('GET', '/nodes/{node}/tasks/{upid}/status', { node, upid: upidValue });
}

export function taskLog(
  node: string,
  upidValue: string,
  opts: { start?: number; limit?: number } = {},
): PveRequest<TaskLogLine[]> {
  return req(
    'GET',
    '/nodes/{node}/tasks/{upid}/log',
    { node, upid: upidValue },
    { start: opts.start, limit: opts.limit },
    { decode: list<TaskLogLine> },
  );
}

/** `DELETE /nodes/{node}/tasks/{upid}`: stop a running task. */
export function stopTask(node: string, upidValue: string): PveRequest<null> {
  return req('DELETE', '/nodes/{node}/tasks/{upid}', { node, upid: upidValue }, {}, { decode: () => null });
}
