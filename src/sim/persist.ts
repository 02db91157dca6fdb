/**
 * `--state FILE`: the simulator's mutable state (VMs with their snapshots, volumes, pools, tokens, ACLs,
 * files written over SFTP, what guests installed, the SSH keys) saved as JSON, atomically (write +
 * rename, mode 0600: it holds token secrets and private keys), and loaded at start.
 */
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import type { CloudInitDrive } from './cloudinit.ts';
import { settleGuest } from './guest-cloudinit.ts';
import type { Simulator } from './index.ts';
import { publicKeyOf } from './ssh/keys.ts';
import type { AclEntry, SnapshotState, TokenState } from './state.ts';
import type { Volume } from './storage.ts';
import type { FsFile } from './storage-files.ts';

/** A file's bytes as base64. */
interface SavedFile {
  data: string;
  mode: number;
  mtime: number;
  ctime: number;
}
const saveFile = (f: FsFile): SavedFile => ({
  data: f.data.toString('base64'),
  mode: f.mode,
  mtime: f.mtime,
  ctime: f.ctime,
});
const loadFile = (f: SavedFile): FsFile => ({
  data: Buffer.from(f.data, 'base64'),
  mode: f.mode,
  mtime: f.mtime,
  ctime: f.ctime,
});

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
    /** `[special:cloudinit]`, the drive as generated, the guest's disk and files; absent in older files. */
    cloudinitSection?: Record<string, string>;
    ciDrive?: CloudInitDrive;
    guestDisk?: {
      packages: Array<[string, string]>;
      instanceId?: string;
      hostname?: string;
      timezone?: string;
      outputLog: string;
    };
    guestFiles?: Array<[string, string]>;
  }>;
  /** `volume.file` travels as `file` (base64) beside it. */
  volumes: Array<{ node: string; storage: string; volume: Volume; file?: SavedFile }>;
  /** Files and directories written over SFTP outside `snippets/`; absent in older files. */
  storageFiles?: Array<{ node: string; storage: string; files: Array<[string, SavedFile]>; dirs: string[] }>;
  /** Host keys (OpenSSH private keys) by node; absent in older files. */
  sshHostKeys?: Record<string, string>;
  pools: Array<{ poolid: string; comment?: string; members: string[] }>;
  tokens: TokenState[];
  acls: AclEntry[];
}

interface SavedState {
  version: 1;
  clusters: SavedCluster[];
  /** The SSH client key (OpenSSH private key); absent in older files. */
  sshClientKey?: string;
}

export function saveState(sim: Simulator, file: string): void {
  const state: SavedState = {
    version: 1,
    ...(sim.credentials.sshPrivateKey ? { sshClientKey: sim.credentials.sshPrivateKey } : {}),
    clusters: sim.clusters.map((sc) => {
      const c = sc.state;
      const seen = new Set<object>();
      const volumes: SavedCluster['volumes'] = [];
      const storageFiles: NonNullable<SavedCluster['storageFiles']> = [];
      for (const n of c.nodes.values()) {
        for (const s of n.storages.values()) {
          if (seen.has(s)) continue;
          seen.add(s);
          for (const v of s.volumes.values()) {
            const { file, ...volume } = v;
            volumes.push({ node: n.name, storage: s.id, volume, ...(file ? { file: saveFile(file) } : {}) });
          }
          if (s.files.size || s.dirs.size)
            storageFiles.push({
              node: n.name,
              storage: s.id,
              files: [...s.files].map(([k, f]) => [k, saveFile(f)]),
              dirs: [...s.dirs],
            });
        }
      }
      for (const vm of c.vms.values()) settleGuest(c, vm);
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
          ...(Object.keys(vm.cloudinitSection).length ? { cloudinitSection: vm.cloudinitSection } : {}),
          ...(vm.ciDrive ? { ciDrive: vm.ciDrive } : {}),
          guestDisk: { ...vm.guestDisk, packages: [...vm.guestDisk.packages] },
          ...(vm.agent.files.size
            ? { guestFiles: [...vm.agent.files].map(([k, b]): [string, string] => [k, b.toString('base64')]) }
            : {}),
        })),
        volumes,
        ...(storageFiles.length ? { storageFiles } : {}),
        sshHostKeys: Object.fromEntries([...sc.sshServers].map(([node, srv]) => [node, srv.key.privateKey])),
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
  // The same keys as before: clients keep their pinned host keys and their login.
  if (state.sshClientKey && sim.credentials.sshPrivateKey) {
    sim.credentials.sshPrivateKey = state.sshClientKey;
    sim.credentials.sshPublicKey = publicKeyOf(state.sshClientKey, 'provider-proxmox-sim');
  }
  for (const saved of state.clusters) {
    const sc = sim.clusters.find((x) => x.name === saved.name);
    if (!sc) continue;
    const c = sc.state;
    c.vms.clear();
    for (const n of c.nodes.values())
      for (const s of n.storages.values()) {
        s.volumes.clear();
        s.files.clear();
        s.dirs.clear();
      }
    for (const { node, storage, volume, file: f } of saved.volumes)
      c.storage(node, storage)?.volumes.set(volume.volname, { ...volume, ...(f ? { file: loadFile(f) } : {}) });
    for (const sf of saved.storageFiles ?? []) {
      const s = c.storage(sf.node, sf.storage);
      if (!s) continue;
      for (const [k, f] of sf.files) s.files.set(k, loadFile(f));
      for (const d of sf.dirs) s.dirs.add(d);
    }
    for (const [node, key] of Object.entries(saved.sshHostKeys ?? {}))
      sc.sshServers.get(node)?.setHostKey({ privateKey: key, publicKey: publicKeyOf(key, `root@${node}`) });
    for (const v of saved.vms) {
      if (!c.nodes.has(v.node)) continue;
      const vm = c.newVm(v.vmid, v.node, v.config);
      vm.pending = v.pending;
      vm.pendingDelete = new Set(v.pendingDelete);
      vm.haManaged = v.haManaged;
      vm.guestAgent = v.guestAgent ?? true;
      vm.snapshots = new Map(v.snapshots ?? []);
      vm.cloudinitSection = v.cloudinitSection ?? {};
      if (v.ciDrive) vm.ciDrive = v.ciDrive;
      if (v.guestDisk) vm.guestDisk = { ...v.guestDisk, packages: new Map(v.guestDisk.packages) };
      for (const [k, b] of v.guestFiles ?? []) vm.agent.files.set(k, Buffer.from(b, 'base64'));
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
