/**
 * The guest agent endpoints (qemu-server src/PVE/API2/Qemu/Agent.pm): `network-get-interfaces`
 * and `ping`, with assert_agent_available's errors in its order.
 */
import { die } from '../errors.ts';
import type { Route } from '../server.ts';
import type { ClusterState, VmState } from '../state.ts';
import { agentPriv, loadVm, vmPerm } from './qemu-common.ts';

export const agentRoutes: Route[] = [
  {
    method: 'GET',
    path: '/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces',
    perm: vmPerm(agentPriv),
    handler: ({ c, params }) => {
      const vm = loadVm(c, String(params.node), Number(params.vmid));
      assertAgent(c, vm);
      return {
        result: [
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
        ],
      };
    },
  },
  {
    method: 'POST',
    path: '/nodes/{node}/qemu/{vmid}/agent/ping',
    perm: vmPerm(agentPriv),
    handler: ({ c, params }) => {
      assertAgent(c, loadVm(c, String(params.node), Number(params.vmid)));
      return { result: {} };
    },
  },
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
  if (vm.config.agent === undefined) die('No QEMU guest agent configured');
  if (vm.status !== 'running') die(`VM ${vm.vmid} is not running`);
  if (!agentEnabled(vm) || !vm.guestAgent || c.clock.now() < vm.agentReadyAt) die('QEMU guest agent is not running');
}
