/**
 * The real CLI in a pseudo-terminal (script(1)) of 80x24 and 60x15, its output interpreted by a
 * headless xterm.js: the demo's 30-VM live view never stacks copies of itself in the scrollback
 * (it used to leave ~100 headers and 1,700 lines), no line of it wraps, READY and SYNCED stay
 * visible, the VMs that do not fit are counted; colours unless NO_COLOR; Ctrl-C stops apply
 * cleanly while the view is up.
 */
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type CliFixture, cliEnv, cliFixture, MAIN, writeManifests } from '../helpers/cli.ts';
import { HAVE_SCRIPT, headless, inPty } from '../helpers/terminal.ts';

const skip = !HAVE_SCRIPT && 'script(1) from util-linux is not installed';
const COLOR = /\x1b\[(?:3\d|9\d)m/;

/** A terminal that says it has colours (cliEnv turns them off for the other tests). */
function colourEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...cliEnv(), TERM: 'xterm-256color', ...extra };
  if (!('NO_COLOR' in extra)) delete env.NO_COLOR;
  delete env.FORCE_COLOR;
  // Node's getColorDepth gives a plain CI=true (as .ci/run sets) two colours: not this test's case.
  delete env.CI;
  return env;
}

interface Watched {
  code: number | null;
  raw: string;
  /** Snapshots taken while the live view was up (before the final table). */
  live: number;
  /**
   * Frames the program drew, the last one's (above the final table) too: how often the header was
   * written. The terminal's snapshots are fewer when this process is slow (xterm parses what
   * arrived since the last one in one go), so counts of frames come from the output itself.
   */
  drawn: number;
  problems: string[];
  sawTitle: string[];
  sawMore: boolean;
  final: string[];
}

/**
 * Run `argv` in a pty of the size, and check the terminal after every piece of output: never two
 * `header` lines, and while the live view is up (the header followed by the table's title, not by
 * the blank line before the final table) no wrapped line and at most rows-1 lines from the header
 * down.
 */
async function watch(
  argv: string[],
  size: { columns: number; rows: number },
  env: NodeJS.ProcessEnv,
  header: RegExp,
  /** Keys to type once the live view is up. */
  typeWhenLive?: string,
): Promise<Watched> {
  const term = headless(size.columns, size.rows, { convertEol: false }); // the pty turns \n into \r\n
  const w: Watched = {
    code: null,
    raw: '',
    live: 0,
    drawn: 0,
    problems: [],
    sawTitle: [],
    sawMore: false,
    final: [],
  };
  let typed = false;
  const code = await inPty(argv, size, env, (chunk, type) => {
    w.raw += chunk;
    term.write(chunk, () => {
      const lines = term.now.lines();
      const at = lines.flatMap((l, i) => (header.test(l) ? [i] : []));
      if (at.length > 1) w.problems.push(`${at.length} header lines:\n${lines.join('\n')}`);
      if (at.length !== 1) return;
      const frame = lines.slice(at[0]);
      if (frame.length > 1 && !/^(NAME|…)/.test(frame[1]!)) return; // the final table
      w.live++;
      if (term.now.wrapped(at[0])) w.problems.push(`a wrapped line:\n${frame.join('\n')}`);
      if (frame.length > size.rows - 1) w.problems.push(`${frame.length} lines:\n${frame.join('\n')}`);
      if (frame[1]?.startsWith('NAME')) w.sawTitle.push(frame[1]);
      if (typeWhenLive && !typed && w.sawTitle.length) {
        typed = true;
        type(typeWhenLive);
      }
      if (/^… \d+ more \(/.test(frame.at(-1) ?? '')) w.sawMore = true;
    });
  });
  w.final = await term.lines();
  w.code = code;
  w.drawn = w.raw.match(new RegExp(header.source.replace(/^\^/, ''), 'g'))?.length ?? 0;
  term.dispose();
  return w;
}

describe('in a pseudo-terminal', () => {
  it('demo (npm start) at 80x24: one header in the whole scrollback, nothing wrapped, READY visible', {
    skip,
  }, async () => {
    const header = /^Deploying the seed fleet: 30 VMs/;
    const w = await watch(
      [process.execPath, MAIN, 'demo', '--speed', '400'],
      { columns: 80, rows: 24 },
      colourEnv(),
      header,
    );
    assert.equal(w.code, 0, w.final.join('\n'));
    assert.deepEqual(w.problems.slice(0, 1), []);
    assert.ok(w.drawn - 1 >= 5, `${w.drawn - 1} frames of the live view (and the last one)`);
    assert.ok(w.live >= 1, 'the live view seen on the terminal');
    assert.ok(w.sawTitle.length > 0 && w.sawTitle.every((t) => /\sREADY\s+SYNCED\b/.test(t)), w.sawTitle[0]);
    assert.ok(w.sawMore, '30 VMs do not fit in 24 lines: "… N more"');
    assert.equal(w.final.filter((l) => header.test(l)).length, 1);
    assert.ok(w.final.some((l) => l === 'all 30 VMs ready'));
    // Below the header: a blank line, the final table (its lines wrap at 80: it is printed whole, as
    // kubectl prints it) and the summary; nothing of the live view stayed behind.
    const below = w.final.length - w.final.findIndex((l) => header.test(l));
    assert.ok(below < 75, `${below} lines below the header`);
    assert.match(w.raw, COLOR, 'colours on a terminal');
  });

  describe('apply at 60x15 with NO_COLOR', () => {
    let fx: CliFixture;
    before(async () => {
      // A simulated world 20x slower than the tests' usual: the rollout lasts long enough for the
      // live view to be drawn several times, however fast the provider gets through its steps.
      fx = await cliFixture('pp-pty-', { speed: 50 });
    });
    after(() => fx.close());

    it('fits 60 columns and 15 lines, no colour', { skip }, async () => {
      const dir = join(fx.dir, 'vms');
      mkdirSync(dir);
      writeManifests(
        dir,
        Array.from({ length: 16 }, (_, i) => ({ name: `pty-vm-${String(i).padStart(2, '0')}` })),
      );
      const argv = [
        process.execPath,
        MAIN,
        'apply',
        '--yes',
        '-f',
        dir,
        '--config',
        fx.config,
        '--state',
        join(fx.dir, 's.json'),
      ];
      const w = await watch(
        [...argv, '--task-poll', '20ms', '--yes'],
        { columns: 60, rows: 15 },
        colourEnv({ NO_COLOR: '1' }),
        /^Applying 16 VMs/,
      );
      assert.equal(w.code, 0, w.final.join('\n'));
      assert.deepEqual(w.problems.slice(0, 1), []);
      assert.ok(w.drawn - 1 >= 2, `${w.drawn - 1} frames of the live view (and the last one)`);
      assert.ok(w.live >= 1, 'the live view seen on the terminal');
      assert.ok(
        w.sawTitle.every((t) => /\sREADY\s+SYNCED\b/.test(t)),
        w.sawTitle[0],
      );
      assert.ok(w.sawMore, '16 VMs do not fit in 15 lines');
      assert.ok(w.final.some((l) => l === 'all 16 VMs ready'));
      assert.doesNotMatch(w.raw, COLOR);
    });

    it('Ctrl-C while the live view is up: apply stops as it should (exit 1, "interrupted"), the cursor shown again', {
      skip,
    }, async () => {
      const dir = join(fx.dir, 'interrupted');
      mkdirSync(dir);
      writeManifests(dir, [{ name: 'ctrl-c-1' }, { name: 'ctrl-c-2' }]);
      const argv = [
        process.execPath,
        MAIN,
        'apply',
        '--yes',
        '-f',
        dir,
        '--config',
        fx.config,
        '--state',
        join(fx.dir, 'i.json'),
      ];
      const w = await watch(
        [...argv, '--task-poll', '20ms', '--yes'],
        { columns: 80, rows: 24 },
        colourEnv(),
        /^Applying 2 VMs/,
        '\x03',
      );
      assert.equal(w.code, 1, w.final.join('\n'));
      assert.ok(w.final.includes('interrupted: run apply again to continue where it stopped'), w.final.join('\n'));
      assert.equal([...w.raw.matchAll(/\x1b\[\?25([hl])/g)].at(-1)?.[1], 'h', 'the cursor is shown at the end');
    });
  });
});
