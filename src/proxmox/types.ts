/**
 * Shapes of the Proxmox VE answers the client uses, as they are on the wire (see
 * ../shared/research/pve-api-fidelity.md section 3). Fields PVE may omit are optional; numbers PVE
 * sometimes sends as strings are typed `number | string`.
 */

export interface VersionInfo {
  version: string;
  release: string;
  repoid: string;
  console?: string;
}

export interface NodeListEntry {
  node: string;
  status: 'online' | 'offline' | 'unknown';
  cpu?: number;
  maxcpu?: number;
  mem?: number;
  maxmem?: number;
  disk?: number;
  maxdisk?: number;
  uptime?: number;
  ssl_fingerprint?: string;
  level?: string;
}

export interface NodeStatus {
  uptime: number;
  cpu: number;
  loadavg: string[];
  cpuinfo: { model: string; cpus: number; sockets: number; cores?: number; mhz?: string };
  memory: { total: number; used: number; free: number };
  swap?: { total: number; used: number; free: number };
  rootfs?: { total: number; used: number; free: number; avail: number };
  pveversion: string;
  kversion?: string;
}

export interface NetworkInterface {
  iface: string;
  type: string;
  active?: number;
  autostart?: number;
  bridge_ports?: string;
  bridge_vlan_aware?: number;
  cidr?: string;
  address?: string;
  gateway?: string;
  method?: string;
  exists?: number | null;
}

export interface StorageStatus {
  type: string;
  /** Comma-separated content types (`images,rootdir`). */
  content: string;
  active?: number;
  enabled?: number;
  shared?: number;
  total?: number;
  used?: number;
  avail?: number;
}

/** `GET /storage/{storage}`: the storage's config (only what the provider reads). */
export interface StorageConfig {
  storage: string;
  type: string;
  path?: string;
  content?: string;
  shared?: number;
}

/** An entry of `GET /nodes/{node}/qemu/{vmid}/cloudinit`: `pending` is set for a value not yet on the drive. */
export interface CloudInitPendingEntry {
  key: string;
  value?: string;
  pending?: string;
  delete?: number;
}

/** `GET /nodes/{node}/qemu/{vmid}/migrate` (fields differ per release; only these are read). */
export interface MigratePrecondition {
  running?: number | boolean;
  allowed_nodes?: string[];
  not_allowed_nodes?: Record<string, { unavailable_storages?: string[]; 'unavailable-resources'?: string[] }>;
  local_disks?: Array<{ volid: string; size?: number; drivename?: string; is_unused?: number }>;
  local_resources?: string[];
}

/** `GET .../agent/exec-status`. */
export interface AgentExecStatus {
  exited: boolean | number;
  exitcode?: number;
  signal?: number;
  'out-data'?: string;
  'err-data'?: string;
  'out-truncated'?: boolean | number;
}

/** An entry of `GET /nodes/{node}/storage`: a storage's status plus its id. */
export interface StorageEntry extends StorageStatus {
  storage: string;
  used_fraction?: number;
}

export interface StorageVolume {
  volid: string;
  content: string;
  format: string;
  size: number;
  ctime?: number;
  vmid?: number;
  parent?: string;
  used?: number;
}

export type ClusterResourceType = 'vm' | 'storage' | 'node' | 'sdn';

export interface ClusterResource {
  id: string;
  type: 'qemu' | 'lxc' | 'node' | 'storage' | 'pool' | 'sdn' | string;
  node?: string;
  vmid?: number;
  name?: string;
  /** `running`, `stopped`, `unknown` (brand-new VM before the next stat tick), `online`... */
  status?: string;
  template?: number;
  lock?: string;
  tags?: string;
  pool?: string;
  storage?: string;
  content?: string;
  maxcpu?: number;
  cpu?: number;
  maxmem?: number;
  mem?: number;
  maxdisk?: number;
  disk?: number;
  uptime?: number;
}

export interface PoolListEntry {
  poolid: string;
  comment?: string;
}

export interface PoolInfo {
  comment?: string;
  members: Array<{ id: string; type: string; vmid?: number; node?: string; name?: string; status?: string }>;
}

export interface VmListEntry {
  vmid: number;
  name?: string;
  status: 'running' | 'stopped' | string;
  lock?: string;
  tags?: string;
  template?: number;
  cpus?: number;
  maxmem?: number;
  maxdisk?: number;
  uptime?: number;
}

export interface VmStatus {
  vmid: number;
  name?: string;
  status: 'running' | 'stopped' | string;
  qmpstatus?: string;
  lock?: string;
  tags?: string;
  template?: number;
  uptime?: number;
  cpus?: number;
  cpu?: number;
  maxmem?: number;
  mem?: number;
  ha?: { managed: number; state?: string };
  agent?: number;
}

/**
 * A VM config (`GET .../config`), every value as a string (PVE sends `cores: 2` as a number and,
 * from 8.1, `memory: "2048"` as a string; the client makes them uniform). `digest` is the SHA-1 of
 * the config file, for optimistic concurrency on writes.
 */
export interface VmConfig {
  digest: string;
  values: Record<string, string>;
}

export interface PendingEntry {
  key: string;
  value?: string | number;
  pending?: string | number;
  delete?: number;
}

export interface AgentInterface {
  name: string;
  'hardware-address'?: string;
  'ip-addresses'?: Array<{ 'ip-address': string; 'ip-address-type': 'ipv4' | 'ipv6' | string; prefix: number }>;
}

export interface TaskStatus {
  upid: string;
  node: string;
  pid: number;
  pstart: number;
  starttime: number;
  type: string;
  id: string;
  user: string;
  tokenid?: string;
  status: 'running' | 'stopped';
  /** Only when stopped: `OK`, `WARNINGS: N`, or the error text. */
  exitstatus?: string;
}

export interface TaskListEntry {
  upid: string;
  node: string;
  pid: number;
  pstart: number;
  starttime: number;
  type: string;
  id: string;
  user: string;
  tokenid?: string;
  endtime?: number;
  /** In lists: the exit status of a finished task. */
  status?: string;
}

export interface TaskLogLine {
  n: number;
  t: string;
}

/** `GET /access/permissions`: ACL path -> privilege -> 1 (or propagate flag). */
export type Permissions = Record<string, Record<string, number>>;
