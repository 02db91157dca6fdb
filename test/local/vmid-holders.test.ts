/**
 * The index of held VMIDs (src/vm/vmid-holders.ts; the local runtime's, and the controller's for
 * any site) against the rule it stands for: after any sequence of store writes (manifests applied, external names set and dropped,
 * status site and site moves written, deletions, FileStore reopened), the index answers what a
 * scan of the whole store with vmidHoldersOf (src/vm/connector.ts) answers, conflicts included.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import fc from 'fast-check';
import type { ProxmoxVM } from '../../src/api/proxmoxvm.ts';
import { ANNOTATION_EXTERNAL_NAME, FINALIZER } from '../../src/engine/resource.ts';
import { MemoryStore } from '../../src/local/memory-store.ts';
import { FileStore } from '../../src/local/store.ts';
import { vmidHoldersOf } from '../../src/vm/connector.ts';
import { VmidHolderIndex } from '../../src/vm/vmid-holders.ts';

function vm(name: string, site: string | undefined): ProxmoxVM {
  return {
    apiVersion: 'proxmox.sankofa.io/v1alpha1',
    kind: 'ProxmoxVM',
    metadata: { name, namespace: 'default', uid: '', generation: 1 },
    spec: {
      forProvider: { name, ...(site ? { site } : {}), cpu: 1, memory: '1Gi', image: 'local:import/x.qcow2' },
      providerConfigRef: { name: 'default' },
    },
  } as ProxmoxVM;
}

type Op =
  | { op: 'apply'; name: number; site: number }
  | { op: 'name'; name: number; vmid: number }
  | { op: 'status'; name: number; site: number; move: number; vmid: number }
  | { op: 'delete'; name: number }
  | { op: 'reopen' };

/** Sites by number: 0 none (the only site, when there is one), then the config's, then one it does not name. */
const siteOf = (sites: string[], i: number) => (i === 0 ? undefined : (sites[i - 1] ?? 'elsewhere'));

const ops = (siteCount: number): fc.Arbitrary<Op[]> =>
  fc.array(
    fc.oneof(
      fc.record({ op: fc.constant('apply' as const), name: fc.nat(5), site: fc.nat(siteCount + 1) }),
      // VMIDs from a small range, so that resources collide; 0 drops the external name, 99 is not a VMID.
      fc.record({ op: fc.constant('name' as const), name: fc.nat(5), vmid: fc.constantFrom(0, 99, 100, 101, 102) }),
      fc.record({
        op: fc.constant('status' as const),
        name: fc.nat(5),
        site: fc.nat(siteCount + 1),
        move: fc.nat(siteCount + 1),
        vmid: fc.constantFrom(100, 101, 103),
      }),
      fc.record({ op: fc.constant('delete' as const), name: fc.nat(5) }),
      fc.constant({ op: 'reopen' as const }),
    ),
    { maxLength: 40 },
  );

async function run(sites: string[], steps: Op[], file: string | undefined): Promise<void> {
  const onlySite = sites.length === 1 ? sites[0] : undefined;
  let store: MemoryStore<ProxmoxVM> = file ? new FileStore<ProxmoxVM>(file) : new MemoryStore<ProxmoxVM>();
  let index = new VmidHolderIndex(sites);
  // The controller's: any site, and no only site (its ProviderConfigs come and go).
  let anySite = new VmidHolderIndex();
  const open = () => {
    if (store instanceof FileStore) store.open('test');
    index = new VmidHolderIndex(sites);
    anySite = new VmidHolderIndex();
    store.addIndex((k, r) => {
      index.set(k, r);
      anySite.set(k, r);
    });
  };
  open();
  try {
    for (const step of steps) {
      const key = `default/vm-${'name' in step ? step.name : 0}`;
      const cur = store.getSync(key);
      if (step.op === 'apply') {
        const m = vm(`vm-${step.name}`, siteOf(sites, step.site));
        m.metadata.uid = cur?.metadata.uid ?? '';
        store.apply(m);
      } else if (step.op === 'reopen') {
        if (!(store instanceof FileStore)) continue;
        store.close();
        store = new FileStore<ProxmoxVM>(file!);
        open();
      } else if (!cur) {
      } else if (step.op === 'name') {
        const r = structuredClone(cur);
        const annotations = { ...r.metadata.annotations };
        if (step.vmid) annotations[ANNOTATION_EXTERNAL_NAME] = String(step.vmid);
        else delete annotations[ANNOTATION_EXTERNAL_NAME];
        r.metadata.annotations = annotations;
        r.metadata.finalizers = [FINALIZER];
        await store.update(r);
      } else if (step.op === 'status') {
        const r = structuredClone(cur);
        const to = siteOf(sites, step.move);
        r.status = {
          atProvider: {
            ...(siteOf(sites, step.site) ? { site: siteOf(sites, step.site) } : {}),
            ...(to ? { siteMove: { to, vmid: step.vmid } } : {}),
          },
        } as ProxmoxVM['status'];
        await store.updateStatus(r);
      } else if (step.op === 'delete') {
        store.markDeleted(key);
        const marked = store.getSync(key);
        if (marked && step.name % 2) {
          const r = structuredClone(marked);
          r.metadata.finalizers = [];
          await store.update(r);
        }
      }
      for (const site of [...sites, 'elsewhere'])
        assert.deepEqual(
          new Map([...index.holdersOf(site)].sort((a, b) => a[0] - b[0])),
          new Map(
            [...vmidHoldersOf(store.listSync(), sites.includes(site) ? site : '', onlySite)].sort(
              (a, b) => a[0] - b[0],
            ),
          ),
          `${site} after ${JSON.stringify(step)}`,
        );
      for (const site of [...sites, 'elsewhere'])
        assert.deepEqual(
          new Map([...anySite.holdersOf(site)].sort((a, b) => a[0] - b[0])),
          new Map([...vmidHoldersOf(store.listSync(), site, undefined)].sort((a, b) => a[0] - b[0])),
          `any site: ${site} after ${JSON.stringify(step)}`,
        );
    }
  } finally {
    if (store instanceof FileStore) store.close();
  }
}

describe('VmidHolderIndex', () => {
  const dir = mkdtempSync(join(tmpdir(), 'pp-vmid-holders-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('answers as a scan of the store does, with one site and with two, in memory', async () => {
    for (const sites of [['site-1'], ['site-1', 'site-2']])
      await fc.assert(
        fc.asyncProperty(ops(sites.length), (steps) => run(sites, steps, undefined)),
        { numRuns: 150, seed: 16 },
      );
  });

  let n = 0;
  it('answers as a scan does across FileStore writes and reopens (the index is rebuilt from the state)', async () => {
    await fc.assert(
      fc.asyncProperty(ops(2), (steps) => run(['site-1', 'site-2'], steps, join(dir, `state-${n++}.db`))),
      { numRuns: 40, seed: 16 },
    );
  });

  it('a conflict resolves to the resource later in the store, and back when it lets go', async () => {
    const store = new MemoryStore<ProxmoxVM>();
    const index = new VmidHolderIndex(['site-1']);
    store.addIndex((k, r) => index.set(k, r));
    const hold = async (name: string, vmid: number | undefined) => {
      const r = structuredClone(store.getSync(`default/${name}`)!);
      r.metadata.annotations = vmid ? { [ANNOTATION_EXTERNAL_NAME]: String(vmid) } : {};
      await store.update(r);
    };
    const a = store.apply(vm('a', undefined));
    const b = store.apply(vm('b', 'site-1'));
    await hold('a', 100);
    assert.equal(index.holdersOf('site-1').get(100), a.metadata.uid);
    await hold('b', 100);
    assert.equal(index.holdersOf('site-1').get(100), b.metadata.uid);
    await hold('b', undefined);
    assert.equal(index.holdersOf('site-1').get(100), a.metadata.uid);
    store.markDeleted('default/a');
    assert.equal(index.holdersOf('site-1').has(100), false);
  });
});
