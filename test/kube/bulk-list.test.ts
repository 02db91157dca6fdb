/**
 * The site's bulk list under a steady stream of polls (issue 17: the controller at 10,000
 * ProxmoxVMs polls 170 of them a second): SiteContext.clusterResources reads the next
 * `/cluster/resources` ahead of its TTL's end, so no poll waits for the list, while every list it
 * serves was asked for less than a TTL ago, and a mutation (invalidate) is never answered with a
 * read that may predate it. During a rollout (issue 16) one read runs at a time, the next no
 * sooner than the last one's duration (or, for a long list, 0.1 ms an entry) after it, and a resource's reads wait only for lists begun
 * after its own mutations. The client is a stand-in that counts
 * reads and answers when told to; the clock is a number.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { PveClient } from '../../src/proxmox/index.ts';
import type { ClusterResource } from '../../src/proxmox/types.ts';
import type { SlotLimiter } from '../../src/vm/limits.ts';
import { SiteContext } from '../../src/vm/site-cache.ts';
import { flush } from '../helpers/fake-clock.ts';

/** A site of `client` on the clock `now` (list reads paced by `paceClock`, by default real time). */
function testSite(client: PveClient, ttlMs: number, now: () => number, paceClock?: () => number): SiteContext {
  return new SiteContext({
    name: 'site-1',
    client,
    limiter: {} as SlotLimiter,
    vmidRange: { min: 100, max: 999 },
    installation: 'test',
    ttlMs,
    now,
    ...(paceClock ? { paceClock } : {}),
  });
}

function site(ttlMs = 1000) {
  let now = 0;
  // List reads are paced by real time; here by the same number as the site's clock.
  const paceClock = () => now;
  const reads: Array<{ resolve: (l: ClusterResource[]) => void; reject: (e: Error) => void }> = [];
  const client = {
    clusterResources: () =>
      new Promise<ClusterResource[]>((resolve, reject) => {
        reads.push({ resolve, reject });
      }),
  } as unknown as PveClient;
  const ctx = testSite(client, ttlMs, () => now, paceClock);
  const list = (n: number): ClusterResource[] => [{ id: `qemu/${n}`, type: 'qemu', vmid: n, node: 'pve1' }];
  /** The call's answer, once it has one (undefined while it waits for a read). */
  const answer = (p: Promise<ClusterResource[]>) => {
    const got = { value: undefined as number | undefined };
    void p.then((l) => {
      got.value = Number(l[0]!.vmid);
    });
    return got;
  };
  return {
    ctx,
    reads,
    list,
    answer,
    at: (t: number) => {
      now = t;
    },
  };
}

describe('SiteContext bulk list: read ahead of the TTL', () => {
  it('in the last quarter of the TTL a call starts the next read and is served the current list; one read at a time', async () => {
    const s = site(1000);
    const first = s.answer(s.ctx.clusterResources());
    assert.equal(s.reads.length, 1);
    s.reads[0]!.resolve(s.list(1));
    await flush();
    assert.equal(first.value, 1);
    s.at(700);
    assert.equal(s.answer(s.ctx.clusterResources()).value, undefined);
    await flush();
    assert.equal(s.reads.length, 1, 'before 3/4 of the TTL: no read');
    s.at(800);
    const served = s.answer(s.ctx.clusterResources());
    s.answer(s.ctx.clusterResources());
    await flush();
    assert.equal(served.value, 1, 'served at once, from the current list');
    assert.equal(s.reads.length, 2, 'one read ahead, however many calls');
    s.reads[1]!.resolve(s.list(2));
    await flush();
    s.at(1500); // past the first list's TTL, within the second's (asked at 800)
    const next = s.answer(s.ctx.clusterResources());
    await flush();
    assert.equal(next.value, 2);
    assert.equal(s.reads.length, 2);
  });

  it('a steady stream of calls never waits for a read: reads come once per 3/4 TTL or so', async () => {
    const s = site(1000);
    void s.ctx.clusterResources();
    s.reads[0]!.resolve(s.list(0));
    await flush();
    let waited = 0;
    for (let t = 10; t <= 20_000; t += 10) {
      s.at(t);
      const got = s.answer(s.ctx.clusterResources());
      await flush();
      if (got.value === undefined) waited++;
      // The API answers a read 50 ms after it was asked.
      const open = s.reads.at(-1)!;
      if (s.reads.length > 1 && t % 50 === 0) open.resolve(s.list(s.reads.length));
    }
    assert.equal(waited, 0);
    assert.ok(s.reads.length >= 20 && s.reads.length <= 30, `${s.reads.length} reads in 20 TTLs`);
  });

  it('invalidate() drops a read ahead in flight: a mutation is never answered with a list that may predate it', async () => {
    const s = site(1000);
    void s.ctx.clusterResources();
    s.reads[0]!.resolve(s.list(1));
    await flush();
    s.at(900);
    void s.ctx.clusterResources(); // read ahead starts
    assert.equal(s.reads.length, 2);
    s.ctx.invalidate(); // our own create, say
    const after = s.answer(s.ctx.clusterResources());
    assert.equal(s.reads.length, 3, 'the next call reads now');
    s.reads[1]!.resolve(s.list(2)); // the stale read ahead arrives
    await flush();
    assert.equal(after.value, undefined, 'not served the read ahead');
    s.reads[2]!.resolve(s.list(3));
    await flush();
    assert.equal(after.value, 3);
    s.at(950);
    assert.equal((await s.ctx.clusterResources())[0]!.vmid, 3, 'the read ahead did not replace it');
  });

  it('a failed read ahead leaves the current list; past its TTL a call reads and waits again', async () => {
    const s = site(1000);
    void s.ctx.clusterResources();
    s.reads[0]!.resolve(s.list(1));
    await flush();
    s.at(900);
    void s.ctx.clusterResources();
    s.reads[1]!.reject(new Error('connection reset'));
    await flush();
    s.at(950);
    assert.equal((await s.ctx.clusterResources())[0]!.vmid, 1);
    assert.equal(s.reads.length, 3, 'a call in the last quarter tries ahead again');
    s.at(1000);
    const late = s.answer(s.ctx.clusterResources());
    await flush();
    assert.equal(late.value, undefined, 'past the TTL: waits for a read');
    assert.equal(s.reads.length, 4);
  });

  it('a fresh read is not served a read ahead: past the few ms a fresh read may share, it reads now', async () => {
    const s = site(1000);
    void s.ctx.clusterResources();
    s.reads[0]!.resolve(s.list(1));
    await flush();
    s.at(900);
    void s.ctx.clusterResources(); // a read ahead starts
    assert.equal(s.reads.length, 2);
    const fresh = s.answer(s.ctx.clusterResources(true));
    assert.equal(s.reads.length, 3, 'the fresh read is a read of its own');
    await flush();
    assert.equal(fresh.value, undefined);
    s.reads[2]!.resolve(s.list(3));
    await flush();
    assert.equal(fresh.value, 3);
  });
});

describe('SiteContext bulk list: one read at a time, each resource sees its own mutations', () => {
  it('mutations of many resources during a read: the calls that need a newer list share the one next read', async () => {
    const s = site(1000);
    const a = s.ctx.remember('a');
    const b = s.ctx.remember('b');
    const c = s.ctx.remember('c');
    const first = s.answer(s.ctx.clusterResources(true, undefined, a));
    assert.equal(s.reads.length, 1);
    // While it is on its way, each resource mutates (a create each) and reads again.
    s.ctx.invalidate(a);
    s.ctx.invalidate(b);
    s.ctx.invalidate(c);
    const after = [a, b, c].map((m) => s.answer(s.ctx.clusterResources(true, undefined, m)));
    const plain = s.answer(s.ctx.clusterResources(false, undefined, b));
    assert.equal(s.reads.length, 1, 'no second read while one is in flight');
    s.reads[0]!.resolve(s.list(1));
    await flush();
    assert.equal(first.value, 1);
    for (const got of after) assert.equal(got.value, undefined, 'not served a list begun before its mutation');
    assert.equal(plain.value, undefined);
    assert.equal(s.reads.length, 2, 'one next read for all of them, begun when the first ended');
    s.reads[1]!.resolve(s.list(2));
    await flush();
    assert.deepEqual(
      after.map((g) => g.value),
      [2, 2, 2],
    );
    assert.equal(plain.value, 2);
  });

  it("another resource's mutation does not make a resource read again; its own does", async () => {
    const s = site(1000);
    const a = s.ctx.remember('a');
    const b = s.ctx.remember('b');
    void s.ctx.clusterResources(false, undefined, a);
    s.reads[0]!.resolve(s.list(1));
    await flush();
    s.at(100);
    s.ctx.invalidate(b); // b's create
    s.at(150);
    const aFresh = s.answer(s.ctx.clusterResources(true, undefined, a));
    const aPlain = s.answer(s.ctx.clusterResources(false, undefined, a));
    await flush();
    assert.equal(aFresh.value, 1, "a's fresh read: b's mutation is b's");
    assert.equal(aPlain.value, 1);
    assert.equal(s.reads.length, 1);
    const bRead = s.answer(s.ctx.clusterResources(false, undefined, b));
    assert.equal(s.reads.length, 2, "b's own read waits for a list begun after its mutation");
    s.reads[1]!.resolve(s.list(2));
    await flush();
    assert.equal(bRead.value, 2);
    // A read for no resource sees every mutation of this process (a fresh one), and a mutation
    // for no resource (invalidate()) is seen by every read.
    s.ctx.invalidate(a);
    const none = s.answer(s.ctx.clusterResources(true));
    assert.equal(s.reads.length, 3);
    s.reads[2]!.resolve(s.list(3));
    await flush();
    assert.equal(none.value, 3);
    s.ctx.invalidate();
    const bAfter = s.answer(s.ctx.clusterResources(false, undefined, b));
    assert.equal(s.reads.length, 4);
    s.reads[3]!.resolve(s.list(4));
    await flush();
    assert.equal(bAfter.value, 4);
  });

  it("the next read starts no sooner than the last one's duration after it ended", async (t) => {
    t.mock.timers.enable({ apis: ['setTimeout'] });
    const s = site(1000);
    const a = s.ctx.remember('a');
    void s.ctx.clusterResources(false, undefined, a);
    s.at(50); // the list took 50 ms
    s.reads[0]!.resolve(s.list(1));
    await flush();
    s.at(60);
    s.ctx.invalidate(a);
    const next = s.answer(s.ctx.clusterResources(true, undefined, a));
    const other = s.answer(s.ctx.clusterResources(true, undefined, s.ctx.remember('b')));
    await flush();
    assert.equal(other.value, 1, "b's fresh read is served the list of 10 ms ago");
    assert.equal(s.reads.length, 1, 'no read before 100 (50 ms after the last ended)');
    s.at(100);
    t.mock.timers.tick(40);
    await flush();
    assert.equal(s.reads.length, 2);
    s.reads[1]!.resolve(s.list(2));
    await flush();
    assert.equal(next.value, 2);
  });

  it('a long list paces the next by its length, and a fresh read takes a list that old (0.1 ms an entry)', async (t) => {
    t.mock.timers.enable({ apis: ['setTimeout'] });
    const s = site(1000);
    const a = s.ctx.remember('a');
    void s.ctx.clusterResources(false, undefined, a);
    s.at(5); // 3,000 entries in 5 ms: its duration alone would not pace the next
    const long = Array.from({ length: 3000 }, (_, i) => s.list(i + 1)[0]!);
    s.reads[0]!.resolve(long);
    await flush();
    s.at(280);
    const shared = s.answer(s.ctx.clusterResources(true));
    s.ctx.invalidate(a);
    const next = s.answer(s.ctx.clusterResources(true, undefined, a));
    await flush();
    assert.equal(shared.value, 1, 'a fresh read 280 ms later shares the list (past 250 ms)');
    assert.equal(s.reads.length, 1, 'no read before 305 (300 ms after the last ended)');
    s.at(305);
    t.mock.timers.tick(25);
    await flush();
    assert.equal(s.reads.length, 2);
    s.reads[1]!.resolve(s.list(7));
    await flush();
    assert.equal(next.value, 7);
    s.at(500);
    const again = s.answer(s.ctx.clusterResources(true));
    await flush();
    assert.equal(again.value, 7, 'a short list: fresh for 250 ms again');
    s.at(560);
    void s.ctx.clusterResources(true);
    assert.equal(s.reads.length, 3, 'a short list is not paced: past 250 ms a fresh read reads at once');
  });

  it('a failed read: the calls queued behind it get the next read, begun at once', async () => {
    const s = site(1000);
    const a = s.ctx.remember('a');
    const first = s.ctx.clusterResources(true, undefined, a);
    s.ctx.invalidate(a);
    const queued = s.answer(s.ctx.clusterResources(true, undefined, a));
    assert.equal(s.reads.length, 1);
    s.reads[0]!.reject(new Error('connection reset'));
    await assert.rejects(first, /connection reset/);
    await flush();
    assert.equal(s.reads.length, 2);
    s.reads[1]!.resolve(s.list(5));
    await flush();
    assert.equal(queued.value, 5);
  });
});

describe('SiteContext node task reads: each resource sees its own tasks', () => {
  function tasksSite() {
    let now = 0;
    let reads = 0;
    const client = {
      capabilities: async () => ({ version: { major: 8 } }),
      activeTasks: async () => {
        reads++;
        return [];
      },
      listTasks: async () => {
        reads++;
        return [];
      },
    } as unknown as PveClient;
    const ctx = testSite(client, 10_000, () => now);
    return {
      ctx,
      reads: () => reads,
      at: (t: number) => {
        now = t;
      },
    };
  }

  it("another resource's mutation keeps a node's task read; the resource's own, and one for no resource, do not", async () => {
    const s = tasksSite();
    const a = s.ctx.remember('a');
    const b = s.ctx.remember('b');
    await s.ctx.tasks.nodeTasks('pve1', undefined, false, a);
    assert.equal(s.reads(), 1);
    s.ctx.invalidate(b); // b started a task
    s.at(100);
    await s.ctx.tasks.nodeTasks('pve1', undefined, false, a);
    assert.equal(s.reads(), 1, "b's task is b's: a's poll is served the read it had");
    await s.ctx.tasks.nodeTasks('pve1', undefined, false, b);
    assert.equal(s.reads(), 2, 'b reads again: a read begun before its task cannot show it');
    await s.ctx.tasks.nodeTasks('pve1', undefined, false, a);
    assert.equal(s.reads(), 2, "b's read, begun after every mutation so far, serves a too");
    s.ctx.invalidate(); // a mutation for no resource: every read is too old
    await s.ctx.tasks.nodeTasks('pve1', undefined, false, a);
    assert.equal(s.reads(), 3);
    s.at(1200);
    await s.ctx.tasks.nodeTasks('pve1', undefined, false, a);
    assert.equal(s.reads(), 4, 'a read serves for a second at most');
  });
  it("a node's task read that fails after a newer one began leaves the newer one to serve", async () => {
    let now = 0;
    const pending: Array<{ resolve: (l: []) => void; reject: (e: Error) => void }> = [];
    const client = {
      capabilities: async () => ({ version: { major: 8 } }),
      activeTasks: () => new Promise((resolve, reject) => pending.push({ resolve, reject })),
    } as unknown as PveClient;
    const ctx = testSite(client, 10_000, () => now);
    const first = ctx.tasks.nodeTasks('pve1');
    await flush();
    const second = ctx.tasks.nodeTasks('pve1', undefined, true);
    await flush();
    assert.equal(pending.length, 2);
    pending[0]!.reject(new Error('connection reset'));
    await assert.rejects(first);
    pending[1]!.resolve([]);
    await second;
    now = 100;
    const third = ctx.tasks.nodeTasks('pve1');
    await flush();
    assert.equal(pending.length, 2, 'the newer read serves; the failure of the older one did not drop it');
    await third;
  });
});
