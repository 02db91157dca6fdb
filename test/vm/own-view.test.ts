/**
 * A resource's own view of the bulk list after its own mutation (src/vm/cluster-list.ts ownView,
 * read by src/vm/lookup.ts locate): the site's list with the resource's VM as a read of that VM
 * begun after the mutation shows it, where a whole list begun after it was waited for (issue 16:
 * 5,000 lists of up to 3,000 VMs for 3,000 creates). What each case pins: the view shows the VM
 * a create made and serves that resource only; anything else the list decides, as before (the VM
 * not at its VMID, a read that failed, another VM of the same name in the list: a twin or a
 * replacement's old VM, a replacement or a move to another site); a later mutation, a mutation for
 * no resource and a list begun after the view end it; an aborted reconcile stops. The client is a
 * stand-in whose answers the test gives; the clock is a number.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { UnavailableError } from '../../src/proxmox/errors.ts';
import type { PveClient } from '../../src/proxmox/index.ts';
import type { ClusterResource, VmStatus } from '../../src/proxmox/types.ts';
import { OWN_VIEW_FROM } from '../../src/vm/cluster-list.ts';
import type { StepContext } from '../../src/vm/context.ts';
import type { SlotLimiter } from '../../src/vm/limits.ts';
import { listIndex } from '../../src/vm/list-index.ts';
import { locate } from '../../src/vm/lookup.ts';
import { SiteContext } from '../../src/vm/site-cache.ts';
import { flush } from '../helpers/fake-clock.ts';

const TAG = 'provider-proxmox';

function vmEntry(vmid: number, node: string, name: string, extra: Partial<ClusterResource> = {}): ClusterResource {
  return { id: `qemu/${vmid}`, type: 'qemu', vmid, node, name, status: 'running', tags: TAG, ...extra };
}

function world(opts: { ttlMs?: number; ownViewFrom?: number } = {}) {
  let now = 0;
  const lists: Array<{ resolve: (l: ClusterResource[]) => void; reject: (e: Error) => void }> = [];
  const statusReads: Array<{ node: string; vmid: number }> = [];
  /** What `status/current` answers per `node/vmid` (absent: not there; an Error: thrown). */
  const statuses = new Map<string, VmStatus | Error>();
  const client = {
    clusterResources: () =>
      new Promise<ClusterResource[]>((resolve, reject) => {
        lists.push({ resolve, reject });
      }),
    findVmStatus: async (node: string, vmid: number) => {
      statusReads.push({ node, vmid });
      await flush();
      const s = statuses.get(`${node}/${vmid}`);
      if (s instanceof Error) throw s;
      return s;
    },
  } as unknown as PveClient;
  const site = new SiteContext({
    name: 'site-1',
    client,
    limiter: {} as SlotLimiter,
    vmidRange: { min: 100, max: 999 },
    installation: 'test',
    ttlMs: opts.ttlMs ?? 10_000,
    now: () => now,
    paceClock: () => now,
    ownViewFrom: opts.ownViewFrom ?? 0,
  });
  const ctx = (uid: string, extra: Partial<StepContext> = {}): StepContext =>
    ({
      site,
      client,
      options: {},
      memory: site.remember(uid),
      signal: undefined,
      taskPollMs: 1000,
      ...extra,
    }) as StepContext;
  /** The site's first list, answered with `entries`. */
  const firstList = async (entries: ClusterResource[]) => {
    const p = site.clusterResources();
    lists.at(-1)!.resolve(entries);
    await p;
  };
  return {
    site,
    lists,
    statusReads,
    statuses,
    ctx,
    firstList,
    at: (t: number) => {
      now = t;
    },
  };
}

/** A create of VM `vmid` on `node` by the resource of `ctx`: its task followed, the site told. */
function created(w: ReturnType<typeof world>, ctx: StepContext, vmid: number, node: string): void {
  w.site.tasks.followTask(`UPID:${node}:00001234:00000000:00000000:qmcreate:${vmid}:root@pam:`);
  w.site.invalidate(ctx.memory);
}

describe('own view: after its mutation a resource reads its VM, not the whole site', () => {
  it('a VM its create made: found by a read of it on the task node, in a view no other resource is served', async () => {
    const w = world();
    await w.firstList([vmEntry(100, 'pve1', 'other')]);
    const a = w.ctx('uid-a');
    created(w, a, 101, 'pve2');
    w.statuses.set('pve2/101', { vmid: 101, name: 'vm-a', status: 'stopped', tags: TAG, maxmem: 2 ** 30, cpus: 2 });
    w.at(100);
    const found = await locate(a, 101, false);
    assert.equal(found?.node, 'pve2');
    assert.equal(found?.entry.name, 'vm-a');
    assert.equal(found?.entry.status, 'stopped');
    assert.equal(found?.entry.maxcpu, 2);
    assert.deepEqual(w.statusReads, [{ node: 'pve2', vmid: 101 }]);
    assert.equal(w.lists.length, 1, 'no list of the site');
    // Its other reads (the duplicate check, preflight) get the view: the VM, and the other VMs.
    const mine = listIndex(await w.site.clusterResources(false, undefined, a.memory));
    assert.equal(mine.byVmid.get(101)?.name, 'vm-a');
    assert.equal(mine.byVmid.get(100)?.name, 'other');
    assert.deepEqual(
      mine.byName.get('vm-a')?.map((e) => e.vmid),
      [101],
    );
    // Fresh reads too, while the list under it is no older than a fresh read may be.
    assert.equal(listIndex(await w.site.clusterResources(true, undefined, a.memory)).byVmid.has(101), true);
    // Another resource is served the site's list (it does not need this one's mutation).
    const b = w.ctx('uid-b');
    assert.equal(listIndex(await w.site.clusterResources(false, undefined, b.memory)).byVmid.has(101), false);
    assert.equal(w.lists.length, 1);
    // A second locate of the same resource: the view, no second read.
    assert.equal((await locate(a, 101, false))?.node, 'pve2');
    assert.equal(w.statusReads.length, 1);
  });

  it('a small site (a list under OWN_VIEW_FROM entries): no read of the VM, a list begun after the mutation', async () => {
    const w = world({ ownViewFrom: OWN_VIEW_FROM });
    const others = Array.from({ length: OWN_VIEW_FROM - 2 }, (_, i) => vmEntry(200 + i, 'pve1', `other-${i}`));
    await w.firstList(others);
    const a = w.ctx('uid-a');
    created(w, a, 101, 'pve2');
    w.statuses.set('pve2/101', { vmid: 101, name: 'vm-a', status: 'stopped', tags: TAG });
    const p = locate(a, 101, false);
    await flush();
    await flush();
    assert.equal(w.lists.length, 2, 'a list begun after the mutation');
    w.lists.at(-1)!.resolve([...others, vmEntry(101, 'pve2', 'vm-a', { status: 'stopped' })]);
    assert.equal((await p)?.node, 'pve2');
    assert.deepEqual(w.statusReads, [], 'no read of the VM');
    // As large as OWN_VIEW_FROM: the VM is read, not the site.
    const big = world({ ownViewFrom: OWN_VIEW_FROM });
    await big.firstList([...others, vmEntry(198, 'pve1', 'x'), vmEntry(199, 'pve1', 'y')]);
    const b = big.ctx('uid-b');
    created(big, b, 101, 'pve2');
    big.statuses.set('pve2/101', { vmid: 101, name: 'vm-b', status: 'stopped', tags: TAG });
    assert.equal((await locate(b, 101, false))?.node, 'pve2');
    assert.equal(big.lists.length, 1);
    assert.deepEqual(big.statusReads, [{ node: 'pve2', vmid: 101 }]);
  });

  it('a VM that moved (a migration, the list shows it on another node): the list shows where it is', async () => {
    const w = world();
    await w.firstList([vmEntry(101, 'pve1', 'vm-a')]);
    const a = w.ctx('uid-a');
    w.site.tasks.followTask('UPID:pve1:00001234:00000000:00000000:qmigrate:101:root@pam:');
    w.site.invalidate(a.memory);
    // Not on pve1 any more: the read finds nothing there, so the list decides.
    const p = locate(a, 101, false);
    await flush();
    await flush();
    assert.deepEqual(w.statusReads, [{ node: 'pve1', vmid: 101 }]);
    assert.equal(w.lists.length, 2, 'a list begun after the mutation');
    w.lists[1]!.resolve([vmEntry(101, 'pve2', 'vm-a')]);
    assert.equal((await p)?.node, 'pve2');
  });

  it('its VM not there after the mutation: only a list begun after it says it is gone', async () => {
    const w = world();
    await w.firstList([vmEntry(101, 'pve1', 'vm-a')]);
    const a = w.ctx('uid-a');
    w.site.tasks.followTask('UPID:pve1:00001234:00000000:00000000:qmdestroy:101:root@pam:');
    w.site.invalidate(a.memory);
    const p = locate(a, 101, false);
    await flush();
    await flush();
    assert.equal(w.lists.length, 2);
    w.lists[1]!.resolve([]);
    assert.equal(await p, undefined);
  });

  it('a read of the VM that failed (a lost reply): the list decides, as before', async () => {
    const w = world();
    await w.firstList([]);
    const a = w.ctx('uid-a');
    created(w, a, 101, 'pve2');
    w.statuses.set('pve2/101', new UnavailableError({ site: 'site-1' }, 'connection closed by the server'));
    const p = locate(a, 101, false);
    await flush();
    await flush();
    assert.equal(w.lists.length, 2);
    w.lists[1]!.resolve([vmEntry(101, 'pve2', 'vm-a')]);
    assert.equal((await p)?.node, 'pve2');
    assert.equal(a.memory.view, undefined);
  });

  it('another VM of the same name in the list (a twin, a replacement’s old VM): the list decides', async () => {
    const w = world();
    await w.firstList([vmEntry(100, 'pve1', 'vm-a')]);
    const a = w.ctx('uid-a');
    created(w, a, 101, 'pve2');
    w.statuses.set('pve2/101', { vmid: 101, name: 'vm-a', status: 'stopped', tags: TAG });
    const p = locate(a, 101, false);
    await flush();
    await flush();
    assert.equal(w.lists.length, 2, 'the retirement of the other VM shows in a new list only');
    w.lists[1]!.resolve([vmEntry(101, 'pve2', 'vm-a')]);
    assert.equal((await p)?.node, 'pve2');
    assert.equal(a.memory.view, undefined);
  });

  it('a replacement or a move to another site (another VM mutated too): no view', async () => {
    for (const extra of [{ previous: {} }, { target: {} }] as Array<Partial<StepContext>>) {
      const w = world();
      await w.firstList([]);
      const a = w.ctx('uid-a', extra);
      created(w, a, 101, 'pve2');
      w.statuses.set('pve2/101', { vmid: 101, name: 'vm-a', status: 'stopped', tags: TAG });
      const p = locate(a, 101, false);
      await flush();
      assert.equal(w.statusReads.length, 0);
      assert.equal(w.lists.length, 2);
      w.lists[1]!.resolve([vmEntry(101, 'pve2', 'vm-a')]);
      assert.equal((await p)?.node, 'pve2');
    }
  });

  it('the view ends: its next mutation, a mutation for no resource, a list begun after it, its list past the TTL', async () => {
    const w = world({ ttlMs: 1000 });
    const setup = async () => {
      const a = w.ctx('uid-a');
      created(w, a, 101, 'pve2');
      assert.ok(await locate(a, 101, false));
      assert.ok(a.memory.view);
      return a;
    };
    await w.firstList([]);
    w.statuses.set('pve2/101', { vmid: 101, name: 'vm-a', status: 'running', tags: TAG });
    // Its next mutation: a new read of the VM (the old view no longer serves).
    let a = await setup();
    w.site.invalidate(a.memory);
    const reads = w.statusReads.length;
    assert.ok(await locate(a, 101, false));
    assert.equal(w.statusReads.length, reads + 1);
    // A mutation for no resource: every read waits for a list begun after it.
    w.site.invalidate();
    assert.equal(a.memory.view, undefined);
    const lists = w.lists.length;
    const p = w.site.clusterResources(false, undefined, a.memory);
    assert.equal(w.lists.length, lists + 1);
    w.lists.at(-1)!.resolve([vmEntry(101, 'pve2', 'vm-a')]);
    await p;
    // A list begun after the view, once it arrived, serves the resource: the view goes.
    a = await setup();
    w.at(800);
    const next = w.site.clusterResources(true, undefined, w.ctx('uid-b').memory);
    assert.ok(a.memory.view, 'kept while the list is on its way');
    w.lists.at(-1)!.resolve([vmEntry(101, 'pve2', 'vm-a', { status: 'running' })]);
    await next;
    await flush();
    assert.equal(a.memory.view, undefined);
    // Its list older than the TTL: it serves nothing (a list is read), and goes.
    w.at(1000);
    a = await setup();
    w.at(1900);
    const c = w.ctx('uid-c');
    created(w, c, 102, 'pve2');
    w.statuses.set('pve2/102', { vmid: 102, name: 'vm-c', status: 'running', tags: TAG });
    w.at(2100);
    const late = w.lists.length;
    const q = w.site.clusterResources(false, undefined, a.memory);
    assert.equal(w.lists.length, late + 1);
    assert.ok(a.memory.view, 'not served, not yet dropped');
    w.lists.at(-1)!.resolve([vmEntry(101, 'pve2', 'vm-a'), vmEntry(102, 'pve2', 'vm-c')]);
    assert.equal(listIndex(await q).byVmid.has(102), true);
    await flush();
    assert.equal(a.memory.view, undefined);
  });

  it('views past the TTL go as the next one is made (they hold a copy of a list each)', async () => {
    const w = world({ ttlMs: 1000 });
    await w.firstList([]);
    // A list read ahead (another resource's call in the TTL's last quarter), begun before a's
    // mutation, arrives after a's view was made: it does not serve a, and a's view stays.
    w.at(800);
    await w.site.clusterResources(false, undefined, w.ctx('uid-b').memory);
    const a = w.ctx('uid-a');
    created(w, a, 101, 'pve2');
    w.statuses.set('pve2/101', { vmid: 101, name: 'vm-a', status: 'running', tags: TAG });
    assert.ok(await locate(a, 101, false));
    w.lists.at(-1)!.resolve([]);
    await flush();
    await flush();
    assert.ok(a.memory.view);
    w.at(1500);
    const c = w.ctx('uid-c');
    created(w, c, 102, 'pve2');
    w.statuses.set('pve2/102', { vmid: 102, name: 'vm-c', status: 'running', tags: TAG });
    assert.ok(await locate(c, 102, false));
    assert.ok(c.memory.view);
    assert.equal(a.memory.view, undefined, 'its list is 1,500 ms old: past the TTL');
  });

  it('an aborted reconcile stops while it reads its VM', async () => {
    const w = world();
    await w.firstList([]);
    const ac = new AbortController();
    const a = w.ctx('uid-a', { signal: ac.signal });
    created(w, a, 101, 'pve2');
    w.statuses.set('pve2/101', new Error('aborted'));
    ac.abort(new Error('reconcile aborted'));
    await assert.rejects(locate(a, 101, false), /reconcile aborted/);
    assert.equal(w.lists.length, 1);
  });
});
