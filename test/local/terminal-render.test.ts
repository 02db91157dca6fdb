/**
 * The live views on small terminals, through a headless xterm.js that interprets what they write
 * (test/helpers/terminal.ts): apply's Progress and `status --watch`'s StatusScreen fit the width
 * (columns dropped by priority, READY and SYNCED kept, nothing wrapped) and the height ("… N more"),
 * redraw in place (one header in the whole scrollback, however many frames), redraw on resize; a
 * pipe gets one line per change and no escape sequence; NO_COLOR, FORCE_COLOR and TERM=dumb count.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Progress, StatusScreen } from '../../src/local/render.ts';
import type { Row } from '../../src/local/resource-view.ts';
import { colorsEnabled } from '../../src/local/terminal.ts';
import { testTerminal, writtenLines } from '../helpers/terminal.ts';

/** VM `i` of a 30-VM rollout at tick `t`: pending, then importing, starting, ready; VM 27 fails for good. */
function row(i: number, t: number): Row {
  const stage = i === 27 ? 'failed' : t < i ? 'pending' : t < i + 3 ? 'import' : t < i + 5 ? 'start' : 'ready';
  return {
    key: `default/vm-${String(i).padStart(2, '0')}`,
    namespace: 'default',
    name: `business-integration-vm-${String(i).padStart(2, '0')}`,
    phase: String(1 + Math.floor(i / 8)),
    site: 'site-2',
    node: 'r630-01',
    vmid: stage === 'pending' ? '' : String(100 + i),
    step: { pending: 'Pending', import: 'Import', start: 'Start', ready: 'Ready', failed: 'Create' }[stage],
    state: stage === 'ready' || stage === 'start' ? 'running' : '',
    ip: stage === 'ready' ? `203.0.113.${100 + i}` : '',
    ipAddresses: stage === 'ready' ? [`203.0.113.${100 + i}`] : [],
    ready: stage === 'ready' ? 'True' : stage === 'failed' ? 'False' : 'Unknown',
    synced: stage === 'failed' ? 'False' : stage === 'pending' ? 'Unknown' : 'True',
    createdAt: '2026-01-01T00:00:00Z',
    age: `${t}s`,
    pendingChanges: i === 3 && stage === 'ready' ? ['memory', 'cores'] : [],
    pendingReboot: i === 3 && stage === 'ready',
    reason: stage === 'failed' ? 'BridgeNotFound' : '',
    message:
      stage === 'failed'
        ? "bridge 'vmbr9' does not exist on node r630-01: create it in Proxmox or fix the network of spec.forProvider"
        : '',
  };
}
const fleet = (t: number) => Array.from({ length: 30 }, (_, i) => row(i, t));
const header = (t: number) =>
  `Applying 30 VMs, ${fleet(t).filter((r) => r.ready === 'True').length} ready (${t}s) phases 1:8/8 2:8/8 3:0/8 4:0/6 — waiting: phase 3 waits for phase 2`;
const COLOR = /\x1b\[(?:3\d|9\d|1|2)m/; // a foreground colour, bold or dim

describe('live views on a terminal', () => {
  it('80x24, 40 frames of a 30-VM apply: fits, redraws in place, keeps READY and SYNCED, ends with one header line', async () => {
    const t = testTerminal(80, 24);
    const p = new Progress(t.stream, {});
    for (let tick = 0; tick < 40; tick++) {
      p.update(fleet(tick), header(tick));
      const lines = await t.lines();
      assert.equal(
        lines.filter((l) => l.startsWith('Applying 30 VMs')).length,
        1,
        `frame ${tick}:\n${lines.join('\n')}`,
      );
      assert.equal(await t.scrolledOff(), 0, `frame ${tick}: nothing scrolled off the screen`);
      assert.equal(await t.wrapped(), false, `frame ${tick}: no line wrapped`);
      assert.ok(lines.length <= 23, `frame ${tick}: ${lines.length} lines`);
      assert.match(lines[1]!, /^NAME\s.*\sREADY\s+SYNCED\b/, `frame ${tick}: the title row`);
      // 30 rows do not fit: the last line counts the others; the failed VM is always among those shown.
      assert.match(lines.at(-1)!, /^… \d+ more \(/);
      assert.ok(
        lines.some((l) => /^business-integration-vm-27\s.*\sFalse\s+False\s+BridgeNotFound/.test(l)),
        `frame ${tick}`,
      );
    }
    assert.ok(
      writtenLines(t.writes).every((l) => l.length <= 80),
      'no line written is wider than the terminal',
    );
    assert.match(t.writes.join(''), COLOR, 'colours on a terminal that has them');
    p.done();
    assert.deepEqual(await t.lines(), [`${header(39).slice(0, 79)}…`], 'only the (cut) header line stays');
    t.dispose();
  });

  it('narrow terminals: low-priority columns go first, NAME, READY and SYNCED stay, nothing wraps', async () => {
    const titles = new Map<number, string>();
    for (const width of [160, 100, 80, 60, 40, 30]) {
      const t = testTerminal(width, 24);
      const p = new Progress(t.stream, { NO_COLOR: '1' });
      p.update(fleet(20), header(20));
      const lines = await t.lines();
      assert.equal(await t.wrapped(), false, `${width} columns:\n${lines.join('\n')}`);
      assert.match(lines[1]!, /^NAME\s.*READY\s+SYNCED/, `${width} columns`);
      titles.set(width, lines[1]!.split(/\s+/).join(' '));
      t.dispose();
    }
    assert.equal(titles.get(160), 'NAME PHASE NODE VMID STEP STATE IP READY SYNCED PENDING MESSAGE');
    assert.equal(titles.get(80), 'NAME STEP READY SYNCED MESSAGE');
    assert.equal(titles.get(30), 'NAME READY SYNCED');
  });

  it('a terminal resized (SIGWINCH): the frame is made again for the new size, no copy left behind', async () => {
    const t = testTerminal(120, 30);
    const p = new Progress(t.stream, { NO_COLOR: '1' });
    const few = fleet(40).slice(20, 26);
    p.update(few, 'Applying 6 VMs');
    assert.match((await t.lines())[1]!, /\sIP\s/, 'wide: the IP column');
    await t.resize(60, 30);
    let lines = await t.lines();
    assert.equal(lines.filter((l) => l.startsWith('Applying 6 VMs')).length, 1, lines.join('\n'));
    assert.equal(await t.wrapped(), false, lines.join('\n'));
    assert.doesNotMatch(lines[1]!, /\sIP\s/, 'narrow: IP dropped');
    assert.equal(lines.length, 8);
    await t.resize(100, 30);
    lines = await t.lines();
    assert.equal(lines.filter((l) => l.startsWith('Applying 6 VMs')).length, 1, lines.join('\n'));
    assert.equal(lines.length, 8);
    p.done();
    await t.resize(50, 30);
    assert.deepEqual(await t.lines(), ['Applying 6 VMs'], 'after done() a resize draws nothing');
    t.dispose();
  });

  it('status --watch: the table fitted under its head line, redrawn in place; a message wrapped, not cut', async () => {
    const t = testTerminal(80, 24);
    const s = new StatusScreen(t.stream, { NO_COLOR: '1' });
    for (let tick = 0; tick < 10; tick++) {
      s.draw(`Every 2s: /var/lib/state.json  2026-01-01T00:00:${String(tick).padStart(2, '0')}Z`, fleet(tick * 4));
      const lines = await t.lines();
      assert.equal(lines.filter((l) => l.startsWith('Every 2s:')).length, 1);
      assert.equal(await t.scrolledOff(), 0);
      assert.equal(await t.wrapped(), false);
      assert.match(lines[2]!, /^NAME\s.*READY\s+SYNCED/);
      assert.match(lines.at(-1)!, /^… \d+ more/);
    }
    const missing =
      'no state file at /var/lib/provider-proxmox/cli-default/state.json: nothing has been applied for installation cli-default (status --live --config FILE lists its VMs in Proxmox)';
    s.draw('Every 2s: /var/lib/state.json', missing);
    const lines = await t.lines();
    assert.equal(await t.wrapped(), false);
    assert.equal(lines.slice(2).join(' '), missing, 'every word of it, over several lines');
    s.done();
    assert.deepEqual(await t.lines(), lines, 'the last frame stays');
    t.dispose();
  });
});

describe('live views elsewhere', () => {
  it('not a terminal: one timestamped line per change of each VM, no escape sequence', () => {
    const writes: string[] = [];
    const out = { isTTY: false, write: (s: string) => writes.push(s) > 0 } as unknown as NodeJS.WriteStream;
    const p = new Progress(out, {});
    p.update(fleet(0), header(0));
    const first = writes.length;
    assert.equal(first, 30, 'a line per VM');
    p.update(fleet(0), header(0));
    assert.equal(writes.length, first, 'nothing changed: nothing printed');
    p.update(fleet(1), header(1));
    assert.equal(writes.length, first + 1, 'one VM moved on: one line');
    assert.match(writes.at(-1)!, /^\[\s+\d+\.\ds\] business-integration-vm-01: Import vmid=101 node=r630-01\n$/);
    p.log('phases 1:0/8');
    p.log('phases 1:0/8');
    assert.match(writes.at(-1)!, /^\[\s+\d+\.\ds\] phases 1:0\/8\n$/);
    assert.equal(writes.filter((w) => w.includes('phases')).length, 1, 'a repeated log line once');
    p.done();
    assert.doesNotMatch(writes.join(''), /\x1b/);
  });

  it('TERM=dumb: lines, as for a pipe; --quiet (no stream): nothing', () => {
    const t = testTerminal(80, 24);
    const p = new Progress(t.stream, { TERM: 'dumb' });
    assert.equal(p.live, false);
    p.update(fleet(0), header(0));
    p.done();
    assert.doesNotMatch(t.writes.join(''), /\x1b/);
    assert.equal(t.writes.length, 30);
    const quiet = new Progress(null, {});
    quiet.update(fleet(0), header(0));
    quiet.log('x');
    quiet.done();
    t.dispose();
  });

  it('colours: NO_COLOR and FORCE_COLOR=0 turn them off, FORCE_COLOR=1 on, a pipe has none', async () => {
    for (const [env, want] of [
      [{}, true],
      [{ NO_COLOR: '1' }, false],
      [{ NO_COLOR: '' }, true],
      [{ FORCE_COLOR: '0' }, false],
      [{ TERM: 'dumb' }, false],
      [{ NO_COLOR: '1', FORCE_COLOR: '1' }, true],
    ] as const) {
      const t = testTerminal(120, 24);
      new Progress(t.stream, env).update(fleet(30), header(30));
      assert.equal(COLOR.test(t.writes.join('')), want, JSON.stringify(env));
      t.dispose();
    }
    assert.equal(colorsEnabled({ isTTY: false, write: () => true }, {}), false);
    assert.equal(colorsEnabled({ isTTY: false, write: () => true }, { FORCE_COLOR: '1' }), true);
  });
});
