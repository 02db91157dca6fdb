/**
 * What the fleet benchmarks share: a topology of large nodes that hold any N VMs, the manifest of
 * the i-th small VM of a generated fleet, and the classes Proxmox requests are counted in
 * (mutating; a task's status or log; reads of one VM, and /cluster/nextid, one per create; shared
 * reads, which serve every VM of a node or site: the bulk list, a node's tasks, status, bridges,
 * storages).
 */
import { type Simulator, startSimulator } from '../src/sim/index.ts';
import { defaultTopology, type Topology, type TopologyNode } from '../src/sim/topology.ts';

const TiB = 1024 ** 4;

export type RequestClass = 'mutating' | 'task' | 'perVm' | 'shared';

/** The class of a request, by its URL or by the simulator's route (`/nodes/{node}/qemu/{vmid}/config`). */
export function classOf(method: string, url: string): RequestClass {
  const path = url.replace(/\?.*/, '');
  if (method !== 'GET') return 'mutating';
  if (/\/tasks\/[^/]+\/(status|log)$/.test(path)) return 'task';
  if (/\/qemu\/(\d+|\{vmid\})(\/|$)/.test(path) || path.endsWith('/cluster/nextid')) return 'perVm';
  return 'shared';
}

/** `sites` clusters of `nodes` nodes, each node holding every VM it may get (cores, memory, disk, leases). */
export function largeTopology(sites: number, nodes: number, firstPort: number): Topology {
  const seed = defaultTopology().clusters[0]!.nodes[0]!;
  return {
    clusters: Array.from({ length: sites }, (_, s) => ({
      name: `site-${s + 1}`,
      listen: `127.0.0.1:${firstPort + s}`,
      nodes: Array.from({ length: nodes }, (_, j): TopologyNode => {
        const subnet = s * 16 + j;
        return {
          name: `pve-${s + 1}-${j + 1}`,
          cpus: 64,
          memory: 16 * TiB,
          memoryUsed: 0,
          storages: [
            structuredClone(seed.storages.find((x) => x.id === 'local')!),
            { id: 'local-lvm', type: 'lvmthin', content: ['images', 'rootdir'], total: 200 * TiB, bandwidth: 4000 },
          ],
          bridges: [
            {
              name: 'vmbr0',
              cidr: `10.${subnet}.0.1/16`,
              gateway: `10.${subnet}.0.1`,
              dhcp: `10.${subnet}.0.10-10.${subnet}.255.250`,
            },
          ],
        };
      }),
    })),
  };
}

/** A small VM (1 core, 256 MiB, 4 GiB; cloud-init drive and guest agent, as every VM made has), spread over the sites and nodes. */
export function smallVmYaml(i: number, sites: number, nodes: number): string {
  const name = `vm-${String(i).padStart(5, '0')}`;
  const s = i % sites;
  const j = Math.floor(i / sites) % nodes;
  return `apiVersion: proxmox.sankofa.io/v1alpha1
kind: ProxmoxVM
metadata:
  name: ${name}
  namespace: default
spec:
  forProvider:
    name: ${name}
    site: site-${s + 1}
    node: pve-${s + 1}-${j + 1}
    cpu: 1
    memory: 256Mi
    disk: 4Gi
    storage: local-lvm
    network: vmbr0
    image: local:import/ubuntu-22.04-cloud.qcow2
  providerConfigRef:
    name: default
`;
}

/** The in-process simulator over largeTopology, without SSH, at `speed`. */
export function startFleetSimulator(
  sites: number,
  nodes: number,
  speed: number,
  firstPort: number,
): Promise<Simulator> {
  return startSimulator({
    topology: largeTopology(sites, nodes, firstPort),
    speed,
    http: true,
    ephemeralPorts: true,
    authFailDelayMs: 0,
    ssh: false,
    seed: 7,
    tokens: ['root@pam!bench=b0b0b0b0-0000-4000-8000-000000000000'],
  });
}
