/**
 * One SSH server per simulated node (sshd on a PVE node), serving the `sftp` subsystem over the
 * node's storages (sftp.ts, vfs.ts): what a provider needs to upload cloud-init snippets, which
 * the PVE API cannot. Login as `root` with the simulator's client key (its public key is in
 * root's authorized_keys) or root@pam's password (PVE nodes permit root password logins). Any
 * other login fails as OpenSSH fails it: USERAUTH_FAILURE naming `publickey,password`, and after
 * MaxAuthTries (6) failures a disconnect.
 *
 * The listener is a plain TCP server whose sockets are handed to an ssh2 Server (which never
 * listens itself), so that the port can be closed for an `ssh-refused` fault (ECONNREFUSED) and
 * reopened on the same port, and the host key replaced when a state file brings the old one. An
 * offline node accepts TCP connections and never answers (the client's ready timeout strikes),
 * as a host behind a dead link would not refuse them either. Exec and shell requests are refused
 * (only SFTP is modelled).
 */
import { createServer, type Server as NetServer, type Socket } from 'node:net';
import ssh2, { type AuthContext, type Connection } from 'ssh2';
import type { Faults } from '../faults.ts';
import type { ClusterState } from '../state.ts';
import { fingerprint, type KeyPair, publicKeyBlob } from './keys.ts';
import { serveSftp } from './sftp.ts';
import { NodeFs } from './vfs.ts';

/** The SSH endpoint of one node and its host key, as a client pins it. */
export interface SshNodeInfo {
  node: string;
  host: string;
  port: number;
  /** `ssh-ed25519 AAAA… root@<node>` (/etc/ssh/ssh_host_ed25519_key.pub). */
  hostPublicKey: string;
  /** `ssh-keygen -lf` of it: `SHA256:…`. */
  hostKeyFingerprint: string;
}

/** sshd's banner per PVE release (the Debian under it). */
const IDENT: Record<string, string> = {
  '6.4': 'OpenSSH_7.9p1 Debian-10+deb10u4',
  '7.4': 'OpenSSH_8.4p1 Debian-5+deb11u3',
  '8.4': 'OpenSSH_9.2p1 Debian-2+deb12u5',
  '9.2': 'OpenSSH_10.0p2 Debian-7',
};
const MAX_AUTH_TRIES = 6;

export class NodeSshServer {
  readonly node: string;
  private readonly c: ClusterState;
  private readonly faults: Faults;
  /** The public keys root's authorized_keys holds. */
  private readonly authorized: () => string[];
  private hostKey: KeyPair;
  private ssh: ssh2.Server;
  private readonly tcp: NetServer;
  private readonly sockets = new Set<Socket>();
  /** TCP connections accepted since the start (what a client's connection reuse is seen by). */
  accepted = 0;
  /** SFTP requests answered since the start, by type (`STAT`, `OPEN`...): a client's round trips. */
  readonly sftpRequests = new Map<string, number>();
  host = '127.0.0.1';
  port = 0;
  private closed = false;
  /** Settles when the listener is in the state the faults ask for. */
  ready: Promise<void> = Promise.resolve();

  constructor(c: ClusterState, faults: Faults, node: string, hostKey: KeyPair, authorized: () => string[]) {
    this.c = c;
    this.faults = faults;
    this.node = node;
    this.hostKey = hostKey;
    this.authorized = authorized;
    this.ssh = this.makeServer();
    this.tcp = createServer((socket) => this.accept(socket));
  }

  get info(): SshNodeInfo {
    return {
      node: this.node,
      host: this.host,
      port: this.port,
      hostPublicKey: this.hostKey.publicKey,
      hostKeyFingerprint: fingerprint(this.hostKey.publicKey),
    };
  }

  get key(): KeyPair {
    return this.hostKey;
  }

  /** A new host key for connections from now on (a state file's key). */
  setHostKey(k: KeyPair): void {
    this.hostKey = k;
    this.ssh = this.makeServer();
  }

  async listen(host: string, port: number): Promise<void> {
    this.host = host;
    await new Promise<void>((resolve, reject) => {
      this.tcp.once('error', reject);
      this.tcp.listen(port, host, () => {
        this.tcp.off('error', reject);
        resolve();
      });
    });
    this.port = (this.tcp.address() as { port: number }).port;
    if (this.faults.sshRefused(this.node)) this.sync();
  }

  /** Close or reopen the listening port to match the `ssh-refused` faults. */
  sync(): void {
    if (this.closed) return;
    const refuse = this.faults.sshRefused(this.node);
    if (this.faults.sshSessionsDropped(this.node)) for (const s of this.sockets) s.destroy();
    if (refuse && this.tcp.listening) {
      // Stops listening at once; the close callback would wait for the open sessions, which stay.
      this.tcp.close();
      this.ready = Promise.resolve();
    } else if (!refuse && !this.tcp.listening) {
      this.ready = new Promise((resolve) => {
        this.tcp.once('error', () => resolve());
        this.tcp.listen(this.port, this.host, () => resolve());
      });
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const s of this.sockets) s.destroy();
    // A reopening under way (sync(), as the simulator's close clears an ssh-refused fault) is bound
    // only after its address's lookup, a tick later, and `listening` is false until then: closed
    // before it, the port it opens outlived the simulator and kept its process alive (a fault
    // search soak's process never exited).
    await this.ready;
    if (this.tcp.listening) await new Promise<void>((resolve) => this.tcp.close(() => resolve()));
  }

  private accept(socket: Socket): void {
    this.accepted++;
    this.sockets.add(socket);
    socket.on('close', () => this.sockets.delete(socket));
    socket.on('error', () => {});
    // sshd sets TCP_NODELAY for interactive sessions; without it every round trip waits for the
    // peer's delayed ACK.
    socket.setNoDelay(true);
    // An unreachable node: the TCP connection opens, no banner ever comes.
    if (!this.c.nodes.get(this.node)?.online) return;
    this.ssh.injectSocket(socket);
  }

  private makeServer(): ssh2.Server {
    return new ssh2.Server(
      { hostKeys: [this.hostKey.privateKey], ident: IDENT[this.c.profile.profile] ?? IDENT['8.4']! },
      (client) => this.session(client),
    );
  }

  private session(client: Connection): void {
    let failures = 0;
    client.on('error', () => {});
    client.on('authentication', (ctx) => {
      if (this.login(ctx)) return ctx.accept();
      // A public key query (no signature yet) that is refused is not a try of its own in
      // OpenSSH either; every other refusal counts towards MaxAuthTries.
      if (ctx.method !== 'none' && !(ctx.method === 'publickey' && !ctx.signature)) failures++;
      if (failures >= MAX_AUTH_TRIES) return client.end();
      ctx.reject(['publickey', 'password']);
    });
    client.on('ready', () => {
      client.on('session', (acceptSession) => {
        const session = acceptSession();
        session.on('sftp', (acceptSftp) =>
          serveSftp(this.c, acceptSftp(), new NodeFs(this.c, this.node), (op) =>
            this.sftpRequests.set(op, (this.sftpRequests.get(op) ?? 0) + 1),
          ),
        );
        session.on('exec', (_accept, reject) => reject());
        session.on('shell', (_accept, reject) => reject());
        session.on('pty', (accept) => accept?.());
        session.on('env', (accept) => accept?.());
      });
    });
  }

  private login(ctx: AuthContext): boolean {
    if (ctx.method === 'none') return false;
    if (this.faults.sshAuthFails(this.node) || ctx.username !== 'root') return false;
    if (ctx.method === 'password') {
      const pw = this.c.users.get('root@pam')?.password;
      return pw !== undefined && ctx.password === pw;
    }
    if (ctx.method !== 'publickey') return false;
    for (const pub of this.authorized()) {
      const parsed = ssh2.utils.parseKey(pub);
      const key = Array.isArray(parsed) ? parsed[0] : parsed;
      if (!key || key instanceof Error) continue;
      if (ctx.key.algo !== key.type || !ctx.key.data.equals(publicKeyBlob(pub))) continue;
      // The query before the signature is answered PK_OK; the signature must verify.
      if (!ctx.signature) return true;
      return key.verify(ctx.blob!, ctx.signature, ctx.hashAlgo) === true;
    }
    return false;
  }
}
