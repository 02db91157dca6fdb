/**
 * `/nodes/{node}/qemu/{vmid}/cloudinit`: GET (cloudinit_pending: the cloud-init options with the
 * value the drive was generated from and the new one), PUT (cloudinit_update: regenerate the
 * drive) and GET `cloudinit/dump` (the generated user, network or meta data), as qemu-server
 * src/PVE/API2/Qemu.pm:1920-2052 and :6593-6636 at e6352be serve them. GET/PUT exist from PVE 7.3
 * (the 7.4, 8.4 and 9.2 schemas), `dump` from 6.x; a profile whose schema lacks a method answers
 * 501, as for every route.
 */
import { hasPriv } from '../auth.ts';
import { applyCloudinit, cloudinitPending, dumpCloudinit } from '../cloudinit.ts';
import { die } from '../errors.ts';
import { checkConfigWrite } from '../quorum.ts';
import type { Route } from '../server.ts';
import { checkLock, loadVm, lockVm, vmPerm } from './qemu-common.ts';

export const cloudinitRoutes: Route[] = [
  {
    method: 'GET',
    path: '/nodes/{node}/qemu/{vmid}/cloudinit',
    perm: vmPerm('VM.Audit'),
    handler: ({ c, params }) => cloudinitPending(loadVm(c, String(params.node), Number(params.vmid))),
  },
  {
    method: 'PUT',
    path: '/nodes/{node}/qemu/{vmid}/cloudinit',
    perm: vmPerm('VM.Config.Cloudinit'),
    handler: async ({ c, params }) => {
      const vm = loadVm(c, String(params.node), Number(params.vmid));
      // lock_config (10 s), check_lock, vmconfig_update_cloudinit_drive; a running VM gets the new
      // medium (change_medium), its guest reads it at the next boot.
      const unlock = await lockVm(c, vm, String(params.node), 10_000);
      try {
        checkLock(vm, false);
        // apply_cloudinit_config writes the drive, then the config (Cloudinit.pm:727-734): without
        // quorum that write fails. Refused here before the drive is written (its new medium would
        // reach the guest only at its next boot, which the refusal's caller retries before).
        checkConfigWrite(c, vm.node, vm.vmid);
        try {
          applyCloudinit(c, vm);
        } catch (e) {
          die(e instanceof Error ? e.message : String(e));
        }
      } finally {
        unlock();
      }
      return null;
    },
  },
  {
    method: 'GET',
    path: '/nodes/{node}/qemu/{vmid}/cloudinit/dump',
    perm: vmPerm('VM.Audit'),
    handler: ({ c, auth, params }) => {
      const vm = loadVm(c, String(params.node), Number(params.vmid));
      // The password is masked unless the user may change cloud-init settings.
      const mask = !hasPriv(c, auth, `/vms/${vm.vmid}`, 'VM.Config.Cloudinit');
      return dumpCloudinit(c, vm, String(params.type), mask);
    },
  },
];
