/**
 * What every step of a ProxmoxVM's life gets: the site it lives on, the Proxmox client of this
 * reconcile (aborted with it), the options, and the resource's memory in the site. Steps are plain
 * functions over this context, so a step holds no state of its own between reconciles.
 */
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import type { EngineHooks } from '../engine/types.ts';
import type { PveClient } from '../proxmox/index.ts';
import type { ResourceMemory, SiteContext } from './site-cache.ts';

export interface VmClientOptions {
  hooks?: EngineHooks;
  /** How often a Ready VM's config is read again for drift (default 5 min). */
  driftIntervalMs?: number;
  /** How soon to look at an in-flight task again (default 2 s). */
  taskPollMs?: number;
  /** How soon to ask the guest agent again while a running VM reports no address yet (default 5 s). */
  agentPollMs?: number;
  /**
   * How long a create whose outcome is unknown (sent, no answer) is waited for before it is sent
   * again at the same VMID (default 30 s). Sending it again is safe: PVE refuses a second create at
   * a taken VMID, so at most one of them can exist.
   */
  unknownOutcomeWaitMs?: number;
  /** Resolves Secret references (cloud-init password, SSH keys). */
  secret?: (ref: { name: string; key: string; namespace?: string }, r: ProxmoxVM) => Promise<string>;
  /**
   * VMIDs other resources of a site already hold as their external name (VMID -> uid), from the
   * store. After a restart the in-process reservations are gone; this keeps a new VM from picking
   * a VMID that a resource with a not-yet-created VM already owns.
   */
  vmidHolders?: (site: string) => Map<number, string>;
}

export interface StepContext {
  readonly site: SiteContext;
  /** The site's client as seen by this reconcile: every call is aborted with the reconcile. */
  readonly client: PveClient;
  readonly options: VmClientOptions;
  readonly memory: ResourceMemory;
  /** The reconcile's signal, for waits on reads the site shares. */
  readonly signal: AbortSignal | undefined;
  /** How soon to look at in-flight work again. */
  readonly taskPollMs: number;
  /** A plan: observe reads only (no program is run in the guest either). */
  readonly readOnly?: boolean;
}

export function stepContext(
  site: SiteContext,
  r: ProxmoxVM,
  options: VmClientOptions,
  signal: AbortSignal | undefined,
): StepContext {
  return {
    site,
    client: site.client.withSignal(signal),
    options,
    memory: site.remember(r.metadata.uid),
    signal,
    taskPollMs: options.taskPollMs ?? 2000,
  };
}

/** A crash point for the crash-safety tests (see EngineHooks). */
export async function hook(ctx: StepContext, step: string, r: ProxmoxVM): Promise<void> {
  await ctx.options.hooks?.at?.(step, `${r.metadata.namespace ?? ''}/${r.metadata.name}`);
}
