/**
 * The fault search's regressions about making a VM on one site, and changing it: a create or
 * clone refused, applied late, or whose worker died; a VMID another user takes; the state file
 * lost while a create runs; and the changes after it (a resize's concurrency slot, two state files
 * at one snippet, a planned start). The schedules' shared pieces: regression-schedules.ts.
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
  OtherState,
  Reconcile,
  Restart,
  TwoWriters,
} from './commands.ts';
import { LOCK_TIMEOUT, vmA, vmB, vmC } from './regression-schedules.ts';
import { runSchedule } from './runner.ts';

describe('fault-search regressions: creates, clones and VMIDs', () => {
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
});

describe('fault-search regressions: changes to a VM', () => {
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

  it("F97: two state files' creates of vm-a race while pvestatd hangs (the bulk list names neither VM) -> the later one to Ready sees the earlier one's VM by its tag and marker; never both Ready on two VMs", async () => {
    await runSchedule(
      'token',
      [vmA],
      [
        new Fault(
          "pvestatd on ml110-01 hangs (its VMs' statistics stale) for the next 30 command(s)",
          { kind: 'stats-stalled', node: 'ml110-01' },
          30,
        ),
        new Fault('task qmcreate hangs until healed', { kind: 'task', type: 'qmcreate', action: 'stall' }),
        new Reconcile('vm-a'),
        new OtherState('vm-a'),
        new Heal(1),
        new Converge('vm-a'),
        ...[1, 2, 3, 4, 5, 6, 7, 8].map(() => new OtherState('vm-a')),
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
});

/**
 * F96: vm-a's resize on site-2 was applied and its answer lost; its worker, still running (held),
 * had grown the volume and not yet written the config. The resize planned again read the volume's
 * size, found it grown and reported DiskSizeStale (with `qm disk rescan` to run) while the resize
 * it took for dead was still on its way to write the config. A running resize of the VM is waited for.
 */
describe('fault-search regressions: F96, a resize whose answer was lost, still running', () => {
  it('vm-a (site-2) resized, the answer lost, the worker held before its config write -> no DiskSizeStale while it runs', async () => {
    await runSchedule(
      'token',
      [vmC, vmB],
      [
        new Fault(
          'PUT resize is applied, then its answer is lost (connection reset) x1',
          { kind: 'reply-lost', method: 'PUT', path: '/nodes/{node}/qemu/{vmid}/resize', count: 1 },
          undefined,
          'site-2',
        ),
        new Apply('vm-a', { cpu: 1, memory: '1Gi', site: 'site-2' }),
        new Fault(
          'task resize hangs until healed',
          { kind: 'task', type: 'resize', action: 'stall' },
          undefined,
          'site-2',
        ),
        new Converge('vm-a'),
      ],
      { strict: true },
    );
  });
});
