/**
 * The real engine (Controller + ManagedReconciler + MemoryStore + VmConnector) against the
 * in-process Proxmox VE simulator, with small backoffs so tests are fast. Tests wait on
 * conditions by polling the store; they never assert wall-clock durations.
 */
import { parseAllDocuments, parse as parseYaml, stringify } from 'yaml';
import { type LoadedProviderConfig, parseProviderConfig } from '../../src/api/provider-config-load.ts';
import type { ForProvider, ProxmoxVM } from '../../src/api/proxmoxvm.ts';
import { Controller } from '../../src/engine/controller.ts';
import { ManagedReconciler, type ReconcileResult } from '../../src/engine/reconciler.ts';
import { type Condition, getCondition, keyOf, type ManagementAction } from '../../src/engine/resource.ts';
import type { EngineHooks } from '../../src/engine/types.ts';
import { FileConfigSource } from '../../src/local/config-source.ts';
import { MemoryStore } from '../../src/local/memory-store.ts';
import type { SimCluster, Simulator, SimulatorOptions } from '../../src/sim/index.ts';
import { providerConfigYaml } from '../../src/sim/provider-config.ts';
import type { VmState } from '../../src/sim/state.ts';
import { parseTopology, type Topology } from '../../src/sim/topology.ts';
import { VmConnector, vmidHoldersOf } from '../../src/vm/connector.ts';
import { MARKER_PREFIX } from '../../src/vm/spec.ts';
import { VmidHolderIndex } from '../../src/vm/vmid-holders.ts';
import { ROOT_PASSWORD, raw, startTestSim, waitTask } from '../helpers/sim.ts';

/** Generous: only a failing (or badly overloaded) run waits this long. */
const DEFAULT_TIMEOUT_MS = 30_000;

export const IMPORT_IMAGE = 'local:import/ubuntu-22.04-cloud.qcow2';
export const SEED_IMAGE = 'local:iso/ubuntu-22.04-cloud.img';
export const TEMPLATE = 'ubuntu-2204-cloudinit';
export const NODE1 = 'ml110-01';
export const SITE1 = 'site-1';

/**
 * One site of two nodes, pve-a and pve-b, each with `local` (the import image, snippets),
 * `local-lvm` (local disks) and the shared RBD pool `ceph`; `more(node)` adds YAML under the node's
 * storages (more storages, then `vms:` if it likes).
 */
export function twoNodeTopology(file: string, more: (node: string) => string = () => ''): Topology {
  const node = (n: string, i: number) => `      - name: ${n}
        cpus: 16
        memory: 64G
        bridges:
          - { name: vmbr0, cidr: 192.0.2.1${i}/24, dhcp: 192.0.2.1${i}0-192.0.2.1${i}9 }
        storages:
          - id: local
            type: dir
            path: /var/lib/vz
            content: [iso, snippets, import]
            total: 100G
            volumes:
              - { name: import/ubuntu-22.04-cloud.qcow2, size: 2252M, guestAgent: true }
          - { id: local-lvm, type: lvmthin, content: [images, rootdir], total: 500G }
          - { id: ceph, type: rbd, content: [images, rootdir], total: 4T, shared: true }
${more(n)}`;
  return parseTopology(
    `clusters:\n  - name: site-1\n    listen: 127.0.0.1:0\n    nodes:\n${['pve-a', 'pve-b'].map(node).join('\n')}\n`,
    file,
  );
}

export function startSim(opts: SimulatorOptions = {}): Promise<Simulator> {
  return startTestSim(opts);
}

/** The ProviderConfig for the simulator, with the token (default) or root@pam password credentials. */
export function simConfig(sim: Simulator, auth: 'token' | 'password' = 'token'): LoadedProviderConfig {
  return parseProviderConfig(stringifyConfig(sim, auth), 'test.yaml');
}

/** The simulator's ProviderConfig + Secret as YAML, with token or root@pam password credentials. */
function stringifyConfig(sim: Simulator, auth: 'token' | 'password' = 'token'): string {
  let text = providerConfigYaml(sim);
  if (auth === 'password') {
    const docs = parseAllDocuments(text).map((d) => d.toJS() as Record<string, unknown>);
    const secret = docs.find((d) => d.kind === 'Secret')!;
    secret.stringData = { username: 'root@pam', password: ROOT_PASSWORD };
    text = docs.map((d) => stringify(d)).join('---\n');
  }
  return text;
}

export interface EngineOptions {
  /** The reconciler's creation grace (default 2 s; 0: every VM is older than it, as in production after the first half minute). */
  creationGraceMs?: number;
  auth?: 'token' | 'password';
  store?: MemoryStore<ProxmoxVM>;
  hooks?: EngineHooks;
  workers?: number;
  pollIntervalMs?: number;
  driftIntervalMs?: number;
  /** Resolves cloud-init Secret references. */
  secret?: (ref: { name: string; key: string; namespace?: string }) => Promise<string>;
  /** How long a create of unknown outcome is waited for before it is sent again (default 300 ms here). */
  unknownOutcomeWaitMs?: number;
  /** The bulk-list cache TTL (default 5 ms here; production: up to 10 s). */
  siteTtlMs?: number;
  /** The installation of this process (default: the CLI's, `cli-<config name>`). */
  installation?: string;
  /** Rewrites the simulator's ProviderConfig YAML (a wrong token, another fingerprint...). */
  configYaml?: (yaml: string) => string;
  /** Wake resources when their task ends or a slot is taken for them (default true). */
  wake?: boolean;
  /** How soon an in-flight task is looked at again without a wake (default 10 ms here). */
  taskPollMs?: number;
  /**
   * Where `vmidHolders` comes from: a scan of the store per question (vmidHoldersOf, the default),
   * or the index the runtimes keep on every store write (src/vm/vmid-holders.ts), which the marker
   * search follows by what changed (list-index.ts unheldTagged).
   */
  holders?: 'scan' | 'index';
}

export interface Attempt {
  key: string;
  kind: ReconcileResult['kind'];
  reason?: string;
  delay?: number;
}

/** One provider process: store, connector, reconciler and controller over a simulator. */
export class Engine {
  readonly sim: Simulator;
  readonly config: LoadedProviderConfig;
  readonly store: MemoryStore<ProxmoxVM>;
  readonly connector: VmConnector;
  readonly reconciler: ManagedReconciler<ProxmoxVM>;
  readonly controller: Controller<ProxmoxVM>;
  /** Every reconcile result, in order, with the backoff delay chosen for rate-limited ones. */
  readonly attempts: Attempt[] = [];
  private started = false;

  constructor(sim: Simulator, opts: EngineOptions = {}) {
    this.sim = sim;
    this.config = opts.configYaml
      ? parseProviderConfig(opts.configYaml(stringifyConfig(sim, opts.auth)), 'test.yaml')
      : simConfig(sim, opts.auth);
    this.store = opts.store ?? new MemoryStore<ProxmoxVM>();
    const sites = this.config.config.spec.sites;
    const index = opts.holders === 'index' ? new VmidHolderIndex(sites.map((s) => s.name)) : undefined;
    if (index) this.store.addIndex((k, r) => index.set(k, r));
    this.connector = new VmConnector(new FileConfigSource(this.config), {
      taskPollMs: opts.taskPollMs ?? 10,
      agentPollMs: 20,
      driftIntervalMs: opts.driftIntervalMs ?? 60_000,
      siteTtlMs: opts.siteTtlMs ?? 5,
      unknownOutcomeWaitMs: opts.unknownOutcomeWaitMs ?? 300,
      vmidHolders: (site) => {
        if (index) return index.holdersOf(site);
        return vmidHoldersOf(this.store.listSync(), site, sites.length === 1 ? sites[0]!.name : undefined);
      },
      ...(opts.installation ? { installation: () => opts.installation! } : {}),
      ...(opts.secret ? { secret: opts.secret } : {}),
      ...(opts.hooks ? { hooks: opts.hooks } : {}),
      // Tasks and slots wake their resources, as in the runtimes (wake: false: polling alone).
      ...(opts.wake === false ? {} : { wake: (key: string) => this.controller?.wake(key) }),
    });
    this.reconciler = new ManagedReconciler<ProxmoxVM>(this.store, this.connector, {
      pollIntervalMs: opts.pollIntervalMs ?? 60_000,
      shortWaitMs: 10,
      creationGraceMs: opts.creationGraceMs ?? 2000,
      createFailureScheduleMs: [40, 80, 160, 320, 640],
      ...(opts.hooks ? { hooks: opts.hooks } : {}),
    });
    this.controller = new Controller(this.store, this.reconciler, {
      workers: opts.workers ?? 4,
      backoff: { baseMs: 20, capMs: 640, factor: 2, jitter: 0.1 },
      // Called after the requeue: a rate-limited result's delay is already recorded.
      onResult: (key, result) => {
        const reason = getCondition(this.store.getSync(key) ?? ({} as ProxmoxVM), 'Synced')?.reason;
        const delay = this.pendingDelay.get(key);
        this.pendingDelay.delete(key);
        this.attempts.push({
          key,
          kind: result.kind,
          ...(reason ? { reason } : {}),
          ...(result.kind === 'rateLimited' && delay !== undefined ? { delay } : {}),
        });
      },
    });
    // Record the backoff delay of every rate-limited requeue.
    const q = this.controller.queue;
    const orig = q.addRateLimited.bind(q);
    q.addRateLimited = (key: string, schedule?: number[], permanent?: boolean) => {
      const d = orig(key, schedule, permanent);
      this.pendingDelay.set(key, d);
      return d;
    };
  }
  private readonly pendingDelay = new Map<string, number>();

  async start(): Promise<this> {
    if (!this.started) await this.controller.start();
    this.started = true;
    return this;
  }

  /** Stop reconciling (waits for in-flight reconciles) and close the clients. */
  async stop(): Promise<void> {
    if (this.started) await this.controller.stop();
    this.started = false;
    await this.connector.close();
  }

  apply(vm: ProxmoxVM): string {
    const copy = structuredClone(vm);
    copy.metadata.namespace ??= 'default';
    const cur = this.store.getSync(keyOf(copy));
    copy.metadata.uid = cur?.metadata.uid ?? '';
    this.store.apply(copy);
    return keyOf(copy);
  }

  get(key: string): ProxmoxVM {
    const o = this.store.getSync(key);
    if (!o) throw new Error(`${key} is not in the store`);
    return o;
  }

  delete(key: string): void {
    this.store.markDeleted(key);
  }

  attemptsOf(key: string): Attempt[] {
    return this.attempts.filter((a) => a.key === key);
  }

  /** Poll the store until `pred` holds. */
  async waitFor(
    key: string,
    pred: (r: ProxmoxVM) => boolean,
    what: string,
    timeoutMs = DEFAULT_TIMEOUT_MS,
  ): Promise<ProxmoxVM> {
    return waitUntil(
      () => {
        const r = this.store.getSync(key);
        return r && pred(r) ? r : undefined;
      },
      what,
      timeoutMs,
      () => JSON.stringify(this.store.getSync(key)?.status ?? null),
    );
  }

  waitReady(key: string, timeoutMs?: number): Promise<ProxmoxVM> {
    return this.waitFor(
      key,
      (r) =>
        getCondition(r, 'Ready')?.status === 'True' &&
        getCondition(r, 'Synced')?.status === 'True' &&
        r.status?.atProvider?.step === 'Ready',
      `${key} Ready`,
      timeoutMs,
    );
  }

  waitSynced(key: string, reason: string, timeoutMs?: number): Promise<ProxmoxVM> {
    return this.waitFor(
      key,
      (r) => getCondition(r, 'Synced')?.reason === reason,
      `${key} Synced reason ${reason}`,
      timeoutMs,
    );
  }

  async waitGone(key: string, timeoutMs = DEFAULT_TIMEOUT_MS): Promise<void> {
    await waitUntil(
      () => (this.store.getSync(key) ? undefined : true),
      `${key} gone`,
      timeoutMs,
      () => JSON.stringify(this.store.getSync(key)?.status ?? null),
    );
  }

  /** Wait until the resource has failed (rate-limited) at least `n` times in a row. */
  async waitFailures(key: string, n: number, timeoutMs = DEFAULT_TIMEOUT_MS): Promise<Attempt[]> {
    return waitUntil(
      () => {
        const list = this.attemptsOf(key);
        const tail: Attempt[] = [];
        for (let i = list.length - 1; i >= 0 && list[i]!.kind === 'rateLimited'; i--) tail.unshift(list[i]!);
        return tail.length >= n ? tail : undefined;
      },
      `${key}: ${n} failed reconciles in a row`,
      timeoutMs,
      () => JSON.stringify(this.attemptsOf(key).slice(-5)),
    );
  }
  /** Wait until the resource has failed (rate-limited) at least `n` times, consecutive or not; returns them. */
  async waitRateLimited(key: string, n: number, timeoutMs = DEFAULT_TIMEOUT_MS): Promise<Attempt[]> {
    return waitUntil(
      () => {
        const list = this.attemptsOf(key).filter((a) => a.kind === 'rateLimited');
        return list.length >= n ? list : undefined;
      },
      `${key}: ${n} failed reconciles`,
      timeoutMs,
      () => JSON.stringify(this.attemptsOf(key).slice(-5)),
    );
  }
}

/** Poll `probe` (sync or async) until it returns something other than undefined / false. */
export async function waitUntil<T>(
  probe: () => T | undefined | Promise<T | undefined>,
  what: string,
  timeoutMs = DEFAULT_TIMEOUT_MS,
  describe?: () => string,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${describe ? `: ${describe()}` : ''}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

export interface VmOptions {
  annotations?: Record<string, string>;
  managementPolicies?: ManagementAction[];
  deletionPolicy?: 'Delete' | 'Orphan';
  namespace?: string;
}

/** A ProxmoxVM on site-1 / ml110-01 importing the `import` content image (overridable). */
export function vm(name: string, fp: Partial<ForProvider> = {}, o: VmOptions = {}): ProxmoxVM {
  return {
    apiVersion: 'proxmox.sankofa.io/v1alpha1',
    kind: 'ProxmoxVM',
    metadata: {
      name,
      namespace: o.namespace ?? 'default',
      uid: '',
      generation: 1,
      ...(o.annotations ? { annotations: o.annotations } : {}),
    },
    spec: {
      forProvider: {
        site: SITE1,
        node: NODE1,
        cpu: 1,
        memory: '1Gi',
        disk: '8Gi',
        storage: 'local-lvm',
        network: 'vmbr0',
        image: IMPORT_IMAGE,
        ...fp,
      },
      providerConfigRef: { name: 'default' },
      ...(o.managementPolicies ? { managementPolicies: o.managementPolicies } : {}),
      ...(o.deletionPolicy ? { deletionPolicy: o.deletionPolicy } : {}),
    },
  };
}

export function cond(r: ProxmoxVM, type: string): Condition | undefined {
  return getCondition(r, type);
}

/** The VMs in a simulated cluster that are not templates. */
export function guests(c: SimCluster): VmState[] {
  return [...c.state.vms.values()].filter((v) => v.config.template !== '1');
}

/** The VMs whose description carries this resource's ownership marker. */
export function ownedBy(c: SimCluster, uid: string): VmState[] {
  return guests(c).filter((v) =>
    (v.config.description ?? '').split('\n').some((l) => l.startsWith(MARKER_PREFIX) && l.includes(`uid=${uid}`)),
  );
}

/** Requests that change something (POST/PUT/DELETE), except logging in. */
export function mutations(c: SimCluster): Record<string, number> {
  return Object.fromEntries(
    Object.entries(c.counters()).filter(([k]) => /^(POST|PUT|DELETE) /.test(k) && k !== 'POST /access/ticket'),
  );
}

export function count(c: SimCluster, key: string): number {
  return c.counters()[key] ?? 0;
}

/** Create a VM behind the provider's back (a "foreign" VM), through the API with the test token. */
export async function foreignVm(
  c: SimCluster,
  vmid: number,
  config: Record<string, string> = {},
  node = c.nodes[0]!,
): Promise<void> {
  const res = await raw(c.url, 'POST', `/nodes/${node}/qemu`, {
    form: {
      vmid: String(vmid),
      name: `foreign-${vmid}`,
      cores: '1',
      memory: '512',
      net0: 'virtio,bridge=vmbr0',
      scsi0: 'local-lvm:1',
      ...config,
    },
  });
  if (res.status !== 200) throw new Error(`foreign create failed: ${res.status} ${res.text}`);
  const upid = (res.json as { data: string }).data;
  const st = await waitTask(c.url, node, upid);
  if (st.exitstatus !== 'OK') throw new Error(`foreign create task: ${st.exitstatus}`);
}

/** PUT config directly in the simulator (drift made by a human). */
export async function putConfig(c: SimCluster, node: string, vmid: number, set: Record<string, string>): Promise<void> {
  const res = await raw(c.url, 'PUT', `/nodes/${node}/qemu/${vmid}/config`, { form: set });
  if (res.status !== 200) throw new Error(`PUT config failed: ${res.status} ${res.text}`);
}

export async function getConfig(c: SimCluster, node: string, vmid: number): Promise<Record<string, unknown>> {
  const res = await raw(c.url, 'GET', `/nodes/${node}/qemu/${vmid}/config`);
  if (res.status !== 200) throw new Error(`GET config failed: ${res.status} ${res.text}`);
  return (res.json as { data: Record<string, unknown> }).data;
}

/** Size of a disk as qemu-server prints it (`size=20G`) from a config value. */
export function diskSize(value: string | undefined): string | undefined {
  return value ? /(?:^|,)size=([^,]+)/.exec(value)?.[1] : undefined;
}

/** The delays of consecutive rate-limited attempts grow (exponential backoff), up to the cap. */
export function assertBackoffGrows(attempts: Attempt[], capMs: number): void {
  const delays = attempts.map((a) => a.delay).filter((d): d is number => d !== undefined);
  if (delays.length < 3) throw new Error(`too few backoff delays recorded: ${JSON.stringify(attempts)}`);
  for (let i = 1; i < delays.length; i++) {
    const prev = delays[i - 1]!;
    const cur = delays[i]!;
    // jitter is +-10%: a doubling stays above 1.6x; at the cap it stays near the cap
    if (!(cur >= prev * 1.6 || cur >= capMs * 0.85))
      throw new Error(`backoff did not grow: ${delays.join(', ')} (cap ${capMs})`);
  }
}

export { parseYaml };
