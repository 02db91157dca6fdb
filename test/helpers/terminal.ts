/**
 * Terminals for tests of the live views: a headless xterm.js, which interprets what is written as a
 * real terminal does (cursor movement, erasing, wrapping, scrollback, reflow on resize), so what is
 * left in its buffer is what an operator would see and could scroll back to; a stream that looks
 * like a TTY of a given size and writes into one; and the real CLI run in a pseudo-terminal
 * (script(1) from util-linux) whose output goes into one.
 */
import { spawn, spawnSync } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { stripVTControlCharacters } from 'node:util';
import xterm from '@xterm/headless';

export interface Headless {
  /** Interpret `s`; `then` once it has been. */
  write(s: string, then?: () => void): void;
  /** Once everything written is interpreted: every line of the buffer (scrollback, then the screen). */
  lines(): Promise<string[]>;
  /** Whether any line of the buffer is the continuation of a line the terminal wrapped. */
  wrapped(): Promise<boolean>;
  /** Lines scrolled off the top of the screen. */
  scrolledOff(): Promise<number>;
  /** Resize, once everything written so far is shown (it reflows, as most terminals do). */
  resize(columns: number, rows: number): Promise<void>;
  /**
   * The same, synchronously, on what is interpreted so far (for a `write` callback); `wrapped`
   * from the buffer line `from` on.
   */
  now: { lines(): string[]; wrapped(from?: number): boolean };
  dispose(): void;
}

export function headless(columns: number, rows: number, opts: { convertEol?: boolean } = {}): Headless {
  const term = new xterm.Terminal({
    cols: columns,
    rows,
    scrollback: 100_000,
    allowProposedApi: true,
    convertEol: opts.convertEol ?? true,
  });
  const flushed = () => new Promise<void>((resolve) => term.write('', resolve));
  const now = {
    lines() {
      const b = term.buffer.active;
      const out: string[] = [];
      for (let i = 0; i < b.length; i++) out.push(b.getLine(i)!.translateToString(true));
      while (out.length && out.at(-1) === '') out.pop();
      return out;
    },
    wrapped(from = 0) {
      const b = term.buffer.active;
      for (let i = from; i < b.length; i++) if (b.getLine(i)!.isWrapped) return true;
      return false;
    },
  };
  return {
    write: (s, then) => term.write(s, then),
    async lines() {
      await flushed();
      return now.lines();
    },
    async wrapped() {
      await flushed();
      return now.wrapped();
    },
    async scrolledOff() {
      await flushed();
      return term.buffer.active.baseY;
    },
    async resize(c, r) {
      await flushed();
      term.resize(c, r);
    },
    now,
    dispose: () => term.dispose(),
  };
}

export interface TestTerminal extends Headless {
  /** The stream to give the view: isTTY, columns, rows, write(), and 'resize' events (SIGWINCH). */
  stream: NodeJS.WriteStream;
  /** Every string written, in order. */
  writes: string[];
}

export function testTerminal(columns: number, rows: number): TestTerminal {
  const h = headless(columns, rows);
  const writes: string[] = [];
  const stream = Object.assign(new EventEmitter(), {
    isTTY: true,
    columns,
    rows,
    write(s: string) {
      writes.push(s);
      h.write(s);
      return true;
    },
  }) as unknown as NodeJS.WriteStream;
  return {
    ...h,
    stream,
    writes,
    async resize(c: number, r: number) {
      await h.resize(c, r);
      Object.assign(stream, { columns: c, rows: r });
      stream.emit('resize');
    },
  };
}

/** The plain lines of what was written (escape sequences removed), for width checks. */
export function writtenLines(writes: string[]): string[] {
  return stripVTControlCharacters(writes.join('')).split(/\r?\n/);
}

/** Whether script(1) (util-linux) is there to give a child a pseudo-terminal. */
export const HAVE_SCRIPT = spawnSync('script', ['--version'], { stdio: 'ignore' }).status === 0;

/**
 * Run `argv` in a pseudo-terminal of `columns` x `rows` (script -qfec, the size set with stty), and
 * call `onChunk` with each piece of what the terminal received, in order, and a function that types
 * into the terminal (`'\x03'` is Ctrl-C: the terminal sends SIGINT). Resolves with the exit status
 * of `argv` (script -e passes it on).
 */
export function inPty(
  argv: string[],
  size: { columns: number; rows: number },
  env: NodeJS.ProcessEnv,
  onChunk: (s: string, type: (keys: string) => void) => void,
  timeoutMs = 120_000,
): Promise<number | null> {
  const quoted = argv.map((a) => `'${a.replaceAll("'", `'\\''`)}'`).join(' ');
  return new Promise((resolve, reject) => {
    const child = spawn(
      'script',
      ['-qfec', `stty cols ${size.columns} rows ${size.rows}; exec ${quoted}`, '/dev/null'],
      {
        env,
        stdio: ['pipe', 'pipe', 'pipe'],
      },
    );
    const type = (keys: string) => child.stdin.write(keys);
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (s: string) => onChunk(s, type));
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => {
      stderr += d;
    });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${argv.join(' ')} did not finish in ${timeoutMs} ms\n${stderr}`));
    }, timeoutMs);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve(code);
    });
  });
}
