/**
 * One boot's cloud-init run, planned when the guest boots (startCloudInit): the drive's
 * instance-id against the one the disk last completed, then the stages and their modules on the
 * user data, with the time each change happens (guest-cloudinit.ts applies them as the clock
 * passes). Per-instance modules run only for a new instance; `bootcmd` every boot.
 *
 * Errors are cloud-init's own (cloud-init at 04eacd06e): a failing runcmd is
 * `('scripts_user', RuntimeError('Runparts: 1 failures (runcmd) in 1 attempted commands'))`
 * (cloudinit/subp.py:350-390 runparts; cloudinit/config/cc_runcmd.py writes one /bin/sh script
 * with util.shellify, cloudinit/util.py:2359-2393, so its exit code is the last command's), a
 * package the archive lacks fails package_update_upgrade_install with PackageInstallerError
 * (cloudinit/distros/__init__.py:233-286, cc_package_update_upgrade_install.py handle), each with
 * the WARNING lines logexc writes (cloudinit/config/modules.py:300-310); a stage's errors are
 * str() of (module, exception) (cloudinit/cmd/main.py:985-1000). Stage timings are plausible,
 * not measured.
 */
import { gunzipSync } from 'node:zlib';
import { parse as parseYaml } from 'yaml';
import { cloudinitDrive } from './cloudinit.ts';
import {
  CLOUD_INIT_VERSION,
  type CloudInitRecord,
  type CloudInitRun,
  guestFile,
  install,
  packageVersion,
  type StageRun,
  startAgent,
} from './guest-cloudinit.ts';
import type { StageName } from './guest-cloudinit-status.ts';
import {
  APT_INSTALL_MS,
  APT_UPDATE_MS,
  APT_UPGRADE_MS,
  archiveVersion,
  type GuestOs,
  inArchive,
  type Run,
  runScript,
} from './guest-shell.ts';
import type { ClusterState, VmState } from './state.ts';

const DATASOURCES: Record<string, string> = {
  nocloud: 'DataSourceNoCloud [seed=/dev/sr0][dsmode=net]',
  configdrive2: 'DataSourceConfigDrive [net,ver=2][source=/dev/sr0]',
  opennebula: 'DataSourceOpenNebula [seed=/dev/sr0]',
};
const MOD = (m: string) =>
  `<module 'cloudinit.config.cc_${m}' from '/usr/lib/python3/dist-packages/cloudinit/config/cc_${m}.py'>`;
const SCRIPTS_DIR = '/var/lib/cloud/instance/scripts';

/** Stage timings in simulated ms from the end of the start (the guest's boot). */
const T = { initLocal: 3120, init: 5240, config: 10_380, final: 12_460, module: 150 };

interface UserData {
  cfg: Record<string, unknown>;
  script?: string;
  warnings: string[];
}

/** cloud-init's user-data handlers: `#cloud-config` YAML, a `#!` script, or nothing it knows. */
function parseUserData(text: string): UserData {
  if (/^#cloud-config\s/.test(text) || text.trim() === '#cloud-config') {
    try {
      const doc = parseYaml(text) as unknown;
      if (doc === null || doc === undefined) return { cfg: {}, warnings: [] };
      if (typeof doc === 'object' && !Array.isArray(doc)) return { cfg: doc as Record<string, unknown>, warnings: [] };
    } catch {
      // handlers/cloud_config.py handle_part: logexc, the part is skipped.
    }
    return { cfg: {}, warnings: ['Failed at merging in cloud config part from part-001'] };
  }
  if (text.startsWith('#!')) return { cfg: {}, script: text, warnings: [] };
  if (!text.trim()) return { cfg: {}, warnings: [] };
  return {
    cfg: {},
    warnings: [
      `Unhandled non-multipart (text/x-not-multipart) userdata: 'b'${JSON.stringify(text.slice(0, 24)).slice(1, -1)}'...'`,
    ],
  };
}

const list = (v: unknown): unknown[] => (Array.isArray(v) ? v : v === undefined || v === null ? [] : [v]);
const bool = (v: unknown): boolean => v === true || v === 'true' || v === 'True' || v === 1;

/** `packages:` entries: names, `[name, version]`, or `{apt: [...], snap: [...]}`. */
function packageNames(v: unknown): string[] {
  const out: string[] = [];
  for (const e of list(v)) {
    if (typeof e === 'string') out.push(e);
    else if (Array.isArray(e) && typeof e[0] === 'string') out.push(e[0]);
    else if (e && typeof e === 'object') for (const l of Object.values(e)) out.push(...packageNames(l));
  }
  return out;
}

/** write_files content per `encoding` (cc_write_files.py canonicalize_extraction). */
function fileContent(f: Record<string, unknown>): Buffer {
  const content = f.content === undefined || f.content === null ? '' : String(f.content);
  const enc = String(f.encoding ?? '').toLowerCase();
  if (['gz', 'gzip'].includes(enc)) return gunzipSync(Buffer.from(content, 'latin1'));
  if (['gz+base64', 'gzip+base64', 'gz+b64', 'gzip+b64'].includes(enc))
    return gunzipSync(Buffer.from(content, 'base64'));
  if (['b64', 'base64'].includes(enc)) return Buffer.from(content, 'base64');
  return Buffer.from(content, 'utf8');
}

function permissions(v: unknown): number {
  if (typeof v === 'number') return v;
  if (typeof v === 'string' && /^(0o?)?[0-7]+$/.test(v)) return Number.parseInt(v.replace(/^0o/, ''), 8);
  return 0o644;
}

/** Start this boot's run (vm_start has just generated the drive; the guest boots now). */
export function startCloudInit(c: ClusterState, vm: VmState): void {
  const t0 = vm.startedAt;
  const clockAt = (ms: number) => t0 + c.clock.scaled(ms);
  const drive = cloudinitDrive(vm) ? vm.ciDrive : undefined;
  const record: CloudInitRecord = {
    users: [],
    sshAuthorizedKeys: [],
    bootcmd: [],
    packages: [],
    writeFiles: [],
    runcmd: [],
  };
  if (!drive) {
    // No datasource: ds-identify disables cloud-init (Ubuntu's policy `notfound=disabled`).
    vm.cloudInit = {
      newInstance: false,
      bootAt: t0,
      doneAt: t0,
      effects: [],
      applied: 0,
      log: [],
      userData: '',
      record,
    };
    return;
  }
  const datasource = DATASOURCES[drive.format] ?? DATASOURCES.nocloud!;
  const run: CloudInitRun = {
    datasource,
    instanceId: drive.instanceId,
    newInstance: vm.guestDisk.instanceId !== drive.instanceId,
    bootAt: t0,
    doneAt: 0,
    effects: [],
    applied: 0,
    log: [],
    userData: drive.userData,
    record,
  };
  let cur = 0;
  const effect = (fn: () => void, ms = cur) => run.effects.push({ at: clockAt(ms), apply: fn });
  const say = (text: string, ms = cur) => run.log.push({ at: clockAt(ms), text });
  const stamp = (ms: number) => {
    const d = new Date(clockAt(ms));
    return d.toUTCString().replace(/GMT$/, '+0000');
  };
  const stages = {} as Record<StageName, StageRun>;
  const begin = (name: StageName, at: number, label: string): StageRun => {
    cur = Math.max(cur, at);
    const s: StageRun = { start: clockAt(cur), end: 0, upStart: cur / 1000, upEnd: 0, errors: [], warnings: [] };
    stages[name] = s;
    say(
      `Cloud-init v. ${CLOUD_INIT_VERSION} running '${label}' at ${stamp(cur)}. Up ${(cur / 1000).toFixed(2)} seconds.\n`,
    );
    return s;
  };
  const end = (s: StageRun) => {
    cur += T.module;
    s.end = clockAt(cur);
    s.upEnd = cur / 1000;
  };
  const warn = (s: StageRun, file: string, msg: string) => {
    s.warnings.push(msg);
    const d = new Date(clockAt(cur)).toISOString();
    say(`${d.slice(0, 10)} ${d.slice(11, 19)},${d.slice(20, 23)} - ${file}[WARNING]: ${msg}\n`);
  };
  const fail = (s: StageRun, module: string, exc: string, file: string, warnings: string[]) => {
    for (const w of warnings) warn(s, file, w);
    warn(s, 'log_util.py', `Running module ${module} (${MOD(module)}) failed`);
    s.errors.push(`('${module}', ${exc})`);
  };

  // What the run's commands see: the guest as of now plus what the run changed before them.
  const files = new Map<string, Buffer | null>();
  const pkgs = new Map<string, string>();
  let pending: Array<() => void> = [];
  let hostname = vm.guestDisk.hostname ?? 'ubuntu';
  const os: GuestOs = {
    hostname: () => hostname,
    readFile: (p) => (files.has(p) ? (files.get(p) ?? undefined) : guestFile(c, vm, p)),
    writeFile: (p, d) => {
      files.set(p, d);
      pending.push(() => vm.agent.files.set(p, d));
    },
    removeFile: (p) => {
      const had = os.readFile(p) !== undefined;
      files.set(p, null);
      pending.push(() => vm.agent.files.delete(p));
      return had;
    },
    packageVersion: (n) => pkgs.get(n) ?? packageVersion(vm, n),
    installPackage: (n) => {
      pkgs.set(n, archiveVersion(n));
      const at = clockAt(cur);
      pending.push(() => install(vm, n, at));
    },
    startService: (u) => {
      const at = clockAt(cur);
      if (u.replace(/\.service$/, '') === 'qemu-guest-agent') pending.push(() => startAgent(vm, at));
    },
    serviceActive: () => true,
  };
  /** Run one shell line at `cur`; its changes happen when it ends. */
  const sh = (line: string, name: string, n: number): Run => {
    const r = runScript(os, line, (p) => `${name}: ${n}: ${p}: not found`);
    cur += r.ms;
    const fns = pending;
    pending = [];
    for (const fn of fns) effect(fn);
    if (r.out || r.err) say(r.out + r.err);
    return r;
  };
  const argvLine = (e: unknown) =>
    Array.isArray(e) ? e.map((a) => `'${String(a).replace(/'/g, "'\\''")}'`).join(' ') : String(e ?? '');

  const ud = parseUserData(drive.userData);
  const cfg = ud.cfg;

  const local = begin('init-local', T.initLocal, 'init-local');
  end(local);

  const init = begin('init', T.init, 'init');
  for (const w of ud.warnings) warn(init, 'user_data.py', w);
  // bootcmd: every boot (cc_bootcmd frequency always), before anything else of the stage.
  record.bootcmd = list(cfg.bootcmd);
  if (record.bootcmd.length) {
    let r: Run | undefined;
    record.bootcmd.forEach((e, i) => {
      if (!r?.exited) r = sh(argvLine(e), '/tmp/bootcmd.sh', i + 2);
    });
    if (r && r.exitcode !== 0)
      fail(
        init,
        'bootcmd',
        `ProcessExecutionError("Unexpected error while running command.\\nCommand: ['/bin/sh', '/tmp/bootcmd.sh']\\nExit code: ${r.exitcode}\\nReason: -\\nStdout: \\nStderr: ")`,
        'cc_bootcmd.py',
        ['Failed to run bootcmd module bootcmd'],
      );
  }
  const writeFiles = (deferred: boolean) => {
    for (const e of list(cfg.write_files)) {
      if (!e || typeof e !== 'object' || typeof (e as { path?: unknown }).path !== 'string') continue;
      const f = e as Record<string, unknown>;
      if (bool(f.defer) !== deferred) continue;
      const path = f.path as string;
      let data = fileContent(f);
      if (bool(f.append)) data = Buffer.concat([os.readFile(path) ?? Buffer.alloc(0), data]);
      const mode = permissions(f.permissions);
      files.set(path, data);
      record.writeFiles.push(path);
      effect(() => {
        vm.agent.files.set(path, data);
        vm.agent.modes.set(path, mode);
      });
    }
  };
  if (run.newInstance) {
    cur += T.module;
    writeFiles(false);
    cur += T.module;
    if (!bool(cfg.preserve_hostname)) {
      const fqdn = typeof cfg.fqdn === 'string' ? cfg.fqdn : undefined;
      const want = typeof cfg.hostname === 'string' ? cfg.hostname : fqdn?.replace(/\..*$/, '');
      if (want) hostname = want.replace(/\..*$/, '');
      record.hostname = hostname;
      if (fqdn) record.fqdn = fqdn;
      const h = hostname;
      effect(() => {
        vm.guestDisk.hostname = h;
      });
    }
    cur += T.module;
    // users_groups: `default` is the distro's user (`ubuntu`), renamed by `user:`.
    const defaultUser =
      typeof cfg.user === 'string' ? cfg.user : ((cfg.user as { name?: string } | undefined)?.name ?? 'ubuntu');
    const users = cfg.users === undefined ? ['default'] : list(cfg.users);
    for (const u of users) {
      if (u === 'default') record.users.push(defaultUser);
      else if (typeof u === 'string')
        record.users.push(
          ...u
            .split(',')
            .map((x) => x.trim())
            .filter(Boolean),
        );
      else if (u && typeof u === 'object' && typeof (u as { name?: unknown }).name === 'string')
        record.users.push((u as { name: string }).name);
    }
    record.sshAuthorizedKeys = list(cfg.ssh_authorized_keys).map(String);
    cur += T.module;
  }
  end(init);

  const config = begin('modules-config', T.config, 'modules:config');
  if (run.newInstance) {
    if (typeof cfg.timezone === 'string') {
      const tz = cfg.timezone;
      record.timezone = tz;
      effect(() => {
        vm.guestDisk.timezone = tz;
      });
    }
    record.runcmd = list(cfg.runcmd);
  }
  end(config);

  const final = begin('modules-final', T.final, 'modules:final');
  if (run.newInstance) {
    const names = packageNames(cfg.packages);
    record.packages = names;
    const update = bool(cfg.package_update) || bool(cfg.apt_update);
    const upgrade = bool(cfg.package_upgrade) || bool(cfg.apt_upgrade);
    if (update || upgrade || names.length) {
      say('Hit:1 http://archive.ubuntu.com/ubuntu jammy InRelease\nReading package lists...\n');
      cur += APT_UPDATE_MS;
    }
    if (upgrade) {
      say(
        'Reading package lists...\nCalculating upgrade...\n0 upgraded, 0 newly installed, 0 to remove and 0 not upgraded.\n',
      );
      cur += APT_UPGRADE_MS;
    }
    const missing = names.filter((n) => !inArchive(n));
    for (const n of names.filter((x) => inArchive(x) && os.packageVersion(x) === undefined)) {
      cur += APT_INSTALL_MS;
      os.installPackage(n);
      say(`Setting up ${n} (${archiveVersion(n)}) ...\n`);
      const fns = pending;
      pending = [];
      for (const fn of fns) effect(fn);
    }
    if (missing.length) {
      const set = `{${[...new Set(missing)]
        .sort()
        .map((m) => `'${m}'`)
        .join(', ')}}`;
      fail(
        final,
        'package_update_upgrade_install',
        `PackageInstallerError("Failed to install the following packages: ${set}. See associated package manager logs for more details.")`,
        'cc_package_update_upgrade_install.py',
        [
          `Failure when attempting to install packages: [${names.map((n) => `'${n}'`).join(', ')}]`,
          '1 failed with exceptions, re-raising the last one',
        ],
      );
    }
    writeFiles(true);
    // scripts_user: the user-data script (part-001), then the runcmd script, as runparts sorts them.
    const failed: string[] = [];
    let attempted = 0;
    if (ud.script) {
      attempted++;
      const r = sh(ud.script, `${SCRIPTS_DIR}/part-001`, 1);
      if (r.exitcode !== 0) failed.push('part-001');
    }
    if (record.runcmd.length) {
      attempted++;
      let r: Run | undefined;
      record.runcmd.forEach((e, i) => {
        if (!r?.exited) r = sh(argvLine(e), `${SCRIPTS_DIR}/runcmd`, i + 2);
      });
      if (r && r.exitcode !== 0) failed.push('runcmd');
    }
    if (failed.length)
      fail(
        final,
        'scripts_user',
        `RuntimeError('Runparts: ${failed.length} failures (${failed.join(',')}) in ${attempted} attempted commands')`,
        'cc_scripts_user.py',
        [`Failed to run module scripts_user (scripts in ${SCRIPTS_DIR})`],
      );
  }
  cur += 500;
  say(
    `Cloud-init v. ${CLOUD_INIT_VERSION} finished at ${stamp(cur)}. Datasource ${datasource}.  Up ${(cur / 1000).toFixed(2)} seconds\n`,
  );
  end(final);
  run.stages = stages;
  run.doneAt = final.end;
  const id = drive.instanceId;
  effect(() => {
    vm.guestDisk.instanceId = id;
  });
  vm.cloudInit = run;
}
