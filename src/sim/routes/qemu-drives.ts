/**
 * Disks of the `/nodes/{node}/qemu` routes: volume ids, the synchronous drive checks of create and
 * update (`$check_storage_access`), and the worker steps that allocate, import and copy volumes,
 * with qemu-img's progress lines.
 */
import { isRootUser, requirePriv } from '../auth.ts';
import { flowsOf, type Link, storageLink } from '../bandwidth.ts';
import { die, paramError } from '../errors.ts';
import {
  DRIVE_KEY_RE,
  type DriveSpec,
  getOpt,
  isCdrom,
  isCloudinit,
  NEW_DISK_RE,
  parseDrive,
  UNUSED_KEY_RE,
} from '../qemu-config.ts';
import type { RouteCtx } from '../server.ts';
import type { ClusterState, VmState } from '../state.ts';
import { formatSize, GiB, MiB, type StorageState, type Volume } from '../storage.ts';
import { underStorageLock } from '../storage-lock.ts';
import type { TaskHandle } from '../tasks.ts';
import { DURATIONS } from './qemu-common.ts';

/** PVE::Format::render_bytes($value, 1). */
export function renderBytes(value: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let u = 0;
  if (value > 1023) {
    u = Math.floor(Math.log(value) / Math.log(1024));
    value /= 1024 ** u;
  }
  return `${value.toFixed(1)} ${units[u]}`;
}

/**
 * A copy through `qemu-img convert -p` (import-from, offline full clones, offline disk moves) of
 * `size` bytes through `links` (capped at `limitBps`): a flow of the bandwidth model
 * (bandwidth.ts), so it shares each storage with the copies running beside it. qemu_img_convert
 * prints `transferred X of Y (P%)` for every percent qemu-img reports, 0.00% to 100.00%
 * (qemu-server src/PVE/QemuServer/QemuImage.pm:187-199 at e6352be); each quarter is one step of
 * the task (stall and die faults). A worker that stops mid-copy stops the flow.
 */
export async function copyWithProgress(
  c: ClusterState,
  t: TaskHandle,
  size: number,
  links: readonly Link[],
  limitBps?: number,
): Promise<void> {
  const line = (pct: number) =>
    t.log(`transferred ${renderBytes(Math.floor((size * pct) / 100))} of ${renderBytes(size)} (${pct.toFixed(2)}%)`);
  const flow = flowsOf(c.clock).start(links, size, limitBps);
  try {
    line(0);
    for (let step = 1; step <= 4; step++) {
      await t.wait((signal) => flow.reached((size * step) / 4, signal));
      for (let pct = (step - 1) * 25 + 1; pct <= step * 25; pct++) line(pct);
    }
  } finally {
    flow.cancel();
  }
}

/**
 * The storages a qemu-img copy of a volume contends on: the one it writes. Its source is read
 * through the host's page cache (qemu-img's default source cache mode: qemu-server passes `-T`
 * only for a zfspool source, QemuImage.pm:122 and :150 at e6352be), so imports of one image read
 * it once from disk and only their writes share a storage.
 */
export function writeLinks(target: StorageState): Link[] {
  return [storageLink(target)];
}

/** vdisk_alloc: the allocation under the storage's lock (storage-lock.ts), taking `ms`. */
export function allocUnderLock<T>(
  c: ClusterState,
  t: TaskHandle,
  s: StorageState,
  ms: number,
  alloc: () => T,
): Promise<T> {
  return underStorageLock(s, c.clock, async () => {
    await t.sleep(ms);
    return alloc();
  });
}

export function parseVolid(
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

export function volumeFromPath(c: ClusterState, node: string, path: string): Volume | undefined {
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

export interface DrivePlan {
  key: string;
  kind: 'new' | 'import' | 'cloudinit' | 'keep';
  drive: DriveSpec;
  storage?: StorageState;
  size?: number;
  source?: string;
}

/** Synchronous drive checks of create/update (`$check_storage_access`). */
export function planDrives(ctx: RouteCtx, conf: Record<string, string>, defaultStorage?: string): DrivePlan[] {
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

export function printDrive(volid: string, drive: DriveSpec, size?: number): string {
  const opts = drive.p.opts.filter(
    ([k]) => k !== 'import-from' && k !== 'file' && (size === undefined || k !== 'size'),
  );
  if (size !== undefined) opts.push(['size', formatSize(size)]);
  opts.sort(([a], [b]) => a.localeCompare(b));
  return [volid, ...opts.map(([k, v]) => `${k}=${v}`)].join(',');
}

/** Allocate/import what the plans ask for, inside a worker. Returns key -> config value. */
export async function executeDrives(
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
      const v = await allocUnderLock(c, t, s, DURATIONS.cloudinit, () =>
        c.allocVolume(node, s.id, vmid, 4 * MiB, 'cloudinit'),
      );
      created.push(v);
      t.log(`${s.type === 'lvmthin' ? '  Logical volume "' + v.volname + '" created.' : `Formatting '${v.volname}'`}`);
      out[p.key] = `${v.volid},media=cdrom`;
      continue;
    }
    if (p.kind === 'new') {
      const v = await allocUnderLock(c, t, s, DURATIONS.alloc, () => c.allocVolume(node, s.id, vmid, p.size!, 'disk'));
      created.push(v);
      if (s.type === 'lvmthin' || s.type === 'lvm') t.log(`  Logical volume "${v.volname}" created.`);
      else t.log(`Formatting '${s.path ?? s.id}/images/${v.volname}', fmt=${v.format} size=${v.size}`);
      out[p.key] = printDrive(v.volid, p.drive, v.size);
      continue;
    }
    // import-from
    const src = p.source!;
    const source = importSource(c, node, src);
    if (!source)
      throw new Error(
        src.startsWith('/') ? `unable to import '${src}': No such file or directory` : `volume '${src}' does not exist`,
      );
    // ImportDisk::do_import: vdisk_alloc under the storage's lock, then the copy outside it.
    const v = await allocUnderLock(c, t, s, DURATIONS.alloc, () =>
      c.allocVolume(node, s.id, vmid, source.size, 'disk'),
    );
    created.push(v);
    t.log(`importing disk '${src}' to VM ${vmid} ...`);
    if (s.type === 'lvmthin' || s.type === 'lvm') t.log(`  Logical volume "${v.volname}" created.`);
    await copyWithProgress(c, t, source.size, writeLinks(s));
    t.log(`Successfully imported disk as '${p.key}:${v.volid}'`);
    out[p.key] = printDrive(v.volid, p.drive, v.size);
  }
  return out;
}

/** The volume an `import-from` names (a volid, or for root an absolute path). */
function importSource(c: ClusterState, node: string, src: string): Volume | undefined {
  return src.startsWith('/') ? volumeFromPath(c, node, src) : c.volume(node, src);
}

/**
 * Whether a new VM's guest runs qemu-guest-agent, from the image it boots: the first imported disk
 * in the `boot` order (else the first imported disk by key). The image's own flag decides (the
 * topology's `guestAgent`, default false: the stock cloud images have no agent); another VM's disk
 * carries that VM's guest. A VM with no imported disk (new blank disks only) keeps the simulator's
 * original model of a guest that runs the agent.
 */
export function imageGuestAgent(c: ClusterState, node: string, plans: DrivePlan[], boot?: string): boolean {
  const imports = plans.filter((p) => p.kind === 'import').sort((a, b) => a.key.localeCompare(b.key));
  const order = /(?:^|,)order=([^,]+)/.exec(boot ?? '')?.[1]?.split(';') ?? [];
  const first = order.map((k) => imports.find((p) => p.key === k)).find(Boolean) ?? imports[0];
  if (!first?.source) return true;
  const v = importSource(c, node, first.source);
  if (v?.guestAgent !== undefined) return v.guestAgent;
  if (v?.vmid !== undefined) return c.vms.get(v.vmid)?.guestAgent ?? true;
  return true;
}

export function freeVmVolumes(c: ClusterState, vm: VmState, unreferenced: boolean): string[] {
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
