/**
 * The guest agent commands with arguments (qemu-server src/PVE/API2/Qemu/Agent.pm, registered by
 * hand): `exec` + `exec-status` over a small simulated process table, `file-read`/`file-write`
 * over the guest's files, and `set-user-password`.
 *
 * The simulated guest runs only a few programs, enough for what provisioning tools do through
 * the agent: `cloud-init status [--wait]` (done a while after the agent came up), `cat`, `echo`,
 * `hostname`, `true`, `false`, `sleep N`, and `sh -c`/`bash -c` over those (`;` and `&&`, `exit N`).
 * Any other program does not exist in the guest, so qemu-ga fails the spawn as glib does. A
 * process runs for a simulated duration (DURATIONS.exec, `sleep N`, cloud-init's remaining time);
 * `exec-status` answers `exited: 0` until then, then the exit code and output once, and qemu-ga
 * forgets the pid (a second query is `Invalid parameter 'pid'`).
 */
import { die } from '../errors.ts';
import { splitList } from '../schema/index.ts';
import type { Route } from '../server.ts';
import type { ClusterState, VmState } from '../state.ts';
import { agentPerm, agentVm, checkNotFrozen, qgaError } from './qemu-agent.ts';

/** Simulated ms: a short process, and cloud-init's run after the agent is up. */
const EXEC_MS = 200;
const CLOUD_INIT_MS = 20_000;

interface Run {
  exitcode: number;
  out: string;
  err: string;
  /** Simulated ms the process runs. */
  ms: number;
}

/** The files a fresh guest has, besides what file-write put there. */
function guestFile(vm: VmState, path: string): Buffer | undefined {
  const written = vm.agent.files.get(path);
  if (written) return written;
  if (path === '/etc/hostname') return Buffer.from(`${vm.config.name ?? `VM${vm.vmid}`}\n`);
  if (path === '/etc/os-release')
    return Buffer.from('PRETTY_NAME="Ubuntu 22.04.5 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\nID=ubuntu\n');
  return undefined;
}

const PROGRAMS = new Set(['cloud-init', 'cat', 'echo', 'hostname', 'true', 'false', 'sleep', 'sh', 'bash']);

function program(path: string): string {
  return path.replace(/^.*\//, '');
}

/** One command line in the guest. Undefined: the program does not exist. */
function run(c: ClusterState, vm: VmState, argv: string[], input: string | undefined): Run | undefined {
  const [path = '', ...args] = argv;
  const name = program(path);
  if (!PROGRAMS.has(name)) return undefined;
  const ok = (out = '', ms = EXEC_MS): Run => ({ exitcode: 0, out, err: '', ms });
  switch (name) {
    case 'true':
      return ok();
    case 'false':
      return { exitcode: 1, out: '', err: '', ms: EXEC_MS };
    case 'echo':
      return ok(`${args.join(' ')}\n`);
    case 'hostname':
      return ok(`${vm.config.name ?? `VM${vm.vmid}`}\n`);
    case 'sleep': {
      const s = Number(args[0]);
      if (!Number.isFinite(s) || s < 0)
        return { exitcode: 1, out: '', err: `sleep: invalid time interval '${args[0] ?? ''}'\n`, ms: EXEC_MS };
      return ok('', s * 1000);
    }
    case 'cat': {
      if (!args.length) return ok(input ?? '');
      let out = '';
      let err = '';
      for (const f of args) {
        const b = guestFile(vm, f);
        if (b) out += b.toString('utf8');
        else err += `cat: ${f}: No such file or directory\n`;
      }
      return { exitcode: err ? 1 : 0, out, err, ms: EXEC_MS };
    }
    case 'cloud-init': {
      if (args[0] !== 'status')
        return { exitcode: 2, out: '', err: 'usage: cloud-init status [--long] [--wait]\n', ms: EXEC_MS };
      const doneAt = vm.agentReadyAt + c.clock.scaled(CLOUD_INIT_MS);
      const now = c.clock.now();
      if (args.includes('--wait')) {
        const wait = Math.max(0, doneAt - now) * c.clock.speed;
        // `--wait` prints a dot per poll while cloud-init runs, then a newline.
        const dots = wait > 0 ? `${'.'.repeat(Math.min(60, Math.ceil(wait / 1000)))}\n` : '';
        return ok(`${dots}status: done\n`, wait + EXEC_MS);
      }
      return ok(now >= doneAt ? 'status: done\n' : 'status: running\n');
    }
    default:
      return shell(c, vm, args, input);
  }
}

/** `sh -c SCRIPT`: simple commands joined by `;` or `&&`, and `exit N`. */
function shell(c: ClusterState, vm: VmState, args: string[], input: string | undefined): Run {
  if (args[0] !== '-c' || args[1] === undefined) return { exitcode: 0, out: '', err: '', ms: EXEC_MS };
  const total: Run = { exitcode: 0, out: '', err: '', ms: 0 };
  for (const part of args[1].split(/(;|&&)/)) {
    if (part === ';') continue;
    if (part === '&&') {
      if (total.exitcode !== 0) break;
      continue;
    }
    const words = part.trim().split(/\s+/).filter(Boolean);
    if (!words.length) continue;
    if (words[0] === 'exit') return { ...total, exitcode: Number(words[1] ?? total.exitcode) & 255 };
    const r = run(c, vm, words, input);
    if (!r) {
      total.err += `sh: 1: ${words[0]}: not found\n`;
      total.exitcode = 127;
      continue;
    }
    total.out += r.out;
    total.err += r.err;
    total.exitcode = r.exitcode;
    total.ms += r.ms;
  }
  total.ms = Math.max(total.ms, EXEC_MS);
  return total;
}

/** The `command` parameter: an array from 8.0, a `string-alist` before (Agent.pm split_list, 7.4-3). */
function argvOf(c: ClusterState, command: unknown): string[] | undefined {
  if (command === undefined) return undefined;
  if (Array.isArray(command)) return command.map(String);
  void c;
  return splitList(String(command));
}

export const agentExecRoutes: Route[] = [
  {
    method: 'POST',
    path: '/nodes/{node}/qemu/{vmid}/agent/exec',
    perm: agentPerm(['VM.GuestAgent.Unrestricted']),
    handler: ({ c, params }) => {
      const vm = agentVm(c, params);
      checkNotFrozen(vm, 'exec');
      const argv = argvOf(c, params.command);
      const input = params['input-data'] as string | undefined;
      // qemu_exec (src/PVE/QemuServer/Agent.pm at e6352be): checked after the agent is available.
      if (!argv?.length && input === undefined) die('command or input-data (or both) required');
      const r = argv?.length ? run(c, vm, argv, input) : { exitcode: 0, out: '', err: '', ms: EXEC_MS };
      if (!r)
        qgaError(vm, 'exec', `Failed to execute child process \u201c${argv![0]}\u201d (No such file or directory)`);
      const pid = vm.agent.nextPid++;
      vm.agent.procs.set(pid, {
        pid,
        exitsAt: c.clock.now() + c.clock.scaled(r.ms),
        exitcode: r.exitcode,
        out: r.out,
        err: r.err,
      });
      return { pid };
    },
  },
  {
    method: 'GET',
    path: '/nodes/{node}/qemu/{vmid}/agent/exec-status',
    perm: agentPerm(['VM.GuestAgent.Unrestricted']),
    handler: ({ c, params }) => {
      const vm = agentVm(c, params);
      checkNotFrozen(vm, 'exec-status');
      const p = vm.agent.procs.get(Number(params.pid));
      if (!p) qgaError(vm, 'exec-status', "Invalid parameter 'pid'");
      if (c.clock.now() < p.exitsAt) return { exited: 0 };
      vm.agent.procs.delete(p.pid);
      // qemu-ga sends out-data/err-data only when there was output; qemu_exec_status decodes them
      // and turns JSON booleans into 1/0.
      return {
        exited: 1,
        exitcode: p.exitcode,
        ...(p.out ? { 'out-data': p.out } : {}),
        ...(p.err ? { 'err-data': p.err } : {}),
      };
    },
  },
  {
    method: 'GET',
    path: '/nodes/{node}/qemu/{vmid}/agent/file-read',
    perm: agentPerm(['VM.GuestAgent.FileRead', 'VM.GuestAgent.Unrestricted']),
    handler: ({ c, params }) => {
      const vm = agentVm(c, params);
      checkNotFrozen(vm, 'file-open');
      const file = String(params.file);
      const b = guestFile(vm, file);
      if (!b) qgaError(vm, 'file-open', `failed to open file '${file}' (mode: 'r'): No such file or directory`);
      // 9.x reads `count` bytes from `offset` and may leave them base64 (`decode=0`); before, all of it.
      const offset = Number(params.offset ?? 0);
      const max = 16 * 1024 * 1024;
      const count = Number(params.count ?? max);
      const chunk = b.subarray(offset, offset + count);
      const eof = offset + chunk.length >= b.length;
      const decode = params.decode === undefined || Number(params.decode) === 1;
      return {
        content: decode ? chunk.toString('utf8') : chunk.toString('base64'),
        'bytes-read': chunk.length,
        ...(eof ? {} : { truncated: 1 }),
      };
    },
  },
  {
    method: 'POST',
    path: '/nodes/{node}/qemu/{vmid}/agent/file-write',
    perm: agentPerm(['VM.GuestAgent.FileWrite', 'VM.GuestAgent.Unrestricted']),
    handler: ({ c, params }) => {
      const vm = agentVm(c, params);
      checkNotFrozen(vm, 'file-open');
      const content = String(params.content);
      // `encode` (default 1; 6.4 has no such parameter): otherwise the content is base64 already.
      const encode = params.encode === undefined || Number(params.encode) === 1;
      vm.agent.files.set(String(params.file), encode ? Buffer.from(content, 'utf8') : Buffer.from(content, 'base64'));
      return null;
    },
  },
  {
    method: 'POST',
    path: '/nodes/{node}/qemu/{vmid}/agent/set-user-password',
    perm: agentPerm(['VM.GuestAgent.Unrestricted']),
    handler: ({ c, params }) => {
      const vm = agentVm(c, params);
      checkNotFrozen(vm, 'set-user-password');
      return { result: {} };
    },
  },
];
