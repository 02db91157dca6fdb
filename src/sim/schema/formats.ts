/**
 * PVE's named parameter formats (`register_format` in pve-common, pve-storage, pve-access-control,
 * qemu-server), with their exact error messages. A verifier throws a PerlDie whose text is what
 * Perl's `$@` would hold (trailing newline included); the validator prefixes `invalid format - `.
 *
 * Sources (read 2026): pve-common src/PVE/JSONSchema.pm, Tools.pm/ParseUtils.pm, CpuSet.pm;
 * pve-storage src/PVE/Storage/Plugin.pm; pve-access-control src/PVE/AccessControl.pm,
 * Auth/Plugin.pm; qemu-server src/PVE/QemuServer.pm, QemuServer/Drive.pm, QemuServer/Network.pm.
 * Version differences are keyed on the profile where they matter for the four profiles.
 *
 * Named formats not listed here (pve-vm-cpu-conf, pve-qm-smbios1, pve-qm-hostpci, pve-qm-rng,
 * pve-qemu-sev-fmt, pve-qemu-tdx-fmt, prune-backups, pve-fw-*, IPorCIDR*,
 * pve-acme-*, pve-priv, pve-command-batch, pve-dir-override, pve-storage-zfs-blocksize,
 * pve-qm-usb-device, pve-qm-ide...) are ACCEPTED without checking: PVE registers them in modules
 * whose rules (CPU model lists, firewall aliases, privilege tables...) the simulator does not model.
 */
import { perlMatch, perlSplit, splitList } from './perl.ts';
import type { FormatContext, Profile, PropertyStringFormat } from './types.ts';

/** A Perl `die`: `text` is the stringified `$@`; `errors` is set for PVE::Exception with errors. */
export class PerlDie extends Error {
  readonly text: string;
  readonly errors: Readonly<Record<string, string>> | undefined;
  constructor(text: string, errors?: Record<string, string>) {
    super(text);
    this.name = 'PerlDie';
    this.text = text;
    this.errors = errors;
  }
}

const die = (msg: string): never => {
  throw new PerlDie(msg);
};

const atLeast84 = (p: Profile) => p === '8.4' || p === '9.2';

// --- regexes from PVE::Tools / PVE::ParseUtils -----------------------------------------------
const IPV4OCTET = '(?:25[0-5]|(?:2[0-4]|1[0-9]|[1-9])?[0-9])';
const IPV4RE = `(?:(?:${IPV4OCTET}\\.){3}${IPV4OCTET})`;
const H16 = '(?:[0-9a-fA-F]{1,4})';
const LS32 = `(?:(?:${IPV4RE}|${H16}:${H16}))`;
const IPV6RE =
  '(?:' +
  `(?:(?:(?:${H16}:){6})${LS32})|` +
  `(?:(?:::(?:${H16}:){5})${LS32})|` +
  `(?:(?:(?:${H16})?::(?:${H16}:){4})${LS32})|` +
  `(?:(?:(?:(?:${H16}:){0,1}${H16})?::(?:${H16}:){3})${LS32})|` +
  `(?:(?:(?:(?:${H16}:){0,2}${H16})?::(?:${H16}:){2})${LS32})|` +
  `(?:(?:(?:(?:${H16}:){0,3}${H16})?::(?:${H16}:){1})${LS32})|` +
  `(?:(?:(?:(?:${H16}:){0,4}${H16})?::)${LS32})|` +
  `(?:(?:(?:(?:${H16}:){0,5}${H16})?::)${H16})|` +
  `(?:(?:(?:(?:${H16}:){0,6}${H16})?::)))`;
const EMAIL_USER_RE = '(?:[\\w\\+\\-\\~]+(\\.[\\w\\+\\-\\~]+)*)';
const EMAIL_RE = `(?:${EMAIL_USER_RE}@[a-zA-Z0-9\\-]+(\\.[a-zA-Z0-9\\-]+)*)`;
const REALM_RE = '[A-Za-z][A-Za-z0-9\\.\\-_]+';
const USER_RE = '[^\\s:/]+';

const RE = {
  ipv4: new RegExp(`^(?:${IPV4RE})$`),
  ipv6: new RegExp(`^(?:${IPV6RE})$`),
  ip: new RegExp(`^(?:(?:${IPV4RE})|(?:${IPV6RE}))$`),
  cidr4: new RegExp(`^(?:${IPV4RE})(?:/(\\d+))$`),
  cidr6: new RegExp(`^(?:${IPV6RE})(?:/(\\d+))$`),
  email: new RegExp(`^${EMAIL_RE}$`),
  emailUser: new RegExp(`^${EMAIL_USER_RE}$`),
  dns: /^(([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)\.)*([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)$/,
  userid: new RegExp(`^(${USER_RE})@(${REALM_RE})$`),
  tokenid: new RegExp(`^((${USER_RE})@(${REALM_RE}))!(${REALM_RE})$`),
  realm: new RegExp(`^${REALM_RE}$`),
  hostPort1: new RegExp(`^(${IPV4RE}|[a-zA-Z0-9\\-.]+)(?::(\\d+))?$`),
  hostPort2: new RegExp(`^\\[(${IPV6RE}|${IPV4RE}|[a-zA-Z0-9\\-.]+)\\](?::(\\d+))?$`),
  hostPort3: new RegExp(`^(${IPV6RE})(?:\\.(\\d+))?$`),
};

/** Perl `=~` with captures, `$` matching before a final newline too. */
function perlExec(re: RegExp, s: string): RegExpExecArray | null {
  return re.exec(s) ?? (s.endsWith('\n') ? re.exec(s.slice(0, -1)) : null);
}

const IPV4_MASKS = new Set(
  Array.from({ length: 33 }, (_, bits) => {
    const n = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
    return [24, 16, 8, 0].map((sh) => (n >>> sh) & 255).join('.');
  }),
);

function verifyCidr(v: string, re: RegExp, max: number): boolean {
  const m = perlExec(re, v);
  if (!m) return false;
  const bits = Number(m[1]);
  return bits > 7 && bits <= max;
}

function parseId(id: string, type: string, profile: Profile): void {
  // the length check exists from pve-common 9.x
  if (profile === '9.2' && [...id].length < 2) die(`${type} ID '${id}' cannot be shorter than 2 characters\n`);
  if (!perlMatch(/^[a-z][a-z0-9\-_.]*[a-z0-9]$/i, id)) die(`${type} ID '${id}' contains illegal characters\n`);
}

function parseStartupOrder(value: string): boolean {
  if (value === '' || value === '0') return false;
  for (const p of perlSplit(value, ',')) {
    if (/^\s*$/.test(p)) continue;
    if (perlMatch(/^(order=)?(\d+)$/, p) || perlMatch(/^up=(\d+)$/, p) || perlMatch(/^down=(\d+)$/, p)) continue;
    return false;
  }
  return true;
}

function parseSize(value: string, profile: Profile): boolean {
  const re = profile === '9.2' ? /^(\d+(\.\d+)?)([KMGT](?:iB)?)?$/ : /^(\d+(\.\d+)?)([KMGT])?$/;
  return perlMatch(re, value);
}

/** parse_idmap() for one list entry, as the storage-pair/bridge-pair verifiers call it. */
function verifyIdPair(entry: string, ctx: FormatContext, idFormat: string): void {
  const check = (v: string) => {
    try {
      CODE_FORMATS[idFormat]!(v, ctx);
    } catch (e) {
      if (e instanceof PerlDie) die(`entry '${entry}' contains invalid ID - ${e.text}\n\n`);
      throw e;
    }
  };
  if (entry === '1') return;
  const m = perlExec(/^([^:]+):([^:]+)$/, entry);
  if (m) {
    check(m[1]!);
    check(m[2]!);
  } else {
    check(entry);
  }
}

const CONTENT_TYPES_OLD = ['images', 'rootdir', 'vztmpl', 'iso', 'backup', 'snippets', 'none'];

type Verifier = (value: string, ctx: FormatContext) => void;

/** Code-ref formats (usable with `-list` and `-opt`). */
export const CODE_FORMATS: Readonly<Record<string, Verifier>> = {
  string: () => {},
  urlencoded: (v) => {
    if (!perlMatch(/^[-%a-zA-Z0-9_.!~*'()]*$/, v)) die(`invalid urlencoded string: ${v}\n`);
  },
  'pve-configid': (v) => {
    if (!perlMatch(/^[a-z][a-z0-9_-]+$/i, v)) die(`invalid configuration ID '${v}'\n`);
  },
  'pve-storage-id': (v, c) => parseId(v, 'storage', c.profile),
  'acme-plugin-id': (v, c) => parseId(v, 'ACME plugin', c.profile),
  'pve-bridge-id': (v) => {
    if (!perlMatch(/^[-_.\w\d]+$/, v)) die(`invalid bridge ID '${v}'\n`);
  },
  'pve-vmid': (v) => {
    if (!perlMatch(/^[1-9][0-9]{2,8}$/, v)) die('value does not look like a valid VM ID\n');
  },
  'pve-node': (v) => {
    if (!perlMatch(/^([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)$/, v))
      die('value does not look like a valid node name\n');
  },
  'mac-addr': (v) => {
    if (!perlMatch(/^[a-f0-9][02468ace](?::[a-f0-9]{2}){5}$/i, v)) {
      die('value does not look like a valid unicast MAC address\n');
    }
  },
  ipv4: (v) => {
    if (!perlMatch(RE.ipv4, v)) die('value does not look like a valid IPv4 address\n');
  },
  ipv6: (v) => {
    if (!perlMatch(RE.ipv6, v)) die('value does not look like a valid IPv6 address\n');
  },
  ip: (v) => {
    if (!perlMatch(RE.ip, v)) die('value does not look like a valid IP address\n');
  },
  ipv4mask: (v) => {
    if (!IPV4_MASKS.has(v)) die('value does not look like a valid IP netmask\n');
  },
  CIDRv6: (v) => {
    if (!verifyCidr(v, RE.cidr6, 128)) die('value does not look like a valid IPv6 CIDR network\n');
  },
  CIDRv4: (v) => {
    if (!verifyCidr(v, RE.cidr4, 32)) die('value does not look like a valid IPv4 CIDR network\n');
  },
  CIDR: (v) => {
    if (!verifyCidr(v, RE.cidr4, 32) && !verifyCidr(v, RE.cidr6, 128)) {
      die('value does not look like a valid CIDR network\n');
    }
  },
  'pve-ipv4-config': (v) => {
    if (!perlMatch(/^(?:dhcp|manual)$/, v) && !verifyCidr(v, RE.cidr4, 32)) {
      die('value does not look like a valid ipv4 network configuration\n');
    }
  },
  'pve-ipv6-config': (v) => {
    if (!perlMatch(/^(?:auto|dhcp|manual)$/, v) && !verifyCidr(v, RE.cidr6, 128)) {
      die('value does not look like a valid ipv6 network configuration\n');
    }
  },
  email: (v) => {
    if (!perlMatch(RE.email, v)) die('value does not look like a valid email address\n');
  },
  'email-or-username': (v) => {
    if (!perlMatch(RE.email, v) && !perlMatch(RE.emailUser, v)) {
      die('value does not look like a valid email address or user name\n');
    }
  },
  'dns-name': (v) => {
    if (!perlMatch(RE.dns, v)) die('value does not look like a valid DNS name\n');
  },
  'pve-iface': (v) => {
    if (!perlMatch(/^[a-z][a-z0-9_]{1,20}([:.]\d+)?$/i, v)) die(`invalid network interface name '${v}'\n`);
  },
  'pve-vlan-id-or-range': (v) => {
    const m = perlExec(/^(\d+)(?:-(\d+))?$/, v);
    if (!m) return die(`invalid VLAN configuration '${v}'\n`);
    const tag = (t: string) => {
      if (Number(t) < 2 || Number(t) > 4094) die(`invalid VLAN tag '${t}'\n`);
    };
    const [, start, end] = m;
    tag(start!);
    if (end !== undefined && end !== '' && end !== '0') {
      tag(end);
      if (Number(start) >= Number(end)) die(`VLAN range must go from lower to higher tag '${v}'\n`);
    }
  },
  address: (v) => {
    if (!perlMatch(RE.ip, v) && !perlMatch(RE.dns, v)) die(`value does not look like a valid address: ${v}\n`);
  },
  'disk-size': (v, c) => {
    if (!parseSize(v, c.profile)) die(`value does not look like a valid disk size: ${v}\n`);
  },
  'pve-startup-order': (v) => {
    if (!parseStartupOrder(v)) die('unable to parse startup options\n');
  },
  'pve-tag': (v) => {
    if (!perlMatch(/^[a-z0-9_][a-z0-9_\-+.]*$/i, v)) die('invalid characters in tag\n');
  },
  'pve-task-status-type': (v) => {
    if (!perlMatch(/^(ok|error|warning|unknown)$/i, v)) die(`invalid status '${v}'\n`);
  },
  'storage-pair': (v, c) => verifyIdPair(v, c, 'pve-storage-id'),
  storagepair: (v, c) => verifyIdPair(v, c, 'pve-storage-id'),
  'bridge-pair': (v, c) => verifyIdPair(v, c, 'pve-bridge-id'),

  // pve-storage
  'pve-volume-id': (v) => {
    if (!perlMatch(/^([a-z][a-z0-9\-_.]*[a-z0-9]):([^\n]+)$/i, v)) die(`unable to parse volume ID '${v}'\n`);
  },
  'pve-volume-id-or-absolute-path': (v, c) => {
    if (v.startsWith('/')) return;
    CODE_FORMATS['pve-volume-id']!(v, c);
  },
  'pve-volume-id-or-qm-path': (v, c) => {
    if (v === 'none' || v === 'cdrom' || v.startsWith('/')) return;
    CODE_FORMATS['pve-volume-id']!(v, c);
  },
  'pve-storage-path': (v) => {
    if (!/^\/[^;()]+/.test(v)) die('value does not look like a valid absolute path\n');
  },
  'pve-storage-server': (v) => {
    if (!perlMatch(RE.ip, v) && !perlMatch(RE.dns, v)) {
      die('value does not look like a valid server name or IP address\n');
    }
  },
  'pve-storage-vgname': (v) => {
    if (!perlMatch(/^[a-z0-9][a-z0-9\-_.]*[a-z0-9]$/i, v)) die(`lvm name '${v}' contains illegal characters\n`);
  },
  'pve-storage-portal-dns': (v) => {
    if (!perlMatch(RE.hostPort1, v) && !perlMatch(RE.hostPort2, v) && !perlMatch(RE.hostPort3, v)) {
      die('value does not look like a valid portal address\n');
    }
  },
  'pve-storage-content': (v, c) => {
    const ok = CONTENT_TYPES_OLD.includes(v) || (atLeast84(c.profile) && v === 'import');
    if (!ok) die(`invalid content type '${v}'\n`);
  },
  'pve-storage-format': (v) => {
    if (!perlMatch(/^(raw|qcow2|vmdk|subvol)$/, v)) die(`invalid format '${v}'\n`);
  },
  'pve-storage-options': (v) => {
    if (!perlMatch(/^\S+$/, v)) die(`invalid options '${v}'\n`);
  },

  // pve-access-control
  'pve-userid': (value) => {
    const v = value === '0' ? '' : value;
    const len = [...v].length;
    if (len < 3) die(`user name '${v}' is too short\n`);
    if (len > 64) die(`user name '${v}' is too long (${len} > 64)\n`);
    if (!perlMatch(RE.userid, v)) die(`value '${v}' does not look like a valid user name\n`);
  },
  'pve-tokenid': (v) => {
    if (!perlMatch(RE.tokenid, v)) die(`value '${v}' does not look like a valid token ID\n`);
  },
  'pve-realm': (v) => {
    if (!perlMatch(RE.realm, v)) die('value does not look like a valid realm\n');
  },
  'pve-groupid': (v) => {
    if (!perlMatch(/^[A-Za-z0-9.\-_]+$/, v)) die(`group name '${v}' contains invalid characters\n`);
  },
  'pve-roleid': (v) => {
    if (!perlMatch(/^[A-Za-z0-9.\-_]+$/, v)) die(`role name '${v}' contains invalid characters\n`);
  },
  'pve-poolid': (v, c) => {
    // nested pools (a/b/c) from pve-access-control 8.1
    if (atLeast84(c.profile)) {
      if (perlSplit(v, '/').length > 3) die(`pool name '${v}' nested too deeply (max levels = 3)\n`);
      if (!perlMatch(/^[A-Za-z0-9.\-_]+(?:\/[A-Za-z0-9.\-_]+){0,2}$/, v)) {
        die(`pool name '${v}' contains invalid characters\n`);
      }
    } else if (!perlMatch(/^[A-Za-z0-9.\-_]+$/, v)) {
      die(`pool name '${v}' contains invalid characters\n`);
    }
  },

  // qemu-server
  'pve-qm-bootdisk': (v, c) => {
    if (!c.driveNames().has(v)) die(`invalid boot disk '${v}'\n`);
  },
  'pve-qm-bootdev': (v, c) => {
    if (!c.bootDevices().has(v)) die(`invalid boot device '${v}'\n`);
  },
  'pve-hotplug-features': (v, c) => {
    if (v === '0') return;
    const data = v === '1' ? 'network,disk,usb' : v;
    const re = c.profile === '6.4' ? /^(network|disk|cpu|memory|usb)$/ : /^(network|disk|cpu|memory|usb|cloudinit)$/;
    for (const f of splitList(data)) {
      if (!perlMatch(re, f)) die(`invalid hotplug feature '${f}'\n`);
    }
  },
  'pve-cpuset': (v) => {
    for (const part of perlSplit(v, ',')) {
      const m = perlExec(/^\s*(\d+)(?:-(\d+))?\s*$/, part);
      if (!m || (m[2] !== undefined && Number(m[2]) < Number(m[1]))) die('unable to parse cpuset option\n');
    }
  },
};

const str = { type: 'string', optional: true } as const;

/** Hash formats registered by name (property strings behind a format name). */
export function hashFormat(name: string, profile: Profile): PropertyStringFormat | undefined {
  switch (name) {
    case 'pve-qm-ipconfig':
      return {
        ip: { ...str, format: 'pve-ipv4-config' },
        gw: { ...str, format: 'ipv4', requires: 'ip' },
        ip6: { ...str, format: 'pve-ipv6-config' },
        gw6: { ...str, format: 'ipv6', requires: 'ip6' },
      };
    case 'pve-qm-boot':
      return {
        legacy: { ...str, default_key: true, pattern: '[acdn]{1,4}' },
        order: { ...str, format: 'pve-qm-bootdev-list' },
      };
    case 'pve-qm-cicustom': {
      const f: Record<string, typeof str & { format: string }> = {
        meta: { ...str, format: 'pve-volume-id' },
        network: { ...str, format: 'pve-volume-id' },
        user: { ...str, format: 'pve-volume-id' },
      };
      if (profile !== '6.4') f.vendor = { ...str, format: 'pve-volume-id' };
      return f;
    }
    case 'pve-qm-watchdog':
      return {
        model: { ...str, default_key: true, enum: ['i6300esb', 'ib700'] },
        action: { ...str, enum: ['reset', 'shutdown', 'poweroff', 'pause', 'debug', 'none'] },
      };
    case 'proxmox-remote':
      // pve-common src/PVE/JSONSchema.pm:853-880 (fingerprint: the fingerprint-sha256 option, :169-175).
      return {
        host: { type: 'string' },
        port: { type: 'integer', optional: true },
        apitoken: { type: 'string' },
        fingerprint: { type: 'string', optional: true, pattern: '([A-Fa-f0-9]{2}:){31}[A-Fa-f0-9]{2}' },
      };
    case 'bwlimit': {
      const n = { type: 'number', optional: true, minimum: 0 } as const;
      return { default: n, restore: n, migration: n, clone: n, move: n };
    }
    default:
      return undefined;
  }
}
