/**
 * The engine for ProxmoxImages and ProxmoxTemplates, as both runtimes run it: a managed reconciler
 * and a controller per kind over the runtime's stores, the connectors, and the wiring between the
 * kinds (a template waits for its image, a VM for its template). Stores do not wake a reconcile for
 * a status write (Crossplane's watch filter), so when an image or a template becomes Ready the
 * objects waiting for it are queued at once instead of at their next backoff.
 */

import type { ProviderConfig } from '../api/provider-config.ts';
import type { ProxmoxImage } from '../api/proxmoximage.ts';
import type { ProxmoxTemplate } from '../api/proxmoxtemplate.ts';
import { Controller } from '../engine/controller.ts';
import { ManagedReconciler, type ReconcileResult } from '../engine/reconciler.ts';
import { getCondition, keyOf } from '../engine/resource.ts';
import type { EngineHooks, ResourceStore } from '../engine/types.ts';
import type { ClientHooks } from '../proxmox/metrics.ts';
import type { ProviderConfigSource } from '../vm/connector.ts';
import { ImageConnector } from './image-external.ts';
import { type Catalog, imageUsers, readyImage, templateOf, templateUsers } from './references.ts';
import { TemplateConnector } from './template-external.ts';

export interface ImageRuntimeOptions {
  source: ProviderConfigSource;
  images: ResourceStore<ProxmoxImage>;
  templates: ResourceStore<ProxmoxTemplate>;
  /** What the runtime's stores hold now (read synchronously: informer caches, memory stores). */
  catalog: Catalog;
  installation?: (cfg: ProviderConfig) => string;
  clientHooks?: ClientHooks;
  taskPollMs?: number;
  pollIntervalMs?: number;
  /** After a create succeeded, "not found" within this window is Proxmox's listing lagging (default 30 s). */
  creationGraceMs?: number;
  workers?: number;
  backoff?: { baseMs?: number; capMs?: number };
  hooks?: EngineHooks;
  /** Queue the ProxmoxVMs that clone this template (it became Ready). */
  wakeVms?: (template: ProxmoxTemplate) => void;
  onResult?: (kind: 'ProxmoxImage' | 'ProxmoxTemplate', key: string, result: ReconcileResult, failures: number) => void;
  /** Each reconcile's result and duration (the controller metrics). */
  onReconcile?: (kind: 'ProxmoxImage' | 'ProxmoxTemplate', key: string, result: ReconcileResult, ms: number) => void;
  log?: (level: 'info' | 'warn' | 'error' | 'debug', msg: string, fields?: Record<string, unknown>) => void;
}

export class ImageRuntime {
  readonly imageConnector: ImageConnector;
  readonly templateConnector: TemplateConnector;
  readonly images: Controller<ProxmoxImage>;
  readonly templates: Controller<ProxmoxTemplate>;
  private readonly o: ImageRuntimeOptions;

  constructor(o: ImageRuntimeOptions) {
    this.o = o;
    const client = {
      ...(o.installation ? { installation: o.installation } : {}),
      ...(o.clientHooks ? { clientHooks: o.clientHooks } : {}),
      ...(o.taskPollMs !== undefined ? { taskPollMs: o.taskPollMs } : {}),
    };
    this.imageConnector = new ImageConnector(o.source, { ...client, users: (r) => imageUsers(o.catalog, r) });
    this.templateConnector = new TemplateConnector(o.source, {
      ...client,
      image: (t) => readyImage(o.catalog, t),
      users: (t) => templateUsers(o.catalog, t),
    });
    const engine = {
      pollIntervalMs: o.pollIntervalMs ?? 60_000,
      ...(o.taskPollMs !== undefined ? { shortWaitMs: o.taskPollMs } : {}),
      ...(o.creationGraceMs !== undefined ? { creationGraceMs: o.creationGraceMs } : {}),
      ...(o.hooks ? { hooks: o.hooks } : {}),
      ...(o.log ? { log: o.log } : {}),
    };
    const controller = (kind: 'ProxmoxImage' | 'ProxmoxTemplate', onReady: (key: string) => void) => ({
      workers: o.workers ?? 4,
      ...(o.backoff ? { backoff: o.backoff } : {}),
      onResult: (key: string, result: ReconcileResult, failures: number) => {
        o.onResult?.(kind, key, result, failures);
        onReady(key);
      },
    });
    const timed = (kind: 'ProxmoxImage' | 'ProxmoxTemplate') => ({
      ...engine,
      ...(o.onReconcile
        ? { onResult: (key: string, result: ReconcileResult, ms: number) => o.onReconcile?.(kind, key, result, ms) }
        : {}),
    });
    this.images = new Controller(
      o.images,
      new ManagedReconciler(o.images, this.imageConnector, timed('ProxmoxImage')),
      controller('ProxmoxImage', (key) => void this.imageReconciled(key)),
    );
    this.templates = new Controller(
      o.templates,
      new ManagedReconciler(o.templates, this.templateConnector, timed('ProxmoxTemplate')),
      controller('ProxmoxTemplate', (key) => void this.templateReconciled(key)),
    );
  }

  private readonly wasReady = new Set<string>();

  /** Whether `key` of `kind` just became Ready (each transition reported once). */
  private becameReady(kind: string, obj: ProxmoxImage | ProxmoxTemplate | undefined, key: string): boolean {
    const id = `${kind}/${key}`;
    const now = obj !== undefined && getCondition(obj, 'Ready')?.status === 'True';
    const was = this.wasReady.has(id);
    if (now) this.wasReady.add(id);
    else this.wasReady.delete(id);
    return now && !was;
  }

  /** Per image, what its templates were last woken for (its volume and readiness). */
  private readonly imageSeen = new Map<string, string>();

  private async imageReconciled(key: string): Promise<void> {
    const img = await this.o.images.get(key);
    // Its templates look again when it became Ready or its file changed (a new version to build).
    const seen = img ? `${img.status?.atProvider?.volid}|${getCondition(img, 'Ready')?.status}` : '';
    if (this.imageSeen.get(key) === seen || !img) return;
    this.imageSeen.set(key, seen);
    for (const t of this.o.catalog.templates()) if (templateOfImage(t, img)) this.templates.queue.add(keyOf(t));
  }

  private async templateReconciled(key: string): Promise<void> {
    const t = await this.o.templates.get(key);
    if (!this.becameReady('template', t, key) || !t) return;
    // (the catalog's own copy: templateOf resolves like a VM would)
    const found = templateOf(this.o.catalog, { name: t.metadata.name }, t);
    if (found) this.o.wakeVms?.(found);
  }

  /**
   * A ProxmoxVM left the store: the template it cloned may keep an old version only for it (a
   * linked clone), so that template looks again now rather than at its next poll.
   */
  vmGone(vm: { metadata: { namespace?: string }; spec: { forProvider: { templateRef?: { name: string } } } }): void {
    const ref = vm.spec.forProvider.templateRef;
    if (!ref) return;
    const t = templateOf(this.o.catalog, ref, vm);
    if (t) this.templates.queue.add(keyOf(t));
  }

  async start(): Promise<void> {
    await this.images.start();
    await this.templates.start();
  }

  async stop(): Promise<void> {
    await Promise.all([this.images.stop(), this.templates.stop()]);
  }

  async close(): Promise<void> {
    await Promise.all([this.imageConnector.close(), this.templateConnector.close()]);
  }
}

function templateOfImage(t: ProxmoxTemplate, img: ProxmoxImage): boolean {
  return (
    t.spec.forProvider.imageRef.name === img.metadata.name &&
    (t.metadata.namespace ?? 'default') === (img.metadata.namespace ?? 'default')
  );
}
