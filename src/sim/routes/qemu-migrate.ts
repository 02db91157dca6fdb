/**
 * `GET /nodes/{node}/qemu/{vmid}/migrate`, the migration precondition, computed from the simulated
 * topology: which other nodes see every storage the VM's drives use (a storage configured for
 * some nodes only, or disabled, makes a node `not_allowed`), the VM's disks on local (not shared)
 * storages, and the local resources (host devices, serial and parallel ports) that block it. The
 * migration itself (`POST`) is in qemu-migrate-post.ts; its worker uses the helpers exported here.
 *
 * Sources: qemu-server src/PVE/API2/Qemu.pm migrate_vm_precondition and $check_vm_disks_local,
 * src/PVE/QemuServer.pm check_local_storage_availability and foreach_volid,
 * src/PVE/QemuMigrate/Helpers.pm check_local_resources / check_non_migratable_resources (e6352be
 * for 9.x; c2287c17 = 8.3.13 for 8.4; 47cf3044 = 7.4-3 and c948e143 = 6.4-2 before). The answer's
 * shape per release:
 * - 6.4, 7.4: `allowed_nodes` and `not_allowed_nodes` only for a stopped VM; `not_allowed_nodes`
 *   lists every other node (`{}` or `{unavailable_storages}`);
 * - 8.4: both always; `unavailable-resources` (mapped devices without a mapping on the node; the
 *   simulator has no mappings), `mapped-resources`, `mapped-resource-info`, `clipboard=vnc` and
 *   `amd-sev`/`virtiofs` as local resources of a running VM;
 * - 9.2: also `has-dbus-vmstate` and, for an HA-managed VM, `dependent-ha-resources` (no HA
 *   rules are simulated, so it is empty and nothing blocks).
 */
import { die } from '../errors.ts';
import { DRIVE_KEY_RE, getOpt, isCdrom, isCloudinit, parseDrive, parseProp } from '../qemu-config.ts';
import { checkCfsQuorum } from '../quorum.ts';
import type { Route } from '../server.ts';
import type { ClusterState, VmState } from '../state.ts';
import type { StorageState } from '../storage.ts';
import { checkLock, loadVm, vmPerm } from './qemu-common.ts';

/** PVE::Storage::Plugin @SHARED_STORAGE: network storages are shared by type. */
export function isShared(s: StorageState): boolean {
  return s.shared || s.type === 'rbd' || s.type === 'cephfs' || s.type === 'nfs';
}

/** A storage's section in storage.cfg, as any node would read it (the first node that has it). */
export function storageConfig(c: ClusterState, sid: string): StorageState | undefined {
  for (const n of c.nodes.values()) {
    const s = n.storages.get(sid);
    if (s) return s;
  }
  return undefined;
}

/** parse_size of a `disk-size` (`32G`, `512M`, bytes without a unit). */
export function diskSize(value: string | undefined): number | undefined {
  const m = value && /^(\d+(?:\.\d+)?)([KMGT])?$/.exec(value);
  if (!m) return undefined;
  const f = { K: 1024, M: 1024 ** 2, G: 1024 ** 3, T: 1024 ** 4 }[m[2] ?? ''] ?? 1;
  return Math.trunc(Number(m[1]) * f);
}

export type VolAttrs = Record<string, unknown> & { volid?: string };

/** foreach_volid: every volume of the config, its pending section (8.x on) and its snapshots. */
export function volumeAttrs(c: ClusterState, vm: VmState): Map<string, VolAttrs> {
  const p = c.profile.profile;
  const old = p === '6.4' || p === '7.4';
  const out = new Map<string, VolAttrs>();
  const visit = (config: Record<string, string>, snapname?: string, pending = false) => {
    for (const [key, value] of Object.entries(config)) {
      const isDrive = DRIVE_KEY_RE.test(key);
      if (!isDrive && !/^unused\d+$/.test(key) && key !== 'vmstate') continue;
      if (p === '6.4' && key === 'tpmstate0') continue;
      const d = parseDrive(value);
      if (!d.file) continue;
      const a = out.get(d.file) ?? {};
      out.set(d.file, a);
      a.cdrom ??= 1;
      if (!isCdrom(d)) a.cdrom = 0;
      if (p === '9.2') {
        a.is_cloudinit ??= 0;
        if (isCloudinit(d)) a.is_cloudinit = 1;
      }
      a.replicate ??= 0;
      if ((getOpt(d.p, 'replicate') ?? '1') !== '0') a.replicate = 1;
      a.shared ??= 0;
      if (getOpt(d.p, 'shared') === '1') a.shared = 1;
      if (old) {
        a.referenced_in_config ??= 0;
        if (snapname === undefined) a.referenced_in_config = 1;
      }
      a.is_unused ??= 0;
      if (/^unused\d+$/.test(key)) a.is_unused = 1;
      if (!old) {
        a.is_attached ??= 0;
        if (!a.is_unused && snapname === undefined && !pending) a.is_attached = 1;
      }
      if (snapname !== undefined)
        a.referenced_in_snapshot = { ...((a.referenced_in_snapshot as object) ?? {}), [snapname]: 1 };
      if (pending) a.referenced_in_pending = 1;
      const size = diskSize(getOpt(d.p, 'size'));
      if (size) a.size ??= size;
      a.is_vmstate ??= 0;
      if (key === 'vmstate') a.is_vmstate = 1;
      if (p !== '6.4') {
        a.is_tpmstate ??= 0;
        if (key === 'tpmstate0') a.is_tpmstate = 1;
      }
      if (isDrive) a.drivename = key;
    }
  };
  visit(vm.config);
  if (!old && Object.keys(vm.pending).length) visit(vm.pending, undefined, true);
  for (const [name, s] of vm.snapshots) visit({ ...s.config, ...(s.vmstate ? { vmstate: s.vmstate } : {}) }, name);
  return out;
}

/** $check_vm_disks_local: the volumes not on a shared storage (an unparsable volid counts as local). */
function localDisks(c: ClusterState, vm: VmState): VolAttrs[] {
  const out: VolAttrs[] = [];
  for (const [volid, a] of volumeAttrs(c, vm)) {
    const i = volid.indexOf(':');
    if (i > 0) {
      const s = storageConfig(c, volid.slice(0, i));
      if (!s) die(`storage '${volid.slice(0, i)}' does not exist`);
      if (isShared(s)) continue;
    }
    if (a.shared) continue;
    if (a.cdrom && volid === 'none') continue;
    out.push({ ...a, volid });
  }
  return out;
}

/** check_local_resources: host devices and ports that do not move; mapped devices by name. */
export function localResources(
  c: ClusterState,
  vm: VmState,
  running: boolean,
): { local: string[]; mapped: Record<string, { name: string }> } {
  const conf = vm.config;
  const modern = c.profile.profile === '8.4' || c.profile.profile === '9.2';
  const local: string[] = [];
  const mapped: Record<string, { name: string }> = {};
  if (modern && running) {
    if (conf['amd-sev']) local.push('amd-sev');
    if (c.profile.profile === '9.2' && conf['intel-tdx']) local.push('intel-tdx');
    if (Object.keys(conf).some((k) => /^virtiofs\d+$/.test(k))) local.push('virtiofs');
  }
  if (conf.hostusb) local.push('hostusb');
  if (conf.hostpci) local.push('hostpci');
  if (conf.ivshmem) local.push('ivshmem');
  for (const [k, v] of Object.entries(conf)) {
    if (k.startsWith('usb')) {
      if (!modern && /^spice(?![^,])/.test(v)) continue;
      if (modern) {
        const p = parseProp(v);
        if (/^spice$/i.test(getOpt(p, 'host') ?? '')) continue;
        const name = getOpt(p, 'mapping');
        if (name) mapped[k] = { name };
      }
    }
    if (modern && k.startsWith('hostpci')) {
      const name = getOpt(parseProp(v), 'mapping');
      if (name) {
        mapped[k] = { name };
        // No mapping is live-migration capable here; offline, a mapped device does not block.
        if (!running) continue;
      }
    }
    if (modern && /^virtiofs\d+$/.test(k)) mapped[k] = { name: getOpt(parseProp(v), 'dirid') ?? '' };
    if (k.startsWith('serial') && v === 'socket') continue;
    if ((modern ? /^(usb|hostpci|serial|parallel|virtiofs)\d+$/ : /^(usb|hostpci|serial|parallel)\d+$/).test(k))
      local.push(k);
  }
  if (modern && running) {
    const vga = conf.vga ? parseProp(conf.vga) : undefined;
    // 9.x: only machines before 10.1; the simulated QEMU runs pc-i440fx-9.2.
    if (vga && getOpt(vga, 'clipboard') === 'vnc') local.push('clipboard=vnc');
  }
  return { local, mapped };
}

/** check_local_storage_availability: per other node, the storages of the drives it cannot see. */
function unavailableStorages(c: ClusterState, vm: VmState, node: string): string[] {
  const out = new Set<string>();
  for (const [k, v] of Object.entries(vm.config)) {
    if (!DRIVE_KEY_RE.test(k)) continue;
    const file = parseDrive(v).file;
    const i = file.indexOf(':');
    if (i <= 0) continue;
    const sid = file.slice(0, i);
    const cfg = storageConfig(c, sid);
    if (!cfg) die(`storage '${sid}' does not exist`);
    if (!cfg.enabled || !c.nodes.get(node)?.storages.has(sid)) out.add(sid);
  }
  return [...out].sort();
}

export const migrateRoutes: Route[] = [
  {
    method: 'GET',
    path: '/nodes/{node}/qemu/{vmid}/migrate',
    perm: vmPerm('VM.Migrate'),
    handler: ({ c, params }) => {
      const node = String(params.node);
      checkCfsQuorum(c); // migrate_vm_precondition, first thing (:5397)
      const vm = loadVm(c, node, Number(params.vmid));
      // "try to detect errors early"
      checkLock(vm, false);
      const running = vm.status === 'running';
      const p = c.profile.profile;
      const modern = p === '8.4' || p === '9.2';
      const { local, mapped } = localResources(c, vm, running);
      const res: Record<string, unknown> = { running: running ? 1 : 0 };
      const others = [...c.nodes.keys()].filter((n) => n !== node);
      if (modern || !running) {
        const allowed: string[] = [];
        const notAllowed: Record<string, Record<string, unknown>> = {};
        for (const n of modern ? others : [...others].sort()) {
          const info: Record<string, unknown> = {};
          const storages = unavailableStorages(c, vm, n);
          if (storages.length) info.unavailable_storages = storages;
          // No resource mapping exists on any simulated node.
          if (modern && Object.keys(mapped).length) info['unavailable-resources'] = Object.keys(mapped);
          notAllowed[n] = info;
          if (!Object.keys(info).length) allowed.push(n);
        }
        res.allowed_nodes = allowed;
        res.not_allowed_nodes = notAllowed;
      }
      if (p === '9.2' && vm.haManaged) res['dependent-ha-resources'] = [];
      res.local_disks = localDisks(c, vm);
      res.local_resources = local;
      if (modern) {
        res['mapped-resources'] = Object.keys(mapped).sort();
        res['mapped-resource-info'] = mapped;
      }
      if (p === '9.2') res['has-dbus-vmstate'] = 1;
      return res;
    },
  },
];
