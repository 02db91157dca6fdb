/**
 * The SFTP subsystem of a simulated node, answering as OpenSSH's sftp-server (the one PVE's
 * Debian ships) does, over the node's modelled file system (vfs.ts): every failure is the errno
 * the call would get, mapped by errno_to_portable with the generic status text. Line numbers are
 * openssh-portable sftp-server.c at 0ef0f5a83:
 *
 * - OPEN (:734-780) with sftp-server's flags and mode 0666 less the umask; WRITE on a read-only
 *   handle is EBADF (`No such file`); a short write on a full disk is `Failure` (:846-890);
 * - READ past the end is EOF (:800-844); READDIR sends `.` and `..` and `ls -l` long names
 *   (ls_file, sftp-common.c:215-263), then EOF (:1122-1176);
 * - RENAME (:1261-1318) links then unlinks a regular file, so an existing target is `Failure`;
 *   `posix-rename@openssh.com` (:1366-1383) is rename(2), replacing it atomically;
 * - REALPATH resolves like sftp_realpath: the last component may be missing (sftp-realpath.c).
 *
 * The version packet advertises the extensions served (posix-rename, fsync), as sftp-server's
 * process_init does (:708-731) for its larger set; ssh2's server sends none, so the packet is
 * rewritten on its way out (advertise()).
 */
import type { Attributes, SFTPWrapper } from 'ssh2';
import type { ClusterState } from '../state.ts';
import { errnoToFx, FX, FX_MESSAGE, SftpErrno } from './errno.ts';
import type { Entry, NodeFs } from './vfs.ts';

const OPEN = { READ: 1, WRITE: 2, APPEND: 4, CREAT: 8, TRUNC: 16, EXCL: 32 };
/** SFTP_MAX_READ_LENGTH (sftp-server.c): SFTP_MAX_MSG_LENGTH - 1024. */
const MAX_READ = 256 * 1024 - 1024;
const EXTENSIONS: Array<[string, string]> = [
  ['posix-rename@openssh.com', '1'],
  ['fsync@openssh.com', '1'],
];

type Handle =
  | { kind: 'file'; path: string; entry: Entry & { kind: 'file' }; read: boolean; write: boolean; append: boolean }
  | { kind: 'dir'; path: string; names: Array<{ filename: string; longname: string; attrs: Attributes }> | undefined }
  | { kind: 'dirfile'; path: string };

function attrsOf(e: Entry): Attributes {
  if (e.kind === 'dir') return { mode: 0o40755, uid: 0, gid: 0, size: 4096, atime: e.mtime, mtime: e.mtime };
  const f = e.file;
  return { mode: 0o100000 | f.mode, uid: 0, gid: 0, size: f.data.length, atime: f.mtime, mtime: f.mtime };
}

/** strmode(3) of a mode: `drwxr-xr-x`. */
function strmode(mode: number): string {
  const t = (mode & 0o170000) === 0o40000 ? 'd' : '-';
  const bits = ['r', 'w', 'x'];
  let s = t;
  for (let i = 8; i >= 0; i--) s += mode & (1 << i) ? bits[(8 - i) % 3] : '-';
  return s;
}

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

/** ls_file(name, st, remote=0): `-rw-r--r--    1 root     root          123 Jan  1 00:00 name`. */
function longname(name: string, a: Attributes, now: number): string {
  const d = new Date(a.mtime * 1000);
  const day = String(d.getUTCDate()).padStart(2, ' ');
  const recent = now - 182.5 * 86400 < a.mtime && now >= a.mtime;
  const when = recent
    ? `${String(d.getUTCHours()).padStart(2, '0')}:${String(d.getUTCMinutes()).padStart(2, '0')}`
    : ` ${d.getUTCFullYear()}`;
  const nlink = (a.mode & 0o170000) === 0o40000 ? 2 : 1;
  return `${strmode(a.mode)} ${String(nlink).padStart(3)} ${'root'.padEnd(8)} ${'root'.padEnd(8)} ${String(a.size).padStart(8)} ${MONTHS[d.getUTCMonth()]} ${day} ${when} ${name}`;
}

/** Rewrite ssh2's extension-less VERSION packet into one that lists EXTENSIONS. */
function advertise(sftp: SFTPWrapper): void {
  const s = sftp as unknown as { _protocol: { channelData(id: number, data: Buffer): void } };
  const proto = s._protocol;
  const parts = [Buffer.from([2, 0, 0, 0, 3])];
  for (const [name, data] of EXTENSIONS)
    for (const str of [name, data]) {
      const len = Buffer.alloc(4);
      len.writeUInt32BE(Buffer.byteLength(str));
      parts.push(len, Buffer.from(str));
    }
  const body = Buffer.concat(parts);
  const head = Buffer.alloc(4);
  head.writeUInt32BE(body.length);
  const version = Buffer.concat([head, body]);
  s._protocol = new Proxy(proto, {
    get(target, key) {
      if (key === 'channelData')
        return (id: number, data: Buffer) => {
          if (data.length === 9 && data[4] === 2) {
            s._protocol = proto;
            return proto.channelData(id, version);
          }
          return proto.channelData(id, data);
        };
      const v = Reflect.get(target, key) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

/** The two strings of an extended request's data (posix-rename: old path, new path). */
function twoStrings(data: Buffer | undefined): [string, string] | undefined {
  if (!data || data.length < 8) return undefined;
  const l1 = data.readUInt32BE(0);
  if (data.length < 8 + l1) return undefined;
  const a = data.subarray(4, 4 + l1).toString('utf8');
  const l2 = data.readUInt32BE(4 + l1);
  if (data.length < 8 + l1 + l2) return undefined;
  return [a, data.subarray(8 + l1, 8 + l1 + l2).toString('utf8')];
}

/**
 * Answer one SFTP session. `count` is told each request's type (`STAT`, `OPEN`...): a client's
 * round trips per operation are what a remote site's latency multiplies.
 */
export function serveSftp(
  c: ClusterState,
  sftp: SFTPWrapper,
  fs: NodeFs,
  count: (key: string) => void = () => {},
): void {
  advertise(sftp);
  const emit = sftp.emit.bind(sftp);
  sftp.emit = ((event: string | symbol, ...args: unknown[]) => {
    // Requests are the protocol's names in capitals (OPEN, STAT...); the rest are stream events.
    if (typeof event === 'string' && /^[A-Z_]+$/.test(event)) count(event);
    return emit(event, ...args);
  }) as typeof sftp.emit;
  const handles = new Map<number, Handle>();
  let seq = 0;
  const status = (id: number, code: number) => sftp.status(id, code, FX_MESSAGE[code] ?? 'Unknown error');
  /** Run an operation; an errno becomes its status. */
  const guard = (id: number, fn: () => void) => {
    try {
      fn();
    } catch (e) {
      if (e instanceof SftpErrno) return status(id, errnoToFx(e.code));
      status(id, FX.FAILURE);
    }
  };
  const newHandle = (h: Handle): Buffer => {
    const n = ++seq;
    handles.set(n, h);
    const b = Buffer.alloc(4);
    b.writeUInt32BE(n);
    return b;
  };
  const handleOf = (b: Buffer): Handle | undefined => (b.length === 4 ? handles.get(b.readUInt32BE(0)) : undefined);
  const now = () => c.clock.epoch();

  sftp.on('REALPATH', (id, path) =>
    guard(id, () => {
      const abs = fs.normalize(path || '.');
      // Every component but the last must be a directory.
      const parent = abs === '/' ? '/' : abs.slice(0, abs.lastIndexOf('/')) || '/';
      const p = fs.lookup(parent);
      if (!p) throw new SftpErrno('ENOENT');
      if (p.kind !== 'dir') throw new SftpErrno('ENOTDIR');
      sftp.name(id, [{ filename: abs, longname: abs, attrs: {} as Attributes }]);
    }),
  );
  const stat = (id: number, path: string) =>
    guard(id, () => {
      const e = fs.lookup(fs.normalize(path));
      if (!e) throw new SftpErrno('ENOENT');
      sftp.attrs(id, attrsOf(e));
    });
  sftp.on('STAT', stat);
  sftp.on('LSTAT', stat);
  sftp.on('OPEN', (id, filename, flags, attrs) =>
    guard(id, () => {
      const abs = fs.normalize(filename);
      const write = (flags & OPEN.WRITE) !== 0;
      const read = (flags & OPEN.READ) !== 0 || !write;
      let e = fs.lookup(abs);
      if (flags & OPEN.CREAT) e = fs.create(abs, attrs?.mode ?? 0o666, (flags & OPEN.EXCL) !== 0);
      if (!e) throw new SftpErrno('ENOENT');
      if (e.kind === 'dir') {
        // open(2) of a directory: read-only works (reads fail EISDIR), writing is EISDIR.
        if (write) throw new SftpErrno('EISDIR');
        return sftp.handle(id, newHandle({ kind: 'dirfile', path: abs }));
      }
      if (write && flags & OPEN.TRUNC) fs.truncate(e, 0);
      sftp.handle(
        id,
        newHandle({ kind: 'file', path: abs, entry: e, read, write, append: (flags & OPEN.APPEND) !== 0 }),
      );
    }),
  );
  sftp.on('WRITE', (id, hb, offset, data) =>
    guard(id, () => {
      const h = handleOf(hb);
      if (!h || h.kind === 'dir') throw new SftpErrno('EBADF');
      if (h.kind === 'dirfile' || !h.write) throw new SftpErrno('EBADF');
      fs.write(h.entry, h.append ? h.entry.file.data.length : offset, data);
      status(id, FX.OK);
    }),
  );
  sftp.on('READ', (id, hb, offset, len) =>
    guard(id, () => {
      const h = handleOf(hb);
      if (!h || h.kind === 'dir') throw new SftpErrno('EBADF');
      if (h.kind === 'dirfile') throw new SftpErrno('EISDIR');
      if (!h.read) throw new SftpErrno('EBADF');
      const data = h.entry.file.data;
      if (offset >= data.length) return status(id, FX.EOF);
      sftp.data(id, data.subarray(offset, offset + Math.min(len, MAX_READ)));
    }),
  );
  sftp.on('FSTAT', (id, hb) =>
    guard(id, () => {
      const h = handleOf(hb);
      if (!h || h.kind === 'dir') throw new SftpErrno('EBADF');
      if (h.kind === 'dirfile') return sftp.attrs(id, attrsOf({ kind: 'dir', mtime: now() }));
      sftp.attrs(id, attrsOf(h.entry));
    }),
  );
  const setstat = (id: number, e: Entry | undefined, attrs: Attributes) => {
    if (!e) throw new SftpErrno('ENOENT');
    if (e.kind === 'file') {
      if (attrs.size !== undefined) fs.truncate(e, attrs.size);
      if (attrs.mode !== undefined) e.file.mode = attrs.mode & 0o7777;
      if (attrs.mtime !== undefined) e.file.mtime = attrs.mtime;
    }
    // chown/chmod/utimes of a directory: root may; the simulator keeps no directory attributes.
    status(id, FX.OK);
  };
  sftp.on('SETSTAT', (id, path, attrs) => guard(id, () => setstat(id, fs.lookup(fs.normalize(path)), attrs)));
  sftp.on('FSETSTAT', (id, hb, attrs) =>
    guard(id, () => {
      const h = handleOf(hb);
      if (!h || h.kind !== 'file') throw new SftpErrno('EBADF');
      setstat(id, h.entry, attrs);
    }),
  );
  sftp.on('CLOSE', (id, hb) =>
    guard(id, () => {
      const n = hb.length === 4 ? hb.readUInt32BE(0) : -1;
      if (!handles.delete(n)) throw new SftpErrno('EBADF');
      status(id, FX.OK);
    }),
  );
  sftp.on('OPENDIR', (id, path) =>
    guard(id, () => {
      const abs = fs.normalize(path);
      fs.list(abs);
      sftp.handle(id, newHandle({ kind: 'dir', path: abs, names: undefined }));
    }),
  );
  sftp.on('READDIR', (id, hb) =>
    guard(id, () => {
      const h = handleOf(hb);
      if (!h || h.kind !== 'dir') return status(id, FX.FAILURE);
      if (!h.names) {
        // opendir/readdir: `.` and `..` first, then the entries; up to 100 per answer.
        const self = fs.lookup(h.path) ?? { kind: 'dir' as const, mtime: now() };
        const up = fs.lookup(h.path === '/' ? '/' : h.path.slice(0, h.path.lastIndexOf('/')) || '/') ?? self;
        const all = [{ name: '.', entry: self }, { name: '..', entry: up }, ...fs.list(h.path)];
        h.names = all.map(({ name, entry }) => {
          const attrs = attrsOf(entry);
          return { filename: name, longname: longname(name, attrs, now()), attrs };
        });
      }
      if (!h.names.length) return status(id, FX.EOF);
      sftp.name(id, h.names.splice(0, 100));
    }),
  );
  sftp.on('REMOVE', (id, path) =>
    guard(id, () => {
      fs.unlink(fs.normalize(path));
      status(id, FX.OK);
    }),
  );
  sftp.on('MKDIR', (id, path) =>
    guard(id, () => {
      fs.mkdir(fs.normalize(path));
      status(id, FX.OK);
    }),
  );
  sftp.on('RMDIR', (id, path) =>
    guard(id, () => {
      fs.rmdir(fs.normalize(path));
      status(id, FX.OK);
    }),
  );
  sftp.on('RENAME', (id, oldPath, newPath) =>
    guard(id, () => {
      fs.rename(fs.normalize(oldPath), fs.normalize(newPath), false);
      status(id, FX.OK);
    }),
  );
  sftp.on('READLINK', (id, path) =>
    guard(id, () => {
      // No symbolic links: readlink(2) of an existing path is EINVAL.
      throw new SftpErrno(fs.lookup(fs.normalize(path)) ? 'EINVAL' : 'ENOENT');
    }),
  );
  sftp.on('SYMLINK', (id) => status(id, FX.OP_UNSUPPORTED));
  sftp.on('EXTENDED', (id, name, data) =>
    guard(id, () => {
      if (name === 'posix-rename@openssh.com') {
        const paths = twoStrings(data);
        if (!paths) return status(id, FX.BAD_MESSAGE);
        fs.rename(fs.normalize(paths[0]), fs.normalize(paths[1]), true);
        return status(id, FX.OK);
      }
      if (name === 'fsync@openssh.com') return status(id, FX.OK);
      status(id, FX.OP_UNSUPPORTED);
    }),
  );
}
