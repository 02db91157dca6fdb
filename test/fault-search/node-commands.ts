/**
 * The fourth search's commands on nodes: a user's move of a resource to the other node of site-2
 * (`qm migrate` inside the cluster, its worker interrupted or dying), and a node that loses power
 * under a resource's reconcile. See commands.ts for the rest of a schedule's commands.
 */
import { getCondition } from '../../src/engine/resource.ts';
import { type Interruption, interruptAt, type Model, OnApplied, showEdit, showInterruption } from './commands.ts';
import { type Edit, type Name, NODE_OF, SITE2_NODES, type SiteName, type World } from './world.ts';

/**
 * A user moves the resource to the other node of site-2 (the fourth search's topology): its last
 * manifest, on site-2, with the node it does not name. On site-2 a migration inside the cluster
 * (`qm migrate`, its local disk copied); from site-1 a move to that site and node. With `what`, a
 * reconcile follows at once, interrupted where it sends the migration (`update-migrate`): drawn
 * apart, the two seldom met (no interruption there in `npm test`'s 100 schedules).
 */
export class NodeMove extends OnApplied {
  readonly what: Interruption | undefined;
  /** The `qm migrate` worker this move sends on site-2 dies at its end or Nth wait (its lock stays). */
  readonly dies: 'end' | number | undefined;
  constructor(name: Name, what?: Interruption, dies?: 'end' | number) {
    super(name);
    this.what = what;
    this.dies = dies;
  }
  protected async act(_m: Model, w: World): Promise<void> {
    const last = w.lastEdit.get(this.name) ?? { cpu: 1, memory: '1Gi' };
    const from = last.site === 'site-2' ? (last.node ?? SITE2_NODES[0]) : SITE2_NODES[0];
    const edit: Edit = { ...last, site: 'site-2', node: from === SITE2_NODES[0] ? SITE2_NODES[1] : SITE2_NODES[0] };
    w.log(`  (as ${showEdit(edit)})`);
    w.apply(this.name, edit);
    if (this.what)
      await w.reconcile(
        this.name,
        0,
        interruptAt(w, this.name, { where: { step: 'update-migrate' }, what: this.what }),
      );
    if (this.dies !== undefined) {
      // Only while this reconcile's migration runs: a site-1 VM's move to site-2 runs its
      // `qmigrate` on site-1, out of the fault's reach.
      const when = typeof this.dies === 'number' ? { step: this.dies } : { at: 'end' as const };
      const ref = w.addFault('site-2', { kind: 'task', type: 'qmigrate', action: 'die', count: 1, ...when });
      await w.reconcile(this.name, 0);
      await w.quiesce();
      w.removeFault(ref);
    }
  }
  toString(): string {
    const then = this.what ? `, then reconcile it (at update-migrate: ${showInterruption(this.what)})` : '';
    const dies =
      this.dies === undefined
        ? ''
        : `, then reconcile it (its qmigrate worker dies at its ${typeof this.dies === 'number' ? `wait ${this.dies}` : 'end'}, leaving lock: migrate)`;
    return `move ${this.name} to the other node of site-2 (its last manifest, the node changed)${then}${dies}`;
  }
}

/**
 * A node loses power right after a reconcile of the resource, for the next `lastsFor` commands:
 * the node its VM is on, or is being made or moved on (where a request or task of that reconcile
 * is in flight, or a step of it is due): site-1's one node (every create there, a move's source)
 * or one of site-2's two. Drawn apart, a crash seldom met the resource's own work on that node
 * (91 crashes in 2,180 schedules, most of them on idle nodes).
 */
export class NodeCrash extends OnApplied {
  readonly lastsFor: number;
  constructor(name: Name, lastsFor: number) {
    super(name);
    this.lastsFor = lastsFor;
  }
  protected async act(_m: Model, w: World): Promise<void> {
    await w.reconcile(this.name, 0);
    const r = w.store.listSync().find((x) => x.metadata.name === this.name);
    const at = r?.status?.atProvider;
    const last = w.lastEdit.get(this.name);
    const site: SiteName = at?.site === 'site-2' || (!at?.site && last?.site === 'site-2') ? 'site-2' : 'site-1';
    // (A status written during a move may name the site before the node: a node of that site is taken.)
    const onSite2 = (n: unknown): n is string =>
      typeof n === 'string' && (SITE2_NODES as readonly string[]).includes(n);
    const node =
      site === 'site-1'
        ? NODE_OF['site-1']
        : onSite2(at?.node)
          ? at.node
          : onSite2(last?.node)
            ? last.node
            : SITE2_NODES[0];
    const ref = w.addFault(site, { kind: 'node-crash', node });
    // (+1: this command's own end counts one.)
    w.expiring.set(ref, this.lastsFor + 1);
    const ready = r && getCondition(r, 'Ready');
    w.log(`  ${node} crashes (${this.name}: step ${at?.step ?? '-'}, Ready ${ready?.reason ?? '-'})`);
  }
  toString(): string {
    return `reconcile ${this.name}, then its node crashes and boots after the next ${this.lastsFor} command(s)`;
  }
}
