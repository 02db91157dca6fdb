/**
 * The pieces of schedule the fault search's regression files share (regressions-*.test.ts): the
 * resources' manifests, and faults and acts as the searches draw them. Those files together hold
 * the distinct failures the fault search found (FINDINGS.md), each as the minimal fixed schedule
 * that showed it, run through the same runner and invariants as the search. FINDINGS.md has,
 * under the same name (F1, F1b, ... F97), the invariant that broke, how it was found and the
 * engine code responsible. A test passes once the engine keeps every invariant on its schedule. A
 * finding still open (its fix is outside test/) is a `todo` test: it runs, and reports its
 * failure, without failing the suite.
 */
import assert from 'node:assert/strict';
import type fc from 'fast-check';
import { Apply, Fault, type Model } from './commands.ts';
import type { World } from './world.ts';

export const LOCK_TIMEOUT = "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout";
export const vmA = new Apply('vm-a', { cpu: 1, memory: '1Gi' });
export const vmB = new Apply('vm-b', { cpu: 1, memory: '1Gi' });
export const vmC = new Apply('vm-c', { cpu: 1, memory: '1Gi' });
/** A site-2 outage of one command (connections reset), as the search draws it. */
export const site2Outage = new Fault(
  'outage (connections reset) for the next 1 command(s)',
  { kind: 'unavailable', ms: 365 * 24 * 3600_000, mode: 'reset' },
  1,
  'site-2',
);

/** vm-a's manifest on site-2's r630-01 (the fourth search's topology). */
export const onR1 = { cpu: 1, memory: '1Gi', site: 'site-2', node: 'r630-01' } as const;
/** A site-2 node's crash, as the search draws it, booting after `lastsFor` commands. */
export const crash = (node: string, lastsFor = 1) =>
  new Fault(
    `${node} crashes (its workers die, its VMs stop) and boots after the next ${lastsFor} command(s)`,
    { kind: 'node-crash', node },
    lastsFor,
    'site-2',
  );

/** A site-2 `qmigrate` worker held at its `step`th wait until healed. */
export const qmigrateStall = (step: number, what = `task qmigrate hangs at wait ${step}`) =>
  new Fault(what, { kind: 'task', type: 'qmigrate', action: 'stall', step }, undefined, 'site-2');

/**
 * Not a drawn command: lets the worker a site-2 stall fault waits for get there, so that a crash
 * that follows finds it there (a stall is held only once its wait is reached).
 */
export const untilStalled: fc.AsyncCommand<Model, World> = {
  check: () => true,
  async run(_m, w) {
    w.log('> (the worker runs on until its stall holds it)');
    const held = () => [...w.cluster('site-2').faults.active.values()].some((f) => f.reached);
    for (let i = 0; i < 5000 && !held(); i++) await new Promise((resolve) => setTimeout(resolve, 1));
    assert.ok(held(), 'the stall was never reached');
  },
  toString: () => 'until the stall holds its worker',
};
