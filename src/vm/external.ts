/**
 * The ProxmoxVM ExternalClient: the engine's seam to Proxmox, one instance per reconcile (made by
 * VmConnector.connect with that reconcile's AbortSignal), delegating to the named steps of the
 * seed's flow: preflight (steps 3-7), vmid, create (8-10), observe (11-13), drift and update, delete
 * (14). It holds only what one reconcile hands from one step to the next (observe's change for
 * update, preflight's plan for create); whatever must survive a reconcile lives in the site
 * (site-cache.ts), so nothing here can leak.
 */
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { type ExternalClient, type ExternalObservation, ReasonedError } from '../engine/types.ts';
import { credentialProblem, reason } from './conditions.ts';
import { type StepContext, stepContext, type VmClientOptions } from './context.ts';
import { issueCreate } from './create.ts';
import { deleteVm } from './delete.ts';
import type { Change } from './drift.ts';
import { observe } from './observe.ts';
import { type PlanOptions, planResource, type ResourcePlan } from './plan.ts';
import { type CreatePlan, placedOn, preflight, prepareCreate } from './preflight.ts';
import { retireBeforeDelete } from './replace.ts';
import type { SiteContext } from './site-cache.ts';
import { applyChange } from './update.ts';
import { chooseVmid } from './vmid.ts';

export type { VmClientOptions } from './context.ts';

export class VmExternal implements ExternalClient<ProxmoxVM> {
  private readonly site: SiteContext;
  private readonly options: VmClientOptions;
  private readonly signal: AbortSignal | undefined;
  private readonly others: Parameters<typeof stepContext>[4] & object;
  /** The change observe() found, for update() in the same reconcile. */
  private change: Change | undefined;
  /** What preflight() resolved, for create() in the same reconcile. */
  private plan: CreatePlan | undefined;

  constructor(
    site: SiteContext,
    options: VmClientOptions = {},
    signal?: AbortSignal,
    others: Parameters<typeof stepContext>[4] & object = {},
  ) {
    this.site = site;
    this.others = others;
    this.options = options;
    this.signal = signal;
  }

  private ctx(r: ProxmoxVM): StepContext {
    return stepContext(this.site, r, this.options, this.signal, this.others);
  }

  /** Whatever a step meets, credentials and certificate problems are reported as such. */
  private async guard<T>(step: Promise<T>): Promise<T> {
    try {
      return await step;
    } catch (e) {
      throw credentialProblem(this.site.name, e);
    }
  }

  async observe(r: ProxmoxVM): Promise<ExternalObservation> {
    this.change = undefined;
    const { obs, change } = await this.guard(observe(this.ctx(r), r));
    this.change = change;
    return obs;
  }

  async preflight(r: ProxmoxVM): Promise<{ waitMs?: number; message?: string }> {
    const { plan, ...rest } = await this.guard(preflight(this.ctx(r), r));
    this.plan = plan;
    return rest;
  }

  prepareCreate(r: ProxmoxVM): Promise<{ externalName: string }> {
    // (preflight ran first in this reconcile: its plan says where the VM is made.)
    return this.guard(chooseVmid(this.ctx(r), r, this.plan && placedOn(this.plan)));
  }

  async create(r: ProxmoxVM): Promise<{ requeueAfterMs?: number }> {
    if (!this.plan) await this.preflight(r);
    const plan = this.plan;
    this.plan = undefined;
    if (!plan) throw reason('WaitingForSlot', 'no concurrency slot free yet', true);
    return this.guard(issueCreate(this.ctx(r), r, plan));
  }

  update(r: ProxmoxVM): Promise<{ requeueAfterMs?: number }> {
    const change = this.change;
    this.change = undefined;
    return this.guard(applyChange(this.ctx(r), r, change));
  }

  async delete(r: ProxmoxVM): Promise<{ requeueAfterMs?: number }> {
    // A replacement's old VM goes first, so that deleting never leaves it behind (replace.ts).
    const wait = await this.guard(retireBeforeDelete(this.ctx(r), r));
    if (wait !== undefined) return { requeueAfterMs: wait };
    return this.guard(deleteVm(this.ctx(r), r));
  }

  /** What a reconcile would do, changing nothing (see plan.ts). */
  planFor(r: ProxmoxVM, key: string, opts: PlanOptions = {}): Promise<ResourcePlan> {
    return this.guard(planResource(this.ctx(r), r, key, opts)).catch((e) => {
      if (e instanceof ReasonedError)
        return { key, action: 'refused' as const, changes: [], pending: [], reason: e.reason, message: e.message };
      throw e;
    });
  }

  /** Do ahead what a create that waits can (see preflight.ts prepareCreate); changes no VM. */
  prepareFor(r: ProxmoxVM): Promise<void> {
    return prepareCreate(stepContext(this.site, r, this.options, this.signal, { ...this.others, lookOnly: true }), r);
  }

  async disconnect(): Promise<void> {}
}
