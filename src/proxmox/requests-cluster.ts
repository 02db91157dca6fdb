/**
 * The requests of the PVE API outside a VM, as pure builders: access (version, login,
 * permissions), the cluster and its pools, nodes and their storages (content, downloads, volumes),
 * and a node's tasks. Nothing here does I/O, so a test can walk all of them and check each against
 * the PVE API schema of every supported version (test/proxmox/schema.test.ts). A VM's own calls
 * (`/nodes/{node}/qemu/...`) are in requests-qemu.ts.
 */
import { list, type PveRequest, req, type Upid, upid, upidOrNull } from './requests.ts';
import type {
  ClusterResource,
  ClusterResourceType,
  NetworkInterface,
  NodeListEntry,
  NodeStatus,
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
} from './types.ts';

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
