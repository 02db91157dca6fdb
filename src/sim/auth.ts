/**
 * Authentication and privileges as pve-access-control does them: RSA-signed tickets (an HMAC here)
 * with a 2 h lifetime, CSRF prevention tokens, API tokens with privilege separation, ACLs on paths
 * with roles and propagation.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { PveHttpError } from './errors.ts';
import type { ClusterState } from './state.ts';

export const TICKET_LIFETIME = 7200;
const MIN_AGE = -300;

export interface AuthInfo {
  /** `root@pam` or `root@pam!provider`. */
  authid: string;
  userid: string;
  tokenid?: string;
  kind: 'ticket' | 'token';
}

function hex8(n: number): string {
  return n.toString(16).toUpperCase().padStart(8, '0');
}

function sign(key: Buffer, data: string): string {
  return createHmac('sha256', key).update(data).digest('base64');
}

function safeEq(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

export function makeTicket(c: ClusterState, userid: string): string {
  const data = `PVE:${userid}:${hex8(c.clock.epoch())}`;
  return `${data}::${sign(c.ticketKey, data)}`;
}

/** Returns the user id of a valid ticket, undefined otherwise. */
export function verifyTicket(c: ClusterState, ticket: string): string | undefined {
  const m = /^(PVE:(\S+?):([0-9A-F]{8}))::(.+)$/.exec(ticket);
  if (!m) return undefined;
  if (!safeEq(sign(c.ticketKey, m[1]!), m[4]!)) return undefined;
  const age = c.clock.epoch() - Number.parseInt(m[3]!, 16);
  // PVE::Ticket: valid while $min_age < age < $max_age (strict on both ends).
  if (age <= MIN_AGE || age >= TICKET_LIFETIME) return undefined;
  return m[2];
}

export function makeCsrf(c: ClusterState, userid: string): string {
  const t = hex8(c.clock.epoch());
  return `${t}:${sign(c.csrfKey, `${t}:${userid}`).replace(/=+$/, '')}`;
}

export function verifyCsrf(c: ClusterState, userid: string, token: string | undefined): boolean {
  if (!token) return false;
  const m = /^([0-9A-F]{8}):(\S+)$/.exec(token);
  if (!m) return false;
  if (!safeEq(sign(c.csrfKey, `${m[1]}:${userid}`).replace(/=+$/, ''), m[2]!)) return false;
  const age = c.clock.epoch() - Number.parseInt(m[1]!, 16);
  return age > MIN_AGE && age < TICKET_LIFETIME;
}

/** `extract_auth_value`: `(?:^|\s)KEY(?:=| )([^;]*)`, URI-unescaped. */
function extract(header: string | undefined, key: string): string | undefined {
  if (!header) return undefined;
  const m = new RegExp(`(?:^|\\s)${key}(?:=| )([^;]*)`).exec(header);
  if (!m) return undefined;
  try {
    return decodeURIComponent(m[1]!);
  } catch {
    return m[1];
  }
}

function authFailure(c: ClusterState, reason: string): PveHttpError {
  return new PveHttpError(401, c.profile.genericAuthFailure ? 'Authentication failed!' : reason);
}

/**
 * Credentials in PVE's order: Cookie PVEAuthCookie, then `Authorization: PVEAuthCookie=`, and
 * only without a ticket `Authorization: PVEAPIToken=`. Throws the 401 PVE answers.
 */
export function authenticate(c: ClusterState, cookie: string | undefined, authorization: string | undefined): AuthInfo {
  const ticket = extract(cookie, 'PVEAuthCookie') ?? extract(authorization, 'PVEAuthCookie');
  if (ticket !== undefined) {
    const userid = verifyTicket(c, ticket);
    if (!userid) throw authFailure(c, 'permission denied - invalid PVE ticket');
    const u = c.users.get(userid);
    if (!u?.enable) throw authFailure(c, 'permission denied - invalid PVE ticket');
    return { authid: userid, userid, kind: 'ticket' };
  }
  const token = extract(authorization, 'PVEAPIToken');
  if (token !== undefined) {
    const eq = token.lastIndexOf('=');
    const full = eq >= 0 ? token.slice(0, eq) : token;
    const secret = eq >= 0 ? token.slice(eq + 1) : '';
    const bang = full.indexOf('!');
    if (bang < 0) throw authFailure(c, 'invalid token value!');
    const userid = full.slice(0, bang);
    const tokenid = full.slice(bang + 1);
    const t = c.tokens.get(full);
    if (!c.users.get(userid)?.enable) throw authFailure(c, `no such user ('${userid}')`);
    if (!t) throw authFailure(c, `no such token '${tokenid}' for user '${userid}'`);
    if (t.expire && t.expire < c.clock.epoch()) throw authFailure(c, `token '${tokenid}' access expired`);
    if (!safeEq(t.secret, secret)) throw authFailure(c, 'invalid token value!');
    return { authid: full, userid, tokenid, kind: 'token' };
  }
  throw new PveHttpError(401, 'No ticket');
}

/** Verify a login (`/access/ticket`): password, or a still-valid ticket as password (renewal). */
export function login(c: ClusterState, username: string, password: string, realm?: string): string {
  const userid = username.includes('@') ? username : `${username}@${realm ?? 'pam'}`;
  const u = c.users.get(userid);
  if (!u?.enable) throw new PveHttpError(401, 'authentication failure');
  if (password.startsWith('PVE:')) {
    if (verifyTicket(c, password) !== userid) throw new PveHttpError(401, 'authentication failure');
    return userid;
  }
  if (u.password === undefined || !safeEq(u.password, password)) throw new PveHttpError(401, 'authentication failure');
  return userid;
}

/** The roles of `ugids` on a path: the deepest level with entries wins (AccessControl::roles). */
function aclRoles(c: ClusterState, ugids: string[], path: string): Set<string> {
  const parts = path.split('/').filter(Boolean);
  const levels = ['/'];
  for (let i = 1; i <= parts.length; i++) levels.push(`/${parts.slice(0, i).join('/')}`);
  let roles = new Set<string>();
  for (const level of levels) {
    const entries = c.acls.filter((a) => a.path === level && ugids.includes(a.ugid));
    if (!entries.length) continue;
    roles = new Set();
    for (const e of entries) if (level === path || e.propagate) roles.add(e.roleid);
  }
  return roles;
}

function aclPrivs(c: ClusterState, ugids: string[], path: string): Set<string> {
  const roles = aclRoles(c, ugids, path);
  // RPCEnvironment $compile_acl_path: roles on `/pool/<id>` apply to the pool's members (never
  // propagated further); a NoAccess on the path itself is not trumped, a pool NoAccess trumps.
  if (c.pools.size && !roles.has('NoAccess')) {
    const member = /^\/vms\/(\d+)$/.exec(path)
      ? poolKeys(path)
      : /^\/storage\/[^/]+$/.test(path)
        ? [`storage/${path.slice(9)}`]
        : [];
    if (member.length) {
      for (const p of c.pools.values()) {
        if (!member.some((m) => p.members.has(m))) continue;
        const poolRoles = aclRoles(c, ugids, `/pool/${p.poolid}`);
        if (poolRoles.has('NoAccess')) return new Set();
        for (const r of poolRoles) roles.add(r);
      }
    }
  }
  // AccessControl::roles: a NoAccess role leaves no privilege at all.
  if (roles.has('NoAccess')) return new Set();
  const privs = new Set<string>();
  for (const r of roles) for (const p of c.roles[r] ?? []) privs.add(p);
  return privs;
}

function poolKeys(path: string): string[] {
  const vmid = path.slice(5);
  return [`qemu/${vmid}`, `lxc/${vmid}`];
}

const NO_PRIVS: ReadonlySet<string> = new Set();

/** The privileges an authenticated identity holds on a path (RPCEnvironment::permissions). */
export function privileges(c: ClusterState, auth: AuthInfo, path: string): ReadonlySet<string> {
  const user = c.users.get(auth.userid);
  // root@pam holds every privilege: the Administrator role's set itself, not a copy per check.
  const userPrivs: ReadonlySet<string> =
    auth.userid === 'root@pam'
      ? (c.roles.Administrator ?? NO_PRIVS)
      : aclPrivs(c, [auth.userid, ...(user?.groups ?? []).map((g) => `@${g}`)], path);
  if (auth.kind === 'token') {
    const t = c.tokens.get(auth.authid);
    if (t?.privsep) {
      const tokenPrivs = aclPrivs(c, [auth.authid], path);
      return new Set([...userPrivs].filter((p) => tokenPrivs.has(p)));
    }
  }
  return userPrivs;
}

export function hasPriv(c: ClusterState, auth: AuthInfo, path: string, priv: string): boolean {
  return privileges(c, auth, path).has(priv);
}

/** Whether any of `privs` is held on `path` (one privilege computation for all of them). */
export function hasAnyPriv(c: ClusterState, auth: AuthInfo, path: string, privs: readonly string[]): boolean {
  const held = privileges(c, auth, path);
  return privs.some((p) => held.has(p));
}

/** `$rpcenv->check(...)`: 403 `Permission check failed (path, priv)` unless all are held. */
export function requirePriv(
  c: ClusterState,
  auth: AuthInfo,
  path: string,
  privs: string[],
  opts?: { any?: boolean; bare?: boolean },
): void {
  const held = privileges(c, auth, path);
  const ok = opts?.any ? privs.some((p) => held.has(p)) : privs.every((p) => held.has(p));
  if (ok) return;
  if (opts?.bare) throw new PveHttpError(403, 'Permission check failed');
  const missing = opts?.any ? privs.join('|') : privs.find((p) => !held.has(p))!;
  throw new PveHttpError(403, `Permission check failed (${path}, ${missing})`);
}

/** The literal `$authuser eq 'root@pam'` checks: tokens of root never pass them. */
export function isRootUser(auth: AuthInfo): boolean {
  return auth.authid === 'root@pam';
}
