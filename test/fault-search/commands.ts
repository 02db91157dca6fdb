/**
 * The commands a fault-search schedule is made of, one small class each, so that a failing
 * schedule prints as a list a person can read and replay by hand: users applying, editing and
 * deleting resources; the engine reconciling one resource once (optionally interrupted at a
 * named step by a crash, a user or another Proxmox user); two engine processes at once;
 * restarts; faults on either cluster's calls and tasks (a remote migration's among them); other
 * users taking VMIDs (a move's target VMID too), making look-alike VMs and running backups. After each command the simulator's workers are let run (quiesce) and the
 * invariants that hold at every moment are checked.
 */
import type { AsyncCommand } from 'fast-check';
import { externalName, getCondition } from '../../src/engine/resource.ts';
import { SimulatedCrash } from '../../src/engine/types.ts';
import { settled } from '../../src/local/resource-view.ts';
import type { FaultSpec } from '../../src/sim/fault-spec.ts';
import { markerUid, OWNER_TAG } from '../../src/vm/spec.ts';
import { foreignCreate, foreignRequest } from './foreign.ts';
import { checkAlways } from './invariants.ts';
import { type Edit, type Interrupt, keyOfName, type Name, SITE, type SiteName, type World } from './world.ts';

/** What the schedule has done so far that decides which commands make sense. */
export interface Model {
  applied: Set<Name>;
}

export abstract class Step implements AsyncCommand<Model, World> {
  check(_m: Readonly<Model>): boolean {
    return true;
  }
  async run(m: Model, w: World): Promise<void> {
    w.log(`> ${this.toString()}`);
    await this.act(m, w);
    await w.quiesce();
    checkAlways(w);
    w.commandDone();
  }
  protected abstract act(m: Model, w: World): Promise<void>;
  abstract toString(): string;
}

/** A step on a resource the schedule has applied (drawn for one that was not, it is skipped). */
export abstract class OnApplied extends Step {
  readonly name: Name;
  constructor(name: Name) {
    super();
    this.name = name;
  }
  override check(m: Readonly<Model>): boolean {
    return m.applied.has(this.name);
  }
}

export const showEdit = (e: Edit) =>
  `cpu=${e.cpu} memory=${e.memory}${e.powerState ? ` powerState=${e.powerState}` : ''}${e.site && e.site !== SITE ? ` site=${e.site}` : ''}${e.site === 'site-2' && e.node ? ` node=${e.node}` : ''}${e.replacePolicy ? ` replacePolicy=${e.replacePolicy}` : ''}${e.disk ? ` disk=${e.disk}` : ''}`;

/** The user deletes the resource's manifest (from both state files: see Delete). */
function deleteManifest(w: World, name: Name): void {
  w.deleted.add(name);
  w.store.markDeleted(keyOfName(name));
  // The user deleted the manifest: the other state file's apply is run without it too. (One
  // state file deleting a VM while another keeps starting it is the user's conflict.)
  w.otherStore?.markDeleted(keyOfName(name));
}

/** A user applies the resource's manifest (creates it, or edits its spec). */
export class Apply extends Step {
  readonly name: Name;
  readonly edit: Edit;
  constructor(name: Name, edit: Edit) {
    super();
    this.name = name;
    this.edit = edit;
  }
  protected async act(m: Model, w: World): Promise<void> {
    m.applied.add(this.name);
    w.apply(this.name, this.edit);
  }
  toString(): string {
    return `apply ${this.name} ${showEdit(this.edit)}`;
  }
}

/**
 * A phased apply's process prepares the resource ahead of its create (its snippet on its node,
 * src/local/runtime.ts prepare), as it does for a phase while the one before it boots: whether or
 * not it was applied, and by this state file's process or the other's. A config must still never
 * name a snippet that is not there (a prepared file another process removed is written again).
 */
export class Prepare extends Step {
  readonly name: Name;
  readonly edit: Edit;
  readonly process: 0 | 2;
  constructor(name: Name, edit: Edit, process: 0 | 2) {
    super();
    this.name = name;
    this.edit = edit;
    this.process = process;
  }
  protected async act(_m: Model, w: World): Promise<void> {
    await w.prepare(this.name, this.edit, this.process);
  }
  toString(): string {
    return `${this.process === 0 ? 'the' : "the other state file's"} process prepares ${this.name} ${showEdit(this.edit)} ahead of its create`;
  }
}

/**
 * A user moves the resource to the other site: the manifest as last applied, with the other site
 * (and its node). Which site is "other" follows from the schedule so far, so a replay moves alike.
 * `replacePolicy` (Replace): the move may replace the VM.
 */
export class Move extends OnApplied {
  readonly replacePolicy: Edit['replacePolicy'];
  constructor(name: Name, replacePolicy?: Edit['replacePolicy']) {
    super(name);
    this.replacePolicy = replacePolicy;
  }
  protected async act(_m: Model, w: World): Promise<void> {
    const last = w.lastEdit.get(this.name) ?? { cpu: 1, memory: '1Gi' };
    const site: SiteName = (last.site ?? SITE) === 'site-1' ? 'site-2' : 'site-1';
    const edit: Edit = { ...last, site, ...(this.replacePolicy ? { replacePolicy: this.replacePolicy } : {}) };
    w.log(`  (as ${showEdit(edit)})`);
    w.apply(this.name, edit);
  }
  toString(): string {
    return this.replacePolicy
      ? `move ${this.name} to the other site, a replacement allowed (${this.replacePolicy})`
      : `move ${this.name} to the other site (its last manifest, the site changed)`;
  }
}

/**
 * The user moves the resource to the other site allowing a replacement (`replacePolicy:
 * CreateThenDelete`): where no remote migration can be made (with `password`, a move to site-1 has
 * no API token for its target) a new VM is made there and the old one destroyed once it is Ready;
 * elsewhere the VM migrates as for Move.
 */
export class Replace extends Move {
  constructor(name: Name) {
    super(name, 'CreateThenDelete');
  }
}

/** A user deletes the resource (the store sets deletionTimestamp; the finalizer holds it). */
export class Delete extends OnApplied {
  protected async act(_m: Model, w: World): Promise<void> {
    deleteManifest(w, this.name);
  }
  toString(): string {
    return `delete ${this.name}`;
  }
}

/** Another Proxmox user, acting through the API with its own token. */
export type ForeignAct =
  | 'next-id'
  | 'look-alike'
  | 'take-persisted-vmid'
  | 'take-move-vmid'
  | 'backup'
  | 'power-off'
  | 'destroy'
  /** HA or a person migrates our VM to the other node of its site (the fourth search's site-2). */
  | 'migrate'
  /** A person protects our VM (`qm set N --protection 1`): Proxmox then refuses to destroy it. */
  | 'protect';

/** Acts on the cluster the resource's VM is on (its status's site), where another user would meet it. */
export async function foreignAct(w: World, what: ForeignAct, name: Name): Promise<void> {
  const r = w.store.getSync(keyOfName(name));
  const site: SiteName = r ? w.siteOf(r) : SITE;
  const c = w.cluster(site);
  switch (what) {
    case 'next-id':
    case 'look-alike': {
      const next = await foreignRequest(w, 'GET', '/cluster/nextid', undefined, site);
      const vmid = Number(next.data);
      if (next.status !== 200 || !Number.isInteger(vmid)) return w.log(`  foreign: no nextid (HTTP ${next.status})`);
      // A look-alike: the same name and our tag, but not our marker (someone copied our VM by hand).
      const extra: Record<string, string> =
        what === 'look-alike' ? { name, tags: OWNER_TAG, description: `copy of ${name}` } : {};
      return foreignCreate(w, vmid, extra, site);
    }
    case 'take-persisted-vmid': {
      const vmid = Number(r ? externalName(r) : undefined);
      if (!Number.isInteger(vmid) || c.state.vms.has(vmid)) return w.log(`  foreign: ${name} holds no free VMID`);
      return foreignCreate(w, vmid, {}, site);
    }
    case 'take-move-vmid': {
      // The VMID a recorded move reserved on the target exists only in the provider's status and
      // memory: on the target cluster anybody may create a VM there before the migration does.
      const move = r?.status?.atProvider?.siteMove;
      const to = move?.to as SiteName | undefined;
      if (!move || !to || w.cluster(to).state.vms.has(move.vmid))
        return w.log(`  foreign: ${name} has no move whose target VMID is free`);
      return foreignCreate(w, move.vmid, {}, to);
    }
    case 'backup': {
      // vzdump: it sets `lock: backup` in our VM's config and drops it when done (no flock meanwhile).
      const vmid = Number(r ? externalName(r) : undefined);
      const vm = c.state.vms.get(vmid);
      // (vzdump takes the VM's config lock to set its own: a destroy holding it is waited for,
      // and the VM is gone by then.)
      const destroying = [...c.state.tasks.values()].some(
        (t) => t.type === 'qmdestroy' && t.id === String(vmid) && t.status === 'running',
      );
      if (!r || !vm || markerUid(vm.config.description) !== r.metadata.uid || vm.config.lock || destroying) {
        return w.log(`  foreign: ${name} has no unlocked VM to back up`);
      }
      // No vzdump starts on a node that is down.
      if (c.state.nodes.get(vm.node)?.crashed) return w.log(`  foreign: ${name}'s VM is on ${vm.node}, which is down`);
      w.addFault(site, { kind: 'lock', vmid, lock: 'backup', flock: false });
      return w.log(`  foreign: backup of VM ${site}/${vmid} running`);
    }
    case 'power-off': {
      // A person stops our running VM (the web UI's Stop): between our start and its guest's
      // answer too, where the provider goes by its own task's outcome (known-outcome.ts).
      const vmid = Number(r ? externalName(r) : undefined);
      const vm = c.state.vms.get(vmid);
      if (!r || !vm || markerUid(vm.config.description) !== r.metadata.uid || vm.status !== 'running') {
        return w.log(`  foreign: ${name} has no running VM to stop`);
      }
      const res = await foreignRequest(w, 'POST', `/nodes/${vm.node}/qemu/${vmid}/status/stop`, {}, site);
      return w.log(`  foreign: stop of VM ${site}/${vmid} (HTTP ${res.status})`);
    }
    case 'destroy': {
      // A person removes our stopped VM (the web UI's Remove). The destroy holds the VM's lock for
      // two simulated seconds, so a task of ours sent meanwhile (a resize, a start) waits for the
      // lock, then finds no config and fails, as qemu-server's workers load it once they hold it.
      const vmid = Number(r ? externalName(r) : undefined);
      const vm = c.state.vms.get(vmid);
      if (!r || !vm || markerUid(vm.config.description) !== r.metadata.uid || vm.status !== 'stopped' || vm.config.lock)
        return w.log(`  foreign: ${name} has no stopped, unlocked VM to destroy`);
      w.addFault(site, {
        kind: 'task',
        type: 'qmdestroy',
        id: String(vmid),
        action: 'stall',
        durationMs: 2_000,
        count: 1,
      });
      const res = await foreignRequest(w, 'DELETE', `/nodes/${vm.node}/qemu/${vmid}`, undefined, site);
      return w.log(`  foreign: destroy of VM ${site}/${vmid} (HTTP ${res.status})`);
    }
    case 'protect': {
      // The web UI's Options > Protection, on whichever of our VMs the resource names, locked or
      // not (PVE refuses a config change under a lock: then nothing happens). A delete, a
      // replacement or a twin's retirement must leave the VM as it is and say so; the settle's
      // operator lifts it for such a report (operator.ts operatorUnprotects).
      const vmid = Number(r ? externalName(r) : undefined);
      const vm = c.state.vms.get(vmid);
      if (!r || !vm || markerUid(vm.config.description) !== r.metadata.uid || vm.config.protection === '1')
        return w.log(`  foreign: ${name} has no unprotected VM to protect`);
      const res = await foreignRequest(w, 'PUT', `/nodes/${vm.node}/qemu/${vmid}/config`, { protection: '1' }, site);
      return w.log(`  foreign: protect VM ${site}/${vmid} (HTTP ${res.status})`);
    }
    case 'migrate': {
      // As HA's relocation or the web UI's Migrate would: online when it runs, the local disk
      // copied. The provider follows it (placementPolicy Follow), and its snippet with it.
      const vmid = Number(r ? externalName(r) : undefined);
      const vm = c.state.vms.get(vmid);
      const target = [...c.state.nodes.keys()].find((n) => n !== vm?.node);
      if (!r || !vm || !target || markerUid(vm.config.description) !== r.metadata.uid || vm.config.lock)
        return w.log(`  foreign: ${name} has no unlocked VM to migrate inside its site`);
      const res = await foreignRequest(
        w,
        'POST',
        `/nodes/${vm.node}/qemu/${vmid}/migrate`,
        { target, 'with-local-disks': '1', ...(vm.status === 'running' ? { online: '1' } : {}) },
        site,
      );
      return w.log(`  foreign: migrate of VM ${site}/${vmid} ${vm.node} -> ${target} (HTTP ${res.status})`);
    }
  }
}

export class Foreign extends Step {
  readonly what: ForeignAct;
  readonly name: Name;
  constructor(what: ForeignAct, name: Name) {
    super();
    this.what = what;
    this.name = name;
  }
  protected act(_m: Model, w: World): Promise<void> {
    return foreignAct(w, this.what, this.name);
  }
  toString(): string {
    return this.what === 'next-id' ? 'foreign user creates a VM at nextid' : `foreign ${this.what} of ${this.name}`;
  }
}

/** What happens while a reconcile waits at a step. */
export type Interruption =
  | { kind: 'crash' }
  | { kind: 'foreign'; what: ForeignAct }
  | { kind: 'edit'; edit: Edit }
  | { kind: 'delete' }
  /** The other provider process reconciles the same resource meanwhile (an old leader still at work). */
  | { kind: 'writer' };

export function showInterruption(i: Interruption): string {
  switch (i.kind) {
    case 'crash':
      return 'the process crashes';
    case 'foreign':
      return `foreign ${i.what}`;
    case 'edit':
      return `user edits ${showEdit(i.edit)}`;
    case 'delete':
      return 'user deletes it';
    case 'writer':
      return 'p1 reconciles it meanwhile';
  }
}

/** What a reconcile of `name` runs when it gets to `at.where`: the interruption `at.what`. */
export function interruptAt(
  w: World,
  name: Name,
  at: { where: { step: string } | { nth: number }; what: Interruption },
): Interrupt {
  return {
    at: at.where,
    act: async (step) => {
      w.log(`  at ${step}: ${showInterruption(at.what)}`);
      // Tasks already started run first (unless a fault holds them), so that a replay takes the
      // same turn; a task still running at this point is what a stall fault is for.
      if (at.what.kind !== 'crash') await w.quiesce();
      switch (at.what.kind) {
        case 'crash':
          throw new SimulatedCrash(step);
        case 'foreign':
          await foreignAct(w, at.what.what, name);
          return w.quiesce();
        case 'edit':
          return w.apply(name, at.what.edit);
        case 'delete':
          return deleteManifest(w, name);
        case 'writer':
          await w.reconcile(name, 1);
          return w.quiesce();
      }
    },
  };
}

const ordinal = (n: number) => `${n}${n === 1 ? 'st' : n === 2 ? 'nd' : n === 3 ? 'rd' : 'th'}`;

export class Reconcile extends Step {
  readonly name: Name;
  readonly at?: { where: { step: string } | { nth: number }; what: Interruption };
  constructor(name: Name, at?: { where: { step: string } | { nth: number }; what: Interruption }) {
    super();
    this.name = name;
    this.at = at;
  }
  override check(m: Readonly<Model>): boolean {
    return m.applied.has(this.name);
  }
  protected async act(_m: Model, w: World): Promise<void> {
    await w.reconcile(this.name, 0, this.at && interruptAt(w, this.name, this.at));
  }
  toString(): string {
    if (!this.at) return `reconcile ${this.name}`;
    // (Which step the nth was is in the journal: fast-check reruns command objects while it
    // shrinks, so a field set by the last run would not describe the counterexample.)
    const where = 'step' in this.at.where ? this.at.where.step : `its ${ordinal(this.at.where.nth)} step`;
    return `reconcile ${this.name} (at ${where}: ${showInterruption(this.at.what)})`;
  }
}

/**
 * Time passes as it would with the work queue: the resource is reconciled again and again (the
 * simulator's workers run in between) until it is Ready or gone, or the bound is reached (faults
 * may keep it from getting there; that is not a failure during the schedule).
 */
export class Converge extends OnApplied {
  protected async act(_m: Model, w: World): Promise<void> {
    let same = 0;
    let last = '';
    for (let i = 0; i < 30; i++) {
      const r = w.store.getSync(keyOfName(this.name));
      // The first reconcile always runs: an edit of a Ready resource (a new site) is a watch
      // event, and its status says Ready until a reconcile has looked.
      if (!r || (i > 0 && !r.metadata.deletionTimestamp && settled(r))) return;
      const res = await w.reconcile(this.name, 0);
      await w.quiesce();
      checkAlways(w);
      // A fault that keeps failing it the same way (an outage): waiting longer shows nothing new.
      const after = w.store.getSync(keyOfName(this.name));
      const now = `${res?.kind}:${after ? getCondition(after, 'Synced')?.reason : 'gone'}`;
      same = res?.kind === 'rateLimited' && now === last ? same + 1 : 0;
      last = now;
      if (same >= 3) return;
    }
  }
  toString(): string {
    return `converge ${this.name} (reconcile until Ready or gone, or failing alike 4 times; at most 30)`;
  }
}

/** Two provider processes over the same store reconcile at once (e.g. an old leader that has not noticed yet). */
export class TwoWriters extends Step {
  readonly a: Name;
  readonly b: Name;
  constructor(a: Name, b: Name) {
    super();
    this.a = a;
    this.b = b;
  }
  override check(m: Readonly<Model>): boolean {
    return m.applied.has(this.a) && m.applied.has(this.b);
  }
  protected async act(_m: Model, w: World): Promise<void> {
    await Promise.all([w.reconcile(this.a, 0), w.reconcile(this.b, 1)]);
  }
  toString(): string {
    return `two writers: p0 reconciles ${this.a} while p1 reconciles ${this.b}`;
  }
}

/** The provider process is killed between reconciles and started again over the same store. */
export class Restart extends Step {
  protected act(_m: Model, w: World): Promise<void> {
    return w.restart(0);
  }
  toString(): string {
    return 'restart the provider process';
  }
}

/**
 * Another state file for the same manifests: its own process applies `name` there (once) and
 * reconciles it, next to the main state's. Both must end on one VM per manifest.
 */
export class OtherState extends OnApplied {
  protected async act(_m: Model, w: World): Promise<void> {
    w.applyOther(this.name);
    await w.reconcile(this.name, 2);
  }
  toString(): string {
    return `another state file's apply reconciles ${this.name}`;
  }
}

/**
 * The state file is lost (or another one is used) and the user applies the same manifests again:
 * Proxmox alone says which VMs are the resources'. A resource still being deleted keeps the
 * schedule from losing the state (its manifest would be gone with it, and its VM left to gc).
 */
export class LoseState extends Step {
  protected async act(m: Model, w: World): Promise<void> {
    if (w.store.listSync().some((r) => r.metadata.deletionTimestamp))
      return w.log('  (a resource is being deleted: the state is kept)');
    const names = await w.loseState();
    for (const n of [...m.applied]) if (!names.includes(n)) m.applied.delete(n);
    w.log(`  state lost; re-applied ${names.join(', ') || 'nothing'} with new uids`);
  }
  toString(): string {
    return 'lose the state file and apply the manifests again';
  }
}

/** A fault on one Proxmox cluster (site-1 unless given), active until a Heal command (or the end of the schedule). */
export class Fault extends Step {
  readonly label: string;
  readonly spec: FaultSpec;
  /** Ends by itself after this many further commands (an outage of bounded length). */
  readonly lastsFor: number | undefined;
  readonly site: SiteName;
  constructor(label: string, spec: FaultSpec, lastsFor?: number, site: SiteName = SITE) {
    super();
    this.label = label;
    this.spec = spec;
    this.lastsFor = lastsFor;
    this.site = site;
  }
  protected async act(_m: Model, w: World): Promise<void> {
    const ref = w.addFault(this.site, this.spec);
    if (this.spec.kind === 'applied-late') w.heldSince.set(ref, Date.now());
    // (+1: this command's own end counts one.)
    if (this.lastsFor !== undefined) w.expiring.set(ref, this.lastsFor + 1);
  }
  toString(): string {
    return `fault${this.site === SITE ? '' : ` on ${this.site}`}: ${this.label}`;
  }
}

/** The oldest-but-i-th active fault ends (an outage is over, a stalled task goes on, a backup ends). */
export class Heal extends Step {
  readonly i: number;
  constructor(i: number) {
    super();
    this.i = i;
  }
  protected async act(_m: Model, w: World): Promise<void> {
    if (!w.faultIds.length) return;
    const ref = w.faultIds[this.i % w.faultIds.length]!;
    const f = w.cluster(ref.site).faults.active.get(ref.id);
    w.removeFault(ref);
    w.log(`  healed: ${f ? `${ref.site} ${JSON.stringify(f.spec)}` : `fault ${ref.site}#${ref.id} (already gone)`}`);
  }
  toString(): string {
    return `heal fault #${this.i}`;
  }
}
