/**
 * gc's table (src/fleet/gc-text.ts): a long detail that several rows share is printed once under
 * the table, each of its rows naming it; a short or single one stays in its row.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { GcFinding } from '../../src/fleet/gc.ts';
import { formatGc } from '../../src/fleet/gc-text.ts';

const LONG =
  "looks like another state file's fleet (same installation, a uid this state file never held, running): not deleted";

function finding(vmid: number, detail: string): GcFinding {
  return {
    site: 'site-1',
    node: 'ml110-01',
    vmid,
    name: `vm-${vmid}`,
    kind: 'orphan',
    status: 'running',
    detail,
    scanStartedAt: 0,
  };
}

describe("gc's table", () => {
  it('a long detail shared by rows is printed once, under the table; short and single ones stay in their rows', () => {
    const text = formatGc([finding(100, LONG), finding(101, LONG), finding(102, 'locked'), finding(103, `${LONG}!`)]);
    const lines = text.split('\n');
    assert.equal(lines.filter((l) => l.includes(LONG)).length, 2, text);
    assert.match(lines[1]!, /vm-100 .* see \[1\] below$/);
    assert.match(lines[2]!, /vm-101 .* see \[1\] below$/);
    assert.match(lines[3]!, /vm-102 .* locked$/);
    assert.ok(lines[4]!.endsWith(`${LONG}!`), 'a detail of one row stays in it');
    assert.equal(lines.at(-1), `[1] ${LONG}`);
  });
});
