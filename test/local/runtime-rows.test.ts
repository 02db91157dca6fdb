/**
 * LocalRuntime.rows keeps each resource's row between calls (apply's check asks for every row a
 * few times a second while few of them changed) and sorts again only when the order may have
 * changed. Whatever was written in between, it must answer what making every row afresh answers:
 * sortRows(listSync().map(rowOf)), checked here after random sequences of manifests applied (with
 * phases that change), status writes, deletions and a clock that moves (back too); and a row that
 * did not change is the same (frozen) object as the call before.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { parseProviderConfig } from '../../src/api/provider-config-load.ts';
import type { ProxmoxVM } from '../../src/api/proxmoxvm.ts';
import { keyOf } from '../../src/engine/resource.ts';
import { rowOf, sortRows } from '../../src/local/resource-view.ts';
import { LocalRuntime } from '../../src/local/runtime.ts';
import { PHASE_ANNOTATION } from '../../src/workspace/phases.ts';

/** A site nothing connects to: these runtimes are never run. */
const CONFIG = `apiVersion: proxmox.sankofa.io/v1alpha1
kind: ClusterProviderConfig
metadata:
  name: default
spec:
  credentials:
    source: Secret
    secretRef: { name: creds, namespace: crossplane-system }
  sites:
    - name: site-1
      endpoints: ["https://127.0.0.1:1"]
      nodes: [pve1]
---
apiVersion: v1
kind: Secret
metadata: { name: creds, namespace: crossplane-system }
stringData: { tokenid: "root@pam!t", token: "00000000-0000-0000-0000-000000000000" }
`;

const T0 = Date.parse('2026-01-01T00:00:00Z');

function vm(i: number, phase: number): ProxmoxVM {
  const name = `vm-${i}`;
  return {
    apiVersion: 'proxmox.sankofa.io/v1alpha1',
    kind: 'ProxmoxVM',
    metadata: {
      name,
      namespace: 'default',
      uid: '',
      generation: 1,
      // Spread over the AGE column's units, so that a moving clock changes some ages and not others.
      creationTimestamp: new Date(T0 - i * 47_000).toISOString(),
      ...(phase ? { annotations: { [PHASE_ANNOTATION]: String(phase) } } : {}),
    },
    spec: {
      forProvider: { name, site: 'site-1', cpu: 1, memory: '1Gi', image: 'local:import/x.qcow2' },
      providerConfigRef: { name: 'default' },
    },
  } as ProxmoxVM;
}

type Op =
  | { op: 'apply'; i: number; phase: number }
  | { op: 'status'; i: number; ready: boolean; step: string }
  | { op: 'delete'; i: number }
  | { op: 'clock'; s: number };

const ops: fc.Arbitrary<Op[]> = fc.array(
  fc.oneof(
    fc.record({ op: fc.constant('apply' as const), i: fc.nat(7), phase: fc.nat(2) }),
    fc.record({
      op: fc.constant('status' as const),
      i: fc.nat(7),
      ready: fc.boolean(),
      step: fc.constantFrom('Create', 'Start', 'Ready'),
    }),
    fc.record({ op: fc.constant('delete' as const), i: fc.nat(7) }),
    fc.record({ op: fc.constant('clock' as const), s: fc.constantFrom(0, 1, 30, 3600, 90_000, -45, -4000) }),
  ),
  { maxLength: 40 },
);

describe('LocalRuntime.rows', () => {
  it('answers as rows made afresh do, and hands out an unchanged row again', async () => {
    await fc.assert(
      fc.asyncProperty(ops, async (seq) => {
        const rt = new LocalRuntime({ config: parseProviderConfig(CONFIG, 'config.yaml') });
        let now = T0;
        let last = new Map<string, object>();
        try {
          for (const o of seq) {
            const before = new Map(rt.store.listSync().map((r) => [keyOf(r), r.metadata.resourceVersion]));
            const ageBefore = new Map(rt.rows(now).map((r) => [r.key, r.age]));
            if (o.op === 'apply') rt.applyManifests([vm(o.i, o.phase)]);
            else if (o.op === 'delete') rt.markDeleted([`default/vm-${o.i}`]);
            else if (o.op === 'clock') now += o.s * 1000;
            else {
              const r = await rt.store.get(`default/vm-${o.i}`);
              if (r) {
                const status = o.ready ? 'True' : 'False';
                r.status = {
                  conditions: [{ type: 'Ready', status, reason: 'X', lastTransitionTime: '2026-01-01T00:00:00Z' }],
                  atProvider: { step: o.step },
                };
                await rt.store.updateStatus(r);
              }
            }
            const rows = rt.rows(now);
            const fresh = sortRows(rt.store.listSync().map((r) => rowOf(r, now)));
            assert.deepEqual(rows, fresh);
            for (const row of rows) {
              assert.ok(Object.isFrozen(row));
              const r = rt.store.getSync(row.key)!;
              const unchanged =
                before.get(row.key) === r.metadata.resourceVersion && ageBefore.get(row.key) === row.age;
              if (unchanged && last.has(row.key)) assert.equal(row, last.get(row.key), `${row.key}: the same row`);
            }
            last = new Map(rows.map((r) => [r.key, r]));
          }
        } finally {
          await rt.close();
        }
      }),
      { numRuns: 60 },
    );
  });
});
