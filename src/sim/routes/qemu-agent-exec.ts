/**
 * The guest agent commands with arguments (qemu-server src/PVE/API2/Qemu/Agent.pm, registered by
 * hand): `exec` + `exec-status` over a small simulated process table, `file-read`/`file-write`
 * over the guest's files, and `set-user-password`.
 *
 * The simulated guest runs the programs of ../guest-shell.ts (`cloud-init status`, `cat`, `dpkg-query`,
 * `systemctl`, `apt-get`, `sh -c`… over the guest's files and packages, which cloud-init changes:
 * ../guest-cloudinit.ts). Any other program does not exist in the guest, so qemu-ga fails the
 * spawn as glib does. A process runs for a simulated duration (`sleep N`, cloud-init's remaining time);
 * `exec-status` answers `exited: 0` until then, then the exit code and output once, and qemu-ga
 * forgets the pid (a second query is `Invalid parameter 'pid'`).
 */
import { die } from '../errors.ts';
import { guestFile, liveOs } from '../guest-cloudinit.ts';
import { EXEC_MS, hasProgram, runCommand } from '../guest-shell.ts';
import { splitList } from '../schema/index.ts';
import type { Route } from '../server.ts';
import type { ClusterState } from '../state.ts';
import { agentPerm, agentVm, checkNotFrozen, qgaError } from './qemu-agent.ts';

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
      const r = !argv?.length
        ? { exitcode: 0, out: '', err: '', ms: EXEC_MS }
        : hasProgram(argv[0]!)
          ? runCommand(liveOs(c, vm), argv, input)
          : undefined;
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
      const b = guestFile(c, vm, file);
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
