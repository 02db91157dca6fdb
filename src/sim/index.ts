/**
 * The Proxmox VE API simulator: several independent clusters, each on its own listen address,
 * speaking `/api2/json` over HTTPS (self-signed certificate made at start) or plain HTTP, and an
 * SSH/SFTP server per node (./ssh/) for what the API cannot do: uploading cloud-init snippets.
 */
import { X509Certificate } from 'node:crypto';
import { createServer as createHttpServer, type Server } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import selfsigned from 'selfsigned';
import { Clock } from './clock.ts';
import type { FaultSpec } from './fault-spec.ts';
import { Faults } from './faults.ts';
import { type CloudInitView, cloudInitView } from './guest-cloudinit.ts';
import { bootNode, crashNode } from './node-power.ts';
import type { Profile } from './profiles.ts';
import { configCpus, configMemoryMiB } from './qemu-config.ts';
import { registerEndpoint } from './remote-endpoints.ts';
import { accessRoutes, userRoutes } from './routes/access.ts';
import { clusterRoutes } from './routes/cluster.ts';
import { indexRoutes } from './routes/indexes.ts';
import { monitoringRoutes } from './routes/monitoring.ts';
import { nodeRoutes } from './routes/nodes.ts';
import { poolRoutes } from './routes/pools.ts';
import { qemuRoutes, vmMaxDisk } from './routes/qemu.ts';
import { storageRoutes } from './routes/storage.ts';
import { taskRoutes } from './routes/tasks.ts';
import { vzdumpRoutes } from './routes/vzdump.ts';
import { ApiHandler, type Route } from './server.ts';
import { generateKeyPair } from './ssh/keys.ts';
import { NodeSshServer, type SshNodeInfo } from './ssh/server.ts';
import { ClusterState } from './state.ts';
import { MiB } from './storage.ts';
import { TaskRunner } from './tasks.ts';
import { defaultTopology, type Topology } from './topology.ts';

export { ClusterState } from './state.ts';
export { parseTokenArg } from './token-arg.ts';

import { parseTokenArg } from './token-arg.ts';

export type { CloudInitView, FaultSpec, Profile, SshNodeInfo, Topology };

export const ROUTES: Route[] = [
  ...indexRoutes,
  ...accessRoutes,
  ...userRoutes,
  ...poolRoutes,
  ...clusterRoutes,
  ...nodeRoutes,
  ...monitoringRoutes,
  ...storageRoutes,
  ...taskRoutes,
  ...qemuRoutes,
  ...vzdumpRoutes,
];

export interface SimulatorOptions {
  topology?: Topology;
  profile?: Profile;
  /** Divides every simulated duration. Default 1 (realistic). */
  speed?: number;
  /** Plain HTTP instead of HTTPS. */
  http?: boolean;
  rootPassword?: string;
  /**
   * `USER@REALM!ID=SECRET`, privilege separation off (full rights of the user); a user other than
   * root@pam is created with the Administrator role on `/`.
   */
  tokens?: string[];
  /** Listen on port 0 (ephemeral) instead of the topology's ports; for tests. */
  ephemeralPorts?: boolean;
  /** Host to listen on when `ephemeralPorts` (default 127.0.0.1). */
  host?: string;
  /** Delay of 401 answers in real ms (PVE: 3000). Default 3000 / speed. */
  authFailDelayMs?: number;
  /** PRNG seed (MACs, UUIDs, ids). */
  seed?: number;
  /**
   * Serve SSH/SFTP on every node (default true): a listener per node on the cluster's host, on
   * the topology node's `sshPort` (default 0, ephemeral; always ephemeral with `ephemeralPorts`).
   */
  ssh?: boolean;
}

export interface Credentials {
  rootPassword: string;
  tokens: Array<{ tokenid: string; secret: string }>;
  /** The SSH user of every node. */
  sshUser: 'root';
  /** OpenSSH private key (ed25519) whose public key every node's root authorized_keys holds; '' without SSH. */
  sshPrivateKey: string;
  /** Its public key line (`ssh-ed25519 AAAA… provider-proxmox-sim`). */
  sshPublicKey: string;
}

export class SimCluster {
  readonly state: ClusterState;
  readonly faults: Faults;
  readonly tasks: TaskRunner;
  readonly server: Server;
  readonly tls: boolean;
  fingerprint = '';
  private ticker: NodeJS.Timeout | undefined;
  url = '';
  /** The nodes' SSH servers (empty with `ssh: false`). */
  readonly sshServers = new Map<string, NodeSshServer>();
  /** Takes the API endpoint out of the registry other clusters' remote migrations resolve. */
  unregisterEndpoint: () => void = () => {};

  constructor(state: ClusterState, server: Server, tls: boolean, faults: Faults, tasks: TaskRunner) {
    this.state = state;
    this.server = server;
    this.tls = tls;
    this.faults = faults;
    this.tasks = tasks;
  }

  get name(): string {
    return this.state.name;
  }
  get nodes(): string[] {
    return [...this.state.nodes.keys()];
  }

  /** Add a fault (see FaultSpec); returns its id. */
  addFault(spec: FaultSpec): number {
    return this.faults.add(spec);
  }

  /** `DELETE /_sim/faults/{id}`: false if there is no such fault. */
  removeFault(id: number): boolean {
    return this.faults.remove(id);
  }

  /** `DELETE /_sim/faults`. */
  clearFaults(): void {
    this.faults.clear();
  }

  /** Every node's SSH endpoint and host key (the order of `nodes`). */
  sshNodes(): SshNodeInfo[] {
    return [...this.sshServers.values()].map((s) => s.info);
  }

  /** One node's SSH endpoint and host key; throws for a node without SSH. */
  sshNode(node: string): SshNodeInfo {
    const s = this.sshServers.get(node);
    if (!s) throw new Error(`no SSH server for node '${node}' in cluster '${this.name}'`);
    return s.info;
  }

  /**
   * Resolves once every SSH listener is closed or open as the `ssh-refused` faults say (the
   * port is reopened asynchronously after such a fault is removed).
   */
  async sshReady(): Promise<void> {
    await Promise.all([...this.sshServers.values()].map((s) => s.ready));
  }

  /** What cloud-init did in a VM's guest this boot, as of now; undefined if the VM does not exist. */
  cloudInit(vmid: number): CloudInitView | undefined {
    const vm = this.state.vms.get(vmid);
    return vm && cloudInitView(this.state, vm);
  }

  /** `GET /_sim/counters`: requests per `METHOD /path/template`. */
  counters(): Record<string, number> {
    return Object.fromEntries(this.faults.counters);
  }

  /** `DELETE /_sim/counters`. */
  resetCounters(): void {
    this.faults.counters.clear();
  }

  addUser(userid: string, password?: string): void {
    this.state.users.set(userid, { userid, ...(password !== undefined ? { password } : {}), enable: true, groups: [] });
  }

  /** `POST /access/users/{userid}/token/{tokenid}`: returns the secret. */
  addToken(userid: string, tokenid: string, opts: { privsep?: boolean; secret?: string } = {}): string {
    if (!this.state.users.has(userid)) this.addUser(userid);
    const secret = opts.secret ?? this.state.rng.uuid();
    this.state.tokens.set(`${userid}!${tokenid}`, {
      userid,
      tokenid,
      secret,
      privsep: opts.privsep ?? true,
      expire: 0,
    });
    return secret;
  }

  /** `PUT /access/acl`. */
  setAcl(path: string, ugid: string, roleid: string, propagate = true): void {
    if (!this.state.roles[roleid]) throw new Error(`role '${roleid}' does not exist`);
    this.state.acls.push({ path, ugid, roleid, propagate });
  }

  addRole(roleid: string, privs: string[]): void {
    this.state.roles[roleid] = new Set(privs);
  }

  /**
   * Start or stop qemu-guest-agent inside a VM's guest, as cloud-init user data installing it (or
   * an admin removing it) would; `POST /_sim/guest-agent`. It stays so across reboots and is
   * inherited by clones. A running VM's agent answers from now on (if `agent: 1` is configured);
   * a VM that is not running gets it at its next boot, after the usual boot time. False if the
   * VM does not exist.
   */
  setGuestAgent(vmid: number, running: boolean): boolean {
    const vm = this.state.vms.get(vmid);
    if (!vm) return false;
    vm.guestAgent = running;
    if (!running) vm.guestDisk.packages.delete('qemu-guest-agent');
    if (running && vm.status === 'running') vm.agentReadyAt = Math.min(vm.agentReadyAt, this.state.clock.now());
    return true;
  }

  /**
   * Every VM's RRD snapshot is taken on pvestatd's 10 s period (scaled). A tick costs two to three
   * microseconds per VM, and at speed 1000 the period is 10 ms: with thousands of VMs the ticker
   * alone would take the whole core and starve the API (10,000 VMs: 880 s of CPU in a 900 s run).
   * So a period ends with no tick when less than nine times the last tick's own duration has
   * passed since it: the simulator spends at most about a tenth of its time on statistics, and a
   * big fleet at a high speed sees its statistics lag as a loaded pvestatd's do (5,000 VMs on a
   * site at speed 1000: a tick of 10-16 ms, so every 100-150 simulated seconds). At a fifth (four
   * times), a profile of a 10,000-VM apply showed the ticker in 63 of the simulator's 140 s on the
   * CPU, and its ticks held the API's answers back: that apply took 207 s; at a tenth, 175 s.
   */
  startStatTicker(): void {
    const tick = () => {
      for (const vm of this.state.vms.values()) {
        if (this.state.nodes.get(vm.node)?.statsStalled) continue;
        const mem = configMemoryMiB(vm.config) * MiB;
        const maxdisk = vmMaxDisk(this.state, vm);
        const running = vm.status === 'running';
        // pvestatd's update_qemu_status row: name, status, template and cpus as of this tick
        // (pve-manager PVE/Service/pvestatd.pm:328-380 at 14a22df3; names from QemuServer::vmstatus).
        vm.rrd = {
          name: vm.config.name || `VM ${vm.vmid}`,
          status: vm.status,
          template: vm.config.template === '1' ? 1 : 0,
          maxcpu: configCpus(vm.config),
          cpu: running ? 0.013 : 0,
          mem: running ? Math.round(mem * 0.42) : 0,
          maxmem: mem,
          maxdisk,
          disk: 0,
          uptime: running ? Math.floor((this.state.clock.now() - vm.startedAt) / 1000) : 0,
        };
      }
    };
    let ended = 0;
    let took = 0;
    const timed = () => {
      const began = performance.now();
      if (began - ended < 9 * took) return; // (a period skipped: see above)
      tick();
      ended = performance.now();
      took = ended - began;
    };
    // The first tick, at start, is not timed: a cold one (its code not compiled yet, a loaded host)
    // took long enough to skip the first period, and a VM made since read `unknown` a period more.
    tick();
    this.ticker = setInterval(timed, this.state.clock.scaled(this.state.statInterval));
    this.ticker.unref();
  }

  async close(): Promise<void> {
    this.unregisterEndpoint();
    if (this.ticker) clearInterval(this.ticker);
    for (const t of this.state.tasks.values()) if (t.status === 'running') t.abort.abort(new Error('shutdown'));
    // Held applied-late requests are dropped, not run on a closing simulator.
    this.faults.shutdown();
    this.faults.clear();
    await Promise.all([...this.sshServers.values()].map((s) => s.close()));
    await new Promise<void>((resolve) => {
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    });
  }
}

export class Simulator {
  readonly clusters: SimCluster[];
  readonly clock: Clock;
  readonly credentials: Credentials;
  readonly profile: Profile;
  constructor(clusters: SimCluster[], clock: Clock, credentials: Credentials, profile: Profile) {
    this.clusters = clusters;
    this.clock = clock;
    this.credentials = credentials;
    this.profile = profile;
  }
  cluster(name: string): SimCluster {
    const c = this.clusters.find((x) => x.name === name);
    if (!c) throw new Error(`no simulated cluster '${name}'`);
    return c;
  }
  async close(): Promise<void> {
    await Promise.all(this.clusters.map((c) => c.close()));
  }
}

async function makeCertificate(): Promise<{ key: string; cert: string; fingerprint: string }> {
  const pems = await selfsigned.generate([{ name: 'commonName', value: 'provider-proxmox-sim' }], {
    keySize: 2048,
    days: 3650,
    algorithm: 'sha256',
    extensions: [
      { name: 'basicConstraints', cA: false },
      {
        name: 'subjectAltName',
        altNames: [
          { type: 2, value: 'localhost' },
          { type: 7, ip: '127.0.0.1' },
          { type: 7, ip: '::1' },
        ],
      },
    ],
  } as Parameters<typeof selfsigned.generate>[1]);
  return { key: pems.private, cert: pems.cert, fingerprint: new X509Certificate(pems.cert).fingerprint256 };
}

export async function startSimulator(opts: SimulatorOptions = {}): Promise<Simulator> {
  const topology = opts.topology ?? defaultTopology();
  const profile = opts.profile ?? '8.4';
  const clock = new Clock(opts.speed ?? 1);
  const seed = opts.seed ?? 1;
  const rootPassword = opts.rootPassword ?? 'proxmox-sim';
  const tokens = (opts.tokens ?? []).map(parseTokenArg);
  const cert = opts.http ? undefined : await makeCertificate();
  const sshOn = opts.ssh !== false;
  const client = sshOn ? generateKeyPair('provider-proxmox-sim') : undefined;
  const credentials: Credentials = {
    rootPassword,
    tokens: tokens.map((t) => ({ tokenid: `${t.userid}!${t.tokenid}`, secret: t.secret })),
    sshUser: 'root',
    sshPrivateKey: client?.privateKey ?? '',
    sshPublicKey: client?.publicKey ?? '',
  };
  const authorized = () => (credentials.sshPublicKey ? [credentials.sshPublicKey] : []);
  const clusters: SimCluster[] = [];
  try {
    for (const [i, t] of topology.clusters.entries()) {
      const state = new ClusterState(t, t.profile ?? profile, clock, seed + i * 7919);
      state.users.set('root@pam', { userid: 'root@pam', password: rootPassword, enable: true, groups: [] });
      const faults = new Faults(state);
      const tasks = new TaskRunner(state, faults);
      faults.startHolder = (node, type, id, until) =>
        void tasks.start(node, type, id, { authid: 'root@pam', userid: 'root@pam', kind: 'ticket' }, (t) =>
          t.wait(() => until),
        );
      const handler = new ApiHandler(state, tasks, faults, ROUTES, {
        authFailDelayMs: opts.authFailDelayMs ?? 3000 / clock.speed,
      });
      const server = cert
        ? createHttpsServer({ key: cert.key, cert: cert.cert, keepAlive: true }, handler.listener)
        : createHttpServer({ keepAlive: true }, handler.listener);
      server.keepAliveTimeout = 5000;
      const sc = new SimCluster(state, server, Boolean(cert), faults, tasks);
      handler.controls = sc;
      faults.onNodeCrash = (node) => {
        crashNode(state, tasks, node);
        sc.sshServers.get(node)?.sync();
      };
      faults.onNodeBoot = (node) => {
        sc.sshServers.get(node)?.sync();
        bootNode(state, tasks, node);
      };
      for (const tok of tokens) {
        sc.addToken(tok.userid, tok.tokenid, { secret: tok.secret, privsep: false });
        // A user that exists only for this token gets full rights, so the token is usable as printed.
        if (tok.userid !== 'root@pam' && !state.acls.some((a) => a.ugid === tok.userid))
          sc.setAcl('/', tok.userid, 'Administrator');
      }
      const [host, portStr] = splitListen(t.listen);
      const listenHost = opts.ephemeralPorts ? (opts.host ?? '127.0.0.1') : host;
      await new Promise<void>((resolve, reject) => {
        server.once('error', (e: NodeJS.ErrnoException) =>
          reject(
            new Error(
              `cluster '${t.name}': cannot listen on ${t.listen}: ${e.code === 'EADDRINUSE' ? 'address already in use' : e.message}`,
            ),
          ),
        );
        server.listen(opts.ephemeralPorts ? 0 : Number(portStr), listenHost, () => resolve());
      });
      const addr = server.address() as AddressInfo;
      const urlHost = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
      sc.url = `${cert ? 'https' : 'http'}://${urlHost}:${addr.port}`;
      sc.fingerprint = cert?.fingerprint ?? '';
      state.sslFingerprint = cert?.fingerprint ?? '';
      // Reachable by other clusters' remote migrations (remote-endpoints.ts) at this address.
      sc.unregisterEndpoint = registerEndpoint({
        state,
        tasks,
        faults,
        tls: Boolean(cert),
        fingerprint: sc.fingerprint,
        host: addr.address,
        port: addr.port,
      });
      sc.startStatTicker();
      clusters.push(sc);
      if (sshOn) {
        for (const n of t.nodes) {
          const srv = new NodeSshServer(state, faults, n.name, generateKeyPair(`root@${n.name}`), authorized);
          sc.sshServers.set(n.name, srv);
          await srv
            .listen(addr.address, opts.ephemeralPorts ? 0 : (n.sshPort ?? 0))
            .catch((e: NodeJS.ErrnoException) => {
              throw new Error(
                `cluster '${t.name}': node '${n.name}': cannot listen for SSH on port ${n.sshPort ?? 0}: ${e.code === 'EADDRINUSE' ? 'address already in use' : e.message}`,
              );
            });
        }
        faults.onSshRefused = (node) => sc.sshServers.get(node)?.sync();
      }
    }
  } catch (e) {
    await Promise.all(clusters.map((c) => c.close()));
    throw e;
  }
  return new Simulator(clusters, clock, credentials, profile);
}

function splitListen(listen: string): [string, string] {
  const i = listen.lastIndexOf(':');
  return [listen.slice(0, i).replace(/^\[|\]$/g, ''), listen.slice(i + 1)];
}
