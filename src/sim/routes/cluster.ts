/** `/cluster/nextid`, `/cluster/resources`, `/cluster/tasks`, `/cluster/status`. */
import { hasAnyPriv, hasPriv } from '../auth.ts';
import { die, paramError } from '../errors.ts';
import { configCpus, configMemoryMiB } from '../qemu-config.ts';
import { answeringNode, quorate } from '../quorum.ts';
import type { Route } from '../server.ts';
import type { ClusterState, NodeState } from '../state.ts';
import { MiB, type StorageState } from '../storage.ts';
import { containerStatus } from './monitoring.ts';
import { clusterTasks } from './tasks.ts';

export function nodeUsage(c: ClusterState, n: NodeState): { mem: number; cpu: number } {
  let mem = n.memoryUsed;
  let cores = 0;
  for (const vm of c.vms.values()) {
    if (vm.node !== n.name || vm.status !== 'running') continue;
    mem += configMemoryMiB(vm.config) * MiB * 0.6;
    cores += configCpus(vm.config);
  }
  return { mem: Math.round(mem), cpu: Math.min(1, 0.02 + (cores * 0.05) / Math.max(1, n.cpus)) };
}

export function storageEntry(s: StorageState): Record<string, unknown> {
  const used = Math.min(s.total, s.forcedFull ? s.total : s.used);
  return {
    storage: s.id,
    type: s.type,
    content: [...s.content].sort().join(','),
    active: s.active ? 1 : 0,
    enabled: s.enabled ? 1 : 0,
    shared: s.shared ? 1 : 0,
    total: s.total,
    used,
    avail: s.avail,
    used_fraction: s.total ? used / s.total : 0,
  };
}

export const clusterRoutes: Route[] = [
  {
    method: 'GET',
    path: '/cluster/nextid',
    handler: ({ c, params }) => {
      if (params.vmid !== undefined) {
        const vmid = Number(params.vmid);
        if (c.vmidTaken(vmid)) paramError({ vmid: `VM ${vmid} already exists` });
        return String(vmid);
      }
      for (let id = c.nextIdLower; id < c.nextIdUpper; id++) if (!c.vmidTaken(id)) return String(id);
      return die('unable to get any free VMID in range [100, 999999]');
    },
  },
  {
    method: 'GET',
    path: '/cluster/resources',
    handler: ({ c, auth, params }) => {
      const type = params.type as string | undefined;
      const out: Record<string, unknown>[] = [];
      if (!type || type === 'node') {
        for (const n of c.nodes.values()) {
          if (!hasPriv(c, auth, `/nodes/${n.name}`, 'Sys.Audit')) continue;
          const u = nodeUsage(c, n);
          out.push({
            id: `node/${n.name}`,
            type: 'node',
            node: n.name,
            status: n.online ? 'online' : 'offline',
            ...(n.online
              ? {
                  maxcpu: n.cpus,
                  cpu: u.cpu,
                  maxmem: n.memory,
                  mem: u.mem,
                  maxdisk: 100 * 1024 ** 3,
                  disk: 12 * 1024 ** 3,
                  uptime: c.clock.epoch() - n.bootTime,
                  level: '',
                  'cgroup-mode': 2,
                }
              : {}),
          });
        }
      }
      if (!type || type === 'vm') {
        for (const vm of [...c.vms.values()].sort((a, b) => a.vmid - b.vmid)) {
          if (!hasPriv(c, auth, `/vms/${vm.vmid}`, 'VM.Audit')) continue;
          const online = c.nodes.get(vm.node)?.online;
          const e: Record<string, unknown> = { id: `qemu/${vm.vmid}`, vmid: vm.vmid, node: vm.node, type: 'qemu' };
          // Metrics, name, status and template come from the RRD (the last pvestatd tick,
          // PVE::API2Tools::extract_vm_stats, pve-manager PVE/API2Tools.pm:81-119 at 14a22df3);
          // `lock` and `tags` from the live config (Cluster.pm:554-592). So a create's placeholder
          // shows `lock: create` at once and, from a tick, `name: VM <vmid>`, `status: stopped`.
          if (vm.rrd && online) {
            Object.assign(e, {
              name: vm.rrd.name,
              status: vm.rrd.status,
              template: vm.rrd.template,
              maxcpu: vm.rrd.maxcpu,
              cpu: vm.rrd.cpu,
              maxmem: vm.rrd.maxmem,
              mem: vm.rrd.mem,
              maxdisk: vm.rrd.maxdisk,
              disk: 0,
              diskread: 0,
              diskwrite: 0,
              netin: 0,
              netout: 0,
              uptime: vm.rrd.uptime,
              ...(c.profile.memhost ? { memhost: vm.rrd.mem } : {}),
            });
          } else e.status = 'unknown';
          if (vm.config.lock) e.lock = vm.config.lock;
          if (vm.config.tags) e.tags = vm.config.tags;
          for (const p of c.pools.values()) if (p.members.has(`qemu/${vm.vmid}`)) e.pool = p.poolid;
          out.push(e);
        }
        // Containers (type `lxc`): the same vmstatus numbers `/nodes/{node}/lxc` lists.
        for (const ct of [...c.containers.values()].sort((a, b) => a.vmid - b.vmid)) {
          if (!hasPriv(c, auth, `/vms/${ct.vmid}`, 'VM.Audit')) continue;
          const s = containerStatus(c, ct);
          const e: Record<string, unknown> = { id: `lxc/${ct.vmid}`, vmid: ct.vmid, node: ct.node, type: 'lxc' };
          if (c.nodes.get(ct.node)?.online) {
            for (const k of ['name', 'status', 'cpu', 'mem', 'maxmem', 'disk', 'maxdisk', 'diskread', 'diskwrite'])
              e[k] = s[k];
            Object.assign(e, {
              maxcpu: s.cpus,
              netin: s.netin,
              netout: s.netout,
              uptime: s.uptime,
              template: s.template ?? 0,
            });
          } else e.status = 'unknown';
          if (ct.config.lock) e.lock = ct.config.lock;
          if (ct.config.tags) e.tags = ct.config.tags;
          for (const p of c.pools.values()) if (p.members.has(`lxc/${ct.vmid}`)) e.pool = p.poolid;
          out.push(e);
        }
      }
      if (!type || type === 'storage') {
        for (const n of c.nodes.values()) {
          for (const s of n.storages.values()) {
            if (!hasAnyPriv(c, auth, `/storage/${s.id}`, ['Datastore.Audit', 'Datastore.AllocateSpace'])) continue;
            out.push({
              id: `storage/${n.name}/${s.id}`,
              type: 'storage',
              node: n.name,
              storage: s.id,
              status: n.online && s.active ? 'available' : 'unknown',
              plugintype: s.type,
              content: [...s.content].sort().join(','),
              shared: s.shared ? 1 : 0,
              maxdisk: s.total,
              disk: Math.min(s.total, s.forcedFull ? s.total : s.used),
            });
          }
        }
      }
      if (!type || type === 'pool') {
        for (const p of c.pools.values()) {
          if (hasPriv(c, auth, `/pool/${p.poolid}`, 'Pool.Audit'))
            out.push({ id: `/pool/${p.poolid}`, type: 'pool', pool: p.poolid });
        }
      }
      return out;
    },
  },
  {
    method: 'GET',
    path: '/cluster/tasks',
    handler: ({ c, auth }) => clusterTasks(c, auth),
  },
  {
    method: 'GET',
    path: '/cluster/status',
    handler: ({ c }) => {
      const nodes = [...c.nodes.values()];
      const answering = answeringNode(c);
      return [
        { type: 'cluster', id: 'cluster', name: c.name, nodes: nodes.length, quorate: quorate(c) ? 1 : 0, version: 1 },
        ...nodes.map((n, i) => ({
          type: 'node',
          id: `node/${n.name}`,
          name: n.name,
          online: n.online ? 1 : 0,
          local: n.name === answering ? 1 : 0,
          nodeid: i + 1,
          ip: n.ip,
          level: '',
        })),
      ];
    },
  },
];
