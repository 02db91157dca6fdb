/**
 * Directory indexes: `GET /`, `/access`, `/cluster`, `/nodes/{node}` and a VM's
 * `/nodes/{node}/qemu/{vmid}`. PVE answers these with a fixed list written in each handler (not
 * the methods it serves), so the lists here are PVE's own, per release, whether or not the
 * simulator serves the children (a client that follows a child it does not serve gets the 501 of
 * any method the simulator does not serve).
 */
import type { Route } from '../server.ts';
import type { ClusterState } from '../state.ts';
import { loadVm, vmPerm } from './qemu-common.ts';

const names = (xs: readonly string[], key: string) => xs.map((x) => ({ [key]: x }));

/**
 * pve-manager PVE/API2/Nodes.pm `index` (6.4-7 be0bdb1a, 7.4-4 4a8501a8, 8.4.1 2a5fa54a, 9.x
 * 14a22df3). Before 9 `sdn` is pushed only `if $have_sdn` (libpve-network-perl installed); the
 * package is only `Suggests` of pve-manager 6.4/7.4 (debian/control) and a dependency from 8.0,
 * so 6.4 and 7.4 are modelled without it.
 */
function nodeIndex(c: ClusterState): string[] {
  const p = c.profile.profile;
  const base = [
    'aplinfo',
    'apt',
    'capabilities',
    'ceph',
    'certificates',
    'config',
    ...(p === '6.4' ? ['cpu'] : []),
    'disks',
    'dns',
    'firewall',
    ...(p === '6.4' ? [] : ['hardware']),
    'hosts',
    'journal',
    'lxc',
    ...(p === '8.4' || p === '9.2' ? ['migrateall'] : []),
    'netstat',
    'network',
    'qemu',
    ...(p === '9.2' ? ['query-oci-repo-tags'] : []),
    ...(p === '6.4' ? [] : ['query-url-metadata']),
    'replication',
    'report',
    'rrd',
    'rrddata',
    'scan',
    ...(p === '9.2' ? ['sdn'] : []),
    'services',
    'spiceshell',
    'startall',
    'status',
    'stopall',
    'storage',
    'subscription',
    ...(p === '8.4' || p === '9.2' ? ['suspendall'] : []),
    'syslog',
    'tasks',
    'termproxy',
    'time',
    'version',
    'vncshell',
    'vzdump',
    'wakeonlan',
  ];
  return p === '8.4' ? [...base, 'sdn'] : base;
}

/** pve-manager PVE/API2/Cluster.pm `index`, same commits; `sdn` as for nodes. */
function clusterIndex(c: ClusterState): string[] {
  const p = c.profile.profile;
  if (p === '6.4')
    return [
      'log',
      'options',
      'resources',
      'replication',
      'tasks',
      'backup',
      'ha',
      'status',
      'nextid',
      'firewall',
      'config',
      'acme',
      'ceph',
      'metrics',
    ];
  return [
    'acme',
    'backup',
    'backup-info',
    ...(p === '9.2' ? ['bulk-action'] : []),
    'ceph',
    'config',
    'firewall',
    'ha',
    'jobs',
    'log',
    ...(p === '7.4' ? [] : ['mapping']),
    'metrics',
    ...(p === '7.4' ? [] : ['notifications']),
    'nextid',
    'options',
    ...(p === '9.2' ? ['qemu'] : []),
    'replication',
    'resources',
    'status',
    'tasks',
    ...(p === '7.4' ? [] : ['sdn']),
  ];
}

/**
 * pve-access-control PVE/API2/AccessControl.pm `index`: the subclasses in registration order,
 * then `ticket` and `password`; `openid` and `tfa` became subclasses in 7.0 (6.4-1 2942ba4 has
 * users, groups, roles, acl, domains).
 */
function accessIndex(c: ClusterState): string[] {
  const sub = ['users', 'groups', 'roles', 'acl', 'domains'];
  if (c.profile.profile !== '6.4') sub.push('openid', 'tfa');
  return [...sub, 'ticket', 'password'];
}

/** qemu-server PVE/API2/Qemu.pm `vmdiridx` (6.4-2 c948e143; 7.4-3 47cf3044 on). */
function vmIndex(c: ClusterState): string[] {
  const base = ['config', 'pending', 'status', 'unlink', 'vncproxy', 'termproxy', 'migrate', 'resize', 'move'];
  const rest = ['rrd', 'rrddata', 'monitor', 'agent', 'snapshot', 'spiceproxy', 'sendkey', 'firewall'];
  if (c.profile.profile === '6.4') return [...base, ...rest];
  return [base[0]!, 'cloudinit', ...base.slice(1), ...rest, 'mtunnel', 'remote_migrate'];
}

export const indexRoutes: Route[] = [
  {
    // PVE::API2 `index` (pve-manager PVE/API2.pm): `version`, then the subclasses in order.
    method: 'GET',
    path: '/',
    handler: () => names(['version', 'cluster', 'nodes', 'storage', 'access', 'pools'], 'subdir'),
  },
  { method: 'GET', path: '/access', handler: ({ c }) => names(accessIndex(c), 'subdir') },
  { method: 'GET', path: '/cluster', handler: ({ c }) => names(clusterIndex(c), 'name') },
  { method: 'GET', path: '/nodes/{node}', handler: ({ c }) => names(nodeIndex(c), 'name') },
  {
    method: 'GET',
    path: '/nodes/{node}/qemu/{vmid}',
    perm: vmPerm('VM.Audit'),
    handler: ({ c, params }) => {
      loadVm(c, String(params.node), Number(params.vmid));
      return names(vmIndex(c), 'subdir');
    },
  },
];
