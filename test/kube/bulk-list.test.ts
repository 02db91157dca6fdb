/**
 * The site's bulk list under a steady stream of polls (issue 17: the controller at 10,000
 * ProxmoxVMs polls 170 of them a second): SiteContext.clusterResources reads the next
 * `/cluster/resources` ahead of its TTL's end, so no poll waits for the list, while every list it
 * serves was asked for less than a TTL ago, and a mutation (invalidate) is never answered with a
 * read that may predate it. The client is a stand-in that counts reads and answers when told to;
 * the clock is a number.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { PveClient } from '../../src/proxmox/index.ts';
import type { ClusterResource } from '../../src/proxmox/types.ts';
import type { SlotLimiter } from '../../src/vm/limits.ts';
import { SiteContext } from '../../src/vm/site-cache.ts';
import { flush } from '../helpers/fake-clock.ts';

function site(ttlMs = 1000) {
  let now = 0;
  const reads: Array<{ resolve: (l: ClusterResource[]) => void; reject: (e: Error) => void }> = [];
  const client = {
    clusterResources: () =>
      new Promise<ClusterResource[]>((resolve, reject) => {
        reads.push({ resolve, reject });
      }),
  } as unknown as PveClient;
  const ctx = new SiteContext({
    name: 'site-1',
    client,
    limiter: {} as SlotLimiter,
    vmidRange: { min: 100, max: 999 },
    installation: 'test',
    ttlMs,
    now: () => now,
  });
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
