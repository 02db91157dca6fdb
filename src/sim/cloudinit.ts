/**
 * The cloud-init drive as qemu-server makes it (src/PVE/QemuServer/Cloudinit.pm at e6352be): the
 * user data it generates from ciuser/cipassword/sshkeys/the VM name, the nocloud network config,
 * the meta data with its instance-id, the `cicustom` snippets read in their place (and the errors
 * a missing or wrong snippet gives), and the `[special:cloudinit]` bookkeeping of what changed
 * since the drive was last generated (QemuServer.pm:4633-4695, qemu-server 7.2-8 on).
 *
 * The drive is generated at VM start (vm_start_nolock, QemuServer.pm:5602-5611) and by
 * `PUT .../cloudinit` (vmconfig_update_cloudinit_drive, :5340-5368); nothing checks a `cicustom`
 * volume before that: its format is `pve-volume-id` (QemuServer.pm:744-778) and the API does no
 * volume access check on it, so a missing snippet is only found when the drive is made.
 */
import { createHash } from 'node:crypto';
import { DRIVE_KEY_RE, NET_KEY_RE, parseDrive, parseNic, parseProp } from './qemu-config.ts';
import { parseVolid } from './routes/qemu-drives.ts';
import type { ClusterState, VmState } from './state.ts';
import { volumePath } from './storage-files.ts';

/** The drive's files as generated: what the guest's cloud-init reads from the cdrom. */
export interface CloudInitDrive {
  /** `nocloud`, `configdrive2` or `opennebula` (get_cloudinit_format). */
  format: string;
  userData: string;
  networkData: string;
  metaData: string;
  vendorData: string;
  /** nocloud/configdrive2 instance-id: sha1_hex(user_data . network_data), or the custom meta's. */
  instanceId: string;
  /** The `cicustom user=` volume the user data came from, if any. */
  userVolume?: string;
}

/** `$cloudinitoptions` of the API (src/PVE/API2/Qemu.pm:853-862): what GET .../cloudinit lists. */
export const CLOUDINIT_OPTIONS = [
  'cicustom',
  'cipassword',
  'citype',
  'ciupgrade',
  'ciuser',
  'nameserver',
  'searchdomain',
  'sshkeys',
];

/** cloudinit_pending_properties (QemuServer.pm:1792-1798): the cloud-init options, `name`, `netN`. */
export function isCloudinitProperty(key: string): boolean {
  return CLOUDINIT_OPTIONS.includes(key) || /^ipconfig\d+$/.test(key) || key === 'name' || NET_KEY_RE.test(key);
}

/** The VM's cloud-init drive (`vm-<vmid>-cloudinit`, generate_cloudinit_config's match), if any. */
export function cloudinitDrive(vm: VmState): { key: string; volid: string } | undefined {
  for (const [key, value] of Object.entries(vm.config)) {
    if (!DRIVE_KEY_RE.test(key)) continue;
    const file = parseDrive(value).file;
    if (new RegExp(`^[^:]+:(?:.*/)?vm-${vm.vmid}-cloudinit`).test(file)) return { key, volid: file };
  }
  return undefined;
}

/**
 * $cloudinit_record_changed (QemuServer.pm:4635-4695): a change of a cloud-init property on a
 * running VM, kept in the `[special:cloudinit]` section until the drive is regenerated.
 */
export function recordCloudinitChange(
  section: Record<string, string>,
  opt: string,
  old: string | undefined,
  value: string | undefined,
): void {
  if (!isCloudinitProperty(opt)) return;
  const recorded = section[opt];
  const added = new Set((section.added ?? '').split(/[,;\s]+/).filter(Boolean));
  delete section.added;
  if (value !== undefined) {
    if (recorded !== undefined) {
      // Reverted to what the drive has: no longer a change.
      if (value === recorded) {
        delete section[opt];
        added.delete(opt);
      }
    } else if (!added.has(opt)) {
      if (old !== undefined) section[opt] = old;
      else added.add(opt);
    }
  } else if (old !== undefined) {
    if (recorded === undefined) {
      if (added.has(opt)) added.delete(opt);
      else section[opt] = old;
    }
  }
  if (added.size) section.added = [...added].sort().join(',');
}

/** GET .../cloudinit (Qemu.pm:1966-2010): added, existing (with the drive's value) and deleted options. */
export function cloudinitPending(vm: VmState): Array<Record<string, string | number>> {
  const conf = { ...vm.config };
  const ci = { ...vm.cloudinitSection };
  if ('cipassword' in conf) conf.cipassword = '**********';
  if ('cipassword' in ci) ci.cipassword = '**********';
  const res: Array<Record<string, string | number>> = [];
  const added = ci.added ?? '';
  delete ci.added;
  for (const key of added.split(/[,;\s]+/).filter(Boolean))
    res.push({ key, ...(conf[key] !== undefined ? { pending: conf[key] } : {}) });
  // Perl hash order is random; the simulator answers sorted.
  for (const opt of CLOUDINIT_OPTIONS) {
    if (!conf[opt] || added.includes(opt)) continue;
    res.push(ci[opt] ? { key: opt, value: ci[opt], pending: conf[opt] } : { key: opt, value: conf[opt] });
  }
  for (const opt of Object.keys(ci).sort()) if (!conf[opt]) res.push({ key: opt, delete: 1 });
  return res;
}

/** get_cloudinit_format: `citype`, else configdrive2 for Windows, else nocloud. */
export function cloudinitFormat(config: Record<string, string>): string {
  if (config.citype) return config.citype;
  return /^(wxp|w2k|w2k3|w2k8|wvista|win7|win8|win10|win11)$/.test(config.ostype ?? '') ? 'configdrive2' : 'nocloud';
}

/** get_hostname_fqdn (Cloudinit.pm:112-125). */
function hostnameFqdn(config: Record<string, string>, vmid: number): [string, string] {
  const name = config.name ?? `VM${vmid}`;
  if (name.includes('.')) return [name.replace(/\..*$/, ''), name];
  return [name, config.searchdomain ? `${name}.${config.searchdomain}` : name];
}

/** cloudinit_userdata (Cloudinit.pm:145-189): the user data PVE generates. */
export function generatedUserData(config: Record<string, string>, vmid: number, maskPassword = false): string {
  const [hostname, fqdn] = hostnameFqdn(config, vmid);
  let out = `#cloud-config\nhostname: ${hostname}\nmanage_etc_hosts: true\nfqdn: ${fqdn}\n`;
  const user = config.ciuser;
  if (user !== undefined) out += `user: ${user}\n`;
  if (user === 'root') out += 'disable_root: False\n';
  if (config.cipassword !== undefined) out += `password: ${maskPassword ? '**********' : config.cipassword}\n`;
  if (config.sshkeys !== undefined) {
    const keys = decodeURIComponent(config.sshkeys)
      .split('\n')
      .map((k) => k.replace(/\r?$/, ''))
      .filter((k) => /\S/.test(k));
    out += `ssh_authorized_keys:\n${keys.map((k) => `  - ${k}\n`).join('')}`;
  }
  out += 'chpasswd:\n  expire: False\n';
  if (user !== 'root') out += 'users:\n  - default\n';
  // ciupgrade (qemu-server 8.0.4, efa3355d/ec11b92a): default 1; before it, always.
  if (config.ciupgrade === undefined || config.ciupgrade === '1') out += 'package_upgrade: true\n';
  return out;
}

/** $PVE::Network::ipv4_reverse_mask. */
function prefixMask(prefix: number): string {
  const n = prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
}

/**
 * get_dns_conf: the VM's nameserver/searchdomain, else the node's /etc/resolv.conf, assumed to
 * name the first bridge gateway as its only name server and no search domain.
 */
function dnsConf(c: ClusterState, vm: VmState): [string[], string[]] {
  const search = (vm.config.searchdomain ?? '').split(/\s+/).filter(Boolean);
  if (vm.config.nameserver !== undefined) return [search, vm.config.nameserver.split(/\s+/).filter(Boolean)];
  const gw = [...(c.nodes.get(vm.node)?.bridges.values() ?? [])].find((b) => b.gateway)?.gateway;
  return [search, gw ? [gw] : []];
}

/** parse_ipconfig: an empty config is DHCP for both families. */
function ipconfig(value: string): Record<string, string> {
  const p: Record<string, string> = {};
  for (const [k, v] of parseProp(value).opts) p[k] = v;
  if (!p.ip && !p.ip6) return { ip: 'dhcp', ip6: 'dhcp' };
  return p;
}

/** nocloud_network (Cloudinit.pm:527-596): network config version 1. */
export function nocloudNetwork(c: ClusterState, vm: VmState): string {
  let out = 'version: 1\nconfig:\n';
  const i = '    ';
  const nets = Object.keys(vm.config)
    .filter((k) => NET_KEY_RE.test(k))
    .sort();
  for (const iface of nets) {
    const id = iface.slice(3);
    const ipc = vm.config[`ipconfig${id}`];
    if (!ipc) continue;
    const mac = (parseNic(vm.config[iface]!).mac ?? '').toLowerCase();
    if (!mac) throw new Error(`network interface '${iface}' has no mac address`);
    const ip = ipconfig(ipc);
    out += `${i}- type: physical\n${i}  name: eth${id}\n${i}  mac_address: '${mac}'\n${i}  subnets:\n`;
    const j = `${i}  `;
    if (ip.ip === 'dhcp') out += `${j}- type: dhcp4\n`;
    else if (ip.ip) {
      const [addr, mask] = ip.ip.split('/');
      if (mask === undefined) throw new Error(`not a CIDR: ${ip.ip}`);
      out += `${j}- type: static\n${j}  address: '${addr}'\n${j}  netmask: '${prefixMask(Number(mask))}'\n`;
      if (ip.gw) out += `${j}  gateway: '${ip.gw}'\n`;
    }
    if (ip.ip6 === 'dhcp') out += `${j}- type: dhcp6\n`;
    else if (ip.ip6 === 'auto') out += `${j}- type: ipv6_slaac\n`;
    else if (ip.ip6) {
      out += `${j}- type: static6\n${j}  address: '${ip.ip6}'\n`;
      if (ip.gw6) out += `${j}  gateway: '${ip.gw6}'\n`;
    }
  }
  const [search, servers] = dnsConf(c, vm);
  out += `${i}- type: nameserver\n`;
  if (servers.length) out += `${i}  address:\n${servers.map((s) => `${i}  - '${s}'\n`).join('')}`;
  if (search.length) out += `${i}  search:\n${search.map((s) => `${i}  - '${s}'\n`).join('')}`;
  return out;
}

/** The meta data nocloud_gen_metadata / configdrive2_gen_metadata write. */
function generatedMeta(format: string, id: string): string {
  if (format === 'nocloud') return `instance-id: ${id}\n`;
  return `{\n     "uuid": "${id}",\n     "network_config": { "content_path": "/content/0000" }\n}\n`;
}

/**
 * read_cloudinit_snippets_file (Cloudinit.pm:674-682): the volume must parse as `snippets`
 * content; from qemu-server 8.1.0 (9946d6fa, PVE 8.1) abs_filesystem_path (pve-storage
 * src/PVE/Storage.pm:769-788 at 0c56bad) activates the storage and requires the file, before
 * that file_get_contents fails to open it (pve-common src/PVE/File.pm:104-112 at f665029). At
 * most 1 MiB (safe_read_from, File.pm:168-188).
 */
function readSnippet(c: ClusterState, vm: VmState, volid: string): Buffer {
  const { storage: s, volname, vtype } = parseVolid(c, vm.node, volid);
  if (vtype !== 'snippets') throw new Error(`${volid} is not in the snippets directory`);
  const absPath = c.profile.snippetFileCheck;
  if (absPath && !s.enabled) throw new Error(`storage '${s.id}' is disabled`);
  const v = s.volumes.get(volname);
  const path = volumePath(s, { content: 'snippets', volname });
  if (!v || v.content !== 'snippets') {
    if (absPath) throw new Error(`can't find file '${volid}'`);
    throw new Error(`can't open '${path}' - No such file or directory`);
  }
  const data = v.file?.data ?? Buffer.alloc(v.size);
  if (data.length > 1024 * 1024) throw new Error(`file '${path}' too long - aborting`);
  return data;
}

/** The `cicustom` volumes (pve-qm-cicustom). */
export function cicustomVolumes(config: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of parseProp(config.cicustom ?? '').opts) if (v) out[k] = v;
  return out;
}

/**
 * generate_nocloud / generate_configdrive2 (Cloudinit.pm:266-302, 610-635): the custom files in
 * the order get_custom_cloudinit_files reads them (network, user, meta, vendor), then the
 * generated ones, then the 3 MiB sum check (qemu-server 7.1, 101beafe). Throws PVE's error.
 */
export function buildDrive(c: ClusterState, vm: VmState): CloudInitDrive {
  const format = cloudinitFormat(vm.config);
  const custom = cicustomVolumes(vm.config);
  const read = (k: string) => (custom[k] ? readSnippet(c, vm, custom[k]).toString('utf8') : undefined);
  const network = read('network');
  const user = read('user');
  const meta = read('meta');
  const vendor = c.profile.profile === '6.4' ? undefined : read('vendor');
  const userData = user ?? generatedUserData(vm.config, vm.vmid);
  const networkData = network ?? nocloudNetwork(c, vm);
  const id = createHash('sha1')
    .update(userData + networkData)
    .digest('hex');
  const metaData = meta ?? generatedMeta(format, id);
  const vendorData = vendor ?? '';
  const sum = [userData, networkData, metaData, vendorData].reduce((n, s) => n + Buffer.byteLength(s), 0);
  if (c.profile.profile !== '6.4' && sum > 3 * 1024 * 1024)
    throw new Error('Cloud-Init sum of snippets too big (> 3 MiB)');
  // A custom meta data's own instance-id is what the guest sees.
  const metaId = meta ? /^instance-id:\s*(\S+)/m.exec(meta)?.[1] : undefined;
  return {
    format,
    userData,
    networkData,
    metaData,
    vendorData,
    instanceId: metaId ?? id,
    ...(custom.user ? { userVolume: custom.user } : {}),
  };
}

/**
 * apply_cloudinit_config (Cloudinit.pm:701-739): generate the drive of a VM that has one, and
 * drop the `[special:cloudinit]` section. False if the VM has no cloud-init drive.
 */
export function applyCloudinit(c: ClusterState, vm: VmState): boolean {
  const d = cloudinitDrive(vm);
  if (!d) return false;
  vm.ciDrive = buildDrive(c, vm);
  vm.cloudinitSection = {};
  return true;
}

/** dump_cloudinit_config (Cloudinit.pm:741-767): what PVE would generate (cicustom is not read). */
export function dumpCloudinit(c: ClusterState, vm: VmState, type: string, maskPassword: boolean): string {
  if (type === 'user') return generatedUserData(vm.config, vm.vmid, maskPassword);
  const network = nocloudNetwork(c, vm);
  if (type === 'network') return network;
  const id = createHash('sha1')
    .update(generatedUserData(vm.config, vm.vmid) + network)
    .digest('hex');
  return generatedMeta(cloudinitFormat(vm.config), id);
}

/** Whether `hotplug` includes `cloudinit` (parse_hotplug_features; default `network,disk,usb`). */
export function hotplugCloudinit(config: Record<string, string>): boolean {
  const h = config.hotplug ?? '1';
  if (h === '0' || h === '1') return false;
  return h.split(/[,;\s]+/).includes('cloudinit');
}
