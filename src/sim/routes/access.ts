/**
 * `/version`, `/access/ticket`, `/access/permissions`, and (userRoutes) users, API tokens, ACLs
 * and roles. Tokens and ACL entries made here are the same objects SimCluster.addToken/setAcl
 * (the command line's `--token`) make, so they authenticate and authorize alike.
 */
import { hasAnyPriv, hasPriv, login, makeCsrf, makeTicket, privileges, requirePriv } from '../auth.ts';
import { die, PveHttpError, paramError } from '../errors.ts';
import { builtinRoles } from '../privileges.ts';
import { PROFILES } from '../profiles.ts';
import { splitList } from '../schema/index.ts';
import type { Route, RouteCtx } from '../server.ts';
import type { ClusterState, TokenState, UserState } from '../state.ts';

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

/** check_user_exist (pve-access-control src/PVE/AccessControl.pm at 5ccd07d). */
function userOf(c: ClusterState, userid: string): UserState {
  const u = c.users.get(userid);
  if (!u) die(`no such user ('${userid}')`);
  return u;
}

function tokenInfo(t: TokenState): Record<string, unknown> {
  return { privsep: t.privsep ? 1 : 0, expire: t.expire, ...(t.comment ? { comment: t.comment } : {}) };
}

/**
 * The token methods' `['or', ['userid-param', 'self'], ['userid-group', ['User.Modify']]]`: the
 * user itself, or User.Modify on /access/groups.
 */
function tokenPerm(ctx: RouteCtx): void {
  if (ctx.params.userid === ctx.auth.userid) return;
  requirePriv(ctx.c, ctx.auth, '/access/groups', ['User.Modify']);
}

const TOKEN_PATH = '/access/users/{userid}/token';

/** Users, tokens, ACLs and roles (pve-access-control src/PVE/API2/{User,ACL,Role}.pm at 5ccd07d). */
export const userRoutes: Route[] = [
  {
    // User.pm `index`: users visible with User.Modify or Sys.Audit on /access/groups, and always
    // the caller; tokens only with `full`.
    method: 'GET',
    path: '/access/users',
    handler: ({ c, auth, params }) => {
      const all = hasAnyPriv(c, auth, '/access/groups', ['User.Modify', 'Sys.Audit']);
      return [...c.users.values()]
        .filter((u) => all || u.userid === auth.userid)
        .filter((u) => !params.enabled || u.enable)
        .sort((a, b) => a.userid.localeCompare(b.userid))
        .map((u) => ({
          userid: u.userid,
          enable: u.enable ? 1 : 0,
          expire: 0,
          'realm-type': u.userid.endsWith('@pam') ? 'pam' : 'pve',
          ...(u.groups.length ? { groups: u.groups.join(',') } : {}),
          ...(params.full
            ? {
                tokens: [...c.tokens.values()]
                  .filter((t) => t.userid === u.userid)
                  .map((t) => ({ tokenid: t.tokenid, ...tokenInfo(t) })),
              }
            : {}),
        }));
    },
  },
  {
    method: 'GET',
    path: TOKEN_PATH,
    perm: tokenPerm,
    handler: ({ c, params }) => {
      userOf(c, String(params.userid));
      return [...c.tokens.values()]
        .filter((t) => t.userid === params.userid)
        .map((t) => ({ tokenid: t.tokenid, ...tokenInfo(t) }));
    },
  },
  {
    method: 'GET',
    path: `${TOKEN_PATH}/{tokenid}`,
    perm: tokenPerm,
    handler: ({ c, params }) => {
      userOf(c, String(params.userid));
      const t = c.tokens.get(`${params.userid}!${params.tokenid}`);
      if (!t) die(`no such token '${params.tokenid}' for user '${params.userid}'`);
      return tokenInfo(t);
    },
  },
  {
    // generate_token: the secret is returned once; privsep defaults to 1.
    method: 'POST',
    path: `${TOKEN_PATH}/{tokenid}`,
    perm: tokenPerm,
    handler: ({ c, params }) => {
      const userid = String(params.userid);
      const tokenid = String(params.tokenid);
      userOf(c, userid);
      const full = `${userid}!${tokenid}`;
      if (c.tokens.has(full)) paramError({ tokenid: 'Token already exists.' });
      const t: TokenState = {
        userid,
        tokenid,
        secret: c.rng.uuid(),
        privsep: params.privsep === undefined ? true : Boolean(params.privsep),
        expire: Number(params.expire ?? 0),
        ...(params.comment ? { comment: String(params.comment) } : {}),
      };
      c.tokens.set(full, t);
      return {
        'full-tokenid': full,
        info: {
          privsep: t.privsep ? 1 : 0,
          ...(params.expire !== undefined ? { expire: t.expire } : {}),
          ...(t.comment ? { comment: t.comment } : {}),
        },
        value: t.secret,
      };
    },
  },
  {
    method: 'PUT',
    path: `${TOKEN_PATH}/{tokenid}`,
    perm: tokenPerm,
    handler: ({ c, params }) => {
      userOf(c, String(params.userid));
      const t = c.tokens.get(`${params.userid}!${params.tokenid}`);
      if (!t) die(`updating token failed: no such token '${params.tokenid}' for user '${params.userid}'`);
      if (params.privsep !== undefined) t.privsep = Boolean(params.privsep);
      if (params.expire !== undefined) t.expire = Number(params.expire);
      if (params.comment !== undefined) t.comment = String(params.comment);
      return tokenInfo(t);
    },
  },
  {
    method: 'DELETE',
    path: `${TOKEN_PATH}/{tokenid}`,
    perm: tokenPerm,
    handler: ({ c, params }) => {
      userOf(c, String(params.userid));
      const full = `${params.userid}!${params.tokenid}`;
      if (!c.tokens.has(full)) die(`no such token '${params.tokenid}' for user '${params.userid}'`);
      c.tokens.delete(full);
      // delete_token drops the token's ACL entries with it (TokenConfig + user.cfg write).
      for (let i = c.acls.length - 1; i >= 0; i--) if (c.acls[i]!.ugid === full) c.acls.splice(i, 1);
      return null;
    },
  },
  {
    // ACL.pm `read_acl`: entries on paths where the caller has Sys.Audit on /access, or may
    // modify permissions (check_perm_modify).
    method: 'GET',
    path: '/access/acl',
    handler: ({ c, auth }) => {
      const audit = hasPriv(c, auth, '/access', 'Sys.Audit');
      return c.acls
        .filter((a) => audit || hasPriv(c, auth, a.path, 'Permissions.Modify'))
        .map((a) => ({
          path: a.path,
          type: a.ugid.startsWith('@') ? 'group' : a.ugid.includes('!') ? 'token' : 'user',
          ugid: a.ugid.replace(/^@/, ''),
          roleid: a.roleid,
          propagate: a.propagate ? 1 : 0,
        }));
    },
  },
  {
    // ACL.pm `update_acl` (`perm-modify` on {path}: Permissions.Modify here).
    method: 'PUT',
    path: '/access/acl',
    perm: ({ c, auth, params }) => requirePriv(c, auth, String(params.path ?? '/'), ['Permissions.Modify']),
    handler: ({ c, params }) => {
      const users = splitList(params.users as string | undefined);
      const groups = splitList(params.groups as string | undefined);
      const tokens = splitList(params.tokens as string | undefined);
      if (!users.length && !groups.length && !tokens.length) {
        const msg = "either 'users', 'groups' or 'tokens' is required.";
        paramError({ users: msg, groups: msg, tokens: msg });
      }
      // normalize_path: one leading slash, no trailing one, no empty components.
      const path = `/${String(params.path).split('/').filter(Boolean).join('/')}`;
      if (
        !/^\/(?:|vms(?:\/\d+)?|storage(?:\/[^/]+)?|nodes(?:\/[^/]+)?|pool(?:\/[^/]+){0,3}|access(?:\/groups(?:\/[^/]+)?|\/realm(?:\/[^/]+)?)?|sdn(?:\/.+)?|mapping(?:\/.+)?)$/.test(
          path,
        )
      )
        paramError({ path: `invalid ACL path '${params.path}'` });
      const propagate = params.propagate === undefined ? true : Boolean(params.propagate);
      const fail = (m: string): never => die(`ACL update failed: ${m}`);
      for (const roleid of splitList(params.roles as string | undefined)) {
        if (!c.roles[roleid]) fail(`role '${roleid}' does not exist`);
        const ugids: string[] = [];
        // The simulator has no groups.
        for (const g of groups) fail(`group '${g}' does not exist`);
        for (const u of users) {
          if (!c.users.has(u)) fail(`user '${u}' does not exist`);
          ugids.push(u);
        }
        for (const t of tokens) {
          const [u = '', id = ''] = t.split('!');
          if (!c.users.has(u)) fail(`no such user ('${u}')`);
          if (!c.tokens.has(t)) fail(`no such token '${id}' for user '${u}'`);
          ugids.push(t);
        }
        for (const ugid of ugids) {
          const i = c.acls.findIndex((a) => a.path === path && a.ugid === ugid && a.roleid === roleid);
          if (params.delete) {
            if (i >= 0) c.acls.splice(i, 1);
          } else if (i >= 0) c.acls[i]!.propagate = propagate;
          else c.acls.push({ path, ugid, roleid, propagate });
        }
      }
      return null;
    },
  },
  {
    // Role.pm `index`: every role, `special: 1` for the built-in ones.
    method: 'GET',
    path: '/access/roles',
    handler: ({ c }) =>
      Object.entries(c.roles)
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([roleid, privs]) => ({
          roleid,
          privs: [...privs].sort().join(','),
          ...(BUILTIN_ROLES.has(roleid) ? { special: 1 } : {}),
        })),
  },
];

const BUILTIN_ROLES = new Set(Object.keys(builtinRoles(PROFILES['8.4'])));
