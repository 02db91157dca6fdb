/**
 * The fault search's run clock (process.ts EngineClock) with two worlds alive at once: fast-check
 * goes on without a schedule whose time budget or timeout ran out, and that schedule's world
 * closes later, under the next one. Its close put the real clock back under the next world, whose
 * clock then stood still at every tick and went back by its offset: a guest agent due seconds
 * after a boot never came in 250 settle rounds (met only in a search's first schedules, and never
 * by a replay).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { EngineClock } from './process.ts';

test("a world's clock stays when an older world closes under it", () => {
  const real = Date.now;
  const older = new EngineClock();
  const newer = new EngineClock();
  try {
    older.install();
    older.tick(600_000);
    newer.install();
    newer.tick(60_000);
    const before = Date.now();
    older.uninstall();
    newer.tick(1000);
    // The real clock read first: read after, it ran on by whatever a loaded machine took between
    // the two reads, and the check failed once by a millisecond under a full `npm test` and a soak.
    const realAt = real();
    const after = Date.now();
    assert.ok(after - before >= 1000, `the newer world's tick moved its clock (${after - before} ms)`);
    assert.ok(after - realAt >= 61_000, "the newer world's clock is still ahead of the real one by its offset");
    newer.uninstall();
    assert.equal(Date.now, real, 'the real clock once the last world closed');
  } finally {
    Date.now = real;
  }
});
