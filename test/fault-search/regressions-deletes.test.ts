/**
 * The fault search's regressions about a VM going away: our deletes (a VMID reused before the
 * finalizer went, two state files, another user's backup lock) and another user's destroys (of a
 * VM being moved, or just Ready), down to a destroy that PVE applies late, at a VMID chosen again.
 */
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
  Restart,
} from './commands.ts';
import { LOCK_TIMEOUT, vmA, vmB, vmC } from './regression-schedules.ts';
import { runSchedule } from './runner.ts';

describe('fault-search regressions: deletes and destroys', () => {
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

  it("an operator protects vm-a, then it is deleted -> VMProtected naming the fix, the VM left running; once the settle's operator lifts it, the resource goes with its VM", async () => {
    await runSchedule(
      'token',
      [vmA],
      [new Converge('vm-a'), new Foreign('protect', 'vm-a'), new Delete('vm-a'), new Converge('vm-a')],
      { strict: true },
    );
  });

  it("vm-a's delete has passed its checks when an operator protects it -> its stop goes on (the race), and the next look says VMProtected before any destroy; gone once lifted", async () => {
    await runSchedule(
      'password',
      [vmA],
      [
        new Converge('vm-a'),
        new Delete('vm-a'),
        new Reconcile('vm-a', { where: { step: 'delete-checked' }, what: { kind: 'foreign', what: 'protect' } }),
        new Converge('vm-a'),
      ],
      { strict: true },
    );
  });

  it("F3: delete while another user's backup holds our VM -> waits; never clears the backup lock", async () => {
    await runSchedule(
      'password',
      [vmA],
      [new Converge('vm-a'), new Foreign('backup', 'vm-a'), new Delete('vm-a'), new Reconcile('vm-a')],
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
