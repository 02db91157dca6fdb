/**
 * The ProxmoxTemplate ExternalClient: per target node (once on a shared storage) one template VM
 * of the current version, made in two tracked tasks: `POST /nodes/{node}/qemu` with the image
 * imported (template-build.ts), then `POST .../template` (qemu-server `src/PVE/API2/Qemu.pm`
 * template; it refuses a running VM or one with snapshots, neither of which a fresh build has).
 * One mutation per reconcile; builds on different nodes overlap. Template VMs of an earlier
 * version (or duplicates of a build that two runtimes raced) are destroyed once every node has the
 * current one and no linked clone depends on them; a full clone does not depend on its template.
 *
 * The template VMs are found in Proxmox by name and marker on every observe, so the status is a
 * cache: a lost status, a restart or the other runtime finds them and builds nothing twice. A
 * build whose create was lost before its placeholder carried the marker may make a second VM of
 * the same version; the lower VMID is kept and the other retired like an old version.
 */
import type { ProxmoxImage } from '../api/proxmoximage.ts';
import type { ProxmoxTemplate, TemplateAtProvider, TemplateNode } from '../api/proxmoxtemplate.ts';
import { setCondition } from '../engine/resource.ts';
import type { Connector, ExternalClient, ExternalObservation } from '../engine/types.ts';
import { AlreadyExistsError, type PveClient, PveError } from '../proxmox/index.ts';
import type { StorageEntry } from '../proxmox/types.ts';
import { credentialProblem, explain } from '../vm/conditions.ts';
import type { ProviderConfigSource } from '../vm/connector.ts';
import { REFERENCE_NOT_READY, refuse } from './references.ts';
import { type ImageSite, SiteClients, type SiteClientsOptions } from './site.ts';
import {
  buildConfig,
  findTemplateVms,
  importSource,
  LINKED_CLONE_TYPES,
  linkedClonesOf,
  type TemplateVm,
  templateStorage,
  templateVersion,
} from './template-build.ts';

export interface TemplateClientOptions extends SiteClientsOptions {
  taskPollMs?: number;
  /** The template's image, Ready (else a ReferenceNotReady error): see references.ts readyImage. */
  image: (t: ProxmoxTemplate) => ProxmoxImage;
  /** The VMs that clone the template (`namespace/name`): a deletion waits while there is anyone. */
  users?: (t: ProxmoxTemplate) => string[];
}

type Action =
  | { kind: 'create'; host: string }
  | { kind: 'template'; vm: TemplateVm }
  | { kind: 'destroy'; vm: TemplateVm };

interface Plan {
  vms: TemplateVm[];
  next?: Action;
  /** Only when building: what create needs. */
  build?: { img: ProxmoxImage; version: string; source: string; storage: StorageEntry };
}

function at(r: ProxmoxTemplate): TemplateAtProvider {
  r.status ??= {};
  r.status.atProvider ??= {};
  return r.status.atProvider;
}

function ready(r: ProxmoxTemplate, status: 'True' | 'False', reason: string, message?: string): void {
  setCondition(
    r,
    { type: 'Ready', status, reason, ...(message ? { message } : {}), observedGeneration: r.metadata.generation },
    Date.now(),
  );
}

export class TemplateExternal implements ExternalClient<ProxmoxTemplate> {
  private readonly site: ImageSite;
  private readonly client: PveClient;
  private readonly opts: TemplateClientOptions;
  private plan: Plan | undefined;

  constructor(site: ImageSite, opts: TemplateClientOptions, signal?: AbortSignal) {
    this.site = site;
    this.client = site.client.withSignal(signal);
    this.opts = opts;
  }

  private get pollMs(): number {
    return this.opts.taskPollMs ?? 2000;
  }

  private async guard<T>(p: Promise<T>): Promise<T> {
    try {
      return await p;
    } catch (e) {
      throw explain(this.site.name, credentialProblem(this.site.name, e));
    }
  }

  /** The tasks recorded in status: finished ones dropped, a failed build reported. */
  private async settleTasks(r: ProxmoxTemplate): Promise<Error | undefined> {
    const a = at(r);
    const tasks = a.tasks ?? [];
    a.tasks = [];
    let failure: Error | undefined;
    for (const t of tasks) {
      const check = await this.guard(this.client.checkTask(t.upid));
      if (check.state === 'running') a.tasks.push(t);
      else {
        this.site.reserved.delete(t.vmid);
        if (check.state === 'failed')
          failure =
            t.action === 'destroy'
              ? explain(this.site.name, check.error)
              : refuse(
                  'TemplateBuildFailed',
                  `the ${t.action === 'create' ? 'build (import of the image)' : 'conversion to a template'} of VM ${t.vmid} on node ${t.node} failed: ${check.error.message}`,
                );
      }
    }
    if (!a.tasks.length) delete a.tasks;
    return failure;
  }

  async observe(r: ProxmoxTemplate): Promise<ExternalObservation> {
    const a = at(r);
    a.site = this.site.name;
    const users = this.opts.users?.(r) ?? [];
    if (users.length) a.users = users;
    else delete a.users;
    const failure = await this.settleTasks(r);
    const vms = await this.guard(findTemplateVms(this.client, r, this.site.installation));
    for (const v of vms) this.site.reserved.delete(v.vmid);
    const tasks = a.tasks ?? [];
    const exists = vms.length > 0 || tasks.length > 0;
    if (r.metadata.deletionTimestamp) {
      this.plan = { vms };
      return { exists, upToDate: true };
    }
    if (failure) {
      ready(r, 'False', 'Unavailable', failure.message);
      throw failure;
    }
    const img = this.opts.image(r);
    const fp = r.spec.forProvider;
    const caps = await this.guard(this.client.capabilities());
    const source = importSource(img, caps, this.site.name);
    const version = templateVersion(r, img);
    a.version = version;
    a.image = img.status!.atProvider!.volid!;
    const imageNodes = img.status?.atProvider?.nodes ?? [];
    const targets = [...(fp.nodes ?? imageNodes)].sort();
    const missingImage = targets.filter((n) => !imageNodes.includes(n));
    if (missingImage.length)
      throw refuse(
        REFERENCE_NOT_READY,
        `ProxmoxImage ${img.metadata.name} is not on node(s) ${missingImage.join(', ')} (it is on: ${imageNodes.join(', ') || 'none'}); add them to the image's spec.forProvider.nodes`,
        true,
      );
    if (!targets.length) throw refuse(REFERENCE_NOT_READY, `ProxmoxImage ${img.metadata.name} is on no node yet`, true);
    const storageId = fp.storage ?? 'local-lvm';
    const storage = templateStorage(await this.guard(this.client.nodeStorages(targets[0]!)), storageId, targets[0]!);
    const shared = storage.shared === 1;
    const hosts = shared ? [targets[0]!] : targets;
    const busy = new Set(tasks.map((t) => t.node));
    const linkedClone = LINKED_CLONE_TYPES.has(storage.type);
    // Per host the lowest VMID of the current version is the template; any other of ours retires.
    const current = new Map<string, TemplateVm>();
    for (const v of vms)
      if (v.version === version && hosts.includes(v.host) && !current.has(v.host)) current.set(v.host, v);
    // `template: 1` is written before the disks become base volumes (qemu-server Qemu.pm
    // template: the config first, then template_create): converted once its task has ended.
    const converting = new Set(tasks.filter((t) => t.action === 'template').map((t) => t.vmid));
    const built = (v: TemplateVm | undefined) => v?.template === true && !converting.has(v.vmid);
    const keep = new Set([...current.values()].map((v) => v.vmid));
    const old = vms.filter((v) => !keep.has(v.vmid));
    const entries: TemplateNode[] = [];
    for (const node of targets) {
      const v = current.get(shared ? hosts[0]! : node);
      if (v)
        entries.push({ node, vmid: v.vmid, host: v.host, version, ready: built(v), storage: storageId, linkedClone });
    }
    a.nodes = entries;
    let next: Action | undefined;
    for (const host of hosts) {
      if (busy.has(host)) continue;
      const v = current.get(host);
      if (!v) next ??= { kind: 'create', host };
      else if (!v.template && !v.lock) next ??= { kind: 'template', vm: v };
    }
    const allReady = hosts.every((h) => built(current.get(h)));
    const retiring: NonNullable<TemplateAtProvider['retiring']> = [];
    if (allReady) {
      for (const v of old) {
        const blockedBy = await this.guard(linkedClonesOf(this.client, v));
        retiring.push({ vmid: v.vmid, host: v.host, version: v.version, ...(blockedBy.length ? { blockedBy } : {}) });
        if (!blockedBy.length && !v.lock && !busy.has(v.host)) next ??= { kind: 'destroy', vm: v };
      }
    } else for (const v of old) retiring.push({ vmid: v.vmid, host: v.host, version: v.version });
    if (retiring.length) a.retiring = retiring;
    else delete a.retiring;
    this.plan = { vms, ...(next ? { next } : {}), build: { img, version, source, storage } };
    if (allReady) {
      a.step = 'Ready';
      const blocked = retiring.filter((x) => x.blockedBy);
      ready(
        r,
        'True',
        'Available',
        blocked.length
          ? `version ${version} is built; ${blocked.map((x) => `old template VM ${x.vmid} stays while linked clones ${x.blockedBy!.join(', ')} depend on it`).join('; ')}`
          : undefined,
      );
    } else {
      a.step = tasks.some((t) => t.action === 'template') ? 'Converting' : 'Building';
      const todo = hosts.filter((h) => !built(current.get(h)));
      ready(r, 'False', 'Creating', `building version ${version} on ${todo.join(', ')}`);
    }
    return {
      exists,
      upToDate: next === undefined,
      ...(tasks.length || !allReady ? { requeueAfterMs: this.pollMs } : {}),
    };
  }

  async preflight(r: ProxmoxTemplate): Promise<{ waitMs?: number; message?: string }> {
    if (!this.plan) await this.observe(r);
    return {};
  }

  async prepareCreate(r: ProxmoxTemplate): Promise<{ externalName: string }> {
    return { externalName: r.metadata.name };
  }

  create(r: ProxmoxTemplate): Promise<{ requeueAfterMs?: number }> {
    return this.update(r);
  }

  /** A free VMID for a build: the cluster's next one, past those this process handed out. */
  private async pickVmid(): Promise<number> {
    let id = await this.guard(this.client.nextId());
    for (; ; id++) {
      if (this.site.reserved.has(id)) continue;
      // Reserved before the look, so a concurrent build of this process skips it meanwhile.
      this.site.reserved.add(id);
      let free: boolean;
      try {
        free = await this.guard(this.client.isVmidFree(id));
      } catch (e) {
        this.site.reserved.delete(id);
        throw e;
      }
      if (free) return id;
      this.site.reserved.delete(id);
    }
  }

  async update(r: ProxmoxTemplate): Promise<{ requeueAfterMs?: number }> {
    if (!this.plan) await this.observe(r);
    const next = this.plan?.next;
    const a = at(r);
    if (!next) return { requeueAfterMs: this.pollMs };
    if (next.kind === 'create') {
      const b = this.plan!.build!;
      const vmid = await this.pickVmid();
      const config = buildConfig(r, b.img, {
        vmid,
        version: b.version,
        installation: this.site.installation,
        source: b.source,
        storage: b.storage,
      });
      let upid: string;
      try {
        upid = await this.client.createVm(next.host, vmid, config);
      } catch (e) {
        this.site.reserved.delete(vmid);
        if (e instanceof AlreadyExistsError || (e instanceof PveError && /already exists/.test(e.message)))
          throw refuse(
            'VMIDTaken',
            `VMID ${vmid} was taken before the template was created there; another is chosen`,
            true,
          );
        throw explain(this.site.name, credentialProblem(this.site.name, e));
      }
      a.tasks = [...(a.tasks ?? []), { node: next.host, vmid, upid, action: 'create' }];
      a.step = 'Building';
    } else if (next.kind === 'template') {
      const upid = await this.guard(this.client.templateVm(next.vm.host, next.vm.vmid));
      a.tasks = [...(a.tasks ?? []), { node: next.vm.host, vmid: next.vm.vmid, upid, action: 'template' }];
      a.step = 'Converting';
    } else await this.destroy(r, next.vm);
    return { requeueAfterMs: this.pollMs };
  }

  private async destroy(r: ProxmoxTemplate, vm: TemplateVm): Promise<void> {
    const upid = await this.guard(
      this.client.deleteVm(vm.host, vm.vmid, { purge: true, destroyUnreferencedDisks: true }),
    );
    const a = at(r);
    a.tasks = [...(a.tasks ?? []), { node: vm.host, vmid: vm.vmid, upid, action: 'destroy' }];
  }

  /** Destroy the template VMs, one per reconcile, once no VM refers to the template and no linked clone depends on them. */
  async delete(r: ProxmoxTemplate): Promise<{ requeueAfterMs?: number }> {
    const users = this.opts.users?.(r) ?? [];
    if (users.length)
      throw refuse(
        'TemplateInUse',
        `ProxmoxVMs ${users.join(', ')} clone this template; it is removed once they are deleted or refer to another template`,
        true,
      );
    if (!this.plan) await this.observe(r);
    const a = at(r);
    if (a.tasks?.length) return { requeueAfterMs: this.pollMs };
    const blocked: string[] = [];
    for (const vm of this.plan?.vms ?? []) {
      if (vm.lock) continue;
      const clones = await this.guard(linkedClonesOf(this.client, vm));
      if (clones.length) {
        blocked.push(`template VM ${vm.vmid} has linked clones ${clones.join(', ')}`);
        continue;
      }
      await this.destroy(r, vm);
      a.step = 'Deleting';
      return { requeueAfterMs: this.pollMs };
    }
    if (blocked.length)
      throw refuse(
        'TemplateInUse',
        `${blocked.join('; ')}: a linked clone needs its template's disk; delete those VMs first`,
        true,
      );
    return { requeueAfterMs: this.pollMs };
  }
}

export class TemplateConnector implements Connector<ProxmoxTemplate> {
  private readonly sites: SiteClients;
  private readonly opts: TemplateClientOptions;

  constructor(source: ProviderConfigSource, opts: TemplateClientOptions) {
    this.sites = new SiteClients(source, opts);
    this.opts = opts;
  }

  async connect(r: ProxmoxTemplate, signal?: AbortSignal): Promise<TemplateExternal> {
    return new TemplateExternal(await this.sites.connect(r), this.opts, signal);
  }

  close(): Promise<void> {
    return this.sites.close();
  }
}
