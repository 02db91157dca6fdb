/**
 * What observe learned of its VM from a full read stands only for that VM (src/vm/read-schedule.ts
 * listShowsSameVm): a guest polled through its agent alone, and a Ready VM read from the bulk list
 * alone, are read in full as soon as the list shows other tags or another name at the VMID, as it
 * does for a VM someone made there after destroying ours (F58). pvestatd's stand-in name for a VM
 * it has not ticked over yet (`VM <vmid>`) is not another name.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ProxmoxVM } from '../../src/api/proxmoxvm.ts';
import type { ClusterResource } from '../../src/proxmox/types.ts';
import type { StepContext } from '../../src/vm/context.ts';
import type { ObservedVm } from '../../src/vm/lookup.ts';
import { guestPoll, listShowsSameVm, needsFullObserve } from '../../src/vm/read-schedule.ts';
import { newResourceMemory } from '../../src/vm/resource-memory.ts';
import type { SiteContext } from '../../src/vm/site-cache.ts';

const OURS = { name: 'vm-c', tags: 'provider-proxmox' };

function entry(fields: Partial<ClusterResource>): ClusterResource {
  return { id: 'qemu/100', type: 'qemu', vmid: 100, node: 'pve1', status: 'running', ...fields } as ClusterResource;
}

describe('listShowsSameVm', () => {
  it('the same tags and name: the same VM', () => {
    assert.equal(listShowsSameVm(OURS, entry(OURS)), true);
  });
  it('other tags, or none: another VM (a VM another user made at our VMID has no owner tag)', () => {
    assert.equal(listShowsSameVm(OURS, entry({ name: 'vm-c', tags: 'web' })), false);
    assert.equal(listShowsSameVm(OURS, entry({ name: 'vm-c' })), false);
    assert.equal(listShowsSameVm({ name: 'vm-c' }, entry(OURS)), false, 'tags where the read saw none');
  });
  it("another name: another VM; pvestatd's stand-in on either side is no name", () => {
    assert.equal(listShowsSameVm(OURS, entry({ ...OURS, name: 'ops-100' })), false);
    assert.equal(listShowsSameVm(OURS, entry({ ...OURS, name: 'VM 100' })), true);
    assert.equal(listShowsSameVm({ ...OURS, name: 'VM 100' }, entry(OURS)), true);
    assert.equal(listShowsSameVm(OURS, entry({ tags: OURS.tags })), true, 'a VM listed with no name');
  });
});

describe('reads that trust an earlier full read', () => {
  const now = 1_000_000;
  const site = { now: () => now } as unknown as SiteContext;
  const vm = (step: string) =>
    ({
      metadata: { uid: 'u-1', generation: 1 },
      spec: { forProvider: { image: 'local:import/noble.qcow2' } },
      status: {
        atProvider: { step, state: 'running' },
        conditions: [{ type: 'Ready', status: 'True', reason: 'Available' }],
      },
    }) as unknown as ProxmoxVM;
  const ctxWithRead = () => {
    const memory = newResourceMemory();
    memory.lastFull = { at: now - 1000, generation: 1, digest: 'd', node: 'pve1', agent: true, ...OURS };
    return { site, memory, options: { driftIntervalMs: 300_000 } } as unknown as StepContext;
  };
  const found = (fields: Partial<ClusterResource>): ObservedVm => ({
    vmid: 100,
    node: 'pve1',
    entry: entry(fields),
  });

  it('a booting guest is polled through its agent while the list shows our VM, and read in full once it shows another', () => {
    const ctx = ctxWithRead();
    const r = vm('WaitingForAgent');
    assert.equal(guestPoll(ctx, r, found(OURS)), true);
    assert.equal(guestPoll(ctx, r, found({ name: 'ops-100' })), false, 'another VM at the VMID: read in full');
  });

  it('a Ready VM is read from the list while it shows our VM, and in full once it shows another', () => {
    const ctx = ctxWithRead();
    const r = vm('Ready');
    assert.equal(needsFullObserve(ctx, r, found(OURS)), false);
    assert.equal(needsFullObserve(ctx, r, found({ name: 'ops-100' })), true);
    assert.equal(needsFullObserve(ctx, r, found({ ...OURS, tags: 'provider-proxmox;web' })), true, 're-tagged');
  });
});
