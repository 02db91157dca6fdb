/**
 * The distinct failures the fault search found, each as the minimal fixed schedule that showed
 * it, run through the same runner and invariants as the search. FINDINGS.md has, under the same
 * name (F1...F20), the invariant that broke, how it was found and the engine code responsible. A
 * test passes once the engine keeps every invariant on its schedule. A finding still open (its fix
 * is outside test/) is a `todo` test: it runs, and reports its failure, without failing the suite.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type fc from 'fast-check';
import { freeVmVolumes } from '../../src/sim/routes/qemu-drives.ts';
import {
  Apply,
  Converge,
  Delete,
  Fault,
  Foreign,
  Heal,
  LoseState,
  type Model,
  Move,
  OtherState,
  Reconcile,
  Replace,
  Restart,
  TwoWriters,
} from './commands.ts';
import { NodeCrash, NodeMove } from './node-commands.ts';
import { runSchedule } from './runner.ts';
import type { World } from './world.ts';

const LOCK_TIMEOUT = "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout";
const vmA = new Apply('vm-a', { cpu: 1, memory: '1Gi' });
const vmB = new Apply('vm-b', { cpu: 1, memory: '1Gi' });
const vmC = new Apply('vm-c', { cpu: 1, memory: '1Gi' });
/** A site-2 outage of one command (connections reset), as the search draws it. */
const site2Outage = new Fault(
  'outage (connections reset) for the next 1 command(s)',
  { kind: 'unavailable', ms: 365 * 24 * 3600_000, mode: 'reset' },
  1,
  'site-2',
);

/** vm-a's manifest on site-2's r630-01 (the fourth search's topology). */
const onR1 = { cpu: 1, memory: '1Gi', site: 'site-2', node: 'r630-01' } as const;
/** A site-2 node's crash, as the search draws it, booting after `lastsFor` commands. */
const crash = (node: string, lastsFor = 1) =>
  new Fault(
    `${node} crashes (its workers die, its VMs stop) and boots after the next ${lastsFor} command(s)`,
    { kind: 'node-crash', node },
    lastsFor,
    'site-2',
  );

/** A site-2 `qmigrate` worker held at its `step`th wait until healed. */
const qmigrateStall = (step: number, what = `task qmigrate hangs at wait ${step}`) =>
  new Fault(what, { kind: 'task', type: 'qmigrate', action: 'stall', step }, undefined, 'site-2');

/**
 * Not a drawn command: lets the worker a site-2 stall fault waits for get there, so that a crash
 * that follows finds it there (a stall is held only once its wait is reached).
 */
const untilStalled: fc.AsyncCommand<Model, World> = {
  check: () => true,
  async run(_m, w) {
    w.log('> (the worker runs on until its stall holds it)');
    const held = () => [...w.cluster('site-2').faults.active.values()].some((f) => f.reached);
    for (let i = 0; i < 5000 && !held(); i++) await new Promise((resolve) => setTimeout(resolve, 1));
    assert.ok(held(), 'the stall was never reached');
  },
  toString: () => 'until the stall holds its worker',
};

describe('fault-search regressions', () => {
  it('F1: a create refused by PVE (five times: the backoff outlasts the 10 s bulk-list cache), then another user takes the persisted VMID -> a new VMID, not a permanent VMIDConflict', async () => {
    await runSchedule(
      'token',
      [vmA],
      [
        new Fault(`POST create answers 500 '${LOCK_TIMEOUT}' x5`, {
          kind: 'request',
          method: 'POST',
          path: '/nodes/{node}/qemu',
          status: 500,
          message: LOCK_TIMEOUT,
          count: 5,
        }),
        ...[1, 2, 3, 4, 5].map(() => new Reconcile('vm-a')),
        new Foreign('take-persisted-vmid', 'vm-a'),
        new Reconcile('vm-a'),
      ],
    );
  });

  it('F1b: a create task that failed (the VM is gone), the VMID taken during the backoff -> a new VMID', async () => {
    await runSchedule(
      'password',
      [vmA],
      [
        new Fault('task qmcreate fails at start x1', {
          kind: 'task',
          type: 'qmcreate',
          action: 'fail',
          at: 'start',
          message: LOCK_TIMEOUT,
          count: 1,
        }),
        new Reconcile('vm-a'),
        new Reconcile('vm-a'),
        new Foreign('take-persisted-vmid', 'vm-a'),
      ],
    );
  });

  it('F2: deleted, destroyed, and the VMID reused by another user before the finalizer went -> the resource goes, the VM stays', async () => {
    await runSchedule(
      'password',
      [vmC],
      [new Reconcile('vm-c'), new Delete('vm-c'), new Reconcile('vm-c'), new Foreign('next-id', 'vm-c')],
    );
  });

  it('F2b: as F2, but the status write recording the destroy task is lost to a conflict (the user touched the resource) -> still goes', async () => {
    const stopped = { cpu: 1, memory: '1Gi', powerState: 'stopped' } as const;
    await runSchedule(
      'token',
      [new Apply('vm-c', stopped)],
      [
        new Converge('vm-c'),
        new Delete('vm-c'),
        new Reconcile('vm-c', {
          where: { step: 'delete-destroy-issued' },
          what: { kind: 'edit', edit: { ...stopped, cpu: 2 } },
        }),
        new Foreign('next-id', 'vm-c'),
        new Reconcile('vm-c'),
      ],
    );
  });

  it("F3: delete while another user's backup holds our VM -> waits; never clears the backup lock", async () => {
    await runSchedule(
      'password',
      [vmA],
      [new Converge('vm-a'), new Foreign('backup', 'vm-a'), new Delete('vm-a'), new Reconcile('vm-a')],
    );
  });

  // A create held by PVE past the provider's death, applied only after the resource was
  // recreated, deleted and gone: nobody is left to own the VM it makes.
  for (const [vm, call] of [
    [vmA, '/nodes/{node}/qemu'],
    [vmB, '/nodes/{node}/qemu/{vmid}/clone'],
  ] as const) {
    it(`F5: a ${vm.name === 'vm-a' ? 'create' : 'clone'} applied late (within PVE's bound), after the provider died waiting and the resource was deleted -> no orphan VM`, async () => {
      await runSchedule(
        'password',
        [vm],
        [
          new Fault('POST is held unanswered until healed, then applied (the client gave up)', {
            kind: 'applied-late',
            method: 'POST',
            path: call,
            delayMs: 365 * 24 * 3600_000,
            count: 1,
          }),
          new Converge(vm.name),
          new Delete(vm.name),
          new Reconcile(vm.name),
          new Reconcile(vm.name),
          new Reconcile(vm.name),
          new Heal(0),
        ],
      );
    });
  }

  // PVE's placeholder of a dead worker can only be removed by root@pam (password credentials).
  for (const [type, at, vm] of [
    ['qmcreate', 'start', vmA],
    ['qmcreate', 'end', vmA],
    ['qmclone', 'end', vmB],
  ] as const) {
    it(`F4: the ${type} worker dies at its ${at} -> its placeholder is cleaned up and the VM made again`, async () => {
      await runSchedule(
        'password',
        [vm],
        [
          new Fault(`the ${type} worker dies at its ${at}`, { kind: 'task', type, action: 'die', at }),
          new Reconcile(vm.name),
          new Reconcile(vm.name),
        ],
      );
    });
  }

  it('F4: a dead qmcreate worker, then the resource is deleted -> the placeholder goes with it', async () => {
    await runSchedule(
      'password',
      [vmA],
      [
        new Fault('the qmcreate worker dies at its end', { kind: 'task', type: 'qmcreate', action: 'die', at: 'end' }),
        new Reconcile('vm-a'),
        new Delete('vm-a'),
        new Reconcile('vm-a'),
      ],
    );
  });

  it('F6: the state is lost while a clone is in flight; the clone ends without our tag (PVE clone takes none) -> the new resource finds it by name and marker, one VM', async () => {
    await runSchedule('password', [vmA, vmB], [new Reconcile('vm-b'), new LoseState(), new Reconcile('vm-a')]);
  });

  it('F7: the state is lost while a create is in flight, and the resource is deleted before it was reconciled -> the VM is left where gc finds it (our installation, a lost uid)', async () => {
    await runSchedule(
      'password',
      [vmC, vmA],
      [new Reconcile('vm-c'), new LoseState(), new Delete('vm-c'), new Reconcile('vm-a')],
    );
  });

  it('lost state with everything Ready: every VM adopted, none created', async () => {
    await runSchedule(
      'token',
      [vmA, vmB, vmC],
      [
        new Converge('vm-a'),
        new Converge('vm-b'),
        new Converge('vm-c'),
        new LoseState(),
        new Converge('vm-a'),
        new Converge('vm-b'),
      ],
    );
  });

  it('F8: the state is lost while a clone hangs; the new resource clones again, then the first clone ends -> the later VM is retired at the next look, one VM', async () => {
    await runSchedule(
      'token',
      [vmB],
      [
        new Fault('task qmclone hangs until healed', { kind: 'task', type: 'qmclone', action: 'stall' }),
        new Reconcile('vm-b'),
        new LoseState(),
        new Reconcile('vm-b'),
      ],
    );
  });

  it('F9: a qmcreate worker died leaving its placeholder, then the state is lost -> the placeholder is left to the operator, the VM made once', async () => {
    await runSchedule(
      'password',
      [vmA],
      [
        new Fault("the qmcreate worker dies at its start (PVE's placeholder stays)", {
          kind: 'task',
          type: 'qmcreate',
          action: 'die',
          at: 'start',
        }),
        new TwoWriters('vm-a', 'vm-a'),
        new LoseState(),
      ],
    );
  });

  it('F9b: the same, and the resource is moved to the other site before its next reconcile -> the placeholder is left to the operator, the VM made once on the new site', async () => {
    await runSchedule(
      'password',
      [vmA, vmC],
      [
        new Fault("the qmcreate worker dies at its start (PVE's placeholder stays)", {
          kind: 'task',
          type: 'qmcreate',
          action: 'die',
          at: 'start',
        }),
        new Reconcile('vm-a'),
        new LoseState(),
        new Apply('vm-a', { cpu: 1, memory: '1Gi', site: 'site-2' }),
      ],
    );
  });

  it("F10: another state file adopted our VM; this state's delete destroys it and the VMID is reused by another resource -> the other state gives the VMID up and makes the VM again", async () => {
    await runSchedule(
      'token',
      [vmB, vmA],
      [
        new Reconcile('vm-b', { where: { nth: 1 }, what: { kind: 'writer' } }),
        new Delete('vm-b'),
        new OtherState('vm-b'),
        new Reconcile('vm-b', { where: { nth: 1 }, what: { kind: 'foreign', what: 'take-persisted-vmid' } }),
        new Reconcile('vm-a', { where: { nth: 1 }, what: { kind: 'crash' } }),
      ],
    );
  });

  it('F11: as F10, but another user takes the VMID (no marker): a VM with another SMBIOS UUID is not ours -> the VMID is given up', async () => {
    await runSchedule(
      'token',
      [vmB, vmA],
      [
        new Reconcile('vm-b', { where: { nth: 1 }, what: { kind: 'writer' } }),
        new Delete('vm-b'),
        new OtherState('vm-b'),
        new Reconcile('vm-b', { where: { nth: 3 }, what: { kind: 'foreign', what: 'take-persisted-vmid' } }),
        new Reconcile('vm-a', { where: { nth: 1 }, what: { kind: 'crash' } }),
      ],
    );
  });

  it('F15: a resize applied whose answer is lost, twice -> its concurrency slot is given back; the other VMs of the node are not held for ever', async () => {
    await runSchedule(
      'password',
      [
        new Apply('vm-c', { cpu: 1, memory: '1Gi', powerState: 'stopped' }),
        new Apply('vm-b', { cpu: 1, memory: '1Gi', powerState: 'stopped' }),
        vmA,
      ],
      [
        new Fault('PUT resize is applied, then its answer is lost (connection reset) x2', {
          kind: 'reply-lost',
          method: 'PUT',
          path: '/nodes/{node}/qemu/{vmid}/resize',
          count: 2,
        }),
        new Converge('vm-c'),
        new Converge('vm-b'),
      ],
    );
  });

  it('F16: our dead clone placeholder destroyed after the state was lost, its VMID then taken by another user -> a new VMID, not a VMIDConflict for good', async () => {
    await runSchedule(
      'password',
      [vmB],
      [
        new Fault("the qmclone worker dies at its end (PVE's placeholder stays)", {
          kind: 'task',
          type: 'qmclone',
          action: 'die',
          at: 'end',
        }),
        new Reconcile('vm-b', { where: { step: 'external-gone' }, what: { kind: 'crash' } }),
        new LoseState(),
        new Reconcile('vm-b'),
        new Foreign('look-alike', 'vm-a'),
        new Heal(0),
      ],
    );
  });
  it('F17: two state files manage the VM of a userData snippet -> they render the same file; no turns at cicustom', async () => {
    await runSchedule(
      'token',
      [vmC, vmA],
      [
        new OtherState('vm-c'),
        new Reconcile('vm-a'),
        new Apply('vm-b', { cpu: 2, memory: '1Gi', powerState: 'running' }),
        new Reconcile('vm-c'),
      ],
    );
  });

  it('F18: deleted through one state file, applied again through the other -> the deleting resource leaves the new VM alone', async () => {
    const destroy = { method: 'DELETE', path: '/nodes/{node}/qemu/{vmid}' } as const;
    await runSchedule(
      'token',
      [vmB],
      [
        new Apply('vm-a', { cpu: 1, memory: '2Gi', powerState: 'running' }),
        new OtherState('vm-a'),
        new Converge('vm-b'),
        new Delete('vm-a'),
        new Fault('DELETE destroy is applied, then its answer is lost (connection reset) x1', {
          kind: 'reply-lost',
          ...destroy,
          count: 1,
        }),
        new Fault('task qmstart fails at start x1', {
          kind: 'task',
          type: 'qmstart',
          action: 'fail',
          at: 'start',
          message: LOCK_TIMEOUT,
          count: 1,
        }),
        new Apply('vm-a', { cpu: 1, memory: '1Gi', powerState: 'stopped' }),
        new Fault("DELETE destroy answers 500 'can't lock file' x3", {
          kind: 'request',
          ...destroy,
          status: 500,
          message: "can't lock file '/var/lock/pve-manager/pve-storage-local-lvm' - got timeout",
          count: 3,
        }),
        new Apply('vm-c', { cpu: 1, memory: '2Gi' }),
      ],
    );
  });

  it('F19: the state is lost while a create on site-2 is in flight, then the manifest says site-1 -> its VM on site-2 is followed there', async () => {
    await runSchedule(
      'token',
      [vmB, new Apply('vm-c', { cpu: 1, memory: '1Gi', site: 'site-2' }), vmA],
      [new Reconcile('vm-c'), new LoseState(), vmC, new Reconcile('vm-a')],
      { strict: true },
    );
  });

  it("F20: moving to site-2 while another state file made the resource's VM there anew -> the recorded move is not taken as arrived while the source is still there unlocked; the VM is migrated, one VM", async () => {
    await runSchedule(
      'password',
      [vmA],
      [
        vmB,
        new Reconcile('vm-b'),
        new Apply('vm-b', { cpu: 1, memory: '1Gi', site: 'site-2' }),
        site2Outage,
        new OtherState('vm-b'),
        new Reconcile('vm-a'),
      ],
    );
  });

  it('F21: a create on site-2 crashes before its status is written, then the manifest says site-1 -> one VM', async () => {
    await runSchedule(
      'password',
      [vmB, new Apply('vm-a', { cpu: 1, memory: '1Gi', site: 'site-2' })],
      [
        new Reconcile('vm-a', { where: { step: 'create-issued' }, what: { kind: 'crash' } }),
        vmA,
        new TwoWriters('vm-a', 'vm-a'),
      ],
      { strict: true },
    );
  });

  it("F22: a create's worker died (PVE's placeholder stays), then the resource is moved to site-2 -> the placeholder is cleared and the VM made, not PlacementChangeRefused for good", async () => {
    await runSchedule(
      'password',
      [vmA],
      [
        new Fault("the qmcreate worker dies at its start (PVE's placeholder stays)", {
          kind: 'task',
          type: 'qmcreate',
          action: 'die',
          at: 'start',
        }),
        vmC,
        new Reconcile('vm-c'),
        new Move('vm-c'),
        new TwoWriters('vm-a', 'vm-a'),
      ],
    );
  });

  it('F33: the process dies right after sending a clone, the resource is moved to site-2, and the provider restarts -> the move is recorded and made, not planned for ever', async () => {
    await runSchedule(
      'password',
      [vmB, vmC],
      [
        new Reconcile('vm-b', { where: { step: 'create-issued' }, what: { kind: 'crash' } }),
        new Move('vm-b'),
        new Restart(),
      ],
    );
  });

  it("F23: migrated, then another user takes the source's VMID on site-1 before the arrival is seen -> the resource follows its VM, and no condition tells the operator to destroy that user's VM", async () => {
    await runSchedule(
      'password',
      [vmA, vmB],
      [
        new Reconcile('vm-a'),
        new Apply('vm-a', { cpu: 1, memory: '1Gi', site: 'site-2' }),
        new Reconcile('vm-a'),
        new Reconcile('vm-a'),
        new Foreign('take-persisted-vmid', 'vm-a'),
        new Reconcile('vm-a', { where: { nth: 1 }, what: { kind: 'crash' } }),
      ],
    );
  });

  it('F24: a crash right after remote_migrate answered, then the spec goes back to site-1 before the arrival is seen -> one VM', async () => {
    await runSchedule(
      'password',
      [vmA, vmB],
      [
        new Reconcile('vm-a'),
        new Apply('vm-a', { cpu: 1, memory: '1Gi', site: 'site-2' }),
        new Reconcile('vm-a'),
        new Reconcile('vm-a', { where: { step: 'update-remote-migrate' }, what: { kind: 'crash' } }),
        vmA,
        new Reconcile('vm-a', { where: { nth: 1 }, what: { kind: 'crash' } }),
      ],
      { strict: true },
    );
  });

  it("F25: a move refused (password credentials on site-1) leaves vm-c's VM on site-2, its spec on site-1 -> its VMID is not held on site-1, where two state files' duplicates of vm-b settle on one VM", async () => {
    await runSchedule(
      'password',
      [new Apply('vm-c', { cpu: 1, memory: '1Gi', site: 'site-2' }), vmB],
      [new Reconcile('vm-c'), new OtherState('vm-b'), new Move('vm-c')],
      { strict: true },
    );
  });

  it('F26: a move whose VMID is taken on the target is refused (a VM keeps its VMID, so no marker ever names another one), with another state file around -> one VM', async () => {
    await runSchedule(
      'token',
      [vmA],
      [
        new Apply('vm-b', { cpu: 1, memory: '1Gi', powerState: 'stopped', site: 'site-2' }),
        new Reconcile('vm-a'),
        new Reconcile('vm-a'),
        new Reconcile('vm-b'),
        new Reconcile('vm-a'),
        new Move('vm-b'),
        new Reconcile('vm-a'),
        new Reconcile('vm-b'),
        new Reconcile('vm-b', { where: { nth: 4 }, what: { kind: 'foreign', what: 'next-id' } }),
        new OtherState('vm-b'),
      ],
      { strict: true },
    );
  });

  it("F28: the state lost while vm-b's clone ran, a look-alike of vm-a at the same VMID on site-1, then vm-b's spec moved to site-1 while it adopted its VM on site-2 -> the site the VMID is on survives the re-apply, and the VM moves (no VMIDConflict for good)", async () => {
    await runSchedule(
      'password',
      [new Apply('vm-b', { cpu: 1, memory: '1Gi', site: 'site-2' }), vmA],
      [
        new Foreign('look-alike', 'vm-a'),
        new Reconcile('vm-b', { where: { step: 'update-reserve-site-move' }, what: { kind: 'writer' } }),
        new LoseState(),
        new Reconcile('vm-b', {
          where: { nth: 3 },
          what: { kind: 'edit', edit: { cpu: 1, memory: '1Gi', site: 'site-1' } },
        }),
        new Delete('vm-a'),
      ],
      { strict: true },
    );
  });

  // Two state files' clones of vm-b run at once on site-1 (a stalled qmclone: neither is marked
  // complete when the other looks), then vm-b's manifest moves it to site-2.
  const twinClones = [
    new Fault('qmclone stalls', { kind: 'task', type: 'qmclone', action: 'stall' }),
    new OtherState('vm-b'),
    new Reconcile('vm-b'),
  ];
  const retired = (journal: string[]) =>
    assert.ok(
      journal.some((l) => /vm-b ext=101 step=RetiringDuplicate/.test(l)),
      `VM 101 was never retired as VM 100's duplicate:\n${journal.join('\n')}`,
    );

  it("F35: two state files' clones of vm-b on site-1, then a move to site-2 where VMID 100 is taken -> this state's VM 101 is retired before it moves, both follow VM 100 and the move is refused: one VM", async () => {
    const res = await runSchedule(
      'password',
      [vmC, new Apply('vm-b', { cpu: 1, memory: '2Gi' }), new Apply('vm-a', { cpu: 1, memory: '1Gi', site: 'site-2' })],
      [...twinClones, new Apply('vm-b', { cpu: 1, memory: '2Gi', site: 'site-2' }), new Heal(0)],
      { strict: true },
    );
    retired(res.journal);
  });

  it('F35b: the same twins and move, VMID 100 free on site-2 -> one VM, moved to site-2 (passed before the fix too)', async () => {
    const res = await runSchedule(
      'token',
      [vmC, new Apply('vm-b', { cpu: 1, memory: '2Gi' })],
      [...twinClones, new Apply('vm-b', { cpu: 1, memory: '2Gi', site: 'site-2' }), new Heal(0)],
      { strict: true },
    );
    retired(res.journal);
    assert.ok(res.moves.migrated >= 1, `expected a migration, got ${JSON.stringify(res.moves)}`);
  });
  it('F38: a create whose worker died, a move to site-2, the placeholder cleared, another user takes the VMID on site-1 -> the resource goes to site-2 with the VMID given up for good; one VM, on site-2 (no PlacementChangeRefused for good)', async () => {
    await runSchedule(
      'password',
      [vmA],
      [
        new Fault('the qmcreate worker dies at its start', {
          kind: 'task',
          type: 'qmcreate',
          action: 'die',
          at: 'start',
        }),
        new Reconcile('vm-a'),
        new Move('vm-a'),
        // The create's task failed; then its placeholder is destroyed (root@pam); then our destroy's end.
        new Reconcile('vm-a'),
        new Reconcile('vm-a'),
        new Reconcile('vm-a'),
        // VMID 100 on site-1 is free again, and taken, while the resource goes to site-2 (or tried
        // a create on site-1, which refused site-2's node, and kept VMID 100 for its own).
        new Foreign('next-id', 'vm-a'),
        new Reconcile('vm-a'),
      ],
      { strict: true },
    );
  });

  it('F39: a move to site-2, another user destroys the VM while the move is recorded -> the recorded move is dropped and the VM made on site-2 (no NodeNotFound on site-1 for good)', async () => {
    await runSchedule(
      'password',
      [new Apply('vm-a', { cpu: 1, memory: '1Gi', powerState: 'stopped' })],
      [
        new Converge('vm-a'),
        // The other user's destroy holds the VM's lock until healed: the move is recorded and sent meanwhile.
        new Fault('task qmdestroy hangs until healed', { kind: 'task', type: 'qmdestroy', action: 'stall' }),
        new Move('vm-a'),
        new Reconcile('vm-a', { where: { nth: 1 }, what: { kind: 'foreign', what: 'destroy' } }),
        new Reconcile('vm-a'),
        new Heal(0),
      ],
      { strict: true },
    );
  });

  it("F40: a replacement recorded (no new VM yet), then the spec back on the old site, where the new site holds another resource at the old VMID -> the replacement is dropped; the old VM stays the resource's", async () => {
    await runSchedule(
      'password',
      [vmB, new Apply('vm-a', { cpu: 1, memory: '1Gi', site: 'site-2' })],
      [
        // vm-b holds VMID 100 on site-1, vm-a VMID 100 on site-2.
        new Converge('vm-b'),
        new Converge('vm-a'),
        // To site-1, where no remote migration can go with `password`: a replacement, recorded.
        new Replace('vm-a'),
        new Reconcile('vm-a'),
        // And back to site-2 before a new VM was made.
        new Replace('vm-a'),
        new Reconcile('vm-a'),
      ],
      { strict: true },
    );
  });

  it('F41: our VM destroyed by another user, its VMID taken by them, then a move to site-2 -> ours is gone from the source; made on site-2 (no PlacementChangeRefused for good)', async () => {
    await runSchedule(
      'token',
      [new Apply('vm-a', { cpu: 1, memory: '1Gi', powerState: 'stopped' })],
      [
        new Converge('vm-a'),
        new Foreign('destroy', 'vm-a'),
        // Time for the destroy (it holds the VM's lock two simulated seconds) to end.
        new Apply('vm-b', { cpu: 1, memory: '1Gi', powerState: 'stopped' }),
        new Converge('vm-b'),
        new Foreign('take-persisted-vmid', 'vm-a'),
        new Move('vm-a'),
        new Reconcile('vm-a'),
      ],
      { strict: true },
    );
  });

  it("F42: a move recorded, our VM destroyed by another user and its VMID taken by them before the move is sent -> the other user's VM is never migrated; ours is made on site-2", async () => {
    await runSchedule(
      'token',
      [new Apply('vm-a', { cpu: 1, memory: '1Gi', powerState: 'stopped' })],
      [
        new Converge('vm-a'),
        new Move('vm-a'),
        new Reconcile('vm-a', {
          where: { step: 'update-reserve-site-move' },
          what: { kind: 'foreign', what: 'destroy' },
        }),
        // Time for the destroy to end.
        new Apply('vm-b', { cpu: 1, memory: '1Gi', powerState: 'stopped' }),
        new Converge('vm-b'),
        new Foreign('take-persisted-vmid', 'vm-a'),
        new Reconcile('vm-a'),
      ],
      { strict: true },
    );
  });

  it('F37: a crash before the create was sent, a move to site-2, another user takes the VMID there, a move back -> the VMID, which names nothing on site-2, is given up; one VM, on site-1 (no PlacementChangeRefused for good)', async () => {
    await runSchedule(
      'password',
      [vmA],
      [
        new Reconcile('vm-a', { where: { nth: 5 }, what: { kind: 'crash' } }),
        new Move('vm-a'),
        new Foreign('take-persisted-vmid', 'vm-a'),
        new Reconcile('vm-a'),
        new Move('vm-a'),
      ],
      { strict: true },
    );
  });

  it("F45: a create's worker dies at its start, the process crashes once the create was sent (no status written), a move to site-2 -> the placeholder is cleared (root@pam) and the VM made on site-2 (no CreateInterrupted for good, no placeholder left)", async () => {
    await runSchedule(
      'password',
      [vmA],
      [
        new Fault("the qmcreate worker dies at its start (PVE's placeholder stays)", {
          kind: 'task',
          type: 'qmcreate',
          action: 'die',
          at: 'start',
        }),
        new Reconcile('vm-a', { where: { step: 'create-issued' }, what: { kind: 'crash' } }),
        new Move('vm-a'),
      ],
      { strict: true },
    );
  });

  it("F46: a replacement's new VM made on site-1, then the spec back on site-2 where the old VM is -> the new VM is discarded and the old one kept (not two VMs of one resource across the sites)", async () => {
    await runSchedule(
      'password',
      [vmC, vmA, new Apply('vm-b', { cpu: 1, memory: '1Gi', site: 'site-2' })],
      [
        new Reconcile('vm-b'),
        // To site-1 (no remote migration can go there with `password`): a replacement.
        new Move('vm-b', 'CreateThenDelete'),
        new Converge('vm-a'),
        new Reconcile('vm-a'),
        new Reconcile('vm-b', {
          where: { step: 'update-reserve-site-move' },
          what: { kind: 'foreign', what: 'take-persisted-vmid' },
        }),
        // The new VM is cloned on site-1 (VMID 101: vm-a holds 100 there).
        new Reconcile('vm-b'),
        // And the spec goes back to site-2, where the old VM (100) is.
        new Move('vm-b'),
      ],
      { strict: true },
    );
  });

  it("F48: a replacement's new VM whose create worker died (PVE's placeholder stays), then the spec back on the old site -> the placeholder is cleared (root@pam) before the replacement is dropped; the old VM kept", async () => {
    await runSchedule(
      'password',
      [vmA, new Apply('vm-c', { cpu: 1, memory: '1Gi', site: 'site-2' })],
      [
        new Converge('vm-c'),
        new Converge('vm-a'),
        // To site-1 (no remote migration can go there with `password`): a replacement.
        new Move('vm-c', 'CreateThenDelete'),
        new Reconcile('vm-c'),
        new Fault("the qmcreate worker dies at its start (PVE's placeholder stays)", {
          kind: 'task',
          type: 'qmcreate',
          action: 'die',
          at: 'start',
        }),
        new Reconcile('vm-c'),
        new Reconcile('vm-c'),
        // And the spec goes back to site-2, where the old VM is.
        new Move('vm-c'),
      ],
      { strict: true },
    );
  });

  it("F47: a create held by PVE as the process died, then a move to the other site -> PVE applies it within its bound during the move's wait, and that VM moves; one VM at the end", async () => {
    await runSchedule(
      'token',
      [vmA],
      [
        new Fault('POST create is held unanswered until healed, then applied (the client gave up)', {
          kind: 'applied-late',
          method: 'POST',
          path: '/nodes/{node}/qemu',
          delayMs: 365 * 24 * 3600_000,
          count: 1,
        }),
        new Reconcile('vm-a'),
        new Move('vm-a', 'CreateThenDelete'),
        // One converge runs for minutes of the clock: the hold's bound (20 s) is kept inside it.
        new Converge('vm-a'),
        new Restart(),
      ],
      { strict: true },
    );
  });

  it("F50: a resize whose end the other process saw -> this process's slot for it is released at the resource's next reconcile; the node's next resize is not held for good", async () => {
    await runSchedule(
      'password',
      [
        new Apply('vm-b', { cpu: 1, memory: '1Gi', site: 'site-2' }),
        new Apply('vm-a', { cpu: 1, memory: '1Gi', powerState: 'stopped', site: 'site-2' }),
      ],
      [
        new Reconcile('vm-b'),
        new Reconcile('vm-a'),
        // vm-a's resize sent by this process (p0)...
        new Reconcile('vm-a'),
        vmC,
        new Reconcile('vm-b'),
        new Fault(
          'task resize fails at start x1',
          {
            kind: 'task',
            type: 'resize',
            action: 'fail',
            at: 'start',
            message: "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout",
            count: 1,
          },
          undefined,
          'site-2',
        ),
        // ...and seen to its end by p1, which takes vm-a on to Ready.
        new TwoWriters('vm-c', 'vm-a'),
        new Reconcile('vm-b', { where: { step: 'update-reserve-site-move' }, what: { kind: 'writer' } }),
        new OtherState('vm-a'),
      ],
      { strict: true },
    );
  });

  it('F51: a create hanging on site-2, the manifest back on site-1, the state lost and the VM made on site-1 -> once the hanging create ends, the later of the two VMs goes; one VM', async () => {
    await runSchedule(
      'token',
      [new Apply('vm-c', { cpu: 1, memory: '1Gi', site: 'site-2' }), vmB],
      [
        new Fault(
          'task qmcreate hangs until healed',
          { kind: 'task', type: 'qmcreate', action: 'stall' },
          undefined,
          'site-2',
        ),
        new Reconcile('vm-c'),
        new Apply('vm-c', { cpu: 1, memory: '1Gi' }),
        new LoseState(),
        new Reconcile('vm-c'),
        new Reconcile('vm-c'),
      ],
      { strict: true },
    );
  });

  it("F53: two state files, the VM destroyed by one while the other's create task is still recorded, the manifest moved -> the deleting resource follows its task on the site it was sent to and adopts nothing elsewhere; it goes, the other resource's VM stays", async () => {
    await runSchedule(
      'token',
      [
        new Apply('vm-b', { cpu: 1, memory: '1Gi', site: 'site-2' }),
        new Apply('vm-a', { cpu: 1, memory: '1Gi', site: 'site-2' }),
      ],
      [
        new OtherState('vm-a'),
        new Reconcile('vm-a', { where: { step: 'preflight-passed' }, what: { kind: 'crash' } }),
        new Delete('vm-a'),
        new Reconcile('vm-a', { where: { nth: 3 }, what: { kind: 'writer' } }),
        new Move('vm-a'),
      ],
      { strict: true },
    );
  });

  it("F59: vm-b's clone on site-1 stalls (no marker yet), the manifest moves to site-2, where another state file's apply makes vm-b at 100 -> before the move, the twin on site-2 is settled by the rule both runtimes keep (here ours stays, the twin goes), then ours moves: one VM, on site-2", async () => {
    await runSchedule(
      'password',
      [vmB],
      [
        new Fault('qmclone stalls', { kind: 'task', type: 'qmclone', action: 'stall' }),
        new Reconcile('vm-b'),
        new Apply('vm-b', { cpu: 1, memory: '1Gi', site: 'site-2' }),
        new OtherState('vm-b'),
        new Heal(0),
      ],
      { strict: true },
    );
  });

  it("F61: vm-c (site-1/100) moves to site-2 by a replacement while another state file's apply adopts it there from site-1; another user takes VMID 100 on site-1 once ours has moved -> the other state file tells that unmarked VM from its own by the SMBIOS UUID it recorded at the adoption, and follows its VM to site-2", async () => {
    await runSchedule(
      'password',
      [vmC],
      [
        new Reconcile('vm-c'),
        new Replace('vm-c'),
        new OtherState('vm-c'),
        new Reconcile('vm-c', {
          where: { step: 'update-reserve-replacement' },
          what: { kind: 'foreign', what: 'take-persisted-vmid' },
        }),
        new Reconcile('vm-c', {
          where: { step: 'update-remote-migrate' },
          what: { kind: 'foreign', what: 'take-persisted-vmid' },
        }),
      ],
      { strict: true },
    );
  });

  it("F62: another state file's process clones vm-b (101) on site-1; this one adopts it, moves it to site-2 and back, then to site-2 again while the other process, its manifest on site-2 too, waits for the migration -> the other process reads the VM that arrived at 101 again (its row changed since it read the migration's `lock: create` target) and follows it there; it makes no second VM", async () => {
    await runSchedule(
      'token',
      [new Apply('vm-a', { cpu: 1, memory: '1Gi', site: 'site-2' }), vmB],
      [
        new Move('vm-b'),
        new OtherState('vm-a'),
        new OtherState('vm-b'),
        new Reconcile('vm-b', { where: { nth: 1 }, what: { kind: 'edit', edit: { cpu: 1, memory: '1Gi' } } }),
        new Converge('vm-b'),
        new Delete('vm-a'),
        new Replace('vm-b'),
        vmA,
      ],
      { strict: true },
    );
  });

  it("F63: vm-c (site-2/100) is to be replaced on site-1 (password credentials: no migration there); vm-b's reconciles let time pass; the process dies once the new VM's create is sent, and the spec goes back to site-2 -> the new VM, found with the resource's marker, is known made and discarded; the old VM stays: one VM", async () => {
    await runSchedule(
      'password',
      [
        new Apply('vm-c', { cpu: 1, memory: '1Gi', site: 'site-2' }),
        new Apply('vm-b', { cpu: 1, memory: '1Gi', site: 'site-2' }),
      ],
      [
        new Reconcile('vm-c'),
        new Replace('vm-c'),
        new Converge('vm-b'),
        new Reconcile('vm-b'),
        new Reconcile('vm-c'),
        new Reconcile('vm-c', { where: { step: 'create-issued' }, what: { kind: 'crash' } }),
        new Replace('vm-c'),
      ],
      { strict: true },
    );
  });

  it("F64: vm-c (site-2/100) is being replaced on site-1 (password credentials: no migration there) when its manifest drops the replacement policy, and another state file's process holds the old VM -> that process, whose own move cannot be made, leaves the replacement's new VM alone (it destroyed it as a later twin, and the replacement made it again, for good); the replacement completes and both follow the new VM", async () => {
    await runSchedule(
      'password',
      [new Apply('vm-c', { cpu: 1, memory: '1Gi', site: 'site-2' })],
      [
        new OtherState('vm-c'),
        new Replace('vm-c'),
        new Reconcile('vm-c'),
        new Reconcile('vm-c'),
        new Apply('vm-b', { cpu: 1, memory: '1Gi' }),
        new Apply('vm-c', { cpu: 1, memory: '1Gi', site: 'site-2' }),
        new Move('vm-c'),
        vmA,
        new Converge('vm-a'),
      ],
      { strict: true },
    );
  });

  it("F65: another state file's process clones vm-b (100) on site-1; this one adopts it and moves it to site-2, vm-a is made at site-1/100, and vm-b's manifest goes back to site-1 -> the other process, finding vm-a's VM at its VMID, looks for its own by its marker on the other site before making one, and follows it there: no second VM", async () => {
    await runSchedule(
      'token',
      [new Apply('vm-a', { cpu: 1, memory: '1Gi', powerState: 'stopped' }), vmB],
      [
        new OtherState('vm-b'),
        new Reconcile('vm-b'),
        new Apply('vm-b', { cpu: 1, memory: '1Gi', site: 'site-2' }),
        new Converge('vm-b'),
        new Converge('vm-a'),
        new Move('vm-b'),
      ],
      { strict: true },
    );
  });

  it("F67: vm-c (a cloud-init snippet on site-1's `local`) is moved to site-2's second node r630-02 while its import runs -> the remote migration lands on the target endpoint's node (r630-01), and the migration inside site-2 that follows takes the snippet to r630-02 first: PVE migrates drives, not the files `cicustom` names, and the config named a file r630-02 had not got", async () => {
    await runSchedule(
      'password',
      [vmC, vmA],
      [
        new Reconcile('vm-c'),
        new NodeMove('vm-c'),
        new Reconcile('vm-a', { where: { nth: 1 }, what: { kind: 'foreign', what: 'take-persisted-vmid' } }),
      ],
      { strict: true, nodes: true },
    );
  });

  it('F67, inside site-2: vm-c made on r630-01, then moved to r630-02 and back, a crash after each migration was sent -> its snippet is on the node it is on each time (migrated first, or found moved)', async () => {
    await runSchedule(
      'token',
      [new Apply('vm-c', { cpu: 1, memory: '1Gi', site: 'site-2', node: 'r630-01' })],
      [
        new Converge('vm-c'),
        new NodeMove('vm-c'),
        new Reconcile('vm-c', { where: { step: 'update-migrate' }, what: { kind: 'crash' } }),
        new Converge('vm-c'),
        new NodeMove('vm-c'),
        new Reconcile('vm-c', { where: { step: 'update-migrate' }, what: { kind: 'crash' } }),
        new Converge('vm-c'),
      ],
      { strict: true, nodes: true },
    );
  });

  it("F75: two state files hold vm-c's VM on site-2; it is migrated to r630-02 (the second writer reconciling it meanwhile, which records r630-01 as the node left) and back to r630-01 -> the copy on the node left is not removed while the VM is locked `migrate`: removed then, the VM came back to a node whose snippet was gone", async () => {
    await runSchedule(
      'password',
      [vmC],
      [new Move('vm-c'), new OtherState('vm-c'), new NodeMove('vm-c', { kind: 'writer' }), new NodeMove('vm-c')],
      { strict: true, nodes: true },
    );
  });

  it("F76: vm-b, cloned on site-1, is moved to site-2 by a remote migration that keeps its VMID, and another user destroys it there -> it is made again on site-2 at that VMID and looked for there: the site recorded with the VMID was written only when the VMID changed, so it still named site-1, which F74's rule then preferred, and the new clone's task was read on a node site-1 has not got, for good", async () => {
    await runSchedule(
      'token',
      [vmB, vmC],
      [
        new TwoWriters('vm-c', 'vm-b'),
        new NodeMove('vm-b'),
        new Reconcile('vm-b'),
        new TwoWriters('vm-b', 'vm-c'),
        new Reconcile('vm-b'),
        new Foreign('destroy', 'vm-b'),
      ],
      { strict: true, nodes: true },
    );
  });

  it('F77: a `qm migrate` of vm-a inside site-2 whose worker dies at its second wait (phase 1: `lock: migrate` set, its copy begun) -> no task holds the lock, which PVE never clears: reported LockWithoutTask with the fix (waited for as any lock, the resource stayed Locked for good, and `apply` until its timeout); the operator frees the copy left on the target and unlocks, and the move is made', async () => {
    await runSchedule(
      'password',
      [new Apply('vm-a', { cpu: 1, memory: '1Gi', site: 'site-2', node: 'r630-01' })],
      [new Reconcile('vm-a'), new NodeMove('vm-a', undefined, 2), new Reconcile('vm-a')],
      { strict: true, nodes: true },
    );
  });

  it("F77: vm-c is moved inside site-2 twice, each `qm migrate` worker dying at its second wait, then to site-1 -> the move to the other site waited on the dead lock for good (its own wait, not observe's); reported LockWithoutTask there too", async () => {
    await runSchedule(
      'token',
      [vmC, vmA],
      [
        new NodeMove('vm-c', undefined, 2),
        new NodeMove('vm-c', undefined, 2),
        new Move('vm-c'),
        new Fault('task qmcreate fails at start x1', {
          kind: 'task',
          type: 'qmcreate',
          action: 'fail',
          at: 'start',
          count: 1,
        }),
      ],
      { strict: true, nodes: true },
    );
  });

  it("F78: another user's backup of vm-a holds `lock: backup` while its vzdump runs, for longer than the provider's confirmation of a dead worker's lock -> never reported LockWithoutTask (the simulator's lock fault had no task behind it, a state PVE cannot produce, and so a live backup looked dead)", async () => {
    await runSchedule(
      'token',
      [vmA],
      [new Converge('vm-a'), new Foreign('backup', 'vm-a'), new Converge('vm-a'), new Heal(0), new Reconcile('vm-a')],
      { strict: true },
    );
  });

  it("F80: two state files hold vm-c's VM on site-2's r630-02; this one migrates it to r630-01 (its copy on r630-02 goes), the spec goes back to r630-02, the other one's migration is refused, this process restarts and migrates it back -> the other state file's pending removal of the copy on r630-02 waits for the lock PVE shows now, not the lock its list showed before the migration back was sent: removed then, the VM arrived on a node whose snippet was gone", async () => {
    const onR2 = { cpu: 1, memory: '1Gi', site: 'site-2', node: 'r630-02' } as const;
    await runSchedule(
      'password',
      [new Apply('vm-c', onR2)],
      [
        new OtherState('vm-c'),
        new NodeMove('vm-c'),
        new Converge('vm-c'),
        new Apply('vm-c', onR2),
        new OtherState('vm-c'),
        new Restart(),
        new Heal(0),
      ],
      { strict: true, nodes: true },
    );
  });

  it("F79: vm-b's clone at VMID 100 is confirmed, another user destroys it while the provider configures it, and another user's create at 100 dies at its start (its `lock: create` placeholder stays, with no marker) -> that placeholder proves vm-b's VM is not at 100 (PVE makes a VM only where none is), so the VMID is given up and vm-b made again, instead of VMIDConflict for good", async () => {
    await runSchedule(
      'password',
      [vmB, vmC],
      [
        new Reconcile('vm-b', { where: { step: 'connected' }, what: { kind: 'foreign', what: 'take-persisted-vmid' } }),
        new Reconcile('vm-b', { where: { nth: 2 }, what: { kind: 'foreign', what: 'destroy' } }),
        new Fault("the qmcreate worker dies at its start (PVE's placeholder stays)", {
          kind: 'task',
          type: 'qmcreate',
          action: 'die',
          at: 'start',
        }),
        new Foreign('take-persisted-vmid', 'vm-b'),
      ],
    );
  });

  it("F81: vm-c's `qm migrate` inside site-2 dies (LockWithoutTask reported), its manifest then goes to site-1, and the operator unlocks it in the settle -> the report is taken back as soon as the lock is seen gone: left standing while the move to site-1 held the VM's new `migrate` lock, it told an operator to unlock a running migration", async () => {
    await runSchedule(
      'token',
      [new Apply('vm-c', onR1), new Apply('vm-b', onR1), new Apply('vm-a', onR1)],
      [
        new Reconcile('vm-c'),
        new NodeMove('vm-c', undefined, 2),
        new Apply('vm-c', { cpu: 1, memory: '1Gi' }),
        new Converge('vm-a'),
      ],
      { strict: true, nodes: true },
    );
  });

  it("F74: vm-a's first reconcile fails (an outage) with its status on site-1, its manifest moves to site-2, where the other state file makes its VM, and this state file adopts that VM and dies before its status write -> the site written with the VMID is where the VM is looked for: the status, written before any VM, sent it to site-1, where another user's look-alike at that VMID refused the resource's move for good", async () => {
    await runSchedule(
      'password',
      [vmA],
      [
        new Foreign('look-alike', 'vm-a'),
        new Fault(
          'outage (connections reset) for the next 1 command(s)',
          { kind: 'unavailable', ms: 365 * 24 * 3600_000, mode: 'reset' },
          1,
        ),
        new Reconcile('vm-a'),
        new NodeMove('vm-a'),
        new Fault(
          'PUT resize is held unanswered until healed, then applied (the client gave up)',
          {
            kind: 'applied-late',
            method: 'PUT',
            path: '/nodes/{node}/qemu/{vmid}/resize',
            delayMs: 365 * 24 * 3600_000,
            count: 1,
          },
          undefined,
          'site-2',
        ),
        new OtherState('vm-a'),
        new Reconcile('vm-a'),
      ],
      { strict: true, nodes: true },
    );
  });

  it("F72: vm-a is moved to site-2 (a crash after remote_migrate was sent), then back to site-1, and HA migrates it inside site-2 before the move back is sent -> the move is sent from the node the VM is on now: read on the node recorded with the move, its config 'does not exist' and the move failed for good", async () => {
    await runSchedule(
      'token',
      [vmA],
      [
        new Move('vm-a'),
        new Reconcile('vm-a', { where: { step: 'update-remote-migrate' }, what: { kind: 'crash' } }),
        new Move('vm-a'),
        new Reconcile('vm-a'),
        new Foreign('migrate', 'vm-a'),
      ],
      { strict: true, nodes: true },
    );
  });

  it("F73: vm-c's create on site-2's r630-02 is applied but its answer lost, HA moves the VM to r630-01, and the manifest goes to site-1 (refused: password credentials there) -> the VM's snippet follows it to r630-01 although no status recorded that its config names one", async () => {
    await runSchedule(
      'password',
      [vmC],
      [
        new Fault(
          'POST create is applied, then its answer is lost (connection reset) x1',
          { kind: 'reply-lost', method: 'POST', path: '/nodes/{node}/qemu', count: 1 },
          undefined,
          'site-2',
        ),
        new NodeMove('vm-c', { kind: 'crash' }),
        new Foreign('migrate', 'vm-c'),
        new Apply('vm-c', { cpu: 1, memory: '1Gi' }),
      ],
      { strict: true, nodes: true },
    );
  });

  it("F71: vm-c (its snippet on site-2's `local`) is migrated from r630-01 to r630-02 by the provider (a crash after it was sent), a reconcile crashes before its status is written, and HA moves the VM back to r630-01 -> the snippet's copy on r630-01 is removed only after a status naming r630-02 was written: removed at once, the status still named r630-01, the VM back there named a file that was gone, and no node change was seen again", async () => {
    await runSchedule(
      'password',
      [new Apply('vm-c', { cpu: 1, memory: '1Gi', site: 'site-2', node: 'r630-01' }), vmB, vmA],
      [
        new Reconcile('vm-c'),
        new NodeMove('vm-c', { kind: 'crash' }),
        new Reconcile('vm-c', { where: { nth: 2 }, what: { kind: 'crash' } }),
        new Foreign('migrate', 'vm-c'),
      ],
      { strict: true, nodes: true },
    );
  });

  it("F69: this state file's vm-c is made on site-2 while the other state file's, made first on site-1, is moved there -> this one retires its own VM for the older twin and follows it to site-2, where the twin's migration source, still on site-1 until the migration ends, is the same VM (one marker, one creation time), no twin: the target is not destroyed under the migration, which then removes its source (no VM was left). A timing case: 10 of 30 runs of this schedule in one process failed before the fix, none of the first 10; so it runs 30 times", async () => {
    for (let i = 0; i < 30; i++)
      await runSchedule(
        'password',
        [new Apply('vm-c', { cpu: 1, memory: '1Gi', powerState: 'stopped' })],
        [
          new Foreign('look-alike', 'vm-a'),
          new Fault('task qmcreate hangs until healed', { kind: 'task', type: 'qmcreate', action: 'stall' }),
          new OtherState('vm-c'),
          new Move('vm-c'),
          new Reconcile('vm-c'),
          new Foreign('take-persisted-vmid', 'vm-a'),
        ],
        { strict: true },
      );
  });

  it("F68: vm-c (its snippet on site-2's `local`) is moved to site-1 while its import runs on r630-01, and HA (or a person) migrates it to r630-02 before the move is sent -> the move's look at the source, seeing the VM on another node than its status said, takes the snippet there too: were the move refused or failed, the VM would stay on r630-02 naming a file that node had not got", async () => {
    await runSchedule(
      'token',
      [new Apply('vm-c', { cpu: 1, memory: '1Gi', site: 'site-2', node: 'r630-01' }), vmA],
      [
        new Reconcile('vm-c'),
        new Apply('vm-c', { cpu: 1, memory: '1Gi' }),
        new Foreign('migrate', 'vm-c'),
        new Foreign('take-persisted-vmid', 'vm-a'),
      ],
      { strict: true, nodes: true },
    );
  });

  it("F66: another user's create takes vm-b's chosen VMID (site-1/100) as vm-b's clone is sent, and that create's worker dies at its start (its placeholder stays); vm-b's clone is refused, then its manifest moves to site-2 -> the placeholder, another's at a VMID vm-b chose and never confirmed, proves vm-b's VM is not on site-1: it is made on site-2 (it was PlacementChangeRefused for good), and the placeholder is left alone", async () => {
    await runSchedule(
      'password',
      [new Apply('vm-b', { cpu: 1, memory: '1Gi', site: 'site-2' }), vmC],
      [
        new Fault("the qmcreate worker dies at its start (PVE's placeholder stays)", {
          kind: 'task',
          type: 'qmcreate',
          action: 'die',
          at: 'start',
        }),
        new Replace('vm-b'),
        new Reconcile('vm-b', { where: { nth: 5 }, what: { kind: 'foreign', what: 'take-persisted-vmid' } }),
        new Apply('vm-b', { cpu: 1, memory: '1Gi', site: 'site-2' }),
      ],
      { strict: true },
    );
  });

  it("F60: another state file's process clones vm-b (100); this one adopts it and moves it to site-2 (crashing on the way), then the manifest goes back to site-1 -> the other process, its VMID given up while the creation grace kept its ended clone recorded, records that clone's end on site-1 before it follows the VM to site-2, and never looks for the clone's task there", async () => {
    await runSchedule(
      'password',
      [vmC],
      [
        new Apply('vm-b', { cpu: 1, memory: '1Gi' }),
        new OtherState('vm-b'),
        new Reconcile('vm-b'),
        new Move('vm-b'),
        new Reconcile('vm-b'),
        new Reconcile('vm-b', { where: { step: 'preflight-passed' }, what: { kind: 'crash' } }),
        new Reconcile('vm-b'),
        new Move('vm-b'),
      ],
      { strict: true },
    );
  });

  it("F58: another state file's process carries vm-c's create (100) on to its resize; someone destroys the VM and makes another at 100 -> that process's next change (the start it planned) is not sent to the other VM: the list shows other tags there, and it reads the VM in full first", async () => {
    await runSchedule(
      'token',
      [vmC],
      [
        new Reconcile('vm-c'),
        new OtherState('vm-c'),
        new Foreign('destroy', 'vm-c'),
        new Restart(),
        new Foreign('next-id', 'vm-c'),
        new Apply('vm-b', { cpu: 1, memory: '1Gi', powerState: 'running' }),
      ],
      { strict: true },
    );
  });

  it('F57: vm-c adopts the VM another state file made for it on site-2 (100), then moves to site-1 by a replacement while vm-a takes site-1/100 -> the replacement gives the VMID up there and makes its VM at another: a VMID carried to the new site is never a VMIDConflict', async () => {
    await runSchedule(
      'password',
      [new Apply('vm-a', { cpu: 1, memory: '1Gi' }), new Apply('vm-c', { cpu: 1, memory: '1Gi', site: 'site-2' })],
      [new OtherState('vm-c'), new Replace('vm-c'), new Reconcile('vm-a')],
      { strict: true },
    );
  });

  it("F56: another state file's vm-c (site-2/100) is deleted while this one's makes its VM at site-2/100 again -> the twin's removal of the identity's snippet files keeps the file the new VM names: its create, just ended, is listed as `VM 100` until pvestatd's next tick, and a create in flight has no name at all", async () => {
    await runSchedule(
      'token',
      [new Apply('vm-c', { cpu: 1, memory: '1Gi' }), new Apply('vm-a', { cpu: 1, memory: '1Gi' })],
      [
        new Move('vm-c'),
        new OtherState('vm-c'),
        new Delete('vm-c'),
        new Apply('vm-c', { cpu: 1, memory: '1Gi', site: 'site-2' }),
      ],
      { strict: true },
    );
  });

  it("F55: moved to site-2 (the process crashed at reserving the target, its next reconcile sent the move while another process looked), then back to site-1 -> the move back writes the snippet on site-1 again, which the arrival on site-2 removed: the process's memory of its create there no longer stands for the file", async () => {
    await runSchedule(
      'token',
      [new Apply('vm-c', { cpu: 1, memory: '1Gi' })],
      [
        new Converge('vm-c'),
        new Move('vm-c'),
        new Reconcile('vm-c', { where: { nth: 5 }, what: { kind: 'crash' } }),
        new Reconcile('vm-c', { where: { nth: 3 }, what: { kind: 'writer' } }),
        new Move('vm-c'),
      ],
      { strict: true },
    );
  });

  it("F52: another user destroys a VM moments after it became Ready -> the provider makes it again once the creation grace (30 s) is over; settle's last round looks after that grace, not within it", async () => {
    await runSchedule(
      'token',
      [
        new Apply('vm-c', { cpu: 1, memory: '1Gi', powerState: 'stopped' }),
        new Apply('vm-b', { cpu: 1, memory: '1Gi', powerState: 'stopped' }),
      ],
      [
        new Reconcile('vm-b'),
        new Reconcile('vm-c'),
        new Reconcile('vm-c'),
        new Reconcile('vm-c', {
          where: { step: 'update-reserve-site-move' },
          what: { kind: 'foreign', what: 'take-persisted-vmid' },
        }),
        new Foreign('destroy', 'vm-c'),
        new Reconcile('vm-b', { where: { nth: 1 }, what: { kind: 'crash' } }),
      ],
      { strict: true },
    );
  });

  it("a replacement reverted during its step 3 (the new VM Ready, the old one's stop sent and hanging) -> once the stop ends the new VM is discarded and the old one, stopped but whole, kept; one VM at the end", () =>
    revertDuringStep3('qmstop', 'running'));

  it("a replacement reverted while its old VM's destroy (step 3) hangs -> the replacement completes, the new VM is kept and goes to site-2; one VM at the end", () =>
    revertDuringStep3('qmdestroy', 'stopped'));
});

/**
 * vm-c on site-2 is replaced by a VM on site-1 (no remote migration can go there with `password`);
 * once the new VM is Ready, step 3's task on the old VM (`task`: its hard stop when it runs, its
 * destroy when it is stopped) hangs until healed, and meanwhile the spec goes back to site-2.
 */
async function revertDuringStep3(task: 'qmstop' | 'qmdestroy', powerState: 'running' | 'stopped'): Promise<void> {
  await runSchedule(
    'password',
    [new Apply('vm-c', { cpu: 1, memory: '1Gi', powerState, site: 'site-2' })],
    [
      new Converge('vm-c'),
      new Fault(`task ${task} hangs until healed`, { kind: 'task', type: task, action: 'stall' }, undefined, 'site-2'),
      new Move('vm-c', 'CreateThenDelete'),
      new Converge('vm-c'),
      new Move('vm-c'),
      new Reconcile('vm-c'),
      new Reconcile('vm-c'),
      new Heal(0),
      new Reconcile('vm-c'),
    ],
    { strict: true },
  );
}

/**
 * A node of site-2 that loses power (the `node-crash` fault, drawn by the fourth search since the
 * twenty-first session): its workers die where they stand, its VMs stop, and it boots after a
 * command, its `startall` starting only VMs with `onboot`.
 */
describe('fault-search regressions: a node crash', () => {
  it("vm-a's create on r630-01 hangs and the node crashes under it (the qmcreate worker dies, its `lock: create` placeholder stays), then boots -> the provider's dead placeholder is removed and the VM made again; one VM, Ready", async () => {
    const { journal } = await runSchedule(
      'password',
      [new Apply('vm-a', onR1)],
      [
        new Fault(
          'task qmcreate hangs until healed',
          { kind: 'task', type: 'qmcreate', action: 'stall' },
          undefined,
          'site-2',
        ),
        new Reconcile('vm-a'),
        untilStalled,
        crash('r630-01'),
        new Reconcile('vm-a'),
        new Heal(0),
        new Reconcile('vm-a'),
        new Reconcile('vm-a'),
      ],
      { strict: true, nodes: true },
    );
    assert.ok(
      journal.some((l) =>
        /operator: qm unlock 100 && qm destroy 100 --purge on r630-01 .*vm-a reported its create's worker dead/.test(l),
      ),
      journal.join('\n'),
    );
  });

  it('vm-a is Ready on r630-01, which crashes (the VM stops without a shutdown) and boots -> the provider starts it again (no `onboot`: startall leaves it)', async () => {
    const { journal } = await runSchedule(
      'password',
      [new Apply('vm-a', onR1)],
      [new Converge('vm-a'), crash('r630-01', 2), new Reconcile('vm-a'), new Reconcile('vm-a'), new Reconcile('vm-a')],
      { strict: true, nodes: true },
    );
    // Started again by the provider after the boot, not by startall.
    const boot = journal.findIndex((l) => /fault site-2#\d+ is over/.test(l));
    assert.ok(boot > 0 && journal.slice(boot).some((l) => /step=Starting/.test(l)), journal.join('\n'));
  });

  it("another user's backup of vm-a runs on r630-01 when it crashes (the vzdump dies, `lock: backup` stays) -> at the boot startall removes that lock, not the provider, and vm-a is started again", async () => {
    await runSchedule(
      'password',
      [new Apply('vm-a', onR1)],
      [
        new Converge('vm-a'),
        new Foreign('backup', 'vm-a'),
        crash('r630-01'),
        new Reconcile('vm-a'),
        new Reconcile('vm-a'),
      ],
      { strict: true, nodes: true },
    );
  });

  it('no backup is started on a node while it is down (a lock fault there would be a lock no worker holds from its start)', async () => {
    const { journal } = await runSchedule(
      'password',
      [new Apply('vm-a', onR1)],
      [new Converge('vm-a'), crash('r630-01'), new Foreign('backup', 'vm-a'), new Reconcile('vm-a')],
      { strict: true, nodes: true },
    );
    assert.ok(
      journal.some((l) => /foreign: vm-a's VM is on r630-01, which is down/.test(l)),
      journal.join('\n'),
    );
  });

  it('vm-a migrates from r630-01 to r630-02 and r630-01 crashes mid-copy (the qmigrate worker dies, `lock: migrate` stays) -> reported LockWithoutTask; the operator cleans up and unlocks, and the move is made', async () => {
    const { journal } = await runSchedule(
      'password',
      [new Apply('vm-a', onR1)],
      [
        new Converge('vm-a'),
        qmigrateStall(3, 'task qmigrate hangs until healed'),
        new NodeMove('vm-a'),
        new Reconcile('vm-a'),
        untilStalled,
        crash('r630-01'),
        new Reconcile('vm-a'),
        new Reconcile('vm-a'),
      ],
      { strict: true, nodes: true },
    );
    assert.ok(
      journal.some((l) => /operator: .*qm unlock 100 on r630-01 \(vm-a reported its lock 'migrate'/.test(l)),
      journal.join('\n'),
    );
  });
});

describe('fault-search regressions: F88, a VM of the resource at a VMID another resource holds', () => {
  it("vm-a's manifest moves to site-2, where vm-c's create at 100 crashed before its outcome was known (vm-c then moves to site-1); the other state file's vm-a migrates the VM to site-2 as 100 -> this state file's vm-a finds it there by its marker, though vm-c's record holds that VMID: it made a second VM at 101", async () => {
    await runSchedule(
      'token',
      [vmA],
      [
        new Reconcile('vm-a'),
        new Move('vm-a'),
        new Apply('vm-c', { cpu: 1, memory: '1Gi', site: 'site-2' }),
        new Reconcile('vm-c', { where: { nth: 6 }, what: { kind: 'crash' } }),
        new OtherState('vm-a'),
        new Move('vm-c'),
      ],
    );
  });
});

describe('fault-search regressions: F86, a remote migration whose source is destroyed after its worker died', () => {
  it("vm-c's move from site-1 to site-2 dies with ml110-01 at the target's tunnel placeholder (`lock: create` on site-2), then another user destroys the source -> the placeholder is reported as this resource's leftover, with the fix, and the VM made on site-2 once it is cleared: it was made at another VMID there and the placeholder kept by nobody", async () => {
    const { journal } = await runSchedule(
      'password',
      [vmA, vmC],
      [
        new Reconcile('vm-c', { where: { step: 'update-reserve-site-move' }, what: { kind: 'crash' } }),
        new NodeMove('vm-c', undefined, 'end'),
        new NodeCrash('vm-c', 1),
        new Reconcile('vm-a', { where: { step: 'connected' }, what: { kind: 'crash' } }),
        new Foreign('destroy', 'vm-c'),
        new Fault(`POST create answers 500 '${LOCK_TIMEOUT}' x1`, {
          kind: 'request',
          method: 'POST',
          path: '/nodes/{node}/qemu',
          status: 500,
          message: LOCK_TIMEOUT,
          count: 1,
        }),
      ],
      { nodes: true },
    );
    assert.ok(
      journal.some((l) =>
        /operator: qm unlock 100 && qm destroy 100 --purge on r630-0\d \(vm-c reported its remote migration's worker dead, lock: create\)/.test(
          l,
        ),
      ),
      journal.join('\n'),
    );
  });
});

describe('fault-search regressions: F87, a destroy refused for want of quorum', () => {
  it("another user destroys vm-b's VM on site-2 as site-2's other node crashes (no quorum: the destroy frees the disks, then its config write is refused; the VM stays, ours, its volumes gone) -> reported DiskVolumeMissing with `qm destroy`, which the operator runs, and the VM is made again: it was resized for good, each resize failing", async () => {
    const { journal } = await runSchedule(
      'password',
      [vmB],
      [
        new NodeMove('vm-b', { kind: 'crash' }),
        vmB,
        new NodeMove('vm-b', { kind: 'foreign', what: 'destroy' }),
        crash('r630-01'),
        new Reconcile('vm-b', { where: { nth: 2 }, what: { kind: 'crash' } }),
      ],
      { nodes: true },
    );
    assert.ok(
      journal.some((l) => /operator: qm destroy 100 --purge on r630-02 \(vm-b reported its disks gone\)/.test(l)),
      journal.join('\n'),
    );
  });
});

/**
 * F82: a move of vm-a from site-2 to site-1 whose source node (r630-01) crashes while its
 * `qmigrate` worker runs, at three points: the target's tunnel placeholder made (`lock: create`),
 * the source locked too (`lock: migrate`), and the VM's config sent to the target (`lock: migrate`
 * there, with the marker). PVE's mtunnel then ends "mtunnel exited unexpectedly" and cleans up
 * nothing. The leftover was taken for another user's VM (MigrationRefused for good, a VM nobody
 * owned), and a source locked by the dead worker was waited on for good. And the config sent, the
 * source then destroyed by a person: the copy was waited on as arriving for good (F86's fix).
 */
describe('fault-search regressions: F82, a remote migration whose source node crashes', () => {
  const crashAt = async (step: number, then: Array<fc.AsyncCommand<Model, World>> = []): Promise<string[]> => {
    const { journal } = await runSchedule(
      'token',
      [new Apply('vm-a', onR1)],
      [
        new Converge('vm-a'),
        qmigrateStall(step),
        new Move('vm-a'),
        new Reconcile('vm-a'),
        new Reconcile('vm-a'),
        untilStalled,
        crash('r630-01'),
        new Reconcile('vm-a'),
        ...then,
        new Reconcile('vm-a'),
      ],
      { strict: true, nodes: true },
    );
    return journal;
  };
  const destroyed = (lock: string) =>
    new RegExp(
      `operator: qm unlock 100 && qm destroy 100 --purge on ml110-01 .*vm-a reported its remote migration's worker dead, lock: ${lock}`,
    );
  const unlocked = /operator: qm unlock 100 on r630-01 \(vm-a reported its lock 'migrate'/;

  it("at the tunnel's placeholder (`lock: create` on site-1) -> reported as this resource's leftover with its fix; once cleared, the move is made", async () => {
    const journal = await crashAt(2);
    assert.ok(
      journal.some((l) => destroyed('create').test(l)),
      journal.join('\n'),
    );
    assert.ok(!journal.some((l) => unlocked.test(l)), journal.join('\n'));
  });

  it('the source locked too (`lock: migrate`) -> the dead lock reported (LockWithoutTask), then the leftover; the move is made', async () => {
    const journal = await crashAt(4);
    assert.ok(
      journal.some((l) => unlocked.test(l)),
      journal.join('\n'),
    );
    assert.ok(
      journal.some((l) => destroyed('create').test(l)),
      journal.join('\n'),
    );
  });

  it("the config sent (site-1's copy `lock: migrate` with the marker) -> not waited on as arriving: the source's dead lock reported, then the copy; the move is made", async () => {
    const journal = await crashAt(14);
    assert.ok(
      journal.some((l) => unlocked.test(l)),
      journal.join('\n'),
    );
    assert.ok(
      journal.some((l) => destroyed('migrate').test(l)),
      journal.join('\n'),
    );
  });

  const destroySource: fc.AsyncCommand<Model, World> = {
    check: () => true,
    async run(_m, w) {
      const c = w.cluster('site-2');
      const vm = c.state.vms.get(100);
      assert.equal(vm?.config.lock, 'migrate', 'the source is locked by the dead migration');
      freeVmVolumes(c.state, vm, true);
      c.state.vms.delete(100);
      w.log('> a person runs qm unlock 100 && qm destroy 100 --purge on r630-01 (site-2)');
    },
    toString: () => "a person destroys the migration's source",
  };

  it("vm-a's move from site-2 to site-1 dies with r630-01 once its config was sent (site-1's copy `lock: migrate`, with the marker), and a person unlocks and destroys the source -> the copy is reported with a fix that keeps it (`qm unlock`), and followed once unlocked: it was read as arriving, and waited on for good", async () => {
    const journal = await crashAt(14, [destroySource]);
    assert.ok(
      journal.some((l) =>
        /operator: qm unlock 100 on ml110-01 \(vm-a reported its remote migration's copy left, lock: migrate, its source gone\)/.test(
          l,
        ),
      ),
      journal.join('\n'),
    );
  });
});

describe('fault-search regressions: F89, a destroy applied late at a VMID chosen again', () => {
  it("vm-c's destroy (site-2/100) is held unanswered and its process dies; the next one destroys the VM again, the state file is lost, and vm-b, re-applied, is made on site-2 -> not at 100, whose destroy ended within PVE's bound for a late request: the held destroy, applied there, destroyed vm-b's new VM", async () => {
    await runSchedule(
      'token',
      [
        new Apply('vm-c', { cpu: 1, memory: '1Gi', site: 'site-2', powerState: 'stopped' }),
        new Apply('vm-b', { cpu: 1, memory: '1Gi', site: 'site-2' }),
      ],
      [
        new Converge('vm-c'),
        // (A new process: vm-c's next reconcile is due at once, not at its Ready poll, past the hold's bound.)
        new Restart(),
        new Fault(
          'DELETE destroy is held unanswered until healed, then applied (the client gave up)',
          {
            kind: 'applied-late',
            method: 'DELETE',
            path: '/nodes/{node}/qemu/{vmid}',
            delayMs: 365 * 24 * 3600_000,
            count: 1,
          },
          undefined,
          'site-2',
        ),
        new Delete('vm-c'),
        new Converge('vm-c'),
        new LoseState(),
        new Reconcile('vm-b'),
        new Reconcile('vm-b'),
        new Heal(0),
        new Converge('vm-b'),
      ],
    );
  });
});

describe('fault-search regressions: F91, a delete while its site has no quorum', () => {
  it("vm-b (site-2, r630-02) is deleted as r630-01 crashes and stays down (no quorum: the destroy's worker cannot write the config) -> the destroy is not sent again until the quorum is back, then the VM is destroyed: a destroy was sent, and failed, at every other reconcile", async () => {
    const onR2 = new Apply('vm-b', { cpu: 1, memory: '1Gi', site: 'site-2', node: 'r630-02' });
    const { journal } = await runSchedule(
      'password',
      [onR2],
      [new Converge('vm-b'), new Delete('vm-b'), crash('r630-01', 2), new Converge('vm-b'), new Reconcile('vm-b')],
      { nodes: true },
    );
    const all = journal.join('\n');
    assert.equal((all.match(/task qmdestroy 100 failed/g) ?? []).length, 1, all);
    assert.match(
      all,
      /VM 100 is destroyed once cluster site-2 has quorum again \(1 of 2 nodes online \(down: r630-01\)\)/,
    );
  });
});

/**
 * F92: vm-c's move from site-1 to site-2 was recorded with site-2's endpoint node (r630-01) as the
 * target, then r630-01 crashed before it was sent: the snippet went over SSH to the crashed node
 * (15 s of real time per attempt) where PVE would put the VM on the node answering, and once it
 * went there, the target's refusal for want of quorum read as the move's failure (`migration
 * aborted`, TaskFailed), its remote migration sent again at every other reconcile.
 */
describe('fault-search regressions: F92, a move to another site whose target node crashes before it is sent', () => {
  it("vm-c's move to site-2 is recorded, r630-01 (site-2's endpoint node) crashes -> the move goes to the node answering, r630-02; refused there for want of quorum (NoQuorum, naming site-2), it is not sent again until the quorum is back, then made", async () => {
    const { journal } = await runSchedule(
      'token',
      [vmC, vmA],
      [
        new Reconcile('vm-c'),
        new NodeMove('vm-c', undefined, 'end'),
        new Apply('vm-b', { cpu: 1, memory: '1Gi', powerState: 'running', site: 'site-2', node: 'r630-01' }),
        new NodeCrash('vm-b', 2),
        new Converge('vm-c'),
      ],
      { nodes: true },
    );
    const all = journal.join('\n');
    assert.doesNotMatch(all, /SnippetUploadFailed/);
    assert.equal(
      (
        all.match(
          /task qmigrate 100 failed: migration aborted: 500 cluster not ready - no quorum\?\. Site site-2's/g,
        ) ?? []
      ).length,
      1,
      all,
    );
    assert.match(
      all,
      /VM 100 moves to site site-2 once cluster site-2 has quorum again \(1 of 2 nodes online \(down: r630-01\)\)/,
    );
  });
});
