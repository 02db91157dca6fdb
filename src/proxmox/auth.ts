/**
 * Proxmox VE authentication, as pve-http-server checks it:
 * - API token: `Authorization: PVEAPIToken=USER@REALM!TOKENID=SECRET` on every request, no CSRF.
 *   (Never as a `PVEAuthCookie` cookie: PVE only accepts signed tickets there and answers 401.)
 * - User + password: `POST /access/ticket` gives a ticket (2 h lifetime) and a CSRF token; the ticket
 *   goes in `Cookie: PVEAuthCookie=`, the CSRF token in the `CSRFPreventionToken` header of every
 *   non-GET request. The ticket is renewed (re-POSTed as the password) before it expires, and a 401
 *   leads to one fresh login and one resend.
 */
import { Secret } from './secret.ts';
import type { HttpMethod } from './transport.ts';

export type Credentials =
  | { kind: 'token' /** `user@realm!tokenid` */; tokenId: string; secret: Secret }
  | { kind: 'password' /** `user@realm` */; username: string; password: Secret };

const TOKEN_ID_RE = /^([^\s!@]+@[^\s!@]+)!([A-Za-z][A-Za-z0-9._-]*)$/;

export function tokenCredentials(tokenId: string, secret: string | Secret): Credentials {
  const id = tokenId.trim();
  if (!TOKEN_ID_RE.test(id)) {
    throw new Error(`invalid API token id '${id}': expected USER@REALM!TOKENID (e.g. root@pam!provider)`);
  }
  const s = typeof secret === 'string' ? new Secret(secret.trim()) : secret;
  if (s.empty) throw new Error(`API token '${id}' has an empty secret`);
  return { kind: 'token', tokenId: id, secret: s };
}

export function passwordCredentials(username: string, password: string | Secret): Credentials {
  const u = username.trim();
  if (!/^[^\s@]+(@[^\s@]+)?$/.test(u)) throw new Error(`invalid user name '${u}': expected USER@REALM (e.g. root@pam)`);
  const p = typeof password === 'string' ? new Secret(password.replace(/\r?\n$/, '')) : password;
  if (p.empty) throw new Error(`the password of '${u}' is empty`);
  return { kind: 'password', username: u.includes('@') ? u : `${u}@pam`, password: p };
}

/** `USER@REALM!TOKENID=SECRET` (the form `pveum user token add` prints). The error never echoes the secret. */
export function parseTokenString(value: string): Credentials {
  const v = value.trim();
  const eq = v.indexOf('=');
  if (eq < 0) throw new Error('invalid API token: expected USER@REALM!TOKENID=SECRET');
  return tokenCredentials(v.slice(0, eq), v.slice(eq + 1));
}

/**
 * Credentials from a Secret's data (the keys `provider-proxmox sim --print-config` writes):
 * `tokenid` + `token` (token id and secret; `token` may also be the whole `USER@REALM!ID=SECRET`),
 * or `username` + `password`. `where` names the Secret in errors.
 */
export function credentialsFromSecretData(data: Record<string, string>, where: string): Credentials {
  const get = (...keys: string[]) => {
    for (const k of keys) if (typeof data[k] === 'string' && data[k] !== '') return data[k];
    return undefined;
  };
  const tokenId = get('tokenid', 'tokenId', 'token_id');
  const token = get('token', 'secret', 'token_secret');
  const username = get('username', 'user');
  const password = get('password');
  try {
    if (tokenId && token) return tokenCredentials(tokenId, token);
    if (token && !tokenId && token.includes('!') && token.includes('=')) return parseTokenString(token);
    if (username && password) return passwordCredentials(username, password);
  } catch (e) {
    throw new Error(`${where}: ${e instanceof Error ? e.message : String(e)}`);
  }
  if (tokenId && !token) throw new Error(`${where}: key 'tokenid' is set but 'token' (the token secret) is missing`);
  if (username && !password) throw new Error(`${where}: key 'username' is set but 'password' is missing`);
  throw new Error(`${where}: expected the keys 'tokenid' + 'token' (API token) or 'username' + 'password'`);
}

/** Who the credentials authenticate as: `root@pam!provider` (token) or `root@pam`. */
export function authIdOf(c: Credentials): string {
  return c.kind === 'token' ? c.tokenId : c.username;
}

export interface LoginResult {
  username: string;
  ticket: string;
  csrf: string;
}

export type LoginFn = (username: string, password: string) => Promise<LoginResult>;

export interface Authenticator {
  readonly kind: 'token' | 'ticket';
  /** `user@realm!tokenid` or `user@realm`. */
  readonly authId: string;
  readonly userId: string;
  /** `root@pam` with a ticket: the only identity PVE lets use skiplock, `lock`, absolute import paths. */
  readonly isRootTicket: boolean;
  headers(method: HttpMethod): Promise<Record<string, string>>;
  /** After a 401: get fresh credentials; true when resending once makes sense. */
  recover(): Promise<boolean>;
  /** Values to scrub from every message. */
  secretValues(): string[];
}

export class TokenAuth implements Authenticator {
  readonly kind = 'token' as const;
  readonly authId: string;
  readonly userId: string;
  readonly isRootTicket = false;
  readonly #secret: Secret;

  constructor(c: Extract<Credentials, { kind: 'token' }>) {
    this.authId = c.tokenId;
    this.userId = c.tokenId.slice(0, c.tokenId.indexOf('!'));
    this.#secret = c.secret;
  }

  async headers(): Promise<Record<string, string>> {
    return { Authorization: `PVEAPIToken=${this.authId}=${this.#secret.reveal()}` };
  }

  async recover(): Promise<boolean> {
    return false;
  }

  secretValues(): string[] {
    return [this.#secret.reveal()];
  }
}

export interface TicketAuthOptions {
  now?: () => number;
  /** Renew (re-POST the ticket) once it is this old (default 60 min; PVE tickets live 2 h). */
  renewAfterMs?: number;
  /** Ticket lifetime (PVE: 2 h). */
  lifetimeMs?: number;
}

export class TicketAuth implements Authenticator {
  readonly kind = 'ticket' as const;
  readonly authId: string;
  readonly userId: string;
  readonly isRootTicket: boolean;
  readonly #password: Secret;
  #ticket: Secret | undefined;
  #csrf: Secret | undefined;
  #obtainedAt = 0;
  #inflight: Promise<void> | undefined;
  readonly #login: LoginFn;
  readonly #now: () => number;
  readonly #renewAfter: number;
  readonly #lifetime: number;
  /** Number of full logins and renewals (for tests and metrics). */
  logins = 0;
  renewals = 0;

  constructor(c: Extract<Credentials, { kind: 'password' }>, login: LoginFn, opts: TicketAuthOptions = {}) {
    this.authId = c.username;
    this.userId = c.username;
    this.isRootTicket = c.username === 'root@pam';
    this.#password = c.password;
    this.#login = login;
    this.#now = opts.now ?? Date.now;
    this.#lifetime = opts.lifetimeMs ?? 2 * 3600_000;
    this.#renewAfter = Math.min(opts.renewAfterMs ?? 3600_000, this.#lifetime - 5 * 60_000);
  }

  /** Age of the current ticket in ms (Infinity without one). */
  get ticketAge(): number {
    return this.#ticket ? this.#now() - this.#obtainedAt : Number.POSITIVE_INFINITY;
  }

  private async fullLogin(): Promise<void> {
    const r = await this.#login(this.authId, this.#password.reveal());
    this.#set(r);
    this.logins++;
  }

  #set(r: LoginResult): void {
    this.#ticket = new Secret(r.ticket);
    this.#csrf = new Secret(r.csrf);
    this.#obtainedAt = this.#now();
  }

  private async ensure(): Promise<void> {
    const age = this.ticketAge;
    // A minute of margin: a ticket must not expire between this check and the server's.
    if (age < this.#renewAfter) return;
    this.#inflight ??= (async () => {
      try {
        if (this.ticketAge < this.#lifetime - 60_000 && this.#ticket) {
          try {
            this.#set(await this.#login(this.authId, this.#ticket.reveal()));
            this.renewals++;
            return;
          } catch {
            // renewal refused (ticket revoked, key rotated): fall back to the password
          }
        }
        await this.fullLogin();
      } finally {
        this.#inflight = undefined;
      }
    })();
    await this.#inflight;
  }

  async headers(method: HttpMethod): Promise<Record<string, string>> {
    await this.ensure();
    // A ticket (PVE:user@realm:...), never an API token: tokens go in Authorization (TokenAuth).
    const ticket = this.#ticket!.reveal();
    const h: Record<string, string> = { Cookie: `PVEAuthCookie=${encodeURIComponent(ticket)}` };
    if (method !== 'GET') h.CSRFPreventionToken = this.#csrf!.reveal();
    return h;
  }

  async recover(): Promise<boolean> {
    this.#ticket = undefined;
    this.#csrf = undefined;
    await this.ensure();
    return true;
  }

  secretValues(): string[] {
    const out = [this.#password.reveal()];
    if (this.#ticket) out.push(this.#ticket.reveal());
    if (this.#csrf) out.push(this.#csrf.reveal());
    return out;
  }
}
