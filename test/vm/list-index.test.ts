/**
 * The marker search's candidates from a bulk list's index (src/vm/list-index.ts unheldTagged):
 * with the VMID holders as the runtimes keep them (src/vm/vmid-holders.ts HeldVmids, followed by
 * what changed since the last question), the same VMs as a scan of every tagged VM against a plain
 * map of the same holders, after any sequence of holder changes, lists and questions: VMs held by
 * the asking resource included, by others excluded, containers, templates, unplaced and untagged
 * VMs never, a create's placeholder (locked, untagged) always, and past the end of the change log.
 * The search itself (twins, other installations, an operator's copies) runs through the index in
 * test/vm/adoption.test.ts. A list with one VM's entry put in (patchedList, a resource's own view
 * of the list) answers every lookup as the index of the same list built from scratch.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import type { ClusterResource } from '../../src/proxmox/types.ts';
import { listIndex, patchedIndex, patchedList, unheldTagged } from '../../src/vm/list-index.ts';
import { HeldVmids } from '../../src/vm/vmid-holders.ts';

const VMIDS = 12;
const UIDS = ['u1', 'u2', 'u3'];

const entry: fc.Arbitrary<Omit<ClusterResource, 'vmid'>> = fc.record({
  type: fc.constantFrom('qemu', 'qemu', 'qemu', 'lxc'),
  node: fc.constantFrom('n1', 'n2', undefined),
  tags: fc.constantFrom('provider-proxmox', 'a;provider-proxmox', 'other', undefined),
  lock: fc.constantFrom(undefined, undefined, 'create', 'clone', 'backup'),
  template: fc.constantFrom(0, 0, 1),
  name: fc.constantFrom('a', 'b'),
}) as fc.Arbitrary<Omit<ClusterResource, 'vmid'>>;

/** A bulk list: some of the VMIDs, each a VM or container of some kind, and a node entry. */
const list: fc.Arbitrary<ClusterResource[]> = fc
  .array(fc.option(entry, { nil: undefined }), { minLength: VMIDS, maxLength: VMIDS })
  .map((es) => [
    { type: 'node', node: 'n1', id: 'node/n1' } as ClusterResource,
    ...es.flatMap((e, i) => (e ? [{ ...e, vmid: 100 + i, id: `${e.type}/${100 + i}` } as ClusterResource] : [])),
  ]);

type Op =
  | { op: 'set'; vmid: number; uid: number }
  | { op: 'delete'; vmid: number }
  | { op: 'ask'; uid: number }
  | { op: 'list'; list: ClusterResource[] }
  | { op: 'burst' }
  | { op: 'clear' };

const ops: fc.Arbitrary<Op[]> = fc.array(
  fc.oneof(
    { weight: 4, arbitrary: fc.record({ op: fc.constant('set' as const), vmid: fc.nat(VMIDS), uid: fc.nat(2) }) },
    { weight: 2, arbitrary: fc.record({ op: fc.constant('delete' as const), vmid: fc.nat(VMIDS) }) },
    { weight: 4, arbitrary: fc.record({ op: fc.constant('ask' as const), uid: fc.nat(2) }) },
    { weight: 1, arbitrary: fc.record({ op: fc.constant('list' as const), list }) },
    // More changes than the log keeps: the index is built again.
    { weight: 1, arbitrary: fc.constant({ op: 'burst' as const }) },
    { weight: 1, arbitrary: fc.constant({ op: 'clear' as const }) },
  ),
  { maxLength: 60 },
);

const vmids = (es: ClusterResource[]) => es.map((e) => Number(e.vmid)).sort((a, b) => a - b);

describe('unheldTagged', () => {
  it('follows the holders to the same candidates as a scan', () => {
    fc.assert(
      fc.property(list, ops, (first, steps) => {
        const held = new HeldVmids();
        let index = listIndex(first);
        for (const s of steps) {
          if (s.op === 'set') held.set(100 + s.vmid, UIDS[s.uid]!);
          else if (s.op === 'delete') held.delete(100 + s.vmid);
          else if (s.op === 'list') index = listIndex(s.list);
          else if (s.op === 'clear') held.clear();
          else if (s.op === 'burst') {
            for (let i = 0; i < 9000; i++) held.set(100 + (i % VMIDS), UIDS[Math.floor(i / VMIDS) % 3]!);
            held.delete(100);
          } else {
            const uid = UIDS[s.uid]!;
            const got = vmids(unheldTagged(index, held, uid));
            assert.deepEqual(got, vmids(unheldTagged(index, new Map(held), uid)));
            assert.equal(new Set(got).size, got.length, 'each VM once');
          }
        }
      }),
      { numRuns: 300, seed: 16 },
    );
  });

  it('a VM the asking resource holds is a candidate; one another resource holds is not', () => {
    const l: ClusterResource[] = [
      { type: 'qemu', vmid: 100, node: 'n1', tags: 'provider-proxmox', name: 'x' },
      { type: 'qemu', vmid: 101, node: 'n1', tags: 'provider-proxmox', name: 'y' },
      { type: 'qemu', vmid: 102, node: 'n1', lock: 'create', name: 'z' },
      { type: 'qemu', vmid: 103, node: 'n1', tags: 'provider-proxmox', template: 1, name: 't' },
      { type: 'lxc', vmid: 104, node: 'n1', tags: 'provider-proxmox', name: 'c' },
      { type: 'qemu', vmid: 105, tags: 'provider-proxmox', name: 'unplaced' },
    ] as ClusterResource[];
    const held = new HeldVmids();
    const index = listIndex(l);
    assert.deepEqual(vmids(unheldTagged(index, held, 'me')), [100, 101, 102]);
    held.set(100, 'me');
    held.set(101, 'other');
    assert.deepEqual(vmids(unheldTagged(index, held, 'me')), [100, 102]);
    assert.deepEqual(vmids(unheldTagged(index, held, 'other')), [101, 102]);
    held.set(100, 'other');
    held.delete(101);
    assert.deepEqual(vmids(unheldTagged(index, held, 'me')), [101, 102]);
    assert.deepEqual(held.vmidsOf('other'), [100]);
  });
});

describe('patchedList and patchedIndex', () => {
  /** A VM entry at one of the VMIDs (or past them: added), with any name, tags and lock. */
  const patch = fc
    .tuple(entry, fc.nat(VMIDS + 1))
    .map(
      ([e, i]) =>
        ({ ...e, type: 'qemu', id: `qemu/${100 + i}`, vmid: 100 + i, node: e.node ?? 'n2' }) as ClusterResource,
    );

  it('answers every lookup as the index of the same list built from scratch', () => {
    fc.assert(
      fc.property(list, patch, fc.nat(2), (base, e, who) => {
        // A VM (not a container) is what a view puts in: a VMID is a VM's or a container's.
        const from = base.filter((x) => !(x.vmid === e.vmid && x.type !== 'qemu'));
        const got = patchedList(from, e);
        const at = from.findIndex((x) => x.vmid === e.vmid);
        const want = at >= 0 ? from.map((x, i) => (i === at ? e : x)) : [...from, e];
        assert.deepEqual(got, want);
        assert.equal(from.includes(e), false, 'the list it came from is unchanged');
        const b = listIndex([...want]);
        // The list's index, and the index alone (patchedIndex: what an own view is looked up by).
        for (const a of [listIndex(got), patchedIndex(from, e)]) {
          for (let v = 99; v <= 100 + VMIDS + 1; v++) {
            assert.equal(a.byVmid.get(v), b.byVmid.get(v));
            assert.equal(a.byVmid.has(v), b.byVmid.has(v));
          }
          for (const n of ['a', 'b', 'c']) {
            assert.deepEqual(a.byName.get(n), b.byName.get(n));
            assert.equal(a.byName.has(n), b.byName.has(n));
          }
          assert.deepEqual(new Map(a.byVmid), b.byVmid);
          assert.equal(a.byName.size, b.byName.size);
          assert.deepEqual(vmids(a.tagged), vmids(b.tagged));
          assert.deepEqual(a.nodes, b.nodes);
          const held = new Map([[100 + who, UIDS[who]!]]);
          assert.deepEqual(vmids(unheldTagged(a, held, UIDS[0]!)), vmids(unheldTagged(b, held, UIDS[0]!)));
        }
      }),
      { numRuns: 500, seed: 16 },
    );
  });
});
