/**
 * The client's error taxonomy. Every failure of a Proxmox VE call is one of these classes, each with
 * a `kind`, a `retryable` flag and a message a human can act on. Messages never contain a credential:
 * they are built from PVE's answer (status line, `message`, `errors`) and scrubbed of every secret
 * the client knows (see client-core.ts), and raw library errors are never attached.
 *
 * Mapping (see docs/client.md and ../shared/research/pve-api-fidelity.md):
 *   401                                   authentication
 *   403 `Permission check failed (p, x)`  permission (aclPath, privilege)
 *   400 `Parameter verification failed.`  parameter (per-parameter map)
 *   `Configuration file ... does not exist`, `no such task`, unknown node/storage/pool   not-found
 *   `VM is locked (x)`                    locked (retryable)
 *   `can't lock file ... got timeout`     lock-timeout (retryable)
 *   `VM N already exists`, `config file already exists`                              already-exists
 *   `checksum mismatch`                   conflict (retryable after a re-read)
 *   `cluster not ready - no quorum?`, `cfs-lock ... error: no quorum!`, a write to /etc/pve refused
 *   (`Permission denied`)                   no-quorum (retryable: the cluster refuses writes until a
 *                                         majority of its nodes is back)
 *   501                                   not-implemented
 *   network errors, 502/503/504, 595/596/599                                         unavailable (retryable)
 *   TLS verification / fingerprint mismatch                                          tls
 *   task exit status other than OK / WARNINGS: N                                     task-failed
 *   any other 500 (a handler `die`)       server (not retryable: PVE refused the action)
 */

export type PveErrorKind =
  | 'authentication'
  | 'permission'
  | 'parameter'
  | 'not-found'
  | 'locked'
  | 'lock-timeout'
  | 'already-exists'
  | 'conflict'
  | 'no-quorum'
  | 'not-implemented'
  | 'unavailable'
  | 'tls'
  | 'task-failed'
  | 'timeout'
  | 'unsupported'
  | 'protocol'
  | 'server';

export interface ErrorContext {
  /** Site (cluster) name from the ProviderConfig. */
  site?: string | undefined;
  method?: string | undefined;
  /** PVE path template, e.g. `/nodes/{node}/qemu/{vmid}/config`. */
  path?: string | undefined;
  /** Endpoint origin (`https://host:8006`), never with credentials. */
  endpoint?: string | undefined;
  status?: number | undefined;
}

interface PveErrorInit extends ErrorContext {
  kind: PveErrorKind;
  retryable: boolean;
  /** PVE's own text (status line or message), first line. */
  reason: string;
  /** What the user reads, without the request prefix. */
  detail?: string;
}

function prefix(ctx: ErrorContext): string {
  const parts: string[] = [];
  if (ctx.site) parts.push(`site ${ctx.site}`);
  if (ctx.method && ctx.path) parts.push(`${ctx.method} ${ctx.path}`);
  return parts.length ? `${parts.join(': ')}: ` : '';
}

export class PveError extends Error {
  readonly kind: PveErrorKind;
  readonly retryable: boolean;
  readonly reason: string;
  readonly status: number | undefined;
  readonly site: string | undefined;
  readonly method: string | undefined;
  readonly path: string | undefined;
  readonly endpoint: string | undefined;

  constructor(init: PveErrorInit) {
    super(`${prefix(init)}${init.detail ?? init.reason}`);
    this.name = 'PveError';
    this.kind = init.kind;
    this.retryable = init.retryable;
    this.reason = init.reason;
    this.status = init.status;
    this.site = init.site;
    this.method = init.method;
    this.path = init.path;
    this.endpoint = init.endpoint;
  }
}

export class AuthenticationError extends PveError {
  /** The endpoint refuses API tokens for this path (`need proper ticket`). */
  readonly needsTicket: boolean;
  constructor(ctx: ErrorContext, reason: string) {
    const needsTicket = /not available with API token/.test(reason);
    let detail = `authentication failed (${reason || 'no reason given'})`;
    if (reason === 'No ticket') detail = 'authentication failed: no credentials were sent (No ticket)';
    else if (/invalid csrf token/i.test(reason)) detail = `authentication failed: ${reason}`;
    else if (needsTicket) detail = `${reason} (this call needs user + password authentication)`;
    super({ ...ctx, kind: 'authentication', retryable: false, reason, detail });
    this.name = 'AuthenticationError';
    this.needsTicket = needsTicket;
  }
}

export class PermissionError extends PveError {
  /** ACL path of the failed check (`/vms/100`), when PVE names it. */
  readonly aclPath: string | undefined;
  /** The privilege PVE checked (`VM.PowerMgmt`), when it names it. */
  readonly privilege: string | undefined;
  /** The endpoint refuses API tokens (`not available with API token, need proper ticket`). */
  readonly needsTicket: boolean;
  constructor(ctx: ErrorContext, reason: string) {
    const m = /Permission check failed \(([^,()]+), ([^)]+)\)/.exec(reason);
    const aclPath = m?.[1]?.trim();
    const privilege = m?.[2]?.trim();
    const needsTicket = /not available with API token/.test(reason);
    let detail = `permission denied (${reason})`;
    if (aclPath && privilege) detail = `permission denied: ${privilege} is needed on ${aclPath} (${reason})`;
    else if (needsTicket) detail = `${reason} (this call needs user + password authentication)`;
    super({ ...ctx, kind: 'permission', retryable: false, reason, detail });
    this.name = 'PermissionError';
    this.aclPath = aclPath;
    this.privilege = privilege;
    this.needsTicket = needsTicket;
  }
}

export class ParameterError extends PveError {
  /** PVE's per-parameter messages (`{"vmid": "value must have a minimum value of 100"}`). */
  readonly errors: Readonly<Record<string, string>>;
  constructor(ctx: ErrorContext, reason: string, errors: Record<string, string>) {
    const list = Object.entries(errors)
      .map(([k, v]) => `${k}: ${v.trim()}`)
      .join('; ');
    super({
      ...ctx,
      kind: 'parameter',
      retryable: false,
      reason,
      detail: list ? `${reason} ${list}` : reason,
    });
    this.name = 'ParameterError';
    this.errors = Object.freeze({ ...errors });
  }
}

export type ResourceKind = 'vm' | 'task' | 'node' | 'storage' | 'pool' | 'volume';

export class NotFoundError extends PveError {
  readonly resource: ResourceKind | undefined;
  readonly id: string | undefined;
  constructor(ctx: ErrorContext, reason: string, resource?: ResourceKind, id?: string) {
    super({ ...ctx, kind: 'not-found', retryable: false, reason });
    this.name = 'NotFoundError';
    this.resource = resource;
    this.id = id;
  }
}

export class LockedError extends PveError {
  /** The VM's `lock` value (`create`, `clone`, `backup`...). */
  readonly lock: string;
  constructor(ctx: ErrorContext, reason: string, lock: string) {
    super({ ...ctx, kind: 'locked', retryable: true, reason });
    this.name = 'LockedError';
    this.lock = lock;
  }
}

export class LockTimeoutError extends PveError {
  readonly lockFile: string | undefined;
  constructor(ctx: ErrorContext, reason: string, lockFile?: string) {
    super({ ...ctx, kind: 'lock-timeout', retryable: true, reason });
    this.name = 'LockTimeoutError';
    this.lockFile = lockFile;
  }
}

export class AlreadyExistsError extends PveError {
  readonly vmid: number | undefined;
  readonly node: string | undefined;
  constructor(ctx: ErrorContext, reason: string, vmid?: number, node?: string) {
    super({ ...ctx, kind: 'already-exists', retryable: false, reason });
    this.name = 'AlreadyExistsError';
    this.vmid = vmid;
    this.node = node;
  }
}

export class ConflictError extends PveError {
  constructor(ctx: ErrorContext, reason: string) {
    super({ ...ctx, kind: 'conflict', retryable: true, reason, detail: `${reason}: re-read the config and try again` });
    this.name = 'ConflictError';
  }
}

/**
 * The cluster has no quorum: pmxcfs holds /etc/pve read-only, so Proxmox refuses creates, starts,
 * clones, migrations (`check_cfs_quorum`, pve-cluster src/PVE/Cluster.pm:121-132) and every config
 * write (file_set_contents' open fails, pve-common src/PVE/File.pm:49-60) until a majority of the
 * cluster's votes is back. Retryable: nothing in the request is wrong.
 */
export class NoQuorumError extends PveError {
  constructor(ctx: ErrorContext, reason: string) {
    super({ ...ctx, kind: 'no-quorum', retryable: true, reason });
    this.name = 'NoQuorumError';
  }
}

export class NotImplementedError extends PveError {
  constructor(ctx: ErrorContext, reason: string) {
    super({ ...ctx, kind: 'not-implemented', retryable: false, reason });
    this.name = 'NotImplementedError';
  }
}

export interface EndpointFailure {
  endpoint: string;
  /** Short cause (`connection refused`, `certificate fingerprint mismatch`...). */
  cause: string;
  /** The request may have reached the server (failure after it was sent). */
  sent: boolean;
}

export class UnavailableError extends PveError {
  /**
   * The request may have reached PVE (the connection broke after sending, or a timeout while
   * waiting for the answer): a mutation may or may not have happened; check state before redoing it.
   */
  readonly requestSent: boolean;
  readonly failures: readonly EndpointFailure[];
  constructor(ctx: ErrorContext, reason: string, opts: { requestSent?: boolean; failures?: EndpointFailure[] } = {}) {
    super({ ...ctx, kind: 'unavailable', retryable: true, reason });
    this.name = 'UnavailableError';
    this.requestSent = opts.requestSent ?? false;
    this.failures = Object.freeze([...(opts.failures ?? [])]);
  }
}

export class TlsError extends PveError {
  /** SHA-256 fingerprint of the certificate the endpoint presented, when known. */
  readonly presentedFingerprint: string | undefined;
  readonly failures: readonly EndpointFailure[];
  constructor(ctx: ErrorContext, reason: string, presentedFingerprint?: string, failures: EndpointFailure[] = []) {
    super({ ...ctx, kind: 'tls', retryable: false, reason });
    this.name = 'TlsError';
    this.presentedFingerprint = presentedFingerprint;
    this.failures = Object.freeze([...failures]);
  }
}

export class TaskFailedError extends PveError {
  readonly upid: string;
  /** The task's exit status (the error text). */
  readonly exitStatus: string;
  /** The class of the exit status text (`locked`, `lock-timeout`, ... or `server`). */
  readonly causeKind: PveErrorKind;
  /** Last lines of the task log, when fetched. */
  readonly logTail: readonly string[];
  constructor(ctx: ErrorContext, upid: string, exitStatus: string, logTail: string[] = []) {
    const why = abortedBecause(exitStatus, logTail);
    const text = why ? `${exitStatus}: ${why}` : exitStatus;
    const causeKind = classifyMessage(text)?.kind ?? 'server';
    const task = /^UPID:[^:]+:[^:]+:[^:]+:[^:]+:([^:]*):([^:]*):/.exec(upid);
    const what = task ? `task ${task[1]}${task[2] ? ` ${task[2]}` : ''}` : 'task';
    super({
      ...ctx,
      kind: 'task-failed',
      retryable:
        causeKind === 'locked' ||
        causeKind === 'lock-timeout' ||
        causeKind === 'unavailable' ||
        causeKind === 'no-quorum',
      reason: text,
      detail: `${what} failed: ${text}`,
    });
    this.name = 'TaskFailedError';
    this.upid = upid;
    this.exitStatus = exitStatus;
    this.causeKind = causeKind;
    this.logTail = Object.freeze([...logTail]);
  }
}

/**
 * Why a migration aborted: its exit status only says `migration aborted`, and the cause is in the
 * log line before (pve-guest-common src/PVE/AbstractMigrate.pm migrate: `$self->log('err',
 * "migration aborted (duration $duration): $err"); die "migration aborted\n"`), e.g. the target's
 * `cluster not ready - no quorum?`. Undefined for any other exit status or a log without it.
 */
function abortedBecause(exitStatus: string, logTail: readonly string[]): string | undefined {
  if (exitStatus !== 'migration aborted') return undefined;
  for (let i = logTail.length - 1; i >= 0; i--) {
    const m = /ERROR: migration aborted \(duration [^)]*\): (.+)$/.exec(logTail[i]!);
    if (m) return m[1]!.trim();
  }
  return undefined;
}

export class TimeoutError extends PveError {
  constructor(ctx: ErrorContext, reason: string) {
    super({ ...ctx, kind: 'timeout', retryable: true, reason });
    this.name = 'TimeoutError';
  }
}

/** The client refuses a call the site cannot do (version, or credentials that are not root@pam). */
export class UnsupportedError extends PveError {
  readonly capability: string;
  constructor(ctx: ErrorContext, capability: string, reason: string) {
    super({ ...ctx, kind: 'unsupported', retryable: false, reason });
    this.name = 'UnsupportedError';
    this.capability = capability;
  }
}

/** The endpoint did not answer like a Proxmox VE API (not JSON, unexpected status). */
export class ProtocolError extends PveError {
  constructor(ctx: ErrorContext, reason: string) {
    super({ ...ctx, kind: 'protocol', retryable: false, reason });
    this.name = 'ProtocolError';
  }
}

/** A PVE handler refused the action (`die`) with a message the taxonomy has no class for. */
export class ServerError extends PveError {
  constructor(ctx: ErrorContext, reason: string) {
    super({ ...ctx, kind: 'server', retryable: false, reason });
    this.name = 'ServerError';
  }
}

// --- classification ----------------------------------------------------------------------------

interface MessageClass {
  kind: PveErrorKind;
  make: (ctx: ErrorContext, reason: string) => PveError;
}

/** Classify a PVE error text (a 500 reason or a task exit status). Undefined: no specific class. */
export function classifyMessage(text: string): MessageClass | undefined {
  if (isNoQuorum(text)) return { kind: 'no-quorum', make: (c, r) => new NoQuorumError(c, r) };
  let m = /VM is locked \(([^)]+)\)/.exec(text);
  if (m) {
    const lock = m[1]!;
    return { kind: 'locked', make: (c, r) => new LockedError(c, r, lock) };
  }
  m = /can't lock file '([^']+)' - got timeout/.exec(text);
  if (m) {
    const file = m[1]!;
    return { kind: 'lock-timeout', make: (c, r) => new LockTimeoutError(c, r, file) };
  }
  if (/got lock request timeout|got timeout/.test(text)) {
    return { kind: 'lock-timeout', make: (c, r) => new LockTimeoutError(c, r) };
  }
  m =
    /VM (\d+) already exists(?: on node '([^']+)')?/.exec(text) ??
    /unable to create VM (\d+): config file already exists/.exec(text);
  if (m) {
    const vmid = Number(m[1]);
    const node = m[2];
    return { kind: 'already-exists', make: (c, r) => new AlreadyExistsError(c, r, vmid, node) };
  }
  m = /Configuration file '(?:nodes\/[^/]+\/qemu-server\/)?(\d+)\.conf' does not exist/.exec(text);
  if (m) {
    const id = m[1]!;
    return { kind: 'not-found', make: (c, r) => new NotFoundError(c, r, 'vm', id) };
  }
  m = /hostname lookup '([^']+)' failed/.exec(text) ?? /no such node '([^']+)'/.exec(text);
  if (m) {
    const id = m[1]!;
    return { kind: 'not-found', make: (c, r) => new NotFoundError(c, r, 'node', id) };
  }
  m = /storage '([^']+)' does not exist/.exec(text);
  if (m) {
    const id = m[1]!;
    return { kind: 'not-found', make: (c, r) => new NotFoundError(c, r, 'storage', id) };
  }
  m = /pool '([^']+)' does not exist/.exec(text);
  if (m && !/Permission check failed/.test(text)) {
    const id = m[1]!;
    return { kind: 'not-found', make: (c, r) => new NotFoundError(c, r, 'pool', id) };
  }
  m = /volume '([^']+)' does not exist/.exec(text);
  if (m) {
    const id = m[1]!;
    return { kind: 'not-found', make: (c, r) => new NotFoundError(c, r, 'volume', id) };
  }
  if (/checksum mismatch/.test(text)) return { kind: 'conflict', make: (c, r) => new ConflictError(c, r) };
  if (/No route to host|Connection refused|Connection timed out|proxy loop detected|Broken pipe/i.test(text)) {
    return { kind: 'unavailable', make: (c, r) => new UnavailableError(c, r, { requestSent: true }) };
  }
  return undefined;
}

/**
 * Whether a PVE error text says the cluster has no quorum: check_cfs_quorum's die, a cfs lock
 * refused for it (Cluster.pm:671), or a write to /etc/pve that the read-only pmxcfs refused (only
 * quorum makes pmxcfs refuse root a write).
 */
export function isNoQuorum(text: string): boolean {
  return (
    /cluster not ready - no quorum\?|cfs-lock '[^']*' error: no quorum!/.test(text) ||
    /'\/etc\/pve\/[^']*' - Permission denied/.test(text)
  );
}

/** Statuses that mean "the cluster (or the node behind the proxy) is not reachable now". */
const UNAVAILABLE_STATUS = new Set([502, 503, 504, 595, 596, 599]);

/**
 * Map a PVE HTTP error answer to the taxonomy. `reason` is the status line's reason phrase,
 * `body` the parsed JSON body (if any; PVE's 401 has none).
 */
export function classifyResponse(
  ctx: ErrorContext & { status: number },
  reasonPhrase: string,
  body: unknown,
): PveError {
  const b = body && typeof body === 'object' ? (body as Record<string, unknown>) : {};
  const message = typeof b.message === 'string' ? b.message.trim() : '';
  const reason = (message.split('\n')[0] || reasonPhrase || '').trim();
  const status = ctx.status;
  if (status === 401) return new AuthenticationError(ctx, reason);
  // PVE also reports a missing pool as `403 Permission check failed (pool 'x' does not exist)`.
  if (status === 403) return new PermissionError(ctx, reason);
  if (status === 400) {
    const errors: Record<string, string> = {};
    if (b.errors && typeof b.errors === 'object') {
      for (const [k, v] of Object.entries(b.errors as Record<string, unknown>)) errors[k] = String(v).trim();
    }
    for (const [k, v] of Object.entries(errors)) {
      const m = /^VM (\d+) already exists/.exec(v);
      if (m) return new AlreadyExistsError(ctx, v, Number(m[1]));
      if (k === 'upid' && /no such task/.test(v)) return new NotFoundError(ctx, v, 'task');
    }
    return new ParameterError(ctx, reason || 'Parameter verification failed.', errors);
  }
  if (status === 501) return new NotImplementedError(ctx, reason);
  if (UNAVAILABLE_STATUS.has(status))
    return new UnavailableError(ctx, reason || `HTTP ${status}`, { requestSent: true });
  if (status === 500) {
    const c = classifyMessage(reason);
    return c ? c.make(ctx, reason) : new ServerError(ctx, reason || 'internal server error');
  }
  if (status >= 500) return new UnavailableError(ctx, reason || `HTTP ${status}`, { requestSent: true });
  return new ProtocolError(ctx, `unexpected HTTP ${status}${reason ? ` ${reason}` : ''}`);
}

/** Whether an error is worth retrying (for reads) after a backoff. */
export function isRetryable(e: unknown): boolean {
  return e instanceof PveError && e.retryable;
}
