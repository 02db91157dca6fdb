/**
 * The concurrency slots: per node, and per storage where the storage is (a node's local storage
 * per node, a shared one per site). Issue 16 measured a 4-node site running 2 creates at once
 * instead of 8, because `local-lvm` was counted once for the whole site. The waiters are handed
 * freed slots oldest first: fast-check holds the limiter (which looks only at the head of each
 * group of waiters wanting the same slots) to a plain walk of the FIFO, wake by wake.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { SlotLimiter, type SlotStorage } from '../../src/vm/limits.ts';

/** The FIFO as a walk of every waiter, oldest first: what SlotLimiter's grants must equal. */
class FifoWalk {
  private readonly held = new Map<string, Set<string>>();
  private readonly owner = new Map<string, string[]>();
  private readonly waiters: Array<{ holder: string; keys: string[]; wake: () => void }> = [];
  private readonly limit: { perNode: number; perStorage: number };
  constructor(limit: { perNode: number; perStorage: number }) {
    this.limit = limit;
  }
  private fits(keys: string[]): boolean {
    return keys.every(
      (k) => (this.held.get(k)?.size ?? 0) < (k.startsWith('storage:') ? this.limit.perStorage : this.limit.perNode),
    );
  }
  private take(holder: string, keys: string[]): void {
    for (const k of keys) this.held.set(k, (this.held.get(k) ?? new Set()).add(holder));
    this.owner.set(holder, keys);
  }
  tryAcquire(holder: string, node: string, storages: SlotStorage[], wake: () => void, resize: boolean): boolean {
    if (this.owner.has(holder)) return true;
    const keys = resize
      ? [`resize:${node}`]
      : [
          `node:${node}`,
          ...storages.map((s) =>
            typeof s === 'string'
              ? `storage:${node}/${s}`
              : s.shared
                ? `storage:${s.storage}`
                : `storage:${node}/${s.storage}`,
          ),
        ];
    const i = this.waiters.findIndex((w) => w.holder === holder);
    if (this.fits(keys)) {
      this.take(holder, keys);
      if (i >= 0) this.waiters.splice(i, 1);
      return true;
    }
    if (i >= 0) Object.assign(this.waiters[i]!, { keys, wake });
    else this.waiters.push({ holder, keys, wake });
    return false;
  }
  release(holder: string): void {
    for (const k of this.owner.get(holder) ?? []) this.held.get(k)?.delete(holder);
    this.owner.delete(holder);
    const i = this.waiters.findIndex((w) => w.holder === holder);
    if (i >= 0) this.waiters.splice(i, 1);
    for (const w of [...this.waiters])
      if (this.fits(w.keys)) {
        this.take(w.holder, w.keys);
        this.waiters.splice(this.waiters.indexOf(w), 1);
        w.wake();
      }
  }
  get waiting(): string[] {
    return this.waiters.map((w) => w.holder);
  }
}

describe('slot limiter', () => {
  it('counts a local storage per node: four nodes with local-lvm take 2 creates each', () => {
    const l = new SlotLimiter({ perNode: 2, perStorage: 2 });
    let granted = 0;
    for (const node of ['n1', 'n2', 'n3', 'n4'])
      for (let i = 0; i < 3; i++) if (l.tryAcquire(`${node}-${i}`, node, ['local-lvm'])) granted++;
    assert.equal(granted, 8);
  });

  it('counts a shared storage once for the site, and releases per holder', () => {
    const l = new SlotLimiter({ perNode: 4, perStorage: 2 });
    const ceph = { storage: 'ceph', shared: true };
    assert.ok(l.tryAcquire('a', 'n1', [ceph]));
    assert.ok(l.tryAcquire('b', 'n2', [ceph]));
    assert.equal(l.tryAcquire('c', 'n3', [ceph]), false, 'the pool is full on every node');
    assert.ok(l.tryAcquire('a', 'n1', [ceph]), 'idempotent for a holder');
    l.release('a');
    assert.ok(l.tryAcquire('c', 'n3', [ceph]));
  });

  it('takes every slot or none', () => {
    const l = new SlotLimiter({ perNode: 1, perStorage: 1 });
    assert.ok(l.tryAcquire('a', 'n1', ['local-lvm']));
    assert.equal(l.tryAcquire('b', 'n2', [{ storage: 'local-lvm' }, { storage: 'ceph', shared: true }]), true);
    assert.equal(l.tryAcquire('c', 'n2', ['other']), false, 'node n2 is full');
    l.release('b');
    assert.ok(l.tryAcquire('c', 'n2', ['other']));
  });

  it('a freed slot goes to the oldest waiter, held for it and woken; a newcomer does not take it', () => {
    const l = new SlotLimiter({ perNode: 1, perStorage: 1 });
    const woken: string[] = [];
    assert.ok(l.tryAcquire('a', 'n1', ['local-lvm']));
    assert.equal(
      l.tryAcquire('b', 'n1', ['local-lvm'], () => woken.push('b')),
      false,
    );
    assert.equal(
      l.tryAcquire('c', 'n1', ['local-lvm'], () => woken.push('c')),
      false,
    );
    assert.deepEqual(l.waiting, ['b', 'c']);
    l.release('a');
    assert.deepEqual(woken, ['b'], 'only the oldest is woken');
    assert.equal(l.tryAcquire('d', 'n1', ['local-lvm']), false, 'the slot is held for b');
    assert.ok(l.tryAcquire('b', 'n1', ['local-lvm']), 'b finds it taken for it');
    l.release('b');
    assert.deepEqual(woken, ['b', 'c']);
  });

  it('releaseHeld (a reconcile with no task in flight) frees a held slot, keeps one a wake granted, and never touches a waiter', () => {
    const l = new SlotLimiter({ perNode: 1, perStorage: 1 });
    const woken: string[] = [];
    assert.ok(l.tryAcquire('a', 'n1', ['local-lvm']));
    assert.equal(
      l.tryAcquire('b', 'n1', ['local-lvm'], () => woken.push('b')),
      false,
    );
    assert.equal(
      l.tryAcquire('c', 'n1', ['local-lvm'], () => woken.push('c')),
      false,
    );
    assert.equal(l.releaseHeld('c'), false, 'a waiter holds nothing');
    assert.deepEqual(l.waiting, ['b', 'c'], 'and keeps its place');
    assert.equal(l.releaseHeld('a'), true, "a's task ended where this process did not see it");
    assert.deepEqual(woken, ['b'], 'the slot went to the oldest waiter');
    assert.equal(l.releaseHeld('b'), false, "granted to b, which has not come for it yet: b's turn stays b's");
    assert.ok(l.tryAcquire('b', 'n1', ['local-lvm']), 'b takes it');
    assert.equal(l.releaseHeld('b'), true, 'claimed, it is held like any');
    assert.deepEqual(woken, ['b', 'c']);
  });

  it('a resize has its own slots per node: it does not wait for the creates queued on the node', () => {
    const l = new SlotLimiter({ perNode: 1, perStorage: 1 });
    const woken: string[] = [];
    assert.ok(l.tryAcquire('a', 'n1', ['local-lvm']));
    for (const h of ['b', 'c'])
      assert.equal(
        l.tryAcquire(h, 'n1', ['local-lvm'], () => woken.push(h)),
        false,
      );
    assert.ok(l.tryAcquire('x', 'n1', [], undefined, { resize: true }), 'the imported VM grows its disk at once');
    assert.equal(
      l.tryAcquire('y', 'n1', [], () => woken.push('y'), { resize: true }),
      false,
      'one resize per node',
    );
    assert.deepEqual(l.waiting, ['b', 'c', 'y']);
    l.release('x');
    assert.deepEqual(woken, ['y'], 'a freed resize slot goes to the resize waiting, not to a create');
    l.release('a');
    assert.deepEqual(woken, ['y', 'b']);
  });

  it('a limit the config leaves out doubles while there is demand, up to its max, halves on lock contention, then grows by one', () => {
    const l = new SlotLimiter(
      { perNode: 64, perStorage: 2 },
      { adaptive: { perNode: false, perStorage: true, max: 6 } },
    );
    const key = 'storage:n1/local-lvm';
    const running: string[] = [];
    // Ten creates want the storage; each one that ends well with others waiting raises the limit.
    const ask = () => {
      for (let i = 0; i < 10; i++)
        if (l.tryAcquire(`c${i}`, 'n1', ['local-lvm'])) running.includes(`c${i}`) || running.push(`c${i}`);
    };
    ask();
    assert.deepEqual(running, ['c0', 'c1'], 'it starts at the default');
    l.release(running.shift()!, 'ok');
    assert.equal(l.limitOf(key), 4, 'doubled');
    ask();
    assert.equal(running.length, 4);
    l.release(running.shift()!, 'ok');
    ask();
    assert.equal(l.limitOf(key), 6, 'doubled, not past its max');
    assert.equal(running.length, 6);
    l.release(running.shift()!, 'ok');
    assert.equal(l.limitOf(key), 6, 'not past its max');
    l.release(running.shift()!, 'contention');
    assert.equal(l.limitOf(key), 3, 'halved on a lock timeout');
    l.release(running.shift()!, 'failed');
    assert.equal(l.limitOf(key), 3, 'another failure does not move it');
    ask();
    l.release(running.shift()!, 'ok');
    assert.equal(l.limitOf(key), 4, 'after a contention, one more at a time');
    assert.equal(l.limitOf('node:n1'), 64, 'a limit the config sets is kept');
    // Without waiters an ending create does not raise it: nothing asked for more.
    const quiet = new SlotLimiter(
      { perNode: 2, perStorage: 2 },
      { adaptive: { perNode: true, perStorage: true, max: 8 } },
    );
    assert.ok(quiet.tryAcquire('a', 'n1', ['local-lvm']));
    quiet.release('a', 'ok');
    assert.deepEqual(quiet.adaptedLimits, {});
  });

  it('a waiter that cannot go does not hold up one that can', () => {
    const l = new SlotLimiter({ perNode: 1, perStorage: 2 });
    assert.ok(l.tryAcquire('a', 'n1', [{ storage: 'ceph', shared: true }]));
    assert.equal(l.tryAcquire('b', 'n1', [{ storage: 'ceph', shared: true }]), false, 'node n1 is full');
    assert.ok(l.tryAcquire('c', 'n2', [{ storage: 'ceph', shared: true }]), 'b could not use the ceph slot anyway');
  });

  it('a grant not taken in time passes on; a waiter that stopped asking is dropped', () => {
    let now = 0;
    const l = new SlotLimiter({ perNode: 1, perStorage: 1 }, { now: () => now, claimMs: 1000, staleMs: 5000 });
    const woken: string[] = [];
    assert.ok(l.tryAcquire('a', 'n1', []));
    assert.equal(
      l.tryAcquire('b', 'n1', [], () => woken.push('b')),
      false,
    );
    assert.equal(
      l.tryAcquire('c', 'n1', [], () => woken.push('c')),
      false,
    );
    l.release('a');
    assert.deepEqual(woken, ['b']);
    now = 2000; // b went into backoff and never came back for its slot
    assert.equal(l.tryAcquire('d', 'n1', []), false);
    assert.deepEqual(woken, ['b', 'c'], 'the slot passed on to c');
    assert.ok(l.tryAcquire('c', 'n1', []));
    now = 10_000;
    l.release('c');
    assert.deepEqual(l.waiting, [], 'd stopped asking long ago: dropped, not granted');
    assert.ok(l.tryAcquire('e', 'n1', []), 'the slot is free for whoever asks now');
  });
  it("a slot freed on one node goes to that node's oldest waiter behind many waiting for another; the others' order holds", () => {
    const l = new SlotLimiter({ perNode: 1, perStorage: 1 });
    const woken: string[] = [];
    assert.ok(l.tryAcquire('busy-1', 'n1', ['local-lvm']));
    assert.ok(l.tryAcquire('busy-2', 'n2', ['local-lvm']));
    for (let i = 0; i < 50; i++) l.tryAcquire(`n1-${i}`, 'n1', ['local-lvm'], () => woken.push(`n1-${i}`));
    l.tryAcquire('n2-0', 'n2', ['local-lvm'], () => woken.push('n2-0'));
    l.tryAcquire('n2-1', 'n2', ['local-lvm'], () => woken.push('n2-1'));
    l.release('busy-2');
    assert.deepEqual(woken, ['n2-0'], "n2's oldest waiter, behind the 50 waiting for n1");
    l.release('busy-1');
    assert.deepEqual(woken, ['n2-0', 'n1-0']);
    assert.ok(l.tryAcquire('n1-0', 'n1', ['local-lvm']));
    l.release('n1-0');
    assert.deepEqual(woken, ['n2-0', 'n1-0', 'n1-1']);
    assert.equal(l.waiting.length, 49, 'n1-2..n1-49 and n2-1 still wait');
  });

  it('hands freed slots out as a walk of the FIFO does: the same grants, wakes and waiters (fast-check)', () => {
    const holder = fc.constantFrom('a', 'b', 'c', 'd', 'e', 'f');
    const storage = fc.constantFrom<SlotStorage>('local-lvm', 'ssd', { storage: 'ceph', shared: true });
    const op = fc.oneof(
      fc.record({
        kind: fc.constant('acquire' as const),
        holder,
        node: fc.constantFrom('n1', 'n2'),
        storages: fc.array(storage, { maxLength: 2 }),
        resize: fc.constantFrom(false, false, false, true),
      }),
      fc.record({ kind: fc.constant('release' as const), holder }),
    );
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 2 }),
        fc.integer({ min: 1, max: 2 }),
        fc.array(op, { minLength: 4, maxLength: 60 }),
        (perNode, perStorage, ops) => {
          // A clock that never moves: no grant expires and no waiter goes stale, in either.
          const real = new SlotLimiter({ perNode, perStorage }, { now: () => 0 });
          const walk = new FifoWalk({ perNode, perStorage });
          const woken: { real: string[]; walk: string[] } = { real: [], walk: [] };
          for (const o of ops) {
            if (o.kind === 'acquire') {
              const got = real.tryAcquire(o.holder, o.node, o.storages, () => woken.real.push(o.holder), {
                resize: o.resize,
              });
              const want = walk.tryAcquire(o.holder, o.node, o.storages, () => woken.walk.push(o.holder), o.resize);
              assert.equal(got, want, JSON.stringify(o));
            } else {
              real.release(o.holder);
              walk.release(o.holder);
            }
            assert.deepEqual(woken.real, woken.walk);
            assert.deepEqual(real.waiting, walk.waiting);
          }
        },
      ),
      {
        numRuns: 500,
        // Two waiters for one node, the older also wanting a storage: the older gets the node.
        examples: [
          [
            1,
            1,
            [
              { kind: 'acquire', holder: 'a', node: 'n1', storages: [], resize: false },
              { kind: 'acquire', holder: 'b', node: 'n1', storages: ['ssd'], resize: false },
              { kind: 'acquire', holder: 'c', node: 'n1', storages: [], resize: false },
              { kind: 'release', holder: 'a' },
            ],
          ],
        ],
      },
    );
  });
});
