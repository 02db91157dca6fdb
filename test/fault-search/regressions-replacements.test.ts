/**
 * The fault search's regressions about moving a VM to the other site by a replacement (a new VM
 * made there, then the old one retired), as the third search draws it: the spec going back to the
 * old site at each step, a dead create, a VMID taken, another state file holding the old VM.
 */
import { describe, it } from 'node:test';
import { Apply, Converge, Delete, Fault, Foreign, Heal, Move, OtherState, Reconcile, Replace } from './commands.ts';
import { vmA, vmB, vmC } from './regression-schedules.ts';
import { runSchedule } from './runner.ts';

describe('fault-search regressions: replacements', () => {
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

  it('F57: vm-c adopts the VM another state file made for it on site-2 (100), then moves to site-1 by a replacement while vm-a takes site-1/100 -> the replacement gives the VMID up there and makes its VM at another: a VMID carried to the new site is never a VMIDConflict', async () => {
    await runSchedule(
      'password',
      [new Apply('vm-a', { cpu: 1, memory: '1Gi' }), new Apply('vm-c', { cpu: 1, memory: '1Gi', site: 'site-2' })],
      [new OtherState('vm-c'), new Replace('vm-c'), new Reconcile('vm-a')],
      { strict: true },
    );
  });

  it("an operator protects vm-a (site-2/100), then it moves to site-1 by a replacement while the new VM's create hangs -> the old VM is left as it is with VMProtected naming 'qm set 100 --protection 0'; once the settle's operator runs it, the old VM goes: one VM (the search's operator had marked the wrong resource as acted on and read the stale report)", async () => {
    await runSchedule(
      'password',
      [vmB, new Apply('vm-a', { cpu: 1, memory: '1Gi', site: 'site-2' })],
      [
        new Converge('vm-a'),
        new Foreign('protect', 'vm-a'),
        new Replace('vm-a'),
        new Fault('task qmcreate hangs until healed', { kind: 'task', type: 'qmcreate', action: 'stall' }),
      ],
      { strict: true },
    );
  });

  it('F99: vm-a (site-2/100, stopped) is being replaced on site-1 (password credentials: no migration there), its new VM importing at the VMID carried over, when it is deleted -> the delete retires the old VM, destroys the new one and follows that destroy on site-1 (it followed it on site-2 for good: the site written with the name was the old one)', async () => {
    await runSchedule(
      'password',
      [new Apply('vm-a', { cpu: 1, memory: '1Gi' })],
      [
        new Apply('vm-a', { cpu: 1, memory: '1Gi', powerState: 'stopped', site: 'site-2', disk: '10.4Gi' }),
        new Converge('vm-a'),
        new Replace('vm-a'),
        new Reconcile('vm-a'),
        new Reconcile('vm-a'),
        new Delete('vm-a'),
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
