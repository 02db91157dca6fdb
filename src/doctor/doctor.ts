/**
 * `provider-proxmox doctor`: the seed's preflight, for a human. For each site: reachability and
 * TLS per endpoint, authentication, version and capabilities, node health, bridges, storages that
 * can hold VM disks, the images / templates / pools the manifests reference, and the privileges
 * the credentials lack. Every failure names the fix. No secret is ever printed.
 */
import { findSite, type LoadedProviderConfig, type SiteSsh, siteSecretRef, siteSsh } from '../api/provider-config.ts';
import { authIdOf, type Credentials } from '../proxmox/auth.ts';
import { type Capabilities, describeCapabilities } from '../proxmox/capabilities.ts';
import { PveClient, type PveClientOptions } from '../proxmox/client.ts';
import { AuthenticationError, PermissionError, PveError, TlsError, UnavailableError } from '../proxmox/errors.ts';
import { scrub } from '../proxmox/secret.ts';
import { siteCredentials, siteTls } from '../proxmox/site.ts';
import { probeCertificate, type TlsSettings, tlsFix, tlsMode } from '../proxmox/tls.ts';
import type { NodeListEntry, StorageEntry, StorageVolume, VmListEntry } from '../proxmox/types.ts';
import type { VmNeeds } from './manifests.ts';
import { checkSsh } from './ssh.ts';

export type CheckStatus = 'ok' | 'warn' | 'fail' | 'skip';

export interface Check {
  id: string;
  status: CheckStatus;
  detail: string;
  fix?: string;
}

export interface SiteReport {
  site: string;
  endpoints: string[];
  version?: string;
  checks: Check[];
}

export interface DoctorReport {
  ok: boolean;
  problems: number;
  warnings: number;
  sites: SiteReport[];
}

export interface DoctorSite {
  name: string;
  endpoints: string[];
  /** Configured nodes (default: every node of the cluster). */
  nodes?: string[] | undefined;
  tls: TlsSettings;
  credentials?: Credentials | undefined;
  /** Why there are no credentials (a config problem), and its fix. */
  credentialsProblem?: { detail: string; fix: string } | undefined;
  /** Where the site is configured (`pc.yaml:20 (spec.sites[0])`, `--endpoint`), for fixes. */
  where: string;
  /** Where the credentials come from (`Secret ns/name`, `--token`), for fixes. */
  credentialsSource: string;
  /** SSH to the nodes (cloud-init snippets), when the ProviderConfig gives it. */
  ssh?: SiteSsh | undefined;
  /** Why the ssh section cannot be used (its Secret is missing), and its fix. */
  sshProblem?: string | undefined;
}

export interface DoctorOptions {
  sites: DoctorSite[];
  needs?: VmNeeds[];
  /** Client knobs (tests: clock, retry, timeouts). */
  client?: Partial<Omit<PveClientOptions, 'endpoints' | 'credentials' | 'tls' | 'site'>>;
}

const GiB = 1024 ** 3;

function fmtBytes(n: number | undefined): string {
  if (n === undefined) return '?';
  if (n >= 1024 * GiB) return `${(n / 1024 / GiB).toFixed(1)} TiB`;
  return `${(n / GiB).toFixed(1)} GiB`;
}

function msg(e: unknown): string {
  return e instanceof PveError ? e.reason || e.message : e instanceof Error ? e.message : String(e);
}

/** `pveum acl modify` line for the credentials. */
function aclFix(path: string, role: string, creds: Credentials | undefined): string {
  if (!creds) return `pveum acl modify ${path} --roles ${role}`;
  const id = authIdOf(creds);
  const who = creds.kind === 'token' ? `--tokens '${id}'` : `--users '${id}'`;
  const extra =
    creds.kind === 'token'
      ? ` (a privilege-separated token needs the role itself and its user ${id.slice(0, id.indexOf('!'))} needs it too)`
      : '';
  return `pveum acl modify ${path} --roles ${role} ${who}${extra}`;
}

interface Ctx {
  site: DoctorSite;
  c: PveClient;
  caps: Capabilities;
  add: (c: Check) => void;
  needs: VmNeeds[];
  secrets: string[];
}

async function checkEndpoint(
  site: DoctorSite,
  endpoint: string,
  clientOpts: DoctorOptions['client'],
): Promise<{
  check: Check;
  reachable: boolean;
  authError?: PveError;
}> {
  const id = `endpoint ${endpoint}`;
  let presented: string | undefined;
  const u = new URL(endpoint);
  if (u.protocol === 'https:') {
    try {
      presented = (await probeCertificate(endpoint, clientOpts?.connectTimeoutMs ?? 5000)).fingerprint256;
    } catch (e) {
      const code = (e as { code?: string }).code;
      return {
        reachable: false,
        check: {
          id,
          status: 'fail',
          detail: `unreachable: ${code === 'ECONNREFUSED' ? 'connection refused' : msg(e)}`,
          fix: `check the URL (the PVE API listens on https://NODE:8006), that pveproxy runs on the node (systemctl status pveproxy), and the firewalls between here and ${u.host}; fix the endpoint in ${site.where}`,
        },
      };
    }
  }
  if (!site.credentials) {
    return {
      reachable: true,
      check: {
        id,
        status: 'ok',
        detail: `reachable${presented ? `; certificate ${presented}` : ''} (no credentials: not authenticated)`,
      },
    };
  }
  const c = new PveClient({
    ...clientOpts,
    site: site.name,
    endpoints: [endpoint],
    credentials: site.credentials,
    tls: site.tls,
    retry: { attempts: 1 },
  });
  try {
    await c.version();
    return {
      reachable: true,
      check: {
        id,
        status: tlsMode(site.tls) === 'insecure' ? 'warn' : 'ok',
        detail: tlsDetail(site.tls, presented, u.protocol),
        ...(tlsMode(site.tls) === 'insecure'
          ? { fix: `pin the certificate instead: tls: { fingerprint: "${presented ?? 'AB:CD:...'}" } in ${site.where}` }
          : {}),
      },
    };
  } catch (e) {
    if (e instanceof AuthenticationError || e instanceof PermissionError) {
      return {
        reachable: true,
        authError: e,
        check: { id, status: 'ok', detail: `reachable; ${tlsDetail(site.tls, presented, u.protocol)}` },
      };
    }
    if (e instanceof TlsError) {
      const fix = tlsFix(tlsMode(site.tls), e.presentedFingerprint ?? presented, site.where, u.hostname);
      return { reachable: false, check: { id, status: 'fail', detail: `TLS: ${e.reason}`, fix } };
    }
    if (e instanceof UnavailableError) {
      return {
        reachable: false,
        check: {
          id,
          status: 'fail',
          detail: `unreachable: ${e.reason}`,
          fix: `check that pveproxy runs on the node and the path from here to ${u.host}; fix the endpoint in ${site.where}`,
        },
      };
    }
    return {
      reachable: false,
      check: {
        id,
        status: 'fail',
        detail: `not a working Proxmox VE API: ${msg(e)}`,
        fix: `point the endpoint at https://NODE:8006 in ${site.where}`,
      },
    };
  } finally {
    await c.close();
  }
}

function tlsDetail(tls: TlsSettings, presented: string | undefined, protocol: string): string {
  if (protocol === 'http:') return 'reachable over plain http (credentials travel unencrypted)';
  switch (tlsMode(tls)) {
    case 'fingerprint':
      return `reachable; TLS certificate matches the pinned fingerprint ${presented ?? ''}`.trim();
    case 'ca-bundle':
      return 'reachable; TLS certificate verified against tls.caBundle';
    case 'insecure':
      return `reachable; TLS NOT verified (insecureSkipTLSVerify); the node presents ${presented ?? '?'}`;
    default:
      return 'reachable; TLS certificate verified against the system CAs';
  }
}

function authFix(site: DoctorSite, e: PveError): string {
  const creds = site.credentials;
  if (e instanceof PermissionError && e.needsTicket) return 'this PVE call needs user + password authentication';
  if (creds?.kind === 'token') {
    const id = creds.tokenId;
    const user = id.slice(0, id.indexOf('!'));
    const tok = id.slice(id.indexOf('!') + 1);
    return (
      `PVE rejected the API token ${id}. Check the tokenid and token keys of ${site.credentialsSource} ` +
      `(token id USER@REALM!NAME and its secret UUID); list tokens with \`pveum user token list ${user}\`, ` +
      `or create one with \`pveum user token add ${user} ${tok} --privsep 0\` and put the printed value in the Secret`
    );
  }
  return `PVE rejected user ${creds ? authIdOf(creds) : '?'}. Check the username (with its realm, e.g. root@pam) and password in ${site.credentialsSource}`;
}

/** Checks the nodes; returns those present and online (their status may still be unreadable). */
async function checkNodes(ctx: Ctx): Promise<string[]> {
  const { c, site, add } = ctx;
  let list: NodeListEntry[];
  try {
    list = await c.listNodes();
  } catch (e) {
    add({ id: 'nodes', status: 'fail', detail: `cannot list nodes: ${msg(e)}`, fix: 'see the errors above' });
    return [];
  }
  const names = list.map((n) => n.node);
  const wanted = site.nodes?.length ? site.nodes : names;
  const online: string[] = [];
  for (const node of wanted) {
    const id = `node ${node}`;
    const entry = list.find((n) => n.node === node);
    if (!entry) {
      add({
        id,
        status: 'fail',
        detail: `not a node of this cluster (nodes: ${names.join(', ') || 'none visible'})`,
        fix: `fix the nodes list in ${site.where}${names.length ? '' : '; or grant Sys.Audit on /nodes to see them'}`,
      });
      continue;
    }
    if (entry.status !== 'online') {
      add({
        id,
        status: 'fail',
        detail: `node is ${entry.status}`,
        fix: `bring ${node} back (power, network, \`pvecm status\` for quorum), or remove it from the nodes list in ${site.where}`,
      });
      continue;
    }
    online.push(node);
    try {
      const st = await c.nodeStatus(node);
      add({
        id,
        status: 'ok',
        detail: `online; ${st.cpuinfo.cpus} CPUs, memory ${fmtBytes(st.memory.used)} used of ${fmtBytes(st.memory.total)}; ${st.pveversion}`,
      });
    } catch (e) {
      if (e instanceof PermissionError) {
        add({
          id,
          status: 'fail',
          detail: `cannot read node status: ${e.reason}`,
          fix: aclFix(`/nodes/${node}`, 'PVEAuditor', site.credentials),
        });
      } else if (e instanceof UnavailableError) {
        add({
          id,
          status: 'fail',
          detail: `node does not answer: ${e.reason}`,
          fix: `check ${node}: \`systemctl status pveproxy pvedaemon\`, cluster network, \`pvecm status\``,
        });
      } else {
        add({ id, status: 'fail', detail: `node status failed: ${msg(e)}` });
      }
    }
  }
  // Nodes the manifests name that are not part of this site.
  for (const n of ctx.needs) {
    if (n.node && !wanted.includes(n.node)) {
      add({
        id: `manifest ${n.name}`,
        status: 'fail',
        detail: `${n.where}: node '${n.node}' is not a node of site ${site.name} (${wanted.join(', ')})`,
        fix: `fix spec.forProvider.node in ${n.where}, or add the node to ${site.where}`,
      });
    }
  }
  return online;
}

function needsOn(ctx: Ctx, node: string): VmNeeds[] {
  return ctx.needs.filter((n) => !n.node || n.node === node);
}

async function checkBridges(ctx: Ctx, node: string): Promise<string[]> {
  const { c, add } = ctx;
  const id = `bridges ${node}`;
  try {
    const list = await c.bridges(node);
    const names = list.map((b) => b.iface);
    const required = new Map<string, VmNeeds[]>();
    for (const n of needsOn(ctx, node)) for (const b of n.bridges) required.set(b, [...(required.get(b) ?? []), n]);
    if (!required.size) {
      if (names.length) add({ id, status: 'ok', detail: `bridges: ${names.join(', ')}` });
      else
        add({
          id,
          status: 'fail',
          detail: 'no bridge on this node: VMs cannot get a network',
          fix: `create a Linux bridge on ${node} (System → Network → Create → Linux Bridge, e.g. vmbr0)`,
        });
      return names;
    }
    const problems: string[] = [];
    const fixes: string[] = [];
    for (const [b, users] of required) {
      const entry = list.find((x) => x.iface === b);
      if (!entry) {
        problems.push(`${b} does not exist (used by ${users.map((u) => `${u.name} at ${u.where}`).join(', ')})`);
        fixes.push(
          `create bridge ${b} on ${node} (System → Network → Create → Linux Bridge) or change network/networks[].bridge in ${users.map((u) => u.where).join(', ')}; existing bridges: ${names.join(', ') || 'none'}`,
        );
      } else if (entry.active === 0) {
        problems.push(`${b} exists but is not active`);
        fixes.push(
          `apply the network configuration on ${node} (System → Network → Apply Configuration, or \`ifreload -a\`)`,
        );
      }
    }
    if (problems.length) add({ id, status: 'fail', detail: problems.join('; '), fix: fixes.join('; ') });
    else add({ id, status: 'ok', detail: `needed: ${[...required.keys()].join(', ')} (present: ${names.join(', ')})` });
    return [...required.keys()];
  } catch (e) {
    add({
      id,
      status: 'fail',
      detail: `cannot list bridges: ${msg(e)}`,
      ...(e instanceof PermissionError ? { fix: aclFix(`/nodes/${node}`, 'PVEAuditor', ctx.site.credentials) } : {}),
    });
    return [];
  }
}

const canHoldImages = (s: StorageEntry) => s.content.split(',').includes('images');
const usable = (s: StorageEntry) => s.enabled !== 0 && s.active !== 0;

async function checkStorages(ctx: Ctx, node: string): Promise<{ storages: StorageEntry[]; used: string[] }> {
  const { c, add } = ctx;
  const id = `storage ${node}`;
  let list: StorageEntry[];
  try {
    list = await c.nodeStorages(node);
  } catch (e) {
    add({ id, status: 'fail', detail: `cannot list storages: ${msg(e)}` });
    return { storages: [], used: [] };
  }
  const imageStores = list.filter((s) => canHoldImages(s) && usable(s));
  const describe = (s: StorageEntry) => `${s.storage} (${s.type}, ${fmtBytes(s.avail)} free)`;
  const required = new Map<string, VmNeeds[]>();
  for (const n of needsOn(ctx, node)) for (const s of n.storages) required.set(s, [...(required.get(s) ?? []), n]);
  if (!required.size) {
    if (imageStores.length)
      add({ id, status: 'ok', detail: `can hold VM disks: ${imageStores.map(describe).join(', ')}` });
    else
      add({
        id,
        status: 'fail',
        detail: `no enabled, active storage accepts VM disk images (content 'images'); storages: ${list.map((s) => `${s.storage} [${s.content}]`).join(', ') || 'none visible'}`,
        fix: `add 'Disk image' to a storage's content (Datacenter → Storage → Edit → Content, or \`pvesm set STORAGE --content images,...\`)${list.length ? '' : ', or grant Datastore.Audit on /storage'}`,
      });
    return { storages: list, used: imageStores.map((s) => s.storage) };
  }
  const problems: string[] = [];
  const fixes: string[] = [];
  const warns: string[] = [];
  for (const [name, users] of required) {
    const where = users.map((u) => u.where).join(', ');
    const s = list.find((x) => x.storage === name);
    if (!s) {
      problems.push(`storage ${name} does not exist on ${node} (or is not visible to these credentials)`);
      fixes.push(
        `use one of ${imageStores.map((x) => x.storage).join(', ') || '(none)'} in ${where}, or grant Datastore.Audit on /storage/${name}`,
      );
    } else if (!canHoldImages(s)) {
      problems.push(`storage ${name} (${s.type}) cannot hold VM disks: its content is ${s.content}`);
      fixes.push(
        `add 'Disk image' to ${name}'s content (Datacenter → Storage → ${name} → Edit, or \`pvesm set ${name} --content images,${s.content}\`), or use ${imageStores.map((x) => x.storage).join(', ') || 'a storage with content images'} in ${where}`,
      );
    } else if (!usable(s)) {
      problems.push(`storage ${name} is ${s.enabled === 0 ? 'disabled' : 'not active'} on ${node}`);
      fixes.push(`enable/activate ${name} (Datacenter → Storage; \`pvesm status\` on ${node})`);
    } else if ((s.avail ?? 1) <= 0 || (s.used_fraction ?? 0) >= 0.95) {
      warns.push(`storage ${name} is full (${fmtBytes(s.avail)} free)`);
    }
  }
  if (problems.length) add({ id, status: 'fail', detail: problems.join('; '), fix: fixes.join('; ') });
  else if (warns.length)
    add({ id, status: 'warn', detail: warns.join('; '), fix: `free space on the storage, or use another one` });
  else
    add({
      id,
      status: 'ok',
      detail: `needed: ${[...required.keys()].map((n) => describe(list.find((x) => x.storage === n)!)).join(', ')}`,
    });
  return { storages: list, used: [...required.keys()] };
}

async function checkImagesAndTemplates(ctx: Ctx, node: string, storages: StorageEntry[]): Promise<string[]> {
  const { c, caps, add } = ctx;
  const content = new Map<string, Promise<StorageVolume[]>>();
  const volumesOf = (storage: string) => {
    let p = content.get(storage);
    if (!p) {
      p = c.storageContent(node, storage).catch(() => []);
      content.set(storage, p);
    }
    return p;
  };
  const imageSourceStorages: string[] = [];
  const seen = new Set<string>();
  let vms: Promise<VmListEntry[]> | undefined;
  for (const n of needsOn(ctx, node)) {
    if (n.template) {
      const key = `template ${n.template}`;
      if (seen.has(`${node}|${key}`)) continue;
      seen.add(`${node}|${key}`);
      vms ??= c.listVms(node).catch(() => []);
      const list = await vms;
      const t = list.find((v) => String(v.vmid) === n.template || v.name === n.template);
      const id = `template ${n.template} on ${node}`;
      if (!t)
        add({
          id,
          status: 'fail',
          detail: `${n.where}: no VM '${n.template}' on ${node}`,
          fix: `create the template VM on ${node} (or fix template in ${n.where})`,
        });
      else if (t.template !== 1)
        add({
          id,
          status: 'fail',
          detail: `VM ${t.vmid} (${t.name ?? ''}) is not a template`,
          fix: `convert it: \`qm template ${t.vmid}\` (a VM must be a template to be cloned)`,
        });
      else add({ id, status: 'ok', detail: `template VM ${t.vmid} (${t.name ?? ''})` });
      continue;
    }
    if (!n.image) continue;
    const id = `image ${n.image} on ${node}`;
    if (seen.has(id)) continue;
    seen.add(id);
    if (!caps.importFrom) {
      add({
        id,
        status: 'fail',
        detail: `PVE ${caps.version.text} has no import-from (7.2 and later): a VM cannot be created from a cloud image over the API (${n.where})`,
        fix: `make a template VM from the image once on the node (\`qm create\`, \`qm importdisk\`, \`qm template\`) and set template: in ${n.where} instead of image, or upgrade Proxmox VE`,
      });
      continue;
    }
    let found: StorageVolume | undefined;
    const looked: string[] = [];
    if (n.image.includes(':')) {
      const sid = n.image.slice(0, n.image.indexOf(':'));
      looked.push(sid);
      found = (await volumesOf(sid)).find((v) => v.volid === n.image);
    } else {
      for (const s of storages) {
        if (!/(^|,)(iso|import|images)(,|$)/.test(s.content)) continue;
        looked.push(s.storage);
        found = (await volumesOf(s.storage)).find(
          (v) => v.volid.endsWith(`/${n.image}`) || v.volid === `${s.storage}:${n.image}`,
        );
        if (found) break;
      }
    }
    if (!found) {
      add({
        id,
        status: 'fail',
        detail: `not found on ${node} (looked in ${looked.join(', ') || 'no storage'}) (${n.where})`,
        fix: `upload the image to ${node}${caps.importContent ? " (to a storage with content 'import' on PVE 8.3+)" : ''}, or fix image in ${n.where}`,
      });
      continue;
    }
    imageSourceStorages.push(found.volid.slice(0, found.volid.indexOf(':')));
    if (found.content === 'images') {
      add({ id, status: 'ok', detail: `${found.volid} (disk image): imported with import-from` });
    } else if (found.content === 'import' && caps.importContent) {
      add({ id, status: 'ok', detail: `${found.volid} ('import' volume): imported with import-from` });
    } else if (caps.rootTicket) {
      add({
        id,
        status: 'ok',
        detail: `${found.volid} (${found.content}): root@pam imports it from its absolute path`,
      });
    } else {
      add({
        id,
        status: 'fail',
        detail:
          `${found.volid} is a '${found.content}' volume: with ${ctx.site.credentials?.kind === 'token' ? 'an API token' : 'these credentials'} ` +
          `it cannot be imported over the API (import-from accepts 'images'${caps.importContent ? " or 'import'" : ''} volumes; absolute paths are root@pam-only) (${n.where})`,
        fix:
          (caps.importContent
            ? `put the image in an 'import' storage (e.g. ${found.volid.replace(/:[a-z]+\//, ':import/')}; enable content 'import' on a dir storage) and reference that; `
            : 'upgrade to PVE 8.3+ and use an import volume; ') +
          `or use template: (clone a template VM) in ${n.where}; or give the provider root@pam password credentials`,
      });
    }
  }
  return imageSourceStorages;
}

async function checkPools(ctx: Ctx): Promise<string[]> {
  const pools = [...new Set(ctx.needs.map((n) => n.pool).filter((p): p is string => !!p))];
  if (!pools.length) return [];
  try {
    const list = (await ctx.c.listPools()).map((p) => p.poolid);
    for (const p of pools) {
      const users = ctx.needs.filter((n) => n.pool === p).map((n) => n.where);
      if (list.includes(p)) ctx.add({ id: `pool ${p}`, status: 'ok', detail: 'exists' });
      else
        ctx.add({
          id: `pool ${p}`,
          status: 'fail',
          detail: `pool ${p} does not exist (or is not visible) (${users.join(', ')})`,
          fix: `create it: \`pveum pool add ${p}\`, or fix pool in ${users.join(', ')}`,
        });
    }
  } catch (e) {
    ctx.add({ id: 'pools', status: 'fail', detail: `cannot list pools: ${msg(e)}` });
  }
  return pools;
}

interface Need {
  path: string;
  privs: string[];
  why: string;
  role: string;
}

async function checkPrivileges(
  ctx: Ctx,
  r: { nodes: string[]; storages: string[]; bridges: string[]; pools: string[] },
): Promise<void> {
  const { c, caps, site, add } = ctx;
  if (caps.rootTicket) {
    add({ id: 'privileges', status: 'ok', detail: 'root@pam holds every privilege' });
    return;
  }
  const needs: Need[] = [
    {
      path: '/vms',
      privs: [
        'VM.Audit',
        'VM.Allocate',
        'VM.Clone',
        'VM.Config.CDROM',
        'VM.Config.CPU',
        'VM.Config.Cloudinit',
        'VM.Config.Disk',
        'VM.Config.HWType',
        'VM.Config.Memory',
        'VM.Config.Network',
        'VM.Config.Options',
        'VM.PowerMgmt',
        caps.agentAuditPrivilege,
      ],
      why: 'create, configure, start/stop and observe VMs, read guest IP addresses',
      role: 'PVEVMAdmin',
    },
    ...r.nodes.map((n) => ({
      path: `/nodes/${n}`,
      privs: ['Sys.Audit'],
      why: 'read node health and networks',
      role: 'PVEAuditor',
    })),
    ...(r.storages.length ? [...new Set(r.storages)] : [undefined]).map((s) => ({
      path: s ? `/storage/${s}` : '/storage',
      privs: ['Datastore.AllocateSpace', 'Datastore.Audit'],
      why: 'allocate VM disks and read images',
      role: 'PVEDatastoreUser',
    })),
    ...(caps.bridgeAccessCheck
      ? (r.bridges.length ? [...new Set(r.bridges)] : [undefined]).map((b) => ({
          path: b ? `/sdn/zones/localnetwork/${b}` : '/sdn/zones/localnetwork',
          privs: ['SDN.Use'],
          why: `attach VMs to ${b ? `bridge ${b}` : 'bridges'} (PVE 8+)`,
          role: 'PVESDNUser',
        }))
      : []),
    ...r.pools.map((p) => ({
      path: `/pool/${p}`,
      privs: ['VM.Allocate'],
      why: `create VMs in pool ${p}`,
      role: 'PVEVMAdmin',
    })),
  ];
  const missing: Array<Need & { lacking: string[] }> = [];
  for (const need of needs) {
    try {
      const perms = await c.permissions({ path: need.path });
      const held = perms[need.path] ?? {};
      const lacking = need.privs.filter((p) => !held[p]);
      if (lacking.length) missing.push({ ...need, lacking });
    } catch (e) {
      add({
        id: 'privileges',
        status: 'fail',
        detail: `cannot read the privileges of ${authIdOf(site.credentials!)} on ${need.path}: ${msg(e)}`,
      });
      return;
    }
  }
  if (!missing.length) {
    add({
      id: 'privileges',
      status: 'ok',
      detail: `${authIdOf(site.credentials!)} holds what the provider needs on ${needs.map((n) => n.path).join(', ')}`,
    });
    return;
  }
  for (const m of missing) {
    add({
      id: `privileges ${m.path}`,
      status: 'fail',
      detail: `${authIdOf(site.credentials!)} lacks ${m.lacking.join(', ')} on ${m.path} (needed to ${m.why})`,
      fix: aclFix(m.path, m.role, site.credentials),
    });
  }
}

async function checkSite(
  site: DoctorSite,
  allNeeds: VmNeeds[],
  siteCount: number,
  clientOpts: DoctorOptions['client'],
): Promise<SiteReport> {
  const report: SiteReport = { site: site.name, endpoints: site.endpoints, checks: [] };
  const secrets: string[] = [];
  if (site.credentials?.kind === 'token') secrets.push(site.credentials.secret.reveal());
  if (site.credentials?.kind === 'password') secrets.push(site.credentials.password.reveal());
  const add = (c: Check) =>
    report.checks.push({
      ...c,
      detail: scrub(c.detail, secrets),
      ...(c.fix ? { fix: scrub(c.fix, secrets) } : {}),
    });
  if (!site.credentials) {
    add({
      id: 'credentials',
      status: 'fail',
      detail: site.credentialsProblem?.detail ?? 'no credentials',
      fix:
        site.credentialsProblem?.fix ?? 'give the site a credentials Secret (tokenid + token, or username + password)',
    });
  }
  let reachable = false;
  let authError: PveError | undefined;
  for (const ep of site.endpoints) {
    const r = await checkEndpoint(site, ep, clientOpts);
    add(r.check);
    reachable ||= r.reachable;
    authError ??= r.authError;
  }
  if (!reachable || !site.credentials) {
    add({ id: 'remaining checks', status: 'skip', detail: !reachable ? 'no endpoint reachable' : 'no credentials' });
    return report;
  }
  if (authError) {
    add({
      id: 'auth',
      status: 'fail',
      detail: `${authIdOf(site.credentials)}: ${authError.reason || authError.message}`,
      fix: authFix(site, authError),
    });
    add({ id: 'remaining checks', status: 'skip', detail: 'not authenticated' });
    return report;
  }
  const c = new PveClient({
    ...clientOpts,
    site: site.name,
    endpoints: site.endpoints,
    credentials: site.credentials,
    tls: site.tls,
  });
  try {
    let caps: Capabilities;
    try {
      caps = await c.capabilities();
    } catch (e) {
      add({ id: 'auth', status: 'fail', detail: msg(e), ...(e instanceof PveError ? { fix: authFix(site, e) } : {}) });
      return report;
    }
    add({
      id: 'auth',
      status: 'ok',
      detail: `${site.credentials.kind === 'token' ? 'API token' : 'user + password (ticket)'} ${authIdOf(site.credentials)}`,
    });
    report.version = caps.version.text;
    const old = !caps.importFrom;
    add({
      id: 'version',
      status: old || caps.version.major < 7 ? 'warn' : 'ok',
      detail: `Proxmox VE ${caps.version.text}; ${describeCapabilities(caps).join('; ')}`,
      ...(old
        ? {
            fix: 'PVE < 7.2 has no import-from: VMs must be cloned from templates (spec.forProvider.template); upgrading to 8.3+ also allows importing cloud images from import volumes',
          }
        : {}),
    });
    const needs = allNeeds.filter(
      (n) =>
        n.site === site.name ||
        (!n.site && (siteCount === 1 || (n.node !== undefined && (site.nodes ?? []).includes(n.node)))),
    );
    const ctx: Ctx = { site, c, caps, add, needs, secrets };
    const nodes = await checkNodes(ctx);
    const storagesUsed = new Set<string>();
    const bridgesUsed = new Set<string>();
    for (const node of nodes) {
      for (const b of await checkBridges(ctx, node)) bridgesUsed.add(b);
      const st = await checkStorages(ctx, node);
      for (const s of st.used) storagesUsed.add(s);
      for (const s of await checkImagesAndTemplates(ctx, node, st.storages)) storagesUsed.add(s);
    }
    if (site.sshProblem)
      add({ id: 'ssh', status: 'fail', detail: site.sshProblem, fix: 'add the Secret with stringData.privateKey' });
    else if (site.ssh) for (const check of await checkSsh(c, site.ssh, nodes)) add(check);
    const pools = await checkPools(ctx);
    await checkPrivileges(ctx, {
      nodes,
      storages: [...storagesUsed],
      bridges: needs.length ? [...bridgesUsed] : [...bridgesUsed].slice(0, 1),
      pools,
    });
  } finally {
    await c.close();
  }
  return report;
}

export async function runDoctor(o: DoctorOptions): Promise<DoctorReport> {
  const sites: SiteReport[] = [];
  for (const s of o.sites) sites.push(await checkSite(s, o.needs ?? [], o.sites.length, o.client));
  // Manifests naming a site that is not configured.
  const names = new Set(o.sites.map((s) => s.name));
  const stray = (o.needs ?? []).filter((n) => n.site && !names.has(n.site));
  if (stray.length && sites[0]) {
    for (const n of stray) {
      sites[0].checks.push({
        id: `manifest ${n.name}`,
        status: 'fail',
        detail: `${n.where}: site '${n.site}' is not in the configuration (sites: ${[...names].join(', ')})`,
        fix: `fix spec.forProvider.site in ${n.where}, or add the site to the ProviderConfig`,
      });
    }
  }
  let problems = 0;
  let warnings = 0;
  for (const s of sites) {
    for (const c of s.checks) {
      if (c.status === 'fail') problems++;
      if (c.status === 'warn') warnings++;
    }
  }
  return { ok: problems === 0, problems, warnings, sites };
}

const MARK: Record<CheckStatus, string> = { ok: 'ok  ', warn: 'WARN', fail: 'FAIL', skip: 'skip' };

export function renderText(r: DoctorReport): string {
  const lines: string[] = [];
  for (const s of r.sites) {
    lines.push(`site ${s.site} (${s.endpoints.join(', ')})${s.version ? `: Proxmox VE ${s.version}` : ''}`);
    const width = Math.min(36, Math.max(...s.checks.map((c) => c.id.length)));
    for (const c of s.checks) {
      lines.push(`  ${MARK[c.status]}  ${c.id.padEnd(width)}  ${c.detail}`);
      if (c.fix && c.status !== 'ok') lines.push(`  ${' '.repeat(4)}  ${' '.repeat(width)}  fix: ${c.fix}`);
    }
    lines.push('');
  }
  const verdict = r.ok ? 'everything the provider needs is there' : 'the provider cannot work as configured';
  lines.push(
    `${r.problems} problem${r.problems === 1 ? '' : 's'}, ${r.warnings} warning${r.warnings === 1 ? '' : 's'}: ${verdict}`,
  );
  return `${lines.join('\n')}\n`;
}

// --- targets ---------------------------------------------------------------------------------------

/** Doctor sites from a loaded ProviderConfig; credential problems become failed checks, not exceptions. */
export function doctorSitesFromConfig(loaded: LoadedProviderConfig, only?: string): DoctorSite[] {
  const sites = only ? [findSite(loaded.config, only)] : loaded.config.spec.sites;
  return sites.map((s) => {
    const i = loaded.config.spec.sites.indexOf(s);
    const ref = siteSecretRef(loaded.config, s);
    const line = loaded.lineOf(`spec.sites[${i}]`);
    const base: DoctorSite = {
      name: s.name,
      endpoints: s.endpoints,
      nodes: s.nodes,
      tls: siteTls(s),
      where: `${loaded.file}${line ? `:${line}` : ''} (spec.sites[${i}])`,
      credentialsSource: `Secret ${ref.namespace}/${ref.name}`,
    };
    try {
      base.ssh = siteSsh(loaded, s.name);
    } catch (e) {
      base.sshProblem = e instanceof Error ? e.message : String(e);
    }
    try {
      return { ...base, credentials: siteCredentials(loaded, s.name) };
    } catch (e) {
      return {
        ...base,
        credentialsProblem: {
          detail: e instanceof Error ? e.message : String(e),
          fix: `provide Secret ${ref.namespace}/${ref.name} with tokenid + token (or username + password): in ${loaded.file}, or with --secret-file`,
        },
      };
    }
  });
}
