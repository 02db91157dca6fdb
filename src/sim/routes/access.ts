/** `/version`, `/access/ticket`, `/access/permissions`. */
import { login, makeCsrf, makeTicket, privileges } from '../auth.ts';
import { PveHttpError } from '../errors.ts';
import type { Route } from '../server.ts';

export const accessRoutes: Route[] = [
  {
    method: 'GET',
    path: '/version',
    handler: ({ c }) => ({ version: c.profile.version, release: c.profile.release, repoid: c.repoid }),
  },
  {
    method: 'POST',
    path: '/access/ticket',
    noAuth: true,
    handler: ({ c, params }) => {
      const userid = login(c, String(params.username), String(params.password), params.realm as string | undefined);
      return {
        username: userid,
        ticket: makeTicket(c, userid),
        CSRFPreventionToken: makeCsrf(c, userid),
        cap: capabilities(userid === 'root@pam'),
        clustername: c.name,
      };
    },
  },
  {
    method: 'GET',
    path: '/access/ticket',
    noAuth: true,
    handler: () => null,
  },
  {
    method: 'GET',
    path: '/access/permissions',
    handler: ({ c, auth, params }) => {
      if (params.userid !== undefined && params.userid !== auth.authid && auth.userid !== 'root@pam') {
        throw new PveHttpError(403, 'Permission check failed (/access, Sys.Audit)');
      }
      const paths = new Set<string>(['/', '/vms', '/storage', '/nodes', '/pool', '/sdn', '/access']);
      if (typeof params.path === 'string') {
        paths.clear();
        paths.add(params.path);
      } else {
        for (const a of c.acls) paths.add(a.path);
        for (const n of c.nodes.keys()) paths.add(`/nodes/${n}`);
      }
      const out: Record<string, Record<string, number>> = {};
      for (const p of paths) {
        const privs = privileges(c, auth, p);
        if (privs.size || typeof params.path === 'string')
          out[p] = Object.fromEntries([...privs].sort().map((x) => [x, 1]));
      }
      return out;
    },
  },
];

function capabilities(root: boolean): Record<string, Record<string, number>> {
  const one = (xs: string[]) => Object.fromEntries(xs.map((x) => [x, 1]));
  if (!root) return { vms: {}, storage: {}, nodes: {}, access: {}, dc: {}, sdn: {} };
  return {
    vms: one(['VM.Allocate', 'VM.Audit', 'VM.Clone', 'VM.Config.Disk', 'VM.PowerMgmt']),
    storage: one(['Datastore.Allocate', 'Datastore.AllocateSpace', 'Datastore.Audit']),
    nodes: one(['Sys.Audit', 'Sys.Modify', 'Sys.PowerMgmt']),
    access: one(['User.Modify', 'Permissions.Modify']),
    dc: one(['Sys.Audit', 'SDN.Use']),
    sdn: one(['SDN.Use', 'SDN.Audit']),
  };
}
