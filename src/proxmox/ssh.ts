/**
 * SSH/SFTP to a Proxmox VE node, for the one thing its API cannot do: write files into a
 * storage's directory (cloud-init snippets; bpg's Terraform provider does the same). The host key
 * is pinned (an OpenSSH SHA256 fingerprint or a known_hosts key): a node presenting another key is
 * never sent anything, and nothing is trusted on first use. Every failure comes back as an
 * SshError whose kind says what to fix (refused, unreachable, authentication, host key, disk full).
 */
import { createHash } from 'node:crypto';
import { Client, type ConnectConfig, type SFTPWrapper } from 'ssh2';

export interface SshTarget {
  host: string;
  port: number;
  user: string;
  privateKey: string;
  passphrase?: string;
  /** Pinned host keys: `SHA256:...` fingerprints or known_hosts lines (see parseHostKey). */
  hostKeys: string[];
  /** How long the connection and login may take (default 15 s). */
  readyTimeoutMs?: number;
}

export type SshFailure = 'refused' | 'unreachable' | 'auth' | 'host-key' | 'disk-full' | 'permission' | 'io';

export class SshError extends Error {
  readonly kind: SshFailure;
  /** The SFTP status code of a file operation that failed (2: no such file). */
  readonly status: number | undefined;
  constructor(kind: SshFailure, message: string, status?: number) {
    super(message);
    this.name = 'SshError';
    this.kind = kind;
    this.status = status;
  }
}

/** OpenSSH's fingerprint of a host key blob: `SHA256:` + unpadded base64 of its SHA-256. */
export function sshFingerprint(keyBlob: Buffer): string {
  return `SHA256:${createHash('sha256').update(keyBlob).digest('base64').replace(/=+$/, '')}`;
}

/** The fingerprints the pinned entries stand for (a known_hosts line is reduced to its key's). */
export function pinnedFingerprints(hostKeys: string[]): Set<string> {
  const out = new Set<string>();
  for (const k of hostKeys) {
    const t = k.trim();
    const fp = /^SHA256:([A-Za-z0-9+/]{43})=?$/.exec(t);
    if (fp) {
      out.add(`SHA256:${fp[1]}`);
      continue;
    }
    const line = /(?:^|\s)(?:ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(?:256|384|521))\s+([A-Za-z0-9+/]+=*)/.exec(t);
    if (line) out.add(sshFingerprint(Buffer.from(line[1]!, 'base64')));
  }
  return out;
}

/** Files on one node, over one SFTP session. */
export interface NodeFiles {
  /** Write `content` to `path` whole: a temporary file renamed over it, so no reader sees half of it. */
  write(path: string, content: string): Promise<void>;
  /** Names in a directory; [] when it does not exist. */
  list(dir: string): Promise<string[]>;
  /** Remove a file; a missing one is not an error. */
  remove(path: string): Promise<void>;
  /** Create a directory (and its parents); an existing one is not an error. */
  mkdirs(dir: string): Promise<void>;
  /** A file's size in bytes; undefined when there is none. */
  size(path: string): Promise<number | undefined>;
}

/**
 * Connect, log in, open SFTP, run `use`, close. `signal` ends the connection (the call rejects
 * with the signal's reason). One connection per call: what `doctor` checks. The engine's uploads
 * share one connection per node instead (ssh-sessions.ts).
 */
export async function withNodeFiles<T>(
  target: SshTarget,
  use: (files: NodeFiles) => Promise<T>,
  signal?: AbortSignal,
): Promise<T> {
  const session = await openSftp(target, signal);
  try {
    return await use(nodeFiles(session.sftp, session.where));
  } finally {
    session.conn.end();
  }
}

/** A logged-in SSH connection with its SFTP channel. */
export interface SftpSession {
  conn: Client;
  sftp: SFTPWrapper;
  /** `user@host:port`, for messages. */
  where: string;
  files: NodeFiles;
}

/**
 * Connect, check the host key against the pinned ones, log in and open SFTP. `signal` ends the
 * connection while it is being made (the call rejects with the signal's reason); once made, the
 * connection is the caller's to end.
 */
export async function openSftp(target: SshTarget, signal?: AbortSignal): Promise<SftpSession> {
  signal?.throwIfAborted();
  const conn = new Client();
  const where = `${target.user}@${target.host}:${target.port}`;
  const pinned = pinnedFingerprints(target.hostKeys);
  let presented: string | undefined;
  const onAbort = () => conn.end();
  signal?.addEventListener('abort', onAbort, { once: true });
  try {
    const sftp = await new Promise<SFTPWrapper>((resolve, reject) => {
      const config: ConnectConfig = {
        host: target.host,
        port: target.port,
        username: target.user,
        privateKey: target.privateKey,
        ...(target.passphrase ? { passphrase: target.passphrase } : {}),
        readyTimeout: target.readyTimeoutMs ?? 15_000,
        hostVerifier: (key: Buffer) => {
          presented = sshFingerprint(key);
          return pinned.has(presented);
        },
      };
      conn.once('ready', () => {
        conn.sftp((err, s) =>
          err ? reject(new SshError('io', `${where}: SFTP refused: ${err.message}`)) : resolve(s),
        );
      });
      // `on`, not `once`: a refused host key is an error, and the reset of the socket closed after
      // it can be a second one, which without a listener would end the process.
      conn.on('error', (e: Error & { level?: string; code?: string }) => reject(connectError(e, where, presented)));
      conn.once('close', () => reject(signal?.reason ?? new SshError('unreachable', `${where}: connection closed`)));
      try {
        conn.connect(config);
        // Small SFTP round trips: without it each waits for Nagle's delayed ACK (about 40 ms).
        conn.setNoDelay(true);
      } catch (e) {
        reject(
          new SshError(
            'auth',
            `${where}: ${e instanceof Error ? e.message : String(e)} (spec.sites[].ssh.secretRef: the privateKey)`,
          ),
        );
      }
    });
    return { conn, sftp, where, files: nodeFiles(sftp, where) };
  } catch (e) {
    conn.end();
    throw e;
  } finally {
    signal?.removeEventListener('abort', onAbort);
  }
}

function connectError(
  e: Error & { level?: string; code?: string },
  where: string,
  presented: string | undefined,
): Error {
  const msg = e.message;
  if (/host key|verification failed|Host denied/i.test(msg) || (e.level === 'client-verification' && presented))
    return new SshError(
      'host-key',
      `${where}: the node's SSH host key ${presented ?? '(unknown)'} is not one of spec.sites[].ssh.hostKeys; nothing was sent. If the node's key really changed, check it on the node (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub) and pin the new one`,
    );
  if (e.level === 'client-authentication' || /authentication methods failed|All configured authentication/i.test(msg))
    return new SshError(
      'auth',
      `${where}: SSH login refused: the public key of spec.sites[].ssh.secretRef's privateKey must be in ~${'/'}.ssh/authorized_keys of the user on the node`,
    );
  if (e.code === 'ECONNREFUSED')
    return new SshError(
      'refused',
      `${where}: connection refused: is sshd running on the node, and is the port right (spec.sites[].ssh.port or nodes[].port)?`,
    );
  if (e.code === 'ETIMEDOUT' || e.code === 'EHOSTUNREACH' || e.code === 'ENETUNREACH' || /Timed out/i.test(msg))
    return new SshError(
      'unreachable',
      `${where}: unreachable (${e.code ?? msg}): check the address (spec.sites[].ssh.nodes) and the firewall`,
    );
  if (e.code === 'ENOTFOUND' || e.code === 'EAI_AGAIN')
    return new SshError(
      'unreachable',
      `${where}: the host name does not resolve (${e.code}); set spec.sites[].ssh.nodes[].host`,
    );
  return new SshError('unreachable', `${where}: ${msg}`);
}

/** SFTP status codes (draft-ietf-secsh-filexfer-02): 2 no such file, 3 permission denied, 4 failure. */
function sftpError(e: Error & { code?: number | string }, where: string, what: string): SshError {
  const status = typeof e.code === 'number' ? e.code : undefined;
  if (status === 3)
    return new SshError(
      'permission',
      `${where}: ${what}: permission denied (the SSH user needs write access there)`,
      status,
    );
  if (/No space left|quota/i.test(e.message))
    return new SshError('disk-full', `${where}: ${what}: no space left on the storage`, status);
  // OpenSSH's sftp-server answers a full disk with status 4 and only the text "Failure"
  // (sftp-server.c status_to_message): on a write, that is what it most likely means.
  if (status === 4 && what.startsWith('writing'))
    return new SshError(
      'disk-full',
      `${where}: ${what}: the node refused the write (SFTP "Failure"; a full storage answers so): check the storage's free space (pvesm status)`,
      status,
    );
  return new SshError('io', `${where}: ${what}: ${e.message}`, status);
}

/** Numbers the temporary files of this process's writes (see write). */
let tmpSeq = 0;

function nodeFiles(sftp: SFTPWrapper, where: string): NodeFiles {
  const call = <T>(what: string, f: (cb: (err: Error | null | undefined, v?: T) => void) => void) =>
    new Promise<T>((resolve, reject) =>
      f((err, v) => (err ? reject(sftpError(err as Error & { code?: number }, where, what)) : resolve(v as T))),
    );
  const notFound = (e: unknown) => e instanceof SshError && e.status === 2;
  const files: NodeFiles = {
    async write(path, content) {
      // Unique per write: two writes of one file at once (a snippet prepared ahead and its create's)
      // within a millisecond shared a temporary name, and the second rename found none.
      const tmp = `${path}.tmp-${process.pid}-${Date.now().toString(36)}-${(++tmpSeq).toString(36)}`;
      try {
        await call<void>(`writing ${path}`, (cb) => sftp.writeFile(tmp, content, { mode: 0o644 }, cb));
        // OpenSSH's plain rename refuses an existing target; posix-rename replaces it atomically.
        await call<void>(`writing ${path}`, (cb) => sftp.ext_openssh_rename(tmp, path, cb));
      } catch (e) {
        await call<void>('cleanup', (cb) => sftp.unlink(tmp, cb)).catch(() => {});
        throw e;
      }
    },
    async list(dir) {
      try {
        const entries = await call<Array<{ filename: string }>>(`listing ${dir}`, (cb) => sftp.readdir(dir, cb));
        return entries.map((x) => x.filename).filter((n) => n !== '.' && n !== '..');
      } catch (e) {
        if (notFound(e)) return [];
        throw e;
      }
    },
    async remove(path) {
      try {
        await call<void>(`removing ${path}`, (cb) => sftp.unlink(path, cb));
      } catch (e) {
        if (!notFound(e)) throw e;
      }
    },
    async size(path) {
      try {
        return (await call<{ size: number }>(`checking ${path}`, (cb) => sftp.stat(path, cb))).size;
      } catch (e) {
        if (notFound(e)) return undefined;
        throw e;
      }
    },
    async mkdirs(dir) {
      const exists = (p: string) =>
        call<unknown>(`checking ${p}`, (cb) => sftp.stat(p, cb)).then(
          () => true,
          () => false,
        );
      // The directory itself first: it is there at every write but a node's first, and each stat is
      // an SFTP round trip (three fewer per snippet than walking down from /).
      if (await exists(dir)) return;
      const parts = dir.split('/').filter(Boolean);
      for (let i = 1; i <= parts.length; i++) {
        const p = `/${parts.slice(0, i).join('/')}`;
        if (!(await exists(p))) await call<void>(`creating ${p}`, (cb) => sftp.mkdir(p, cb));
      }
    },
  };
  return files;
}
