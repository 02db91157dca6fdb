/**
 * What reconciling a ProxmoxVM would do, read from the live VM and changing nothing: create,
 * adopt (its installation's VM found by marker), update in place, update that waits for a reboot,
 * reboot (rebootPolicy: IfNeeded), no-op, or refused (with the reason). The fields come from the
 * same drift computation a reconcile uses (drift.ts changes), so the plan and what apply does
 * cannot disagree.
 *
 * Whether a changed key waits for a reboot follows qemu-server: on a running VM only the "fast
 * plug" options (`$fast_plug_option` in PVE/QemuServer.pm: name, description, onboot, startup,
 * tags, protection, agent...), a NIC whose model stays, and hot-plugged disks apply at once;
 * cores, sockets and memory (without CPU/memory hotplug) and cloud-init values wait for the next
 * boot. Proxmox's own pending list is the truth once the change is made (PendingReboot).
 */
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { externalName } from '../engine/resource.ts';
import { ReasonedError } from '../engine/types.ts';
import { PveError } from '../proxmox/index.ts';
import { noQuorumWarning } from '../proxmox/quorum.ts';
import type { ClusterResource, VmConfig } from '../proxmox/types.ts';
import type { StepContext, VmClientOptions } from './context.ts';
import { type Change, changes } from './drift.ts';
import { observe } from './observe.ts';
import { createRefusal } from './plan-create.ts';
import { readAheadCreate } from './preflight.ts';
import { siteQuorum } from './site-quorum.ts';
import { driveSize, parseNetValue } from './spec.ts';

export type PlanAction =
  | 'create'
  | 'adopt'
  | 'update'
  | 'update-reboot'
  | 'reboot'
  /** A new VM on another site, then the old one destroyed: the disks' data is lost (replacePolicy). */
  | 'replace'
  /**
   * A second VM made for this resource (two runtimes at once, a state lost mid-create) is stopped
   * and destroyed: its twin, or the resource's own VM when the twin is the one kept (duplicates.ts,
   * duplicates-elsewhere.ts).
   */
  | 'retire-duplicate'
  | 'no-op'
  | 'refused';

export interface FieldChange {
  /** The Proxmox config key (`memory`, `net0`, `scsi0`...) or `powerState`. */
  key: string;
  /** The spec field it comes from, where there is one. */
  field?: string;
  from?: string;
  to: string;
  /** Applied only when the VM next boots. */
  reboot: boolean;
  /** How it is done, where that matters: a migration or disk move, online or not, the time it takes. */
  detail?: string;
}

export interface ResourcePlan {
  key: string;
  action: PlanAction;
  vmid?: number;
  node?: string;
  state?: string;
  changes: FieldChange[];
  /** Keys Proxmox already holds until the next boot. */
  pending: string[];
  reason?: string;
  message?: string;
  /** What stands in the way of the changes on the resource's site (its cluster has no quorum). */
  warning?: string;
}

const SPEC_FIELD: Array<[RegExp, string]> = [
  [/^cores$/, 'cpu'],
  [/^sockets$/, 'sockets'],
  [/^memory$/, 'memory'],
  [/^name$/, 'name'],
  [/^tags$/, 'tags'],
  [/^description$/, 'description'],
  [/^onboot$/, 'onBoot'],
  [/^startup$/, 'startup'],
  [/^agent$/, 'agent'],
  [/^net\d+$/, 'networks'],
  [/^ipconfig\d+$/, 'cloudInit.ipConfig'],
  [/^(ciuser|sshkeys|cipassword)$/, 'cloudInit'],
  [/^(nameserver|searchdomain)$/, 'cloudInit.dns'],
  [/^cicustom$/, 'userData'],
  [/^(scsi|virtio|sata|ide)\d+$/, 'disks'],
];

/** Keys a running VM takes at once (qemu-server `$fast_plug_option`). */
const FAST_PLUG = /^(name|description|onboot|startup|tags|protection|agent|lock|hookscript|vmstatestorage)$/;
/** Values that never reach a plan (PVE reads them back masked anyway). */
const SECRET_KEYS = /^(cipassword)$/;

function waitsForBoot(key: string, from: string | undefined, to: string, running: boolean): boolean {
  if (!running || FAST_PLUG.test(key)) return false;
  if (/^net\d+$/.test(key)) return !from || parseNetValue(from).model !== parseNetValue(to).model;
  if (/^(scsi|virtio|sata)\d+$/.test(key)) return false; // disk hotplug is on by default
  return true;
}

function fieldOf(key: string): string | undefined {
  return SPEC_FIELD.find(([re]) => re.test(key))?.[1];
}

function show(key: string, v: string | number | undefined): string | undefined {
  if (v === undefined) return undefined;
  if (SECRET_KEYS.test(key)) return '(secret)';
  const s = String(v);
  if (key === 'sshkeys') return `${s.split('\n').filter(Boolean).length} key(s)`;
  // PVE's memory is in MiB; a bare 4096 -> 8192 read as bytes, or as GiB.
  return key === 'memory' && /^\d+$/.test(s) ? `${s} MiB` : s;
}

/** One Change as the fields it touches. */
function fieldsOf(c: Change, cfg: Record<string, string>, running: boolean): FieldChange[] {
  switch (c.kind) {
    case 'config': {
      const out: FieldChange[] = [];
      for (const [k, v] of Object.entries(c.set ?? {})) {
        const from = show(k, cfg[k]);
        const to = show(k, v)!;
        const field = fieldOf(k);
        out.push({
          key: k,
          ...(field ? { field } : {}),
          ...(from !== undefined ? { from } : {}),
          to,
          reboot: waitsForBoot(k, cfg[k], String(v), running),
        });
      }
      for (const k of c.del ?? []) {
        const field = fieldOf(k);
        out.push({
          key: k,
          ...(field ? { field } : {}),
          from: show(k, cfg[k]) ?? '',
          to: '(removed)',
          reboot: running && !FAST_PLUG.test(k) && !/^net\d+$/.test(k),
        });
      }
      return out;
    }
    case 'resize': {
      const cur = driveSize(cfg[c.disk!] ?? '');
      return [
        {
          key: c.disk!,
          field: c.disk === 'scsi0' ? 'disk' : 'disks',
          ...(cur !== undefined ? { from: `${Math.round(cur / 1024 ** 3)}G` } : {}),
          to: c.size!,
          reboot: false,
        },
      ];
    }
    case 'migrate':
      return [
        {
          key: 'node',
          field: 'node',
          from: c.node ?? '',
          to: c.target!,
          reboot: false,
          detail: c.how ? `migrate, ${c.how}` : 'migrate',
        },
      ];
    case 'move-disk':
      return [
        {
          key: c.disk!,
          field: 'storage',
          from: c.from ?? '',
          to: c.storage!,
          reboot: false,
          detail: c.how ? `move disk, ${c.how}` : 'move disk',
        },
      ];
    case 'reserve-site-move':
    case 'remote-migrate': {
      const m = c.move!;
      return [
        {
          key: 'site',
          field: 'site',
          from: `${m.from}/${m.fromNode}`,
          to: `${m.to}/${m.node}`,
          reboot: false,
          detail: c.how ? `remote migrate, ${c.how}` : 'remote migrate',
        },
      ];
    }
    case 'reserve-replacement':
      return [
        {
          key: 'site',
          field: 'site',
          from: `${c.replaced!.site}/${c.replaced!.node}`,
          to: c.target ?? '',
          reboot: false,
          detail: c.how ?? 'replace (data loss)',
        },
      ];
    case 'start':
      return [{ key: 'status', field: 'powerState', from: 'stopped', to: 'running', reboot: false }];
    case 'stop':
      return [{ key: 'status', field: 'powerState', from: 'running', to: 'stopped', reboot: false }];
    default:
      return [];
  }
}

/**
 * The plan for one resource. Reads only: observe runs on a copy (whatever it would record stays
 * there), then the complete list of changes comes from the config observe read (or, when observe
 * read none, from one read of it).
 *
 * What observe remembers of the resource (its last full read) must not make the next real
 * reconcile skip a full read it would have made, so the plan leaves the memory as it found it,
 * except when its full read found nothing to do and exactly the status the resource has: then
 * the reconcile's own full read, moments later, could only find the same, and the plan's serves
 * it (the drift interval counts from it). A second `apply` of a fleet that has not changed reads
 * each VM once, not twice.
 */
/** How a resource is planned: `readAhead`, its create is carried out at once (apply); `imageToCome`, see VmClientOptions. */
export interface PlanOptions {
  readAhead?: boolean;
  imageToCome?: VmClientOptions['imageToCome'];
}

export async function planResource(
  given: StepContext,
  r: ProxmoxVM,
  key: string,
  opts: PlanOptions = {},
): Promise<ResourcePlan> {
  const ctx = opts.imageToCome ? { ...given, options: { ...given.options, imageToCome: opts.imageToCome } } : given;
  const copy = structuredClone(r);
  // Begun with the plan's own reads, waited for only by a plan that changes something.
  const quorum = siteQuorum(ctx).catch(() => undefined);
  const lastFull = ctx.memory.lastFull;
  let observed: Awaited<ReturnType<typeof observe>>;
  let planRead: typeof lastFull;
  let read: { node: string; vmid: number; config: VmConfig } | undefined;
  try {
    observed = await observe(
      { ...ctx, readOnly: true, configRead: (node, vmid, config) => (read = { node, vmid, config }) },
      copy,
    );
    if (ctx.memory.lastFull !== lastFull) planRead = ctx.memory.lastFull;
  } catch (e) {
    const unread = notAnswered(ctx, r, copy, key, e);
    if (unread) return unread;
    if (!(e instanceof ReasonedError)) throw e;
    return { key, action: 'refused', changes: [], pending: [], reason: e.reason, message: e.message };
  } finally {
    if (lastFull) ctx.memory.lastFull = lastFull;
    else ctx.memory.lastFull = undefined;
  }
  const plan = await planObserved(ctx, r, key, copy, observed, read, opts.readAhead === true).catch((e) => {
    const unread = notAnswered(ctx, r, copy, key, e);
    if (unread) return unread;
    throw e;
  });
  if (planRead && plan.action === 'no-op' && observed.obs.upToDate && sameStatus(copy, r))
    ctx.memory.lastFull = planRead;
  if (plan.action !== 'no-op' && plan.action !== 'refused') {
    const q = await quorum;
    if (q && !q.quorate) plan.warning = noQuorumWarning(ctx.site.name, q);
  }
  return plan;
}

/**
 * The plan of a VM whose node did not answer its reads (`No route to host`: the node crashed or is
 * cut off, and the site's list, which lags a crash by seconds, still shows it online): refused,
 * with the VM and node named, since what would change there cannot be known. A `delete` counts it
 * among the VMs it destroys (src/local/delete.ts): the delete waits for the node. Undefined for any
 * other error, or a resource with no VM yet.
 */
function notAnswered(
  ctx: StepContext,
  r: ProxmoxVM,
  copy: ProxmoxVM,
  key: string,
  e: unknown,
): ResourcePlan | undefined {
  if (!(e instanceof PveError) || (e.kind !== 'unavailable' && e.kind !== 'timeout')) return undefined;
  const vmid = Number(externalName(copy) ?? externalName(r));
  if (!Number.isInteger(vmid)) return undefined;
  const node = copy.status?.atProvider?.node ?? r.status?.atProvider?.node;
  const where = node ? `node ${node} of site ${ctx.site.name}` : `site ${ctx.site.name}`;
  return {
    key,
    action: 'refused',
    vmid,
    ...(node ? { node } : {}),
    state: 'unknown',
    changes: [],
    pending: [],
    reason: 'NodeUnreachable',
    message: `${where} did not answer the read of VM ${vmid} (${e.message}): what would change is not known until it answers. Check: is the node up, and does it reach the others (\`pvecm status\`)?`,
  };
}

/**
 * Whether observe left `copy` with the status `r` has: the same atProvider, and the same
 * conditions (their times aside, which only a change of status moves).
 */
function sameStatus(copy: ProxmoxVM, r: ProxmoxVM): boolean {
  const view = (x: ProxmoxVM) =>
    JSON.stringify({
      atProvider: x.status?.atProvider,
      conditions: x.status?.conditions?.map((c) => [c.type, c.status, c.reason, c.message, c.observedGeneration]),
    });
  return view(copy) === view(r);
}

/** The plan from what observe found (`observed`) and left in `copy`, a copy of `r`. */
async function planObserved(
  ctx: StepContext,
  r: ProxmoxVM,
  key: string,
  copy: ProxmoxVM,
  observed: Awaited<ReturnType<typeof observe>>,
  read: { node: string; vmid: number; config: VmConfig } | undefined,
  readAhead: boolean,
): Promise<ResourcePlan> {
  const a = copy.status?.atProvider ?? {};
  const vmidText = externalName(copy);
  if (!observed.obs.exists) {
    // An apply carries the plan out at once: its creates' first reads need not wait for it.
    if (readAhead) readAheadCreate(ctx, r);
    // What apply would refuse at once is refused here (plan-create.ts), not planned as a create.
    const refused = await createRefusal(ctx, copy);
    if (refused) return { key, action: 'refused', changes: [], pending: [], ...refused };
    return { key, action: 'create', changes: [], pending: [] };
  }
  // Found by its marker on another site of the config: adopted there (then moved, if the spec says).
  if (a.site && a.site !== ctx.site.name && vmidText !== externalName(r))
    return {
      key,
      action: 'adopt',
      vmid: Number(vmidText),
      ...(a.node ? { node: a.node } : {}),
      changes: [],
      pending: [],
      message: `found on site ${a.site}`,
    };
  const vmid = Number(vmidText);
  const node = a.node;
  const adopted = vmidText !== externalName(r);
  if (!node || !Number.isInteger(vmid))
    return {
      key,
      action: adopted ? 'adopt' : 'no-op',
      changes: [],
      pending: [],
      ...(a.step ? { message: a.step } : {}),
    };
  // A duplicate goes first and alone: what drift would change is read again after it.
  if (observed.change?.kind === 'retire-duplicate') {
    const c = observed.change;
    return {
      key,
      action: 'retire-duplicate',
      vmid,
      node,
      state: a.state ?? 'unknown',
      changes: [
        {
          key: 'duplicate',
          from: `VM ${c.vmid} on ${c.site ? `site ${c.site}, ` : ''}node ${c.node}`,
          to: '(destroyed)',
          reboot: false,
          detail: c.why,
        },
      ],
      pending: [],
    };
  }
  // The config observe read, if it read this VM's: a plan reads it once.
  const cfg = (read?.node === node && read.vmid === vmid ? read.config : await ctx.client.vmConfig(node, vmid)).values;
  const state = a.state ?? 'unknown';
  const running = state === 'running';
  const found = { vmid, node, entry: { id: `qemu/${vmid}`, type: 'qemu', vmid, node } as ClusterResource };
  // A move to another site comes first and alone: what drift would change follows on the new site.
  const moving = observed.change?.move || observed.change?.replaced;
  const planned = moving ? [observed.change!] : changes(ctx, copy, found, cfg, state);
  const fields = planned.flatMap((c) => fieldsOf(c, cfg, running));
  const pending = running ? (a.pendingChanges ?? []) : [];
  const reboots = fields.some((f) => f.reboot) || pending.length > 0;
  const action: PlanAction = adopted
    ? 'adopt'
    : planned.some((c) => c.kind === 'reserve-replacement')
      ? 'replace'
      : fields.length
        ? reboots
          ? 'update-reboot'
          : 'update'
        : pending.length
          ? r.spec.forProvider.rebootPolicy === 'IfNeeded'
            ? 'reboot'
            : 'update-reboot'
          : 'no-op';
  return { key, action, vmid, node, state, changes: fields, pending };
}

/**
 * Plans for many resources, a few at a time; each gets its own reconcile-like connection.
 * `readAhead`: the resources whose plan is carried out at once (apply), see planResource.
 */
export async function planResources(
  resources: ProxmoxVM[],
  connect: (r: ProxmoxVM) => Promise<{ planFor(r: ProxmoxVM, key: string, opts?: PlanOptions): Promise<ResourcePlan> }>,
  keyOf: (r: ProxmoxVM) => string,
  parallel = 4,
  opts: { readAhead?: (key: string) => boolean; imageToCome?: VmClientOptions['imageToCome'] } = {},
): Promise<ResourcePlan[]> {
  const out: ResourcePlan[] = new Array(resources.length);
  let next = 0;
  const worker = async () => {
    while (next < resources.length) {
      const i = next++;
      const r = resources[i]!;
      try {
        const key = keyOf(r);
        out[i] = await (await connect(r)).planFor(r, key, {
          readAhead: opts.readAhead?.(key) ?? false,
          ...(opts.imageToCome ? { imageToCome: opts.imageToCome } : {}),
        });
      } catch (e) {
        const reason = e instanceof ReasonedError ? e.reason : 'PlanFailed';
        out[i] = {
          key: keyOf(r),
          action: 'refused',
          changes: [],
          pending: [],
          reason,
          message: e instanceof Error ? e.message : String(e),
        };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(parallel, resources.length) }, worker));
  return out;
}
