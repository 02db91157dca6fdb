/**
 * Shared pieces of the `/nodes/{node}/qemu` routes: the VM lookup, qemu-server's early checks
 * (digest, lock, skiplock, per-key privileges, bridges, pools), parameter-to-config conversion and
 * the simulated step durations.
 */
import { type AuthInfo, hasPriv, isRootUser, requirePriv } from '../auth.ts';
import { die, PveHttpError, paramError } from '../errors.ts';
import { fakeCrypt, getOpt, NET_KEY_RE, normalizeTags, parseNic, printNic, privForKey } from '../qemu-config.ts';
import type { RouteCtx } from '../server.ts';
import type { ClusterState, VmState } from '../state.ts';
import type { TaskHandle } from '../tasks.ts';

/** Parameters of create that are not config keys. */
export const CREATE_ONLY = new Set([
  'node',
  'vmid',
  'storage',
  'pool',
  'start',
  'archive',
  'force',
  'unique',
  'bwlimit',
  'live-restore',
  'import-working-storage',
  'ha-managed',
]);
/** Parameters of config POST/PUT that are not config keys. */
export const UPDATE_ONLY = new Set([
  'node',
  'vmid',
  'delete',
  'revert',
  'digest',
  'skiplock',
  'background_delay',
  'force',
]);

/** Simulated durations (ms at speed 1). */
export const DURATIONS = {
  alloc: 400,
  cloudinit: 300,
  start: 2500,
  stop: 1200,
  shutdown: 6000,
  destroy: 1500,
  agentBoot: 25_000,
  linkedClone: 800,
  config: 150,
  template: 1500,
  /** One disk's storage snapshot (lvcreate -s, zfs snapshot, rbd snap create, qemu-img snapshot). */
  volumeSnapshot: 300,
  /** savevm of a snapshot with RAM. */
  savevm: 2000,
  /** A backup of one VM (vzdump). */
  vzdump: 3000,
  /** A file copied into a storage (upload, download-url). */
  fileCopy: 500,
  /** A migration's ssh connection test to the target node (prepare). */
  migrateConnect: 300,
  /** How long that test takes to fail when the target node is down. */
  migrateConnectTimeout: 3000,
  /** A migration's last phase: the config moved, the target resumed, the lock cleared. */
  migrateFinish: 500,
  /** Each command through a remote migration's tunnel (and the tunnel's start). */
  tunnelCommand: 100,
};

/** qemu-server's load_config for a route: the VM on this node, or PVE's "does not exist". */
export function loadVm(c: ClusterState, node: string, vmid: number): VmState {
  const vm = c.vms.get(vmid);
  if (!vm || vm.node !== node) die(`Configuration file 'nodes/${node}/qemu-server/${vmid}.conf' does not exist`);
  return vm;
}

/**
 * Take a VM's config lock as qemu-server's workers do: lock_config, then load_config under it
 * (vm_start, qemu-server src/PVE/QemuServer.pm:5504-5510 at e6352be; update_vm and the cloud-init
 * update alike). A VM destroyed, or migrated off `node`, while this waited for the lock fails with
 * "does not exist", not a worker carrying on with the VM it saw before the wait: a start that did
 * regenerated the destroyed VM's cloud-init drive, a volume of a VM that no longer exists (found
 * by the fault search). Returns the unlock.
 */
export async function lockVm(
  c: ClusterState,
  vm: VmState,
  node: string,
  timeoutMs: number,
  signal?: AbortSignal,
): Promise<() => void> {
  const unlock = await vm.flock.acquire(timeoutMs, signal ? { signal } : {});
  if (c.vms.get(vm.vmid) !== vm || vm.node !== node) {
    unlock();
    die(`Configuration file 'nodes/${node}/qemu-server/${vm.vmid}.conf' does not exist`);
  }
  return unlock;
}

export function checkDigest(c: ClusterState, vm: VmState, params: Record<string, unknown>): void {
  if (params.digest !== undefined && params.digest !== c.digest(vm))
    die('checksum mismatch (file change by other user?)');
}

export function checkLock(vm: VmState, skiplock: boolean): void {
  if (vm.config.lock && !skiplock) die(`VM is locked (${vm.config.lock})`);
}

export function checkSkiplock(auth: AuthInfo, params: Record<string, unknown>): boolean {
  if (!params.skiplock) return false;
  if (!isRootUser(auth)) paramError({ skiplock: 'Only root may use this option.' });
  return true;
}

/** Per-key config privileges (`check_vm_modify_config_perm`), plus root-only keys. */
export function checkConfigPerms(ctx: Pick<RouteCtx, 'c' | 'auth'>, vmid: number, keys: string[]): void {
  const { c, auth } = ctx;
  for (const key of keys) {
    if (key === 'lock' || key === 'args' || key === 'affinity' || key === 'hookscript') {
      if (!isRootUser(auth)) die(`only root can set '${key}' config`);
      continue;
    }
    requirePriv(c, auth, `/vms/${vmid}`, [privForKey(key)]);
  }
}

export function configKeys(params: Record<string, unknown>, skip: Set<string>): Record<string, string> {
  const conf: Record<string, string> = {};
  for (const [k, v] of Object.entries(params)) if (!skip.has(k) && v !== undefined) conf[k] = String(v);
  return conf;
}

/** Non-drive config values as qemu-server stores them (`update`: config POST/PUT, else create). */
export function normalizeValue(c: ClusterState, key: string, value: string, update = false): string {
  if (NET_KEY_RE.test(key)) {
    const nic = parseNic(value);
    nic.mac ??= c.generateMac();
    return printNic(nic);
  }
  if (key === 'tags')
    return (update ? c.profile.updateNormalizesTags : c.profile.createNormalizesTags) ? normalizeTags(value) : value;
  if (key === 'cipassword') return fakeCrypt(value, c.rng.hex(16));
  return value;
}

export function checkBridges(ctx: Pick<RouteCtx, 'c' | 'auth'>, conf: Record<string, string>): void {
  if (!ctx.c.profile.proxmoxOui) return; // check_bridge_access exists from PVE 8
  for (const [k, v] of Object.entries(conf)) {
    if (!NET_KEY_RE.test(k)) continue;
    const { p } = parseNic(v);
    const bridge = getOpt(p, 'bridge');
    if (bridge && !isRootUser(ctx.auth)) {
      const tag = getOpt(p, 'tag');
      const path = `/sdn/zones/localnetwork/${bridge}${tag ? `/${tag}` : ''}`;
      if (
        !hasPriv(ctx.c, ctx.auth, path, 'SDN.Use') &&
        !hasPriv(ctx.c, ctx.auth, `/sdn/zones/localnetwork/${bridge}`, 'SDN.Use')
      ) {
        throw new PveHttpError(403, `Permission check failed (/sdn/zones/localnetwork/${bridge}, SDN.Use)`);
      }
    }
  }
}

/** A route's `permissions`: `check => ['perm', '/vms/{vmid}', [priv]]`. */
export function vmPerm(priv: string | ((ctx: RouteCtx) => string)): (ctx: RouteCtx) => void {
  return (ctx) =>
    requirePriv(ctx.c, ctx.auth, `/vms/${ctx.params.vmid}`, [typeof priv === 'string' ? priv : priv(ctx)]);
}

/** The guest agent's privilege: VM.GuestAgent.Audit from PVE 9, VM.Monitor before. */
export const agentPriv = (ctx: RouteCtx) => (ctx.c.profile.guestAgentPrivs ? 'VM.GuestAgent.Audit' : 'VM.Monitor');

/** A `pool` parameter names an existing pool (create, clone). */
export function checkPoolExists(c: ClusterState, pool: string | undefined): void {
  if (pool !== undefined && !c.pools.has(pool))
    throw new PveHttpError(403, `Permission check failed (pool '${pool}' does not exist)`);
}

/** A `pve-configid-list` parameter (`delete`, `revert`) as a list of keys. */
export function configIdList(value: unknown): string[] {
  return value
    ? String(value)
        .split(/[,;\s]+/)
        .filter(Boolean)
    : [];
}

export function sameModel(oldValue: string | undefined, newValue: string): boolean {
  if (!oldValue) return true;
  return parseNic(oldValue).model === parseNic(newValue).model;
}

export function syncHandle(c: ClusterState): TaskHandle {
  return {
    upid: '',
    signal: new AbortController().signal,
    log: () => {},
    warn: () => {},
    sleep: (ms) => c.clock.sleep(Math.min(ms, 50)),
    wait: (until) => until(new AbortController().signal),
    endOfWork: () => {},
  };
}
