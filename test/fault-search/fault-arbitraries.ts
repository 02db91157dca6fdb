/**
 * The faults a schedule draws: what a real Proxmox VE cluster does on its own to the provider's
 * calls and tasks (PVE's own error texts for requests refused before anything happened, lost and
 * late answers, outages, slow answers, tasks that fail, hang or die, sshd and pvestatd down, a
 * node that loses power), each on the cluster it strikes. Fault kinds that only some versions of
 * src/sim/faults.ts know are probed at start (`probeFaultKinds`) and reported, never silently
 * dropped. A `node-offline` fault is not drawn: a node offline while its pveproxy still answers
 * for the site is a partition these worlds do not model; a site unreachable (`unavailable`) and a
 * node that crashed (`node-crash`) are drawn.
 */
import fc from 'fast-check';
import type { FaultSpec } from '../../src/sim/fault-spec.ts';
import { foreignCreate, foreignRequest } from './foreign.ts';
import { NODE_OF, SITE2_NODES, SITES, type SiteName, type World, YEAR_MS } from './world.ts';

const site = fc.constantFrom(...SITES);

/** The Proxmox calls of create, update and delete, as the fault API matches them. */
const CALLS = {
  create: { method: 'POST', path: '/nodes/{node}/qemu' },
  clone: { method: 'POST', path: '/nodes/{node}/qemu/{vmid}/clone' },
  config: { method: 'POST', path: '/nodes/{node}/qemu/{vmid}/config' },
  resize: { method: 'PUT', path: '/nodes/{node}/qemu/{vmid}/resize' },
  start: { method: 'POST', path: '/nodes/{node}/qemu/{vmid}/status/start' },
  shutdown: { method: 'POST', path: '/nodes/{node}/qemu/{vmid}/status/shutdown' },
  stop: { method: 'POST', path: '/nodes/{node}/qemu/{vmid}/status/stop' },
  unlock: { method: 'PUT', path: '/nodes/{node}/qemu/{vmid}/config' },
  destroy: { method: 'DELETE', path: '/nodes/{node}/qemu/{vmid}' },
  remoteMigrate: { method: 'POST', path: '/nodes/{node}/qemu/{vmid}/remote_migrate' },
  // A migration inside the cluster: drawn only by the fourth search, whose site-2 has two nodes.
  migrate: { method: 'POST', path: '/nodes/{node}/qemu/{vmid}/migrate' },
} as const;
type Call = keyof typeof CALLS;
/** The calls the first three searches' faults strike (in this order: their recorded seeds replay it). */
const BASE_CALLS = (Object.keys(CALLS) as Call[]).filter((c) => c !== 'migrate');
/** And the fourth's: the in-cluster migration's call as well. */
const NODE_CALLS = Object.keys(CALLS) as Call[];
const callOf = (calls: readonly Call[]) => fc.constantFrom(...calls);
/**
 * The calls an `applied-late` fault holds: not remote_migrate, whose handler makes two calls to the
 * target before it answers with its UPID, and which the brief searches for refusals, lost answers
 * and latency.
 */
const heldCallOf = (calls: readonly Call[]) => fc.constantFrom(...calls.filter((c) => c !== 'remoteMigrate'));

/** Refusals PVE answers before it changes anything (the request was certainly not applied). */
const REFUSALS = [
  { status: 500, message: "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout" },
  { status: 500, message: "can't lock file '/var/lock/pve-manager/pve-storage-local-lvm' - got timeout" },
  { status: 500, message: "cfs-lock 'file-user_cfg' error: got lock request timeout" },
  { status: 500, message: "Can't connect to 127.0.0.1:85 (Connection refused)" },
  { status: 503, message: 'Service Unavailable' },
] as const;

const TASKS = [
  'qmcreate',
  'qmclone',
  'qmconfig',
  'resize',
  'qmstart',
  'qmshutdown',
  'qmstop',
  'qmdestroy',
  'qmigrate',
] as const;
const CREATE_TASKS = new Set(['qmcreate', 'qmclone']);

export interface DrawnFault {
  label: string;
  spec: FaultSpec;
  /** Ends by itself after this many further commands. */
  lastsFor?: number;
  /** The cluster it is on (site-1 unless given). */
  site?: SiteName;
}

const requestFault = (calls: readonly Call[]): fc.Arbitrary<DrawnFault> =>
  fc.tuple(callOf(calls), fc.constantFrom(...REFUSALS), fc.integer({ min: 1, max: 3 })).map(([c, r, count]) => ({
    label: `${CALLS[c].method} ${c} answers ${r.status} '${r.message}' x${count}`,
    spec: { kind: 'request', ...CALLS[c], status: r.status, message: r.message, count },
  }));

/**
 * An outage lasts a few commands (or until healed): every request in it is retried by the client
 * with real sleeps, so an outage that spanned a whole schedule would only cost time.
 */
const outage: fc.Arbitrary<DrawnFault> = fc
  .tuple(fc.constantFrom('reset' as const, '503' as const), fc.integer({ min: 1, max: 3 }))
  .map(([mode, lastsFor]) => ({
    label: `outage (${mode === 'reset' ? 'connections reset' : '503'}) for the next ${lastsFor} command(s)`,
    // A year of simulated time: it ends after those commands (or when healed), not by the clock.
    spec: { kind: 'unavailable', ms: YEAR_MS, mode },
    lastsFor,
  }));

const latency = (calls: readonly Call[]): fc.Arbitrary<DrawnFault> =>
  fc.tuple(callOf(calls), fc.integer({ min: 1, max: 20 }), fc.integer({ min: 1, max: 3 })).map(([c, s, count]) => ({
    label: `${CALLS[c].method} ${c} answers ${s} s late x${count}`,
    spec: { kind: 'latency', ...CALLS[c], ms: s * 1000, count },
  }));

/**
 * The bulk list answers late (a big cluster's pmxcfs, a busy pveproxy): while it is on its way the
 * resources mutate and ask again, so each must wait for a list begun after its own mutations
 * (cluster-list.ts clusterResources: one read at a time, the next shared) and never act on one that
 * predates them.
 */
const listLatency: fc.Arbitrary<DrawnFault> = fc
  .tuple(fc.integer({ min: 1, max: 20 }), fc.integer({ min: 1, max: 6 }))
  .map(([s, count]) => ({
    label: `GET /cluster/resources answers ${s} s late x${count}`,
    spec: { kind: 'latency', method: 'GET', path: '/cluster/resources', ms: s * 1000, count },
  }));

/** Task failures: before the worker did anything, or (create and clone) after it wrote the VM. */
const taskFail: fc.Arbitrary<DrawnFault> = fc
  .tuple(fc.constantFrom(...TASKS), fc.boolean(), fc.integer({ min: 1, max: 2 }))
  .map(([type, late, count]) => {
    const at = late && CREATE_TASKS.has(type) ? ('end' as const) : ('start' as const);
    const message =
      at === 'start'
        ? "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout"
        : 'unable to create VM - command failed: exit code 1';
    return {
      label: `task ${type} fails at ${at} x${count}`,
      spec: { kind: 'task', type, action: 'fail', at, message, count },
    };
  });

/**
 * The node's sshd refuses connections for a few commands: snippet uploads fail (ECONNREFUSED),
 * unless the provider's connection to it is still open; with `dropSessions` that one is cut too
 * (sshd killed, the node rebooting), under an upload or between two.
 */
const sshDown = (where: fc.Arbitrary<SiteNode>): fc.Arbitrary<DrawnFault> =>
  fc.tuple(where, fc.integer({ min: 1, max: 3 }), fc.boolean()).map(([[s, node], lastsFor, dropSessions]) => ({
    label: `sshd on ${node} refuses connections${dropSessions ? ', its sessions cut,' : ''} for the next ${lastsFor} command(s)`,
    spec: { kind: 'ssh-refused', node, ...(dropSessions ? { dropSessions } : {}) } as FaultSpec,
    lastsFor,
    site: s,
  }));

/**
 * The node's pvestatd hangs for a few commands: /cluster/resources keeps its VMs' names and states
 * as of its last tick (a create that ended meanwhile still `VM <vmid>`, a VM made meanwhile with
 * no name and `status: unknown`), while their locks and tags follow the config (fault search F56).
 */
const statsStalled = (where: fc.Arbitrary<SiteNode>): fc.Arbitrary<DrawnFault> =>
  fc.tuple(where, fc.integer({ min: 1, max: 3 })).map(([[s, node], lastsFor]) => ({
    label: `pvestatd on ${node} hangs (its VMs' statistics stale) for the next ${lastsFor} command(s)`,
    spec: { kind: 'stats-stalled', node } as FaultSpec,
    lastsFor,
    site: s,
  }));

/** A node and its site. */
type SiteNode = readonly [SiteName, string];
/** The nodes a node's fault strikes: each site's one node, and in the fourth search r630-02 too. */
const BASE_NODES: fc.Arbitrary<SiteNode> = site.map((s) => [s, NODE_OF[s]] as const);
const NODE_NODES: fc.Arbitrary<SiteNode> = fc.constantFrom<SiteNode>(
  ['site-1', NODE_OF['site-1']],
  ...SITE2_NODES.map((n) => ['site-2', n] as const),
);

const taskStall: fc.Arbitrary<DrawnFault> = fc.constantFrom(...TASKS).map((type) => ({
  label: `task ${type} hangs until healed`,
  spec: { kind: 'task', type, action: 'stall' },
}));

/** Fault kinds this checkout's simulator accepts beyond the base set, found by `probeFaultKinds`. */
export interface Extras {
  faults: fc.Arbitrary<DrawnFault>[];
  /** The `die` faults among them (not drawn with token credentials). */
  die?: fc.Arbitrary<DrawnFault>;
  /**
   * The fourth search's `qm migrate` worker that dies (its `lock: migrate` stays; the settle's
   * operator unlocks it once reported: operator.ts operatorUnlocks), on site-2 (see faultArb).
   */
  migrateDie?: fc.Arbitrary<DrawnFault>;
  /** The fourth search's node crash, on site-2 (see faultArb). */
  nodeCrash?: fc.Arbitrary<DrawnFault>;
  /** The fourth search's node whose API does not answer while it runs on (apiSilent). */
  apiSilent?: fc.Arbitrary<DrawnFault>;
  /** Which kinds were looked for and not found (reported, never silently dropped). */
  missing: string[];
  /** The calls the request faults strike (BASE_CALLS, or NODE_CALLS for the fourth search). */
  calls: readonly Call[];
  /** The nodes whose sshd or pvestatd a fault strikes. */
  nodes: fc.Arbitrary<SiteNode>;
}

/** Does the simulator behave as `spec` says? Tried on a throw-away world, through the API. */
async function behaves(w: World, spec: FaultSpec, probe: () => Promise<boolean>): Promise<boolean> {
  let id: number;
  try {
    id = w.site.addFault(spec);
  } catch {
    return false; // refused: this version of src/sim/faults.ts does not know it
  }
  try {
    return await probe();
  } finally {
    w.site.removeFault(id);
  }
}

/**
 * The fault kinds that src/sim may or may not have yet: `reply-lost` (applied, the connection
 * reset before the answer), `applied-late` (applied only after the client stopped waiting) and
 * the task action `die` (the worker dies and leaves PVE's `lock: create` / `lock: clone`
 * placeholder). Each is tried for its effect, not only for being accepted; the ones missing are
 * reported by the search (never dropped silently).
 */
export async function probeFaultKinds(w: World, fourth = false): Promise<Extras> {
  const calls = fourth ? NODE_CALLS : BASE_CALLS;
  const faults: fc.Arbitrary<DrawnFault>[] = [];
  const missing: string[] = [];
  const version = { method: 'GET', path: '/version' };
  const lost = async () => (await foreignRequest(w, 'GET', '/version')).status === 0;
  if (await behaves(w, { kind: 'reply-lost', ...version, count: 1 } as FaultSpec, lost)) {
    faults.push(
      fc.tuple(callOf(calls), fc.integer({ min: 1, max: 2 })).map(([c, count]) => ({
        label: `${CALLS[c].method} ${c} is applied, then its answer is lost (connection reset) x${count}`,
        spec: { kind: 'reply-lost', ...CALLS[c], count } as FaultSpec,
      })),
    );
  } else missing.push('reply-lost');
  if (await behaves(w, { kind: 'applied-late', ...version, delayMs: 0, count: 1 } as FaultSpec, lost)) {
    faults.push(
      fc.tuple(heldCallOf(calls), fc.option(fc.integer({ min: 1, max: 20 }), { nil: undefined })).map(([c, s]) => ({
        label:
          s === undefined
            ? `${CALLS[c].method} ${c} is held unanswered until healed, then applied (the client gave up)`
            : `${CALLS[c].method} ${c} is applied ${s} s late, then its answer is lost`,
        spec: {
          kind: 'applied-late',
          ...CALLS[c],
          delayMs: s === undefined ? YEAR_MS : s * 1000,
          count: 1,
        } as FaultSpec,
      })),
    );
  } else missing.push('applied-late');
  const die = { kind: 'task', type: 'qmcreate', action: 'die', at: 'start', count: 1 } as FaultSpec;
  const leavesPlaceholder = async () => {
    await foreignCreate(w, 990);
    await w.quiesce();
    const vm = w.site.state.vms.get(990);
    return vm?.config.lock === 'create';
  };
  let dieArb: fc.Arbitrary<DrawnFault> | undefined;
  if (await behaves(w, die, leavesPlaceholder)) {
    dieArb = fc
      .tuple(fc.constantFrom('qmcreate', 'qmclone'), fc.constantFrom('start' as const, 'end' as const))
      .map(([type, at]) => ({
        label: `the ${type} worker dies at its ${at} (PVE's placeholder stays)`,
        spec: { kind: 'task', type, action: 'die', at } as FaultSpec,
      }));
    faults.push(dieArb);
  } else missing.push('task die');
  // A crash: the node's API goes (595) and its workers with it; tried on site-1's one node.
  const crashes =
    fourth &&
    (await behaves(w, { kind: 'node-crash', node: NODE_OF['site-1'] } as FaultSpec, async () => {
      return (await foreignRequest(w, 'GET', `/nodes/${NODE_OF['site-1']}/status`)).status === 595;
    }));
  if (fourth && !crashes) missing.push('node-crash');
  return {
    faults,
    missing,
    calls,
    nodes: fourth ? NODE_NODES : BASE_NODES,
    ...(dieArb ? { die: dieArb } : {}),
    ...(dieArb && fourth ? { migrateDie } : {}),
    ...(crashes ? { nodeCrash } : {}),
    ...(fourth ? { apiSilent } : {}),
  };
}

/**
 * r630-02's API does not answer for a few commands while the node runs on (pveproxy or pvedaemon
 * hung there, or cut from the endpoint node r630-01 that hands `/nodes/r630-02/...` to it): every
 * such request gets pveproxy's 595, its VMs, workers and sshd go on. Listed online all the while.
 */
const apiSilent: fc.Arbitrary<DrawnFault> = fc.integer({ min: 1, max: 3 }).map((lastsFor) => ({
  label: `r630-02's API does not answer (595, the node running on) for the next ${lastsFor} command(s)`,
  spec: {
    kind: 'request',
    path: 're:^/nodes/r630-02/',
    status: 595,
    message: 'Connection timed out',
    count: 1_000_000_000,
  } as FaultSpec,
  lastsFor,
  site: 'site-2' as const,
}));

/**
 * A node of site-2 loses power for a few commands, then boots (its `startall` starts the VMs with
 * `onboot`): every worker on it dies where it stands (a create's placeholder, a migration's lock
 * and copies stay), its VMs stop, its SSH sessions are cut, a request it was handling gets no
 * answer.
 */
const nodeCrash: fc.Arbitrary<DrawnFault> = fc
  .tuple(fc.constantFrom(...SITE2_NODES), fc.integer({ min: 1, max: 3 }))
  .map(([node, lastsFor]) => ({
    label: `${node} crashes (its workers die, its VMs stop) and boots after the next ${lastsFor} command(s)`,
    spec: { kind: 'node-crash', node } as FaultSpec,
    lastsFor,
    site: 'site-2' as const,
  }));

/** A `qmigrate` worker (inside a site or to another one) that dies at its start, its end or a step of its copy. */
const migrateDie: fc.Arbitrary<DrawnFault> = fc
  .oneof(
    fc.constantFrom('start' as const, 'end' as const),
    // Its first wait is the connection to the target, before phase 1 takes the lock.
    fc.integer({ min: 1, max: 6 }),
  )
  .map((when) => ({
    label: `the qmigrate worker dies at its ${typeof when === 'number' ? `step ${when}` : when} (its lock: migrate stays)`,
    spec: {
      kind: 'task',
      type: 'qmigrate',
      action: 'die',
      ...(typeof when === 'number' ? { step: when } : { at: when }),
    } as FaultSpec,
  }));

export function faultArb(extras: Extras, auth: 'password' | 'token'): fc.Arbitrary<DrawnFault> {
  // A dead worker's placeholder can only be removed by root@pam with a ticket (`qm unlock`); with a
  // token no engine could clean it up, so `die` is drawn only where the invariant is achievable.
  const extra = auth === 'password' ? extras.faults : extras.faults.filter((f) => f !== extras.die);
  // The calls and tasks a fault matches are on one cluster: either (the `die` faults stay on
  // site-1, whose password credentials alone may clean up a dead worker's placeholder).
  const onEither = (a: fc.Arbitrary<DrawnFault>) => fc.tuple(a, site).map(([f, s]) => ({ ...f, site: s }));
  return fc.oneof(
    { weight: 3, arbitrary: onEither(requestFault(extras.calls)) },
    { weight: 2, arbitrary: onEither(outage) },
    { weight: 2, arbitrary: onEither(latency(extras.calls)) },
    { weight: 1, arbitrary: onEither(listLatency) },
    { weight: 3, arbitrary: onEither(taskFail) },
    { weight: 2, arbitrary: onEither(taskStall) },
    { weight: 1, arbitrary: sshDown(extras.nodes) },
    { weight: 1, arbitrary: statsStalled(extras.nodes) },
    ...extra.map((arbitrary) => ({ weight: 3, arbitrary: arbitrary === extras.die ? arbitrary : onEither(arbitrary) })),
    // On site-2 with password credentials only: there every migration is inside the site (site-1
    // has no token for the moves back). A remote migration's dead source leaves the target's
    // tunnel placeholder, which PVE does not clean up either (qemu-server API2/Qemu.pm mtunnel:
    // `die "mtunnel exited unexpectedly"`, no destroy), and which nothing reports yet.
    ...(extras.migrateDie && auth === 'password'
      ? [{ weight: 2, arbitrary: extras.migrateDie.map((f) => ({ ...f, site: 'site-2' as const })) }]
      : []),
    // A crash's dead create leaves a placeholder only root@pam with a ticket may remove, as `die` does.
    ...(extras.nodeCrash && auth === 'password' ? [{ weight: 2, arbitrary: extras.nodeCrash }] : []),
    ...(extras.apiSilent ? [{ weight: 2, arbitrary: extras.apiSilent }] : []),
  );
}
