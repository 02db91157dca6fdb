/**
 * One SSH connection per node, shared by every snippet upload and clean-up of a site, instead of a
 * connection (key exchange, login, SFTP channel) per file. A rollout that creates 30 VMs with
 * snippets at once made 30 connections to one sshd, and OpenSSH's sshd drops new connections
 * beyond MaxStartups (10 unauthenticated by default, sshd_config(5)) at random; each connection
 * also cost both sides a key exchange on the rollout's critical path.
 *
 * - A connection is made on first use, shared by the uses that come while it lives (SFTP answers
 *   requests by id, so concurrent operations on one channel do not mix), and ended after `idleMs`
 *   without a use, or by close().
 * - A connection that closes or fails is dropped at once; the uses on it fail with
 *   SshError('unreachable'). A use that failed so on a connection that had served before (a node
 *   rebooted, a firewall forgot an idle connection) is tried once more on a new one: every
 *   operation of NodeFiles can be repeated (a write is a temporary file renamed into place).
 * - A use's `signal` ends that use, not the connection the others share.
 * - Keyed by the whole target (host, port, user, a hash of the key and the pinned host keys): a
 *   ProviderConfig whose key or host keys changed gets a new connection, checked against them.
 */
import { createHash } from 'node:crypto';
import { abortable } from './deadline.ts';
import { type NodeFiles, openSftp, type SftpSession, SshError, type SshTarget } from './ssh.ts';

/** How long an unused connection stays open (a phase of a rollout uses it again within seconds). */
const DEFAULT_IDLE_MS = 10_000;

interface Shared {
  opened: Promise<SftpSession>;
  /** Rejects when the connection closes or fails after it was made. */
  lost: Promise<never>;
  users: number;
  /** Uses that ended while it was open: a failure on a connection that served is worth one retry. */
  served: number;
  idle?: NodeJS.Timeout;
  gone: boolean;
  /** Directories made or found in this connection (mkdirs once per connection and directory). */
  dirs: Set<string>;
}

export class SshSessions {
  private readonly shared = new Map<string, Shared>();
  private readonly idleMs: number;
  private closed = false;

  constructor(opts: { idleMs?: number } = {}) {
    this.idleMs = opts.idleMs ?? DEFAULT_IDLE_MS;
  }

  /** Run `use` with the node's files over the shared connection (see the file's comment). */
  async use<T>(target: SshTarget, use: (files: NodeFiles) => Promise<T>, signal?: AbortSignal): Promise<T> {
    try {
      return await this.useOnce(target, use, signal, false);
    } catch (e) {
      if (!(e instanceof RetryOnNew)) throw e;
      return await this.useOnce(target, use, signal, true);
    }
  }

  /**
   * Make the connection to `target` now, if there is none, for a use that is coming (a create's
   * checks run meanwhile): its key exchange and login are then off that use's path. A failure is
   * not reported here; the use that follows connects again and gets it.
   */
  warm(target: SshTarget): void {
    if (this.closed) return;
    const key = targetKey(target);
    const s = this.acquire(key, target);
    const done = () => this.release(key, s, false);
    s.opened.then(done, done);
  }

  /** End every connection (the site's context stops). */
  close(): void {
    this.closed = true;
    for (const [key, s] of this.shared) this.drop(key, s);
  }

  /** Connections open now (for tests and metrics). */
  get size(): number {
    return this.shared.size;
  }

  private async useOnce<T>(
    target: SshTarget,
    use: (files: NodeFiles) => Promise<T>,
    signal: AbortSignal | undefined,
    retried: boolean,
  ): Promise<T> {
    signal?.throwIfAborted();
    if (this.closed)
      throw new SshError('unreachable', `${target.user}@${target.host}:${target.port}: the provider is stopping`);
    const key = targetKey(target);
    const s = this.acquire(key, target);
    const servedBefore = s.served > 0;
    let ok = false;
    try {
      const session = await abortable(s.opened, signal);
      const work = use(filesOf(session.files, s.dirs));
      // What a use still does after its signal ended it (or its connection went) fails unseen.
      work.catch(() => {});
      const result = await abortable(Promise.race([work, s.lost]), signal);
      ok = true;
      return result;
    } catch (e) {
      const lostConnection = e instanceof SshError && e.kind === 'unreachable' && s.gone;
      if (lostConnection && servedBefore && !retried && !signal?.aborted) throw new RetryOnNew();
      throw e;
    } finally {
      this.release(key, s, ok);
    }
  }

  private acquire(key: string, target: SshTarget): Shared {
    let s = this.shared.get(key);
    if (!s || s.gone) {
      let lose!: (e: Error) => void;
      const lost = new Promise<never>((_, reject) => {
        lose = reject;
      });
      lost.catch(() => {});
      const fresh: Shared = { opened: openSftp(target), lost, users: 0, served: 0, gone: false, dirs: new Set() };
      fresh.opened.then(
        (session) => {
          if (fresh.gone) {
            session.conn.end();
            return;
          }
          const where = session.where;
          const onGone = (why: string) => {
            if (!fresh.gone) this.drop(key, fresh);
            lose(new SshError('unreachable', `${where}: ${why}`));
          };
          // A persistent listener: a second 'error' without one would be thrown by the emitter.
          session.conn.on('error', (e: Error) => onGone(`connection failed: ${e.message}`));
          session.conn.on('close', () => onGone('connection closed'));
        },
        () => {
          // A connection that could not be made is not kept: the next use tries anew.
          if (this.shared.get(key) === fresh) this.shared.delete(key);
          fresh.gone = true;
        },
      );
      this.shared.set(key, fresh);
      s = fresh;
    }
    s.users++;
    if (s.idle) {
      clearTimeout(s.idle);
      s.idle = undefined;
    }
    return s;
  }

  private release(key: string, s: Shared, ok: boolean): void {
    s.users--;
    if (ok) s.served++;
    if (s.users > 0 || s.gone) return;
    s.idle = setTimeout(() => this.drop(key, s), this.idleMs);
    // An idle connection does not keep the process alive; close() ends it anyway.
    s.idle.unref();
  }

  private drop(key: string, s: Shared): void {
    s.gone = true;
    if (s.idle) clearTimeout(s.idle);
    if (this.shared.get(key) === s) this.shared.delete(key);
    s.opened.then(
      (session) => session.conn.end(),
      () => {},
    );
  }
}

/** A use failed because its connection, which had served before, went: try once on a new one. */
class RetryOnNew extends Error {}

/**
 * The node's files, with `mkdirs` done once per connection and directory: each costs a round
 * trip per path component. A write that finds no directory (removed on the node meanwhile)
 * forgets it, so that the next upload makes it again.
 */
function filesOf(files: NodeFiles, dirs: Set<string>): NodeFiles {
  return {
    ...files,
    async mkdirs(dir) {
      if (dirs.has(dir)) return;
      await files.mkdirs(dir);
      dirs.add(dir);
    },
    async write(path, content) {
      try {
        await files.write(path, content);
      } catch (e) {
        if (e instanceof SshError && e.status === 2) dirs.delete(path.slice(0, path.lastIndexOf('/')));
        throw e;
      }
    },
  };
}

/** The connection's key: the target as a whole, with the private key and host keys hashed. */
function targetKey(t: SshTarget): string {
  const secret = createHash('sha256')
    .update(t.privateKey)
    .update('\u0000')
    .update(t.passphrase ?? '')
    .update('\u0000')
    .update(t.hostKeys.join('\n'))
    .digest('hex');
  return `${t.user}@${t.host}:${t.port}/${secret}`;
}
