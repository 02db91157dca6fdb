/**
 * The guest agent endpoints (qemu-server src/PVE/API2/Qemu/Agent.pm): the command index, one
 * method per QGA command without arguments (`register_command`), and assert_agent_available's
 * errors in its order. The commands with arguments (`exec`, `exec-status`, `file-read`,
 * `file-write`, `set-user-password`) are in qemu-agent-exec.ts.
 *
 * What the simulated guest answers: an Ubuntu 22.04 cloud guest (the image the default topology
 * boots), with the VM's name as host name, its configured CPUs and memory, one ext4 root file
 * system on its first disk, the interfaces of its NICs, and UTC.
 */
import { requirePriv } from '../auth.ts';
import { die } from '../errors.ts';
import { guestHostname, powerOff, settleGuest } from '../guest-cloudinit.ts';
import { configCpus, configMemoryMiB } from '../qemu-config.ts';
import type { Route, RouteCtx } from '../server.ts';
import type { ClusterState, VmState } from '../state.ts';
import { MiB } from '../storage.ts';
import { loadVm } from './qemu-common.ts';
import { vmMaxDisk } from './qemu-power.ts';

/**
 * A QGA method's permission: VM.Monitor before PVE 9 (`$perm //= 'VM.Monitor'`, 8.3.13 c2287c17);
 * from 9, the command's own privilege or VM.GuestAgent.Unrestricted (`register_command`, :184 at
 * e6352be). A list is an explicit `any` check (fsfreeze-status).
 */
export function agentPerm(v9: string | string[]): (ctx: RouteCtx) => void {
  return (ctx) => {
    if (!ctx.c.profile.guestAgentPrivs) return requirePriv(ctx.c, ctx.auth, `/vms/${ctx.params.vmid}`, ['VM.Monitor']);
    const privs = Array.isArray(v9) ? v9 : [v9, 'VM.GuestAgent.Unrestricted'];
    requirePriv(ctx.c, ctx.auth, `/vms/${ctx.params.vmid}`, privs, { any: true });
  };
}

/** mon_cmd's death for an error the agent returns (QMPClient.pm:175, the peer `VM N` of type qga). */
export function qgaError(vm: VmState, command: string, desc: string): never {
  die(`VM ${vm.vmid} qga command 'guest-${command}' failed - ${desc}`);
}

/**
 * qemu-ga disables every command but its freeze allow-list while the file systems are frozen
 * (qemu qga/main.c ga_freeze_allowlist: ping, info, sync, fsfreeze-status, fsfreeze-thaw), and
 * qapi answers `Command X has been disabled: the agent is in frozen state`.
 */
const FREEZE_ALLOWED = new Set(['ping', 'info', 'fsfreeze-status', 'fsfreeze-thaw']);
export function checkNotFrozen(vm: VmState, command: string): void {
  if (vm.agent.frozen && !FREEZE_ALLOWED.has(command))
    qgaError(vm, command, `Command guest-${command} has been disabled: the agent is in frozen state`);
}

/** The agent of a VM that passed assert_agent_available. */
export function agentVm(c: ClusterState, params: Record<string, unknown>): VmState {
  const vm = loadVm(c, String(params.node), Number(params.vmid));
  assertAgent(c, vm);
  return vm;
}

const AUDIT = 'VM.GuestAgent.Audit';
const FSMGMT = 'VM.GuestAgent.FileSystemMgmt';

interface Command {
  method: 'GET' | 'POST';
  perm9: string | string[];
  result: (c: ClusterState, vm: VmState) => unknown;
}

/** qemu-ga's `guest-info` lists every command it knows and whether it is enabled. */
const QGA_COMMANDS = [
  'guest-exec',
  'guest-exec-status',
  'guest-file-close',
  'guest-file-open',
  'guest-file-read',
  'guest-file-write',
  'guest-fsfreeze-freeze',
  'guest-fsfreeze-status',
  'guest-fsfreeze-thaw',
  'guest-fstrim',
  'guest-get-fsinfo',
  'guest-get-host-name',
  'guest-get-memory-block-info',
  'guest-get-memory-blocks',
  'guest-get-osinfo',
  'guest-get-time',
  'guest-get-timezone',
  'guest-get-users',
  'guest-get-vcpus',
  'guest-info',
  'guest-network-get-interfaces',
  'guest-ping',
  'guest-set-user-password',
  'guest-shutdown',
  'guest-suspend-disk',
  'guest-suspend-hybrid',
  'guest-suspend-ram',
  'guest-sync',
];

function rootDisk(c: ClusterState, vm: VmState): number {
  return vmMaxDisk(c, vm) || 4 * 1024 * MiB;
}

/** The commands without arguments, by name, as `$guest_agent_commands` lists them. */
const COMMANDS: Record<string, Command> = {
  ping: { method: 'POST', perm9: AUDIT, result: () => ({}) },
  'get-time': { method: 'GET', perm9: AUDIT, result: (c) => c.clock.now() * 1_000_000 },
  info: {
    method: 'GET',
    perm9: AUDIT,
    result: () => ({
      version: '6.2.0',
      supported_commands: QGA_COMMANDS.map((name) => ({
        name,
        enabled: true,
        'success-response': name !== 'guest-shutdown' && !name.startsWith('guest-suspend'),
      })),
    }),
  },
  'fsfreeze-status': {
    method: 'POST',
    perm9: [AUDIT, FSMGMT, 'VM.GuestAgent.Unrestricted'],
    result: (_c, vm) => (vm.agent.frozen ? 'frozen' : 'thawed'),
  },
  'fsfreeze-freeze': {
    method: 'POST',
    perm9: FSMGMT,
    result: (_c, vm) => {
      // A second freeze is refused by checkNotFrozen (not on the allow-list).
      vm.agent.frozen = true;
      return 1;
    },
  },
  'fsfreeze-thaw': {
    method: 'POST',
    perm9: FSMGMT,
    result: (_c, vm) => {
      const n = vm.agent.frozen ? 1 : 0;
      vm.agent.frozen = false;
      return n;
    },
  },
  fstrim: {
    method: 'POST',
    perm9: FSMGMT,
    result: () => ({ paths: [{ path: '/', trimmed: 0, minimum: 0 }] }),
  },
  'network-get-interfaces': { method: 'GET', perm9: AUDIT, result: (_c, vm) => interfaces(vm) },
  'get-vcpus': {
    method: 'GET',
    perm9: AUDIT,
    result: (_c, vm) =>
      Array.from({ length: configCpus(vm.config) }, (_, i) => ({
        'logical-id': i,
        online: true,
        'can-offline': i !== 0,
      })),
  },
  'get-fsinfo': {
    method: 'GET',
    perm9: AUDIT,
    result: (c, vm) => {
      const total = rootDisk(c, vm);
      return [
        {
          name: 'sda1',
          mountpoint: '/',
          type: 'ext4',
          'total-bytes': total - 200 * MiB,
          'used-bytes': Math.round(total * 0.35),
          disk: [
            {
              'pci-controller': { domain: 0, bus: 1, slot: 1, function: 0 },
              'bus-type': 'scsi',
              bus: 0,
              target: 0,
              unit: 0,
              serial: `drive-scsi0`,
              dev: '/dev/sda1',
            },
          ],
        },
      ];
    },
  },
  'get-memory-blocks': {
    method: 'GET',
    perm9: AUDIT,
    result: (_c, vm) =>
      Array.from({ length: Math.max(1, Math.floor(configMemoryMiB(vm.config) / 128)) }, (_, i) => ({
        phys_index: i,
        online: true,
        'can-offline': i !== 0,
      })),
  },
  'get-memory-block-info': { method: 'GET', perm9: AUDIT, result: () => ({ size: 128 * MiB }) },
  // suspend-ram/-disk/-hybrid are not served (501): the simulator has no suspended guest state.
  shutdown: {
    method: 'POST',
    perm9: 'VM.PowerMgmt',
    // guest-shutdown closes the channel without an answer (QMPClient $qga_allow_close_cmds), so
    // the result is undef; the guest powers off: QEMU exits, the VM is stopped.
    result: (c, vm) => {
      // The guest stops (a shutdown from inside): as a `qmshutdown` ends, without its task.
      powerOff(c, vm);
      return null;
    },
  },
  'get-host-name': {
    method: 'GET',
    perm9: AUDIT,
    result: (_c, vm) => ({ 'host-name': guestHostname(vm) }),
  },
  'get-osinfo': {
    method: 'GET',
    perm9: AUDIT,
    result: () => ({
      id: 'ubuntu',
      name: 'Ubuntu',
      'pretty-name': 'Ubuntu 22.04.5 LTS',
      version: '22.04.5 LTS (Jammy Jellyfish)',
      'version-id': '22.04',
      'kernel-release': '5.15.0-131-generic',
      'kernel-version': '#141-Ubuntu SMP Fri Jan 10 21:18:28 UTC 2025',
      machine: 'x86_64',
    }),
  },
  // Nobody is logged in to a fresh cloud guest.
  'get-users': { method: 'GET', perm9: AUDIT, result: () => [] },
  'get-timezone': { method: 'GET', perm9: AUDIT, result: () => ({ zone: 'UTC', offset: 0 }) },
};

function interfaces(vm: VmState): unknown {
  return [
    {
      name: 'lo',
      'hardware-address': '00:00:00:00:00:00',
      'ip-addresses': [
        { 'ip-address': '127.0.0.1', 'ip-address-type': 'ipv4', prefix: 8 },
        { 'ip-address': '::1', 'ip-address-type': 'ipv6', prefix: 128 },
      ],
      statistics: {
        'rx-bytes': 0,
        'rx-dropped': 0,
        'rx-errs': 0,
        'rx-packets': 0,
        'tx-bytes': 0,
        'tx-dropped': 0,
        'tx-errs': 0,
        'tx-packets': 0,
      },
    },
    ...vm.guest.interfaces.map((i) => ({
      name: i.name,
      'hardware-address': i.mac,
      'ip-addresses': [
        ...(i.ipv4 ? [{ 'ip-address': i.ipv4, 'ip-address-type': 'ipv4', prefix: i.prefix ?? 24 }] : []),
        ...(i.ipv6 ? [{ 'ip-address': i.ipv6, 'ip-address-type': 'ipv6', prefix: 64 }] : []),
      ],
      statistics: {
        'rx-bytes': 102400,
        'rx-dropped': 0,
        'rx-errs': 0,
        'rx-packets': 800,
        'tx-bytes': 51200,
        'tx-dropped': 0,
        'tx-errs': 0,
        'tx-packets': 400,
      },
    })),
  ];
}

/**
 * The names the index lists: `$guest_agent_commands` plus those registered by hand (Agent.pm
 * `index`), whether served or not.
 */
const INDEX = [
  ...Object.keys(COMMANDS),
  'suspend-disk',
  'suspend-hybrid',
  'suspend-ram',
  'exec',
  'exec-status',
  'file-read',
  'file-write',
  'set-user-password',
].sort();

export const agentRoutes: Route[] = [
  {
    // `index`: `user => 'all'`, no VM lookup.
    method: 'GET',
    path: '/nodes/{node}/qemu/{vmid}/agent',
    handler: () => INDEX.map((name) => ({ name })),
  },
  // The old `POST {vmid}/agent` with a `command` parameter (register_command('', 'POST')) is
  // not served: its `command` enum includes the suspend commands the simulator does not model.
  ...Object.entries(COMMANDS).map(
    ([name, cmd]): Route => ({
      method: cmd.method,
      path: `/nodes/{node}/qemu/{vmid}/agent/${name}`,
      perm: agentPerm(cmd.perm9),
      handler: ({ c, params }) => {
        const vm = agentVm(c, params);
        checkNotFrozen(vm, name);
        return { result: cmd.result(c, vm) };
      },
    }),
  ),
];

/**
 * `agent` enabled in the config (get_qga_key($conf, 'enabled'), qemu-server
 * src/PVE/QemuServer/Agent.pm:63-80 at e6352be): what status/current reports as `agent: 1` and
 * what gives QEMU its agent channel.
 */
export function agentEnabled(vm: VmState): boolean {
  return vm.config.agent !== undefined && /^(1|enabled=1)/.test(vm.config.agent);
}

/**
 * assert_agent_available (qemu-server src/PVE/QemuServer/Agent.pm:109-113 at e6352be; the same
 * three checks as agent_available in 6.4-2, 7.4-3 and 8.3.13, PVE/QemuServer/Agent.pm:39-46),
 * all 500s:
 * - `No QEMU guest agent configured` only when `agent` is absent (`!defined`): `agent: 0` passes;
 * - `VM N is not running`;
 * - `QEMU guest agent is not running` whenever `guest-ping` fails: no agent channel (`agent: 0`),
 *   a guest still booting, or a guest without qemu-guest-agent (for ever, until it is installed).
 */
function assertAgent(c: ClusterState, vm: VmState): void {
  // What the guest did until now (cloud-init installing the agent, for one).
  settleGuest(c, vm);
  if (vm.config.agent === undefined) die('No QEMU guest agent configured');
  if (vm.status !== 'running') die(`VM ${vm.vmid} is not running`);
  if (!agentEnabled(vm) || !vm.guestAgent || c.clock.now() < vm.agentReadyAt) die('QEMU guest agent is not running');
}
