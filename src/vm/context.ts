/**
 * What every step of a ProxmoxVM's life gets: the site it lives on, the Proxmox client of this
 * reconcile (aborted with it), the options, and the resource's memory in the site. Steps are plain
 * functions over this context, so a step holds no state of its own between reconciles.
 */
import type { TemplateNode } from '../api/proxmoxtemplate.ts';
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { keyOf } from '../engine/resource.ts';
import type { EngineHooks } from '../engine/types.ts';
import type { PveClient } from '../proxmox/index.ts';
import type { VmConfig } from '../proxmox/types.ts';
import type { ResourceMemory } from './resource-memory.ts';
import type { SiteContext } from './site-cache.ts';

/**
 * The shortest wait between two reads of a node's active tasks by its watcher (task-watch.ts):
 * one read per node serves every task there, and a task is looked at after a share of its age,
 * so this floor only bounds the reads in a task's first fraction of a second.
 */
const TASK_WATCH_FLOOR_MS = 50;

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
  /**
   * Reconcile the resource of this key now (the runtime's queue): called when a task it waits for
   * ended or a slot it waits for was taken for it, so that it need not poll for either.
   */
  wake?: (key: string) => void;
  /**
   * The template VM `spec.forProvider.templateRef` resolves to on `node`: the runtime looks the
   * ProxmoxTemplate up in its store (src/image/references.ts templateOnNode) and throws
   * ReferenceNotReady while it is not built there.
   */
  templateOnNode?: (r: ProxmoxVM, node: string) => TemplateNode;
  /**
   * A plan's only (plan.ts planResources): the file a ProxmoxImage of the same manifests brings to
   * `node` for `r`'s `image:`, which apply downloads before it creates any VM. The create check
   * then plans the import of that file where it finds none yet (preflight.ts resolveSource).
   */
  imageToCome?: (r: ProxmoxVM, node: string) => ImageToCome | undefined;
}

/** A file a ProxmoxImage is to put on a node's storage: its content type, unless the site's version decides. */
export interface ImageToCome {
  storage: string;
  file: string;
  content?: 'import' | 'iso';
}

export interface StepContext {
  readonly site: SiteContext;
  /**
   * The site spec.forProvider.site names, while the VM is still on another one (`site`): a move
   * there is due (site-move.ts).
   */
  readonly target?: SiteContext;
  /** The site a replacement left its old VM on, until that VM is destroyed (replace.ts). */
  readonly previous?: SiteContext;
  /** The config's other sites (made on first use), where a resource with no VM here looks for its marker. */
  readonly elsewhere?: () => Promise<SiteContext[]>;
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
  /** A plan: told the config a full observe read, so that the plan need not read it again. */
  readonly configRead?: (node: string, vmid: number, config: VmConfig) => void;
}

export function stepContext(
  site: SiteContext,
  r: ProxmoxVM,
  options: VmClientOptions,
  signal: AbortSignal | undefined,
  others: {
    target?: SiteContext | undefined;
    previous?: SiteContext | undefined;
    elsewhere?: (() => Promise<SiteContext[]>) | undefined;
    /** Only look at this site: the resource's memory here if it has one, none kept otherwise. */
    lookOnly?: boolean;
  } = {},
): StepContext {
  return {
    site,
    ...(others.target ? { target: others.target } : {}),
    ...(others.previous ? { previous: others.previous } : {}),
    ...(others.elsewhere ? { elsewhere: others.elsewhere } : {}),
    client: site.client.withSignal(signal),
    options,
    memory: others.lookOnly ? site.peekMemory(r.metadata.uid) : site.remember(r.metadata.uid),
    signal,
    taskPollMs: options.taskPollMs ?? 2000,
  };
}

/**
 * After a task was issued or found running: have the resource woken when it ends (when the runtime
 * can wake it), and how soon to look again anyway (the poll, or with a wake only a fallback).
 */
export function followTask(ctx: StepContext, r: ProxmoxVM, upid: string, expectedMs = 0): number {
  const wake = ctx.options.wake;
  if (!wake) return ctx.taskPollMs;
  const key = keyOf(r);
  ctx.site.tasks.watchTask(upid, () => wake(key), expectedMs, Math.min(ctx.taskPollMs, TASK_WATCH_FLOOR_MS));
  return Math.max(ctx.taskPollMs * 10, expectedMs + ctx.taskPollMs * 5);
}

/** A slot waiter's wake (limits.ts), when the runtime can wake it. */
export function slotWake(ctx: StepContext, r: ProxmoxVM): (() => void) | undefined {
  const wake = ctx.options.wake;
  if (!wake) return undefined;
  const key = keyOf(r);
  return () => wake(key);
}

/** How soon a resource waiting for a slot looks again: soon by polling, or only as a fallback to its wake. */
export function slotWait(ctx: StepContext): number {
  return ctx.options.wake ? Math.max(ctx.taskPollMs * 10, 1000) : ctx.taskPollMs;
}

/** A crash point for the crash-safety tests (see EngineHooks). */
export async function hook(ctx: StepContext, step: string, r: ProxmoxVM): Promise<void> {
  await ctx.options.hooks?.at?.(step, `${r.metadata.namespace ?? ''}/${r.metadata.name}`);
}
