/**
 * Which conditions `apply` and `delete` stop waiting on (src/local/resource-view.ts
 * failedPermanently): a lock whose worker died (LockWithoutTask, src/vm/lock-holder.ts) is one, as
 * only a person clears it; a lock a running task holds (Locked) is waited for. And how a delete's
 * step reads in the table (rowOf).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ProxmoxVM } from '../../src/api/proxmoxvm.ts';
import { failedPermanently, rowOf } from '../../src/local/resource-view.ts';

function withConditions(ready: [string, string], synced: [string, string] = ['True', 'ReconcileSuccess']): ProxmoxVM {
  const at = '2026-12-06T20:00:00Z';
  return {
    apiVersion: 'proxmox.crossplane.io/v1alpha1',
    kind: 'ProxmoxVM',
    metadata: { name: 'vm-a', namespace: 'default', uid: 'u1', generation: 1 },
    spec: { forProvider: { cpu: 1, memory: '1Gi' } },
    status: {
      conditions: [
        { type: 'Ready', status: ready[0], reason: ready[1], lastTransitionTime: at },
        { type: 'Synced', status: synced[0], reason: synced[1], lastTransitionTime: at },
      ],
    },
  } as unknown as ProxmoxVM;
}

describe('stop reasons of apply and delete', () => {
  it('a lock no task holds stops the wait; a lock a task holds does not', () => {
    assert.equal(failedPermanently(withConditions(['False', 'LockWithoutTask'])), true);
    assert.equal(failedPermanently(withConditions(['False', 'Locked'])), false);
  });
  it("delete's LockWithoutTask (Synced) stops it too; a Synced Locked does not", () => {
    assert.equal(failedPermanently(withConditions(['False', 'Deleting'], ['False', 'LockWithoutTask'])), true);
    assert.equal(failedPermanently(withConditions(['False', 'Deleting'], ['False', 'Locked'])), false);
  });
  it('NoQuorum and TaskDied are waited on; DiskSizeStale and DiskVolumeMissing stop it (only an operator mends them)', () => {
    assert.equal(failedPermanently(withConditions(['False', 'Creating'], ['False', 'DiskVolumeMissing'])), true);
    assert.equal(failedPermanently(withConditions(['True', 'Available'], ['False', 'NoQuorum'])), false);
    assert.equal(failedPermanently(withConditions(['True', 'Available'], ['False', 'DiskSizeStale'])), true);
    assert.equal(failedPermanently(withConditions(['True', 'Available'], ['False', 'TaskDied'])), false);
  });

  it('a delete held by its checks reads Deleting in the step column, not Deleting/Deleting; a step of its own after the slash', () => {
    const r = withConditions(['False', 'Deleting'], ['False', 'VMProtected']);
    r.metadata.deletionTimestamp = '2026-12-07T21:00:00Z';
    r.status!.atProvider = { step: 'Deleting' };
    assert.equal(rowOf(r).step, 'Deleting');
    r.status!.atProvider = { step: 'Stopping' };
    assert.equal(rowOf(r).step, 'Deleting/Stopping');
  });
});
