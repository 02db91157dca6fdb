/**
 * A migration's streams on the bandwidth model (bandwidth.ts): the links they cross and the
 * progress lines of storage_migrate's dd, the drive mirrors and the RAM while they share those
 * links with the other copies, as qemu-server prints them (src/PVE/QemuMigrate.pm at e6352be),
 * for in-cluster and remote migrations alike. Each quarter of a
 * stream is one step of the task; its time counts towards the migration's duration.
 */
import { flowsOf, type Link, nodeNetwork, storageLink } from './bandwidth.ts';
import { MIGRATION_NETWORK_MBPS, type MigrationLog, rate, renderDuration } from './migration.ts';
import { renderBytes } from './routes/qemu-drives.ts';
import type { ClusterState } from './state.ts';
import type { StorageState } from './storage.ts';

/**
 * The links an in-cluster migration's streams cross (bandwidth.ts): the source node's network out
 * and the target node's in (MIGRATION_NETWORK_MBPS each) and, for a disk, the two storages. A
 * remote migration passes its two clusters' nodes the same way.
 */
export function migrationLinks(
  src: { c: ClusterState; node: string; storage?: StorageState },
  dst: { c: ClusterState; node: string; storage?: StorageState },
): Link[] {
  return [
    ...(src.storage ? [storageLink(src.storage)] : []),
    nodeNetwork(src.c, src.node, MIGRATION_NETWORK_MBPS).tx,
    nodeNetwork(dst.c, dst.node, MIGRATION_NETWORK_MBPS).rx,
    ...(dst.storage ? [storageLink(dst.storage)] : []),
  ];
}

/**
 * copyProgress on the shared links: storage_migrate's dd lines while `size` bytes copy through
 * `links` (at most `bwlimitKiB`), sharing them with the other copies. False, without a line, when
 * `linkUp` says the target went away (checked before and after each quarter).
 */
export async function sharedCopyProgress(
  c: ClusterState,
  log: MigrationLog,
  size: number,
  links: Link[],
  bwlimitKiB: number | undefined,
  linkUp: () => boolean,
): Promise<boolean> {
  if (!linkUp()) return false;
  const flow = flowsOf(c.clock).start(links, size, bwlimitKiB ? bwlimitKiB * 1024 : undefined);
  const base = log.elapsed;
  // dd prints about every 3 s: a copy expected under 4 s shows its last line only.
  const short = flow.rate > 0 && (size / flow.rate) * 1000 < 4000;
  try {
    for (let q = 1; q <= 4; q++) {
      if (!linkUp()) return false;
      const ms = await log.copied(flow, (size * q) / 4, base);
      if (!linkUp()) return false;
      if (q < 4 && short) continue;
      const bytes = Math.floor((size * q) / 4);
      const secs = Math.max(1, Math.round(ms / 1000));
      log.info(
        `${bytes} bytes (${(bytes / 1e9).toFixed(1)} GB, ${renderBytes(bytes)}) copied, ${secs} s, ${Math.round(bytes / secs / 1e6)} MB/s`,
      );
    }
    return true;
  } finally {
    flow.cancel();
  }
}

/** mirrorProgress on the shared links (see sharedCopyProgress): throws when the target went away. */
export async function sharedMirrorProgress(
  c: ClusterState,
  log: MigrationLog,
  d: string,
  size: number,
  links: Link[],
  bwlimitKiB: number | undefined,
  linkUp: () => boolean,
): Promise<void> {
  const gone = () => new Error(`mirroring error: ${d}: Input/output error (io-status: ok)`);
  if (!linkUp()) throw gone();
  const flow = flowsOf(c.clock).start(links, size, bwlimitKiB ? bwlimitKiB * 1024 : undefined);
  const base = log.elapsed;
  const of = renderBytes(size);
  try {
    for (let q = 1; q <= 4; q++) {
      if (!linkUp()) throw gone();
      const ms = await log.copied(flow, (size * q) / 4, base);
      if (!linkUp()) throw gone();
      log.info(
        `${d}: transferred ${renderBytes(Math.floor((size * q) / 4))} of ${of} (${(q * 25).toFixed(2)}%) in ${renderDuration(ms / 1000)}${q === 4 ? ', ready' : ''}`,
      );
    }
  } finally {
    flow.cancel();
  }
}

/** ramProgress on the shared links (the two nodes' networks): the speed shown is the one it got. */
export async function sharedRamProgress(
  c: ClusterState,
  log: MigrationLog,
  mem: number,
  links: Link[],
  bwlimitKiB: number | undefined,
  linkUp: () => boolean,
): Promise<void> {
  const broken = () => {
    log.info('migration status error: failed - Unable to write to socket: Broken pipe');
    return new Error('aborting');
  };
  if (!linkUp()) throw broken();
  const flow = flowsOf(c.clock).start(links, mem, bwlimitKiB ? bwlimitKiB * 1024 : undefined);
  const base = log.elapsed;
  let ms = 0;
  try {
    for (let q = 1; q <= 4; q++) {
      if (!linkUp()) throw broken();
      ms = await log.copied(flow, (mem * q) / 4, base);
      if (!linkUp()) throw broken();
      if (q < 4)
        log.info(
          `migration active, transferred ${renderBytes(Math.floor((mem * q) / 4))} of ${renderBytes(mem)} VM-state, ${renderBytes(flow.rate)}/s`,
        );
    }
  } finally {
    flow.cancel();
  }
  const avg = ms > 0 ? (mem / ms) * 1000 : rate([MIGRATION_NETWORK_MBPS], bwlimitKiB);
  log.info(`average migration speed: ${renderBytes(avg)}/s - downtime 42 ms`);
  log.info(`migration completed, transferred ${renderBytes(mem)} VM-state`);
  log.info('migration status: completed');
}
