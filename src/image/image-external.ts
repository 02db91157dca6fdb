/**
 * The ProxmoxImage ExternalClient: Proxmox VE downloads the file itself (`POST
 * /nodes/{node}/storage/{storage}/download-url` with `checksum` and `checksum-algorithm`, a
 * `download` task), onto each target node, or once on a shared storage. One download is started
 * per reconcile and tracked by its UPID in status.atProvider.tasks; the file is looked for by its
 * volume id on every observe, so a file that is already there (ours from an earlier run, or put
 * there by hand) is adopted instead of downloaded again, and a lost status costs nothing.
 *
 * PVE facts relied on (pve-storage `src/PVE/API2/Storage/Status.pm` download_url, 0c56bad 9.1.7):
 * the worker hashes the downloaded file and dies with `checksum mismatch: got 'X' != expect 'Y'`
 * before the file is renamed into place, so a mismatch leaves no file; an existing file of that
 * name is never overwritten (`refusing to override existing file`); the target storage must be
 * file based and hold the content type. `import` content exists from PVE 8.3 (the download-url
 * schema's content enum in /work/shared/pve-api: 7.4 has iso and vztmpl only).
 */

import { createHash } from 'node:crypto';
import type { ProxmoxImage } from '../api/proxmoximage.ts';
import { type ImageAtProvider, imageContent, imageFileName, imageSpecProblems } from '../api/proxmoximage.ts';
import { setCondition } from '../engine/resource.ts';
import { type Connector, type ExternalClient, type ExternalObservation, ReasonedError } from '../engine/types.ts';
import type { PveClient } from '../proxmox/index.ts';
import { credentialProblem, explain } from '../vm/conditions.ts';
import type { ProviderConfigSource } from '../vm/connector.ts';
import { refuse } from './references.ts';
import { type ImageSite, SiteClients, type SiteClientsOptions } from './site.ts';

export interface ImageClientOptions extends SiteClientsOptions {
  /** How soon to look at a task in flight again (default 2 s). */
  taskPollMs?: number;
  /** Who refers to the image (`Kind namespace/name`): a deletion waits while there is anyone. */
  users?: (r: ProxmoxImage) => string[];
}

/** What is there now, read from Proxmox. */
interface Look {
  content: 'import' | 'iso';
  fileName: string;
  volid: string;
  storage: string;
  targets: string[];
  shared: boolean;
  /** Node -> size of the file there. */
  present: Map<string, number>;
}

/** Storage types download-url can write to (file based). */
export const FILE_STORAGES: ReadonlySet<string> = new Set(['dir', 'nfs', 'cifs', 'cephfs', 'glusterfs', 'btrfs']);

function at(r: ProxmoxImage): ImageAtProvider {
  r.status ??= {};
  r.status.atProvider ??= {};
  return r.status.atProvider;
}

function ready(r: ProxmoxImage, status: 'True' | 'False', reason: string, message?: string): void {
  setCondition(
    r,
    { type: 'Ready', status, reason, ...(message ? { message } : {}), observedGeneration: r.metadata.generation },
    Date.now(),
  );
}

/** What a download was for: a change of any of these is a new attempt. */
function specHash(r: ProxmoxImage): string {
  const fp = r.spec.forProvider;
  return createHash('sha256')
    .update(
      JSON.stringify([
        fp.url,
        fp.checksum.algorithm,
        fp.checksum.value.toLowerCase(),
        imageFileName(fp),
        fp.storage,
        fp.content,
      ]),
    )
    .digest('hex')
    .slice(0, 16);
}

export class ImageExternal implements ExternalClient<ProxmoxImage> {
  private readonly site: ImageSite;
  private readonly client: PveClient;
  private readonly opts: ImageClientOptions;
  private look: Look | undefined;

  constructor(site: ImageSite, opts: ImageClientOptions, signal?: AbortSignal) {
    this.site = site;
    this.client = site.client.withSignal(signal);
    this.opts = opts;
  }

  private async guard<T>(p: Promise<T>): Promise<T> {
    try {
      return await p;
    } catch (e) {
      throw explain(this.site.name, credentialProblem(this.site.name, e));
    }
  }

  /** The spec's checks and what each target node holds; every refusal names its fix. */
  private async read(r: ProxmoxImage): Promise<Look> {
    const fp = r.spec.forProvider;
    const problems = imageSpecProblems(fp);
    if (problems.length) throw refuse('InvalidSpec', problems.map((p) => `${p.field}: ${p.message}`).join('; '));
    const caps = await this.client.capabilities();
    if (caps.version.major < 7)
      throw refuse(
        'DownloadUnsupported',
        `PVE ${caps.version.text} on site ${this.site.name} has no download-url (POST /nodes/{node}/storage/{storage}/download-url is in the API from PVE 7): upload the image by hand and set spec.forProvider.image of the VMs to its volume, or upgrade`,
      );
    if (fp.content === 'import' && !caps.importContent)
      throw refuse(
        'ImportContentUnsupported',
        `PVE ${caps.version.text} on site ${this.site.name} has no 'import' content type (added in 8.3): set spec.forProvider.content to iso (a VM can then import the image only with root@pam password credentials), or upgrade to PVE >= 8.3`,
      );
    const content = imageContent(fp, caps.importContent);
    const fileName = imageFileName(fp);
    const storage = fp.storage ?? 'local';
    const volid = `${storage}:${content}/${fileName}`;
    const nodes = await this.client.clusterResources('node');
    const online = nodes.filter((n) => n.status === 'online').map((n) => n.node!);
    for (const n of fp.nodes ?? []) {
      const e = nodes.find((x) => x.node === n);
      if (!e)
        throw refuse(
          'NodeNotFound',
          `node '${n}' (spec.forProvider.nodes) is not part of site ${this.site.name} (nodes: ${nodes.map((x) => x.node).join(', ')})`,
        );
      if (e.status !== 'online')
        throw refuse('NodeUnhealthy', `node ${n} is ${e.status ?? 'unknown'}; waiting for it`, true);
    }
    const targets = [...(fp.nodes ?? online)].sort();
    if (!targets.length) throw refuse('NodeUnhealthy', `no node of site ${this.site.name} is online`, true);
    let shared = false;
    const present = new Map<string, number>();
    for (const node of targets) {
      const s = (await this.client.nodeStorages(node)).find((x) => x.storage === storage);
      if (!s)
        throw refuse(
          'StorageNotFound',
          `storage '${storage}' (spec.forProvider.storage) does not exist on node ${node}; pick a file-based storage that every node of spec.forProvider.nodes has`,
        );
      const types = s.content.split(',');
      if (!types.includes(content) || !FILE_STORAGES.has(s.type))
        throw refuse(
          'StorageContentMissing',
          `storage '${storage}' on node ${node} (type ${s.type}, content ${s.content}) does not hold '${content}' files; add '${content}' to its content types (Datacenter > Storage > Edit > Content; a file-based storage: ${[...FILE_STORAGES].join(', ')}) or set spec.forProvider.storage to one that holds them`,
        );
      if (s.active === 0 || s.enabled === 0)
        throw refuse('StorageUnavailable', `storage '${storage}' is not active on node ${node}`, true);
      shared = s.shared === 1;
      const vol = (await this.client.storageContent(node, storage, { content })).find((v) => v.volid === volid);
      if (vol) present.set(node, vol.size);
      // A shared storage holds one file for all: one look is enough.
      if (shared) {
        if (vol) for (const n of targets) present.set(n, vol.size);
        break;
      }
    }
    return { content, fileName, volid, storage, targets, shared, present };
  }

  async observe(r: ProxmoxImage): Promise<ExternalObservation> {
    const a = at(r);
    // The tasks in flight: finished downloads count as ours, failed ones are reported.
    const tasks = [...(a.tasks ?? [])];
    a.tasks = [];
    let failure: Error | undefined;
    for (const t of tasks) {
      const check = await this.guard(this.client.checkTask(t.upid));
      if (check.state === 'running') {
        a.tasks.push(t);
        continue;
      }
      if (check.state === 'ok') {
        if (t.action === 'download') {
          a.downloaded = [...new Set([...(a.downloaded ?? []), t.node])].sort();
          delete a.lastFailure;
        }
        if (t.action === 'delete') a.downloaded = (a.downloaded ?? []).filter((n) => n !== t.node);
        continue;
      }
      const msg = check.error.message;
      // Someone else's file appeared meanwhile: it is adopted by the look below.
      if (/refusing to override existing file/.test(msg)) continue;
      failure =
        t.action !== 'download'
          ? explain(this.site.name, check.error)
          : /checksum mismatch/.test(msg)
            ? refuse(
                'ChecksumMismatch',
                `the download of ${r.spec.forProvider.url} to node ${t.node} failed: ${msg}. Proxmox VE kept no file. Fix spec.forProvider.checksum (the value the image's publisher lists for this URL) or the URL`,
              )
            : refuse(
                'DownloadFailed',
                `the download of ${r.spec.forProvider.url} to node ${t.node} failed: ${msg}. Check that the node reaches the URL`,
              );
    }
    if (!a.tasks.length) delete a.tasks;
    // Read after the tasks: a download that ended meanwhile has its file there in this look.
    const look = await this.guard(this.read(r));
    this.look = look;
    a.site = this.site.name;
    a.volid = look.volid;
    a.content = look.content;
    a.targetNodes = look.targets;
    a.shared = look.shared;
    const users = this.opts.users?.(r) ?? [];
    if (users.length) a.users = users;
    else delete a.users;
    const inFlight = a.tasks ?? [];
    const spec = specHash(r);
    if (failure instanceof ReasonedError) {
      const prev = a.lastFailure?.for === spec ? a.lastFailure.attempts : 0;
      a.lastFailure = {
        for: spec,
        reason: failure.reason,
        message: failure.message,
        at: new Date().toISOString(),
        attempts: prev + 1,
      };
    }
    if (failure && !r.metadata.deletionTimestamp) {
      ready(r, 'False', 'Unavailable', failure.message);
      throw failure;
    }
    if (a.lastFailure && a.lastFailure.for !== spec) delete a.lastFailure;
    // A failed download is not sent again at once: a checksum mismatch waits for a change of the
    // spec, another failure for its backoff.
    const lf = a.lastFailure;
    const waitMs = lf ? Math.min(600_000, 30_000 * 2 ** (lf.attempts - 1)) : 0;
    const held = lf !== undefined && (lf.reason === 'ChecksumMismatch' || Date.now() - Date.parse(lf.at) < waitMs);
    if (held && lf && !r.metadata.deletionTimestamp) {
      ready(r, 'False', 'Unavailable', lf.message);
      // Downloads still running finish (or fail) first; none is started meanwhile.
      if (inFlight.length) return { exists: true, upToDate: true, requeueAfterMs: this.opts.taskPollMs ?? 2000 };
      throw lf.reason === 'ChecksumMismatch'
        ? refuse(lf.reason, lf.message)
        : refuse(lf.reason, `${lf.message} (retried ${Math.round(waitMs / 1000)} s after the failure)`, true);
    }
    const nodes = [...look.present.keys()].sort();
    a.nodes = nodes;
    if (look.present.size) a.size = Math.max(...look.present.values());
    // Deleting: the engine's Ready (Deleting) stays, which tells it the delete was issued.
    if (r.metadata.deletionTimestamp)
      return {
        exists: look.present.size > 0 || inFlight.length > 0,
        upToDate: true,
        ...(inFlight.length ? { requeueAfterMs: this.opts.taskPollMs ?? 2000 } : {}),
      };
    const downloaded = new Set(a.downloaded ?? []);
    // On a shared storage the node that downloaded stands for all.
    const adopted = look.shared && downloaded.size ? [] : nodes.filter((n) => !downloaded.has(n));
    if (adopted.length) a.adopted = adopted;
    else delete a.adopted;
    const busy = new Set(inFlight.map((t) => t.node));
    const missing = look.shared
      ? nodes.length
        ? []
        : look.targets.slice(0, 1)
      : look.targets.filter((n) => !look.present.has(n));
    const pending = missing.filter((n) => !busy.has(n));
    const exists = look.present.size > 0 || inFlight.length > 0;
    if (!missing.length && !inFlight.length) {
      a.step = 'Ready';
      ready(
        r,
        'True',
        'Available',
        adopted.length
          ? `adopted the existing file ${look.volid} on ${adopted.join(', ')}: it was there before this resource downloaded it, and Proxmox VE has no API that hashes a stored file, so its checksum was not verified`
          : undefined,
      );
    } else {
      a.step = inFlight.some((t) => t.action === 'delete') ? 'Deleting' : 'Downloading';
      ready(r, 'False', 'Creating', `downloading ${look.volid} to ${missing.join(', ')}`);
    }
    return {
      exists,
      upToDate: pending.length === 0,
      ...(inFlight.length ? { requeueAfterMs: this.opts.taskPollMs ?? 2000 } : {}),
    };
  }

  async preflight(r: ProxmoxImage): Promise<{ waitMs?: number; message?: string }> {
    this.look ??= await this.guard(this.read(r));
    return {};
  }

  async prepareCreate(r: ProxmoxImage): Promise<{ externalName: string }> {
    this.look ??= await this.guard(this.read(r));
    return { externalName: this.look.volid };
  }

  create(r: ProxmoxImage): Promise<{ requeueAfterMs?: number }> {
    return this.update(r);
  }

  /** Start the download onto the next node that lacks the file (one per reconcile). */
  async update(r: ProxmoxImage): Promise<{ requeueAfterMs?: number }> {
    const look = this.look ?? (await this.guard(this.read(r)));
    const a = at(r);
    const busy = new Set((a.tasks ?? []).map((t) => t.node));
    const node = look.shared
      ? look.present.size || busy.size
        ? undefined
        : look.targets[0]
      : look.targets.find((n) => !look.present.has(n) && !busy.has(n));
    if (!node) return { requeueAfterMs: this.opts.taskPollMs ?? 2000 };
    // A download of this file already running there (ours, whose UPID a lost status write
    // dropped, or anyone's): wait for it instead of sending a second one. Its task id is the file
    // name (pve-storage Status.pm download_url forks `download` with the encoded file name).
    const running = (await this.guard(this.client.activeTasks(node))).find(
      (t) => t.type === 'download' && t.id === look.fileName,
    );
    if (running) {
      a.tasks = [...(a.tasks ?? []), { node, upid: running.upid, action: 'download' }];
      return { requeueAfterMs: this.opts.taskPollMs ?? 2000 };
    }
    const fp = r.spec.forProvider;
    const upid = await this.guard(
      this.client.downloadUrl(node, look.storage, {
        url: fp.url,
        content: look.content,
        filename: look.fileName,
        checksum: { algorithm: fp.checksum.algorithm, value: fp.checksum.value.toLowerCase() },
      }),
    );
    a.tasks = [...(a.tasks ?? []), { node, upid, action: 'download' }];
    a.step = 'Downloading';
    return { requeueAfterMs: this.opts.taskPollMs ?? 2000 };
  }

  /** Remove the file, node by node (once on a shared storage), only while nothing refers to it. */
  async delete(r: ProxmoxImage): Promise<{ requeueAfterMs?: number }> {
    const users = this.opts.users?.(r) ?? [];
    if (users.length)
      throw refuse(
        'ImageInUse',
        `${users.join(', ')} still refer to this image; the file is removed once they are deleted or refer to another image`,
        true,
      );
    const look = this.look ?? (await this.guard(this.read(r)));
    const a = at(r);
    if (a.tasks?.length) return { requeueAfterMs: this.opts.taskPollMs ?? 2000 };
    const node = [...look.present.keys()].sort()[0];
    if (!node) return {};
    const upid = await this.guard(this.client.deleteVolume(node, look.storage, look.volid));
    if (upid) a.tasks = [{ node, upid, action: 'delete' }];
    a.step = 'Deleting';
    return { requeueAfterMs: this.opts.taskPollMs ?? 2000 };
  }
}

/** One ImageExternal per reconcile, over one client per site. */
export class ImageConnector implements Connector<ProxmoxImage> {
  private readonly sites: SiteClients;
  private readonly opts: ImageClientOptions;

  constructor(source: ProviderConfigSource, opts: ImageClientOptions = {}) {
    this.sites = new SiteClients(source, opts);
    this.opts = opts;
  }

  async connect(r: ProxmoxImage, signal?: AbortSignal): Promise<ImageExternal> {
    return new ImageExternal(await this.sites.connect(r), this.opts, signal);
  }

  close(): Promise<void> {
    return this.sites.close();
  }
}
