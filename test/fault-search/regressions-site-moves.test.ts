/**
 * The fault search's regressions about moving a VM to the other site by remote migration: a
 * crash, a lost state file or a second state file while the move is recorded, sent or arriving;
 * VMIDs taken on either site; a move back before the arrival is seen. Moves by replacement are in
 * regressions-replacements.test.ts, moves inside a site in regressions-nodes.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  Apply,
  Converge,
  Delete,
  Fault,
  Foreign,
  Heal,
  LoseState,
  Move,
  OtherState,
  Reconcile,
  Replace,
  Restart,
  TwoWriters,
} from './commands.ts';
import { NodeMove } from './node-commands.ts';
import { site2Outage, vmA, vmB, vmC } from './regression-schedules.ts';
import { runSchedule } from './runner.ts';

describe('fault-search regressions: moves to the other site', () => {
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
