/**
 * The file system a root login on a simulated node sees over SFTP, as far as the simulator models
 * it: the directories of the node's file storages (their paths, the ancestors of those paths,
 * the content directories activate_storage makes, and directories made over SFTP) and their
 * files. A file directly in `<path>/snippets/` is the volume `<storage>:snippets/NAME`; other
 * files are kept on the storage (counting against its space) but no API lists them. A shared
 * storage (nfs, cephfs, shared dir) is one directory tree on every node that sees it. Nothing
 * else of the node exists: other paths are ENOENT. Image and ISO volumes are not shown as files.
 *
 * Operations fail with the errno Linux would give; sftp.ts maps them as OpenSSH's sftp-server does.
 */

import type { ClusterState } from '../state.ts';
import type { StorageState } from '../storage.ts';
import { contentDirs, type FsFile, newFile, snippetVolume } from '../storage-files.ts';
import { type Errno, SftpErrno } from './errno.ts';

export type Entry =
  | { kind: 'dir'; s?: StorageState; rel?: string; mtime: number }
  | { kind: 'file'; s: StorageState; rel: string; file: FsFile };

export interface Listed {
  name: string;
  entry: Entry;
}

function fail(code: Errno): never {
  throw new SftpErrno(code);
}

function parentOf(abs: string): string {
  const i = abs.lastIndexOf('/');
  return i <= 0 ? '/' : abs.slice(0, i);
}

export class NodeFs {
  private readonly c: ClusterState;
  private readonly node: string;
  constructor(c: ClusterState, node: string) {
    this.c = c;
    this.node = node;
  }

  /** The node's storages that are directories (dir, nfs, cephfs): those with a path. */
  private storages(): StorageState[] {
    return [...(this.c.nodes.get(this.node)?.storages.values() ?? [])].filter((s) => s.path);
  }

  /** An absolute path without `.`, `..` or repeated slashes; relative paths start in root's home. */
  normalize(path: string): string {
    const parts: string[] = [];
    for (const p of (path.startsWith('/') ? path : `/root/${path}`).split('/')) {
      if (!p || p === '.') continue;
      if (p === '..') parts.pop();
      else parts.push(p);
    }
    return `/${parts.join('/')}`;
  }

  /** The storage a path lies in (the longest storage path it is below) and the path inside it. */
  locate(abs: string): { s: StorageState; rel: string } | undefined {
    let best: { s: StorageState; rel: string } | undefined;
    for (const s of this.storages()) {
      const root = s.path!.replace(/\/+$/, '');
      if (abs !== root && !abs.startsWith(`${root}/`)) continue;
      if (best && best.s.path!.length >= root.length) continue;
      best = { s, rel: abs.slice(root.length + 1) };
    }
    return best;
  }

  private epoch0(): number {
    return this.c.nodes.get(this.node)?.bootTime ?? this.c.clock.epoch();
  }

  /** Every directory of a storage, relative ('' is the storage's own directory). */
  private storageDirs(s: StorageState): Set<string> {
    return new Set(['', ...contentDirs(s), ...s.dirs]);
  }

  /** Directories outside storages: `/`, root's home, and the ancestors of storage paths. */
  private outsideDirs(): Set<string> {
    const out = new Set(['/', '/root']);
    for (const s of this.storages()) {
      let p = parentOf(s.path!.replace(/\/+$/, ''));
      while (p !== '/') {
        out.add(p);
        p = parentOf(p);
      }
    }
    return out;
  }

  lookup(abs: string): Entry | undefined {
    const at = this.locate(abs);
    if (!at) return this.outsideDirs().has(abs) ? { kind: 'dir', mtime: this.epoch0() } : undefined;
    const { s, rel } = at;
    if (this.storageDirs(s).has(rel)) return { kind: 'dir', s, rel, mtime: this.epoch0() };
    const file = this.fileAt(s, rel);
    return file ? { kind: 'file', s, rel, file } : undefined;
  }

  private fileAt(s: StorageState, rel: string): FsFile | undefined {
    const m = /^snippets\/([^/]+)$/.exec(rel);
    if (!m) return s.files.get(rel);
    const v = s.volumes.get(rel);
    if (!v || v.content !== 'snippets') return undefined;
    // A snippet from the topology: its bytes are zeros until written.
    v.file ??= { data: Buffer.alloc(v.size), mode: 0o644, mtime: v.ctime, ctime: v.ctime };
    return v.file;
  }

  /** A directory's entries (without `.` and `..`). */
  list(abs: string): Listed[] {
    const e = this.lookup(abs);
    if (!e) fail('ENOENT');
    if (e.kind !== 'dir') fail('ENOTDIR');
    const out = new Map<string, Entry>();
    const child = (p: string) => (parentOf(p) === abs ? p.slice(abs === '/' ? 1 : abs.length + 1) : undefined);
    for (const d of this.outsideDirs()) {
      const n = d !== '/' ? child(d) : undefined;
      if (n) out.set(n, { kind: 'dir', mtime: this.epoch0() });
    }
    for (const s of this.storages()) {
      const root = s.path!.replace(/\/+$/, '');
      const n = child(root);
      if (n) out.set(n, { kind: 'dir', s, rel: '', mtime: this.epoch0() });
    }
    const at = this.locate(abs);
    if (at) {
      const { s, rel } = at;
      const under = (r: string) => (rel === '' ? !r.includes('/') && r !== '' : parentOf(`/${r}`) === `/${rel}`);
      const base = (r: string) => r.slice(r.lastIndexOf('/') + 1);
      for (const d of this.storageDirs(s))
        if (under(d)) out.set(base(d), { kind: 'dir', s, rel: d, mtime: this.epoch0() });
      for (const [r, file] of s.files) if (under(r)) out.set(base(r), { kind: 'file', s, rel: r, file });
      if (rel === 'snippets')
        for (const v of s.volumes.values())
          if (v.content === 'snippets') {
            const file = this.fileAt(s, v.volname);
            if (file) out.set(base(v.volname), { kind: 'file', s, rel: v.volname, file });
          }
    }
    return [...out].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([name, entry]) => ({ name, entry }));
  }

  /** The directory a new entry goes into: it must exist and lie in a storage. */
  private creatable(abs: string): { s: StorageState; rel: string } {
    const parent = this.lookup(parentOf(abs));
    if (!parent) fail('ENOENT');
    if (parent.kind !== 'dir') fail('ENOTDIR');
    const at = this.locate(abs);
    // Outside the storages the simulator models nothing: as if the directory did not exist.
    if (!at || at.rel === '') fail('ENOENT');
    return at;
  }

  /** open(2) with O_CREAT: an existing file, or a new empty one. */
  create(abs: string, mode: number | undefined, excl: boolean): Entry {
    const e = this.lookup(abs);
    if (e) {
      if (excl) fail('EEXIST');
      return e;
    }
    const { s, rel } = this.creatable(abs);
    const file = newFile(this.c, mode);
    this.attach(s, rel, file);
    return { kind: 'file', s, rel, file };
  }

  private attach(s: StorageState, rel: string, file: FsFile): void {
    const m = /^snippets\/([^/]+)$/.exec(rel);
    if (m) s.volumes.set(rel, snippetVolume(this.c, s, m[1]!, file));
    else s.files.set(rel, file);
  }

  private detach(s: StorageState, rel: string): void {
    if (/^snippets\/[^/]+$/.test(rel) && s.volumes.get(rel)?.content === 'snippets') s.volumes.delete(rel);
    else s.files.delete(rel);
  }

  /**
   * write(2) at `offset`: a write beyond the storage's free space writes what fits and fails
   * ENOSPC, leaving the file with the bytes that were written, as a full disk does.
   */
  write(e: Entry & { kind: 'file' }, offset: number, data: Buffer): void {
    const f = e.file;
    const grow = Math.max(0, offset + data.length - f.data.length);
    const room = e.s.avail;
    const fits = grow > room ? Math.max(0, f.data.length + room - offset) : data.length;
    const part = data.subarray(0, Math.max(0, fits));
    if (part.length) {
      const end = offset + part.length;
      const buf =
        end > f.data.length ? Buffer.concat([f.data, Buffer.alloc(end - f.data.length)]) : Buffer.from(f.data);
      part.copy(buf, offset);
      f.data = buf;
    }
    f.mtime = f.ctime = this.c.clock.epoch();
    this.resize(e);
    if (part.length < data.length) fail('ENOSPC');
  }

  /** truncate(2): shrinks, or extends with zeros. */
  truncate(e: Entry & { kind: 'file' }, size: number): void {
    const f = e.file;
    // Growing makes a sparse file: no ENOSPC (the simulator counts its length, though).
    f.data =
      size <= f.data.length ? f.data.subarray(0, size) : Buffer.concat([f.data, Buffer.alloc(size - f.data.length)]);
    f.mtime = f.ctime = this.c.clock.epoch();
    this.resize(e);
  }

  /** A snippet volume's recorded size follows its bytes. */
  private resize(e: Entry & { kind: 'file' }): void {
    const v = e.s.volumes.get(e.rel);
    if (v?.file === e.file) v.size = e.file.data.length;
  }

  unlink(abs: string): void {
    const e = this.lookup(abs);
    if (!e) fail('ENOENT');
    if (e.kind === 'dir') fail('EISDIR');
    this.detach(e.s, e.rel);
  }

  mkdir(abs: string): void {
    if (this.lookup(abs)) fail('EEXIST');
    const { s, rel } = this.creatable(abs);
    s.dirs.add(rel);
  }

  rmdir(abs: string): void {
    const e = this.lookup(abs);
    if (!e) fail('ENOENT');
    if (e.kind !== 'dir') fail('ENOTDIR');
    if (this.list(abs).length) fail('ENOTEMPTY');
    if (!e.s || e.rel === undefined || e.rel === '') fail('EBUSY');
    // A content directory comes back at the next activation (pvestatd, every 10 s): it stays.
    e.s.dirs.delete(e.rel);
  }

  /**
   * rename(2) (`replace`) or OpenSSH's link-then-unlink SFTP rename, which refuses an existing
   * target. Across storages (file systems): EXDEV. Directories are renamed only if empty.
   */
  rename(from: string, to: string, replace: boolean): void {
    const src = this.lookup(from);
    if (!src) fail('ENOENT');
    const dst = this.lookup(to);
    if (from === to) return;
    const { s, rel } = this.creatable(to);
    if (src.s !== s) fail('EXDEV');
    if (src.kind === 'dir') {
      if (dst || this.list(from).length || src.rel === undefined || !src.s.dirs.has(src.rel)) fail('EBUSY');
      s.dirs.delete(src.rel);
      s.dirs.add(rel);
      return;
    }
    if (dst) {
      if (!replace) fail('EEXIST');
      if (dst.kind === 'dir') fail('EISDIR');
      this.detach(s, rel);
    }
    this.detach(s, src.rel);
    this.attach(s, rel, src.file);
  }
}
