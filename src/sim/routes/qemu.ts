/**
 * `/nodes/{node}/qemu`: the VM list, destroy and template here; create, clone, config, power,
 * suspend/resume, the migration precondition, migrations, disk moves, snapshots and the guest
 * agent in their own modules (qemu-create.ts, qemu-clone.ts, qemu-config-routes.ts,
 * qemu-power.ts, qemu-suspend.ts, qemu-migrate.ts, qemu-migrate-post.ts, qemu-remote-migrate.ts,
 * qemu-move-disk.ts, qemu-snapshot.ts, qemu-agent.ts, qemu-agent-exec.ts, qemu-cloudinit.ts),
 * all served as `qemuRoutes` (the VM's directory index is in indexes.ts).
 */
import { hasPriv } from '../auth.ts';
import { die } from '../errors.ts';
import { DRIVE_KEY_RE, isCdrom, isCloudinit, parseDrive } from '../qemu-config.ts';
import { checkConfigWrite } from '../quorum.ts';
import type { Route } from '../server.ts';
import type { TaskHandle } from '../tasks.ts';
import { agentRoutes } from './qemu-agent.ts';
import { agentExecRoutes } from './qemu-agent-exec.ts';
import { cloneRoute } from './qemu-clone.ts';
import { cloudinitRoutes } from './qemu-cloudinit.ts';
import { checkLock, checkSkiplock, DURATIONS, loadVm, vmPerm } from './qemu-common.ts';
import { configRoutes } from './qemu-config-routes.ts';
import { createRoute } from './qemu-create.ts';
import { freeVmVolumes, printDrive } from './qemu-drives.ts';
import { migrateRoutes } from './qemu-migrate.ts';
import { migratePostRoute } from './qemu-migrate-post.ts';
import { moveDiskRoute } from './qemu-move-disk.ts';
import { powerRoutes, vmStatus } from './qemu-power.ts';
import { remoteMigrateRoute } from './qemu-remote-migrate.ts';
import { snapshotRoutes } from './qemu-snapshot.ts';
import { suspendRoutes } from './qemu-suspend.ts';

export { DURATIONS, loadVm } from './qemu-common.ts';
export { vmMaxDisk } from './qemu-power.ts';

const vmRoutes: Route[] = [
  {
    method: 'GET',
    path: '/nodes/{node}/qemu',
    handler: ({ c, auth, params }) =>
      [...c.vms.values()]
        .filter((vm) => vm.node === params.node && hasPriv(c, auth, `/vms/${vm.vmid}`, 'VM.Audit'))
        .sort((a, b) => a.vmid - b.vmid)
        .map((vm) => {
          const s = vmStatus(c, vm);
          delete s.ha;
          return s;
        }),
  },
  {
    method: 'DELETE',
    path: '/nodes/{node}/qemu/{vmid}',
    perm: vmPerm('VM.Allocate'),
    handler: (ctx) => {
      const { c, auth, params } = ctx;
      const node = String(params.node);
      const vmid = Number(params.vmid);
      const skiplock = checkSkiplock(auth, params);
      const vm = loadVm(c, node, vmid);
      // destroy_vm's $early_checks order: protection, HA without purge, running.
      if (vm.config.protection === '1') die(`can't remove VM ${vmid} - protection mode enabled`);
      if (vm.haManaged && !params.purge)
        die(`unable to remove VM ${vmid} - used in HA resources and purge parameter not set.`);
      if (vm.status === 'running') die(`VM ${vmid} is running - destroy failed`);
      return ctx.tasks.start(node, 'qmdestroy', String(vmid), auth, async (t) => {
        const unlock = await vm.flock.acquire(10_000, { signal: t.signal });
        try {
          // destroy_vm (QemuServer.pm): a hibernated VM (`lock: suspended`) may be destroyed.
          if (vm.config.lock !== 'suspended') checkLock(vm, skiplock);
          if (vm.status === 'running') throw new Error(`VM ${vmid} is running - destroy failed`);
          await t.sleep(DURATIONS.destroy);
          // Its `vmstate` is an owned volume (foreach_volume_full with extra_keys vmstate).
          if (vm.config.vmstate) c.freeVolume(node, vm.config.vmstate);
          // destroy_vm also removes the RAM state volumes of snapshots.
          for (const snap of vm.snapshots.values()) if (snap.vmstate) c.freeVolume(node, snap.vmstate);
          for (const volid of freeVmVolumes(c, vm, Boolean(params['destroy-unreferenced-disks']))) {
            t.log(`  Logical volume "${volid.split(':')[1]}" successfully removed.`);
          }
          // destroy_vm writes `lock: destroyed` once the disks are gone (QemuServer.pm:1921-1925):
          // without quorum that fails, and the config stays, naming volumes that are gone.
          checkConfigWrite(c, node, vmid);
          if (params.purge) for (const p of c.pools.values()) p.members.delete(`qemu/${vmid}`);
          c.vms.delete(vmid);
        } finally {
          unlock();
        }
      });
    },
  },
  {
    method: 'POST',
    path: '/nodes/{node}/qemu/{vmid}/template',
    perm: vmPerm('VM.Allocate'),
    handler: async (ctx) => {
      const { c, auth, params } = ctx;
      const node = String(params.node);
      const vmid = Number(params.vmid);
      const vm = loadVm(c, node, vmid);
      const unlock = await vm.flock.acquire(10_000);
      let handed = false;
      try {
        checkLock(vm, false);
        // $load_and_check (Qemu.pm `template`, e6352be).
        if (vm.snapshots.size) die('unable to create template, because VM contains snapshots');
        if (vm.config.template === '1') die("you can't convert a template to a template");
        if (vm.status === 'running') die("you can't convert a VM to template if VM is running");
        // `template: 1` is written first, then template_create renames the disks.
        const renameDisks = async (t: TaskHandle) => {
          checkConfigWrite(c, node, vmid);
          vm.config.template = '1';
          await t.sleep(DURATIONS.template);
          for (const [k, v] of Object.entries(vm.config)) {
            if (!DRIVE_KEY_RE.test(k)) continue;
            const d = parseDrive(v);
            if (isCdrom(d) || isCloudinit(d)) continue;
            if (params.disk !== undefined && params.disk !== k) continue;
            const vol = c.volume(node, d.file);
            if (!vol) continue;
            const s = c.storage(node, vol.storage)!;
            // template_create skips a volume whose storage has no `template` feature
            // (qemu-server QemuServer.pm:7886-7908 at e6352be, volume_has_feature): LVM (thick)
            // has none (pve-storage LVMPlugin volume_has_feature), so its disk stays
            // vm-<vmid>-disk-N and a linked clone of it is refused later.
            if (s.type === 'lvm') continue;
            s.volumes.delete(vol.volname);
            vol.volname = vol.volname.replace(`vm-${vmid}-disk-`, `base-${vmid}-disk-`);
            vol.volid = `${s.id}:${vol.volname}`;
            s.volumes.set(vol.volname, vol);
            vm.config[k] = printDrive(vol.volid, d, vol.size);
            t.log(`  Renamed "vm-${vmid}-${k}" to "${vol.volname}"`);
          }
        };
        if (c.profile.profile === '6.4') {
          // qemu-server 6.4-2 (c948e143): the handler writes `template: 1` under the flock, forks
          // the worker for the disks and returns nothing (`returns => { type => 'null' }`).
          checkConfigWrite(c, node, vmid);
          vm.config.template = '1';
          ctx.tasks.start(node, 'qmtemplate', String(vmid), auth, renameDisks);
          return null;
        }
        handed = true;
        return ctx.tasks.start(
          node,
          'qmtemplate',
          String(vmid),
          auth,
          async (t) => {
            try {
              await renameDisks(t);
            } finally {
              unlock();
            }
          },
          ({ ran }) => {
            // Released by the worker; a fault that acted before it ran (or killed it) leaves it here.
            if (!ran) unlock();
          },
        );
      } finally {
        if (!handed) unlock();
      }
    },
  },
];

/** Every served `/nodes/{node}/qemu...` method (the server looks routes up by method and path). */
export const qemuRoutes: Route[] = [
  ...vmRoutes,
  createRoute,
  cloneRoute,
  ...configRoutes,
  ...powerRoutes,
  ...suspendRoutes,
  ...migrateRoutes,
  migratePostRoute,
  moveDiskRoute,
  remoteMigrateRoute,
  ...agentRoutes,
  ...agentExecRoutes,
  ...snapshotRoutes,
  ...cloudinitRoutes,
];
