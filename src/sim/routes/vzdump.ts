/**
 * `POST /nodes/{node}/vzdump`: a backup job (task `vzdump`) of the listed guests (or `all`, or a
 * `pool`) into a storage with `backup` content. Each guest is locked `lock: backup` while its
 * archive is written (a guest already locked fails with PVE's `VM is locked (...)` and the job
 * ends `job errors`), and its archive appears as `<storage>:backup/vzdump-qemu-<vmid>-<YYYY_MM_DD-
 * HH_MM_SS>.vma[.zst|.gz|.lzo]` (`.tar...` for containers) in the storage's content list, where
 * the volume delete route removes it. One job at a time per node (vzdump's global lock).
 *
 * Sources: pve-manager PVE/API2/VZDump.pm `vzdump`, PVE/API2/Backup.pm
 * assert_param_permission_common, PVE/VZDump.pm (new, getlock, exec_backup, exec_backup_task,
 * compressor_info, storage_info, verify_vzdump_parameters, format_size, format_time);
 * pve-guest-common src/PVE/VZDump/Common.pm command_line, src/PVE/VZDump/Plugin.pm debugmsg;
 * qemu-server src/PVE/VZDump/QemuServer.pm (lock_vm, stop_vm, suspend_vm, resume_vm).
 *
 * Simplified: the archive's size is the sum of the guest's disk sizes (a quarter of it when
 * compressed), every guest takes DURATIONS.vzdump plus the archive's bytes written to the backup
 * storage while its disks are read (bandwidth.ts: shared with the other copies on those
 * storages), `stop` mode stops the VM for the whole backup
 * and starts it again afterwards, and the per-guest log lines are the job-level ones of
 * PVE/VZDump.pm (not the plugins' disk-by-disk progress).
 */

import { hasPriv, isRootUser, requirePriv } from '../auth.ts';
import { copyStep, storageLink } from '../bandwidth.ts';
import { paramError } from '../errors.ts';
import { Flock } from '../flock.ts';
import { powerOff } from '../guest-cloudinit.ts';
import { DRIVE_KEY_RE, isCdrom, parseDrive } from '../qemu-config.ts';
import type { Route } from '../server.ts';
import type { ClusterState } from '../state.ts';
import type { StorageState, Volume } from '../storage.ts';
import { isWorkerDeath, type TaskHandle } from '../tasks.ts';
import { DURATIONS } from './qemu-common.ts';
import { bootVm } from './qemu-power.ts';

const LOCKFILE = '/var/run/vzdump.lock';
const globalLocks = new WeakMap<ClusterState, Map<string, Flock>>();

function globalLock(c: ClusterState, node: string): Flock {
  const m = globalLocks.get(c) ?? new Map<string, Flock>();
  globalLocks.set(c, m);
  const f = m.get(node) ?? new Flock(LOCKFILE, c.clock);
  m.set(node, f);
  return f;
}

/** compressor_info: the archive extension of each `compress` value. */
function compressExt(compress: string | undefined): string | undefined {
  if (!compress || compress === '0') return undefined;
  return { '1': 'lzo', lzo: 'lzo', gzip: 'gz', zstd: 'zst' }[compress];
}

/** strftime in the node's time zone (UTC in the simulator). */
function stamp(epoch: number, dateSep: string, sep: string, timeSep: string): string {
  const d = new Date(epoch * 1000).toISOString();
  return `${d.slice(0, 10).replaceAll('-', dateSep)}${sep}${d.slice(11, 19).replaceAll(':', timeSep)}`;
}

/** PVE/VZDump.pm format_size. */
function formatSize(size: number): string {
  const kb = size / 1024;
  if (kb < 1024) return `${Math.trunc(kb)}KB`;
  const mb = kb / 1024;
  if (mb < 1024) return `${Math.trunc(mb)}MB`;
  const gb = mb / 1024;
  return gb < 1024 ? `${gb.toFixed(2)}GB` : `${(gb / 1024).toFixed(2)}TB`;
}

/** PVE/VZDump.pm format_time. */
function formatTime(seconds: number): string {
  const h = Math.trunc(seconds / 3600);
  const m = Math.trunc((seconds % 3600) / 60);
  const s = seconds % 60;
  return [h, m, s].map((n) => String(n).padStart(2, '0')).join(':');
}

function splitList(v: unknown): number[] {
  return v === undefined
    ? []
    : String(v)
        .split(/[,;\s]+/)
        .filter(Boolean)
        .map(Number);
}

interface Guest {
  vmid: number;
  type: 'qemu' | 'lxc';
  config: Record<string, string>;
  node: string;
}

function guest(c: ClusterState, vmid: number): Guest | undefined {
  const vm = c.vms.get(vmid);
  if (vm) return { vmid, type: 'qemu', config: vm.config, node: vm.node };
  const ct = c.containers.get(vmid);
  return ct ? { vmid, type: 'lxc', config: ct.config, node: ct.node } : undefined;
}

/** The archive's simulated size: the guest's disks (rootfs for a container). */
function guestDataSize(c: ClusterState, g: Guest): number {
  return guestDisks(c, g).reduce((a, v) => a + v.size, 0);
}

/** The guest's disks (what vzdump reads). */
function guestDisks(c: ClusterState, g: Guest): Volume[] {
  const out: Volume[] = [];
  for (const [k, v] of Object.entries(g.config)) {
    if (!DRIVE_KEY_RE.test(k) && k !== 'rootfs' && !/^mp\d+$/.test(k)) continue;
    const d = parseDrive(v);
    if (g.type === 'qemu' && isCdrom(d)) continue;
    const vol = c.volume(g.node, d.file);
    if (vol) out.push(vol);
  }
  return out;
}

interface Job {
  storage: StorageState;
  mode: string;
  compress: string | undefined;
  all: boolean;
}

/** exec_backup_task for one guest; returns whether it succeeded. */
async function backupGuest(c: ClusterState, t: TaskHandle, node: string, job: Job, vmid: number): Promise<boolean> {
  const start = c.clock.epoch();
  const info = (line: string) => t.log(`INFO: ${line}`);
  const g = guest(c, vmid);
  const vm = c.vms.get(vmid);
  let locked = false;
  let restart = false;
  let resume = false;
  let err: string | undefined;
  try {
    if (!g || g.node !== node) throw new Error(`unable to find VM '${vmid}'`);
    if (job.mode === 'stop' && vm?.haManaged)
      throw new Error(
        'Cannot execute a backup with stop mode on a HA managed and enabled Service. Use snapshot mode or disable the Service.',
      );
    const ext = `${g.type === 'qemu' ? '.vma' : '.tar'}${compressExt(job.compress) ? `.${compressExt(job.compress)}` : ''}`;
    const basename = `vzdump-${g.type}-${vmid}-${stamp(start, '_', '-', '_')}`;
    const dumpdir = `${job.storage.path}/dump`;
    info(`Starting Backup of VM ${vmid} (${g.type})`);
    info(`Backup started at ${stamp(c.clock.epoch(), '-', ' ', ':')}`);
    const running = vm ? vm.status === 'running' : c.containers.get(vmid)?.status === 'running';
    info(`status = ${running ? 'running' : 'stopped'}`);
    // lock_vm: set_lock under the config flock (AbstractConfig.pm check_lock's text).
    const unlock = vm ? await vm.flock.acquire(10_000, { signal: t.signal }) : () => {};
    try {
      if (g.config.lock) throw new Error(`${g.type === 'qemu' ? 'VM' : 'CT'} is locked (${g.config.lock})`);
      g.config.lock = 'backup';
      locked = true;
    } finally {
      unlock();
    }
    const mode = running ? job.mode : 'stop';
    info(`backup mode: ${mode}`);
    info('ionice priority: 7');
    if (vm && running && mode === 'stop') {
      info('stopping virtual guest');
      await t.sleep(DURATIONS.shutdown);
      powerOff(c, vm);
      restart = true;
    } else if (vm && running && mode === 'suspend' && !vm.paused) {
      info('suspending guest');
      vm.paused = true;
      resume = true;
    }
    info(`creating vzdump archive '${dumpdir}/${basename}${ext}'`);
    const data = guestDataSize(c, g);
    const size = compressExt(job.compress) ? Math.round(data / 4) : data;
    // The archive is written to the backup storage while the disks are read: a copy sharing
    // both with the other copies there (bandwidth.ts), after the job's fixed part.
    const links = [job.storage, ...guestDisks(c, g).map((v) => c.storage(g.node, v.storage))]
      .filter((s): s is StorageState => s !== undefined)
      .map(storageLink);
    await copyStep(c.clock, t, links, size, DURATIONS.vzdump);
    const volname = `backup/${basename}${ext}`;
    job.storage.volumes.set(volname, {
      volid: `${job.storage.id}:${volname}`,
      storage: job.storage.id,
      volname,
      content: 'backup',
      format: ext.slice(1),
      size,
      vmid,
      ctime: start,
    });
    info(`archive file size: ${formatSize(size)}`);
  } catch (e) {
    err = e instanceof Error ? e.message : String(e);
  }
  // Clean-up: unlock, then resume or restart the guest.
  if (locked && g) {
    if (g.config.lock === 'backup') delete g.config.lock;
    else
      t.warn(
        g.config.lock
          ? `found lock '${g.config.lock}' trying to remove 'backup' lock`
          : "no lock found trying to remove 'backup' lock",
      );
  }
  if (vm && resume) {
    info('resume vm');
    vm.paused = false;
  }
  if (vm && restart && vm.status !== 'running') {
    info('restarting vm');
    await bootVm(c, t, vm);
  }
  const delay = c.clock.epoch() - start;
  if (err !== undefined) {
    t.log(`ERROR: Backup of VM ${vmid} failed - ${err}`);
    info(`Failed at ${stamp(c.clock.epoch(), '-', ' ', ':')}`);
    return false;
  }
  info(`Finished Backup of VM ${vmid} (${formatTime(delay)})`);
  info(`Backup finished at ${stamp(c.clock.epoch(), '-', ' ', ':')}`);
  return true;
}

export const vzdumpRoutes: Route[] = [
  {
    // `user => 'all'`: the handler and the worker check privileges themselves.
    method: 'POST',
    path: '/nodes/{node}/vzdump',
    handler: (ctx) => {
      const { c, auth, params } = ctx;
      const node = String(params.node);
      if (params.stdout) paramError({ stdout: 'option is only allowed on the command line interface.' });
      // assert_param_permission_vzdump / _common (root@pam: always OK).
      if (!isRootUser(auth)) {
        for (const key of ['tmpdir', 'dumpdir', 'script', 'job-id'])
          if (params[key] !== undefined) paramError({ [key]: 'Only root may set this option.' });
        if (['bwlimit', 'ionice', 'performance'].some((k) => params[k] !== undefined))
          requirePriv(c, auth, '/', ['Sys.Modify']);
      }
      // verify_vzdump_parameters.
      if (params.all && params.vmid) paramError({ all: "option conflicts with option 'vmid'" });
      if (params.exclude && params.vmid) paramError({ exclude: "option conflicts with option 'vmid'" });
      if (params.pool && params.vmid) paramError({ pool: "option conflicts with option 'vmid'" });
      const all = Boolean(params.all) || (params.exclude !== undefined && !params.pool);
      if (!(all || params.stop || params.pool) && !params.vmid) paramError({ vmid: 'property is missing' });
      // get_included_guests: the listed guests (unknown ones too, to fail visibly), or every guest
      // of the node (minus `exclude`), or the pool's members.
      const exclude = new Set(splitList(params.exclude));
      let vmids: number[];
      if (params.vmid) vmids = splitList(params.vmid);
      else if (params.pool)
        vmids = [...(c.pools.get(String(params.pool))?.members ?? [])]
          .filter((m) => /^(qemu|lxc)\//.test(m))
          .map((m) => Number(m.split('/')[1]));
      else vmids = [...c.vms.keys(), ...c.containers.keys()].filter((id) => !exclude.has(id));
      const local = vmids.filter((id) => (guest(c, id)?.node ?? node) === node);
      const skiplist = vmids.filter((id) => !local.includes(id));
      if (params.stop) {
        requirePriv(c, auth, `/nodes/${node}`, ['Sys.Modify']);
        for (const t of c.tasks.values())
          if (t.node === node && t.type === 'vzdump' && t.status === 'running') t.abort.abort();
        if (!local.length) return 'OK';
      }
      if (!local.length && !all) return 'OK';
      const sid = params.dumpdir !== undefined ? undefined : String(params.storage ?? 'local');
      if (sid !== undefined) requirePriv(c, auth, `/storage/${sid}`, ['Datastore.AllocateSpace']);
      const cmd = ['vzdump', ...splitList(params.vmid).map(String)];
      for (const k of Object.keys(params).sort())
        if (k !== 'vmid' && k !== 'stdout' && k !== 'job-id' && params[k] !== '') cmd.push(`--${k} ${params[k]}`);
      const taskid = local.length === 1 ? String(local[0]) : '';
      return ctx.tasks.start(node, 'vzdump', taskid, auth, async (t) => {
        // PVE::VZDump->new: the storage must exist and hold backups.
        const s = sid === undefined ? undefined : c.storage(node, sid);
        if (sid === undefined) throw new Error('dumpdir is not supported by the simulator');
        if (!s)
          throw new Error(
            `could not activate storage '${sid}': storage '${sid}' does not exist\ncould not get storage information for '${sid}': storage '${sid}' does not exist`,
          );
        if (!s.content.has('backup') || !s.path)
          throw new Error(
            `could not get storage information for '${sid}': can't use storage '${sid}' for backups - wrong content type`,
          );
        // getlock: one backup job per node.
        const lock = globalLock(c, node);
        if (lock.isHeld) t.log('INFO: trying to get global lock - waiting...');
        const wasHeld = lock.isHeld;
        const release = await lock.acquire(Number(params.lockwait ?? 180) * 60_000, { signal: t.signal }).catch((e) => {
          if (isWorkerDeath(e)) throw e;
          throw new Error(`can't acquire lock '${LOCKFILE}' - got timeout`);
        });
        try {
          if (wasHeld) t.log('INFO: got global lock');
          t.log(`INFO: starting new backup job: ${cmd.join(' ')}`);
          if (skiplist.length) t.log(`INFO: skip external VMs: ${[...skiplist].sort((a, b) => a - b).join(', ')}`);
          const tasklist: number[] = [];
          for (const id of [...local].sort((a, b) => a - b)) {
            if (guest(c, id)) {
              // $rpcenv->check(..., ['VM.Backup'], $opts->{all}): fatal unless `all`.
              if (!hasPriv(c, auth, `/vms/${id}`, 'VM.Backup')) {
                if (all) continue;
                requirePriv(c, auth, `/vms/${id}`, ['VM.Backup']);
              }
            }
            tasklist.push(id);
          }
          const job: Job = {
            storage: s,
            mode: String(params.mode ?? 'snapshot'),
            compress: params.compress as string | undefined,
            all,
          };
          let errors = 0;
          for (const id of tasklist) if (!(await backupGuest(c, t, node, job, id))) errors++;
          t.log(errors ? 'INFO: Backup job finished with errors' : 'INFO: Backup job finished successfully');
          if (errors) throw new Error('job errors');
        } finally {
          release();
        }
      });
    },
  },
];
