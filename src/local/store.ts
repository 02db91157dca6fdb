/**
 * The cluster-less ResourceStore: resources in memory with Kubernetes' write semantics
 * (resourceVersion conflicts, generation bumps on spec changes, finalizers holding deletion,
 * status written separately and not waking the watch), optionally persisted to a state file
 * written atomically (write + fsync + rename) under an exclusive lock file. The file's format,
 * how it is read and checked, and where state files live are src/workspace/state-file.ts: the
 * commands that only read a state file need those without this store.
 */
import { randomUUID } from 'node:crypto';
import { closeSync, fsyncSync, openSync, readFileSync, renameSync, unlinkSync, writeSync } from 'node:fs';
import { resolve } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { keyOf, type Managed, rfc3339 } from '../engine/resource.ts';
import { ConflictError, type ResourceStore, type WatchEvent } from '../engine/types.ts';
import { readStateFile, STATE_VERSION, StateFileError, type StoredEvent } from '../workspace/state-file.ts';

export class MemoryStore<R extends Managed = Managed> implements ResourceStore<R> {
  protected objects = new Map<string, R>();
  private rv = 0;
  /**
   * The uids of resources that left this store (deleted). A VM whose marker names one of them is an
   * orphan of this store for sure; a uid neither here nor among the objects may be another state
   * file's (gc refuses to delete such VMs while they run).
   */
  readonly retired: string[] = [];
  private readonly watchers = new Set<(key: string, event: WatchEvent, obj: R | undefined) => void>();
  readonly events: StoredEvent[] = [];
  /** Called after every stored change (persistence). */
  onChange?: () => void;
  now: () => number = () => Date.now();

  protected nextRv(): string {
    return String(++this.rv);
  }

  async get(key: string): Promise<R | undefined> {
    return this.getSync(key);
  }

  async list(): Promise<R[]> {
    return this.listSync();
  }

  getSync(key: string): R | undefined {
    const o = this.objects.get(key);
    return o ? structuredClone(o) : undefined;
  }

  listSync(): R[] {
    return [...this.objects.values()].map((o) => structuredClone(o));
  }

  watch(handler: (key: string, event: WatchEvent, obj: R | undefined) => void): () => void {
    this.watchers.add(handler);
    return () => this.watchers.delete(handler);
  }

  private notify(key: string, event: WatchEvent, obj: R | undefined): void {
    for (const w of this.watchers) w(key, event, obj ? structuredClone(obj) : undefined);
  }

  /** Create or update from a manifest (what `kubectl apply` does to spec, labels and our annotations). */
  apply(desired: R): R {
    const key = keyOf(desired);
    const cur = this.objects.get(key);
    if (!cur) {
      const o = structuredClone(desired);
      o.metadata.uid ||= randomUUID();
      o.metadata.generation = 1;
      o.metadata.creationTimestamp ??= rfc3339(this.now());
      o.metadata.resourceVersion = this.nextRv();
      o.metadata.finalizers ??= [];
      // normalized as a later apply() writes them, so that re-applying an unchanged manifest is a no-op
      o.metadata.labels ??= {};
      o.metadata.annotations ??= {};
      this.objects.set(key, o);
      this.changed();
      this.notify(key, 'ADDED', o);
      return structuredClone(o);
    }
    const next = structuredClone(cur);
    const specChanged = !isDeepStrictEqual(cur.spec, desired.spec);
    next.spec = structuredClone(desired.spec);
    next.metadata.labels = { ...desired.metadata.labels };
    // The manifest owns its annotations (removing `crossplane.io/paused` from it must unpause); only
    // the ones the engine writes (external name, create-pending/succeeded/failed) survive from the store.
    next.metadata.annotations = { ...engineAnnotations(cur), ...desired.metadata.annotations };
    if (specChanged) next.metadata.generation = cur.metadata.generation + 1;
    if (isDeepStrictEqual(next, cur)) return structuredClone(cur);
    next.metadata.resourceVersion = this.nextRv();
    this.objects.set(key, next);
    this.changed();
    this.notify(key, 'MODIFIED', next);
    return structuredClone(next);
  }

  /** Request deletion: with finalizers the object stays, marked; without, it is gone. */
  markDeleted(key: string): void {
    const cur = this.objects.get(key);
    if (!cur) return;
    if (!cur.metadata.finalizers?.length) {
      this.objects.delete(key);
      this.retire(cur.metadata.uid);
      this.changed();
      this.notify(key, 'DELETED', undefined);
      return;
    }
    if (cur.metadata.deletionTimestamp) return;
    const next = structuredClone(cur);
    next.metadata.deletionTimestamp = rfc3339(this.now());
    next.metadata.resourceVersion = this.nextRv();
    this.objects.set(key, next);
    this.changed();
    this.notify(key, 'MODIFIED', next);
  }

  async update(r: R): Promise<R> {
    const key = keyOf(r);
    const cur = this.objects.get(key);
    if (!cur) throw new ConflictError(`${key} not found`);
    if (r.metadata.resourceVersion !== cur.metadata.resourceVersion) throw new ConflictError();
    const next = structuredClone(cur);
    next.metadata.annotations = { ...r.metadata.annotations };
    next.metadata.labels = { ...r.metadata.labels };
    next.metadata.finalizers = [...(r.metadata.finalizers ?? [])];
    if (!isDeepStrictEqual(cur.spec, r.spec)) {
      next.spec = structuredClone(r.spec);
      next.metadata.generation = cur.metadata.generation + 1;
    }
    if (next.metadata.deletionTimestamp && next.metadata.finalizers.length === 0) {
      this.objects.delete(key);
      this.retire(cur.metadata.uid);
      this.changed();
      this.notify(key, 'DELETED', undefined);
      return next;
    }
    if (isDeepStrictEqual(next, cur)) return structuredClone(cur);
    next.metadata.resourceVersion = this.nextRv();
    this.objects.set(key, next);
    this.changed();
    this.notify(key, 'MODIFIED', next);
    return structuredClone(next);
  }

  async updateStatus(r: R): Promise<R> {
    const key = keyOf(r);
    const cur = this.objects.get(key);
    if (!cur) throw new ConflictError(`${key} not found`);
    if (r.metadata.resourceVersion !== cur.metadata.resourceVersion) throw new ConflictError();
    if (isDeepStrictEqual(cur.status, r.status)) return structuredClone(cur);
    const next = structuredClone(cur);
    next.status = structuredClone(r.status);
    next.metadata.resourceVersion = this.nextRv();
    this.objects.set(key, next);
    this.changed();
    return structuredClone(next);
  }

  event(r: R, type: 'Normal' | 'Warning', reason: string, message: string): void {
    const key = keyOf(r);
    const last = this.events.findLast((e) => e.key === key);
    if (last && last.reason === reason && last.message === message && last.type === type) {
      last.count++;
      last.time = new Date(this.now()).toISOString();
    } else {
      this.events.push({ key, type, reason, message, time: new Date(this.now()).toISOString(), count: 1 });
      if (this.events.length > 1000) this.events.splice(0, this.events.length - 1000);
    }
    // Events are best effort: they reach the state file with the next write (a status write
    // follows every condition change), not with a full rewrite of their own.
  }

  private retire(uid: string): void {
    if (!uid) return;
    this.retired.push(uid);
    if (this.retired.length > MAX_RETIRED) this.retired.splice(0, this.retired.length - MAX_RETIRED);
  }

  protected changed(): void {
    this.onChange?.();
  }

  protected snapshot(): { rv: number; objects: R[]; events: StoredEvent[]; retired: string[] } {
    return { rv: this.rv, objects: [...this.objects.values()], events: this.events, retired: this.retired };
  }

  protected restore(s: { rv: number; objects: R[]; events?: StoredEvent[]; retired?: string[] }): void {
    this.rv = s.rv;
    this.objects = new Map(s.objects.map((o) => [keyOf(o), o]));
    this.events.splice(0, this.events.length, ...(s.events ?? []));
    this.retired.splice(0, this.retired.length, ...(s.retired ?? []));
  }
}

/** Annotations the engine writes and a manifest normally does not carry. */
function engineAnnotations(r: Managed): Record<string, string> {
  return Object.fromEntries(
    Object.entries(r.metadata.annotations ?? {}).filter(([k]) => k.startsWith('crossplane.io/external-')),
  );
}

const MAX_RETIRED = 10_000;

export class StateLockedError extends Error {}

/**
 * State files locked by this process. The lock file's pid cannot tell a second FileStore in this
 * process from a dead process whose pid we inherited (containers: pid 1 again after a restart).
 */
const lockedHere = new Set<string>();

/**
 * A MemoryStore persisted to `file` (JSON). Every change is written through: write to a temp
 * file, fsync, rename. `open()` takes `file.lock` exclusively (O_EXCL, holding our pid); a lock
 * left by a dead process is taken over.
 */
export class FileStore<R extends Managed = Managed> extends MemoryStore<R> {
  readonly file: string;
  private lockFd: number | undefined;
  constructor(file: string) {
    super();
    this.file = file;
  }

  /** The installation whose resources this file caches (written with every save). */
  installation: string | undefined;

  /**
   * Lock and load. `installation`: the one this run belongs to; a file written for another is
   * refused (its resources are another installation's), a file without one takes it.
   */
  open(installation?: string): void {
    this.lock();
    try {
      const data = readStateFile<R>(this.file);
      if (data) {
        if (installation && data.installation && data.installation !== installation)
          throw new StateFileError(
            `${this.file}: this state file belongs to installation '${data.installation}', but the ProviderConfig says '${installation}'; pass the state file of '${installation}' with --state, or set spec.installation: ${data.installation} in the ProviderConfig`,
          );
        this.restore(data);
        this.installation = data.installation;
      }
    } catch (e) {
      this.close();
      throw e;
    }
    this.installation ??= installation;
    this.onChange = () => this.save();
  }

  private lock(): void {
    const lockFile = `${this.file}.lock`;
    const id = resolve(this.file);
    if (lockedHere.has(id))
      throw new StateLockedError(`${this.file} is already open in this process (lock file ${lockFile})`);
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        this.lockFd = openSync(lockFile, 'wx', 0o600);
        writeSync(this.lockFd, String(process.pid));
        lockedHere.add(id);
        return;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
        let content: string;
        try {
          content = readFileSync(lockFile, 'utf8');
        } catch (re) {
          if ((re as NodeJS.ErrnoException).code === 'ENOENT') continue; // released meanwhile: try again
          throw re;
        }
        const pid = Number(content.trim());
        if (pid && pid !== process.pid && processAlive(pid)) {
          throw new StateLockedError(`${this.file} is in use by process ${pid} (lock file ${lockFile})`);
        }
        try {
          unlinkSync(lockFile); // stale: its process is gone
        } catch (ue) {
          if ((ue as NodeJS.ErrnoException).code !== 'ENOENT') throw ue; // another process took it over first
        }
      }
    }
    throw new StateLockedError(`cannot lock ${this.file}`);
  }

  save(): void {
    const tmp = `${this.file}.tmp`;
    const fd = openSync(tmp, 'w', 0o600);
    try {
      writeSync(
        fd,
        JSON.stringify({
          version: STATE_VERSION,
          ...(this.installation ? { installation: this.installation } : {}),
          ...this.snapshot(),
        }),
      );
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, this.file);
  }

  close(): void {
    if (this.lockFd !== undefined) {
      closeSync(this.lockFd);
      this.lockFd = undefined;
      lockedHere.delete(resolve(this.file));
      try {
        unlinkSync(`${this.file}.lock`);
      } catch {
        // already gone
      }
    }
  }
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}
