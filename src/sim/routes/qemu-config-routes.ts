/**
 * VM configuration routes: GET/POST/PUT `config`, `pending` and `resize`, with qemu-server's
 * early checks, hot-plug rules, pending changes and `cleanup_pending`.
 */
import { isRootUser } from '../auth.ts';
import { applyCloudinit, hotplugCloudinit, recordCloudinitChange } from '../cloudinit.ts';
import { die, PveHttpError, paramError } from '../errors.ts';
import {
  CLOUDINIT_KEYS,
  DRIVE_KEY_RE,
  FAST_PLUG,
  isCdrom,
  isCloudinit,
  NET_KEY_RE,
  parseDrive,
  setOpt,
  typedConfig,
  UNUSED_KEY_RE,
} from '../qemu-config.ts';
import { checkConfigWrite } from '../quorum.ts';
import type { Route, RouteCtx } from '../server.ts';
import { formatSize, GiB, MiB, missingVolumeMessage, type Volume } from '../storage.ts';
import type { TaskHandle } from '../tasks.ts';
import {
  checkBridges,
  checkConfigPerms,
  checkDigest,
  checkLock,
  checkSkiplock,
  configIdList,
  configKeys,
  DURATIONS,
  loadVm,
  lockVm,
  normalizeValue,
  sameModel,
  syncHandle,
  UPDATE_ONLY,
  vmPerm,
} from './qemu-common.ts';
import { executeDrives, planDrives, printDrive } from './qemu-drives.ts';
import { snapshotSection } from './qemu-snapshot.ts';

async function updateConfig(ctx: RouteCtx, async: boolean): Promise<string | null> {
  const { c, auth, params } = ctx;
  const node = String(params.node);
  const vmid = Number(params.vmid);
  const skiplock = checkSkiplock(auth, params);
  const set = configKeys(params, UPDATE_ONLY);
  const del = configIdList(params.delete);
  const revert = configIdList(params.revert);
  if (!Object.keys(set).length && !del.length && !revert.length) die('no options specified');
  for (const k of del) if (k in set) paramError({ delete: `cannot set and delete '${k}' at the same time` });
  checkConfigPerms(ctx, vmid, [...Object.keys(set), ...del.filter((k) => k !== 'lock' || !skiplock)]);
  if (del.includes('lock') && !isRootUser(auth)) die("only root can set 'lock' config");
  checkBridges(ctx, set);
  const vm = loadVm(c, node, vmid);
  const plans = planDrives(
    ctx,
    Object.fromEntries(Object.entries(set).filter(([k, v]) => DRIVE_KEY_RE.test(k) && v !== vm.config[k])),
  );

  const apply = async (t: TaskHandle | undefined): Promise<void> => {
    const unlock = await lockVm(c, vm, node, 10_000, t?.signal);
    try {
      checkDigest(c, vm, params);
      // Only skiplock (root@pam) passes a lock, `delete=lock` included.
      checkLock(vm, skiplock);
      const running = vm.status === 'running';
      const fastCloudinit = c.profile.cloudinitFastplug;
      const created: Volume[] = [];
      // update_vm's $updatefn writes the config after each option (:2290-2500): without quorum the
      // first write fails. Deletes and reverts come first; a new disk is allocated before its
      // write (create_disks), and stays on its storage, referenced by nothing.
      if (del.length || revert.length) checkConfigWrite(c, node, vmid);
      for (const k of revert) {
        delete vm.pending[k];
        vm.pendingDelete.delete(k);
      }
      for (const k of del) {
        if (!(k in vm.config) && !(k in vm.pending)) {
          t?.warn(`cannot delete '${k}' - not set in current configuration!`);
          continue;
        }
        const hot =
          !running ||
          FAST_PLUG.has(k) ||
          NET_KEY_RE.test(k) ||
          UNUSED_KEY_RE.test(k) ||
          k === 'lock' ||
          (fastCloudinit && CLOUDINIT_KEYS.test(k));
        if (!hot) {
          vm.pendingDelete.add(k);
          continue;
        }
        const old = vm.config[k];
        if (running && fastCloudinit) recordCloudinitChange(vm.cloudinitSection, k, old, undefined);
        delete vm.config[k];
        delete vm.pending[k];
        if (old && UNUSED_KEY_RE.test(k)) c.freeVolume(vm.node, parseDrive(old).file);
        else if (old && DRIVE_KEY_RE.test(k)) {
          const d = parseDrive(old);
          if (isCloudinit(d)) {
            // vmconfig_register_unused_drive: the drive goes, and with it its special section.
            c.freeVolume(vm.node, d.file);
            vm.cloudinitSection = {};
            vm.ciDrive = undefined;
          } else if (!isCdrom(d) && c.volume(vm.node, d.file)) {
            let i = 0;
            while (vm.config[`unused${i}`]) i++;
            vm.config[`unused${i}`] = d.file;
          }
        }
      }
      const drives = await executeDrives(c, t ?? syncHandle(c), node, vmid, plans, created);
      checkConfigWrite(c, node, vmid);
      for (const [k, raw] of Object.entries(set)) {
        const value = drives[k] ?? (DRIVE_KEY_RE.test(k) ? raw : normalizeValue(c, k, raw, true));
        const live =
          !running ||
          FAST_PLUG.has(k) ||
          (fastCloudinit && CLOUDINIT_KEYS.test(k)) ||
          (NET_KEY_RE.test(k) && sameModel(vm.config[k], value)) ||
          (DRIVE_KEY_RE.test(k) && k in drives);
        if (live && !(running && CLOUDINIT_KEYS.test(k) && !fastCloudinit)) {
          // vmconfig_hotplug_pending records what a running VM's drive no longer matches.
          if (running && fastCloudinit) recordCloudinitChange(vm.cloudinitSection, k, vm.config[k], value);
          vm.config[k] = value;
          delete vm.pending[k];
        } else {
          vm.pending[k] = value;
        }
      }
      // PVE::AbstractConfig::cleanup_pending: a pending value equal to the current one is dropped.
      for (const [k, v] of Object.entries(vm.pending)) if (vm.config[k] === v) delete vm.pending[k];
      for (const k of [...vm.pendingDelete]) if (!(k in vm.config)) vm.pendingDelete.delete(k);
      // With the `cloudinit` hotplug feature the drive is regenerated at once (QemuServer.pm:4941-4943).
      if (running && fastCloudinit && hotplugCloudinit(vm.config) && Object.keys(vm.cloudinitSection).length)
        applyCloudinit(c, vm);
      if (t) await t.sleep(DURATIONS.config);
    } finally {
      unlock();
    }
  };

  // `$load_and_check_config->(0)`: early checks before forking and before the flock, for
  // PUT and POST alike (a VM locked 'create' answers at once, not after a flock timeout).
  checkDigest(c, vm, params);
  checkLock(vm, skiplock);
  if (!async) {
    // PUT: synchronous; warnings are printed, not returned.
    await apply(undefined);
    return null;
  }
  // POST: the rest in a qmconfig worker.
  return ctx.tasks.start(node, 'qmconfig', String(vmid), auth, (t) => apply(t));
}

export const configRoutes: Route[] = [
  {
    method: 'GET',
    path: '/nodes/{node}/qemu/{vmid}/config',
    perm: vmPerm('VM.Audit'),
    handler: ({ c, params }) => {
      if (params.snapshot && params.current) {
        const msg = "cannot use 'snapshot' parameter with 'current'";
        paramError({ snapshot: msg, current: msg });
      }
      const vm = loadVm(c, String(params.node), Number(params.vmid));
      if (params.snapshot) {
        // load_snapshot_config: the section, with the file's digest.
        const s = vm.snapshots.get(String(params.snapshot));
        if (!s) die(`snapshot '${params.snapshot}' does not exist`);
        return { ...snapshotSection(c, s), digest: c.digest(vm) };
      }
      const merged = params.current ? { ...vm.config } : { ...vm.config, ...vm.pending };
      if (!params.current) for (const k of vm.pendingDelete) delete merged[k];
      return { ...typedConfig(merged, c.profile), digest: c.digest(vm) };
    },
  },
  {
    method: 'POST',
    path: '/nodes/{node}/qemu/{vmid}/config',
    handler: (ctx) => updateConfig(ctx, true),
  },
  {
    method: 'PUT',
    path: '/nodes/{node}/qemu/{vmid}/config',
    handler: (ctx) => updateConfig(ctx, false),
  },
  {
    method: 'GET',
    path: '/nodes/{node}/qemu/{vmid}/pending',
    perm: vmPerm('VM.Audit'),
    handler: ({ c, params }) => {
      const vm = loadVm(c, String(params.node), Number(params.vmid));
      const keys = new Set([...Object.keys(vm.config), ...Object.keys(vm.pending), ...vm.pendingDelete]);
      const cur = typedConfig(vm.config, c.profile);
      const pen = typedConfig(vm.pending, c.profile);
      return [...keys].sort().map((key) => ({
        key,
        ...(key in cur ? { value: cur[key] } : {}),
        ...(key in pen ? { pending: pen[key] } : {}),
        ...(vm.pendingDelete.has(key) ? { delete: 1 } : {}),
      }));
    },
  },
  {
    method: 'PUT',
    path: '/nodes/{node}/qemu/{vmid}/resize',
    perm: vmPerm('VM.Config.Disk'),
    handler: async (ctx) => {
      const { c, auth, params } = ctx;
      const node = String(params.node);
      const vmid = Number(params.vmid);
      const skiplock = checkSkiplock(auth, params);
      const held = loadVm(c, node, vmid);
      const disk = String(params.disk);
      const sizeArg = String(params.size);
      const work = async (t: TaskHandle | undefined): Promise<void> => {
        const unlock = await held.flock.acquire(10_000, t ? { signal: t.signal } : {});
        try {
          // resize_vm loads the config once it holds the lock (qemu-server src/PVE/API2/Qemu.pm:6002-6004,
          // the worker :6068-6072, at e6352be): a VM destroyed while the task waited for the lock
          // fails it with "Configuration file ... does not exist".
          const vm = loadVm(c, node, vmid);
          checkDigest(c, vm, params);
          checkLock(vm, skiplock);
          const value = vm.config[disk];
          if (!value) throw new Error(`disk '${disk}' does not exist`);
          const d = parseDrive(value);
          if (isCdrom(d)) throw new Error("you can't resize a cdrom");
          const vol = c.volume(node, d.file);
          if (!vol) throw new Error(missingVolumeMessage(c.storage(node, d.file.split(':')[0]!), d.file));
          const m = /^(\+?)(\d+(?:\.\d+)?)([KMGT]?)$/.exec(sizeArg)!;
          const unit = { '': 1, K: 1024, M: MiB, G: GiB, T: 1024 * GiB }[m[3] as '' | 'K' | 'M' | 'G' | 'T'];
          const amount = Math.round(Number(m[2]) * unit);
          const newSize = m[1] ? vol.size + amount : amount;
          if (newSize < vol.size) throw new Error('shrinking disks is not supported');
          // "return if $size == $newsize" (:6050): the size is the volume's, not the config's, so a
          // config that a failed write left at the old size stays so (`qm disk rescan` mends it).
          if (newSize === vol.size) return;
          const s = c.storage(node, vol.storage)!;
          const grow = newSize - vol.size;
          if (!vol.parent && grow > s.avail)
            throw new Error(
              `unable to resize disk: ${s.id} has ${formatSize(s.avail)} available, ${formatSize(grow)} required`,
            );
          if (t)
            t.log(
              `  Size of logical volume pve/${vol.volname} changed from ${formatSize(vol.size)} to ${formatSize(newSize)}.`,
            );
          vol.size = newSize;
          // The volume has grown (the task's time is the block resize's); the config's write comes
          // after it (:6059-6066): a worker killed meanwhile, or a write refused, leaves it stale.
          if (t) await t.sleep(DURATIONS.config);
          checkConfigWrite(c, node, vmid);
          setOpt(d.p, 'size', formatSize(newSize));
          vm.config[disk] = printDrive(vol.volid, d, newSize);
        } finally {
          unlock();
        }
      };
      if (!c.profile.asyncResize) {
        try {
          await work(undefined);
        } catch (e) {
          if (e instanceof PveHttpError) throw e;
          die(e instanceof Error ? e.message : String(e));
        }
        return null;
      }
      return ctx.tasks.start(node, 'resize', String(vmid), auth, (t) => work(t));
    },
  },
];
