/**
 * What a stream's terminal can do (redraw in place, colours, its size), and a region of it that is
 * redrawn in place (log-update) and again when the terminal is resized. Used by the live views of
 * apply, delete and `status --watch` (src/local/render.ts); nothing here knows about VMs.
 */
import { clearScreenDown, cursorTo, moveCursor } from 'node:readline';
import { stripVTControlCharacters, styleText } from 'node:util';
import { createLogUpdate } from 'log-update';

/** The part of a WriteStream the views use: tests pass `{ isTTY, columns, rows, write }`. */
export type OutStream = Pick<NodeJS.WriteStream, 'write'> &
  Partial<Pick<NodeJS.WriteStream, 'isTTY' | 'columns' | 'rows' | 'on' | 'off' | 'hasColors'>>;

/** Redraw in place: a terminal that understands cursor movement (TERM=dumb does not). */
export function isLiveTerminal(out: OutStream, env: NodeJS.ProcessEnv = process.env): boolean {
  return Boolean(out.isTTY) && env.TERM !== 'dumb';
}

/**
 * Colours, as chalk and Node decide them: FORCE_COLOR=0/false turns them off and any other value
 * on (whatever the stream), then NO_COLOR (any non-empty value, no-color.org) and TERM=dumb turn
 * them off, else a terminal that says it has colours.
 */
export function colorsEnabled(out: OutStream, env: NodeJS.ProcessEnv = process.env): boolean {
  const force = env.FORCE_COLOR;
  if (force !== undefined) return force !== '0' && force !== 'false';
  if (env.NO_COLOR || env.TERM === 'dumb') return false;
  if (!out.isTTY) return false;
  return typeof out.hasColors === 'function' ? out.hasColors() : true;
}

/** The size to fit a frame to; a stream that does not say (a test's, a pipe's) is 80x24. */
export function terminalSize(out: OutStream): { width: number; height: number } {
  return { width: out.columns || 80, height: out.rows || 24 };
}

export type Style = Parameters<typeof styleText>[0];

/** `text` in `style` when colours are on (the escapes from node:util, not written by hand). */
export function paint(on: boolean, style: Style | undefined, text: string): string {
  return on && style && text ? styleText(style, text, { validateStream: false }) : text;
}

/** Terminal columns of a line that may hold colour escapes (our text is ASCII plus … and —). */
export function visibleLength(s: string): number {
  return stripVTControlCharacters(s).length;
}

/** Plain text broken at spaces into lines of at most `width` columns (a longer word is cut with …). */
export function wrapText(text: string, width: number): string[] {
  const out: string[] = [];
  for (const para of text.split('\n')) {
    let cur = '';
    for (const word of para.split(/ +/)) {
      if (cur && cur.length + 1 + word.length > width) {
        out.push(cur);
        cur = '';
      }
      cur = cur ? `${cur} ${word}` : word;
    }
    out.push(ellipsis(cur, width));
  }
  return out;
}

/** Cut a plain string to `width` columns, ending in … when something was cut. */
export function ellipsis(s: string, width: number): string {
  if (s.length <= width) return s;
  return width <= 0 ? '' : `${s.slice(0, width - 1)}…`;
}

/**
 * The cursor is hidden while a frame is drawn (it would blink under the table) with the two DEC
 * private sequences every terminal since the VT220 knows: log-update's own hiding (cli-cursor)
 * registers signal-exit, whose SIGINT handler kills the process when it finds itself the last
 * listener, and it is when apply's once('SIGINT') has just run: apply would die (130) instead of
 * stopping cleanly ("interrupted: run apply again...", exit 1).
 */
const HIDE_CURSOR = '\x1b[?25l';
const SHOW_CURSOR = '\x1b[?25h';

/**
 * A region redrawn in place: `draw()` asks `frame()` for the lines (already fitted to the terminal:
 * at most its height less one, none wider than it) and log-update rewrites what changed. On a
 * resize the frame is made again for the new size. A terminal that reflows its lines (most do)
 * re-wraps the last frame when it gets narrower: those rows are erased before the next frame, so
 * no copy of it stays behind.
 */
export class Screen {
  private readonly out: OutStream;
  private readonly frame: () => string[];
  private log: ReturnType<typeof createLogUpdate>;
  private last: string[] = [];
  private lastWidth: number;
  private listening = false;
  private readonly onResize = () => this.resized();
  /** Shows the cursor again if the process exits while a frame is up (an uncaught error). */
  private readonly onExit = () => this.out.write(SHOW_CURSOR);

  constructor(out: OutStream, frame: () => string[]) {
    this.out = out;
    this.frame = frame;
    this.log = createLogUpdate(out as NodeJS.WriteStream, { showCursor: true });
    this.lastWidth = terminalSize(out).width;
  }

  draw(): void {
    if (!this.listening) {
      this.out.on?.('resize', this.onResize);
      process.once('exit', this.onExit);
      this.out.write(HIDE_CURSOR);
      this.listening = true;
    }
    this.last = this.frame();
    this.lastWidth = terminalSize(this.out).width;
    this.log(this.last.join('\n'));
  }

  /**
   * Stop redrawing. `erase`: the last frame is erased and `leave` (if any) printed where it was;
   * otherwise the last frame stays as it is, and what comes next is printed below it.
   */
  done(opts: { erase: boolean; leave?: string | undefined } = { erase: false }): void {
    if (this.listening) {
      this.out.off?.('resize', this.onResize);
      process.off('exit', this.onExit);
      this.out.write(SHOW_CURSOR);
    }
    this.listening = false;
    if (opts.erase && this.last.length) this.log.clear();
    this.log.done();
    this.last = [];
    if (opts.leave) this.out.write(`${opts.leave}\n`);
  }

  private resized(): void {
    const { width } = terminalSize(this.out);
    if (this.last.length && width < this.lastWidth) {
      // The cursor is on the line below the frame; above it, the frame as the terminal re-wrapped it.
      const rows = this.last.reduce((n, l) => n + Math.max(1, Math.ceil(visibleLength(l) / width)), 0);
      const out = this.out as NodeJS.WriteStream;
      cursorTo(out, 0);
      moveCursor(out, 0, -rows);
      clearScreenDown(out);
      this.log = createLogUpdate(out, { showCursor: true }); // it must not erase again what is already gone
    }
    if (this.last.length) this.draw();
  }
}
