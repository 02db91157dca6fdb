/**
 * The state of one simulated Proxmox VE cluster: its nodes and bridges, VMs (config file, pending
 * section, runtime status), tasks, users, tokens, ACLs and pools, and the operations on them that
 * allocate VMIDs, MACs, DHCP leases, volumes and PIDs. The storages and volumes are in storage.ts.
 */
import { createHash } from 'node:crypto';
import type { Clock } from './clock.ts';
import type { CloudInitDrive } from './cloudinit.ts';
import { Flock } from './flock.ts';
import type { CloudInitRun } from './guest-cloudinit.ts';
import {
  type ContainerState,
  freshAgentState,
  freshGuestDisk,
  type GuestAgentState,
  type GuestDisk,
  type SnapshotState,
  seedContainer,
} from './guest-state.ts';
import { builtinRoles } from './privileges.ts';
import { PROFILES, type Profile, type ProfileFacts } from './profiles.ts';
import { configDigest } from './qemu-config.ts';
import { Rng } from './random.ts';
import { formatSize, MiB, outOfSpaceMessage, StorageState, type Volume } from './storage.ts';
import type { TopologyBridge, TopologyCluster, TopologyNode } from './topology.ts';

export type { AgentProcess, ContainerState, GuestAgentState, GuestDisk, SnapshotState } from './guest-state.ts';
export { freshAgentState } from './guest-state.ts';
export { privilegesOf } from './privileges.ts';
export { configDigest } from './qemu-config.ts';

export interface BridgeState extends TopologyBridge {
  leases: Map<string, string>;
  nextLease: number;
}

export interface NodeState {
  name: string;
  cpus: number;
  cpuModel: string;
  memory: number;
  memoryUsed: number;
  online: boolean;
  /** Down after a crash (the `node-crash` fault); `online` is false meanwhile. */
  crashed?: boolean;
  /** How many times the node crashed: a request it was handling across a crash gets no answer. */
  crashes?: number;
  /** pvestatd hung (the `stats-stalled` fault): the node's VMs keep the statistics of its last tick. */
  statsStalled?: boolean;
  bootTime: number;
  storages: Map<string, StorageState>;
  bridges: Map<string, BridgeState>;
  ip: string;
  /** The subscription server id (an MD5 of the hardware address in PVE: 32 upper-case hex). */
  serverId: string;
}

export type VmStatus = 'running' | 'stopped';

export interface VmState {
  vmid: number;
  node: string;
  /** The config file, key -> value, as qemu-server writes it (strings). */
  config: Record<string, string>;
  pending: Record<string, string>;
  pendingDelete: Set<string>;
  status: VmStatus;
  startedAt: number;
  /** Simulated time at which the guest agent answers (if the guest has one, see `guestAgent`). */
  agentReadyAt: number;
  /**
   * Whether the guest OS runs qemu-guest-agent. It comes from the image (an imported volume, the
   * cloned VM, the topology) and is independent of `agent: 1` in the config, which only adds the
   * virtio-serial channel: without the agent in the guest every agent call answers
   * `QEMU guest agent is not running`. SimCluster.setGuestAgent changes it (software installed
   * or removed in the guest).
   */
  guestAgent: boolean;
  /** The VMID's flock (shared with every VmState of the same VMID, see ClusterState.flock). */
  flock: Flock;
  /** Guest network state reported by the agent once it runs. */
  guest: { interfaces: Array<{ name: string; mac: string; ipv4?: string; prefix?: number; ipv6?: string }> };
  /** What /cluster/resources reports: refreshed on each pvestatd tick; undefined before the first. */
  rrd?: {
    /** `vmstatus` name: the config's name or `VM <vmid>`, as of the tick. */
    name: string;
    status: string;
    template: number;
    maxcpu: number;
    cpu: number;
    mem: number;
    maxmem: number;
    maxdisk: number;
    disk: number;
    uptime: number;
  };
  haManaged: boolean;
  /** `[snapname]` sections by name; `config.parent` names the current one's parent. */
  snapshots: Map<string, SnapshotState>;
  /** The agent's runtime state; reset when the guest boots. */
  agent: GuestAgentState;
  /** `qm suspend` without `todisk`: QEMU paused (`qmpstatus: paused`), the VM still running. */
  paused: boolean;
  /**
   * The `[special:cloudinit]` section (qemu-server 7.2-8 on): the values a cloud-init option had
   * when the drive was last generated, for options changed since (`added`: options new since).
   */
  cloudinitSection: Record<string, string>;
  /** The cloud-init drive as last generated (its user, network and meta data). */
  ciDrive?: CloudInitDrive;
  /** What the guest's disk holds: packages installed, files, the last cloud-init instance. */
  guestDisk: GuestDisk;
  /** This boot's cloud-init run in the guest (see guest-cloudinit.ts). */
  cloudInit?: CloudInitRun;
}

export interface TaskState {
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
  exitstatus?: string;
  endtime?: number;
  /** Order in which tasks stopped (the archive index is appended in that order). */
  endSeq?: number;
  log: string[];
  done: Promise<void>;
  abort: AbortController;
}

export interface UserState {
  userid: string;
  password?: string;
  enable: boolean;
  groups: string[];
}
export interface TokenState {
  userid: string;
  tokenid: string;
  secret: string;
  privsep: boolean;
  expire: number;
  comment?: string;
}
export interface AclEntry {
  path: string;
  /** user id, `user@realm!token` or `@group`. */
  ugid: string;
  roleid: string;
  propagate: boolean;
}
export interface PoolState {
  poolid: string;
  comment?: string;
  members: Set<string>;
}

function ipToInt(ip: string): number {
  return ip.split('.').reduce((a, b) => a * 256 + Number(b), 0);
}
function intToIp(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
}

export class ClusterState {
  readonly name: string;
  readonly profile: ProfileFacts;
  readonly clock: Clock;
  readonly rng: Rng;
  readonly nodes = new Map<string, NodeState>();
  readonly vms = new Map<number, VmState>();
  readonly tasks = new Map<string, TaskState>();
  /**
   * The running tasks of each node, as PVE's active task file holds them: `GET .../tasks?source=active`
   * reads these, not every task kept (up to MAX_TASKS), as pveproxy reads only that file. TaskRunner
   * adds a task when it starts and takes it out when it stops.
   */
  readonly runningTasks = new Map<string, Set<TaskState>>();
  /**
   * Each node's finished tasks in the order they ended, as PVE's task index lists them (newest
   * last): the archive listing walks it backwards instead of sorting every task kept, and skips a
   * task rotated out of `tasks` (MAX_TASKS) until TaskRunner drops those from here.
   */
  readonly endedTasks = new Map<string, TaskState[]>();
  readonly users = new Map<string, UserState>();
  readonly tokens = new Map<string, TokenState>();
  readonly acls: AclEntry[] = [];
  readonly roles: Record<string, Set<string>>;
  readonly pools = new Map<string, PoolState>();
  /** Containers from the topology (the simulator manages no container lifecycle). */
  readonly containers = new Map<number, ContainerState>();
  /** A corosync QDevice votes for the cluster (the topology's `qdevice`): see quorum.ts. */
  readonly qdevice: boolean;
  /** Requests and workers refused for want of quorum (quorum.ts), for the tests' accounts. */
  quorumRefusals = 0;
  readonly repoid: string;
  /** SHA-256 fingerprint of the API certificate (`ssl_fingerprint` in /nodes). */
  sslFingerprint = '';
  /** RSA in real PVE; an HMAC key here. */
  readonly ticketKey: Buffer;
  readonly csrfKey: Buffer;
  /** pvestatd period, simulated ms. */
  readonly statInterval = 10_000;
  nextIdLower = 100;
  nextIdUpper = 1_000_000;
  private pidCounter = 0x1000;
  /** Counts stopped tasks, for TaskState.endSeq. */
  taskEnds = 0;
  /** One flock per VMID, whether or not a config exists (lock files outlive configs in PVE). */
  private readonly flocks = new Map<number, Flock>();
  /** The guest migration locks (pve-guest-common GuestHelpers::guest_migration_lock), per VMID. */
  private readonly migrationFlocks = new Map<number, Flock>();

  constructor(t: TopologyCluster, profile: Profile, clock: Clock, seed: number) {
    this.name = t.name;
    this.qdevice = t.qdevice === true;
    this.profile = PROFILES[profile];
    this.clock = clock;
    this.rng = new Rng(seed);
    this.repoid = this.rng.hex(this.profile.repoidLength);
    this.ticketKey = Buffer.from(this.rng.hex(64), 'hex');
    this.csrfKey = Buffer.from(this.rng.hex(64), 'hex');
    this.roles = builtinRoles(this.profile);
    const sharedStorages = new Map<string, StorageState>();
    let ipSeq = 10;
    for (const n of t.nodes) this.addNode(n, sharedStorages, ipSeq++);
    this.users.set('root@pam', { userid: 'root@pam', enable: true, groups: [] });
  }

  private addNode(n: TopologyNode, shared: Map<string, StorageState>, ipSeq: number): void {
    const storages = new Map<string, StorageState>();
    for (const ts of n.storages) {
      let s = ts.shared ? shared.get(ts.id) : undefined;
      if (!s) {
        s = new StorageState(ts);
        if (!this.profile.importContent) s.content.delete('import');
        for (const v of ts.volumes ?? []) {
          const content = v.name.split('/')[0]!;
          if (!s.content.has(content)) continue;
          const volid = `${s.id}:${v.name}`;
          const ext = /\.([a-z0-9]+)$/.exec(v.name)?.[1] ?? 'raw';
          const format = content === 'iso' ? 'iso' : content === 'import' ? ext : (v.format ?? ext);
          s.volumes.set(v.name, {
            volid,
            storage: s.id,
            volname: v.name,
            content,
            format,
            size: v.size,
            ctime: this.clock.epoch(),
            guestAgent: v.guestAgent === true,
          });
        }
        if (ts.shared) shared.set(ts.id, s);
      }
      storages.set(ts.id, s);
    }
    const bridges = new Map<string, BridgeState>();
    for (const b of n.bridges) {
      bridges.set(b.name, { ...b, leases: new Map(), nextLease: b.dhcp ? ipToInt(b.dhcp.split('-')[0]!) : 0 });
    }
    this.nodes.set(n.name, {
      name: n.name,
      cpus: n.cpus,
      cpuModel: n.cpuModel ?? 'Common KVM processor',
      memory: n.memory,
      memoryUsed: n.memoryUsed ?? 0,
      online: n.online !== false,
      bootTime: this.clock.epoch() - 5 * 86400 - 7 * 3600,
      storages,
      bridges,
      ip: `127.0.${Math.floor(ipSeq / 256)}.${ipSeq % 256}`,
      // Derived, not drawn from the PRNG: adding it must not shift the seeded MACs and UUIDs.
      serverId: createHash('md5').update(`${this.name}/${n.name}`).digest('hex').toUpperCase(),
    });
    for (const v of n.vms ?? []) this.seedVm(n.name, v);
    for (const ct of n.containers ?? []) seedContainer(this, n.name, ct);
  }

  private seedVm(node: string, v: NonNullable<TopologyNode['vms']>[number]): void {
    const config: Record<string, string> = {
      name: v.name,
      cores: String(v.cores ?? 1),
      memory: String(v.memory ?? 512),
      ostype: 'l26',
      scsihw: 'virtio-scsi-single',
      net0: `virtio=${this.generateMac()},bridge=${[...this.nodes.get(node)!.bridges.keys()][0] ?? 'vmbr0'}`,
      smbios1: `uuid=${this.rng.uuid()}`,
      vmgenid: this.rng.uuid(),
      meta: `creation-qemu=${this.profile.qemuVersion},ctime=${this.clock.epoch()}`,
    };
    if (v.disk) {
      const vol = this.allocVolume(node, v.disk.storage, v.vmid, v.disk.size, v.template ? 'base' : 'disk');
      config.scsi0 = `${vol.volid},size=${formatSize(vol.size)}`;
      config.boot = 'order=scsi0';
    }
    if (v.cloudinit) {
      const storage = v.disk?.storage ?? 'local-lvm';
      const ci = this.allocVolume(node, storage, v.vmid, 4 * MiB, 'cloudinit');
      config.ide2 = `${ci.volid},media=cdrom`;
      config.ipconfig0 = 'ip=dhcp';
    }
    if (v.agent) config.agent = '1';
    if (v.tags) config.tags = v.tags;
    if (v.description) config.description = v.description;
    if (v.template) config.template = '1';
    const vm = this.newVm(v.vmid, node, config);
    vm.guestAgent = v.guestAgent === true;
    if (v.running && !v.template) {
      vm.status = 'running';
      vm.startedAt = this.clock.now();
      vm.agentReadyAt = vm.startedAt;
    }
  }

  /** The flock of /var/lock/qemu-server/lock-<vmid>.conf. */
  flock(vmid: number): Flock {
    let f = this.flocks.get(vmid);
    if (!f) {
      f = new Flock(`/var/lock/qemu-server/lock-${vmid}.conf`, this.clock);
      this.flocks.set(vmid, f);
    }
    return f;
  }

  /**
   * The flock of /var/lock/pve-manager/pve-migrate-<vmid>: held by a migration's worker for
   * its whole run, beside the config flock (pve-guest-common src/PVE/GuestHelpers.pm:86-97 at
   * 4a8f6cb; PVE's snapshot rollback takes it too, the simulator's does not).
   */
  migrationFlock(vmid: number): Flock {
    let f = this.migrationFlocks.get(vmid);
    if (!f) {
      f = new Flock(`/var/lock/pve-manager/pve-migrate-${vmid}`, this.clock);
      this.migrationFlocks.set(vmid, f);
    }
    return f;
  }

  /**
   * A new VM config. `guestAgent` defaults to true: a VM made without an image the simulator
   * knows (new blank disks, no disk) keeps the simulator's original model of a guest that runs
   * the agent. Create and clone set it from the image or the source VM.
   */
  newVm(vmid: number, node: string, config: Record<string, string>): VmState {
    const vm: VmState = {
      vmid,
      node,
      config,
      pending: {},
      pendingDelete: new Set(),
      status: 'stopped',
      startedAt: 0,
      agentReadyAt: 0,
      guestAgent: true,
      flock: this.flock(vmid),
      guest: { interfaces: [] },
      haManaged: false,
      snapshots: new Map(),
      agent: freshAgentState(),
      paused: false,
      cloudinitSection: {},
      guestDisk: freshGuestDisk(),
    };
    this.vms.set(vmid, vm);
    return vm;
  }

  digest(vm: VmState): string {
    return configDigest(vm.config, vm.pending, vm.pendingDelete, vm.snapshots, vm.cloudinitSection);
  }

  /** A VMID used by a VM or a container (VMIDs are cluster-wide, for both guest types). */
  vmidTaken(vmid: number): boolean {
    return this.vms.has(vmid) || this.containers.has(vmid);
  }

  /** A MAC as PVE generates it: BC:24:11 (PVE >= 8.1) or a random locally administered one. */
  generateMac(): string {
    const bytes = this.profile.proxmoxOui
      ? [0xbc, 0x24, 0x11, this.rng.int(256), this.rng.int(256), this.rng.int(256)]
      : [
          (this.rng.int(256) & 0xfe) | 0x02,
          this.rng.int(256),
          this.rng.int(256),
          this.rng.int(256),
          this.rng.int(256),
          this.rng.int(256),
        ];
    return bytes.map((b) => b.toString(16).padStart(2, '0').toUpperCase()).join(':');
  }

  leaseAddress(node: string, bridge: string, mac: string): string | undefined {
    const b = this.nodes.get(node)?.bridges.get(bridge);
    if (!b?.dhcp) return undefined;
    const existing = b.leases.get(mac.toLowerCase());
    if (existing) return existing;
    const last = ipToInt(b.dhcp.split('-')[1]!);
    if (b.nextLease > last) return undefined;
    const ip = intToIp(b.nextLease++);
    b.leases.set(mac.toLowerCase(), ip);
    return ip;
  }

  bridgePrefix(node: string, bridge: string): number {
    const cidr = this.nodes.get(node)?.bridges.get(bridge)?.cidr;
    return cidr ? Number(cidr.split('/')[1] ?? 24) : 24;
  }

  /** Find a storage visible from a node. */
  storage(node: string, id: string): StorageState | undefined {
    return this.nodes.get(node)?.storages.get(id);
  }

  /** Find a volume by volid on a node. */
  volume(node: string, volid: string): Volume | undefined {
    const i = volid.indexOf(':');
    if (i < 0) return undefined;
    const s = this.storage(node, volid.slice(0, i));
    return s?.volumes.get(volid.slice(i + 1));
  }

  /** Allocate a new VM image volume; throws the storage's out-of-space error. */
  allocVolume(
    node: string,
    storageId: string,
    vmid: number,
    size: number,
    kind: 'disk' | 'base' | 'cloudinit',
    parent?: Volume,
  ): Volume {
    const s = this.storage(node, storageId);
    if (!s) throw new Error(`storage '${storageId}' does not exist`);
    let name: string;
    if (kind === 'cloudinit') name = `vm-${vmid}-cloudinit`;
    else {
      let i = 0;
      // Only this VMID's names can collide; testing each name first keeps an allocation O(volumes)
      // with a small constant, where two replaces per volume made a rollout's allocations O(N^2).
      const mine = `-${vmid}-disk-`;
      const used = new Set<string>();
      for (const v of s.volumes.values())
        if (v.volname.includes(mine)) used.add(v.volname.replace(/^.*\//, '').replace(/\.[a-z0-9]+$/, ''));
      while (used.has(`vm-${vmid}-disk-${i}`) || used.has(`base-${vmid}-disk-${i}`)) i++;
      name = `${kind === 'base' ? 'base' : 'vm'}-${vmid}-disk-${i}`;
    }
    const format = s.isFileBased ? 'qcow2' : 'raw';
    const own = s.isFileBased ? `${vmid}/${name}.${format}` : name;
    // Linked clones name their base: local-lvm:base-9000-disk-0/vm-101-disk-0,
    // local:9000/base-9000-disk-0.qcow2/101/vm-101-disk-0.qcow2
    const volname = parent ? `${parent.volname}/${own}` : own;
    if (!parent && s.avail < size) throw new Error(outOfSpaceMessage(s, volname, size));
    const v: Volume = {
      volid: `${s.id}:${volname}`,
      storage: s.id,
      volname,
      content: 'images',
      format,
      size,
      vmid,
      ctime: this.clock.epoch(),
      ...(parent ? { parent: parent.volid } : {}),
    };
    s.volumes.set(volname, v);
    return v;
  }

  freeVolume(node: string, volid: string): void {
    const i = volid.indexOf(':');
    const s = this.storage(node, volid.slice(0, i));
    s?.volumes.delete(volid.slice(i + 1));
  }

  nextPid(): number {
    this.pidCounter += 1 + this.rng.int(7);
    return this.pidCounter;
  }
}
