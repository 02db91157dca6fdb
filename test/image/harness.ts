/**
 * ProxmoxImages, ProxmoxTemplates and ProxmoxVMs in the cluster-less runtime (LocalRuntime: the
 * real engine, connectors and stores) against the in-process simulator on a two-node site, with a
 * loopback HTTP server that serves the image files (the simulator's download-url fetches from the
 * loopback only). Tests wait on conditions by polling the stores; nothing waits on wall time.
 */
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { ProxmoxImage } from '../../src/api/proxmoximage.ts';
import type { ProxmoxTemplate } from '../../src/api/proxmoxtemplate.ts';
import type { ForProvider, ProxmoxVM } from '../../src/api/proxmoxvm.ts';
import { getCondition, keyOf } from '../../src/engine/resource.ts';
import { LocalRuntime } from '../../src/local/runtime.ts';
import type { SimCluster, Simulator } from '../../src/sim/index.ts';
import type { Profile } from '../../src/sim/profiles.ts';
import { parseTopology } from '../../src/sim/topology.ts';
import { startTestSim } from '../helpers/sim.ts';
import { simConfig, waitUntil } from '../vm/harness.ts';

export const SITE = 'site-1';
export const NODES = ['pve1', 'pve2'] as const;

const node = (name: string) => `
      - name: ${name}
        cpus: 16
        memory: 64G
        memoryUsed: 2G
        storages:
          - { id: local, type: dir, path: /var/lib/vz, content: [iso, vztmpl, import, snippets], total: 100G, bandwidth: 1,
              volumes: [{ name: import/existing.qcow2, size: 700M, format: qcow2, guestAgent: true }] }
          - { id: local-lvm, type: lvmthin, content: [images, rootdir], total: 400G, bandwidth: 1 }
          - { id: thick, type: lvm, content: [images], total: 400G, bandwidth: 1 }
          - { id: ceph, type: rbd, content: [images], total: 2T, shared: true, bandwidth: 1 }
          - { id: shared-nfs, type: nfs, path: /mnt/pve/shared-nfs, content: [import, iso], total: 1T, shared: true, bandwidth: 1 }
        bridges:
          - { name: vmbr0, cidr: 198.51.100.10/24, gateway: 198.51.100.1, dhcp: 198.51.100.100-198.51.100.250 }`;

export function topology(profile?: Profile) {
  return parseTopology(
    `clusters:
  - name: ${SITE}
    listen: 127.0.0.1:8006${profile ? `\n    profile: "${profile}"` : ''}
    nodes:${NODES.map(node).join('')}
`,
    'images.yaml',
  );
}

/** A loopback HTTP server with files to download. */
export class FileServer {
  private readonly files = new Map<string, Buffer>();
  private server: Server | undefined;
  base = '';
  requests = 0;

  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      this.requests++;
      const data = this.files.get(req.url ?? '');
      if (!data) {
        res.writeHead(404).end();
        return;
      }
      res.writeHead(200, { 'content-length': data.length }).end(data);
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.base = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  /** Serve `data` at `/path`; returns its URL and sha256. */
  add(path: string, data: Buffer): { url: string; sha256: string; sha512: string; size: number } {
    this.files.set(path, data);
    return {
      url: `${this.base}${path}`,
      sha256: createHash('sha256').update(data).digest('hex'),
      sha512: createHash('sha512').update(data).digest('hex'),
      size: data.length,
    };
  }

  close(): Promise<void> {
    return new Promise((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }
}

export function image(name: string, fp: Partial<ProxmoxImage['spec']['forProvider']> & { url: string }): ProxmoxImage {
  return {
    apiVersion: 'proxmox.sankofa.io/v1alpha1',
    kind: 'ProxmoxImage',
    metadata: { name, namespace: 'default', uid: '', generation: 1 },
    spec: {
      forProvider: { checksum: { algorithm: 'sha256', value: '0'.repeat(64) }, site: SITE, ...fp },
      providerConfigRef: { name: 'default' },
    },
  };
}

export function template(name: string, fp: Partial<ProxmoxTemplate['spec']['forProvider']> = {}): ProxmoxTemplate {
  return {
    apiVersion: 'proxmox.sankofa.io/v1alpha1',
    kind: 'ProxmoxTemplate',
    metadata: { name, namespace: 'default', uid: '', generation: 1 },
    spec: {
      forProvider: { imageRef: { name: 'ubuntu' }, site: SITE, ...fp },
      providerConfigRef: { name: 'default' },
    },
  };
}

export function cloneVm(name: string, fp: Partial<ForProvider> = {}): ProxmoxVM {
  return {
    apiVersion: 'proxmox.sankofa.io/v1alpha1',
    kind: 'ProxmoxVM',
    metadata: { name, namespace: 'default', uid: '', generation: 1 },
    spec: {
      forProvider: {
        site: SITE,
        node: 'pve1',
        cpu: 1,
        memory: '1Gi',
        network: 'vmbr0',
        templateRef: { name: 'ubuntu' },
        // A downloaded cloud image has no qemu-guest-agent (nor have its clones): a VM without the
        // agent is Ready once it runs.
        agent: false,
        ...fp,
      },
      providerConfigRef: { name: 'default' },
    },
  };
}

/** A simulator, a file server and a LocalRuntime over them, reconciling until stop(). */
export class World {
  sim!: Simulator;
  files!: FileServer;
  rt!: LocalRuntime;

  static async start(opts: { profile?: Profile } = {}): Promise<World> {
    const w = new World();
    // Speed 100 and 1 MB/s storages: the simulator's copy model (src/sim/bandwidth.ts) loses a
    // small copy's end to floating-point rounding once its model time is large (see the report
    // of issue 15); slower model time and rates keep the rounding below its slack.
    w.sim = await startTestSim({ topology: topology(opts.profile), ssh: false, speed: 100 });
    w.files = await new FileServer().start();
    w.rt = new LocalRuntime({
      config: simConfig(w.sim),
      taskPollMs: 10,
      agentPollMs: 20,
      backoff: { baseMs: 20, capMs: 400 },
      createFailureScheduleMs: [40, 80, 160],
      creationGraceMs: 2000,
    });
    await w.rt.controller.start();
    await w.rt.imageRuntime.start();
    return w;
  }

  get cluster(): SimCluster {
    return this.sim.cluster(SITE);
  }

  async stop(): Promise<void> {
    await Promise.all([this.rt.controller.stop(), this.rt.imageRuntime.stop()]);
    await this.rt.close();
    await this.files.close();
    await this.sim.close();
  }

  applyImage(i: ProxmoxImage): string {
    this.rt.applyImages('ProxmoxImage', [i]);
    return keyOf(i);
  }

  applyTemplate(t: ProxmoxTemplate): string {
    this.rt.applyImages('ProxmoxTemplate', [t]);
    return keyOf(t);
  }

  applyVm(v: ProxmoxVM): string {
    this.rt.applyManifests([v]);
    return keyOf(v);
  }

  image(key: string): ProxmoxImage {
    return this.rt.images.getSync(key)!;
  }

  template(key: string): ProxmoxTemplate {
    return this.rt.templates.getSync(key)!;
  }

  vm(key: string): ProxmoxVM {
    return this.rt.store.getSync(key)!;
  }

  /** Wait until the object satisfies `pred` (status shown on timeout). */
  waitFor<T extends ProxmoxImage | ProxmoxTemplate | ProxmoxVM>(
    get: () => T | undefined,
    pred: (o: T) => boolean,
    what: string,
  ): Promise<T> {
    return waitUntil(
      () => {
        const o = get();
        return o && pred(o) ? o : undefined;
      },
      what,
      30_000,
      () => JSON.stringify(get()?.status ?? null),
    );
  }

  waitImage(key: string, pred: (o: ProxmoxImage) => boolean, what: string): Promise<ProxmoxImage> {
    return this.waitFor(() => this.rt.images.getSync(key), pred, what);
  }

  waitTemplate(key: string, pred: (o: ProxmoxTemplate) => boolean, what: string): Promise<ProxmoxTemplate> {
    return this.waitFor(() => this.rt.templates.getSync(key), pred, what);
  }

  waitVm(key: string, pred: (o: ProxmoxVM) => boolean, what: string): Promise<ProxmoxVM> {
    return this.waitFor(() => this.rt.store.getSync(key), pred, what);
  }

  /** The volumes of a storage on a node of the simulator. */
  volumes(nodeName: string, storage: string): Array<{ volid: string; size: number; parent?: string; vmid?: number }> {
    return [...(this.cluster.state.storage(nodeName, storage)?.volumes.values() ?? [])];
  }

  count(key: string): number {
    return this.cluster.counters()[key] ?? 0;
  }
}

export const isReady = (o: ProxmoxImage | ProxmoxTemplate | ProxmoxVM) =>
  getCondition(o, 'Ready')?.status === 'True' && getCondition(o, 'Synced')?.status === 'True';

export const syncedReason = (o: ProxmoxImage | ProxmoxTemplate | ProxmoxVM) => getCondition(o, 'Synced')?.reason;
