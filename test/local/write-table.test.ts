/**
 * apply's final table, written a few hundred lines at a time (writeTable), is the table that
 * table() makes whole: the same text for any number of rows (around and across the chunk size),
 * the same column widths (taken from every row, not from each chunk), and no chunk larger than a
 * chunk. CommandOutput.resultTable puts it after an empty line, and says "No resources." for none.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CommandOutput } from '../../src/local/output.ts';
import { table, writeTable } from '../../src/local/render.ts';
import type { Row } from '../../src/local/resource-view.ts';

/** Row `i`: names and messages of varying length, so that late rows widen the columns. */
function row(i: number): Row {
  const failed = i % 7 === 3;
  return {
    key: `default/vm-${i}`,
    namespace: 'default',
    name: `vm-${i}${'x'.repeat(i % 13)}`,
    phase: String(1 + (i % 4)),
    site: `site-${1 + (i % 2)}`,
    node: i % 3 ? 'r630-01' : 'ml110-01',
    vmid: String(100 + i),
    step: failed ? 'Create' : 'Ready',
    state: failed ? '' : 'running',
    ip: failed ? '' : `203.0.113.${i % 250}`,
    ipAddresses: [],
    ready: failed ? 'False' : 'True',
    synced: failed ? 'False' : 'True',
    createdAt: '2026-01-01T00:00:00Z',
    age: `${i}s`,
    pendingChanges: i % 11 === 0 ? ['memory'] : [],
    pendingReboot: false,
    reason: failed ? 'BridgeNotFound' : '',
    message: failed ? `bridge 'vmbr${i}' does not exist on node r630-01`.repeat(1 + (i % 3)) : '',
  } as Row;
}

describe('writeTable', () => {
  for (const n of [1, 2, 255, 256, 257, 511, 1000]) {
    it(`${n} rows: table() in pieces of at most 256 lines`, () => {
      const rows = Array.from({ length: n }, (_, i) => row(i));
      const pieces: string[] = [];
      writeTable((t) => pieces.push(t), rows);
      assert.equal(pieces.join(''), `${table(rows)}\n`);
      for (const p of pieces) assert.ok(p.split('\n').length - 1 <= 256, 'a piece of at most 256 lines');
      assert.equal(pieces.length, Math.ceil((n + 1) / 256));
    });
  }

  it('resultTable: an empty line, then the table; "No resources." for none', () => {
    let written = '';
    const out = {
      write: (s: string) => {
        written += s;
        return true;
      },
    } as unknown as NodeJS.WriteStream;
    const rows = [row(1), row(3)];
    new CommandOutput({ out }).resultTable(rows);
    assert.equal(written, `\n${table(rows)}\n`);
    written = '';
    new CommandOutput({ out }).resultTable([]);
    assert.equal(written, '\nNo resources.\n');
  });
});
