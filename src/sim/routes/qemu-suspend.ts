/**
 * Suspend and resume of a VM: `status/suspend` pauses QEMU (task `qmpause`, `qmpstatus: paused`)
 * or, with `todisk`, hibernates it (task `qmsuspend`): the RAM goes into a `vm-N-state-suspend-DATE`
 * volume named by `vmstate` in the config, the config gets `lock: suspended`, and the VM stops.
 * `status/resume` (task `qmresume`) continues a paused VM or starts a hibernated one from its
 * state volume, as `status/start` also does (qemu-power.ts startWorker and finishResume).
 *
 * Sources: qemu-server src/PVE/API2/Qemu.pm vm_suspend / vm_resume, src/PVE/QemuServer/RunState.pm
 * vm_suspend / vm_resume, src/PVE/QemuServer.pm vm_start / vm_start_nolock (e6352be).
 */

import { isRootUser, requirePriv } from '../auth.ts';
import { die, paramError } from '../errors.ts';
import { powerOff } from '../guest-cloudinit.ts';
import { configMemoryMiB } from '../qemu-config.ts';
import type { Route } from '../server.ts';
import type { ClusterState, VmState } from '../state.ts';
import { MiB } from '../storage.ts';
import type { TaskHandle } from '../tasks.ts';
import { checkLock, checkSkiplock, DURATIONS, loadVm, vmPerm } from './qemu-common.ts';
import { startWorker } from './qemu-power.ts';
import { vmstateStorage } from './qemu-snapshot.ts';

/** What QEMU reports as `-machine` of a running VM (as in vmStatus' `running-machine`). */
const RUNNING_MACHINE = 'pc-i440fx-9.2+pve1';

/**
 * The state volume of a hibernation: QemuConfig.pm __snapshot_save_vmstate with the snapshot name
 * `suspend-YYYY-MM-DD` (RunState.pm vm_suspend), `.raw` on file storages, 2 x memory + 500 MiB.
 */
function allocSuspendState(c: ClusterState, vm: VmState, sid: string): string {
  const s = c.storage(vm.node, sid);
  if (!s) throw new Error(`storage '${sid}' does not exist`);
  const date = new Date(c.clock.now()).toISOString().slice(0, 10);
  const base = `vm-${vm.vmid}-state-suspend-${date}`;
  const volname = s.isFileBased ? `${vm.vmid}/${base}.raw` : base;
  const size = (configMemoryMiB(vm.config) * 2 + 500) * MiB;
  if (s.volumes.has(volname)) throw new Error(`unable to create state volume '${volname}': volume exists`);
  if (s.avail < size) throw new Error(`unable to create state volume '${volname}': not enough space on '${sid}'`);
  s.volumes.set(volname, {
    volid: `${sid}:${volname}`,
    storage: sid,
    volname,
    content: 'images',
    format: 'raw',
    size,
    vmid: vm.vmid,
    ctime: c.clock.epoch(),
  });
  return `${sid}:${volname}`;
}

/** RunState.pm vm_suspend: pause (`stop` over QMP) or save the state and quit. */
async function suspendWorker(
  c: ClusterState,
  t: TaskHandle,
  vm: VmState,
  skiplock: boolean,
  todisk: boolean,
  statestorage: string | undefined,
): Promise<void> {
  let unlock = await vm.flock.acquire(10_000, { signal: t.signal });
  try {
    const backingUp = vm.config.lock === 'backup';
    if (!(skiplock || backingUp)) checkLock(vm, false);
    if (backingUp && todisk) throw new Error('cannot suspend to disk during backup');
    if (!todisk) {
      vm.paused = true;
      return;
    }
    vm.config.lock = 'suspending';
    const sid = statestorage ?? vmstateStorage(c, vm);
    vm.config.vmstate = allocSuspendState(c, vm, sid);
    vm.config.runningmachine = RUNNING_MACHINE;
  } finally {
    unlock();
  }
  // savevm-start, then query-savevm until `completed`.
  await t.sleep(DURATIONS.savevm);
  t.log('State saved, quitting');
  t.endOfWork();
  unlock = await vm.flock.acquire(10_000, { signal: t.signal });
  try {
    if (vm.config.lock !== 'suspending') throw new Error('lock changed unexpectedly');
    // `quit`: the QEMU process ends; the guest's RAM (agent processes included) is in the volume.
    powerOff(c, vm);
    vm.config.lock = 'suspended';
  } finally {
    unlock();
  }
}

export const suspendRoutes: Route[] = [
  {
    method: 'POST',
    path: '/nodes/{node}/qemu/{vmid}/status/suspend',
    perm: vmPerm('VM.PowerMgmt'),
    handler: (ctx) => {
      const { c, auth, params } = ctx;
      const node = String(params.node);
      const vmid = Number(params.vmid);
      const todisk = Boolean(params.todisk);
      let statestorage = params.statestorage === undefined ? undefined : String(params.statestorage);
      const skiplock = checkSkiplock(auth, params);
      const vm = loadVm(c, node, vmid);
      if (vm.status !== 'running') die(`VM ${vmid} not running`);
      if (todisk && vm.haManaged) die('Cannot suspend HA managed VM to disk');
      if (todisk) {
        // The early checks "for better user feedback": VM.Config.Disk, no PCI passthrough (from
        // qemu-server 7.2-5, 227a298f / 161c2dde), Datastore.AllocateSpace on the state storage.
        requirePriv(c, auth, `/vms/${vmid}`, ['VM.Config.Disk']);
        if (c.profile.profile !== '6.4' && Object.keys(vm.config).some((k) => /^hostpci\d+/.test(k)))
          die(
            'cannot suspend VM to disk due to passed-through PCI device(s), which lack the possibility to save/restore their internal state',
          );
        statestorage ??= vmstateStorage(c, vm);
        requirePriv(c, auth, `/storage/${statestorage}`, ['Datastore.AllocateSpace']);
      }
      return ctx.tasks.start(node, todisk ? 'qmsuspend' : 'qmpause', String(vmid), auth, (t) =>
        suspendWorker(c, t, vm, skiplock, todisk, statestorage),
      );
    },
  },
  {
    method: 'POST',
    path: '/nodes/{node}/qemu/{vmid}/status/resume',
    perm: vmPerm('VM.PowerMgmt'),
    handler: (ctx) => {
      const { c, auth, params } = ctx;
      const node = String(params.node);
      const vmid = Number(params.vmid);
      const skiplock = checkSkiplock(auth, params);
      // nocheck: used by migration while the config may still be on the source node.
      const nocheck = Boolean(params.nocheck);
      if (nocheck && !isRootUser(auth)) paramError({ nocheck: 'Only root may use this option.' });
      const vm = loadVm(c, node, vmid);
      const toDiskSuspended = vm.config.lock === 'suspended';
      if (!toDiskSuspended && vm.status !== 'running') die(`VM ${vmid} not running`);
      return ctx.tasks.start(node, 'qmresume', String(vmid), auth, async (t) => {
        // A hibernated VM is started (vm_start with skiplock), which resumes from its state.
        if (toDiskSuspended) return startWorker(c, t, vm, skiplock);
        const unlock = await vm.flock.acquire(10_000, { signal: t.signal });
        try {
          if (vm.config.template === '1') throw new Error(`VM ${vmid} is a template and cannot be resumed!`);
          // query-status `running`: "job done, go home", before any lock check.
          if (vm.status === 'running' && !vm.paused) return;
          if (!nocheck && !(skiplock || vm.config.lock === 'backup')) checkLock(vm, false);
          if (vm.status !== 'running') throw new Error(`VM ${vmid} not running`);
          vm.paused = false;
        } finally {
          unlock();
        }
      });
    },
  },
];
