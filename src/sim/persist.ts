/**
 * `--state FILE`: the simulator's mutable state (VMs with their snapshots, volumes, pools, tokens, ACLs)
 * saved as JSON, atomically (write + rename, mode 0600: it holds token secrets), and loaded at start.
 */
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import type { Simulator } from './index.ts';
import type { AclEntry, SnapshotState, TokenState, Volume } from './state.ts';

interface SavedCluster {
  name: string;
  vms: Array<{
    vmid: number;
    node: string;
    config: Record<string, string>;
    pending: Record<string, string>;
    pendingDelete: string[];
    status: string;
    haManaged: boolean;
    /** Whether the guest runs qemu-guest-agent; absent in older files (then true, as before). */
    guestAgent?: boolean;
    /** The `[snapname]` sections; absent in older files. */
    snapshots?: Array<[string, SnapshotState]>;
  }>;
  volumes: Array<{ node: string; storage: string; volume: Volume }>;
  pools: Array<{ poolid: string; comment?: string; members: string[] }>;
  tokens: TokenState[];
  acls: AclEntry[];
}

interface SavedState {
  version: 1;
  clusters: SavedCluster[];
}

export function saveState(sim: Simulator, file: string): void {
  const state: SavedState = {
    version: 1,
    clusters: sim.clusters.map((sc) => {
      const c = sc.state;
      const seen = new Set<object>();
      const volumes: SavedCluster['volumes'] = [];
      for (const n of c.nodes.values()) {
        for (const s of n.storages.values()) {
          if (seen.has(s)) continue;
          seen.add(s);
          for (const v of s.volumes.values()) volumes.push({ node: n.name, storage: s.id, volume: v });
        }
      }
      return {
        name: c.name,
        vms: [...c.vms.values()].map((vm) => ({
          vmid: vm.vmid,
          node: vm.node,
          config: vm.config,
          pending: vm.pending,
          pendingDelete: [...vm.pendingDelete],
          status: vm.status,
          haManaged: vm.haManaged,
          guestAgent: vm.guestAgent,
          ...(vm.snapshots.size ? { snapshots: [...vm.snapshots] } : {}),
        })),
        volumes,
        pools: [...c.pools.values()].map((p) => ({
          poolid: p.poolid,
          ...(p.comment ? { comment: p.comment } : {}),
          members: [...p.members],
        })),
        tokens: [...c.tokens.values()],
        acls: c.acls,
      };
    }),
  };
  const tmp = `${file}.tmp-${process.pid}`;
  writeFileSync(tmp, JSON.stringify(state), { mode: 0o600 });
  renameSync(tmp, file);
}

export function loadState(sim: Simulator, file: string): void {
  if (!existsSync(file)) return;
  let state: SavedState;
  try {
    state = JSON.parse(readFileSync(file, 'utf8')) as SavedState;
  } catch (e) {
    throw new Error(`${file}: not a simulator state file (${(e as Error).message})`);
  }
  if (state.version !== 1 || !Array.isArray(state.clusters))
    throw new Error(`${file}: unsupported simulator state version`);
  for (const saved of state.clusters) {
    const sc = sim.clusters.find((x) => x.name === saved.name);
    if (!sc) continue;
    const c = sc.state;
    c.vms.clear();
    for (const n of c.nodes.values()) for (const s of n.storages.values()) s.volumes.clear();
    for (const { node, storage, volume } of saved.volumes)
      c.storage(node, storage)?.volumes.set(volume.volname, volume);
    for (const v of saved.vms) {
      if (!c.nodes.has(v.node)) continue;
      const vm = c.newVm(v.vmid, v.node, v.config);
      vm.pending = v.pending;
      vm.pendingDelete = new Set(v.pendingDelete);
      vm.haManaged = v.haManaged;
      vm.guestAgent = v.guestAgent ?? true;
      vm.snapshots = new Map(v.snapshots ?? []);
      if (v.status === 'running') {
        vm.status = 'running';
        vm.startedAt = c.clock.now();
        vm.agentReadyAt = c.clock.now();
      }
    }
    c.pools.clear();
    for (const p of saved.pools)
      c.pools.set(p.poolid, {
        poolid: p.poolid,
        ...(p.comment ? { comment: p.comment } : {}),
        members: new Set(p.members),
      });
    for (const t of saved.tokens)
      if (!c.tokens.has(`${t.userid}!${t.tokenid}`)) c.tokens.set(`${t.userid}!${t.tokenid}`, t);
    for (const u of saved.tokens)
      if (!c.users.has(u.userid)) c.users.set(u.userid, { userid: u.userid, enable: true, groups: [] });
    // Saved ACLs, plus those given at this start (e.g. for a new --token user).
    const current = [...c.acls];
    c.acls.splice(0, c.acls.length, ...saved.acls);
    for (const a of current) {
      if (!c.acls.some((x) => x.path === a.path && x.ugid === a.ugid && x.roleid === a.roleid)) c.acls.push(a);
    }
  }
}
