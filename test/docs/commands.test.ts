/**
 * What README.md and docs/*.md tell people to run exists. Every `provider-proxmox <command> ...`
 * (and `node src/cli/main.ts <command> ...`) in a code block or inline code names a command of the
 * commander program, and each of its flags is an option of that command (a value given for an
 * option with choices is one of them); a flag written alone (`--orphan-scan`) is an option of a
 * command the page is about; `npm run X` / `npm start -- ...` name a script of package.json (and
 * the flags after `--` are options of the command the script runs). Links and repository paths
 * point at files that exist in a clone (no `../shared/...`), and links to headings at headings.
 * docs/exit-codes.md has a row for every command.
 *
 * The program is built with the same register functions src/cli/program.ts calls (importing it
 * would run it), and checked against `main.ts --help` so that a command added another way is
 * noticed.
 *
 * docs/simulator.md is left out while someone else rewrites it: it said that `npm start` runs the
 * simulator and showed `npm start -- --http`, but `npm start` runs `demo`, which has no --http.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { describe, test } from 'node:test';
import { Command, type Option } from 'commander';

const ROOT = join(import.meta.dirname, '..', '..');
const CLI = join(ROOT, 'src', 'cli');
/** Being rewritten by someone else; see the top of this file. */
const EXCLUDED = new Set(['docs/simulator.md']);

const DOC_FILES = [
  'README.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .sort()
    .map((f) => `docs/${f}`),
].filter((f) => !EXCLUDED.has(f));

/** Which commands a flag written alone on a page belongs to (default: any command). */
const PAGE_COMMANDS: Record<string, string[]> = {
  'docs/controller.md': ['controller'],
  'docs/doctor.md': ['doctor'],
  'docs/fleet.md': ['validate', 'plan', 'apply', 'status', 'delete', 'gc'],
};

/** Flags every command has (commander's). */
const GLOBAL_FLAGS = new Set(['--help', '-h', '--version', '-V']);

// --- the program -----------------------------------------------------------------------------------

async function buildProgram(): Promise<Command> {
  const main = readFileSync(join(CLI, 'program.ts'), 'utf8');
  const program = new Command('provider-proxmox');
  const called = new Set([...main.matchAll(/\b(register\w+)\(program\)/g)].map((m) => m[1]!));
  assert.ok(called.size > 0, 'src/cli/program.ts registers no commands the way this test expects');
  for (const m of main.matchAll(/import \{([^}]*)\} from '(\.\/[^']+)'/g)) {
    const names = m[1]!.split(',').map((s) => s.trim());
    for (const name of names.filter((n) => called.has(n))) {
      const mod = (await import(join(CLI, m[2]!))) as Record<string, (p: Command) => void>;
      mod[name]!(program);
      called.delete(name);
    }
  }
  assert.deepEqual([...called], [], 'register functions called in program.ts but not imported as expected');
  return program;
}

/** The command names `main.ts --help` lists (what users actually get). */
function helpCommands(): string[] {
  const out = execFileSync(process.execPath, [join(CLI, 'main.ts'), '--help'], { encoding: 'utf8' });
  const section = out.split(/^Commands:$/m)[1] ?? '';
  return [...section.matchAll(/^ {2}([a-z][a-z-]*)\b/gm)].map((m) => m[1]!).filter((c) => c !== 'help');
}

function flagsOf(cmd: Command): Map<string, Option> {
  const out = new Map<string, Option>();
  for (const o of cmd.options) {
    if (o.long) out.set(o.long, o);
    if (o.short) out.set(o.short, o);
  }
  return out;
}

// --- the pages ---------------------------------------------------------------------------------------

interface Page {
  file: string;
  code: Snippet[];
  prose: Array<{ line: number; text: string }>;
}

interface Snippet {
  file: string;
  line: number;
  text: string;
  /** Inline code (`...`) rather than a line of a code block. */
  inline: boolean;
}

/**
 * Code block lines (continuations joined) and inline code spans of a Markdown page. In a table
 * whose first column is `command` (README's), the code in that column is a command without the
 * `provider-proxmox` in front.
 */
function snippets(file: string, source: string): Page {
  const lines = source.split('\n');
  const code: Snippet[] = [];
  const prose: Array<{ line: number; text: string }> = [];
  let fence: string | undefined;
  let prev: Snippet | undefined;
  for (const [i, raw] of lines.entries()) {
    const f = /^\s*(```+|~~~+)/.exec(raw);
    if (f) {
      fence = fence === undefined ? f[1] : raw.trim().startsWith(fence) ? undefined : fence;
      prev = undefined;
      continue;
    }
    if (fence !== undefined) {
      // `\` at the end, or an indented `[--flag` / `--flag`, continues the previous command line.
      if (prev && (prev.text.endsWith('\\') || /^\s+(\[|-)/.test(raw))) {
        prev.text = `${prev.text.replace(/\\$/, '')} ${raw.trim()}`;
        continue;
      }
      prev = { file, line: i + 1, text: raw, inline: false };
      code.push(prev);
      continue;
    }
    prose.push({ line: i + 1, text: raw });
  }
  let header: string | undefined;
  for (const [i, p] of prose.entries()) {
    if (!p.text.startsWith('|')) {
      header = undefined;
      continue;
    }
    const first = p.text.split(/(?<!\\)\|/)[1]?.trim() ?? '';
    if (header === undefined || prose[i - 1]?.line !== p.line - 1) {
      header = first;
      continue;
    }
    if (!/^command$/i.test(header) || /^-+$/.test(first)) continue;
    for (const m of first.matchAll(/`([^`]+)`/g))
      code.push({ file, line: p.line, text: `provider-proxmox ${m[1]!.replace(/\\\|/g, '|')}`, inline: true });
  }
  // Inline code, which may wrap onto the next line of a paragraph.
  const text = prose.map((p) => p.text).join('\n');
  const lineAt = (offset: number) => prose[text.slice(0, offset).split('\n').length - 1]!.line;
  for (const m of text.matchAll(/(?<!`)(`+)(?!`)([\s\S]+?)(?<!`)\1(?!`)/g)) {
    code.push({
      file,
      line: lineAt(m.index),
      text: m[2]!.replace(/\s*\n\s*/g, ' ').replace(/\\\|/g, '|'),
      inline: true,
    });
  }
  return { file, code, prose };
}

/** The words of a command line up to where the shell would end it (`#`, `&&`, `;`, ` | `, `>`, `&`). */
function words(rest: string): string[] {
  let depth = 0;
  let end = rest.length;
  for (let i = 0; i < rest.length; i++) {
    const c = rest[i]!;
    if (c === '[') depth++;
    else if (c === ']') depth = Math.max(0, depth - 1);
    else if (depth === 0) {
      const two = rest.slice(i, i + 2);
      if (
        (c === '#' && (i === 0 || /\s/.test(rest[i - 1]!))) ||
        two === '&&' ||
        c === ';' ||
        (c === '|' && /\s/.test(rest[i - 1] ?? ' ') && /\s/.test(rest[i + 1] ?? ' ')) ||
        (c === '>' && /\s|\d/.test(rest[i - 1] ?? ' ')) ||
        (c === '&' && /^\s|^$/.test(rest.slice(i + 1)))
      ) {
        end = i;
        break;
      }
    }
  }
  return rest
    .slice(0, end)
    .split(/\s+/)
    .map((w) => w.replace(/^[[(]+|[\]),]+$|\.\.\.\]?$/g, '').replace(/\]+$/, ''))
    .filter((w) => w && w !== '|' && w !== '...');
}

const isFlag = (w: string) => /^--[a-z][a-z0-9-]*(=.*)?$/.test(w) || /^-[a-zA-Z]$/.test(w);
/** A value in the docs that stands for what the user writes (FILE, <id>, N, ...), not a literal. */
const isPlaceholder = (v: string) => /^[A-Z0-9_.@!=/:-]*[A-Z][A-Z0-9_.@!=/:-]*$/.test(v) || /[<>.]{3}|<|\.\.\./.test(v);

/** Problems of one command invocation: `cmd` and the words after it. */
function checkInvocation(program: Command, name: string, args: string[], where: string): string[] {
  const cmd = program.commands.find((c) => c.name() === name || c.aliases().includes(name));
  if (!cmd) return [`${where}: provider-proxmox ${name}: no such command`];
  const flags = flagsOf(cmd);
  const out: string[] = [];
  for (const [i, w] of args.entries()) {
    if (!isFlag(w)) continue;
    const flag = w.replace(/=.*$/, '');
    if (GLOBAL_FLAGS.has(flag)) continue;
    const opt = flags.get(flag);
    if (!opt) {
      out.push(`${where}: provider-proxmox ${name} has no option ${flag}`);
      continue;
    }
    const value = w.includes('=') ? w.slice(w.indexOf('=') + 1) : args[i + 1];
    const choices = (opt as Option & { argChoices?: string[] }).argChoices;
    if (choices && value !== undefined && !isFlag(value) && !isPlaceholder(value)) {
      for (const v of value.split('|'))
        if (!choices.includes(v)) out.push(`${where}: ${name} ${flag} ${v}: not one of ${choices.join(', ')}`);
    }
  }
  return out;
}

const INVOCATION =
  /(?:^|[\s$(])(?:provider-proxmox|(?:node_modules\/\.bin\/)?node\s+src\/cli\/main\.ts)[ \t]+([a-z][a-z-]*)(?=[ \t]|$)(.*)$/;
const NPM = /(?:^|[\s$(])npm (?:run ([\w:.-]+)|(start|test))(?=\s|$)(.*)$/;

function scripts(): Record<string, string> {
  return (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
}

/** Every invocation in a snippet (a line may hold several, joined by `&&`). */
function* invocations(text: string): Generator<{ kind: 'cli' | 'npm'; name: string; args: string[] }> {
  for (const part of text.split(/&&|;|\|\|/)) {
    const cli = INVOCATION.exec(part);
    if (cli) yield { kind: 'cli', name: cli[1]!, args: words(cli[2]!) };
    const npm = NPM.exec(part);
    if (npm) yield { kind: 'npm', name: npm[1] ?? npm[2]!, args: words(npm[3]!) };
  }
}

/** GitHub's anchor of a heading. */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N} _-]/gu, '')
    .replace(/ /g, '-');
}

function anchors(file: string): Set<string> {
  const out = new Set<string>();
  let fence = false;
  for (const l of readFileSync(file, 'utf8').split('\n')) {
    if (/^\s*(```|~~~)/.test(l)) fence = !fence;
    const h = !fence && /^#{1,6}\s+(.*)$/.exec(l);
    if (h) out.add(slug(h[1]!));
  }
  return out;
}

const REPO_PATH = /^(?:\.\/)?((?:src|test|docs|deploy|package|examples|scripts|bench|bin|\.ci)\/[\w./@-]*)$/;

// --- the checks ----------------------------------------------------------------------------------------

/** provider-proxmox commands and flags that do not exist; `seen` counts the invocations found. */
function commandProblems(program: Command, pages: Page[]): { problems: string[]; seen: number } {
  const problems: string[] = [];
  let seen = 0;
  for (const s of pages.flatMap((p) => p.code)) {
    for (const inv of invocations(s.text)) {
      if (inv.kind !== 'cli') continue;
      seen++;
      problems.push(...checkInvocation(program, inv.name, inv.args, `${s.file}:${s.line}`));
    }
  }
  return { problems, seen };
}

/** `npm run X` without a script X; flags after `--` the script's command does not have. */
function npmProblems(program: Command, pages: Page[], pkgScripts: Record<string, string>): string[] {
  const problems: string[] = [];
  for (const s of pages.flatMap((p) => p.code)) {
    for (const inv of invocations(s.text)) {
      if (inv.kind !== 'npm') continue;
      const where = `${s.file}:${s.line}`;
      const script = pkgScripts[inv.name];
      if (script === undefined) {
        problems.push(`${where}: npm ${/^(start|test)$/.test(inv.name) ? '' : 'run '}${inv.name}: no such script`);
        continue;
      }
      const sep = inv.args.indexOf('--');
      if (sep < 0) continue;
      // `npm run X -- ARGS` appends ARGS to the script: check them against the command it runs.
      const target = /^node src\/cli\/main\.ts ([a-z][a-z-]*)/.exec(script);
      if (target) problems.push(...checkInvocation(program, target[1]!, inv.args.slice(sep + 1), where));
    }
  }
  return problems;
}

/** Flags written alone that no command of the page has. */
function loneFlagProblems(program: Command, pages: Page[]): string[] {
  const problems: string[] = [];
  for (const page of pages) {
    const names = PAGE_COMMANDS[page.file];
    const cmds = program.commands.filter((c) => !names || names.includes(c.name()));
    for (const s of page.code) {
      if (!s.inline || !/^-/.test(s.text)) continue;
      for (const w of words(s.text)) {
        if (!isFlag(w)) continue;
        const flag = w.replace(/=.*$/, '');
        if (GLOBAL_FLAGS.has(flag) || cmds.some((c) => flagsOf(c).has(flag))) continue;
        problems.push(`${s.file}:${s.line}: ${flag} is not an option of ${names ? names.join(', ') : 'any command'}`);
      }
    }
  }
  return problems;
}

/** Links to missing files or headings; repository paths that do not exist; paths outside the clone. */
function pathProblems(pages: Page[]): string[] {
  const problems: string[] = [];
  for (const page of pages) {
    const dir = dirname(join(ROOT, page.file));
    for (const p of page.prose) {
      for (const m of p.text.replace(/`[^`]*`/g, '').matchAll(/\]\(([^)\s]+)\)/g)) {
        const target = m[1]!;
        if (/^[a-z]+:/.test(target)) continue;
        const [path, anchor] = target.split('#') as [string, string | undefined];
        const abs = path ? resolve(dir, path) : join(ROOT, page.file);
        if (!abs.startsWith(ROOT) || !existsSync(abs)) {
          problems.push(`${page.file}:${p.line}: link to ${target}: no such file in the repository`);
          continue;
        }
        if (anchor && abs.endsWith('.md') && !anchors(abs).has(anchor))
          problems.push(`${page.file}:${p.line}: link to ${target}: no such heading`);
      }
    }
    for (const s of page.code) {
      if (s.text.includes('../shared/')) problems.push(`${s.file}:${s.line}: ${s.text}: outside the repository`);
      for (const w of s.text.split(/\s+/)) {
        const token = w.replace(/^[`'"(]+|[`'"),;.]+$/g, '').replace(/(:\d+)+:?$/, '');
        const m = REPO_PATH.exec(token);
        // Perl modules are Proxmox VE's own sources, which architecture.md cites (`src/PVE/API2/Qemu.pm`).
        if (!m || /[*<>{}$]/.test(token) || token.endsWith('.pm')) continue;
        if (!existsSync(join(ROOT, m[1]!))) problems.push(`${s.file}:${s.line}: ${m[1]}: no such file or directory`);
      }
    }
  }
  return problems;
}

// --- the tests -----------------------------------------------------------------------------------------

describe('documented commands', async () => {
  const program = await buildProgram();
  const pkgScripts = scripts();
  const pages = DOC_FILES.map((file) => snippets(file, readFileSync(join(ROOT, file), 'utf8')));

  test('the program built here has the commands main.ts --help lists', () => {
    assert.deepEqual(
      program.commands.map((c) => c.name()).sort(),
      helpCommands().sort(),
      'src/cli/program.ts registers commands another way: teach buildProgram() in this test',
    );
  });

  test('every provider-proxmox command and flag in the docs exists', () => {
    const { problems, seen } = commandProblems(program, pages);
    assert.ok(seen >= 40, `only ${seen} commands found in the docs: is the parser still working?`);
    assert.deepEqual(problems, []);
  });

  test('every npm script in the docs exists, and so do the flags passed through it', () => {
    assert.deepEqual(npmProblems(program, pages, pkgScripts), []);
  });

  test('a flag written alone is an option of a command the page is about', () => {
    assert.deepEqual(loneFlagProblems(program, pages), []);
  });

  test('links and repository paths point at what a clone has', () => {
    assert.deepEqual(pathProblems(pages), []);
  });

  test('docs/exit-codes.md has a row for every command', () => {
    const page = readFileSync(join(ROOT, 'docs', 'exit-codes.md'), 'utf8');
    const rows = new Set([...page.matchAll(/^\| `([a-z][a-z-]*)[ `]/gm)].map((m) => m[1]!));
    const missing = program.commands.map((c) => c.name()).filter((n) => !rows.has(n));
    assert.deepEqual(missing, [], 'add these commands to the table of docs/exit-codes.md');
  });

  test('the checks find what is wrong (a page made of known mistakes)', () => {
    const page = snippets(
      'docs/fleet.md',
      [
        '# A page',
        '',
        'Run `npm start -- --http`, `npm run no-such-script` and `--orphan-scan 1h`, see [x](../shared/DESIGN.md)',
        'and [y](fleet.md#no-such-heading), and `src/no/such/file.ts`.',
        '',
        '| command | what |',
        '|---|---|',
        '| `frobnicate -f DIR` | nothing |',
        '',
        '```sh',
        'provider-proxmox apply -f DIR --no-such-flag \\',
        '  --config PC.yaml',
        'provider-proxmox status -o xml   # a comment --not-a-flag',
        'provider-proxmox sim --profile 5.0|8.4 &',
        '```',
      ].join('\n'),
    );
    assert.deepEqual(commandProblems(program, [page]).problems, [
      'docs/fleet.md:11: provider-proxmox apply has no option --no-such-flag',
      'docs/fleet.md:13: status -o xml: not one of table, json, yaml',
      'docs/fleet.md:14: sim --profile 5.0: not one of 6.4, 7.4, 8.4, 9.2',
      'docs/fleet.md:8: provider-proxmox frobnicate: no such command',
    ]);
    assert.deepEqual(npmProblems(program, [page], pkgScripts), [
      // `npm start` runs `demo`, which has no --http (what docs/simulator.md still says).
      'docs/fleet.md:3: provider-proxmox demo has no option --http',
      'docs/fleet.md:3: npm run no-such-script: no such script',
    ]);
    assert.deepEqual(loneFlagProblems(program, [page]), [
      'docs/fleet.md:3: --orphan-scan is not an option of validate, plan, apply, status, delete, gc',
    ]);
    assert.deepEqual(pathProblems([page]), [
      'docs/fleet.md:3: link to ../shared/DESIGN.md: no such file in the repository',
      'docs/fleet.md:4: link to fleet.md#no-such-heading: no such heading',
      'docs/fleet.md:4: src/no/such/file.ts: no such file or directory',
    ]);
  });
});
