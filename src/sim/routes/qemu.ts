/** `/nodes/{node}/qemu`: create, clone, config, pending, resize, status, power, destroy, template, agent. */
import { type AuthInfo, hasPriv, isRootUser, requirePriv } from '../auth.ts';
import { die, PveHttpError, paramError } from '../errors.ts';
import {
  CLOUDINIT_KEYS,
  configCpus,
  configMemoryMiB,
  DRIVE_KEY_RE,
  type DriveSpec,
  FAST_PLUG,
  fakeCrypt,
  getOpt,
  isCdrom,
  isCloudinit,
  NET_KEY_RE,
  NEW_DISK_RE,
  normalizeTags,
  parseDrive,
  parseNic,
  printNic,
  privForKey,
  setOpt,
  typedConfig,
  UNUSED_KEY_RE,
} from '../qemu-config.ts';
import type { Route, RouteCtx } from '../server.ts';
import { type ClusterState, formatSize, GiB, MiB, type StorageState, type VmState, type Volume } from '../state.ts';
import type { TaskHandle } from '../tasks.ts';

/** Parameters of create that are not config keys. */
const CREATE_ONLY = new Set([
  'node',
  'vmid',
  'storage',
  'pool',
  'start',
  'archive',
  'force',
  'unique',
  'bwlimit',
  'live-restore',
  'import-working-storage',
  'ha-managed',
]);
/** Parameters of config POST/PUT that are not config keys. */
const UPDATE_ONLY = new Set(['node', 'vmid', 'delete', 'revert', 'digest', 'skiplock', 'background_delay', 'force']);

/** Simulated durations (ms at speed 1). */
export const DURATIONS = {
  alloc: 400,
  cloudinit: 300,
  start: 2500,
  stop: 1200,
  shutdown: 6000,
  destroy: 1500,
  agentBoot: 25_000,
  linkedClone: 800,
  config: 150,
  template: 1500,
};

function copyMs(bytes: number, s: StorageState): number {
  return (bytes / (s.bandwidth * 1e6)) * 1000;
}

/** PVE::Format::render_bytes($value, 1). */
function renderBytes(value: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let u = 0;
  if (value > 1023) {
    u = Math.floor(Math.log(value) / Math.log(1024));
    value /= 1024 ** u;
  }
  return `${value.toFixed(1)} ${units[u]}`;
}

/**
 * A copy through `qemu-img convert -p` (import-from, offline full clones): qemu_img_convert
 * prints `transferred X of Y (P%)` for every percent qemu-img reports, 0.00% to 100.00%.
 */
async function copyWithProgress(t: TaskHandle, size: number, totalMs: number): Promise<void> {
  const line = (pct: number) =>
    t.log(`transferred ${renderBytes(Math.floor((size * pct) / 100))} of ${renderBytes(size)} (${pct.toFixed(2)}%)`);
  line(0);
  for (let step = 1; step <= 4; step++) {
    await t.sleep(totalMs / 4);
    for (let pct = (step - 1) * 25 + 1; pct <= step * 25; pct++) line(pct);
  }
}

export function loadVm(c: ClusterState, node: string, vmid: number): VmState {
  const vm = c.vms.get(vmid);
  if (!vm || vm.node !== node) die(`Configuration file 'nodes/${node}/qemu-server/${vmid}.conf' does not exist`);
  return vm;
}

function checkDigest(c: ClusterState, vm: VmState, params: Record<string, unknown>): void {
  if (params.digest !== undefined && params.digest !== c.digest(vm))
    die('checksum mismatch (file change by other user?)');
}

function checkLock(vm: VmState, skiplock: boolean): void {
  if (vm.config.lock && !skiplock) die(`VM is locked (${vm.config.lock})`);
}

function checkSkiplock(auth: AuthInfo, params: Record<string, unknown>): boolean {
  if (!params.skiplock) return false;
  if (!isRootUser(auth)) paramError({ skiplock: 'Only root may use this option.' });
  return true;
}

/** Per-key config privileges (`check_vm_modify_config_perm`), plus root-only keys. */
function checkConfigPerms(ctx: RouteCtx, vmid: number, keys: string[]): void {
  const { c, auth } = ctx;
  for (const key of keys) {
    if (key === 'lock' || key === 'args' || key === 'affinity' || key === 'hookscript') {
      if (!isRootUser(auth)) die(`only root can set '${key}' config`);
      continue;
    }
    requirePriv(c, auth, `/vms/${vmid}`, [privForKey(key)]);
  }
}

function parseVolid(
  c: ClusterState,
  node: string,
  volid: string,
): { storage: StorageState; volname: string; vtype: string } {
  const i = volid.indexOf(':');
  const sid = volid.slice(0, i);
  const volname = volid.slice(i + 1);
  const storage = c.storage(node, sid);
  if (!storage) die(`storage '${sid}' does not exist`);
  let vtype: string | undefined;
  if (storage.isFileBased) {
    const m = /^(iso|vztmpl|import|snippets|backup)\/[^/]+$/.exec(volname);
    // Dir plugins parse `import/...` from pve-storage 8.2.8 (PVE 8.3) on.
    if (m && (m[1] !== 'import' || c.profile.importContent)) vtype = m[1]!;
    else if (/^\d+\/(vm|base)-\d+-(disk-\d+|cloudinit)(\.\w+)?(\/\d+\/vm-\d+-disk-\d+\.\w+)?$/.test(volname))
      vtype = 'images';
    else die(`unable to parse directory volume name '${volname}'`);
  } else if (/^((base-\d+-disk-\d+)\/)?(vm|base)-\d+-(disk-\d+|cloudinit)$/.test(volname)) vtype = 'images';
  else
    die(
      `unable to parse ${storage.type === 'rbd' ? 'rbd' : storage.type === 'zfspool' ? 'zfs' : 'lvm'} volume name '${volname}'`,
    );
  return { storage, volname, vtype: vtype! };
}

function volumeFromPath(c: ClusterState, node: string, path: string): Volume | undefined {
  for (const s of c.nodes.get(node)?.storages.values() ?? []) {
    if (!s.path) continue;
    for (const v of s.volumes.values()) {
      const sub =
        v.content === 'iso' || v.content === 'vztmpl'
          ? `template/${v.volname}`
          : v.content === 'images'
            ? `images/${v.volname}`
            : v.volname;
      if (`${s.path}/${sub}` === path) return v;
    }
  }
  return undefined;
}

interface DrivePlan {
  key: string;
  kind: 'new' | 'import' | 'cloudinit' | 'keep';
  drive: DriveSpec;
  storage?: StorageState;
  size?: number;
  source?: string;
}

/** Synchronous drive checks of create/update (`$check_storage_access`). */
function planDrives(ctx: RouteCtx, conf: Record<string, string>, defaultStorage?: string): DrivePlan[] {
  const { c, auth, params } = ctx;
  const node = String(params.node);
  const plans: DrivePlan[] = [];
  for (const [key, value] of Object.entries(conf)) {
    if (!DRIVE_KEY_RE.test(key)) continue;
    const drive = parseDrive(value);
    const file = drive.file;
    if (isCdrom(drive) && (file === 'none' || file === 'cdrom')) {
      plans.push({ key, kind: 'keep', drive });
      continue;
    }
    const ci = /^([^:\s]+):cloudinit$/.exec(file);
    if (ci) {
      const s = c.storage(node, ci[1]!);
      if (!s) die(`storage '${ci[1]}' does not exist`);
      requirePriv(c, auth, `/storage/${s.id}`, ['Datastore.AllocateSpace']);
      if (!s.content.has('images')) paramError({ storage: `storage '${s.id}' does not support vm images` });
      plans.push({ key, kind: 'cloudinit', drive, storage: s });
      continue;
    }
    const m = NEW_DISK_RE.exec(file);
    if (m) {
      const sid = m[2] ?? defaultStorage;
      if (!sid) paramError({ [key]: 'missing storage ID for new volume' });
      const s = c.storage(node, sid);
      if (!s) die(`storage '${sid}' does not exist`);
      requirePriv(c, auth, `/storage/${sid}`, ['Datastore.AllocateSpace']);
      if (!s.content.has('images')) paramError({ storage: `storage '${sid}' does not support vm images` });
      const src = getOpt(drive.p, 'import-from');
      if (src !== undefined) {
        // $check_storage_access (source type, permissions) runs before $check_drive_param (syntax).
        if (src.startsWith('/')) {
          if (!isRootUser(auth)) die('Only root can pass arbitrary filesystem paths.');
        } else {
          const { storage: ss, vtype } = parseVolid(c, node, src);
          const allowed = vtype === 'images' || (vtype === 'import' && c.profile.importContent);
          // qemu-server 8.2.7 (PVE 8.3) reworded this when it accepted `import` volumes.
          if (!allowed)
            paramError({
              [key]: `${src} has wrong type '${vtype}' - ${c.profile.importContent ? "needs to be 'images' or 'import'" : 'not an image'}`,
            });
          const srcVmid = /(?:^|\/)(?:vm|base)-(\d+)-/.exec(src)?.[1];
          if (srcVmid) requirePriv(c, auth, `/vms/${srcVmid}`, ['VM.Clone']);
          else requirePriv(c, auth, `/storage/${ss.id}`, ['Datastore.Audit', 'Datastore.AllocateSpace'], { any: true });
        }
        if (Number(m[3]) !== 0)
          paramError({ [key]: "'import-from' requires special syntax - use <storage ID>:0,import-from=<source>" });
        plans.push({ key, kind: 'import', drive, storage: s, source: src });
      } else {
        plans.push({ key, kind: 'new', drive, storage: s, size: Math.round(Number(m[3]) * GiB) });
      }
      continue;
    }
    if (file.startsWith('/')) {
      if (!isRootUser(auth)) die('Only root can pass arbitrary filesystem paths.');
      plans.push({ key, kind: 'keep', drive });
      continue;
    }
    const { storage, vtype } = parseVolid(c, node, file);
    if (vtype !== 'images' && vtype !== 'iso') paramError({ [key]: "content type needs to be 'images' or 'iso'" });
    if (!c.volume(node, file)) die(`volume '${file}' does not exist`);
    if (vtype === 'iso' && c.profile.isoNeedsCdrom && !isCdrom(drive)) {
      paramError({ [key]: "explicit 'media=cdrom' is required for iso images" });
    }
    requirePriv(c, auth, `/storage/${storage.id}`, ['Datastore.AllocateSpace', 'Datastore.Audit'], { any: true });
    plans.push({ key, kind: 'keep', drive });
  }
  return plans;
}

function printDrive(volid: string, drive: DriveSpec, size?: number): string {
  const opts = drive.p.opts.filter(
    ([k]) => k !== 'import-from' && k !== 'file' && (size === undefined || k !== 'size'),
  );
  if (size !== undefined) opts.push(['size', formatSize(size)]);
  opts.sort(([a], [b]) => a.localeCompare(b));
  return [volid, ...opts.map(([k, v]) => `${k}=${v}`)].join(',');
}

/** Allocate/import what the plans ask for, inside a worker. Returns key -> config value. */
async function executeDrives(
  c: ClusterState,
  t: TaskHandle,
  node: string,
  vmid: number,
  plans: DrivePlan[],
  created: Volume[],
): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const p of plans) {
    if (p.kind === 'keep') {
      out[p.key] = printDrive(p.drive.file, p.drive);
      continue;
    }
    const s = p.storage!;
    if (p.kind === 'cloudinit') {
      await t.sleep(DURATIONS.cloudinit);
      const v = c.allocVolume(node, s.id, vmid, 4 * MiB, 'cloudinit');
      created.push(v);
      t.log(`${s.type === 'lvmthin' ? '  Logical volume "' + v.volname + '" created.' : `Formatting '${v.volname}'`}`);
      out[p.key] = `${v.volid},media=cdrom`;
      continue;
    }
    if (p.kind === 'new') {
      await t.sleep(DURATIONS.alloc);
      const v = c.allocVolume(node, s.id, vmid, p.size!, 'disk');
      created.push(v);
      if (s.type === 'lvmthin' || s.type === 'lvm') t.log(`  Logical volume "${v.volname}" created.`);
      else t.log(`Formatting '${s.path ?? s.id}/images/${v.volname}', fmt=${v.format} size=${v.size}`);
      out[p.key] = printDrive(v.volid, p.drive, v.size);
      continue;
    }
    // import-from
    const src = p.source!;
    const source = src.startsWith('/') ? volumeFromPath(c, node, src) : c.volume(node, src);
    if (!source)
      throw new Error(
        src.startsWith('/') ? `unable to import '${src}': No such file or directory` : `volume '${src}' does not exist`,
      );
    const v = c.allocVolume(node, s.id, vmid, source.size, 'disk');
    created.push(v);
    t.log(`importing disk '${src}' to VM ${vmid} ...`);
    if (s.type === 'lvmthin' || s.type === 'lvm') t.log(`  Logical volume "${v.volname}" created.`);
    await copyWithProgress(t, source.size, copyMs(source.size, s));
    t.log(`Successfully imported disk as '${p.key}:${v.volid}'`);
    out[p.key] = printDrive(v.volid, p.drive, v.size);
  }
  return out;
}

function configKeys(params: Record<string, unknown>, skip: Set<string>): Record<string, string> {
  const conf: Record<string, string> = {};
  for (const [k, v] of Object.entries(params)) if (!skip.has(k) && v !== undefined) conf[k] = String(v);
  return conf;
}

/** Non-drive config values as qemu-server stores them (`update`: config POST/PUT, else create). */
function normalizeValue(c: ClusterState, key: string, value: string, update = false): string {
  if (NET_KEY_RE.test(key)) {
    const nic = parseNic(value);
    nic.mac ??= c.generateMac();
    return printNic(nic);
  }
  if (key === 'tags')
    return (update ? c.profile.updateNormalizesTags : c.profile.createNormalizesTags) ? normalizeTags(value) : value;
  if (key === 'cipassword') return fakeCrypt(value, c.rng.hex(16));
  return value;
}

function checkBridges(ctx: RouteCtx, conf: Record<string, string>): void {
  if (!ctx.c.profile.proxmoxOui) return; // check_bridge_access exists from PVE 8
  for (const [k, v] of Object.entries(conf)) {
    if (!NET_KEY_RE.test(k)) continue;
    const { p } = parseNic(v);
    const bridge = getOpt(p, 'bridge');
    if (bridge && !isRootUser(ctx.auth)) {
      const tag = getOpt(p, 'tag');
      const path = `/sdn/zones/localnetwork/${bridge}${tag ? `/${tag}` : ''}`;
      if (
        !hasPriv(ctx.c, ctx.auth, path, 'SDN.Use') &&
        !hasPriv(ctx.c, ctx.auth, `/sdn/zones/localnetwork/${bridge}`, 'SDN.Use')
      ) {
        throw new PveHttpError(403, `Permission check failed (/sdn/zones/localnetwork/${bridge}, SDN.Use)`);
      }
    }
  }
}

function freeVmVolumes(c: ClusterState, vm: VmState, unreferenced: boolean): string[] {
  const freed: string[] = [];
  for (const [k, v] of Object.entries(vm.config)) {
    if (!DRIVE_KEY_RE.test(k) && !UNUSED_KEY_RE.test(k)) continue;
    const d = parseDrive(v);
    if (isCdrom(d) && !isCloudinit(d)) continue;
    if (c.volume(vm.node, d.file)) {
      c.freeVolume(vm.node, d.file);
      freed.push(d.file);
    }
  }
  if (unreferenced) {
    for (const s of c.nodes.get(vm.node)?.storages.values() ?? []) {
      for (const v of [...s.volumes.values()]) {
        if (v.vmid === vm.vmid && v.content === 'images') {
          s.volumes.delete(v.volname);
          freed.push(v.volid);
        }
      }
    }
  }
  return freed;
}

/** Start a VM: runs in qmstart workers (and create's start=1, reboot). */
async function bootVm(c: ClusterState, t: TaskHandle, vm: VmState): Promise<void> {
  applyPending(vm);
  for (const [k, v] of Object.entries(vm.config)) {
    if (!NET_KEY_RE.test(k)) continue;
    const bridge = getOpt(parseNic(v).p, 'bridge');
    if (bridge && !c.nodes.get(vm.node)?.bridges.has(bridge)) throw new Error(`bridge '${bridge}' does not exist`);
  }
  for (const [k, v] of Object.entries(vm.config)) {
    if (!DRIVE_KEY_RE.test(k)) continue;
    const d = parseDrive(v);
    if (d.file.includes(':') && !c.volume(vm.node, d.file) && d.file !== 'none')
      throw new Error(`volume '${d.file}' does not exist`);
  }
  await t.sleep(DURATIONS.start);
  vm.status = 'running';
  vm.startedAt = c.clock.now();
  vm.agentReadyAt = c.clock.now() + c.clock.scaled(DURATIONS.agentBoot);
  vm.guest.interfaces = [];
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
}

function applyPending(vm: VmState): void {
  for (const k of vm.pendingDelete) delete vm.config[k];
  Object.assign(vm.config, vm.pending);
  vm.pending = {};
  vm.pendingDelete.clear();
}

/** `maxdisk`: the size of the first disk (not a CD-ROM, EFI or TPM drive) whose volume exists. */
export function vmMaxDisk(c: ClusterState, vm: VmState): number {
  for (const [k, v] of Object.entries(vm.config)) {
    if (!DRIVE_KEY_RE.test(k) || k.startsWith('efidisk') || k.startsWith('tpmstate')) continue;
    const d = parseDrive(v);
    if (isCdrom(d)) continue;
    const vol = c.volume(vm.node, d.file);
    if (vol?.size) return vol.size;
  }
  return 0;
}

function vmStatus(c: ClusterState, vm: VmState): Record<string, unknown> {
  const mem = configMemoryMiB(vm.config) * MiB;
  const maxdisk = vmMaxDisk(c, vm);
  const running = vm.status === 'running';
  return {
    vmid: vm.vmid,
    name: vm.config.name ?? `VM ${vm.vmid}`,
    status: vm.status,
    qmpstatus: vm.status,
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

/** A route's `permissions`: `check => ['perm', '/vms/{vmid}', [priv]]`. */
function vmPerm(priv: string | ((ctx: RouteCtx) => string)): (ctx: RouteCtx) => void {
  return (ctx) =>
    requirePriv(ctx.c, ctx.auth, `/vms/${ctx.params.vmid}`, [typeof priv === 'string' ? priv : priv(ctx)]);
}

/** The guest agent's privilege: VM.GuestAgent.Audit from PVE 9, VM.Monitor before. */
const agentPriv = (ctx: RouteCtx) => (ctx.c.profile.guestAgentPrivs ? 'VM.GuestAgent.Audit' : 'VM.Monitor');

/** A `pool` parameter names an existing pool (create, clone). */
function checkPoolExists(c: ClusterState, pool: string | undefined): void {
  if (pool !== undefined && !c.pools.has(pool))
    throw new PveHttpError(403, `Permission check failed (pool '${pool}' does not exist)`);
}

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
    const unlock = await vm.flock.acquire(10_000);
    try {
      checkDigest(c, vm, params);
      // Only skiplock (root@pam) passes a lock, `delete=lock` included.
      checkLock(vm, skiplock);
      const running = vm.status === 'running';
      const created: Volume[] = [];
      for (const k of revert) {
        delete vm.pending[k];
        vm.pendingDelete.delete(k);
      }
      for (const k of del) {
        if (!(k in vm.config) && !(k in vm.pending)) {
          t?.warn(`cannot delete '${k}' - not set in current configuration!`);
          continue;
        }
        const hot = !running || FAST_PLUG.has(k) || NET_KEY_RE.test(k) || UNUSED_KEY_RE.test(k) || k === 'lock';
        if (!hot) {
          vm.pendingDelete.add(k);
          continue;
        }
        const old = vm.config[k];
        delete vm.config[k];
        delete vm.pending[k];
        if (old && UNUSED_KEY_RE.test(k)) c.freeVolume(vm.node, parseDrive(old).file);
        else if (old && DRIVE_KEY_RE.test(k)) {
          const d = parseDrive(old);
          if (isCloudinit(d)) c.freeVolume(vm.node, d.file);
          else if (!isCdrom(d) && c.volume(vm.node, d.file)) {
            let i = 0;
            while (vm.config[`unused${i}`]) i++;
            vm.config[`unused${i}`] = d.file;
          }
        }
      }
      const drives = await executeDrives(c, t ?? syncHandle(c), node, vmid, plans, created);
      for (const [k, raw] of Object.entries(set)) {
        const value = drives[k] ?? (DRIVE_KEY_RE.test(k) ? raw : normalizeValue(c, k, raw, true));
        const live =
          !running ||
          FAST_PLUG.has(k) ||
          (NET_KEY_RE.test(k) && sameModel(vm.config[k], value)) ||
          (DRIVE_KEY_RE.test(k) && k in drives);
        if (live && !(running && CLOUDINIT_KEYS.test(k))) {
          vm.config[k] = value;
          delete vm.pending[k];
        } else {
          vm.pending[k] = value;
        }
      }
      // PVE::AbstractConfig::cleanup_pending: a pending value equal to the current one is dropped.
      for (const [k, v] of Object.entries(vm.pending)) if (vm.config[k] === v) delete vm.pending[k];
      for (const k of [...vm.pendingDelete]) if (!(k in vm.config)) vm.pendingDelete.delete(k);
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

/** A `pve-configid-list` parameter (`delete`, `revert`) as a list of keys. */
function configIdList(value: unknown): string[] {
  return value
    ? String(value)
        .split(/[,;\s]+/)
        .filter(Boolean)
    : [];
}

function sameModel(oldValue: string | undefined, newValue: string): boolean {
  if (!oldValue) return true;
  return parseNic(oldValue).model === parseNic(newValue).model;
}

function syncHandle(c: ClusterState): TaskHandle {
  return {
    upid: '',
    signal: new AbortController().signal,
    log: () => {},
    warn: () => {},
    sleep: (ms) => c.clock.sleep(Math.min(ms, 50)),
  };
}

export const qemuRoutes: Route[] = [
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
    method: 'POST',
    path: '/nodes/{node}/qemu',
    handler: async (ctx) => {
      const { c, auth, params } = ctx;
      const node = String(params.node);
      const vmid = Number(params.vmid);
      if (params.archive !== undefined) die('restore from backup archives is not supported by the simulator');
      const pool = params.pool as string | undefined;
      checkPoolExists(c, pool);
      if (pool !== undefined) requirePriv(c, auth, `/pool/${pool}`, ['VM.Allocate'], { bare: true });
      else requirePriv(c, auth, `/vms/${vmid}`, ['VM.Allocate'], { bare: true });
      const conf = configKeys(params, CREATE_ONLY);
      checkConfigPerms(ctx, vmid, Object.keys(conf));
      checkBridges(ctx, conf);
      const plans = planDrives(ctx, conf, params.storage as string | undefined);
      const existing = c.vms.get(vmid);
      if (existing) die(`unable to create VM ${vmid} - VM ${vmid} already exists on node '${existing.node}'`);
      // create_and_lock_config: the VM exists from here on, locked 'create'.
      const vm = c.newVm(vmid, node, { lock: 'create' });
      const unlock = await vm.flock.acquire(5000);
      const start = Boolean(params.start);
      return ctx.tasks.start(
        node,
        'qmcreate',
        String(vmid),
        auth,
        async (t) => {
          const created: Volume[] = [];
          try {
            const drives = await executeDrives(c, t, node, vmid, plans, created);
            const final: Record<string, string> = {};
            for (const [k, v] of Object.entries(conf))
              final[k] = drives[k] ?? (DRIVE_KEY_RE.test(k) ? v : normalizeValue(c, k, v));
            final.smbios1 ??= `uuid=${c.rng.uuid()}`;
            final.vmgenid ??= c.rng.uuid();
            final.meta = `creation-qemu=${c.profile.qemuVersion},ctime=${c.clock.epoch()}`;
            if (pool) c.pools.get(pool)?.members.add(`qemu/${vmid}`);
            vm.config = final;
            if (params['ha-managed']) {
              // `ha-manager add vm:<vmid> --state stopped|started` (qemu-server 9.0.24).
              t.log('Add as HA resource');
              vm.haManaged = true;
            }
          } catch (e) {
            for (const v of created) c.freeVolume(node, v.volid);
            c.vms.delete(vmid);
            const msg = e instanceof Error ? e.message : String(e);
            throw new Error(`unable to create VM ${vmid} - ${msg}`);
          } finally {
            unlock();
          }
        },
        (ok, ran) => {
          if (!ran) {
            // Failed (fault) before the worker ran: its error path would have removed the config.
            if (c.vms.get(vmid) === vm) c.vms.delete(vmid);
            unlock();
            return;
          }
          if (ok && start) {
            ctx.tasks.start(node, 'qmstart', String(vmid), auth, (t) => startWorker(c, t, vm, false));
          }
        },
      );
    },
  },
  {
    method: 'GET',
    path: '/nodes/{node}/qemu/{vmid}',
    perm: vmPerm('VM.Audit'),
    handler: ({ c, params }) => {
      loadVm(c, String(params.node), Number(params.vmid));
      return ['agent', 'clone', 'config', 'pending', 'resize', 'status', 'template'].map((subdir) => ({ subdir }));
    },
  },
  {
    method: 'POST',
    path: '/nodes/{node}/qemu/{vmid}/clone',
    perm: vmPerm('VM.Clone'),
    handler: async (ctx) => {
      const { c, auth, params } = ctx;
      const node = String(params.node);
      const vmid = Number(params.vmid);
      const newid = Number(params.newid);
      const pool = params.pool as string | undefined;
      checkPoolExists(c, pool);
      requirePriv(c, auth, pool ? `/pool/${pool}` : `/vms/${newid}`, ['VM.Allocate']);
      const target = (params.target as string | undefined) ?? node;
      if (!c.nodes.has(target)) die(`no such node '${target}'`);
      const src = loadVm(c, node, vmid);
      const isTemplate = src.config.template === '1';
      const full = params.full === undefined ? !isTemplate : Boolean(params.full);
      if (!full && params.storage !== undefined) die("parameter 'storage' not allowed for linked clones");
      if (!full && params.format !== undefined) die("parameter 'format' not allowed for linked clones");
      const storageId = params.storage as string | undefined;
      if (storageId !== undefined) {
        const s = c.storage(target, storageId);
        if (!s) die(`storage '${storageId}' does not exist`);
        requirePriv(c, auth, `/storage/${storageId}`, ['Datastore.AllocateSpace']);
        if (!s.content.has('images')) die(`storage '${storageId}' does not support vm images`);
      }
      // lock_config_full($vmid, 1, ...): one second to get the source's flock, held by the worker.
      const unlockSrc = await src.flock.acquire(1000);
      let handedOver = false;
      try {
        checkLock(src, false);
        if (c.vms.has(newid)) die(`unable to create VM ${newid}: config file already exists`);
        const disks: Array<{ key: string; drive: DriveSpec; vol: Volume }> = [];
        for (const [k, v] of Object.entries(src.config)) {
          if (!DRIVE_KEY_RE.test(k)) continue;
          const d = parseDrive(v);
          if (isCdrom(d) && !isCloudinit(d)) continue;
          const vol = c.volume(node, d.file);
          if (!vol) continue;
          if (!full && !isCloudinit(d) && !vol.volname.includes('base-')) {
            die(
              c.profile.proxmoxOui
                ? `Linked clone feature is not supported for '${vol.volid}' (${k})`
                : `Linked clone feature is not supported for drive '${k}'`,
            );
          }
          if (target !== node && !c.storage(target, vol.storage)?.shared && !storageId) {
            die(`can't clone VM to node '${target}' (VM uses local storage)`);
          }
          disks.push({ key: k, drive: d, vol });
        }
        const newVm = c.newVm(newid, target, { lock: 'clone' });
        const unlockNew = await newVm.flock.acquire(1000);
        handedOver = true;
        return ctx.tasks.start(
          node,
          'qmclone',
          String(vmid),
          auth,
          async (t) => {
            const created: Volume[] = [];
            try {
              const conf: Record<string, string> = {};
              for (const [k, v] of Object.entries(src.config)) {
                if (k === 'template' || k === 'lock' || UNUSED_KEY_RE.test(k)) continue;
                conf[k] = v;
              }
              for (const d of disks) {
                // clone_disk: one line per drive; cloud-init drives are always copied in full.
                t.log(
                  `create ${full || isCloudinit(d.drive) ? 'full' : 'linked'} clone of drive ${d.key} (${d.vol.volid})`,
                );
                const targetStorage = storageId ?? d.vol.storage;
                const ts = c.storage(target, targetStorage)!;
                let nv: Volume;
                if (isCloudinit(d.drive)) {
                  nv = c.allocVolume(target, ts.id, newid, 4 * MiB, 'cloudinit');
                  created.push(nv);
                  conf[d.key] = `${nv.volid},media=cdrom`;
                  continue;
                }
                if (full) {
                  nv = c.allocVolume(target, ts.id, newid, d.vol.size, 'disk');
                  created.push(nv);
                  await copyWithProgress(t, d.vol.size, copyMs(d.vol.size, ts));
                } else {
                  await t.sleep(DURATIONS.linkedClone);
                  nv = c.allocVolume(target, ts.id, newid, d.vol.size, 'disk', d.vol);
                  created.push(nv);
                }
                conf[d.key] = printDrive(nv.volid, d.drive, nv.size);
              }
              for (const [k, v] of Object.entries(conf)) {
                if (NET_KEY_RE.test(k)) {
                  const nic = parseNic(v);
                  nic.mac = c.generateMac();
                  conf[k] = printNic(nic);
                }
              }
              conf.name = params.name !== undefined ? String(params.name) : `Copy-of-VM-${src.config.name ?? vmid}`;
              if (params.description !== undefined) conf.description = String(params.description);
              conf.smbios1 = `uuid=${c.rng.uuid()}`;
              conf.vmgenid = c.rng.uuid();
              if (pool) c.pools.get(pool)?.members.add(`qemu/${newid}`);
              newVm.config = conf;
            } catch (e) {
              for (const v of created) c.freeVolume(target, v.volid);
              c.vms.delete(newid);
              throw e;
            } finally {
              unlockNew();
              unlockSrc();
            }
          },
          (_ok, ran) => {
            if (ran) return;
            if (c.vms.get(newid) === newVm) c.vms.delete(newid);
            unlockNew();
            unlockSrc();
          },
        );
      } finally {
        if (!handedOver) unlockSrc();
      }
    },
  },
  {
    method: 'GET',
    path: '/nodes/{node}/qemu/{vmid}/config',
    perm: vmPerm('VM.Audit'),
    handler: ({ c, params }) => {
      const vm = loadVm(c, String(params.node), Number(params.vmid));
      if (params.snapshot !== undefined) die(`snapshot '${params.snapshot}' does not exist`);
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
      const vm = loadVm(c, node, vmid);
      const disk = String(params.disk);
      const sizeArg = String(params.size);
      const work = async (t: TaskHandle | undefined): Promise<void> => {
        const unlock = await vm.flock.acquire(10_000);
        try {
          checkDigest(c, vm, params);
          checkLock(vm, skiplock);
          const value = vm.config[disk];
          if (!value) throw new Error(`disk '${disk}' does not exist`);
          const d = parseDrive(value);
          if (isCdrom(d)) throw new Error("you can't resize a cdrom");
          const vol = c.volume(node, d.file);
          if (!vol) throw new Error(`volume '${d.file}' does not exist`);
          const m = /^(\+?)(\d+(?:\.\d+)?)([KMGT]?)$/.exec(sizeArg)!;
          const unit = { '': 1, K: 1024, M: MiB, G: GiB, T: 1024 * GiB }[m[3] as '' | 'K' | 'M' | 'G' | 'T'];
          const amount = Math.round(Number(m[2]) * unit);
          const newSize = m[1] ? vol.size + amount : amount;
          if (newSize < vol.size) throw new Error('shrinking disks is not supported');
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
          setOpt(d.p, 'size', formatSize(newSize));
          vm.config[disk] = printDrive(vol.volid, d, newSize);
          if (t) await t.sleep(DURATIONS.config);
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
        const vm = loadVm(c, node, vmid);
        if (vm.haManaged && (action === 'start' || action === 'stop' || action === 'shutdown')) {
          return ctx.tasks.start(node, action === 'start' ? 'hastart' : 'hastop', String(vmid), auth, async (t) => {
            t.log(`Requesting HA ${action} for VM ${vmid}`);
          });
        }
        const type = { start: 'qmstart', stop: 'qmstop', shutdown: 'qmshutdown', reboot: 'qmreboot' }[action];
        return ctx.tasks.start(node, type, String(vmid), auth, async (t) => {
          if (action === 'start') return startWorker(c, t, vm, skiplock);
          const unlock = await vm.flock.acquire(10_000);
          try {
            checkLock(vm, skiplock);
            if (action === 'reboot') {
              if (vm.status !== 'running') throw new Error(`VM ${vmid} not running`);
              await t.sleep(DURATIONS.shutdown);
              vm.status = 'stopped';
              await bootVm(c, t, vm);
              return;
            }
            if (vm.status !== 'running') return;
            await t.sleep(action === 'stop' ? DURATIONS.stop : DURATIONS.shutdown);
            vm.status = 'stopped';
            vm.agentReadyAt = 0;
            vm.guest.interfaces = [];
            applyPending(vm);
          } finally {
            unlock();
          }
        });
      },
    }),
  ),
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
        const unlock = await vm.flock.acquire(10_000);
        try {
          checkLock(vm, skiplock);
          if (vm.status === 'running') throw new Error(`VM ${vmid} is running - destroy failed`);
          await t.sleep(DURATIONS.destroy);
          for (const volid of freeVmVolumes(c, vm, Boolean(params['destroy-unreferenced-disks']))) {
            t.log(`  Logical volume "${volid.split(':')[1]}" successfully removed.`);
          }
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
        if (vm.config.template === '1') die("you can't convert a template to a template");
        if (vm.status === 'running') die("you can't convert a VM to template if VM is running");
        handed = true;
        return ctx.tasks.start(
          node,
          'qmtemplate',
          String(vmid),
          auth,
          async (t) => {
            try {
              await t.sleep(DURATIONS.template);
              for (const [k, v] of Object.entries(vm.config)) {
                if (!DRIVE_KEY_RE.test(k)) continue;
                const d = parseDrive(v);
                if (isCdrom(d) || isCloudinit(d)) continue;
                if (params.disk !== undefined && params.disk !== k) continue;
                const vol = c.volume(node, d.file);
                if (!vol) continue;
                const s = c.storage(node, vol.storage)!;
                s.volumes.delete(vol.volname);
                vol.volname = vol.volname.replace(`vm-${vmid}-disk-`, `base-${vmid}-disk-`);
                vol.volid = `${s.id}:${vol.volname}`;
                s.volumes.set(vol.volname, vol);
                vm.config[k] = printDrive(vol.volid, d, vol.size);
                t.log(`  Renamed "vm-${vmid}-${k}" to "${vol.volname}"`);
              }
              vm.config.template = '1';
            } finally {
              unlock();
            }
          },
          (_ok, ran) => {
            if (!ran) unlock();
          },
        );
      } finally {
        if (!handed) unlock();
      }
    },
  },
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

function agentEnabled(vm: VmState): boolean {
  return vm.config.agent !== undefined && /^(1|enabled=1)/.test(vm.config.agent);
}

function assertAgent(c: ClusterState, vm: VmState): void {
  if (!agentEnabled(vm)) die('No QEMU guest agent configured');
  if (vm.status !== 'running') die(`VM ${vm.vmid} is not running`);
  if (c.clock.now() < vm.agentReadyAt) die('QEMU guest agent is not running');
}

async function startWorker(c: ClusterState, t: TaskHandle, vm: VmState, skiplock: boolean): Promise<void> {
  const unlock = await vm.flock.acquire(10_000);
  try {
    if (vm.config.template === '1') throw new Error("you can't start a vm if it's a template");
    checkLock(vm, skiplock);
    if (vm.status === 'running') throw new Error(`VM ${vm.vmid} already running`);
    await bootVm(c, t, vm);
  } finally {
    unlock();
  }
}
