/**
 * conditionEvent (src/engine/events.ts): which condition changes are worth a Kubernetes Event, and
 * of which type and reason. The reconciler's tests (reconciler-status.test.ts) check the events a
 * whole reconcile records; this one goes through the cases one by one.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { conditionEvent } from '../../src/engine/events.ts';

describe('conditionEvent', () => {
  it('which changes are worth an event', () => {
    const ev = (c: Parameters<typeof conditionEvent>[0], p?: Parameters<typeof conditionEvent>[1], cannot?: string) => {
      const e = conditionEvent(c, p, cannot);
      return e ? `${e.type} ${e.reason}` : undefined;
    };
    const synced = (status: string, reason: string) => ({ type: 'Synced', status, reason });
    assert.equal(ev(synced('True', 'ReconcileSuccess')), undefined);
    assert.equal(ev(synced('True', 'ReconcileSuccess'), synced('False', 'Unavailable')), 'Normal ReconcileSuccess');
    assert.equal(
      ev(synced('False', 'Unavailable'), undefined, 'CannotObserveExternalResource'),
      'Warning CannotObserveExternalResource',
    );
    assert.equal(ev({ type: 'Ready', status: 'True', reason: 'Available' }), 'Normal Available');
    assert.equal(
      ev({ type: 'Ready', status: 'False', reason: 'Waiting' }),
      'Normal Waiting',
      'waiting for a slot is no problem',
    );
    assert.equal(ev({ type: 'Ready', status: 'False', reason: 'Locked' }), 'Warning Locked');
    const pending = (status: string, reason: string) => ({ type: 'PendingReboot', status, reason });
    assert.equal(ev(pending('False', 'NoPendingChanges')), undefined, 'nothing pending from the start: nothing to say');
    assert.equal(ev(pending('True', 'ChangesPending')), 'Warning ChangesPending');
    assert.equal(
      ev(pending('False', 'NoPendingChanges'), pending('True', 'ChangesPending')),
      'Normal NoPendingChanges',
    );
  });
});
