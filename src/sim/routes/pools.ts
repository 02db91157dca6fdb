/**
 * Resource pools (pve-manager PVE/API2/Pool.pm at 14a22df3; 6.4-7 be0bdb1a where noted): list,
 * create, read with members, update membership (`vms`, `storage`, `delete`, and from 8.x
 * `allow-move`), delete an empty pool. Members are `qemu/<vmid>`, `lxc/<vmid>` and
 * `storage/<id>`; a VMID is in at most one pool.
 *
 * Pool ACLs reach the members (auth.ts poolPrivileges): a role on `/pool/<id>` applies to
 * `/vms/<vmid>` and `/storage/<id>` of every member. A VM being cloned into a pool joins it only
 * at the end of the clone task (qemu-clone.ts), so until then a pool-limited token cannot see it.
 */
import { hasPriv, requirePriv } from '../auth.ts';
import { die } from '../errors.ts';
import { splitList } from '../schema/index.ts';
import type { Route, RouteCtx } from '../server.ts';
import type { ClusterState, PoolState } from '../state.ts';
import { containerStatus } from './monitoring.ts';
import { vmStatus } from './qemu-power.ts';

/** The pool a VMID belongs to (`$usercfg->{vms}->{$vmid}`). */
export function poolOfVmid(c: ClusterState, vmid: number): PoolState | undefined {
  for (const p of c.pools.values()) if (p.members.has(`qemu/${vmid}`) || p.members.has(`lxc/${vmid}`)) return p;
  return undefined;
}

/** Pool.pm `index`/`read_pool` members: guests as /cluster/resources rows, storages per node. */
function members(c: ClusterState, p: PoolState, type?: string): Array<Record<string, unknown>> {
  const out: Array<Record<string, unknown>> = [];
  for (const m of [...p.members].sort()) {
    const [kind, id] = m.split('/') as [string, string];
    if (type && kind !== type) continue;
    if (kind === 'qemu') {
      const vm = c.vms.get(Number(id));
      if (!vm) continue;
      const s = vmStatus(c, vm);
      out.push({
        id: m,
        type: 'qemu',
        vmid: vm.vmid,
        node: vm.node,
        name: s.name,
        status: s.status,
        maxmem: s.maxmem,
        maxdisk: s.maxdisk,
        uptime: s.uptime,
        template: s.template ?? 0,
      });
    } else if (kind === 'lxc') {
      const ct = c.containers.get(Number(id));
      if (!ct) continue;
      const s = containerStatus(c, ct);
      out.push({ id: m, type: 'lxc', vmid: ct.vmid, node: ct.node, name: s.name, status: s.status });
    } else if (kind === 'storage') {
      for (const n of c.nodes.values())
        if (n.storages.has(id))
          out.push({ id: `storage/${n.name}/${id}`, type: 'storage', storage: id, node: n.name, status: 'available' });
    }
  }
  return out;
}

/** `check_perm_modify` on a member path: Permissions.Modify, or VM.Allocate / Datastore.Allocate there. */
function checkPermModify(ctx: RouteCtx, path: string): void {
  const { c, auth } = ctx;
  if (hasPriv(c, auth, path, 'Permissions.Modify')) return;
  requirePriv(c, auth, path, [path.startsWith('/vms/') ? 'VM.Allocate' : 'Datastore.Allocate']);
}

function loadPool(c: ClusterState, poolid: string, prefix: string): PoolState {
  const p = c.pools.get(poolid);
  if (!p) die(`${prefix}pool '${poolid}' does not exist`);
  return p;
}

export const poolRoutes: Route[] = [
  {
    method: 'GET',
    path: '/pools',
    handler: ({ c, auth, params }) =>
      [...c.pools.values()]
        .filter((p) => params.poolid === undefined || p.poolid === params.poolid)
        .filter((p) => hasPriv(c, auth, `/pool/${p.poolid}`, 'Pool.Audit'))
        .map((p) => ({
          poolid: p.poolid,
          ...(p.comment ? { comment: p.comment } : {}),
          // 9.x lists the members when asked for one pool (`poolid`), like read_pool.
          ...(params.poolid !== undefined ? { members: members(c, p, params.type as string | undefined) } : {}),
        })),
  },
  {
    method: 'POST',
    path: '/pools',
    perm: ({ c, auth, params }) => requirePriv(c, auth, `/pool/${params.poolid}`, ['Pool.Allocate']),
    handler: ({ c, params }) => {
      const poolid = String(params.poolid);
      if (c.pools.has(poolid)) die(`create pool failed: pool '${poolid}' already exists`);
      if (!/^[A-Za-z]/.test(poolid.split('/').pop()!)) die('create pool failed: pool name must start with a letter');
      c.pools.set(poolid, {
        poolid,
        ...(params.comment ? { comment: String(params.comment) } : {}),
        members: new Set(),
      });
      return null;
    },
  },
  {
    method: 'GET',
    path: '/pools/{poolid}',
    perm: ({ c, auth, params }) => requirePriv(c, auth, `/pool/${params.poolid}`, ['Pool.Audit']),
    handler: ({ c, params }) => {
      const p = loadPool(c, String(params.poolid), '');
      return {
        ...(p.comment ? { comment: p.comment } : {}),
        members: members(c, p, params.type as string | undefined),
      };
    },
  },
  {
    method: 'PUT',
    path: '/pools/{poolid}',
    perm: ({ c, auth, params }) => requirePriv(c, auth, `/pool/${params.poolid}`, ['Pool.Allocate']),
    handler: (ctx) => {
      const { c, auth, params } = ctx;
      const fail = (m: string): never => die(`update pools failed: ${m}`);
      const p = loadPool(c, String(params.poolid), 'update pools failed: ');
      if (params.comment !== undefined) p.comment = String(params.comment);
      for (const id of splitList(params.vms as string | undefined)) {
        const vmid = Number(id);
        checkPermModify(ctx, `/vms/${vmid}`);
        const key = c.containers.has(vmid) ? `lxc/${vmid}` : `qemu/${vmid}`;
        if (params.delete) {
          if (!p.members.has(key)) fail(`VM ${vmid} is not a pool member`);
          p.members.delete(key);
          continue;
        }
        if (p.members.has(key)) fail(`VM ${vmid} is already a pool member`);
        const existing = poolOfVmid(c, vmid);
        if (existing) {
          if (c.profile.profile === '6.4' || c.profile.profile === '7.4')
            fail(`VM ${vmid} belongs already to pool '${existing.poolid}'`);
          if (!params['allow-move'])
            fail(`VM ${vmid} belongs already to pool '${existing.poolid}' and 'allow-move' is not set`);
          requirePriv(c, auth, `/pool/${existing.poolid}`, ['Pool.Allocate']);
          existing.members.delete(key);
        }
        p.members.add(key);
      }
      for (const sid of splitList(params.storage as string | undefined)) {
        checkPermModify(ctx, `/storage/${sid}`);
        const key = `storage/${sid}`;
        if (params.delete) {
          if (!p.members.has(key)) fail(`Storage '${sid}' is not a pool member`);
          p.members.delete(key);
        } else {
          if (p.members.has(key)) fail(`Storage '${sid}' is already a pool member`);
          p.members.add(key);
        }
      }
      return null;
    },
  },
  {
    method: 'DELETE',
    path: '/pools/{poolid}',
    perm: ({ c, auth, params }) => requirePriv(c, auth, `/pool/${params.poolid}`, ['Pool.Allocate']),
    handler: ({ c, params }) => {
      const p = loadPool(c, String(params.poolid), 'delete pool failed: ');
      for (const m of [...p.members].sort()) {
        const [kind, id] = m.split('/');
        die(
          `delete pool failed: pool '${p.poolid}' is not empty (contains ${kind === 'storage' ? `storage '${id}'` : `VM ${id}`})`,
        );
      }
      c.pools.delete(p.poolid);
      // delete_pool_acl: the pool's ACL entries go with it.
      for (let i = c.acls.length - 1; i >= 0; i--) if (c.acls[i]!.path === `/pool/${p.poolid}`) c.acls.splice(i, 1);
      return null;
    },
  },
];
