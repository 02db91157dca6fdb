/**
 * bench/state-store: what the local runtime's state store costs per `apply` of N resources.
 *
 * Replays the store traffic of a real `apply` (measured on the simulator with 30 VMs: per
 * resource 1 manifest write, 3 metadata writes, about 5 status writes, 8 events, a few questions
 * for the VMID holders, and the runtime's check of every resource every 200 ms) against
 * FileStore (src/local/store.ts), 8 resources in flight like apply's 8 workers, each step of the 8
 * taken concurrently (their writes share a group commit as the workers' do). No Proxmox is
 * involved: this isolates the store, whose cost used to grow as N^2 (every write rewrote the whole
 * state file). Each N runs in its own child process, so that its peak RSS is its own.
 *
 * Prints one JSON object: per N the writes, bytes written (Linux /proc/self/io wchar: every write
 * syscall, WAL and checkpoints included), bytes per resource, the state's size on disk, peak RSS,
 * CPU and wall time of the apply; then, in a new process (nextRun), the time to open the store
 * again (the next apply) and to read it as status does, with that process's peak RSS. A run over
 * its time budget stops and says how far it got (finished: false).
 *
 * The VMID holders come from the index the runtime keeps (src/vm/vmid-holders.ts); `--scan`
 * asks a scan of the whole store instead, as the runtime did before (O(N) per create).
 *
 * Usage: node bench/state-store.ts [--n 30,300,1000,10000] [--budget-s 600] [--lists-per-create 2] [--scan]
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { ProxmoxVM } from '../src/api/proxmoxvm.ts';
import { FileStore } from '../src/local/store.ts';
import { vmidHoldersOf } from '../src/vm/connector.ts';
import { VmidHolderIndex } from '../src/vm/vmid-holders.ts';
import { readStateFile } from '../src/workspace/state-file.ts';
import { dirBytes, wchar } from './proc-io.ts';

const { values } = parseArgs({
  options: {
    n: { type: 'string', default: '30,300,1000,10000' },
    'budget-s': { type: 'string', default: '600' },
    'lists-per-create': { type: 'string', default: '2' },
    scan: { type: 'boolean', default: false },
    child: { type: 'boolean', default: false },
    reread: { type: 'boolean', default: false },
    dir: { type: 'string' },
  },
});

const FINALIZER = 'finalizer.managedresource.crossplane.io';
const T0 = Date.parse('2026-01-01T00:00:00Z');

function manifest(i: number): ProxmoxVM {
  const name = `vm-${String(i).padStart(5, '0')}`;
  return {
    apiVersion: 'proxmox.sankofa.io/v1alpha1',
    kind: 'ProxmoxVM',
    metadata: { name, namespace: 'default', uid: '', generation: 1 },
    spec: {
      forProvider: {
        name,
        site: i % 2 ? 'site-1' : 'site-2',
        node: i % 2 ? 'ml110-01' : 'r630-01',
        cpu: 1,
        memory: '1Gi',
        disk: '4Gi',
        storage: 'local-lvm',
        network: 'vmbr0',
        image: 'local:import/ubuntu-22.04-cloud.qcow2',
      },
      providerConfigRef: { name: 'default' },
    },
  } as ProxmoxVM;
}

const cond = (type: string, status: string, reason: string, message?: string) => ({
  type,
  status,
  reason,
  ...(message ? { message } : {}),
  lastTransitionTime: new Date(T0).toISOString().replace(/\.\d+Z$/, 'Z'),
  observedGeneration: 1,
});

/** The status a reconcile writes at each step, about as large as the real one (1.7 KB in all). */
function statusAt(i: number, step: string, vmid: number): ProxmoxVM['status'] {
  const ready = step === 'Ready';
  return {
    atProvider: {
      site: i % 2 ? 'site-1' : 'site-2',
      step,
      node: i % 2 ? 'ml110-01' : 'r630-01',
      vmId: vmid,
      ...(ready
        ? {
            smbiosUuid: '00000000-0000-4000-8000-000000000000',
            state: 'running',
            qmpStatus: 'running',
            ipAddresses: ['203.0.113.100'],
            ipSource: 'agent',
          }
        : { task: `UPID:pve:000${vmid}:00000000:00000000:qmcreate:${vmid}:root@pam:` }),
    },
    conditions: [
      cond('Ready', ready ? 'True' : 'False', ready ? 'Available' : 'Creating'),
      cond('Synced', 'True', 'ReconcileSuccess'),
      cond('PendingReboot', 'False', 'NoPendingChanges'),
      cond('CloudInit', 'Unknown', 'StatusUnavailable', 'cannot run cloud-init status through the guest agent yet'),
    ],
    observedGeneration: 1,
  } as unknown as ProxmoxVM['status'];
}

/** One N's apply in this process. */
async function child(n: number, dir: string, budgetMs: number, listsPerCreate: number, scan: boolean): Promise<object> {
  const file = join(dir, 'state.db');
  const deadline = performance.now() + budgetMs;
  const w0 = wchar();
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const store = new FileStore<ProxmoxVM>(file);
  store.open('bench');
  const holders = new VmidHolderIndex(['site-1', 'site-2']);
  store.addIndex((k, o) => holders.set(k, o));
  let writes = 0;
  let listings = 0;
  let checks = 0;
  const keys: string[] = [];
  // applyManifests: every manifest enters the store first.
  for (let i = 0; i < n; i++) {
    const m = manifest(i);
    const key = `default/${m.metadata.name}`;
    keys.push(key);
    m.metadata.uid = store.getSync(key)?.metadata.uid ?? '';
    store.apply(m);
    writes++;
    if (performance.now() > deadline) break;
  }
  let lastCheck = performance.now();
  /** The runtime's check every 200 ms: where every resource stands. */
  const check = () => {
    if (performance.now() - lastCheck < 200) return;
    lastCheck = performance.now();
    let ready = 0;
    for (const k of keys) if (store.getSync(k)?.status?.atProvider?.step === 'Ready') ready++;
    checks++;
    return ready;
  };
  /** One resource's reconciles, as a sequence of store operations (yielding between them). */
  async function* lifecycle(i: number): AsyncGenerator<void> {
    const key = keys[i]!;
    const vmid = 100 + i;
    let r = (await store.get(key))!;
    r.metadata.finalizers = [FINALIZER];
    r = await store.update(r);
    writes++;
    yield;
    const site = r.spec.forProvider.site;
    for (let l = 0; l < listsPerCreate; l++) {
      // The runtime's vmidHolders: the VMIDs this state holds on the site (VMID choice, marker
      // search), from the index the store keeps (src/vm/vmid-holders.ts), or with --scan from a
      // listing of every resource as before it (vmidHoldersOf in src/vm/connector.ts).
      const held = scan ? vmidHoldersOf(store.listSync(), site!, undefined) : holders.holdersOf(site!);
      if (held.get(vmid) !== undefined && held.get(vmid) !== r.metadata.uid) throw new Error(`VMID ${vmid} held twice`);
      listings++;
    }
    r.metadata.annotations = {
      ...r.metadata.annotations,
      'crossplane.io/external-name': String(vmid),
      'crossplane.io/external-create-pending': new Date(T0).toISOString(),
    };
    r = await store.update(r);
    writes++;
    store.event(r, 'Normal', 'Creating', 'The external resource is being created');
    yield;
    for (const step of ['Creating', 'Resizing', 'Starting', 'WaitingForAgent']) {
      r.status = statusAt(i, step, vmid);
      r = await store.updateStatus(r);
      writes++;
      store.event(r, 'Normal', 'ReconcileSuccess', 'Synced is True');
      if (step === 'Creating') {
        r.metadata.annotations = {
          ...r.metadata.annotations,
          'crossplane.io/external-create-succeeded': new Date(T0).toISOString(),
        };
        r = await store.update(r);
        writes++;
      }
      yield;
    }
    r.status = statusAt(i, 'Ready', vmid);
    r = await store.updateStatus(r);
    writes++;
    store.event(r, 'Normal', 'Available', 'Ready is True');
  }
  // 8 resources in flight, round robin, like apply's 8 workers.
  const queue = keys.map((_, i) => i);
  const inFlight: AsyncGenerator<void>[] = [];
  let done = 0;
  while ((queue.length || inFlight.length) && performance.now() < deadline) {
    while (inFlight.length < 8 && queue.length) inFlight.push(lifecycle(queue.shift()!));
    // Each takes its next step at once, as the workers' reconciles run concurrently (so that their
    // writes of one turn share the store's group commit, as the engine's do).
    const steps = await Promise.all(inFlight.map((g) => g.next()));
    for (let j = steps.length - 1; j >= 0; j--)
      if (steps[j]!.done) {
        inFlight.splice(j, 1);
        done++;
      }
    check();
    // A turn of the event loop per round, as the engine's reconciles take (they wait on I/O).
    await new Promise((r) => setImmediate(r));
  }
  const finished = done === n;
  store.close();
  const applyMs = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  const w1 = wchar();
  const bytesWritten = w0 !== undefined && w1 !== undefined ? w1 - w0 : null;
  const stateBytes = dirBytes(dir);
  const rssPeakApplyMB = Math.round(process.resourceUsage().maxRSS / 1024);

  return {
    n,
    finished,
    resourcesReady: done,
    writes,
    listings,
    checks,
    bytesWritten,
    bytesPerResource: bytesWritten !== null && done ? Math.round(bytesWritten / done) : null,
    bytesPerWrite: bytesWritten !== null && writes ? Math.round(bytesWritten / writes) : null,
    stateBytes,
    rssPeakMB: rssPeakApplyMB,
    cpuMs: Math.round((cpu.user + cpu.system) / 1000),
    applyMs: Math.round(applyMs),
  };
}

/**
 * The next run on the same state, in a process of its own (as the CLI runs it): apply's open
 * (lock, load every resource) and status's read (readStateFile).
 */
function reread(n: number, dir: string): object {
  const file = join(dir, 'state.db');
  const r0 = performance.now();
  const again = new FileStore<ProxmoxVM>(file);
  again.open('bench');
  if (again.listSync().length !== n) throw new Error('reopened store lost objects');
  again.close();
  const openMs = Math.round(performance.now() - r0);
  const s0 = performance.now();
  const read = readStateFile<ProxmoxVM>(file);
  if (read?.objects.length !== n) throw new Error('state read lost objects');
  return {
    openMs,
    readMs: Math.round(performance.now() - s0),
    rssPeakMB: Math.round(process.resourceUsage().maxRSS / 1024),
  };
}

if (values.child) {
  const n = Number(values.n);
  const out = values.reread
    ? reread(n, values.dir!)
    : await child(n, values.dir!, Number(values['budget-s']) * 1000, Number(values['lists-per-create']), values.scan);
  process.stdout.write(`${JSON.stringify(out)}\n`);
} else {
  const results: object[] = [];
  const run = (args: string[]) => {
    const r = spawnSync(process.execPath, [new URL(import.meta.url).pathname, '--child', ...args], {
      encoding: 'utf8',
      maxBuffer: 1 << 24,
    });
    if (r.status !== 0) throw new Error(`${args.join(' ')}: ${r.stderr || r.stdout}`);
    return JSON.parse(r.stdout.trim().split('\n').at(-1)!) as { finished?: boolean };
  };
  for (const n of values.n.split(',').map(Number)) {
    const dir = mkdtempSync(join(tmpdir(), 'pp-bench-state-'));
    try {
      const common = ['--n', String(n), '--dir', dir];
      const apply = run([
        ...common,
        '--budget-s',
        values['budget-s'],
        '--lists-per-create',
        values['lists-per-create'],
        ...(values.scan ? ['--scan'] : []),
      ]);
      results.push({ ...apply, nextRun: apply.finished ? run([...common, '--reread']) : null });
    } finally {
      if (existsSync(dir)) rmSync(dir, { recursive: true, force: true });
    }
  }
  const byN = results as Array<{ n: number; bytesWritten: number | null; finished: boolean }>;
  // Growth exponent of bytes written between consecutive finished sizes: 1 is O(N), 2 is O(N^2).
  const growth = byN.slice(1).flatMap((r, i) => {
    const p = byN[i]!;
    return r.finished && p.finished && r.bytesWritten && p.bytesWritten
      ? [
          {
            from: p.n,
            to: r.n,
            exponent: +(Math.log(r.bytesWritten / p.bytesWritten) / Math.log(r.n / p.n)).toFixed(2),
          },
        ]
      : [];
  });
  console.log(JSON.stringify({ bench: 'state-store', node: process.version, results, bytesGrowth: growth }, null, 2));
}
