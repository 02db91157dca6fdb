/**
 * VM power and status: `status/current`, start/stop/shutdown/reboot workers, the boot (NIC
 * bridges, DHCP leases, guest interfaces) and `maxdisk`.
 */

import { applyCloudinit, cloudinitDrive } from '../cloudinit.ts';
import { die } from '../errors.ts';
import { powerOff, stopGuest } from '../guest-cloudinit.ts';
import { startCloudInit } from '../guest-cloudinit-run.ts';
import {
  configCpus,
  configMemoryMiB,
  DRIVE_KEY_RE,
  getOpt,
  isCdrom,
  NET_KEY_RE,
  parseDrive,
  parseNic,
} from '../qemu-config.ts';
import { checkCfsQuorum } from '../quorum.ts';
import type { Route } from '../server.ts';
import type { ClusterState, VmState } from '../state.ts';
import { MiB, missingVolumeMessage } from '../storage.ts';
import type { TaskHandle } from '../tasks.ts';
import { agentEnabled } from './qemu-agent.ts';
import { checkLock, checkSkiplock, DURATIONS, loadVm, lockVm, vmPerm } from './qemu-common.ts';

/**
 * Start a VM: runs in qmstart workers (and create's start=1, reboot). `resume`: from a hibernation
 * state (vm_start_nolock `$resume`): the pending section stays pending, and the guest continues
 * where it was (its agent processes and a running agent), as it was when its RAM was saved.
 */
export async function bootVm(c: ClusterState, t: TaskHandle, vm: VmState, resume = false): Promise<void> {
  if (!resume) applyPending(vm);
  startCloudinitDrive(c, t, vm);
  for (const [k, v] of Object.entries(vm.config)) {
    if (!NET_KEY_RE.test(k)) continue;
    const bridge = getOpt(parseNic(v).p, 'bridge');
    if (bridge && !c.nodes.get(vm.node)?.bridges.has(bridge)) throw new Error(`bridge '${bridge}' does not exist`);
  }
  for (const [k, v] of Object.entries(vm.config)) {
    if (!DRIVE_KEY_RE.test(k)) continue;
    const d = parseDrive(v);
    if (d.file.includes(':') && !c.volume(vm.node, d.file) && d.file !== 'none')
      throw new Error(missingVolumeMessage(c.storage(vm.node, d.file.split(':')[0]!), d.file));
  }
  await t.sleep(DURATIONS.start);
  vm.status = 'running';
  vm.startedAt = c.clock.now();
  vm.agentReadyAt = resume ? c.clock.now() : c.clock.now() + c.clock.scaled(DURATIONS.agentBoot);
  vm.guest.interfaces = [];
  // A new boot: no agent processes, file systems not frozen (written files stay on the disk).
  if (!resume) {
    vm.agent.procs.clear();
    vm.agent.frozen = false;
  }
  vm.paused = false;
  vm.cloudInit = undefined;
  const nets = Object.keys(vm.config)
    .filter((k) => NET_KEY_RE.test(k))
    .sort((a, b) => Number(a.slice(3)) - Number(b.slice(3)));
  for (const k of nets) {
    const i = Number(k.slice(3));
    const nic = parseNic(vm.config[k]!);
    const bridge = getOpt(nic.p, 'bridge') ?? '';
    const ipcfg = vm.config[`ipconfig${i}`];
    const staticIp = ipcfg && /(?:^|,)ip=(\d+\.\d+\.\d+\.\d+)\/(\d+)/.exec(ipcfg);
    const mac = (nic.mac ?? '').toLowerCase();
    const entry: VmState['guest']['interfaces'][number] = { name: `ens${18 + i}`, mac };
    if (staticIp) {
      entry.ipv4 = staticIp[1]!;
      entry.prefix = Number(staticIp[2]);
    } else {
      const ip = c.leaseAddress(vm.node, bridge, mac);
      if (ip) {
        entry.ipv4 = ip;
        entry.prefix = c.bridgePrefix(vm.node, bridge);
      }
    }
    const hex = mac.split(':');
    if (hex.length === 6) {
      const first = (Number.parseInt(hex[0]!, 16) ^ 2).toString(16).padStart(2, '0');
      entry.ipv6 = `fe80::${first}${hex[1]}:${hex[2]}ff:fe${hex[3]}:${hex[4]}${hex[5]}`.replace(
        /:0+([0-9a-f])/g,
        ':$1',
      );
    }
    vm.guest.interfaces.push(entry);
  }
  // The guest's cloud-init reads the drive at boot; a resumed guest carries on where it was.
  if (!resume) startCloudInit(c, vm);
}

/**
 * vm_start_nolock regenerates the cloud-init drive before QEMU starts (QemuServer.pm:5602-5611;
 * not for an incoming migration), so a missing `cicustom` snippet fails the start. A drive whose
 * volume is gone is allocated again (commit_cloudinit_disk, Cloudinit.pm:21-70).
 */
function startCloudinitDrive(c: ClusterState, t: TaskHandle, vm: VmState): void {
  const d = cloudinitDrive(vm);
  if (!d) return;
  if (!c.volume(vm.node, d.volid)) {
    const sid = d.volid.slice(0, d.volid.indexOf(':'));
    c.allocVolume(vm.node, sid, vm.vmid, 4 * MiB, 'cloudinit');
  }
  applyCloudinit(c, vm);
  t.log('generating cloud-init ISO');
}

export function applyPending(vm: VmState): void {
  for (const k of vm.pendingDelete) delete vm.config[k];
  Object.assign(vm.config, vm.pending);
  vm.pending = {};
  vm.pendingDelete.clear();
}

/** `maxdisk`: the size of the first disk (not a CD-ROM, EFI or TPM drive) whose volume exists. */
export function vmMaxDisk(c: ClusterState, vm: VmState): number {
  for (const k in vm.config) {
    if (!isDataDriveKey(k)) continue;
    const d = driveVolume(vm.config[k]!);
    if (!d) continue;
    const vol = c.storage(vm.node, d.storage)?.volumes.get(d.volname);
    if (vol?.size) return vol.size;
  }
  return 0;
}

/*
 * vmMaxDisk runs for every VM at each pvestatd tick (src/sim/index.ts), so with thousands of VMs
 * its parsing was the simulator's largest cost (a profile of 10,000 VMs at speed 1000: 39 of its
 * 140 s on the CPU). What it parses is memoized by the config's own strings: a config value is a
 * string that, once set, is never changed in place, so the same string always parses the same way.
 */
const dataDriveKeys = new Map<string, boolean>();
function isDataDriveKey(k: string): boolean {
  let yes = dataDriveKeys.get(k);
  if (yes === undefined) {
    yes = DRIVE_KEY_RE.test(k) && !k.startsWith('efidisk') && !k.startsWith('tpmstate');
    if (dataDriveKeys.size < 10_000) dataDriveKeys.set(k, yes);
  }
  return yes;
}

/** A drive value's volume as storage and volume name, or null for a CD-ROM or a file not on a storage. */
const driveVolumes = new Map<string, { storage: string; volname: string } | null>();
const DRIVE_VOLUMES_MAX = 100_000;
function driveVolume(value: string): { storage: string; volname: string } | null {
  let d = driveVolumes.get(value);
  if (d === undefined) {
    const drive = parseDrive(value);
    const i = drive.file.indexOf(':');
    d = isCdrom(drive) || i < 0 ? null : { storage: drive.file.slice(0, i), volname: drive.file.slice(i + 1) };
    // A bound, not an eviction policy: a full map starts again (the values of the VMs that remain are parsed once more).
    if (driveVolumes.size >= DRIVE_VOLUMES_MAX) driveVolumes.clear();
    driveVolumes.set(value, d);
  }
  return d;
}

export function vmStatus(c: ClusterState, vm: VmState): Record<string, unknown> {
  const mem = configMemoryMiB(vm.config) * MiB;
  const maxdisk = vmMaxDisk(c, vm);
  const running = vm.status === 'running';
  return {
    vmid: vm.vmid,
    name: vm.config.name ?? `VM ${vm.vmid}`,
    status: vm.status,
    // `qm suspend` without todisk leaves QEMU paused: still `running`, qmpstatus `paused`.
    qmpstatus: running && vm.paused ? 'paused' : vm.status,
    cpus: configCpus(vm.config),
    cpu: running ? 0.013 : 0,
    maxmem: mem,
    mem: running ? Math.round(mem * 0.42) : 0,
    maxdisk,
    disk: 0,
    diskread: 0,
    diskwrite: 0,
    netin: running ? 1024 : 0,
    netout: running ? 512 : 0,
    uptime: running ? Math.floor((c.clock.now() - vm.startedAt) / 1000) : 0,
    ha: { managed: vm.haManaged ? 1 : 0 },
    ...(running
      ? { pid: 10000 + vm.vmid, 'running-machine': 'pc-i440fx-9.2+pve1', 'running-qemu': c.profile.qemuVersion }
      : {}),
    ...(agentEnabled(vm) ? { agent: 1 } : {}),
    ...(vm.config.lock ? { lock: vm.config.lock } : {}),
    ...(vm.config.tags ? { tags: vm.config.tags } : {}),
    ...(vm.config.template === '1' ? { template: 1 } : {}),
    ...(c.profile.memhost && running ? { memhost: Math.round(mem * 0.42) } : {}),
  };
}

/**
 * vm_start (QemuServer.pm): a `lock: suspended` (hibernated) VM passes the lock check and resumes
 * from its `vmstate`; a `lock: backup` VM that still runs is resumed in its QEMU instance.
 */
export async function startWorker(c: ClusterState, t: TaskHandle, vm: VmState, skiplock: boolean): Promise<void> {
  const unlock = await lockVm(c, vm, vm.node, 10_000, t.signal);
  try {
    if (vm.config.template === '1') throw new Error("you can't start a vm if it's a template");
    const suspended = vm.config.lock === 'suspended';
    if (vm.config.lock === 'backup' && vm.status === 'running') {
      vm.paused = false; // RunState::vm_resume
      return;
    }
    if (!suspended) checkLock(vm, skiplock);
    const resume = suspended || vm.config.vmstate !== undefined;
    if (vm.status === 'running') throw new Error(`VM ${vm.vmid} already running`);
    if (resume) t.log('Resuming suspended VM');
    await bootVm(c, t, vm, resume);
    if (resume) finishResume(c, t, vm);
  } finally {
    unlock();
  }
}

/**
 * vm_start_nolock's `$resume` end: "Resumed VM, removing state", the state volume freed, `lock`,
 * `vmstate`, `runningmachine`, `runningcpu` and `running-nets-host-mtu` dropped from the config.
 */
function finishResume(c: ClusterState, t: TaskHandle, vm: VmState): void {
  t.log('Resumed VM, removing state');
  if (vm.config.vmstate) c.freeVolume(vm.node, vm.config.vmstate);
  for (const k of ['lock', 'vmstate', 'running-nets-host-mtu', 'runningmachine', 'runningcpu']) delete vm.config[k];
}

export const powerRoutes: Route[] = [
  {
    method: 'GET',
    path: '/nodes/{node}/qemu/{vmid}/status',
    perm: vmPerm('VM.Audit'),
    handler: ({ c, params }) => {
      loadVm(c, String(params.node), Number(params.vmid));
      return ['current', 'reboot', 'reset', 'resume', 'shutdown', 'start', 'stop', 'suspend'].map((subdir) => ({
        subdir,
      }));
    },
  },
  {
    method: 'GET',
    path: '/nodes/{node}/qemu/{vmid}/status/current',
    perm: vmPerm('VM.Audit'),
    handler: ({ c, params }) => vmStatus(c, loadVm(c, String(params.node), Number(params.vmid))),
  },
  ...(['start', 'stop', 'shutdown', 'reboot'] as const).map(
    (action): Route => ({
      method: 'POST',
      path: `/nodes/{node}/qemu/{vmid}/status/${action}`,
      perm: vmPerm('VM.PowerMgmt'),
      handler: (ctx) => {
        const { c, auth, params } = ctx;
        const node = String(params.node);
        const vmid = Number(params.vmid);
        const skiplock = checkSkiplock(auth, params);
        // vm_start checks quorum before it looks at the VM (:3627); stop and shutdown write no config.
        if (action === 'start') checkCfsQuorum(c);
        const vm = loadVm(c, node, vmid);
        // vm_shutdown / vm_reboot: a paused VM would get the ACPI request only once resumed.
        let forceStopPaused = false;
        if ((action === 'shutdown' || action === 'reboot') && vm.status === 'running' && vm.paused) {
          if (action === 'reboot' || !params.forceStop) die('VM is paused - cannot shutdown');
          forceStopPaused = true;
        }
        if (vm.haManaged && (action === 'start' || action === 'stop' || action === 'shutdown')) {
          return ctx.tasks.start(node, action === 'start' ? 'hastart' : 'hastop', String(vmid), auth, async (t) => {
            t.log(`Requesting HA ${action} for VM ${vmid}`);
          });
        }
        const type = { start: 'qmstart', stop: 'qmstop', shutdown: 'qmshutdown', reboot: 'qmreboot' }[action];
        return ctx.tasks.start(node, type, String(vmid), auth, async (t) => {
          if (action === 'start') return startWorker(c, t, vm, skiplock);
          const unlock = await vm.flock.acquire(10_000, { signal: t.signal });
          try {
            checkLock(vm, skiplock);
            if (action === 'reboot') {
              if (vm.status !== 'running') throw new Error(`VM ${vmid} not running`);
              await t.sleep(DURATIONS.shutdown);
              stopGuest(c, vm);
              vm.status = 'stopped';
              await bootVm(c, t, vm);
              return;
            }
            if (vm.status !== 'running') return;
            // (forceStop on a paused VM: the handler's "stop instead of shutdown" warning goes to
            // the API daemon's log, not the task's.)
            await t.sleep(action === 'stop' || forceStopPaused ? DURATIONS.stop : DURATIONS.shutdown);
            powerOff(c, vm);
            applyPending(vm);
          } finally {
            unlock();
          }
        });
      },
    }),
  ),
];
