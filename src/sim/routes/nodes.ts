/** `/nodes`, node status, network, storage, storage content. */
import { hasAnyPriv, hasPriv, requirePriv } from '../auth.ts';
import { die } from '../errors.ts';
import type { Route } from '../server.ts';
import { volumeBytes } from '../storage-files.ts';
import { nodeUsage, storageEntry } from './cluster.ts';

export const nodeRoutes: Route[] = [
  {
    method: 'GET',
    path: '/nodes',
    handler: ({ c, auth }) =>
      [...c.nodes.values()].map((n) => {
        const u = nodeUsage(c, n);
        const audit = hasPriv(c, auth, `/nodes/${n.name}`, 'Sys.Audit');
        return {
          node: n.name,
          id: `node/${n.name}`,
          type: 'node',
          status: n.online ? 'online' : 'offline',
          ssl_fingerprint: c.sslFingerprint,
          level: '',
          ...(n.online && audit
            ? {
                cpu: u.cpu,
                maxcpu: n.cpus,
                mem: u.mem,
                maxmem: n.memory,
                disk: 12 * 1024 ** 3,
                maxdisk: 100 * 1024 ** 3,
                uptime: c.clock.epoch() - n.bootTime,
              }
            : {}),
        };
      }),
  },
  {
    method: 'GET',
    path: '/nodes/{node}/status',
    perm: ({ c, auth, params }) => requirePriv(c, auth, `/nodes/${params.node}`, ['Sys.Audit']),
    handler: ({ c, params }) => {
      const n = c.nodes.get(String(params.node))!;
      const u = nodeUsage(c, n);
      return {
        uptime: c.clock.epoch() - n.bootTime,
        loadavg: ['0.21', '0.18', '0.12'],
        cpu: u.cpu,
        wait: 0.0002,
        idle: 0,
        cpuinfo: {
          model: n.cpuModel,
          cpus: n.cpus,
          sockets: n.cpus > 16 ? 2 : 1,
          cores: n.cpus > 16 ? Math.ceil(n.cpus / 4) : n.cpus,
          mhz: '2600.000',
          hvm: '1',
          user_hz: 100,
          flags: 'fpu vme de pse tsc msr pae mce cx8 apic sep mtrr vmx',
        },
        // 9.x adds `available` (MemAvailable), which the 9.2 schema requires.
        memory: {
          total: n.memory,
          used: u.mem,
          free: n.memory - u.mem,
          ...(c.profile.profile === '9.2' ? { available: n.memory - u.mem } : {}),
        },
        swap: { total: 8 * 1024 ** 3, used: 0, free: 8 * 1024 ** 3 },
        rootfs: { total: 100 * 1024 ** 3, used: 12 * 1024 ** 3, free: 88 * 1024 ** 3, avail: 83 * 1024 ** 3 },
        ksm: { shared: 0 },
        kversion: `Linux ${c.profile.kernel} #1 SMP PREEMPT_DYNAMIC PMX ${c.profile.kernel}`,
        pveversion: c.profile.pveManagerVersion,
        'boot-info': { mode: 'efi', secureboot: 0 },
        'current-kernel': {
          sysname: 'Linux',
          release: c.profile.kernel,
          machine: 'x86_64',
          version: '#1 SMP PREEMPT_DYNAMIC',
        },
      };
    },
  },
  {
    method: 'GET',
    path: '/nodes/{node}/version',
    handler: ({ c }) => ({ version: c.profile.version, release: c.profile.release, repoid: c.repoid }),
  },
  {
    method: 'GET',
    path: '/nodes/{node}/network',
    perm: ({ c, auth, params }) => requirePriv(c, auth, `/nodes/${params.node}`, ['Sys.Audit']),
    handler: ({ c, params }) => {
      const n = c.nodes.get(String(params.node))!;
      const type = params.type as string | undefined;
      const out: Record<string, unknown>[] = [];
      let port = 1;
      for (const b of n.bridges.values()) {
        const phys = `eno${port++}`;
        out.push({
          iface: phys,
          type: 'eth',
          method: 'manual',
          method6: 'manual',
          families: ['inet'],
          active: 1,
          exists: 1,
          priority: port,
        });
        const [address, prefix] = (b.cidr ?? '').split('/');
        out.push({
          iface: b.name,
          type: 'bridge',
          method: b.cidr ? 'static' : 'manual',
          method6: 'manual',
          families: ['inet'],
          active: 1,
          autostart: 1,
          bridge_ports: phys,
          bridge_stp: 'off',
          bridge_fd: '0',
          ...(b.vlanAware ? { bridge_vlan_aware: 1 } : {}),
          ...(b.cidr ? { cidr: b.cidr, address, netmask: prefix } : {}),
          ...(b.gateway ? { gateway: b.gateway } : {}),
          priority: port + 10,
        });
      }
      return out.filter((i) => {
        if (!type) return true;
        if (type === 'any_bridge') return i.type === 'bridge' || i.type === 'OVSBridge';
        return i.type === type;
      });
    },
  },
  {
    method: 'GET',
    path: '/nodes/{node}/storage',
    handler: ({ c, auth, params }) => {
      const n = c.nodes.get(String(params.node))!;
      return [...n.storages.values()]
        .filter((s) => hasAnyPriv(c, auth, `/storage/${s.id}`, ['Datastore.Audit', 'Datastore.AllocateSpace']))
        .filter((s) => !params.storage || s.id === params.storage)
        .filter(
          (s) =>
            !params.content ||
            String(params.content)
              .split(',')
              .every((ct) => s.content.has(ct)),
        )
        .filter((s) => params.enabled === undefined || Number(params.enabled) === 0 || s.enabled)
        .map(storageEntry);
    },
  },
  {
    method: 'GET',
    path: '/nodes/{node}/storage/{storage}',
    handler: () => ['content', 'download-url', 'status', 'upload'].map((subdir) => ({ subdir })),
  },
  {
    method: 'GET',
    path: '/nodes/{node}/storage/{storage}/status',
    perm: ({ c, auth, params }) =>
      requirePriv(c, auth, `/storage/${params.storage}`, ['Datastore.Audit', 'Datastore.AllocateSpace'], { any: true }),
    handler: ({ c, params }) => {
      const s = c.storage(String(params.node), String(params.storage));
      if (!s) die(`storage '${params.storage}' does not exist`);
      const e = storageEntry(s);
      delete e.storage;
      return e;
    },
  },
  {
    method: 'GET',
    path: '/nodes/{node}/storage/{storage}/content',
    perm: ({ c, auth, params }) =>
      requirePriv(c, auth, `/storage/${params.storage}`, ['Datastore.Audit', 'Datastore.AllocateSpace'], { any: true }),
    handler: ({ c, params }) => {
      const s = c.storage(String(params.node), String(params.storage));
      if (!s) die(`storage '${params.storage}' does not exist`);
      // volume_list: only the storage's configured content types (a snippet written over SFTP
      // into a storage without `snippets` is a file, not a volume), sorted by lc(volid)
      // (pve-storage src/PVE/Storage.pm:1297-1317 at 0c56bad).
      return (
        [...s.volumes.values()]
          .filter((v) => s.content.has(v.content))
          .filter((v) => !params.content || v.content === params.content)
          // list_volumes with a vmid: images and backups by owner, no ISOs or templates, every
          // snippet and import file (Plugin.pm:1769-1819: those are listed without a vmid filter).
          .filter(
            (v) =>
              params.vmid === undefined ||
              v.content === 'snippets' ||
              v.content === 'import' ||
              v.vmid === Number(params.vmid),
          )
          .sort((a, b) =>
            a.volid.toLowerCase() < b.volid.toLowerCase() ? -1 : a.volid.toLowerCase() > b.volid.toLowerCase() ? 1 : 0,
          )
          .map((v) => ({
            volid: v.volid,
            content: v.content,
            format: v.format,
            size: volumeBytes(v),
            ctime: v.file?.ctime ?? v.ctime,
            ...(v.vmid !== undefined ? { vmid: v.vmid } : {}),
            // Plugin.pm $get_subdir_files: a backup's guest type from archive_info.
            ...(v.content === 'backup'
              ? { subtype: /^backup\/vzdump-(lxc|openvz|qemu)-/.exec(v.volname)?.[1] ?? 'unknown' }
              : {}),
            ...(v.parent ? { parent: v.parent.split(':')[1] } : {}),
            ...(v.content === 'images' ? { used: s.type === 'lvmthin' ? Math.round(v.size * 0.1) : v.size } : {}),
          }))
      );
    },
  },
];
