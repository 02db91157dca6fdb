/**
 * `POST /nodes/{node}/qemu` (create_vm), in the order qemu-server does it, so that a client can
 * observe (and a failure can leave) every intermediate state. Line numbers are qemu-server's
 * src/PVE/API2/Qemu.pm at e6352be (9.2.6); 6.4-2 (c948e143) and 8.3.13 (c2287c17) have the same
 * steps.
 *
 * 1. The handler checks, then `create_and_lock_config` (:1374) writes a config holding only
 *    `lock: create`, under the VMID's flock (5 s) which it releases again (pve-guest-common
 *    src/PVE/AbstractConfig.pm:254-269 at 4a8f6cb). A taken VMID fails inside that flock with
 *    `unable to create VM N - VM N already exists on node 'X'` (:1372 prefix, pve-cluster
 *    src/PVE/Cluster.pm:785-796 at 7091d92).
 * 2. The worker takes the flock again with a 1 s timeout (lock_config_full($vmid, 1), :1558),
 *    creates the disks, and writes the final config at the end (:1541). That config is built
 *    from the parameters (`$conf = $param`, :1479), so it has no `lock`: the write ends the lock.
 *    Pool membership follows the write (:1553), then `ha-manager add` (:1560-1566).
 * 3. On an error the new volumes are freed (:1545-1550, `unable to create VM N - …`) and the
 *    config file is unlinked (:1603-1608), whatever held the flock.
 *
 * Until step 2 ends, the VM is only that placeholder: GET config shows `lock: create` and no
 * name, status/current `name: VM N`, `status: stopped`, `lock: create` (QemuServer::vmstatus,
 * src/PVE/QemuServer.pm:2535-2600), and /cluster/resources `lock: create` at once (config
 * property) but name and status only from the next pvestatd tick. A worker that dies leaves it.
 */
import { requirePriv } from '../auth.ts';
import { die } from '../errors.ts';
import { DRIVE_KEY_RE } from '../qemu-config.ts';
import { checkCfsQuorum, checkConfigWrite, quorate } from '../quorum.ts';
import type { Route } from '../server.ts';
import type { Volume } from '../storage.ts';
import { isWorkerDeath } from '../tasks.ts';
import {
  CREATE_ONLY,
  checkBridges,
  checkConfigPerms,
  checkPoolExists,
  configKeys,
  normalizeValue,
} from './qemu-common.ts';
import { executeDrives, imageGuestAgent, planDrives } from './qemu-drives.ts';
import { startWorker } from './qemu-power.ts';

export const createRoute: Route = {
  method: 'POST',
  path: '/nodes/{node}/qemu',
  handler: async (ctx) => {
    const { c, auth, params } = ctx;
    const node = String(params.node);
    const vmid = Number(params.vmid);
    if (params.archive !== undefined) die('restore from backup archives is not supported by the simulator');
    checkCfsQuorum(c); // (:1289, before the pool and permission checks)
    const pool = params.pool as string | undefined;
    checkPoolExists(c, pool);
    if (pool !== undefined) requirePriv(c, auth, `/pool/${pool}`, ['VM.Allocate'], { bare: true });
    else requirePriv(c, auth, `/vms/${vmid}`, ['VM.Allocate'], { bare: true });
    const conf = configKeys(params, CREATE_ONLY);
    checkConfigPerms(ctx, vmid, Object.keys(conf));
    checkBridges(ctx, conf);
    const plans = planDrives(ctx, conf, params.storage as string | undefined);
    const emsg = `unable to create VM ${vmid} -`;

    // create_and_lock_config: the placeholder is written under the flock, which is then let go.
    let vm: ReturnType<typeof c.newVm>;
    const flock = c.flock(vmid);
    let unlockPlaceholder: () => void;
    try {
      unlockPlaceholder = await flock.acquire(5000);
    } catch (e) {
      return die(`${emsg} ${e instanceof Error ? e.message : String(e)}`);
    }
    try {
      // PVE::Cluster::check_vmid_unused: VMIDs are shared with containers (`CT N already exists`).
      const existing = c.vms.get(vmid);
      if (existing) die(`${emsg} VM ${vmid} already exists on node '${existing.node}'`);
      const ct = c.containers.get(vmid);
      if (ct) die(`${emsg} CT ${vmid} already exists on node '${ct.node}'`);
      vm = c.newVm(vmid, node, { lock: 'create' });
    } finally {
      unlockPlaceholder();
    }

    const start = Boolean(params.start);
    /** The worker's error path: the config file goes, whoever holds the flock (:1603-1608). */
    const removePlaceholder = () => {
      if (c.vms.get(vmid) === vm) c.vms.delete(vmid);
    };
    return ctx.tasks.start(
      node,
      'qmcreate',
      String(vmid),
      auth,
      async (t) => {
        let unlock: () => void;
        try {
          unlock = await flock.acquire(1000, { signal: t.signal });
        } catch (e) {
          if (!isWorkerDeath(e)) removePlaceholder();
          throw e;
        }
        const created: Volume[] = [];
        try {
          const ctime = c.clock.epoch();
          const drives = await executeDrives(c, t, node, vmid, plans, created);
          const final: Record<string, string> = {};
          for (const [k, v] of Object.entries(conf))
            final[k] = drives[k] ?? (DRIVE_KEY_RE.test(k) ? v : normalizeValue(c, k, v));
          final.smbios1 ??= `uuid=${c.rng.uuid()}`;
          final.vmgenid ??= c.rng.uuid();
          final.meta = `creation-qemu=${c.profile.qemuVersion},ctime=${ctime}`;
          // A `die` at `end` strikes here: disks made, config still the placeholder.
          t.endOfWork();
          // write_config (:1541): refused on a read-only pmxcfs (quorum.ts).
          checkConfigWrite(c, node, vmid);
          vm.config = final;
          vm.guestAgent = imageGuestAgent(c, node, plans, final.boot);
        } catch (e) {
          if (isWorkerDeath(e)) throw e;
          for (const v of created) c.freeVolume(node, v.volid);
          // The unlink of the config (:1601-1605) fails on a read-only pmxcfs, and is only warned
          // about: the placeholder stays, `lock: create`, its task failed (not died).
          if (quorate(c)) removePlaceholder();
          else t.warn('failed to remove config file: Permission denied');
          const msg = e instanceof Error ? e.message : String(e);
          throw new Error(`${emsg} ${msg}`);
        } finally {
          unlock();
        }
        if (pool) c.pools.get(pool)?.members.add(`qemu/${vmid}`);
        if (params['ha-managed']) {
          // `ha-manager add vm:<vmid> --state stopped|started` (qemu-server 9.0.24).
          t.log('Add as HA resource');
          vm.haManaged = true;
        }
      },
      ({ ok, ran, died }) => {
        // A `fail` fault before the worker ran: its error path would have removed the config.
        // A dead worker removes nothing: the placeholder stays, locked `create`.
        if (!ran && !died) removePlaceholder();
        if (ok && start) {
          ctx.tasks.start(node, 'qmstart', String(vmid), auth, (t) => startWorker(c, t, vm, false));
        }
      },
    );
  },
};
