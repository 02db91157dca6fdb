/**
 * The HTTP side of one simulated cluster: pve-http-server's request pipeline (auth, CSRF, routing,
 * 501 for unknown methods, permission checks before schema validation, the exact envelope and error
 * shapes) on top of the routes in routes/, and the `/_sim/` control API.
 *
 * Lost answers (faults `reply-lost`, `applied-late`) are modelled here: the request is processed
 * as usual, and where the answer would be written the connection is reset instead. PVE runs a
 * handler to completion whether or not its client is still connected, so such a request is
 * applied; the client only sees the connection go.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { type AuthInfo, authenticate, verifyCsrf } from './auth.ts';
import { PveHttpError } from './errors.ts';
import type { FaultSpec } from './fault-spec.ts';
import { FaultError, type Faults } from './faults.ts';
import { uploadTmpName } from './routes/storage.ts';
import { type HttpMethod, matchMethod, validateParams } from './schema/index.ts';
import type { ClusterState, NodeState } from './state.ts';
import type { TaskRunner } from './tasks.ts';

export interface RouteCtx {
  c: ClusterState;
  tasks: TaskRunner;
  faults: Faults;
  auth: AuthInfo;
  /** Validated, coerced parameters (path parameters included). */
  params: Record<string, unknown>;
  method: HttpMethod;
  path: string;
  /** The file of a multipart upload (`POST .../storage/{storage}/upload`). */
  upload?: { data: Buffer; filename: string };
}

export interface Route {
  method: HttpMethod;
  /** PVE's path template, e.g. `/nodes/{node}/qemu/{vmid}/config`. */
  path: string;
  /** Runs before schema validation (as PVE's `permissions` do); path parameters only. */
  perm?: (ctx: RouteCtx) => void;
  handler: (ctx: RouteCtx) => unknown;
  /** No authentication (`/access/ticket`). */
  noAuth?: boolean;
}

/** A handler result with envelope fields beside `data` (e.g. task log `total`). */
export class Envelope {
  readonly data: unknown;
  readonly extra: Record<string, unknown>;
  constructor(data: unknown, extra: Record<string, unknown>) {
    this.data = data;
    this.extra = extra;
  }
}

export interface ServerOptions {
  /** Delay before a 401 answer, real ms (PVE: 3000). */
  authFailDelayMs: number;
}

const JSON_TYPE = 'application/json;charset=UTF-8';
const COMMON_HEADERS = {
  Server: 'pve-api-daemon/3.0',
  'Cache-Control': 'max-age=0',
  Pragma: 'no-cache',
  Expires: 'Thu, 01 Jan 1970 00:00:00 GMT',
};

function reasonPhrase(message: string): string {
  const line = (message.split('\n')[0] ?? '').replace(/[\r\n]/g, '').trim() || 'error';
  // pve-http-server writes the message's UTF-8 bytes into the status line (e.g. glib's “quotes” in
  // a guest agent error); node:http takes a latin1 string for raw bytes.
  return /[^\x00-\x7f]/.test(line) ? Buffer.from(line, 'utf8').toString('latin1') : line;
}

/**
 * Close a connection without an answer: an RST where the socket allows it (the client sees
 * ECONNRESET), otherwise a plain close (the client sees "socket hang up" / "other side closed").
 */
export function dropConnection(socket: Socket | null | undefined): void {
  if (!socket || socket.destroyed) return;
  try {
    socket.resetAndDestroy();
  } catch {
    socket.destroy();
  }
}

/** A `/_sim/` control that is not a fault: `POST /_sim/guest-agent`. */
export interface SimControls {
  /** Start (`running: true`) or stop the guest agent in a VM's guest; false if no such VM. */
  setGuestAgent(vmid: number, running: boolean): boolean;
}

export class ApiHandler {
  private readonly c: ClusterState;
  private readonly tasks: TaskRunner;
  private readonly faults: Faults;
  private readonly opts: ServerOptions;
  /** Answers that must never be sent: their connection is dropped where they would be written. */
  private readonly lost = new WeakSet<ServerResponse>();
  controls: SimControls | undefined;
  /** Routes by `METHOD /path/template`, the template being the schema's (matchMethod() finds it). */
  private readonly routes = new Map<string, Route>();

  constructor(c: ClusterState, tasks: TaskRunner, faults: Faults, routes: Route[], opts: ServerOptions) {
    this.c = c;
    this.tasks = tasks;
    this.faults = faults;
    this.opts = opts;
    for (const r of routes) this.routes.set(`${r.method} ${r.path}`, r);
  }

  /** The node:http request listener. */
  readonly listener = (req: IncomingMessage, res: ServerResponse): void => {
    this.handle(req, res).catch((e) => {
      if (!res.headersSent) this.sendError(res, 500, e instanceof Error ? e.message : String(e));
      else res.destroy();
    });
  };

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://sim');
    const method = (req.method ?? 'GET').toUpperCase() as HttpMethod;
    const body = await readBody(req);
    if (url.pathname.startsWith('/_sim/')) return this.simApi(req, res, method, url, body);

    if (this.faults.unavailableUntil > this.c.clock.now()) {
      this.faults.count('unavailable');
      if (this.faults.unavailableMode === 'reset') {
        req.socket.destroy();
        return;
      }
      return this.sendError(res, 503, 'Service Unavailable');
    }

    if (!url.pathname.startsWith('/api2/json/') && url.pathname !== '/api2/json') {
      return this.sendError(res, 501, `Unknown format`);
    }
    const path = url.pathname.slice('/api2/json'.length).replace(/\/+$/, '') || '/';
    // RESTHandler find_handler on the uri_unescape()d path: one lookup gives the schema, the
    // path parameters and (through the template) the route.
    const schemaMatch = matchMethod(this.c.profile.profile, method, path);
    const route = schemaMatch && this.routes.get(`${method} ${schemaMatch.template}`);
    this.faults.count(`${method} ${route ? route.path : path}`);

    const latency = this.faults.latencyFor(method, path);
    if (latency.ms > 0 && (await this.faults.hold(latency.ms, latency.faults)) === 'drop')
      return dropConnection(req.socket);

    // Parameters: form or JSON body, query parameters override body parameters.
    const ctype = req.headers['content-type'] ?? '';
    const isJson = /^application\/json/i.test(ctype);
    const raw: Record<string, unknown> = {};
    let upload: RouteCtx['upload'];
    // pve-http-server (AnyEvent.pm, at the Content-Length check): an upload path takes only
    // multipart/form-data and gets the file as `filename` + `tmpfilename`; anywhere else a
    // multipart body is `506 upload 'Content-Type '…' not implemented`.
    const multipart = /^multipart\/form-data\s*;\s*boundary=("?)([^";]+)\1/i.exec(ctype);
    const isUpload = method === 'POST' && /^\/nodes\/[^/]+\/storage\/[^/]+\/upload\/*$/.test(url.pathname.slice(10));
    if (body.length && isUpload) {
      if (!multipart) return this.sendError(res, 500, `upload 'Content-Type '${ctype}' not implemented`);
      if (url.searchParams.has('tmpfilename'))
        return this.sendError(res, 500, "'tmpfilename' query parameter is not allowed for file uploads");
      const parsed = parseMultipart(body, multipart[2]!);
      if (!parsed.file) return this.sendError(res, 500, 'upload failed');
      Object.assign(raw, parsed.fields, { filename: parsed.file.filename, tmpfilename: uploadTmpName() });
      upload = parsed.file;
    } else if (body.length && multipart) {
      return this.sendError(res, 506, `upload 'Content-Type '${ctype}' not implemented`);
    } else if (body.length) {
      if (isJson) {
        try {
          const parsed = JSON.parse(body.toString('utf8')) as unknown;
          if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) Object.assign(raw, parsed);
        } catch {
          return this.sendError(res, 400, 'Parameter verification failed.', { '': 'unable to parse JSON body' });
        }
      } else {
        for (const [k, v] of new URLSearchParams(body.toString('utf8'))) addParam(raw, k, v);
      }
    }
    for (const [k, v] of url.searchParams) addParam(raw, k, v);

    const injected = this.faults.matchRequest(method, path, raw);
    if (injected) return this.sendError(res, injected.status, injected.message);
    if (this.faults.replyLost(method, path, raw)) this.lost.add(res);
    const late = this.faults.appliedLate(method, path, raw);
    if (late) {
      // Never answered. The client's timeout or disconnect does not stop it: it is processed
      // after the delay, like a request that sat in a queue after its client gave up.
      this.lost.add(res);
      if ((await this.faults.holdLate(late)) === 'drop') return dropConnection(req.socket);
    }

    // pve-http-server order: authentication (CSRF included) in auth_handler, then the
    // content check, then rest_handler (501 for unknown methods, allowtoken, permissions).
    let auth: AuthInfo | undefined;
    if (!route?.noAuth) {
      try {
        auth = authenticate(this.c, headerOf(req, 'cookie'), headerOf(req, 'authorization'));
      } catch (e) {
        if (e instanceof PveHttpError && e.status === 401) return this.send401(res, e.message);
        throw e;
      }
      if (
        auth.kind === 'ticket' &&
        method !== 'GET' &&
        !verifyCsrf(this.c, auth.userid, headerOf(req, 'csrfpreventiontoken'))
      ) {
        return this.send401(res, 'Permission denied - invalid csrf token');
      }
    }
    if ((method === 'GET' || method === 'DELETE') && body.length) {
      return this.sendError(res, 501, `Unexpected content for method '${method}'`);
    }

    if (!route || !schemaMatch) {
      // rest_handler's message carries no trailing newline (it is not a die).
      return this.sendError(res, 501, `Method '${method} ${path}' not implemented`, undefined, { raw: true });
    }
    if (auth?.kind === 'token' && !schemaMatch.schema.allowToken) {
      // raise_perm_exc("URI '...' not available with API token, need proper ticket.\n"): a 403.
      return this.sendError(
        res,
        403,
        `Permission check failed (URI '${path}' not available with API token, need proper ticket.\n)`,
      );
    }

    const ctx: RouteCtx = {
      c: this.c,
      tasks: this.tasks,
      faults: this.faults,
      auth: auth ?? { authid: '', userid: '', kind: 'ticket' },
      params: { ...schemaMatch.pathParams },
      method,
      path,
      ...(upload ? { upload } : {}),
    };
    // The node whose daemon handles this request: if it crashes meanwhile, no answer ever comes.
    let handledBy: { node: NodeState; crashes: number } | undefined;
    const crashedMeanwhile = () => handledBy !== undefined && (handledBy.node.crashes ?? 0) !== handledBy.crashes;
    try {
      // Unknown or offline nodes fail before anything else touches them.
      const node = schemaMatch.pathParams.node;
      if (node !== undefined && route.path.startsWith('/nodes/{node}')) {
        const n = this.c.nodes.get(node);
        if (!n)
          throw new PveHttpError(
            500,
            `hostname lookup '${node}' failed - failed to get address info for: ${node}: Name or service not known`,
          );
        if (!n.online) throw new PveHttpError(595, 'No route to host');
        handledBy = { node: n, crashes: n.crashes ?? 0 };
      }
      route.perm?.(ctx);
      const v = validateParams(schemaMatch.schema, { ...raw, ...schemaMatch.pathParams });
      if (v.errors && Object.keys(v.errors).length) {
        return this.sendError(res, 400, 'Parameter verification failed.', v.errors);
      }
      ctx.params = v.params;
      const result = await route.handler(ctx);
      if (crashedMeanwhile()) this.lost.add(res);
      if (result instanceof Envelope) return this.sendData(res, result.data, result.extra);
      return this.sendData(res, result === undefined ? null : result);
    } catch (e) {
      if (crashedMeanwhile()) this.lost.add(res);
      if (e instanceof PveHttpError) {
        // A handler's 401 (login failure) keeps the JSON body; every 401 is delayed.
        if (e.status === 401) return this.afterAuthFailDelay(() => this.sendError(res, 401, e.message));
        return this.sendError(res, e.status, e.message, e.errors);
      }
      return this.sendError(res, 500, e instanceof Error ? e.message : String(e));
    }
  }

  /** True (and the connection dropped) when this answer is one that must never arrive. */
  private dropped(res: ServerResponse): boolean {
    if (!this.lost.has(res)) return false;
    dropConnection(res.socket);
    return true;
  }

  sendData(res: ServerResponse, data: unknown, extra?: Record<string, unknown>): void {
    if (this.dropped(res)) return;
    const body = Buffer.from(JSON.stringify({ data, ...extra }));
    res.writeHead(200, 'OK', { ...COMMON_HEADERS, 'Content-Type': JSON_TYPE, 'Content-Length': body.length });
    res.end(body);
  }

  /**
   * A JSON error answer. `message` in the body (http-server >= 5.2.0) is the error text as PVE
   * holds it: die messages end with a newline, `opts.raw` messages (rest_handler's 501) do not.
   */
  sendError(
    res: ServerResponse,
    status: number,
    message: string,
    errors?: Record<string, string>,
    opts: { raw?: boolean } = {},
  ): void {
    if (this.dropped(res)) return;
    const payload: Record<string, unknown> = {};
    if (errors) payload.errors = errors;
    payload.data = null;
    if (this.c.profile.errorMessageField)
      payload.message = opts.raw || message.endsWith('\n') ? message : `${message}\n`;
    const body = Buffer.from(JSON.stringify(payload));
    res.writeHead(status, reasonPhrase(message), {
      ...COMMON_HEADERS,
      'Content-Type': JSON_TYPE,
      'Content-Length': body.length,
      Connection: 'close',
    });
    res.end(body);
  }

  /** Every 401 is answered after the same delay. */
  private afterAuthFailDelay(send: () => void): Promise<void> {
    return new Promise((resolve) => {
      setTimeout(() => {
        send();
        resolve();
      }, this.opts.authFailDelayMs);
    });
  }

  /** 401: reason in the status line, empty body, no Content-Type, after a delay. */
  private send401(res: ServerResponse, reason: string): Promise<void> {
    return this.afterAuthFailDelay(() => {
      if (this.dropped(res)) return;
      res.writeHead(401, reasonPhrase(reason), { ...COMMON_HEADERS, 'Content-Length': 0, Connection: 'close' });
      res.end();
    });
  }

  /** The fault-injection and control API (`/_sim/...`), root@pam only. */
  private simApi(req: IncomingMessage, res: ServerResponse, method: string, url: URL, body: Buffer): void {
    let auth: AuthInfo;
    try {
      auth = authenticate(this.c, headerOf(req, 'cookie'), headerOf(req, 'authorization'));
    } catch (e) {
      return void this.send401(res, e instanceof Error ? e.message : 'No ticket');
    }
    if (auth.userid !== 'root@pam') return this.sendError(res, 403, 'Permission check failed (/_sim, root@pam only)');
    let input: Record<string, unknown> = {};
    if (body.length) {
      try {
        input = JSON.parse(body.toString('utf8')) as Record<string, unknown>;
      } catch {
        return this.sendError(res, 400, 'Parameter verification failed.', { body: 'expected a JSON object' });
      }
    }
    const p = url.pathname.replace(/\/+$/, '');
    try {
      if (p === '/_sim/faults' && method === 'GET') return this.sendData(res, this.faults.list());
      if (p === '/_sim/faults' && method === 'POST')
        return this.sendData(res, { id: this.faults.add(input as FaultSpec) });
      if (p === '/_sim/faults' && method === 'DELETE') {
        this.faults.clear();
        return this.sendData(res, null);
      }
      const m = /^\/_sim\/faults\/(\d+)$/.exec(p);
      if (m && method === 'DELETE') {
        if (!this.faults.remove(Number(m[1]))) return this.sendError(res, 404, `no fault ${m[1]}`);
        return this.sendData(res, null);
      }
      if (p === '/_sim/counters' && method === 'GET')
        return this.sendData(res, Object.fromEntries(this.faults.counters));
      if (p === '/_sim/counters' && method === 'DELETE') {
        this.faults.counters.clear();
        return this.sendData(res, null);
      }
      if (p === '/_sim/guest-agent' && method === 'POST') {
        const vmid = Number(input.vmid);
        if (!Number.isInteger(vmid) || typeof input.running !== 'boolean')
          return this.sendError(res, 400, 'Parameter verification failed.', {
            'guest-agent': 'expected {"vmid": N, "running": true|false}',
          });
        if (!this.controls?.setGuestAgent(vmid, input.running)) return this.sendError(res, 404, `no VM ${vmid}`);
        return this.sendData(res, null);
      }
      if (p === '/_sim/clock' && method === 'POST') {
        const ms = Number(input.advanceMs);
        if (!Number.isFinite(ms) || ms < 0)
          return this.sendError(res, 400, 'Parameter verification failed.', { advanceMs: 'expected a number >= 0' });
        this.c.clock.advance(ms);
        return this.sendData(res, { now: this.c.clock.now() });
      }
      return this.sendError(res, 501, `Method '${method} ${p}' not implemented`);
    } catch (e) {
      if (e instanceof FaultError)
        return this.sendError(res, 400, 'Parameter verification failed.', { fault: e.message });
      throw e;
    }
  }
}

function headerOf(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v.join('; ') : v;
}

/**
 * multipart/form-data as pve-http-server's file_upload_multipart reads it: plain fields, and one
 * file part that must be named `filename` (its `filename="…"` is the file name).
 */
function parseMultipart(
  body: Buffer,
  boundary: string,
): { fields: Record<string, string>; file?: { data: Buffer; filename: string } } {
  const delim = Buffer.from(`--${boundary}`);
  const fields: Record<string, string> = {};
  let file: { data: Buffer; filename: string } | undefined;
  let pos = body.indexOf(delim);
  while (pos >= 0) {
    const start = pos + delim.length;
    if (body.subarray(start, start + 2).toString() === '--') break;
    const next = body.indexOf(delim, start);
    if (next < 0) break;
    const part = body.subarray(start, next);
    const headEnd = part.indexOf('\r\n\r\n');
    if (headEnd >= 0) {
      const head = part.subarray(0, headEnd).toString('utf8');
      // The part's data ends before the CRLF that precedes the next delimiter.
      const data = part.subarray(headEnd + 4, part.length - 2);
      const name = /name="([^"]*)"/.exec(head)?.[1];
      const filename = /filename="([^"]+)"/.exec(head)?.[1];
      if (filename !== undefined && name === 'filename') file = { data, filename: filename.trim() };
      else if (name !== undefined && filename === undefined) fields[name] = data.toString('utf8').trim();
    }
    pos = next;
  }
  return file ? { fields, file } : { fields };
}

function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > 64 * 1024 * 1024) {
        reject(new PveHttpError(413, 'request too large'));
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

/**
 * A form or query parameter; a repeated one becomes a list, as pve-http-server's
 * decode_urlencoded makes it (src/PVE/APIServer/AnyEvent.pm:907-915 at its HEAD): how a client
 * sends a parameter of type `array` (PVE 8's agent exec `command`), which RESTHandler's
 * normalize_legacy_param_formats then keeps, or joins with ',' for a `*-list` string format.
 */
function addParam(raw: Record<string, unknown>, k: string, v: string): void {
  const old = raw[k];
  raw[k] = old === undefined ? v : Array.isArray(old) ? [...old, v] : [old, v];
}
