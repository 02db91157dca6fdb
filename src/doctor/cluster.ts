/**
 * `doctor`'s checks of what the provider needs from a site it reached and logged in to: node
 * health, bridges, storages that can hold VM disks, the images / templates / pools the manifests
 * reference, and the privileges the credentials lack. A missing thing names the manifest (file:line)
 * that asks for it, and the fix.
 */
import { authIdOf, type Credentials } from '../proxmox/auth.ts';
import type { Capabilities } from '../proxmox/capabilities.ts';
import type { PveClient } from '../proxmox/client.ts';
import { PermissionError, UnavailableError } from '../proxmox/errors.ts';
import type { NodeListEntry, StorageEntry, StorageVolume, VmListEntry } from '../proxmox/types.ts';
import { type Check, type DoctorSite, msg } from './connection.ts';
import type { VmNeeds } from './manifests.ts';

const GiB = 1024 ** 3;

function fmtBytes(n: number | undefined): string {
  if (n === undefined) return '?';
  if (n >= 1024 * GiB) return `${(n / 1024 / GiB).toFixed(1)} TiB`;
  return `${(n / GiB).toFixed(1)} GiB`;
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

export interface Ctx {
  site: DoctorSite;
  c: PveClient;
  caps: Capabilities;
  add: (c: Check) => void;
  needs: VmNeeds[];
  secrets: string[];
}

/** Checks the nodes; returns those present and online (their status may still be unreadable). */
export async function checkNodes(ctx: Ctx): Promise<string[]> {
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
        detail: `${n.at.node ?? n.where}: node '${n.node}' is not a node of site ${site.name} (${wanted.join(', ')})`,
        fix: `fix spec.forProvider.node in ${n.at.node ?? n.where}, or add the node to ${site.where}`,
      });
    }
  }
  return online;
}

function needsOn(ctx: Ctx, node: string): VmNeeds[] {
  return ctx.needs.filter((n) => !n.node || n.node === node);
}

export async function checkBridges(ctx: Ctx, node: string): Promise<string[]> {
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
        problems.push(
          `${b} does not exist (used by ${users.map((u) => `${u.name} at ${u.at.network ?? u.at.networks ?? u.where}`).join(', ')})`,
        );
        fixes.push(
          `create bridge ${b} on ${node} (System → Network → Create → Linux Bridge) or change network/networks[].bridge in ${users.map((u) => u.at.network ?? u.at.networks ?? u.where).join(', ')}; existing bridges: ${names.join(', ') || 'none'}`,
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

export async function checkStorages(ctx: Ctx, node: string): Promise<{ storages: StorageEntry[]; used: string[] }> {
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
    const where = users.map((u) => u.at.storage ?? u.at.disks ?? u.where).join(', ');
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

export async function checkImagesAndTemplates(ctx: Ctx, node: string, storages: StorageEntry[]): Promise<string[]> {
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
          detail: `${n.at.template ?? n.where}: no VM '${n.template}' on ${node}`,
          fix: `create the template VM on ${node} (or fix template in ${n.at.template ?? n.where})`,
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
        detail: `PVE ${caps.version.text} has no import-from (7.2 and later): a VM cannot be created from a cloud image over the API (${n.at.image ?? n.where})`,
        fix: `make a template VM from the image once on the node (\`qm create\`, \`qm importdisk\`, \`qm template\`) and set template: in ${n.at.image ?? n.where} instead of image, or upgrade Proxmox VE`,
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
        detail: `not found on ${node} (looked in ${looked.join(', ') || 'no storage'}) (${n.at.image ?? n.where})`,
        fix: `upload the image to ${node}${caps.importContent ? " (to a storage with content 'import' on PVE 8.3+)" : ''}, or fix image in ${n.at.image ?? n.where}`,
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
          `${found.volid} is ${/^[aeiou]/i.test(String(found.content)) ? 'an' : 'a'} '${found.content}' volume: with ${ctx.site.credentials?.kind === 'token' ? 'an API token' : 'these credentials'} ` +
          `it cannot be imported over the API (import-from accepts 'images'${caps.importContent ? " or 'import'" : ''} volumes; absolute paths are root@pam-only) (${n.at.image ?? n.where})`,
        fix:
          (caps.importContent
            ? `put the image in an 'import' storage (e.g. ${found.volid.replace(/:[a-z]+\//, ':import/')}; enable content 'import' on a dir storage) and reference that; `
            : 'upgrade to PVE 8.3+ and use an import volume; ') +
          `or use template: (clone a template VM) in ${n.at.image ?? n.where}; or give the provider root@pam password credentials`,
      });
    }
  }
  return imageSourceStorages;
}

export async function checkPools(ctx: Ctx): Promise<string[]> {
  const pools = [...new Set(ctx.needs.map((n) => n.pool).filter((p): p is string => !!p))];
  if (!pools.length) return [];
  try {
    const list = (await ctx.c.listPools()).map((p) => p.poolid);
    for (const p of pools) {
      const users = ctx.needs.filter((n) => n.pool === p).map((n) => n.at.pool ?? n.where);
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

export async function checkPrivileges(
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
