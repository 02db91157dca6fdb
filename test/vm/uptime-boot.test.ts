/**
 * A VM's boots as observeGuest (src/vm/guest.ts) counts them from its uptime: PVE gives whole
 * seconds (qemu-server vmstatus), and between two full reads the uptime is counted on by this
 * process's clock, so the next whole second PVE gives may be up to a second behind the count. That
 * is the same boot; only a step back of a second or more is a new one (whose agent and cloud-init
 * result are asked again).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ProxmoxVM } from '../../src/api/proxmoxvm.ts';
import type { VmStatus } from '../../src/proxmox/types.ts';
import type { StepContext } from '../../src/vm/context.ts';
import { observeGuest } from '../../src/vm/guest.ts';
import type { ObservedVm } from '../../src/vm/lookup.ts';
import type { ResourceMemory } from '../../src/vm/resource-memory.ts';

describe('boots counted from the uptime', () => {
  it('a whole-second uptime behind the count is the same boot; a step back of a second is a new one', async () => {
    let now = 0;
    const memory: ResourceMemory = { secrets: { sshKeys: [] } };
    const ctx = { site: { now: () => now, name: 'site-1' }, memory, options: {} } as unknown as StepContext;
    const r = { metadata: { name: 'vm-a', namespace: 'default' }, spec: { forProvider: {} }, status: {} } as ProxmoxVM;
    const found = { node: 'pve1', vmid: 100, entry: { status: 'running' } } as unknown as ObservedVm;
    // A full read (no config: nothing is asked of the agent), then polls that count the uptime on.
    const full = (uptime: number) => observeGuest(ctx, r, found, undefined, { uptime } as VmStatus, 'running');
    const poll = () => observeGuest(ctx, r, found, undefined, undefined, 'running');
    await full(5); // 5.0-5.99 s up
    assert.equal(memory.boot, 1);
    now = 900;
    await poll(); // counted on: 5.9 s
    now = 950;
    await full(5); // PVE: 5 (5.95 s up, the whole seconds of it)
    assert.equal(memory.boot, 1, 'the same boot');
    now = 2_000;
    await full(7);
    assert.equal(memory.boot, 1);
    now = 2_500;
    await full(0); // restarted
    assert.equal(memory.boot, 2, 'a new boot');
  });

  it("the bulk list's uptime of the boot before is not this boot's: a reboot is not taken for a VM up 13 minutes", async () => {
    let now = 0;
    const memory: ResourceMemory = { secrets: { sshKeys: [] } };
    const ctx = { site: { now: () => now, name: 'site-1' }, memory, options: {} } as unknown as StepContext;
    const r = { metadata: { name: 'vm-a', namespace: 'default' }, spec: { forProvider: {} }, status: {} } as ProxmoxVM;
    // pvestatd's list is a status cycle late: after a reboot it still shows the uptime before it.
    const found = { node: 'pve1', vmid: 100, entry: { status: 'running', uptime: 788 } } as unknown as ObservedVm;
    await observeGuest(ctx, r, found, undefined, { uptime: 788 } as VmStatus, 'running');
    assert.equal(memory.boot, 1);
    now = 5_000;
    await observeGuest(ctx, r, found, undefined, { uptime: 2 } as VmStatus, 'running'); // rebooted
    assert.equal(memory.boot, 2);
    now = 6_000;
    await observeGuest(ctx, r, found, undefined, undefined, 'running'); // a poll: the list's 788 is the old boot's
    assert.ok(memory.uptimeMs! < 10_000, `counted on from this boot's 2 s, not the list's 788 s: ${memory.uptimeMs}`);
    assert.equal(memory.boot, 2);
    // Once the list has caught up, its figure is this boot's and taken when it is further on.
    now = 20_000;
    const caughtUp = { ...found, entry: { status: 'running', uptime: 18 } } as unknown as ObservedVm;
    await observeGuest(ctx, r, caughtUp, undefined, undefined, 'running');
    assert.equal(memory.uptimeMs, 18_000);
    assert.equal(memory.boot, 2);
  });
});
