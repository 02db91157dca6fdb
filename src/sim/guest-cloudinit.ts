/**
 * cloud-init in the simulated guest (an Ubuntu 22.04 cloud image with cloud-init 24.4): the run
 * a boot plans (guest-cloudinit-run.ts) is a timeline of changes with the simulated time each
 * happens; they are applied when the clock passes them (settleGuest), so `cloud-init status`,
 * files, packages and the agent follow the guest's progress deterministically under
 * `clock.advance`. This module holds the run's state, the guest as programs see it (liveOs,
 * guestFile), `cloud-init status` (status.py, see guest-cloudinit-status.ts) and what tests see
 * (cloudInitView).
 *
 * Assumed: installing qemu-guest-agent starts it (its postinst); the guest's host name before
 * cloud-init sets one is the image's `ubuntu`.
 */
import { cloudinitDrive } from './cloudinit.ts';
import {
  formatStatus,
  STAGES,
  type StageName,
  type StageStatus,
  type StatusDetails,
} from './guest-cloudinit-status.ts';
import { archiveVersion, BASE_PACKAGES, type GuestOs, type Run } from './guest-shell.ts';
import type { ClusterState, VmState } from './state.ts';

export const CLOUD_INIT_VERSION = '24.4.1-0ubuntu0~22.04.1';

export interface StageRun {
  /** Clock ms. */
  start: number;
  end: number;
  /** The same as the guest's uptime seconds (cloud-init's util.uptime()). */
  upStart: number;
  upEnd: number;
  errors: string[];
  warnings: string[];
}

/** What this boot's run took from the user data (for tests and `SimCluster.cloudInit`). */
export interface CloudInitRecord {
  hostname?: string;
  fqdn?: string;
  users: string[];
  sshAuthorizedKeys: string[];
  bootcmd: unknown[];
  timezone?: string;
  packages: string[];
  writeFiles: string[];
  runcmd: unknown[];
}

/** One boot's cloud-init run: its timeline and what it found. */
export interface CloudInitRun {
  /** `DataSourceNoCloud [seed=/dev/sr0][dsmode=net]`; undefined: no datasource, cloud-init disabled. */
  datasource?: string;
  instanceId?: string;
  /** Whether the instance was new to the disk (per-instance modules ran). */
  newInstance: boolean;
  bootAt: number;
  stages?: Record<StageName, StageRun>;
  /** Clock ms at which modules-final ends (result.json is written). */
  doneAt: number;
  effects: Array<{ at: number; apply: () => void }>;
  applied: number;
  log: Array<{ at: number; text: string }>;
  userData: string;
  record: CloudInitRecord;
}

/** Whether the guest has a package installed (the image's, the agent's, or installed since). */
export function packageVersion(vm: VmState, name: string): string | undefined {
  if (name === 'qemu-guest-agent' && vm.guestAgent) return archiveVersion(name);
  return BASE_PACKAGES[name] ?? vm.guestDisk.packages.get(name);
}

/** Install a package in the guest at clock time `at` (qemu-guest-agent starts: assumed postinst). */
export function install(vm: VmState, name: string, at: number): void {
  vm.guestDisk.packages.set(name, archiveVersion(name));
  if (name === 'qemu-guest-agent' && !vm.guestAgent) {
    vm.guestAgent = true;
    vm.agentReadyAt = Math.max(vm.agentReadyAt, at);
  }
}

export function startAgent(vm: VmState, at: number): void {
  if (packageVersion(vm, 'qemu-guest-agent') === undefined) return;
  vm.guestAgent = true;
  vm.agentReadyAt = Math.min(vm.agentReadyAt, at);
}

/** The guest's host name: what cloud-init set, else the VM's name (a guest without cloud-init). */
export function guestHostname(vm: VmState): string {
  return vm.guestDisk.hostname ?? vm.config.name ?? `VM${vm.vmid}`;
}

/** The live guest as programs see it (agent exec): changes apply at once. */
export function liveOs(c: ClusterState, vm: VmState): GuestOs {
  return {
    hostname: () => guestHostname(vm),
    readFile: (p) => guestFile(c, vm, p),
    writeFile: (p, d) => void vm.agent.files.set(p, d),
    removeFile: (p) => vm.agent.files.delete(p),
    packageVersion: (n) => packageVersion(vm, n),
    installPackage: (n) => install(vm, n, c.clock.now()),
    startService: (u) =>
      u.replace(/\.service$/, '') === 'qemu-guest-agent' ? startAgent(vm, c.clock.now()) : undefined,
    serviceActive: (u) =>
      u.replace(/\.service$/, '') !== 'qemu-guest-agent' || (vm.guestAgent && c.clock.now() >= vm.agentReadyAt),
    cloudInit: (args) => cloudInitCommand(c, vm, args),
  };
}

/** The files a guest has: written ones, and those the simulator derives. */
export function guestFile(c: ClusterState, vm: VmState, path: string): Buffer | undefined {
  const written = vm.agent.files.get(path);
  if (written) return written;
  const run = vm.cloudInit;
  const now = c.clock.now();
  switch (path) {
    case '/etc/hostname':
      return Buffer.from(`${guestHostname(vm)}\n`);
    case '/etc/os-release':
      return Buffer.from('PRETTY_NAME="Ubuntu 22.04.5 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\nID=ubuntu\n');
    case '/var/log/cloud-init-output.log': {
      const text = vm.guestDisk.outputLog + (run?.log.filter((l) => l.at <= now).map((l) => l.text) ?? []).join('');
      return text ? Buffer.from(text) : undefined;
    }
    case '/var/lib/cloud/instance/user-data.txt':
      return run?.stages && now >= run.stages.init.start ? Buffer.from(run.userData) : undefined;
    case '/var/lib/cloud/data/instance-id':
      return vm.guestDisk.instanceId ? Buffer.from(`${vm.guestDisk.instanceId}\n`) : undefined;
  }
  return undefined;
}

/** Apply the run's changes whose time has come. */
export function settleGuest(c: ClusterState, vm: VmState): void {
  const run = vm.cloudInit;
  if (!run) return;
  const now = c.clock.now();
  while (run.applied < run.effects.length && run.effects[run.applied]!.at <= now) run.effects[run.applied++]!.apply();
}

/** The guest stops: what happened until now stays on its disk; the rest of the run never happens. */
export function stopGuest(c: ClusterState, vm: VmState): void {
  settleGuest(c, vm);
  const run = vm.cloudInit;
  if (run) {
    const now = c.clock.now();
    vm.guestDisk.outputLog += run.log
      .filter((l) => l.at <= now)
      .map((l) => l.text)
      .join('');
  }
  vm.cloudInit = undefined;
}

/**
 * The VM's QEMU process is gone (a stop, a shutdown, a hibernation's quit, a migration's source, a
 * crash): the guest stops, and with it its agent and its addresses.
 */
export function powerOff(c: ClusterState, vm: VmState): void {
  stopGuest(c, vm);
  vm.status = 'stopped';
  vm.paused = false;
  vm.agentReadyAt = 0;
  vm.guest.interfaces = [];
}

/** The status of the run as `cloud-init status` reads it (status.py get_status_details). */
export function statusDetails(c: ClusterState, vm: VmState, now = c.clock.now()): StatusDetails {
  const run = vm.cloudInit;
  const disabled = !run ? !cloudinitDrive(vm) : !run.datasource;
  if (disabled) return { running: 'disabled', bootCode: 'disabled-by-generator', v1: undefined, doneAt: now };
  if (!run?.stages) {
    // A VM loaded from a state file as running: its boot's run is over.
    return { running: 'done', bootCode: 'enabled-by-generator', v1: undefined, doneAt: now };
  }
  const v1: NonNullable<StatusDetails['v1']> = {
    datasource: null,
    stage: null,
    stages: {} as Record<StageName, StageStatus>,
  };
  for (const name of STAGES) {
    const s = run.stages[name];
    const started = now >= s.start;
    const finished = now >= s.end;
    v1.stages[name] = {
      start: started ? s.upStart : null,
      finished: finished ? s.upEnd : null,
      errors: finished ? s.errors : [],
      recoverable: finished && s.warnings.length ? { WARNING: s.warnings } : {},
    };
    if (started && !finished) v1.stage = name;
    if (name === 'init-local' && finished) v1.datasource = run.datasource ?? null;
  }
  if (now < run.stages['init-local'].start)
    return { running: 'not started', bootCode: 'enabled-by-generator', v1: undefined, doneAt: run.doneAt };
  return { running: now >= run.doneAt ? 'done' : 'running', bootCode: 'enabled-by-generator', v1, doneAt: run.doneAt };
}

/** `cloud-init status [--long] [--wait] [--format json|tabular|yaml]`, `cloud-init --version`. */
export function cloudInitCommand(c: ClusterState, vm: VmState, args: string[]): Run {
  if (args[0] === '--version' || args[0] === 'version')
    return { exitcode: 0, out: `/usr/bin/cloud-init ${CLOUD_INIT_VERSION}\n`, err: '', ms: 300 };
  if (args[0] !== 'status')
    return {
      exitcode: 2,
      out: '',
      err: 'usage: cloud-init status [-h] [--format {json,tabular,yaml}] [-l] [-w]\n',
      ms: 300,
    };
  settleGuest(c, vm);
  const wait = args.includes('--wait') || args.includes('-w');
  const long = args.includes('--long') || args.includes('-l');
  const fi = args.findIndex((a) => a === '--format' || a.startsWith('--format='));
  const format = fi < 0 ? 'tabular' : args[fi]!.includes('=') ? args[fi]!.split('=')[1]! : (args[fi + 1] ?? '');
  if (!['json', 'tabular', 'yaml'].includes(format))
    return {
      exitcode: 2,
      out: '',
      err: `usage: cloud-init status [-h] [--format {json,tabular,yaml}] [-l] [-w]\ncloud-init status: error: argument --format: invalid choice: '${format}' (choose from 'json', 'tabular', 'yaml')\n`,
      ms: 300,
    };
  let details = statusDetails(c, vm);
  let waitMs = 0;
  if (wait && (details.running === 'running' || details.running === 'not started')) {
    // Polls every 0.25 s until the run is over; the answer is the status at its end.
    waitMs = Math.max(0, details.doneAt - c.clock.now()) * c.clock.speed;
    details = statusDetails(c, vm, details.doneAt);
  }
  const r = formatStatus(details, format, long);
  const dots = wait && format === 'tabular' && waitMs > 0 ? '.'.repeat(Math.ceil(waitMs / 250)) + '\n' : '';
  return { exitcode: r.exitcode, out: dots + r.out, err: '', ms: waitMs + 300 };
}

/** What a test (or the CLI) sees of a guest's cloud-init: `SimCluster.cloudInit(vmid)`. */
export interface CloudInitView {
  /** `cloud-init status`: not started, running, done, error, disabled. */
  status: string;
  errors: string[];
  /** The drive's instance-id this boot, and whether it was new to the disk (per-instance modules ran). */
  instanceId?: string;
  newInstance: boolean;
  userData: string;
  record: CloudInitRecord;
  /** Packages installed after the image was made. */
  packages: Record<string, string>;
  hostname: string;
  timezone?: string;
  /** Whether the guest runs qemu-guest-agent (from its image or installed). */
  guestAgent: boolean;
}

export function cloudInitView(c: ClusterState, vm: VmState): CloudInitView {
  settleGuest(c, vm);
  const status = JSON.parse(formatStatus(statusDetails(c, vm), 'json', false).out) as {
    status: string;
    errors: string[];
  };
  const run = vm.cloudInit;
  return {
    status: status.status,
    errors: status.errors,
    ...(run?.instanceId ? { instanceId: run.instanceId } : {}),
    newInstance: run?.newInstance ?? false,
    userData: run?.userData ?? '',
    record: run?.record ?? { users: [], sshAuthorizedKeys: [], bootcmd: [], packages: [], writeFiles: [], runcmd: [] },
    packages: Object.fromEntries(vm.guestDisk.packages),
    hostname: guestHostname(vm),
    ...(vm.guestDisk.timezone ? { timezone: vm.guestDisk.timezone } : {}),
    guestAgent: vm.guestAgent,
  };
}
