/**
 * What the migration workers share (in-cluster migrate, remote_migrate, move_disk): PVE's id maps
 * (`targetstorage`, `target-storage`, `target-bridge`), the storage checks of pve-storage, the
 * migration log as pve-guest-common's AbstractMigrate writes it, transfer durations, and volumes
 * allocated under a chosen name on a target storage (storage_migrate keeps the source's name when
 * it is free there).
 *
 * Sources: pve-common src/PVE/JSONSchema.pm:358-409 (map_id, parse_idmap) at f665029;
 * pve-storage src/PVE/Storage.pm:252-292 (storage_config, storage_check_node,
 * storage_check_enabled) at 0c56bad; pve-guest-common src/PVE/AbstractMigrate.pm:15-37 (the log
 * format), :104-251 (migrate: the phases) and :232-250 (the duration) at 4a8f6cb; pve-common
 * src/PVE/Format.pm:31-58 (render_duration); qemu-server src/PVE/QemuMigrate.pm at e6352be
 * (the progress lines of storage_migrate's dd, phase2's mirror and query-migrate loops).
 */
import type { Transfer } from './bandwidth.ts';
import { die, paramError } from './errors.ts';
import { storageConfig } from './routes/qemu-migrate.ts';
import type { ClusterState } from './state.ts';
import { outOfSpaceMessage, type StorageState, type Volume } from './storage.ts';
import { isWorkerDeath, type TaskHandle } from './tasks.ts';

/**
 * The network a migration's RAM and disk streams cross, MB/s (10⁶ B/s): a 10 GbE link. A disk
 * copy runs at the slowest of the source storage, the target storage, this and `bwlimit`.
 */
export const MIGRATION_NETWORK_MBPS = 1000;

export interface IdMap {
  identity?: true;
  default?: string;
  entries: Map<string, string>;
}

/**
 * parse_idmap: `1` (identity), `ID` (a default for all), `SRC:DST` entries, comma-separated. The
 * schema's format check already refused malformed ids; what is left are the map's own rules.
 * Throws as the callers report it (`failed to parse storage map: …` on `param`).
 */
export function parseIdMap(value: string | undefined, param: string, what: 'storage' | 'bridge'): IdMap | undefined {
  if (!value) return undefined;
  const map: IdMap = { entries: new Map() };
  const fail = (msg: string): never => paramError({ [param]: `failed to parse ${what} map: ${msg}\n` });
  for (const entry of value.split(/[,;\s]+/).filter(Boolean)) {
    if (entry === '1') map.identity = true;
    else {
      const m = /^([^:]+):([^:]+)$/.exec(entry);
      if (m) {
        if (map.entries.has(m[1]!)) fail(`duplicate mapping for source '${m[1]}'`);
        map.entries.set(m[1]!, m[2]!);
      } else {
        if (map.default !== undefined) fail('default target ID can only be provided once');
        map.default = entry;
      }
    }
  }
  if (map.identity && (map.default !== undefined || map.entries.size))
    fail('identity mapping cannot be combined with other mappings');
  return map;
}

/** map_id: the entry for the source, else the default, else the source itself. */
export function mapId(map: IdMap | undefined, source: string): string {
  if (!map) return source;
  return map.entries.get(source) ?? map.default ?? source;
}

/**
 * storage_check_enabled (with storage_check_node): the storage exists in storage.cfg, is not
 * disabled, and (with `node`) is configured for that node. The node's own copy is returned.
 */
export function storageCheckEnabled(c: ClusterState, sid: string, node?: string): StorageState {
  const cfg = storageConfig(c, sid);
  if (!cfg) die(`storage '${sid}' does not exist`);
  if (!cfg.enabled) die(`storage '${sid}' is disabled`);
  if (node === undefined) return cfg;
  const s = c.storage(node, sid);
  if (!s) die(`storage '${sid}' is not available on node '${node}'`);
  return s;
}

/** `2025-01-31 12:00:00`: strftime("%F %H:%M:%S"), in UTC (the simulated nodes run in UTC). */
function stamp(ms: number): string {
  return new Date(ms).toISOString().slice(0, 19).replace('T', ' ');
}

/** `00:03:12`, the `(duration …)` of AbstractMigrate's last line. */
export function hms(ms: number): string {
  const s = Math.floor(ms / 1000);
  const p = (n: number) => String(n).padStart(2, '0');
  return `${p(Math.floor(s / 3600))}:${p(Math.floor(s / 60) % 60)}:${p(s % 60)}`;
}

/** PVE::Format::render_duration: `0s`, `45s`, `2m 40s`, `1h 3m 5s`. */
export function renderDuration(seconds: number): string {
  let rest = Math.round(seconds);
  if (!rest) return '0s';
  const out: string[] = [];
  for (const [unit, len] of [
    ['w', 604800],
    ['d', 86400],
    ['h', 3600],
    ['m', 60],
    ['s', 1],
  ] as const) {
    const v = Math.floor(rest / len);
    if (v > 0) {
      out.push(`${v}${unit}`);
      rest -= v * len;
    }
  }
  return out.join(' ');
}

/**
 * A migration task's log: AbstractMigrate::log prefixes each line with the time and, for errors,
 * `ERROR:`; `print` lines (the websocket tunnel's, `websocket tunnel started`) have no prefix.
 * The time is the task's start plus the simulated time its steps took, so the prefixes and the
 * final `(duration …)` agree at any speed factor.
 */
export class MigrationLog {
  private readonly t: TaskHandle;
  private readonly start: number;
  /** Simulated ms spent in steps so far. */
  elapsed = 0;
  constructor(c: ClusterState, t: TaskHandle) {
    this.t = t;
    this.start = c.clock.now();
  }
  log(level: 'info' | 'warn' | 'err', msg: string): void {
    const text = msg.replace(/\n+$/, '');
    if (!text) return;
    const prefix = `${stamp(this.start + this.elapsed)}${level === 'err' ? ' ERROR:' : ''}`;
    for (const line of text.split('\n')) this.t.log(`${prefix} ${line}`);
  }
  info(msg: string): void {
    this.log('info', msg);
  }
  /** A plain `print` (no time prefix). */
  print(msg: string): void {
    this.t.log(msg);
  }
  /** A simulated wait that counts towards the migration's duration. */
  async step(ms: number): Promise<void> {
    await this.t.sleep(ms);
    this.elapsed += ms;
  }
  /**
   * A wait for a copy (bandwidth.ts) to reach `bytes`, one step of the task; the copy's time
   * counts towards the duration. `base`: the duration when the copy started.
   */
  async copied(flow: Transfer, bytes: number, base: number): Promise<number> {
    const ms = await this.t.wait((signal) => flow.reached(bytes, signal));
    this.elapsed = Math.max(this.elapsed, base + ms);
    return ms;
  }
  duration(): string {
    return hms(this.elapsed);
  }
}

export function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/**
 * AbstractMigrate::migrate for the in-cluster and the remote worker, which supply the phases: the
 * VM's migration flock, then its config flock around prepare, phase 1 (its cleanup on a failure,
 * which aborts), phase 2 for a running VM (a failure there is a problem, its cleanup runs and
 * phase 3 is skipped) and phase 3, and the last line (`migration aborted`, `finished with
 * problems`, `finished successfully`) with the duration.
 */
export abstract class AbstractMigration<O extends { vmid: number }> {
  protected readonly c: ClusterState;
  protected readonly o: O;
  protected readonly log: MigrationLog;
  /** The VM ran at prepare: phase 2 moves it. */
  protected running = false;
  /** Something failed that does not abort the migration (it finishes "with problems"). */
  protected errors = false;
  /** Phase 2 failed: its cleanup ran instead of phase 3. */
  protected phase2errors = false;

  /** The worker's abort: its flock waits end with it (a worker that dies with its node). */
  protected readonly signal: AbortSignal;
  constructor(c: ClusterState, t: TaskHandle, o: O) {
    this.c = c;
    this.o = o;
    this.log = new MigrationLog(c, t);
    this.signal = t.signal;
  }

  /** The checks and the connection to the target; whether the VM is running. */
  protected abstract prepare(): Promise<boolean>;
  protected abstract phase1(): Promise<void>;
  protected abstract phase1Cleanup(): Promise<void>;
  protected abstract phase2(): Promise<void>;
  protected abstract phase2Cleanup(): Promise<void>;
  protected abstract phase3Cleanup(): Promise<void>;

  /** GuestHelpers::guest_migration_lock, then AbstractMigrate::migrate. */
  async run(): Promise<void> {
    const unlockMigration = await this.c.migrationFlock(this.o.vmid).acquire(10_000, { signal: this.signal });
    try {
      await this.migrate();
    } finally {
      unlockMigration();
    }
  }

  private async migrate(): Promise<void> {
    const { log } = this;
    let err: unknown;
    try {
      // lock_vm: the config's flock for the whole migration (AbstractMigrate.pm:152-227).
      const unlock = await this.c.flock(this.o.vmid).acquire(10_000, { signal: this.signal });
      try {
        this.running = await this.prepare();
        try {
          await this.phase1();
        } catch (e) {
          if (isWorkerDeath(e)) throw e;
          log.log('err', message(e));
          await this.phase1Cleanup();
          throw e;
        }
        if (this.running) {
          try {
            await this.phase2();
          } catch (e) {
            if (isWorkerDeath(e)) throw e;
            this.errors = true;
            log.log('err', `online migrate failure - ${message(e)}`);
          }
          if (this.errors) await this.phase2Cleanup();
        }
        if (!this.phase2errors) await this.phase3Cleanup();
      } finally {
        unlock();
      }
    } catch (e) {
      if (isWorkerDeath(e)) throw e;
      err = e;
    }
    if (err !== undefined) {
      log.log('err', `migration aborted (duration ${log.duration()}): ${message(err)}`);
      throw new Error('migration aborted');
    }
    if (this.errors) {
      log.log('err', `migration finished with problems (duration ${log.duration()})`);
      throw new Error('migration problems');
    }
    log.info(`migration finished successfully (duration ${log.duration()})`);
  }
}

/**
 * A simulated wait of `ms` over the link to the target (its ssh pipe, the websocket tunnel):
 * false when the link is gone (a step may then not have waited at all).
 */
export type LinkStep = (ms: number) => Promise<boolean>;

/** Bytes per second of the slowest of `mbps` (MB/s) and `bwlimitKiB` (KiB/s; 0 or unset: none). */
export function rate(mbps: number[], bwlimitKiB?: number): number {
  let bps = Math.min(...mbps.map((m) => m * 1e6));
  if (bwlimitKiB) bps = Math.min(bps, bwlimitKiB * 1024);
  return bps;
}

/** The image formats a storage takes and its default (pve-storage Plugin get_formats). */
export function storageFormats(s: StorageState): { valid: string[]; default: string } {
  return s.isFileBased ? { valid: ['raw', 'qcow2', 'vmdk'], default: 'raw' } : { valid: ['raw'], default: 'raw' };
}

/**
 * A VM image volume on `s` (a node's copy of the storage): named `vm-<vmid>-disk-N` (`base-` for
 * `base`), the first free N unless `preferred` (a `vm-…-disk-N` or `vm-…-cloudinit` basename) is
 * free; `.format` and the `<vmid>/` directory on file storages. Throws the storage's
 * out-of-space error when it does not fit.
 */
export function allocNamed(
  c: ClusterState,
  s: StorageState,
  vmid: number,
  size: number,
  format: string,
  preferred?: string,
): Volume {
  const taken = new Set([...s.volumes.values()].map((v) => v.volname.replace(/^.*\//, '').replace(/\.[a-z0-9]+$/, '')));
  let name = preferred;
  if (!name || taken.has(name)) {
    if (name && /-cloudinit$/.test(name)) throw new Error(`volume '${s.id}:${name}' already exists`);
    let i = 0;
    while (taken.has(`vm-${vmid}-disk-${i}`) || taken.has(`base-${vmid}-disk-${i}`)) i++;
    name = `vm-${vmid}-disk-${i}`;
  }
  const volname = s.isFileBased ? `${vmid}/${name}.${format}` : name;
  if (s.avail < size) throw new Error(outOfSpaceMessage(s, volname, size));
  const v: Volume = {
    volid: `${s.id}:${volname}`,
    storage: s.id,
    volname,
    content: 'images',
    format: s.isFileBased ? format : 'raw',
    size,
    vmid,
    ctime: c.clock.epoch(),
  };
  s.volumes.set(volname, v);
  return v;
}

/** The basename a volume keeps when it moves to another VMID (`vm-100-disk-1` -> `vm-101-disk-1`). */
export function renamedBase(vol: Volume, from: number, to: number): string {
  return vol.volname
    .replace(/^.*\//, '')
    .replace(/\.[a-z0-9]+$/, '')
    .replace(new RegExp(`-${from}-`), `-${to}-`);
}

/** The VMID a volume name belongs to (`vm-100-disk-0`, `100/vm-100-disk-0.qcow2`, `base-9000-…`). */
export function volumeOwner(volname: string): number | undefined {
  const m = /(?:^|\/)(?:vm|base)-(\d+)-[^/]*$/.exec(volname);
  return m ? Number(m[1]) : undefined;
}

/** How pvesm/lvm report a freed volume in a task log. */
export function freedLine(s: StorageState, volname: string): string | undefined {
  return s.type === 'lvm' || s.type === 'lvmthin' ? `  Logical volume "${volname}" successfully removed.` : undefined;
}
