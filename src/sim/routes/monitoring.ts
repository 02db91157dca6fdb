/**
 * What monitoring clients read (the Prometheus PVE exporter, schedulers that list every guest):
 * the container list, the subscription status, replication jobs, guests not covered by a backup
 * job, and the RRD series of nodes and VMs.
 *
 * The simulator has no replication or backup jobs, so `/nodes/{node}/replication` is `[]` and
 * every guest the caller may audit is "not backed up". Containers exist only when the topology
 * declares them (`containers:`), and have no lifecycle here.
 */
import { hasPriv, requirePriv } from '../auth.ts';
import { configCpus, configMemoryMiB } from '../qemu-config.ts';
import type { Route } from '../server.ts';
import type { ClusterState, ContainerState } from '../state.ts';
import { MiB } from '../storage.ts';
import { nodeUsage } from './cluster.ts';
import { loadVm, vmPerm } from './qemu-common.ts';
import { vmMaxDisk } from './qemu-power.ts';

/** A container as PVE::LXC::vmstatus gives it (pve-container src/PVE/LXC.pm at 94f5585). */
export function containerStatus(c: ClusterState, ct: ContainerState): Record<string, unknown> {
  const running = ct.status === 'running';
  const maxmem = Number(ct.config.memory ?? 512) * MiB;
  const rootfs = /size=(\d+)([KMGT]?)/.exec(ct.config.rootfs ?? '');
  const unit = { '': 1, K: 1024, M: MiB, G: 1024 * MiB, T: 1024 * 1024 * MiB } as const;
  // vmstatus: a stopped container's maxdisk is the rootfs size, or 4 GiB without one.
  const maxdisk = rootfs ? Number(rootfs[1]) * unit[rootfs[2] as keyof typeof unit] : 4 * 1024 * MiB;
  return {
    vmid: ct.vmid,
    type: 'lxc',
    name: (ct.config.hostname ?? `CT${ct.vmid}`).replace(/\s/g, ''),
    status: ct.status,
    cpus: Number(ct.config.cores ?? c.nodes.get(ct.node)?.cpus ?? 1),
    cpu: running ? 0.004 : 0,
    mem: running ? Math.round(maxmem * 0.18) : 0,
    maxmem,
    swap: 0,
    maxswap: Number(ct.config.swap ?? 0) * MiB,
    disk: running ? Math.round(maxdisk * 0.3) : 0,
    maxdisk,
    diskread: 0,
    diskwrite: 0,
    netin: running ? 2048 : 0,
    netout: running ? 1024 : 0,
    uptime: running ? Math.floor((c.clock.now() - ct.startedAt) / 1000) : 0,
    ...(running ? { pid: 20000 + ct.vmid } : {}),
    ...(ct.config.tags ? { tags: ct.config.tags } : {}),
    ...(ct.config.template === '1' ? { template: 1 } : {}),
    ...(ct.config.lock ? { lock: ct.config.lock } : {}),
  };
}

/**
 * PVE::RRD::create_rrd_data (pve-cluster src/PVE/RRD.pm at 7091d92): [resolution s, points]. PVE 9
 * keeps the new `pve-*-9.0` RRDs; before, the `pve2-*` ones (`$setup_pve2`, no `decade`).
 */
function rrdSetup(c: ClusterState, timeframe: string): [number, number] {
  if (c.profile.profile !== '9.2') {
    const old: Record<string, [number, number]> = {
      hour: [60, 60],
      day: [1800, 70],
      week: [10_800, 70],
      month: [43_200, 70],
      year: [604_800, 70],
    };
    return old[timeframe] ?? old.year!;
  }
  const setup: Record<string, [number, number]> = {
    hour: [60, 60],
    day: [60, 1440],
    week: [1800, 336],
    month: [1800, 1440],
    year: [21_600, 1440],
    decade: [604_800, 570],
  };
  return setup[timeframe] ?? setup.hour!;
}

/**
 * A plausible series: one row per resolution step up to the last complete one (`-e ctime - 1`),
 * values that wander a little around the current load (a deterministic wave, no randomness, so
 * two calls in the same step agree), zeros while the guest did not run.
 */
function series(
  c: ClusterState,
  timeframe: string,
  row: (t: number, wave: number) => Record<string, number> | undefined,
): Array<Record<string, number>> {
  const [reso, count] = rrdSetup(c, timeframe);
  const ctime = reso * Math.floor(c.clock.epoch() / reso);
  const out: Array<Record<string, number>> = [];
  for (let i = count; i >= 1; i--) {
    const t = ctime - reso * i;
    const wave = 1 + 0.1 * Math.sin(t / (reso * 7));
    const r = row(t, wave);
    out.push(r ? { time: t, ...r } : { time: t });
  }
  return out;
}

export const monitoringRoutes: Route[] = [
  {
    // pve-container src/PVE/API2/LXC.pm vmlist: only CTs with VM.Audit on /vms/<vmid>.
    method: 'GET',
    path: '/nodes/{node}/lxc',
    handler: ({ c, auth, params }) =>
      [...c.containers.values()]
        .filter((ct) => ct.node === params.node && hasPriv(c, auth, `/vms/${ct.vmid}`, 'VM.Audit'))
        .sort((a, b) => a.vmid - b.vmid)
        .map((ct) => containerStatus(c, ct)),
  },
  {
    // pve-manager PVE/API2/Subscription.pm `get` without a key: `NotFound` until 7.2, `notfound`
    // from the switch to Proxmox::RS::Subscription (d017de1f, 7.3); the pricing URL moved in 8.x.
    // `serverid` only with Sys.Audit on the node.
    method: 'GET',
    path: '/nodes/{node}/subscription',
    handler: ({ c, auth, params }) => {
      const p = c.profile.profile;
      const node = c.nodes.get(String(params.node))!;
      return {
        status: p === '6.4' ? 'NotFound' : 'notfound',
        message: 'There is no subscription key',
        url:
          p === '8.4' || p === '9.2'
            ? 'https://www.proxmox.com/en/proxmox-virtual-environment/pricing'
            : 'https://www.proxmox.com/proxmox-ve/pricing',
        ...(hasPriv(c, auth, `/nodes/${node.name}`, 'Sys.Audit') ? { serverid: node.serverId } : {}),
      };
    },
  },
  {
    // pve-manager PVE/API2/Replication.pm `status`: the node's jobs; the simulator has none.
    method: 'GET',
    path: '/nodes/{node}/replication',
    handler: () => [],
  },
  {
    // pve-manager PVE/API2/Cluster/BackupInfo.pm `index`.
    method: 'GET',
    path: '/cluster/backup-info',
    handler: () => [{ subdir: 'not-backed-up' }],
  },
  {
    // BackupInfo.pm get_guests_not_in_backup: Sys.Audit on `/`; guests the caller may audit and no
    // backup job includes (there are no jobs here): VMs by `name`, containers by `hostname`.
    method: 'GET',
    path: '/cluster/backup-info/not-backed-up',
    perm: ({ c, auth }) => requirePriv(c, auth, '/', ['Sys.Audit']),
    handler: ({ c, auth }) => {
      const out: Array<{ vmid: number; type: string; name?: string }> = [];
      for (const vm of c.vms.values())
        out.push({ vmid: vm.vmid, type: 'qemu', ...(vm.config.name ? { name: vm.config.name } : {}) });
      for (const ct of c.containers.values())
        out.push({ vmid: ct.vmid, type: 'lxc', ...(ct.config.hostname ? { name: ct.config.hostname } : {}) });
      return out.filter((g) => hasPriv(c, auth, `/vms/${g.vmid}`, 'VM.Audit')).sort((a, b) => a.vmid - b.vmid);
    },
  },
  {
    // pve-manager PVE/API2/Nodes.pm `rrddata`: Sys.Audit on the node; the pve2-node RRD columns.
    method: 'GET',
    path: '/nodes/{node}/rrddata',
    perm: ({ c, auth, params }) => requirePriv(c, auth, `/nodes/${params.node}`, ['Sys.Audit']),
    handler: ({ c, params }) => {
      const n = c.nodes.get(String(params.node))!;
      const u = nodeUsage(c, n);
      const GiB = 1024 * MiB;
      return series(c, String(params.timeframe), (t, w) =>
        t < n.bootTime
          ? undefined
          : {
              cpu: u.cpu * w,
              maxcpu: n.cpus,
              iowait: 0.0002 * w,
              loadavg: 0.21 * w,
              memtotal: n.memory,
              memused: Math.round(u.mem * w),
              swaptotal: 8 * GiB,
              swapused: 0,
              roottotal: 100 * GiB,
              rootused: 12 * GiB,
              netin: 1500 * w,
              netout: 900 * w,
            },
      );
    },
  },
  {
    // qemu-server PVE/API2/Qemu.pm `rrddata`: VM.Audit; the pve2-vm RRD columns.
    method: 'GET',
    path: '/nodes/{node}/qemu/{vmid}/rrddata',
    perm: vmPerm('VM.Audit'),
    handler: ({ c, params }) => {
      const vm = loadVm(c, String(params.node), Number(params.vmid));
      const maxmem = configMemoryMiB(vm.config) * MiB;
      const maxcpu = configCpus(vm.config);
      const maxdisk = vmMaxDisk(c, vm);
      const since = vm.status === 'running' ? Math.floor(vm.startedAt / 1000) : Number.POSITIVE_INFINITY;
      return series(c, String(params.timeframe), (t, w) => {
        const ran = t >= since;
        return {
          maxcpu,
          cpu: ran ? 0.013 * w : 0,
          maxmem,
          mem: ran ? Math.round(maxmem * 0.42 * w) : 0,
          maxdisk,
          disk: 0,
          netin: ran ? 1024 * w : 0,
          netout: ran ? 512 * w : 0,
          diskread: ran ? 4096 * w : 0,
          diskwrite: ran ? 2048 * w : 0,
        };
      });
    },
  },
];
