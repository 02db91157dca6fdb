/**
 * The remote migration under the fault search's runner and invariants, as fixed schedules: a
 * crash at each point of a move (before its record is written, between the record and the send,
 * after `remote_migrate` was applied but before its answer, after the answer), a failed and a
 * stalled `qmigrate`, site-2 unreachable mid-way, another user taking the reserved target VMID,
 * and a move back. Each must end with exactly one VM on the spec's site, none left on the other
 * (invariants.ts). The search draws these among everything else; here each one is sure to run.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Apply, Converge, Fault, Foreign, Heal, Move, Reconcile } from './commands.ts';
import { runSchedule } from './runner.ts';

const LOCK_TIMEOUT = "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout";
const REMOTE_MIGRATE = { method: 'POST', path: '/nodes/{node}/qemu/{vmid}/remote_migrate' } as const;
const vmA = new Apply('vm-a', { cpu: 1, memory: '1Gi' });
const vmC = new Apply('vm-c', { cpu: 1, memory: '1Gi' });
const crash = { kind: 'crash' } as const;

/**
 * Run, and check that the schedule really migrated and met what it is about (`seen`, a journal
 * line): a move that never ran, or a crash that never struck, proves nothing.
 */
async function moves(
  auth: 'password' | 'token',
  initial: Apply[],
  cmds: Parameters<typeof runSchedule>[2],
  seen: RegExp,
  min = 1,
) {
  const res = await runSchedule(auth, initial, cmds);
  assert.ok(res.moves.migrated >= min, `expected ${min}+ migration(s), got ${JSON.stringify(res.moves)}`);
  assert.ok(
    res.journal.some((l) => seen.test(l)),
    `the journal never shows ${seen}:\n${res.journal.join('\n')}`,
  );
  return res;
}

describe('fault search: a move to the other site, crashed and faulted at every point', () => {
  for (const [what, where] of [
    ['after the move was chosen, before its record is written', { step: 'update-reserve-site-move' }],
    ['between the record and the send (the next reconcile dies at once)', { step: 'connected' }],
    ['after remote_migrate answered, before the UPID is written', { step: 'update-remote-migrate' }],
  ] as const) {
    it(`a crash ${what} -> one VM, on site-2`, async () => {
      // The first reconcile after the edit records the move; the next one sends it.
      const first = where.step === 'update-reserve-site-move' ? [] : [new Reconcile('vm-c')];
      await moves(
        'token',
        [vmC],
        [
          new Converge('vm-c'),
          new Move('vm-c'),
          ...first,
          new Reconcile('vm-c', { where, what: crash }),
          new Converge('vm-c'),
        ],
        new RegExp(`^ {2}at ${where.step}: the process crashes`),
      );
    });
  }

  it('remote_migrate applied, its answer lost, then the process crashes -> no second migration, one VM', async () => {
    const res = await moves(
      'token',
      [vmA],
      [
        new Converge('vm-a'),
        new Fault('remote_migrate is applied, then its answer is lost', {
          kind: 'reply-lost',
          ...REMOTE_MIGRATE,
          count: 1,
        }),
        new Move('vm-a'),
        new Reconcile('vm-a'),
        new Reconcile('vm-a', { where: { nth: 1 }, what: crash }),
        new Converge('vm-a'),
      ],
      /remote_migrate: .*connection closed by the server \(the request may have been applied\)/,
    );
    assert.equal(res.moves.sent, 1, 'the lost answer was not taken for a failed send');
  });

  it('remote_migrate refused, then the qmigrate task fails at start -> sent again, one VM', async () => {
    await moves(
      'password',
      [vmA],
      [
        new Converge('vm-a'),
        new Fault('remote_migrate answers 500', {
          kind: 'request',
          ...REMOTE_MIGRATE,
          status: 500,
          message: LOCK_TIMEOUT,
          count: 1,
        }),
        new Fault('task qmigrate fails at start', {
          kind: 'task',
          type: 'qmigrate',
          action: 'fail',
          at: 'start',
          message: LOCK_TIMEOUT,
          count: 1,
        }),
        new Move('vm-a'),
        new Converge('vm-a'),
      ],
      /qmigrate|remote_migrate: can't lock file/,
    );
  });

  it('a stalled qmigrate, a crash while it hangs, site-2 unreachable when it goes on -> one VM', async () => {
    await moves(
      'token',
      [vmC],
      [
        new Converge('vm-c'),
        new Fault('task qmigrate hangs until healed', { kind: 'task', type: 'qmigrate', action: 'stall' }),
        new Move('vm-c'),
        new Reconcile('vm-c'),
        new Reconcile('vm-c'),
        new Reconcile('vm-c', { where: { nth: 2 }, what: crash }),
        new Heal(0),
        new Fault('site-2 outage', { kind: 'unavailable', ms: 365 * 24 * 3600_000, mode: '503' }, 2, 'site-2'),
        new Reconcile('vm-c'),
        new Converge('vm-c'),
      ],
      /^ {2}at observed: the process crashes/,
    );
  });

  it('another user takes the reserved target VMID before the send -> the move is refused (a VM keeps its VMID), one VM, where it was', async () => {
    const res = await runSchedule(
      'token',
      [vmA],
      [
        new Converge('vm-a'),
        new Move('vm-a'),
        new Reconcile('vm-a'),
        new Foreign('take-move-vmid', 'vm-a'),
        new Converge('vm-a'),
      ],
    );
    assert.equal(res.moves.migrated, 0, 'nothing was migrated');
    assert.ok(
      res.journal.some((l) => /foreign create site-2\/100: HTTP 200/.test(l)),
      res.journal.join('\n'),
    );
    assert.ok(
      res.journal.some((l) => /MigrationRefused/.test(l)),
      res.journal.join('\n'),
    );
  });

  it('there and back, with a crash after each send -> one VM, on site-1 again', async () => {
    await moves(
      'token',
      [vmC],
      [
        new Converge('vm-c'),
        new Move('vm-c'),
        new Reconcile('vm-c'),
        new Reconcile('vm-c', { where: { step: 'update-remote-migrate' }, what: crash }),
        new Converge('vm-c'),
        new Move('vm-c'),
        new Reconcile('vm-c'),
        new Reconcile('vm-c', { where: { step: 'update-remote-migrate' }, what: crash }),
        new Converge('vm-c'),
      ],
      /^ {2}at update-remote-migrate: the process crashes/,
      2,
    );
  });

  it('with password credentials on site-1: to site-2 it moves, back to site-1 it is refused; one VM throughout', async () => {
    await moves(
      'password',
      [vmA],
      [new Converge('vm-a'), new Move('vm-a'), new Converge('vm-a'), new Move('vm-a'), new Converge('vm-a')],
      /PlacementChangeRefused/,
    );
  });
});
