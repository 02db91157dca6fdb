/**
 * The scale set's Ready/Synced conditions (src/scaleset/status.ts) without an apiserver: which
 * counts are Ready, the reasons while scaling, and that a condition's lastTransitionTime moves
 * only when its status flips (so an unchanged set writes nothing and records no event).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ProxmoxVMScaleSet } from '../../src/api/scaleset.ts';
import type { ScaleActions } from '../../src/scaleset/reconcile.ts';
import { readyCondition, syncedCondition, withConditions } from '../../src/scaleset/status.ts';

function set(replicas: number, deleting = false): ProxmoxVMScaleSet {
  return {
    apiVersion: 'proxmox.sankofa.io/v1alpha1',
    kind: 'ProxmoxVMScaleSet',
    metadata: {
      name: 'web',
      namespace: 'default',
      uid: 'u',
      generation: 4,
      ...(deleting ? { deletionTimestamp: '2026-01-01T00:00:00Z' } : {}),
    },
    spec: { replicas, template: { spec: { forProvider: { site: 'site-1' } } } } as ProxmoxVMScaleSet['spec'],
  };
}

function plan(replicas: number, readyReplicas: number, updatedReplicas = replicas): ScaleActions {
  return {
    create: [],
    update: [],
    delete: [],
    status: {
      replicas,
      readyReplicas,
      updatedReplicas,
      selector: 'proxmox.sankofa.io/scaleset=web',
      observedGeneration: 4,
    },
  };
}

describe('scale set conditions', () => {
  it('Ready only with exactly the wanted replicas, all Ready and up to date', () => {
    assert.deepEqual(readyCondition(set(3), plan(3, 3)), {
      type: 'Ready',
      status: 'True',
      reason: 'Available',
      message: '3/3 replicas Ready, 3 up to date',
      observedGeneration: 4,
    });
    assert.equal(readyCondition(set(3), plan(3, 2)).reason, 'Creating');
    assert.equal(readyCondition(set(3), plan(2, 2)).reason, 'Creating');
    assert.equal(readyCondition(set(3), plan(3, 3, 2)).status, 'False', 'a rollout in progress');
    assert.equal(readyCondition(set(1), plan(3, 3)).reason, 'Deleting', 'scaling down');
    assert.equal(readyCondition(set(3, true), plan(3, 3)).reason, 'Deleting');
    assert.equal(readyCondition(set(0), plan(0, 0)).status, 'True', 'zero replicas wanted, zero there');
  });

  it('Synced carries the error; lastTransitionTime moves only when the status flips', () => {
    const t0 = Date.parse('2026-01-01T00:00:00Z');
    const first = withConditions(undefined, [readyCondition(set(2), plan(2, 1)), syncedCondition(set(2))], t0);
    assert.equal(first.changed.length, 2);
    const again = withConditions(
      first.status,
      [readyCondition(set(2), plan(2, 1)), syncedCondition(set(2))],
      t0 + 60_000,
    );
    assert.deepEqual(again.changed, [], 'nothing changed: no write, no event');
    assert.deepEqual(again.status, first.status);
    const failed = withConditions(again.status, [syncedCondition(set(2), new Error('boom'))], t0 + 120_000);
    assert.deepEqual(
      failed.changed.map((c) => [c.type, c.status, c.reason, c.message]),
      [['Synced', 'False', 'ReconcileError', 'boom']],
    );
    const synced = failed.status.conditions!.find((c) => c.type === 'Synced')!;
    assert.equal(synced.lastTransitionTime, '2026-01-01T00:02:00Z');
    // A new message with the same status keeps the transition time.
    const ready = withConditions(failed.status, [readyCondition(set(2), plan(2, 2))], t0 + 180_000);
    assert.equal(ready.status.conditions!.find((c) => c.type === 'Ready')!.status, 'True');
    const still = withConditions(ready.status, [syncedCondition(set(2), new Error('other'))], t0 + 240_000);
    assert.equal(still.status.conditions!.find((c) => c.type === 'Synced')!.lastTransitionTime, '2026-01-01T00:02:00Z');
  });
});
