/**
 * The ideal makespan of a fleet on the simulator: the best schedule any client could reach under
 * the simulator's own physical limits, with no polling and no overhead. Each VM goes through the
 * steps the simulator's workers take for a create from an image (import-from), timed by the same
 * constants and the same bandwidth model: the import's allocation under its storage's lock
 * (storage-lock.ts, DURATIONS.alloc), the copy of the image sharing the storage with the other
 * copies (bandwidth.ts, the links of writeLinks), the cloud-init drive's allocation under the lock
 * (DURATIONS.cloudinit), the resize (DURATIONS.config), the start (DURATIONS.start), then the
 * guest until a client can see it Ready (guestReadyMs: the agent's answer and cloud-init's end in
 * the guest, then one `cloud-init status`). Every VM of a phase starts at once and a phase starts
 * when the previous one is done (phased), or all start at once (unphased): with the same steps
 * after the copy, no order finishes a storage's last copy earlier, since the storage never idles.
 *
 * `shared: false` computes the same with the model before issue 16 (every copy at the storage's
 * full bandwidth, no lock), to show what the fair share changes.
 */
import { FlowScheduler, type Link, ManualTimeline, storageLink } from './bandwidth.ts';
import { cloudInitCommand } from './guest-cloudinit.ts';
import { parseDrive } from './qemu-config.ts';
import { DURATIONS } from './routes/qemu-common.ts';
import type { ClusterState, VmState } from './state.ts';
import type { StorageState } from './storage.ts';

export interface IdealVm {
  key: string;
  /** Position of its rollout phase (0 first). */
  phase: number;
  /** The storage its disk is imported to, as its node sees it (a shared one is one object). */
  storage: StorageState;
  /** The storage of its cloud-init drive. */
  ciStorage: StorageState;
  imageBytes: number;
  /** From the end of the start to Ready (guestReadyMs). */
  guestMs: number;
}

export interface IdealResult {
  /** Simulated ms from the first create to the last VM Ready. */
  makespanMs: number;
  /** Per phase: its simulated ms (phased), in phase order. */
  phaseMs: number[];
  /** Per VM: simulated ms at which it is Ready. */
  readyAtMs: Record<string, number>;
}

/** FIFO exclusive lock on the manual timeline (the storage flock, which an ideal client never lets time out). */
class FifoLock {
  private tail: Promise<void> = Promise.resolve();
  async hold(ms: number, timeline: ManualTimeline): Promise<void> {
    const prev = this.tail;
    let release!: () => void;
    this.tail = new Promise((r) => {
      release = r;
    });
    await prev;
    await timeline.sleep(ms);
    release();
  }
}

/** The ideal makespan of `vms` (see the file's comment). */
export async function idealMakespan(
  vms: IdealVm[],
  opts: { phased: boolean; shared?: boolean } = { phased: true },
): Promise<IdealResult> {
  const shared = opts.shared !== false;
  const timeline = new ManualTimeline();
  const flows = new FlowScheduler(timeline);
  const locks = new Map<StorageState, FifoLock>();
  const lock = (s: StorageState) => {
    let l = locks.get(s);
    if (!l) {
      l = new FifoLock();
      locks.set(s, l);
    }
    return l;
  };
  const alloc = (s: StorageState, ms: number) => (shared ? lock(s).hold(ms, timeline) : timeline.sleep(ms));
  const links = (s: StorageState): Link[] =>
    // Before the fair share every copy had its storage to itself: a link of its own.
    shared ? [storageLink(s)] : [{ name: `copy to ${s.id}`, bytesPerSec: s.bandwidth * 1e6 }];
  const readyAtMs: Record<string, number> = {};
  const one = async (vm: IdealVm) => {
    if (shared) await alloc(vm.storage, DURATIONS.alloc);
    await flows.start(links(vm.storage), vm.imageBytes).reached(vm.imageBytes);
    await alloc(vm.ciStorage, DURATIONS.cloudinit);
    await timeline.sleep(DURATIONS.config);
    await timeline.sleep(DURATIONS.start);
    await timeline.sleep(vm.guestMs);
    readyAtMs[vm.key] = timeline.now();
  };
  const groups = opts.phased
    ? [...new Set(vms.map((v) => v.phase))].sort((a, b) => a - b).map((p) => vms.filter((v) => v.phase === p))
    : [vms];
  const phaseMs: number[] = [];
  for (const g of groups) {
    const start = timeline.now();
    const done = Promise.all(g.map(one));
    await timeline.run();
    await done;
    phaseMs.push(timeline.now() - start);
  }
  return { makespanMs: timeline.now(), phaseMs, readyAtMs };
}

/**
 * From the end of a VM's start to the moment a client can see it Ready, by the simulator's model
 * of this boot: the guest agent's first answer (agentReadyAt) and cloud-init's end in the guest
 * (the run planned at the boot), whichever is later, then one `cloud-init status` through the
 * agent. Read from a VM that has booted (its run is planned at the boot).
 */
export function guestReadyMs(c: ClusterState, vm: VmState): number {
  const speed = c.clock.speed;
  const agentMs = Math.max(0, vm.agentReadyAt - vm.startedAt) * speed;
  const run = vm.cloudInit;
  const cloudInitMs = run ? Math.max(0, run.doneAt - run.bootAt) * speed : 0;
  const status = cloudInitCommand(c, vm, ['status', '--format', 'json']);
  return Math.max(agentMs, cloudInitMs) + status.ms;
}

/**
 * The IdealVm of a VM the simulator holds (after a create from `image`): its disk's and
 * cloud-init drive's storages from its config, the image's size, its guest's time to Ready.
 */
export function idealVmOf(c: ClusterState, vm: VmState, image: string, key: string, phase: number): IdealVm {
  const storageOf = (k: string): StorageState => {
    const file = parseDrive(vm.config[k] ?? '').file;
    const s = c.storage(vm.node, file.split(':')[0] ?? '');
    if (!s) throw new Error(`VM ${vm.vmid}: no storage for ${k} (${vm.config[k]})`);
    return s;
  };
  const disk = Object.keys(vm.config).find(
    (k) => /^(scsi|virtio|sata|ide)\d+$/.test(k) && !/cloudinit|media=cdrom/.test(vm.config[k]!),
  );
  const ci = Object.keys(vm.config).find((k) => /cloudinit/.test(vm.config[k]!));
  if (!disk || !ci) throw new Error(`VM ${vm.vmid}: no imported disk and cloud-init drive in its config`);
  const source = c.volume(vm.node, image);
  if (!source) throw new Error(`VM ${vm.vmid}: image ${image} not found on node ${vm.node}`);
  return {
    key,
    phase,
    storage: storageOf(disk),
    ciStorage: storageOf(ci),
    imageBytes: source.size,
    guestMs: guestReadyMs(c, vm),
  };
}
