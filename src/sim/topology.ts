/**
 * Simulator topology: clusters (each its own listen address), nodes, storages, bridges, VMs.
 * Loaded from YAML (`--topology FILE`) or the built-in seed topology (default-topology.yaml).
 */
import { readFileSync } from 'node:fs';
import { isMap, isSeq, LineCounter, parseDocument } from 'yaml';
import { isProfile, type Profile } from './profiles.ts';

export type StorageType = 'dir' | 'lvmthin' | 'lvm' | 'rbd' | 'cephfs' | 'nfs' | 'zfspool';
export const STORAGE_TYPES: StorageType[] = ['dir', 'lvmthin', 'lvm', 'rbd', 'cephfs', 'nfs', 'zfspool'];
export const CONTENT_TYPES = ['images', 'rootdir', 'iso', 'vztmpl', 'backup', 'snippets', 'import'] as const;

export interface TopologyVolume {
  /** Path inside the storage, e.g. `iso/ubuntu-22.04-cloud.img`. */
  name: string;
  size: number;
  format?: string;
  /**
   * Whether the guest in this image runs qemu-guest-agent. Default false: the stock Ubuntu cloud
   * images do not ship it. A VM imported from the volume (`import-from`) inherits it.
   */
  guestAgent?: boolean;
}
export interface TopologyStorage {
  id: string;
  type: StorageType;
  content: string[];
  total: number;
  used?: number;
  path?: string;
  shared?: boolean;
  /** MB/s used to derive task durations (copy, import, clone). */
  bandwidth?: number;
  volumes?: TopologyVolume[];
}
export interface TopologyBridge {
  name: string;
  cidr?: string;
  gateway?: string;
  /** `FIRST-LAST` IPv4 range the simulated DHCP server leases to guests on this bridge. */
  dhcp?: string;
  vlanAware?: boolean;
}
export interface TopologyVM {
  vmid: number;
  name: string;
  template?: boolean;
  cores?: number;
  memory?: number;
  disk?: { storage: string; size: number };
  cloudinit?: boolean;
  agent?: boolean;
  /** Whether the guest runs qemu-guest-agent (default false); clones of this VM inherit it. */
  guestAgent?: boolean;
  running?: boolean;
  tags?: string;
  description?: string;
}
/**
 * An LXC container present at start. The simulator serves the container list (and the `lxc` rows
 * of `/cluster/resources`), not a container lifecycle: containers are there to be listed, as a
 * monitoring client or a scheduler sees them.
 */
export interface TopologyContainer {
  vmid: number;
  hostname: string;
  cores: number;
  /** MiB. */
  memory: number;
  /** The root file system (`rootfs`) on a storage holding `rootdir`. */
  disk?: { storage: string; size: number };
  running?: boolean;
  template?: boolean;
  tags?: string;
}
export interface TopologyNode {
  name: string;
  cpus: number;
  cpuModel?: string;
  memory: number;
  memoryUsed?: number;
  online?: boolean;
  storages: TopologyStorage[];
  bridges: TopologyBridge[];
  vms?: TopologyVM[];
  containers?: TopologyContainer[];
  /** The node's SSH port on the cluster's listen host (default 0: ephemeral). */
  sshPort?: number;
}
export interface TopologyCluster {
  name: string;
  listen: string;
  profile?: Profile;
  nodes: TopologyNode[];
  /**
   * A corosync QDevice votes for the cluster (always reachable): a two-node cluster keeps its
   * quorum with one node down. Without one, it loses quorum (see ClusterState.quorate).
   */
  qdevice?: boolean;
}
export interface Topology {
  clusters: TopologyCluster[];
}

const UNITS: Record<string, number> = { '': 1, K: 1024, M: 1024 ** 2, G: 1024 ** 3, T: 1024 ** 4, P: 1024 ** 5 };

/** `171.3G`, `270GiB`, `2048` (bytes) -> bytes. Decimal "GB" is read as GiB, like the seed does. */
export function parseSize(v: unknown): number | undefined {
  if (typeof v === 'number' && Number.isFinite(v) && v >= 0) return v;
  if (typeof v !== 'string') return undefined;
  const m = /^\s*(\d+(?:\.\d+)?)\s*([KMGTP]?)(?:i?B)?\s*$/i.exec(v);
  if (!m) return undefined;
  return Math.round(Number(m[1]) * UNITS[(m[2] ?? '').toUpperCase()]!);
}

export class TopologyError extends Error {}

/** `FILE:LINE:COL: ...` messages in file order. */
function sortByPosition(problems: string[], file: string): string[] {
  const key = (p: string): [number, number] => {
    const [line, col] = p
      .slice(file.length + 1)
      .split(':', 2)
      .map(Number);
    return [line || 0, col || 0];
  };
  return [...problems].sort((a, b) => {
    const [la, ca] = key(a);
    const [lb, cb] = key(b);
    return la - lb || ca - cb;
  });
}

export function loadTopologyFile(file: string): Topology {
  return parseTopology(readFileSync(file, 'utf8'), file);
}

export function defaultTopology(): Topology {
  return parseTopology(
    readFileSync(new URL('./default-topology.yaml', import.meta.url), 'utf8'),
    'default-topology.yaml',
  );
}

/** Parse and check a topology document; errors name the file, line and field. */
export function parseTopology(text: string, file: string): Topology {
  const lc = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lc, prettyErrors: false });
  const problems: string[] = [];
  for (const e of doc.errors) {
    const pos = lc.linePos(e.pos[0]);
    problems.push(`${file}:${pos.line}:${pos.col}: ${e.message.split('\n')[0]}`);
  }
  if (problems.length) throw new TopologyError(problems.join('\n'));
  const where = (path: (string | number)[]): string => {
    // A field that is missing is placed at the mapping that lacks it (it was 1:1, the file's start).
    let offset = 0;
    for (let p = path; p.length; p = p.slice(0, -1)) {
      const node = doc.getIn(p, true) as { range?: [number, number] } | undefined;
      if (node && typeof node === 'object' && node.range) {
        offset = node.range[0];
        break;
      }
    }
    const pos = lc.linePos(offset);
    return `${file}:${pos.line}:${pos.col}: ${path.join('.')}`;
  };
  const root = doc.toJS() as unknown;
  const fail = (path: (string | number)[], msg: string) => problems.push(`${where(path)}: ${msg}`);
  const obj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
  if (!obj(root) || !Array.isArray(root.clusters) || root.clusters.length === 0) {
    throw new TopologyError(`${file}: expected a top-level 'clusters' list with at least one cluster`);
  }
  void isMap;
  void isSeq;
  const size = (path: (string | number)[], v: unknown, required: boolean): number => {
    if (v === undefined && !required) return 0;
    const n = parseSize(v);
    if (n === undefined)
      fail(
        path,
        v === undefined
          ? 'required: a size like 100G or a byte count'
          : `expected a size like 100G or a byte count, got ${JSON.stringify(v)}`,
      );
    return n ?? 0;
  };
  const str = (path: (string | number)[], v: unknown, re?: RegExp, what?: string): string => {
    if (typeof v !== 'string' || v === '' || (re && !re.test(v))) {
      fail(
        path,
        v === undefined
          ? `required: ${what ?? 'a non-empty string'}`
          : `expected ${what ?? 'a non-empty string'}, got ${JSON.stringify(v)}`,
      );
      return '';
    }
    return v;
  };
  /** An optional boolean; anything else is reported (a typo such as `guestAgent: yes` in quotes). */
  const flag = (path: (string | number)[], v: unknown): boolean => {
    if (v === undefined || typeof v === 'boolean') return v === true;
    fail(path, `expected true or false, got ${JSON.stringify(v)}`);
    return false;
  };
  const seenListen = new Set<string>();
  const seenNames = new Set<string>();
  const clusters: TopologyCluster[] = root.clusters.map((c: unknown, ci: number): TopologyCluster => {
    const cp = ['clusters', ci];
    if (!obj(c)) {
      fail(cp, 'expected a mapping');
      return { name: '', listen: '', nodes: [] };
    }
    const name = str([...cp, 'name'], c.name, /^[A-Za-z0-9][A-Za-z0-9._-]*$/, 'a cluster name');
    if (name && seenNames.has(name)) fail([...cp, 'name'], `cluster name '${name}' is used twice`);
    seenNames.add(name);
    const listen = str([...cp, 'listen'], c.listen, /^[^\s:]+:\d+$/, 'HOST:PORT');
    if (listen && seenListen.has(listen)) fail([...cp, 'listen'], `address ${listen} is used by another cluster`);
    seenListen.add(listen);
    let profile: Profile | undefined;
    if (c.profile !== undefined) {
      const p = String(c.profile);
      if (isProfile(p)) profile = p;
      else fail([...cp, 'profile'], `expected one of 6.4, 7.4, 8.4, 9.2, got ${JSON.stringify(c.profile)}`);
    }
    if (!Array.isArray(c.nodes) || c.nodes.length === 0) fail([...cp, 'nodes'], 'expected a list of nodes');
    const nodes = (Array.isArray(c.nodes) ? c.nodes : []).map((n: unknown, ni: number): TopologyNode => {
      const np = [...cp, 'nodes', ni];
      if (!obj(n)) {
        fail(np, 'expected a mapping');
        return { name: '', cpus: 0, memory: 0, storages: [], bridges: [] };
      }
      const containers = (Array.isArray(n.containers) ? n.containers : []).map(
        (v: unknown, vi: number): TopologyContainer => {
          const vo = obj(v) ? v : {};
          const vp = [...np, 'containers', vi];
          if (typeof vo.vmid !== 'number' || !Number.isInteger(vo.vmid) || vo.vmid < 100)
            fail([...vp, 'vmid'], 'expected an integer >= 100');
          const disk = obj(vo.disk)
            ? { storage: String(vo.disk.storage), size: size([...vp, 'disk', 'size'], vo.disk.size, true) }
            : undefined;
          return {
            vmid: Number(vo.vmid),
            hostname: str([...vp, 'hostname'], vo.hostname),
            cores: typeof vo.cores === 'number' ? vo.cores : 1,
            memory: typeof vo.memory === 'number' ? vo.memory : 512,
            ...(disk ? { disk } : {}),
            running: flag([...vp, 'running'], vo.running),
            template: flag([...vp, 'template'], vo.template),
            ...(typeof vo.tags === 'string' ? { tags: vo.tags } : {}),
          };
        },
      );
      const sshPort = n.sshPort === undefined ? undefined : Number(n.sshPort);
      if (sshPort !== undefined && !(Number.isInteger(sshPort) && sshPort >= 0 && sshPort <= 65535))
        fail([...np, 'sshPort'], `expected a port number 0-65535, got ${JSON.stringify(n.sshPort)}`);
      const cpus = typeof n.cpus === 'number' && Number.isInteger(n.cpus) && n.cpus > 0 ? n.cpus : 0;
      if (!cpus) fail([...np, 'cpus'], `expected a positive integer, got ${JSON.stringify(n.cpus)}`);
      const storages = (Array.isArray(n.storages) ? n.storages : []).map((s: unknown, si: number): TopologyStorage => {
        const sp = [...np, 'storages', si];
        const so = obj(s) ? s : {};
        const type = so.type as StorageType;
        if (!STORAGE_TYPES.includes(type)) fail([...sp, 'type'], `expected one of ${STORAGE_TYPES.join(', ')}`);
        const content = Array.isArray(so.content) ? so.content.map(String) : [];
        for (const [k, ct] of content.entries()) {
          if (!(CONTENT_TYPES as readonly string[]).includes(ct)) {
            fail([...sp, 'content', k], `unknown content type '${ct}' (allowed: ${CONTENT_TYPES.join(', ')})`);
          }
        }
        const volumes = (Array.isArray(so.volumes) ? so.volumes : []).map((v: unknown, vi: number) => {
          const vo = obj(v) ? v : {};
          const vp = [...sp, 'volumes', vi];
          return {
            name: str([...vp, 'name'], vo.name, /^(iso|vztmpl|import|snippets|backup)\/[^/\s]+$/, 'CONTENT/FILE'),
            size: size([...vp, 'size'], vo.size, true),
            ...(typeof vo.format === 'string' ? { format: vo.format } : {}),
            guestAgent: flag([...vp, 'guestAgent'], vo.guestAgent),
          };
        });
        return {
          id: str([...sp, 'id'], so.id, /^[a-z][a-z0-9\-_.]*[a-z0-9]$/i, 'a storage id'),
          type,
          content,
          total: size([...sp, 'total'], so.total, true),
          used: size([...sp, 'used'], so.used, false),
          ...(typeof so.path === 'string' ? { path: so.path } : {}),
          shared: so.shared === true,
          bandwidth: typeof so.bandwidth === 'number' && so.bandwidth > 0 ? so.bandwidth : 200,
          volumes,
        };
      });
      const bridges = (Array.isArray(n.bridges) ? n.bridges : []).map((b: unknown, bi: number): TopologyBridge => {
        const bo = obj(b) ? b : {};
        const bp = [...np, 'bridges', bi];
        if (bo.dhcp !== undefined && !/^\d+\.\d+\.\d+\.\d+-\d+\.\d+\.\d+\.\d+$/.test(String(bo.dhcp))) {
          fail([...bp, 'dhcp'], 'expected FIRST-LAST IPv4 range');
        }
        return {
          name: str([...bp, 'name'], bo.name, /^vmbr\d{1,4}$|^[a-z][a-z0-9]{1,9}$/, 'a bridge name like vmbr0'),
          ...(typeof bo.cidr === 'string' ? { cidr: bo.cidr } : {}),
          ...(typeof bo.gateway === 'string' ? { gateway: bo.gateway } : {}),
          ...(typeof bo.dhcp === 'string' ? { dhcp: bo.dhcp } : {}),
          vlanAware: bo.vlanAware === true,
        };
      });
      const vms = (Array.isArray(n.vms) ? n.vms : []).map((v: unknown, vi: number): TopologyVM => {
        const vo = obj(v) ? v : {};
        const vp = [...np, 'vms', vi];
        if (typeof vo.vmid !== 'number' || !Number.isInteger(vo.vmid) || vo.vmid < 100)
          fail([...vp, 'vmid'], 'expected an integer >= 100');
        const disk = obj(vo.disk)
          ? { storage: String(vo.disk.storage), size: size([...vp, 'disk', 'size'], vo.disk.size, true) }
          : undefined;
        return {
          vmid: Number(vo.vmid),
          name: str([...vp, 'name'], vo.name),
          template: vo.template === true,
          cores: typeof vo.cores === 'number' ? vo.cores : 1,
          memory: typeof vo.memory === 'number' ? vo.memory : 512,
          ...(disk ? { disk } : {}),
          cloudinit: vo.cloudinit === true,
          agent: vo.agent === true,
          guestAgent: flag([...vp, 'guestAgent'], vo.guestAgent),
          running: vo.running === true,
          ...(typeof vo.tags === 'string' ? { tags: vo.tags } : {}),
          ...(typeof vo.description === 'string' ? { description: vo.description } : {}),
        };
      });
      return {
        name: str([...np, 'name'], n.name, /^[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?$/, 'a node name'),
        cpus,
        ...(typeof n.cpuModel === 'string' ? { cpuModel: n.cpuModel } : {}),
        memory: size([...np, 'memory'], n.memory, true),
        memoryUsed: size([...np, 'memoryUsed'], n.memoryUsed, false),
        online: n.online !== false,
        storages,
        bridges,
        vms,
        ...(containers.length ? { containers } : {}),
        ...(sshPort !== undefined ? { sshPort } : {}),
      };
    });
    // References and duplicates inside the cluster: node names, VM ids, the storages VM disks use.
    const nodeNames = new Set<string>();
    const vmids = new Set<number>();
    nodes.forEach((n, ni) => {
      const np = [...cp, 'nodes', ni];
      if (n.name && nodeNames.has(n.name)) fail([...np, 'name'], `node name '${n.name}' is used twice`);
      nodeNames.add(n.name);
      (n.vms ?? []).forEach((vm, vi) => {
        const vp = [...np, 'vms', vi];
        if (vmids.has(vm.vmid)) fail([...vp, 'vmid'], `VM ${vm.vmid} is defined twice`);
        vmids.add(vm.vmid);
        const imageStorage = (id: string, path: (string | number)[]) => {
          const st = n.storages.find((x) => x.id === id);
          if (!st) fail(path, `no storage '${id}' on node '${n.name}'`);
          else if (!st.content.includes('images'))
            fail(path, `storage '${id}' does not hold VM images (content: ${st.content.join(', ') || 'none'})`);
        };
        if (vm.disk) imageStorage(vm.disk.storage, [...vp, 'disk', 'storage']);
        else if (vm.cloudinit) imageStorage('local-lvm', [...vp, 'cloudinit']);
      });
      // VMIDs are cluster-wide for VMs and containers alike.
      (n.containers ?? []).forEach((ct, ci) => {
        const vp = [...np, 'containers', ci];
        if (vmids.has(ct.vmid)) fail([...vp, 'vmid'], `VMID ${ct.vmid} is defined twice`);
        vmids.add(ct.vmid);
        if (!ct.disk) return;
        const st = n.storages.find((x) => x.id === ct.disk!.storage);
        if (!st) fail([...vp, 'disk', 'storage'], `no storage '${ct.disk.storage}' on node '${n.name}'`);
        else if (!st.content.includes('rootdir'))
          fail(
            [...vp, 'disk', 'storage'],
            `storage '${st.id}' does not hold container volumes (content: ${st.content.join(', ') || 'none'})`,
          );
      });
    });
    const qdevice = flag([...cp, 'qdevice'], c.qdevice);
    return { name, listen, ...(profile ? { profile } : {}), nodes, ...(qdevice ? { qdevice } : {}) };
  });
  if (problems.length) throw new TopologyError(sortByPosition(problems, file).join('\n'));
  return { clusters };
}
