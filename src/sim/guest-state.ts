/**
 * Guest state beside a VM's config: snapshot sections, what the guest agent holds (processes,
 * files, the fsfreeze state), and the topology's containers, which are only listed.
 */
import type { ClusterState, VmStatus } from './state.ts';
import { formatSize } from './storage.ts';
import type { TopologyContainer } from './topology.ts';

/**
 * One `[snapname]` section of a qemu-server config: the config as it was (`__snapshot_copy_config`:
 * no lock, digest, description or unusedN), plus `snaptime`, `description`, `vmstate` (the RAM
 * state volume of a snapshot with RAM), `parent` and, while a task works on it, `snapstate`.
 */
export interface SnapshotState {
  config: Record<string, string>;
  snaptime: number;
  description?: string;
  vmstate?: string;
  parent?: string;
  snapstate?: 'prepare' | 'delete';
}

/** A process started through the guest agent's `exec`, as qemu-ga keeps it until `exec-status` reaps it. */
export interface AgentProcess {
  pid: number;
  /** Simulated ms at which it exits. */
  exitsAt: number;
  exitcode: number;
  out: string;
  err: string;
}

/** What the guest agent of a running VM holds: its processes, files written, the fsfreeze state. */
export interface GuestAgentState {
  procs: Map<number, AgentProcess>;
  nextPid: number;
  files: Map<string, Buffer>;
  /** Permission bits of files written by cloud-init's write_files (0644 otherwise). */
  modes: Map<string, number>;
  frozen: boolean;
}

/**
 * What the guest's own disk holds beyond its image, changed by cloud-init (and the agent): it
 * survives reboots and goes with the disk to a clone.
 */
export interface GuestDisk {
  /** Packages installed after the image was made (name -> version). */
  packages: Map<string, string>;
  /** The instance-id of the last cloud-init run that completed on this disk. */
  instanceId?: string;
  /** The host name cloud-init set (set_hostname), if it ran. */
  hostname?: string;
  /** The time zone cloud-init set. */
  timezone?: string;
  /** /var/log/cloud-init-output.log as of the previous boots. */
  outputLog: string;
}

export function freshGuestDisk(): GuestDisk {
  return { packages: new Map(), outputLog: '' };
}

/** A copy for a clone's disk. */
export function copyGuestDisk(d: GuestDisk): GuestDisk {
  return { ...d, packages: new Map(d.packages) };
}

/** An LXC container the topology declares (listed by `/nodes/{node}/lxc` and `/cluster/resources`). */
export interface ContainerState {
  vmid: number;
  node: string;
  config: Record<string, string>;
  status: VmStatus;
  startedAt: number;
}

export function freshAgentState(): GuestAgentState {
  return { procs: new Map(), nextPid: 1000, files: new Map(), modes: new Map(), frozen: false };
}

/** A topology container, with its config as pve-container writes it (the keys vmstatus reads). */
export function seedContainer(c: ClusterState, node: string, t: TopologyContainer): void {
  const config: Record<string, string> = {
    hostname: t.hostname,
    cores: String(t.cores),
    memory: String(t.memory),
    swap: '512',
    ostype: 'debian',
    arch: 'amd64',
    unprivileged: '1',
  };
  if (t.disk) {
    const s = c.storage(node, t.disk.storage);
    const volname = s?.isFileBased ? `${t.vmid}/vm-${t.vmid}-disk-0.raw` : `vm-${t.vmid}-disk-0`;
    if (s)
      s.volumes.set(volname, {
        volid: `${s.id}:${volname}`,
        storage: s.id,
        volname,
        content: 'rootdir',
        format: 'raw',
        size: t.disk.size,
        vmid: t.vmid,
        ctime: c.clock.epoch(),
      });
    config.rootfs = `${t.disk.storage}:${volname},size=${formatSize(t.disk.size)}`;
  }
  if (t.tags) config.tags = t.tags;
  if (t.template) config.template = '1';
  const running = t.running === true && !t.template;
  c.containers.set(t.vmid, {
    vmid: t.vmid,
    node,
    config,
    status: running ? 'running' : 'stopped',
    startedAt: running ? c.clock.now() : 0,
  });
}
