/**
 * The world one fault-search run acts on: an in-process Proxmox VE simulator with the default
 * topology's two separate clusters (site-1, one node ml110-01; site-2, one node r630-01), one
 * MemoryStore (it survives every crash, as the state file or etcd does), and one or two provider
 * processes (process.ts) that can be killed and rebuilt over that store. Reconciles are driven one
 * at a time by the commands, never by a free-running controller, so a schedule replays the same
 * way. A resource's site is part of what a user edits, so an apply can move its VM to the other
 * cluster (a remote migration) and back. The world also remembers what the invariants need (which
 * VMs other users made, and how they looked; which resources were ever deleted; which VMs held a
 * resource's data) and keeps a journal. What users apply, and the ProviderConfig, are in manifests.ts.
 */

import { cliInstallation } from '../../src/api/provider-config.ts';
import type { LoadedProviderConfig } from '../../src/api/provider-config-load.ts';
import type { ProxmoxVM } from '../../src/api/proxmoxvm.ts';
import type { ReconcileResult } from '../../src/engine/reconciler.ts';
import { externalName, getCondition, keyOf } from '../../src/engine/resource.ts';
import { MemoryStore } from '../../src/local/memory-store.ts';
import { planTarget } from '../../src/local/setup.ts';
import type { FaultSpec } from '../../src/sim/fault-spec.ts';
import type { SimCluster, Simulator } from '../../src/sim/index.ts';
import { quorate } from '../../src/sim/quorum.ts';
import { heldVmids } from '../../src/vm/connector.ts';
import { startTestSim } from '../helpers/sim.ts';
import { observeForeign } from './foreign.ts';
import {
  type Edit,
  keyOfName,
  manifest,
  type Name,
  nodeTopology,
  SITE,
  SITES,
  type SiteName,
  simConfig,
} from './manifests.ts';
import { EngineClock, type Interrupt, Process } from './process.ts';

export {
  type Edit,
  keyOfName,
  manifest,
  NAMES,
  type Name,
  NODE,
  NODE_OF,
  SITE,
  SITE2_NODES,
  SITES,
  type Site2Node,
  type SiteName,
  TEMPLATE_VMID,
} from './manifests.ts';
export type { Interrupt } from './process.ts';

/** The other user of the cluster: a person or tool with its own API token, not the provider. */
export const FOREIGN_USER = 'ops@pve';
const FOREIGN_TOKEN_ID = 'tool';
const FOREIGN_SECRET = '0a0a0a0a-0000-4000-8000-00000000f00d';
export const FOREIGN_AUTH = `PVEAPIToken=${FOREIGN_USER}!${FOREIGN_TOKEN_ID}=${FOREIGN_SECRET}`;

/** A fault this long (simulated ms) lasts until healed: a run's clock never gets there. */
export const YEAR_MS = 365 * 24 * 3600_000;
/** An `applied-late` delay at least this long holds the request until healed. */
const HELD_MS = 3600_000;
/** Real ms a reconcile may still take after some request was held, before it counts as the held one. */
const HELD_GRACE_MS = 300;

/** A VM some other user made: its config digest and power state once its create ended. */
interface ForeignVm {
  site: SiteName;
  vmid: number;
  upid?: string;
  baseline?: { digest: string; status: string; config: Record<string, string> };
  /** Its create failed and PVE removed it: nothing to guard. */
  vanished?: boolean;
}

/** A fault added to one cluster: which one, and its id there. */
export interface FaultRef {
  site: SiteName;
  id: number;
}

/**
 * How late PVE may apply a request it received (run-clock ms). A held `applied-late` request is
 * released once it is this old; must stay below the engine's `unknownOutcomeWaitMs` (30 s).
 */
export const LATE_APPLY_BOUND_MS = 20_000;

export class World {
  readonly sim: Simulator;
  readonly auth: 'password' | 'token';
  readonly config: LoadedProviderConfig;
  /** The state (a state file, etcd); replaced by an empty one when it is lost (loseState). */
  store = new MemoryStore<ProxmoxVM>();
  /** The uids of the resources of every state lost so far, and the VMIDs they held (`site/vmid`). */
  readonly lostUids = new Set<string>();
  readonly lostVmids = new Set<string>();
  /** The last manifest each resource was applied with (what the user re-applies after losing the state). */
  readonly lastEdit = new Map<Name, Edit>();
  readonly clock = new EngineClock();
  /** Processes 0 and (for two writers) 1. */
  readonly procs: Array<Process | undefined> = [undefined, undefined, undefined];
  /**
   * A second state file for the same manifests (another operator's `--state`, another CI job),
   * reconciled by process 2 alone; created by the first OtherState command.
   */
  otherStore: MemoryStore<ProxmoxVM> | undefined;
  private generation = 0;
  /** The other user's VMs (and the templates), by `site/vmid`. */
  readonly foreign = new Map<string, ForeignVm>();
  /** The resources a user ever deleted in this run (their VMs may go with them). */
  readonly deleted = new Set<Name>();
  /**
   * Identity (namespace/name) -> the VMs (`site/vmid`) that held its data at the last check:
   * a resource not deleted must never drop to none (a move hands the data over, never loses it).
   */
  readonly dataVms = new Map<string, Set<string>>();
  /**
   * The other user's destroys of our VMs (the `destroy` act) that checkData has taken as where a
   * VM's data went (by UPID: each excuses one VM once). A destroy held by a fault is applied later,
   * when healed, with no answer to the act: it is found in PVE's task list, not in the answer.
   */
  readonly destroysSeen = new Set<string>();
  /**
   * Report the outcomes of F19, F21 and F24 as failures (the default since they were fixed);
   * FAULT_SEARCH_STRICT=0 accepts them again, journalled, to search a checkout without the fixes.
   */
  strict = process.env.FAULT_SEARCH_STRICT !== '0';
  /** Resource uid -> every site its status named at a check (F21: a create on a site never recorded). */
  readonly statusSites = new Map<string, Set<SiteName>>();
  readonly journal: string[] = [];
  /** Faults added by the schedule, in order, on either cluster. */
  readonly faultIds: FaultRef[] = [];
  /** Faults that end by themselves: fault -> commands left. */
  readonly expiring = new Map<FaultRef, number>();
  /** Held `applied-late` requests: fault -> when (run clock) the hold began. */
  readonly heldSince = new Map<FaultRef, number>();
  readonly seenTasks = new Set<string>();
  /** What dead processes left running (a reconcile waiting for a held request). */
  private readonly dangling: Promise<unknown>[] = [];

  private constructor(sim: Simulator, auth: 'password' | 'token') {
    this.sim = sim;
    this.auth = auth;
    this.config = simConfig(sim, auth);
    for (const site of SITES) {
      const c = this.cluster(site);
      c.addToken(FOREIGN_USER, FOREIGN_TOKEN_ID, { privsep: false, secret: FOREIGN_SECRET });
      c.setAcl('/', FOREIGN_USER, 'Administrator');
      // The templates are someone else's VMs too: cloning from them must not change them.
      for (const vm of c.state.vms.values()) this.foreign.set(`${site}/${vm.vmid}`, { site, vmid: vm.vmid });
    }
    observeForeign(this);
  }

  /** `nodes`: site-2 has two nodes (manifests.ts nodeTopology), for the fourth search's moves between them. */
  static async start(auth: 'password' | 'token', opts: { nodes?: boolean } = {}): Promise<World> {
    const w = new World(await startTestSim(opts.nodes ? { topology: nodeTopology() } : {}), auth);
    w.clock.install();
    return w;
  }

  /** The installation the processes write into markers (the CLI's default for the config). */
  get installation(): string {
    return cliInstallation(this.config.config);
  }

  get site(): SimCluster {
    return this.sim.cluster(SITE);
  }

  cluster(site: SiteName): SimCluster {
    return this.sim.cluster(site);
  }

  /** Add a fault to a cluster, remembered for Heal and for the ones that end by themselves. */
  addFault(site: SiteName, spec: FaultSpec): FaultRef {
    const ref = { site, id: this.cluster(site).addFault(spec) };
    this.faultIds.push(ref);
    return ref;
  }

  /** End a fault (healed, or over): false when it was gone already. */
  removeFault(ref: FaultRef): boolean {
    const i = this.faultIds.indexOf(ref);
    if (i >= 0) this.faultIds.splice(i, 1);
    this.heldSince.delete(ref);
    this.expiring.delete(ref);
    return this.cluster(ref.site).removeFault(ref.id);
  }

  /** Where the resource's VM is, as its status says (the site it was last seen on), else its spec's site. */
  siteOf(r: ProxmoxVM): SiteName {
    return (r.status?.atProvider?.site ?? r.spec.forProvider.site ?? SITE) as SiteName;
  }

  /** Journal a line; a run of identical lines (a resource failing the same way) is kept once, with a count. */
  log(line: string): void {
    const last = this.journal.length - 1;
    const m = /^(.*) \(x(\d+)\)$/.exec(this.journal[last] ?? '');
    if (m && m[1] === line) this.journal[last] = `${line} (x${Number(m[2]) + 1})`;
    else if (this.journal[last] === line) this.journal[last] = `${line} (x2)`;
    else this.journal.push(line);
  }

  /**
   * PVE applies a request within a bounded time of receiving it; the engine's promise (no second
   * VM, no orphan) is made for late applications within that bound (LATE_APPLY_BOUND_MS, below the
   * engine's 30 s unknown-outcome wait). A hold older than that is applied now. Run before every
   * reconcile, not only between commands: a converge goes on for minutes of the clock, and a hold
   * applied at its end came a minute late, after the engine had rightly stopped waiting (what F47
   * was: a second VM on the other site, from a create PVE applied 60 s after it was sent).
   */
  private applyOverdueHolds(): void {
    for (const [ref, since] of this.heldSince) {
      if (Date.now() - since < LATE_APPLY_BOUND_MS) continue;
      if (this.removeFault(ref)) this.log(`  held request of fault ${ref.site}#${ref.id} applied (the PVE bound)`);
    }
  }

  /** After each command: faults of bounded length that are due end now. */
  commandDone(): void {
    this.applyOverdueHolds();
    for (const [ref, left] of this.expiring) {
      if (left > 1) {
        this.expiring.set(ref, left - 1);
        continue;
      }
      if (this.removeFault(ref)) this.log(`  fault ${ref.site}#${ref.id} is over`);
    }
  }

  /** The store process `i` works on: 0 and 1 the state, 2 the other state file. */
  storeOf(i: 0 | 1 | 2): MemoryStore<ProxmoxVM> {
    if (i < 2) return this.store;
    this.otherStore ??= new MemoryStore<ProxmoxVM>();
    return this.otherStore;
  }

  /** Process `i`, started on first use (and again after a crash). */
  proc(i: 0 | 1 | 2): Process {
    let p = this.procs[i];
    if (!p || p.dead) {
      // Every other start reads its own VM after a mutation at any list size (a large site's way,
      // cluster-list.ts ownView), the others wait for a list as a small site does: both, and the two
      // side by side, are searched.
      const generation = ++this.generation;
      p = new Process(
        `${i === 2 ? 'q' : `p${i}`}.${generation}`,
        this.storeOf(i),
        this.config,
        generation % 2 === 0 ? 0 : undefined,
      );
      this.procs[i] = p;
    }
    return p;
  }

  /** Throw process `i` away (all its memory), as a crash or `kill -9` would. */
  async restart(i: 0 | 1 | 2): Promise<void> {
    const p = this.procs[i];
    this.procs[i] = undefined;
    if (p) await p.kill();
  }

  /** Reconciles so far per state file and resource (`main:vm-a`, `other:vm-a`). */
  readonly reconciles = new Map<string, number>();

  /**
   * One reconcile of `name` by process `i`; the process is replaced if it crashed in it. A
   * request held by an `applied-late` fault would keep the reconcile waiting for the client's
   * request timeout (a minute, real time): the process gives up instead, as if it died while
   * waiting, and its request is applied later (when healed), with nobody left to hear the answer.
   */
  async reconcile(
    name: Name,
    i: 0 | 1 | 2 = 0,
    interrupt?: Interrupt,
    quiet = false,
  ): Promise<ReconcileResult | undefined> {
    const p = this.proc(i);
    const key = keyOfName(name);
    const counted = `${i === 2 ? 'other' : 'main'}:${name}`;
    this.reconciles.set(counted, (this.reconciles.get(counted) ?? 0) + 1);
    // Time passes as the work queue would let it before this reconcile (at least a second).
    this.clock.tick(Math.max(1000, p.delayFor(key)));
    this.applyOverdueHolds();
    p.interrupt = interrupt && { ...interrupt, seen: 0, fired: false };
    const held = this.heldCount();
    const run = p.rec.reconcile(key);
    const stop = new AbortController();
    let res: ReconcileResult | undefined;
    try {
      res = await Promise.race([run, this.untilHeld(held, stop.signal)]);
      // The fault cannot say whose request it holds (the other writer's, the other user's): the
      // reconcile that is still waiting a moment later is the one held.
      if (!res)
        res = await Promise.race([run, new Promise<undefined>((r) => setTimeout(() => r(undefined), HELD_GRACE_MS))]);
    } finally {
      stop.abort();
      p.interrupt = undefined;
    }
    if (!res) {
      this.log(`  ${p.name} ${name}: its request is held (applied-late); the process dies waiting`);
      p.store.dead = true;
      this.procs[i] = undefined;
      // Not awaited: closing waits for the held request. Both end when the simulator closes.
      this.dangling.push(
        run.catch(() => undefined),
        p.kill().catch(() => undefined),
      );
      return undefined;
    }
    p.record(key, res);
    const r = this.storeOf(i).getSync(key);
    const synced = r && getCondition(r, 'Synced');
    const why = res.kind === 'rateLimited' && res.error ? `: ${res.error.message.slice(0, 160)}` : '';
    if (!quiet) {
      this.log(
        `  ${p.name} ${name}: ${res.kind}${why} [ext=${r ? (externalName(r) ?? '-') : 'gone'} step=${r?.status?.atProvider?.step ?? '-'} synced=${synced?.reason ?? '-'}]`,
      );
    }
    if (p.dead) await this.restart(i);
    return res;
  }

  /** Requests held so far by `applied-late` faults that hold until healed. */
  heldCount(): number {
    let n = 0;
    for (const c of this.sim.clusters)
      for (const f of c.faults.active.values()) {
        const s = f.spec as { kind: string; delayMs?: number };
        if (s.kind === 'applied-late' && (s.delayMs ?? 0) >= HELD_MS) n += f.fired;
      }
    return n;
  }

  /** Resolves (undefined) once another request is held; never, if `signal` aborts first. */
  async untilHeld(before: number, signal: AbortSignal): Promise<undefined> {
    while (!signal.aborted) {
      if (this.heldCount() > before) return undefined;
      await new Promise((r) => setTimeout(r, 2));
    }
    return new Promise<undefined>(() => {});
  }

  apply(name: Name, edit: Edit): void {
    this.lastEdit.set(name, edit);
    const m = manifest(name, edit);
    const cur = this.store.getSync(keyOf(m));
    m.metadata.uid = cur?.metadata.uid ?? '';
    this.store.apply(m);
    // The other state file is applied from the same manifests: an edit reaches it too. (Two
    // state files with different specs for one resource would correct each other's drift for
    // ever: the user's conflict, which no runtime can settle.)
    const other = this.otherStore?.getSync(keyOf(m));
    if (other)
      this.otherStore!.apply({ ...manifest(name, edit), metadata: { ...m.metadata, uid: other.metadata.uid } });
  }

  /**
   * Process `i` prepares `name` ahead of its create, as a phased apply prepares a phase while the
   * one before it boots (LocalRuntime.prepare: the snippet of the manifest with `edit`, on its
   * node), whether or not the resource is in the store yet.
   */
  async prepare(name: Name, edit: Edit, i: 0 | 1 | 2): Promise<void> {
    const target = planTarget(undefined, manifest(name, edit));
    const external = await this.proc(i).connector.connect(target);
    await external.prepareFor(target);
  }

  /** The other state file gets the manifest of `name` (as the user last applied it), if it has none. */
  applyOther(name: Name): void {
    // A manifest the user deleted is not applied with the other state file either.
    const main = this.store.getSync(keyOfName(name));
    if (!main || main.metadata.deletionTimestamp) return;
    const store = this.storeOf(2);
    const m = manifest(name, this.lastEdit.get(name) ?? { cpu: 1, memory: '1Gi' });
    if (!store.getSync(keyOf(m))) store.apply(m);
  }

  /**
   * The state is lost (the state file deleted, another `--state`, another directory): both
   * processes die, the store is empty, and the user applies the same manifests again (new uids).
   * Resources being deleted are not re-applied: their manifests are gone too. Returns the names
   * re-applied.
   */
  async loseState(): Promise<Name[]> {
    await this.restart(0);
    await this.restart(1);
    const keep = this.store
      .listSync()
      .filter((r) => !r.metadata.deletionTimestamp)
      .map((r) => r.metadata.name as Name);
    for (const r of this.store.listSync()) {
      this.lostUids.add(r.metadata.uid);
      for (const h of heldVmids(r, undefined)) this.lostVmids.add(`${h.site}/${h.vmid}`);
    }
    this.store = new MemoryStore<ProxmoxVM>();
    for (const n of keep) this.apply(n, this.lastEdit.get(n)!);
    return keep;
  }

  /**
   * Let the simulator's workers run until every task has ended, except those held by a stall
   * or lock fault (bounded: a task that never ends only costs this wait, never decides the outcome).
   */
  async quiesce(maxMs = 2000): Promise<void> {
    const deadline = Date.now() + maxMs;
    for (;;) {
      const busy = this.sim.clusters.some((c) =>
        [...c.state.tasks.values()].some((t) => t.status === 'running' && !this.heldByStall(c, t)),
      );
      if (!busy || Date.now() > deadline) break;
      await new Promise((r) => setTimeout(r, 2));
    }
    observeForeign(this);
  }

  /**
   * A task held by a stall fault or a lock fault, or one that waits on such a task: a remote
   * migration's `qmtunnel` on the target lives as long as the source's `qmigrate`; a booted
   * node's `startall` waits for quorum as long as it is lost (pve-manager PVE/API2/Nodes.pm:2195).
   * Waited for, each reconcile of a schedule whose site stays without quorum cost quiesce's two
   * seconds (F91: thirty of them, past the search's minute).
   */
  private heldByStall(c: SimCluster, t: { type: string; id: string }): boolean {
    if (t.type === 'startall' && !quorate(c.state)) return true;
    if (t.type === 'qmtunnel')
      return this.sim.clusters.some((o) =>
        [...o.state.tasks.values()].some(
          (s) => s.type === 'qmigrate' && s.status === 'running' && this.heldByStall(o, s),
        ),
      );
    for (const f of c.faults.active.values()) {
      const s = f.spec;
      // The worker a lock fault stands for (a foreign backup) runs until the fault goes.
      if (s.kind === 'lock' && s.lock && (String(s.vmid) === t.id || (s.lock === 'backup' && t.type === 'vzdump')))
        return true;
      if (s.kind !== 'task' || s.action !== 'stall' || f.fired === 0) continue;
      if ((s.type === undefined || s.type === t.type) && (s.id === undefined || s.id === t.id)) return true;
    }
    return false;
  }

  async close(): Promise<void> {
    for (const i of [0, 1, 2] as const) await this.restart(i);
    await this.sim.close();
    // The simulator dropped the held requests: what waited for them ends now (bounded anyway).
    await Promise.race([Promise.all(this.dangling), new Promise((r) => setTimeout(r, 5000))]);
    this.clock.uninstall();
  }
}
