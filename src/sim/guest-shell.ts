/**
 * The programs the simulated guest (an Ubuntu 22.04 cloud image) runs, and the small POSIX-shell
 * subset they are combined with: what the guest agent's `exec` runs and what cloud-init's `runcmd`
 * and `bootcmd` run. A program the guest does not have fails as dash fails (`not found`, exit
 * 127), so user data that calls an unknown tool fails in the guest the way it would on a real one.
 *
 * Programs act on a GuestOs: the live guest (agent exec) or, while cloud-init's run is planned at
 * boot, a view that records each change with the simulated time it happens (guest-cloudinit.ts).
 *
 * Shell subset: words with '…', "…" and \ quoting, `;`, newlines, `&&`, `||`, `|`, `>`/`>>`
 * redirections (`2>…` and `2>&1` are accepted and ignored), `exit N`, `#` comments. No variables,
 * globs or control structures.
 */

/** One process's outcome: exit code, output, and the simulated ms it runs. */
export interface Run {
  exitcode: number;
  out: string;
  err: string;
  /** Simulated ms the process runs. */
  ms: number;
  /** The script ended with `exit` (the lines after it do not run). */
  exited?: boolean;
}

/** What programs see and change of the guest. */
export interface GuestOs {
  hostname(): string;
  readFile(path: string): Buffer | undefined;
  writeFile(path: string, data: Buffer, mode?: number): void;
  removeFile(path: string): boolean;
  /** Installed version of a package, if installed. */
  packageVersion(name: string): string | undefined;
  installPackage(name: string): void;
  /** Start a systemd unit (the unit exists: checked by the caller). */
  startService(unit: string): void;
  serviceActive(unit: string): boolean;
  /** `cloud-init …` (the live guest only; a planned run has no cloud-init inside cloud-init). */
  cloudInit?(args: string[]): Run;
}

/** Simulated ms: a short process; apt's index update, a full upgrade, one package. */
export const EXEC_MS = 200;
export const APT_UPDATE_MS = 5000;
export const APT_UPGRADE_MS = 20_000;
export const APT_INSTALL_MS = 3000;

/** The packages of the stock Ubuntu 22.04 cloud image the simulator knows (`dpkg-query -W`). */
export const BASE_PACKAGES: Record<string, string> = {
  apt: '2.4.13',
  bash: '5.1-6ubuntu1.1',
  'ca-certificates': '20240203~22.04.1',
  'cloud-init': '24.4.1-0ubuntu0~22.04.1',
  coreutils: '8.32-4.1ubuntu1.2',
  curl: '7.81.0-1ubuntu1.20',
  dpkg: '1.21.1ubuntu2.3',
  'openssh-server': '1:8.9p1-3ubuntu0.11',
  python3: '3.10.6-1~22.04.1',
  sudo: '1.9.9-1ubuntu2.4',
  systemd: '249.11-0ubuntu3.12',
};
const KNOWN_VERSIONS: Record<string, string> = {
  'qemu-guest-agent': '1:6.2+dfsg-2ubuntu6.24',
  nginx: '1.18.0-6ubuntu14.6',
  'docker.io': '26.1.3-0ubuntu1~22.04.1',
  jq: '1.6-2.1ubuntu3',
  git: '1:2.34.1-1ubuntu1.12',
};

/**
 * Whether the simulated Ubuntu archive has a package: any valid Debian package name (Debian
 * Policy 5.6.1) except those starting with `no-such-`, the simulator's way to name a package
 * that does not exist.
 */
export function inArchive(name: string): boolean {
  return /^[a-z0-9][a-z0-9+.-]+$/.test(name) && !name.startsWith('no-such-');
}

export function archiveVersion(name: string): string {
  return KNOWN_VERSIONS[name] ?? BASE_PACKAGES[name] ?? '1.0-1ubuntu1';
}

/** Units that exist without installing anything, beyond one per installed package. */
const BASE_UNITS = new Set(['ssh', 'sshd', 'cron', 'systemd-networkd', 'systemd-resolved', 'systemd-timesyncd']);

function unitExists(os: GuestOs, unit: string): boolean {
  const u = unit.replace(/\.service$/, '');
  return (
    BASE_UNITS.has(u) || os.packageVersion(u) !== undefined || (u === 'docker' && !!os.packageVersion('docker.io'))
  );
}

const ok = (out = '', ms = EXEC_MS): Run => ({ exitcode: 0, out, err: '', ms });
const fail = (exitcode: number, err: string, out = ''): Run => ({ exitcode, out, err, ms: EXEC_MS });

type Program = (os: GuestOs, args: string[], input: string | undefined) => Run;

function catFiles(os: GuestOs, args: string[], input: string | undefined): Run {
  if (!args.length) return ok(input ?? '');
  let out = '';
  let err = '';
  for (const f of args) {
    const b = os.readFile(f);
    if (b) out += b.toString('utf8');
    else err += `cat: ${f}: No such file or directory\n`;
  }
  return { exitcode: err ? 1 : 0, out, err, ms: EXEC_MS };
}

/** `apt-get`/`apt`: `update`, `upgrade`, `install [-y] PKG…` against the simulated archive. */
function apt(os: GuestOs, args: string[]): Run {
  const words = args.filter((a) => !a.startsWith('-'));
  const cmd = words[0];
  if (cmd === 'update') return ok('Reading package lists...\n', APT_UPDATE_MS);
  if (cmd === 'upgrade' || cmd === 'dist-upgrade') return ok('Reading package lists...\n', APT_UPGRADE_MS);
  if (cmd !== 'install') return fail(100, `E: Invalid operation ${cmd ?? ''}\n`);
  const pkgs = words.slice(1);
  const missing = pkgs.find((p) => !inArchive(p));
  if (missing) return fail(100, `E: Unable to locate package ${missing}\n`, 'Reading package lists...\n');
  const fresh = pkgs.filter((p) => os.packageVersion(p) === undefined);
  for (const p of fresh) os.installPackage(p);
  return ok(
    `Reading package lists...\n${fresh.map((p) => `Setting up ${p} (${archiveVersion(p)}) ...\n`).join('')}`,
    EXEC_MS + fresh.length * APT_INSTALL_MS,
  );
}

/** `dpkg-query -W PKG…` and `dpkg -s PKG` / `dpkg-query -s`: installed or not (exit 1). */
function dpkgQuery(os: GuestOs, args: string[]): Run {
  const status = args.includes('-s') || args.includes('--status');
  const show = args.includes('-W') || args.includes('--show');
  const pkgs = args.filter((a) => !a.startsWith('-'));
  if (!status && !show) return fail(2, 'dpkg-query: need an action option\n');
  let out = '';
  let err = '';
  for (const p of pkgs) {
    const v = os.packageVersion(p);
    if (v === undefined) {
      err += status
        ? `dpkg-query: package '${p}' is not installed and no information is available\n`
        : `dpkg-query: no packages found matching ${p}\n`;
      continue;
    }
    out += status
      ? `Package: ${p}\nStatus: install ok installed\nPriority: optional\nArchitecture: amd64\nVersion: ${v}\n\n`
      : `${p}\t${v}\n`;
  }
  if (status && err) err += 'Use dpkg --info (= dpkg-deb --info) to examine archive files.\n';
  return { exitcode: err ? 1 : 0, out, err, ms: EXEC_MS };
}

/** `systemctl start|restart|enable [--now]|is-active UNIT…`. */
function systemctl(os: GuestOs, args: string[]): Run {
  const words = args.filter((a) => !a.startsWith('-'));
  const [cmd, ...units] = words;
  if (cmd === 'daemon-reload') return ok();
  if (cmd === 'is-active') {
    const active = units.map((u) => (unitExists(os, u) && os.serviceActive(u) ? 'active' : 'inactive'));
    return { exitcode: active.every((a) => a === 'active') ? 0 : 3, out: `${active.join('\n')}\n`, err: '', ms: 50 };
  }
  if (!['start', 'restart', 'enable', 'stop', 'reload'].includes(cmd ?? ''))
    return fail(1, `Unknown command verb ${cmd ?? ''}.\n`);
  for (const u of units) {
    const unit = u.endsWith('.service') ? u : `${u}.service`;
    if (!unitExists(os, u)) {
      const verb = cmd === 'enable' ? 'enable' : cmd;
      return fail(
        cmd === 'enable' ? 1 : 5,
        cmd === 'enable'
          ? `Failed to enable unit: Unit file ${unit} does not exist.\n`
          : `Failed to ${verb} ${unit}: Unit ${unit} not found.\n`,
      );
    }
    if (cmd === 'start' || cmd === 'restart' || (cmd === 'enable' && args.includes('--now'))) os.startService(u);
  }
  return ok('', 500);
}

const PROGRAMS: Record<string, Program> = {
  true: () => ok(),
  false: () => fail(1, ''),
  echo: (_os, args) => ok(`${args.join(' ')}\n`),
  hostname: (os) => ok(`${os.hostname()}\n`),
  sleep: (_os, args) => {
    const s = Number(args[0]);
    if (!Number.isFinite(s) || s < 0) return fail(1, `sleep: invalid time interval '${args[0] ?? ''}'\n`);
    return ok('', s * 1000);
  },
  cat: catFiles,
  touch: (os, args) => {
    for (const f of args.filter((a) => !a.startsWith('-'))) if (!os.readFile(f)) os.writeFile(f, Buffer.alloc(0));
    return ok();
  },
  mkdir: () => ok(),
  chmod: () => ok(),
  chown: () => ok(),
  rm: (os, args) => {
    const force = args.some((a) => /^-[a-z]*f/.test(a));
    for (const f of args.filter((a) => !a.startsWith('-')))
      if (!os.removeFile(f) && !force) return fail(1, `rm: cannot remove '${f}': No such file or directory\n`);
    return ok();
  },
  'apt-get': apt,
  apt: apt,
  'dpkg-query': dpkgQuery,
  dpkg: (os, args) => dpkgQuery(os, args),
  systemctl,
  'cloud-init': (os, args) =>
    os.cloudInit ? os.cloudInit(args) : fail(1, 'cloud-init: cannot run inside its own run\n'),
};

function program(path: string): string {
  return path.replace(/^.*\//, '');
}

/** Whether the guest has this program (`exec` fails the spawn for one it has not). */
export function hasProgram(path: string): boolean {
  const name = program(path);
  return name in PROGRAMS || name === 'sh' || name === 'bash';
}

/** One command (argv) in the guest; undefined: no such program. */
export function runCommand(os: GuestOs, argv: string[], input?: string): Run | undefined {
  const [path = '', ...args] = argv;
  const name = program(path);
  if (name === 'sh' || name === 'bash') {
    if (args[0] !== '-c' || args[1] === undefined) return ok();
    return runScript(
      os,
      args[1],
      name === 'bash' ? (n) => `bash: line 1: ${n}: command not found` : (n) => `sh: 1: ${n}: not found`,
      input,
    );
  }
  const p = PROGRAMS[name];
  return p ? p(os, args, input) : undefined;
}

type Token = { word: string } | { op: string };

/** Split a script into words and operators, honouring quotes and backslashes. */
export function tokenize(script: string): Token[] {
  const out: Token[] = [];
  let word: string | undefined;
  const flush = () => {
    if (word !== undefined) out.push({ word });
    word = undefined;
  };
  for (let i = 0; i < script.length; i++) {
    const ch = script[i]!;
    if (ch === "'") {
      const end = script.indexOf("'", i + 1);
      word = (word ?? '') + script.slice(i + 1, end < 0 ? script.length : end);
      i = end < 0 ? script.length : end;
    } else if (ch === '"') {
      let j = i + 1;
      let s = '';
      while (j < script.length && script[j] !== '"') {
        if (script[j] === '\\' && /["\\$`]/.test(script[j + 1] ?? '')) j++;
        s += script[j];
        j++;
      }
      word = (word ?? '') + s;
      i = j;
    } else if (ch === '\\') {
      word = (word ?? '') + (script[i + 1] ?? '');
      i++;
    } else if (ch === '#' && word === undefined) {
      while (i < script.length && script[i] !== '\n') i++;
      i--;
    } else if (ch === ' ' || ch === '\t') flush();
    else if (ch === '\n' || ch === ';') {
      flush();
      out.push({ op: ';' });
    } else if (ch === '&' && script[i + 1] === '&') {
      flush();
      out.push({ op: '&&' });
      i++;
    } else if (ch === '|' && script[i + 1] === '|') {
      flush();
      out.push({ op: '||' });
      i++;
    } else if (ch === '|') {
      flush();
      out.push({ op: '|' });
    } else if (ch === '>' || (ch === '2' && word === undefined && script[i + 1] === '>')) {
      flush();
      let op = ch === '2' ? '2>' : '>';
      if (ch === '2') i++;
      if (script[i + 1] === '>') {
        op += '>';
        i++;
      }
      if (script[i + 1] === '&') {
        // 2>&1, >&2: the stream is merged; the simulator keeps them apart.
        i += 2;
        op = 'dup';
      }
      out.push({ op });
    } else word = (word ?? '') + ch;
  }
  flush();
  return out;
}

/**
 * Run a script as dash runs it: `notFound` words the error for a missing program (dash in a
 * script: `/path/script: LINE: name: not found`). The exit code is the last command's, as a
 * script without `set -e` ends.
 */
export function runScript(os: GuestOs, script: string, notFound: (name: string) => string, input?: string): Run {
  const total: Run = { exitcode: 0, out: '', err: '', ms: 0 };
  const tokens = tokenize(script);
  let i = 0;
  let skip = false;
  while (i < tokens.length) {
    // One pipeline: commands joined by `|`, up to `;`, `&&` or `||`.
    let pipeInput = input;
    let last: Run = { exitcode: 0, out: '', err: '', ms: 0 };
    let ran = false;
    while (i < tokens.length) {
      const words: string[] = [];
      const redirects: Array<{ op: string; file: string }> = [];
      while (i < tokens.length) {
        const t = tokens[i]!;
        if ('word' in t) words.push(t.word);
        else if (t.op === '>' || t.op === '>>' || t.op === '2>' || t.op === '2>>') {
          const f = tokens[i + 1];
          redirects.push({ op: t.op, file: f && 'word' in f ? f.word : '' });
          i++;
        } else if (t.op !== 'dup') break;
        i++;
      }
      if (words.length && !skip) {
        ran = true;
        if (words[0] === 'exit') {
          total.exitcode = Number(words[1] ?? last.exitcode) & 255;
          total.ms = Math.max(total.ms, EXEC_MS);
          total.exited = true;
          return total;
        }
        const r = runCommand(os, words, pipeInput) ?? {
          exitcode: 127,
          out: '',
          err: `${notFound(words[0]!)}\n`,
          ms: 10,
        };
        let out = r.out;
        for (const rd of redirects) {
          if (rd.op.startsWith('2')) continue;
          const prev = rd.op === '>>' ? (os.readFile(rd.file) ?? Buffer.alloc(0)) : Buffer.alloc(0);
          os.writeFile(rd.file, Buffer.concat([prev, Buffer.from(out)]));
          out = '';
        }
        total.err += redirects.some((rd) => rd.op.startsWith('2')) ? '' : r.err;
        total.ms += r.ms;
        last = { ...r, out };
      }
      const t = tokens[i];
      if (t && 'op' in t && t.op === '|') {
        pipeInput = last.out;
        last = { ...last, out: '' };
        i++;
        continue;
      }
      break;
    }
    if (ran) {
      total.out += last.out;
      total.exitcode = last.exitcode;
    }
    const t = tokens[i];
    i++;
    if (!t || !('op' in t)) continue;
    skip = (t.op === '&&' && total.exitcode !== 0) || (t.op === '||' && total.exitcode === 0);
  }
  total.ms = Math.max(total.ms, EXEC_MS);
  return total;
}
