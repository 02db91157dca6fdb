/**
 * What a file storage's directory holds besides the volumes the API manages as images: the bytes
 * of `snippets` volumes (cloud-init user data uploaded over SFTP, as real providers do because the
 * PVE API cannot upload snippets), the other files and directories a root shell on the node
 * could create under the storage's path, and the names the API and the SFTP server share.
 */
import type { ClusterState } from './state.ts';
import type { StorageState, Volume } from './storage.ts';

/** A regular file: its bytes, permission bits and times (epoch seconds). */
export interface FsFile {
  data: Buffer;
  mode: number;
  mtime: number;
  ctime: number;
}

/**
 * The directory of each content type below a storage's path (pve-storage src/PVE/Storage/Plugin.pm
 * :839-847 at 0c56bad, `$vtype_subdirs`). activate_storage (:1951-2013) creates the directories of
 * the storage's content types (and `dump` for `rootdir`), so they exist on any active storage.
 */
export const CONTENT_SUBDIRS: Record<string, string> = {
  images: 'images',
  rootdir: 'private',
  iso: 'template/iso',
  vztmpl: 'template/cache',
  backup: 'dump',
  snippets: 'snippets',
  import: 'import',
};

/** The content directories activate_storage makes for a storage's content types (relative paths). */
export function contentDirs(s: StorageState): string[] {
  const out = new Set<string>();
  for (const ct of s.content) {
    const d = CONTENT_SUBDIRS[ct];
    if (d) out.add(d);
    if (ct === 'rootdir') out.add('dump');
  }
  // `template/iso` and `template/cache` imply `template` (make_path).
  for (const d of [...out]) if (d.includes('/')) out.add(d.slice(0, d.indexOf('/')));
  return [...out];
}

/** A volume's size in bytes: a file's length for files the simulator holds, else its recorded size. */
export function volumeBytes(v: Volume): number {
  return v.file ? v.file.data.length : v.size;
}

/**
 * A file under `<path>/snippets/` as pve-storage sees it: the volume `<storage>:snippets/NAME`,
 * content `snippets`, format `snippet` (Plugin.pm:1744-1749 at 0c56bad, `$get_subdir_files`).
 */
export function snippetVolume(c: ClusterState, s: StorageState, name: string, file: FsFile): Volume {
  const volname = `snippets/${name}`;
  return {
    volid: `${s.id}:${volname}`,
    storage: s.id,
    volname,
    content: 'snippets',
    format: 'snippet',
    size: file.data.length,
    ctime: file.ctime || c.clock.epoch(),
    file,
  };
}

/** A new empty file as sftp-server creates it: mode 0666 (or the client's) less the umask 022. */
export function newFile(c: ClusterState, mode = 0o666): FsFile {
  const now = c.clock.epoch();
  return { data: Buffer.alloc(0), mode: mode & 0o7777 & ~0o022, mtime: now, ctime: now };
}

/** A file volume's path on the node (PVE::Storage::Plugin filesystem_path). */
export function volumePath(s: StorageState, v: Pick<Volume, 'content' | 'volname'>): string {
  const file = v.content === 'images' || v.content === 'rootdir' ? v.volname : v.volname.replace(/^[^/]+\//, '');
  // Container volumes are `images` volumes to the dir plugin (parse_volname), not `private/`.
  const dir = v.content === 'rootdir' ? 'images' : (CONTENT_SUBDIRS[v.content] ?? 'images');
  return `${s.path}/${dir}/${file}`;
}
