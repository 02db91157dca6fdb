/**
 * The storage configuration (`GET /storage`, `GET /storage/{storage}`) and what changes a
 * storage's files: `upload` (multipart, task `imgcopy`), `download-url` (task `download`) and
 * volume delete (task `imgdel`), as pve-storage does them (src/PVE/API2/Storage/Config.pm,
 * Status.pm and Content.pm at 0c56bad, 9.1.7).
 *
 * Which content types may be uploaded or downloaded is the schema's `content` enum (iso and
 * vztmpl; `import` from PVE 8.3), so a 6.4 or 7.4 profile refuses `import` with a 400 like PVE.
 *
 * Nothing in the simulator reaches the internet: `download-url` fetches only from the loopback
 * (`127.0.0.1`, `[::1]`, `localhost`), e.g. a test's own HTTP server. Any other URL fails the
 * task as wget fails without a network (exit code 4).
 */
import { createHash } from 'node:crypto';
import { hasAnyPriv, requirePriv } from '../auth.ts';
import { copyStep, storageLink } from '../bandwidth.ts';
import { die, paramError } from '../errors.ts';
import type { Route, RouteCtx } from '../server.ts';
import type { ClusterState } from '../state.ts';
import type { StorageState } from '../storage.ts';
import { volumePath } from '../storage-files.ts';
import type { TaskHandle } from '../tasks.ts';
import { DURATIONS } from './qemu-common.ts';

/** Every storage of the cluster, once, with the nodes that see it (storage.cfg is cluster-wide). */
function storageConfigs(c: ClusterState): Array<{ s: StorageState; nodes: string[] }> {
  const byId = new Map<string, { s: StorageState; nodes: string[] }>();
  for (const n of c.nodes.values())
    for (const s of n.storages.values()) {
      const e = byId.get(s.id) ?? { s, nodes: [] };
      e.nodes.push(n.name);
      byId.set(s.id, e);
    }
  return [...byId.values()].sort((a, b) => a.s.id.localeCompare(b.s.id));
}

/**
 * A storage.cfg section as `$api_storage_config` returns it: its properties, `content` encoded as
 * a list, `nodes` when the storage is limited to some nodes. The properties are those a default
 * install (`local`, `local-lvm`) or `pvesm add` writes for the type.
 */
function sectionOf(c: ClusterState, e: { s: StorageState; nodes: string[] }): Record<string, unknown> {
  const { s } = e;
  const props: Record<string, unknown> = { type: s.type, storage: s.id, content: [...s.content].sort().join(',') };
  switch (s.type) {
    case 'dir':
      props.path = s.path;
      break;
    case 'nfs':
      Object.assign(props, { path: s.path ?? `/mnt/pve/${s.id}`, server: '192.0.2.50', export: `/export/${s.id}` });
      break;
    case 'cephfs':
      props.path = s.path ?? `/mnt/pve/${s.id}`;
      break;
    case 'lvmthin':
      Object.assign(props, { vgname: 'pve', thinpool: 'data' });
      break;
    case 'lvm':
      props.vgname = 'pve';
      break;
    case 'zfspool':
      Object.assign(props, { pool: 'rpool/data', sparse: 1 });
      break;
    case 'rbd':
      props.pool = s.id;
      break;
  }
  // `shared` is a property of dir/lvm (network storages are shared by type).
  if (s.shared && (s.type === 'dir' || s.type === 'lvm')) props.shared = 1;
  if (!s.enabled) props.disable = 1;
  if (e.nodes.length < c.nodes.size) props.nodes = e.nodes.join(',');
  return props;
}

/** storage.cfg's digest: a SHA-1 of the file as the sections above would write it. */
function storageDigest(c: ClusterState): string {
  const text = storageConfigs(c)
    .map((e) => {
      const { type, storage, ...rest } = sectionOf(c, e);
      return `${type}: ${storage}\n${Object.entries(rest)
        .map(([k, v]) => `\t${k} ${v}\n`)
        .join('')}`;
    })
    .join('\n');
  return createHash('sha1').update(text).digest('hex');
}

export { volumePath };

/** The checks Status.pm `upload` and `download_url` share before their worker. */
function checkFileTarget(
  ctx: RouteCtx,
  notFileBased: string,
  notConfigured: (content: string) => string,
): { s: StorageState; content: string; filename: string } {
  const { c, params } = ctx;
  const s = c.storage(String(params.node), String(params.storage));
  // storage_check_enabled.
  if (!s) die(`storage '${params.storage}' does not exist`);
  if (!s.enabled) die(`storage '${s.id}' is disabled`);
  if (!s.path) die(notFileBased.replace('%s', s.type));
  const content = String(params.content);
  if (!s.content.has(content)) die(notConfigured(content));
  // normalize_content_filename: the base name, unsafe characters replaced.
  const filename = String(params.filename)
    .replace(/\n$/, '')
    .replace(/^.*[/\\]/, '')
    .replace(/[^a-zA-Z0-9_.-]/g, '_');
  if (content === 'iso' && !/[^/]+\.(?:iso|img)$/i.test(filename)) paramError({ filename: 'wrong file extension' });
  if (content === 'vztmpl' && !/[^/]+\.(?:tar(?!\.)|tar\.(?:gz|xz|zst|bz2))$/i.test(filename))
    paramError({ filename: 'wrong file extension' });
  if (content === 'import' && !/^[a-zA-Z0-9\-.+=_]+\.(ova|qcow2|raw|vmdk)$/.test(filename))
    paramError({ filename: 'invalid filename or wrong extension' });
  return { s, content, filename };
}

function addFile(c: ClusterState, s: StorageState, content: string, filename: string, size: number): void {
  const volname = `${content}/${filename}`;
  const ext = /\.([a-z0-9]+)$/i.exec(filename)?.[1]?.toLowerCase() ?? 'raw';
  s.volumes.set(volname, {
    volid: `${s.id}:${volname}`,
    storage: s.id,
    volname,
    content,
    format: content === 'iso' ? 'iso' : content === 'vztmpl' ? 'tgz' : ext,
    size,
    ctime: c.clock.epoch(),
    // An image nobody prepared: no qemu-guest-agent, like the stock cloud images.
    guestAgent: false,
  });
}

/** PVE::Tools::get_file_hash. */
function fileHash(algorithm: string, data: Buffer): string {
  return createHash(algorithm).update(data).digest('hex');
}

function checksumStep(t: TaskHandle, params: Record<string, unknown>, data: Buffer): void {
  const algorithm = params['checksum-algorithm'] as string | undefined;
  if (!algorithm) return;
  const want = String(params.checksum);
  const got = fileHash(algorithm, data);
  // `print "calculating checksum..."` then `OK, …` on the same line, or an empty line and the error.
  if (got.toLowerCase() === want.toLowerCase()) return t.log('calculating checksum...OK, checksum verified');
  t.log('calculating checksum...');
  throw new Error(`checksum mismatch: got '${got}' != expect '${want}'`);
}

/** Loopback only: the simulator never reaches out of the machine it runs on. */
function isLoopback(url: URL): boolean {
  return ['127.0.0.1', 'localhost', '[::1]', '::1'].includes(url.hostname) || /^127\./.test(url.hostname);
}

let tmpSeq = 0;

export const storageRoutes: Route[] = [
  {
    // Config.pm `index`: only storages with Datastore.Audit or Datastore.AllocateSpace.
    method: 'GET',
    path: '/storage',
    handler: ({ c, auth, params }) => {
      const digest = storageDigest(c);
      return storageConfigs(c)
        .filter((e) => hasAnyPriv(c, auth, `/storage/${e.s.id}`, ['Datastore.Audit', 'Datastore.AllocateSpace']))
        .filter((e) => params.type === undefined || e.s.type === params.type)
        .map((e) => ({ ...sectionOf(c, e), digest }));
    },
  },
  {
    // Config.pm `read`: Datastore.Allocate.
    method: 'GET',
    path: '/storage/{storage}',
    perm: ({ c, auth, params }) => requirePriv(c, auth, `/storage/${params.storage}`, ['Datastore.Allocate']),
    handler: ({ c, params }) => {
      const e = storageConfigs(c).find((x) => x.s.id === params.storage);
      if (!e) die(`storage '${params.storage}' does not exist`);
      return { ...sectionOf(c, e), digest: storageDigest(c) };
    },
  },
  {
    method: 'POST',
    path: '/nodes/{node}/storage/{storage}/upload',
    perm: ({ c, auth, params }) => requirePriv(c, auth, `/storage/${params.storage}`, ['Datastore.AllocateTemplate']),
    handler: (ctx) => {
      const { c, auth, params } = ctx;
      const node = String(params.node);
      const { s, content, filename } = checkFileTarget(
        ctx,
        "can't upload to storage type '%s'",
        (ct) => `storage '${params.storage}' does not support '${ct}' content`,
      );
      const tmp = params.tmpfilename as string | undefined;
      if (!tmp || !ctx.upload) die('missing temporary file name');
      const data = ctx.upload.data;
      const dest = volumePath(s, { content, volname: `${content}/${filename}` });
      return ctx.tasks.start(node, 'imgcopy', '', auth, async (t) => {
        t.log(`starting file import from: ${tmp}`);
        checksumStep(t, params, data);
        t.log(`target node: ${node}`);
        t.log(`target file: ${dest}`);
        t.log(`file size is: ${data.length}`);
        t.log(`command: cp -- ${tmp} ${dest}`);
        // The cp into the storage shares its bandwidth with the other copies there (bandwidth.ts).
        await copyStep(c.clock, t, [storageLink(s)], data.length, DURATIONS.fileCopy);
        t.endOfWork();
        // "we simply overwrite the destination file if it already exists"
        addFile(c, s, content, filename, data.length);
        t.log('finished file import successfully');
      });
    },
  },
  {
    // Status.pm `download_url`: Datastore.AllocateTemplate, and Sys.Audit+Sys.Modify on / or
    // Sys.AccessNetwork on the node (9.x; the simulator's privileges have no Sys.AccessNetwork).
    method: 'POST',
    path: '/nodes/{node}/storage/{storage}/download-url',
    perm: ({ c, auth, params }) => {
      requirePriv(c, auth, `/storage/${params.storage}`, ['Datastore.AllocateTemplate']);
      requirePriv(c, auth, '/', ['Sys.Audit', 'Sys.Modify']);
    },
    handler: (ctx) => {
      const { c, auth, params } = ctx;
      const node = String(params.node);
      const { s, content, filename } = checkFileTarget(
        ctx,
        "can't upload to storage type '%s', not a file based storage!",
        (ct) => `storage '${params.storage}' is not configured for content-type '${ct}'`,
      );
      const url = String(params.url);
      const dest = volumePath(s, { content, volname: `${content}/${filename}` });
      // PVE::Tools::encode_text($filename): the worker id must not hold ':' and the like.
      const id = filename.replace(/[%:\s]/g, (ch) => `\\x${ch.charCodeAt(0).toString(16).padStart(2, '0')}`);
      return ctx.tasks.start(node, 'download', id, auth, async (t) => {
        if (params.compression !== undefined && content !== 'iso')
          throw new Error(`decompression not supported for ${content}`);
        t.log(`downloading ${url} to ${dest}`);
        if (s.volumes.has(`${content}/${filename}`)) throw new Error(`refusing to override existing file '${dest}'`);
        const tmp = `${dest}.tmp_dwnl.${c.nextPid()}`;
        const wget = `wget --progress=dot:giga -O ${tmp} ${url}${params['verify-certificates'] === 0 ? ' --no-check-certificate' : ''}`;
        let data: Buffer;
        try {
          data = await fetchLoopback(url);
        } catch (e) {
          throw new Error(`download failed: command '${wget}' failed: exit code ${(e as { code?: number }).code ?? 4}`);
        }
        // wget writes the file into the storage: a copy sharing its bandwidth (bandwidth.ts).
        await copyStep(c.clock, t, [storageLink(s)], data.length, DURATIONS.fileCopy);
        checksumStep(t, params, data);
        t.endOfWork();
        addFile(c, s, content, filename, data.length);
        t.log(`download of '${url}' to '${dest}' finished`);
      });
    },
  },
  {
    method: 'DELETE',
    path: '/nodes/{node}/storage/{storage}/content/{volume}',
    handler: (ctx) => {
      const { c, auth, params } = ctx;
      const node = String(params.node);
      const sid = String(params.storage);
      const volume = String(params.volume);
      // $real_volume_id: a full volid must name this storage.
      let volname = volume;
      if (volume.includes(':')) {
        const [vsid, ...rest] = volume.split(':');
        if (vsid !== sid) paramError({ volume: `storage ID mismatch (${vsid} != ${sid})` });
        volname = rest.join(':');
      }
      const s = c.storage(node, sid);
      if (!s) die(`storage '${sid}' does not exist`);
      const vol = s.volumes.get(volname);
      const owner = vol?.vmid ?? /^(?:\d+\/)?(?:vm|base)-(\d+)-/.exec(volname.replace(/^.*\//, ''))?.[1];
      const backupOwner = /vzdump-(?:qemu|lxc)-(\d+)-/.exec(volname)?.[1];
      if (vol?.content === 'backup' && backupOwner) {
        requirePriv(c, auth, `/storage/${sid}`, ['Datastore.AllocateSpace']);
        requirePriv(c, auth, `/vms/${backupOwner}`, ['VM.Backup']);
      } else requirePriv(c, auth, `/storage/${sid}`, ['Datastore.Allocate']);
      const volid = `${sid}:${volname}`;
      const taskOwner = vol?.content === 'backup' ? backupOwner : owner;
      return ctx.tasks.start(
        node,
        'imgdel',
        `${taskOwner !== undefined ? `${taskOwner}@` : ''}${sid}`,
        auth,
        async (t) => {
          await t.sleep(DURATIONS.config);
          if (!vol) {
            // free_image on a missing volume: file storages warn, block storages fail in their CLI.
            if (s.path) {
              // free_image warns with the volume's filesystem_path (Plugin.pm:1121-1141 at 0c56bad).
              const content = /^(iso|vztmpl|import|snippets|backup)\//.exec(volname)?.[1] ?? 'images';
              t.warn(`disk image '${volumePath(s, { content, volname })}' does not exist`);
              t.log(`Removed volume '${volid}'`);
              return;
            }
            if (s.type === 'lvm' || s.type === 'lvmthin')
              throw new Error(`lvremove 'pve/${volname}' error:   Failed to find logical volume "pve/${volname}"`);
            if (s.type === 'zfspool')
              throw new Error(`zfs error: cannot open 'rpool/data/${volname}': dataset does not exist`);
            throw new Error(`rbd rm '${volname}' error: rbd: delete error: (2) No such file or directory`);
          }
          // vdisk_free: a base volume with linked clones stays.
          if (/(^|\/)base-\d+-/.test(volname) && [...s.volumes.values()].some((v) => v.parent === vol.volid))
            throw new Error(`base volume '${volname}' is still in use by linked clones`);
          t.endOfWork();
          s.volumes.delete(volname);
          t.log(`Removed volume '${volid}'`);
        },
      );
    },
  },
];

/** GET a loopback URL; failures carry wget's exit code (4 network, 8 server error). */
async function fetchLoopback(url: string): Promise<Buffer> {
  const u = new URL(url);
  if (!isLoopback(u)) throw Object.assign(new Error('network unreachable'), { code: 4 });
  let res: Response;
  try {
    res = await fetch(u);
  } catch {
    throw Object.assign(new Error('connection failed'), { code: 4 });
  }
  if (!res.ok) throw Object.assign(new Error(`HTTP ${res.status}`), { code: 8 });
  return Buffer.from(await res.arrayBuffer());
}

/** The temporary file name pve-http-server gives an upload (AnyEvent.pm get_upload_filename). */
export function uploadTmpName(): string {
  return `/var/tmp/pveupload-${createHash('md5').update(`${++tmpSeq}${Date.now()}${process.pid}`).digest('hex')}`;
}
