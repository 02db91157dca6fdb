/**
 * The bound of a reconcile and of a request (src/proxmox/deadline.ts): aborted by its parent or
 * by its timeout (a TimeoutError, as AbortSignal.timeout's), and once released it holds nothing:
 * the parent's abort no longer reaches it, and its timer is gone.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { describe, it } from 'node:test';
import { deadline } from '../../src/proxmox/deadline.ts';

describe('deadline', () => {
  it('follows its parent, with the parent reason', () => {
    const parent = new AbortController();
    const d = deadline(60_000, parent.signal);
    parent.abort(new Error('SIGTERM'));
    assert.equal(d.signal.aborted, true);
    assert.equal((d.signal.reason as Error).message, 'SIGTERM');
    d.release();
  });

  it('is aborted at once when its parent already is', () => {
    const parent = new AbortController();
    parent.abort(new Error('lost leadership'));
    assert.equal(deadline(60_000, parent.signal).signal.aborted, true);
  });

  it('times out with a TimeoutError', async () => {
    const d = deadline(0);
    await once(d.signal, 'abort');
    assert.equal((d.signal.reason as DOMException).name, 'TimeoutError');
  });

  it('released, it lets go of the parent and of its timer', async () => {
    const parent = new AbortController();
    const d = deadline(0, parent.signal);
    d.release();
    parent.abort();
    // The timer was cleared: a later timer (timers fire in order of their due time) finds the
    // signal still not aborted.
    await new Promise((r) => setTimeout(r, 5));
    assert.equal(d.signal.aborted, false);
  });
});
