/**
 * Test support: an SFTP session to a simulated node with ssh2's client, the host key pinned by
 * its OpenSSH fingerprint (as the provider pins it), and promise wrappers of the SFTP calls the
 * tests use. Failures keep ssh2's error (its `level` for login failures, `code` for SFTP status).
 */
import { createHash } from 'node:crypto';
import ssh2, { type SFTPWrapper } from 'ssh2';
import type { SshNodeInfo } from '../../src/sim/index.ts';

export interface SshAuth {
  privateKey?: string;
  password?: string;
  username?: string;
  /** Pinned fingerprints (default: the node's own). */
  hostKeys?: string[];
}

export interface Session {
  sftp: SFTPWrapper;
  /** The fingerprint the server presented. */
  presented: string;
  end(): void;
}

export function fingerprintOf(blob: Buffer): string {
  return `SHA256:${createHash('sha256').update(blob).digest('base64').replace(/=+$/, '')}`;
}

export function connect(
  info: Pick<SshNodeInfo, 'host' | 'port' | 'hostKeyFingerprint'>,
  auth: SshAuth,
): Promise<Session> {
  const conn = new ssh2.Client();
  const pinned = auth.hostKeys ?? [info.hostKeyFingerprint];
  let presented = '';
  return new Promise((resolve, reject) => {
    conn.once('ready', () =>
      conn.sftp((err, sftp) => {
        if (err) {
          conn.end();
          return reject(err);
        }
        resolve({ sftp, presented, end: () => conn.end() });
      }),
    );
    conn.once('error', (e) => {
      conn.end();
      reject(e);
    });
    conn.connect({
      host: info.host,
      port: info.port,
      username: auth.username ?? 'root',
      ...(auth.privateKey ? { privateKey: auth.privateKey } : {}),
      ...(auth.password !== undefined ? { password: auth.password } : {}),
      readyTimeout: 5000,
      hostVerifier: (key: Buffer) => {
        presented = fingerprintOf(key);
        return pinned.includes(presented);
      },
    });
    // Without TCP_NODELAY on the client, each round trip waits for the server's delayed ACK.
    conn.setNoDelay(true);
  });
}

/** A callback-style SFTP call as a promise. */
export function call<T = void>(f: (cb: (err: Error | null | undefined, v?: T) => void) => void): Promise<T> {
  return new Promise((resolve, reject) => f((err, v) => (err ? reject(err) : resolve(v as T))));
}

/** Upload a file whole, as a careful client does: a temporary name, then posix-rename over the target. */
export async function upload(sftp: SFTPWrapper, path: string, content: string | Buffer): Promise<void> {
  const tmp = `${path}.tmp`;
  await call((cb) => sftp.writeFile(tmp, content, { mode: 0o644 }, cb));
  await call((cb) => sftp.ext_openssh_rename(tmp, path, cb));
}

/** The SFTP status code of a failed call. */
export async function sftpCode(p: Promise<unknown>): Promise<{ code: number; message: string }> {
  try {
    await p;
  } catch (e) {
    return { code: (e as { code: number }).code, message: (e as Error).message };
  }
  throw new Error('expected an SFTP failure');
}
