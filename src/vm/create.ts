/**
 * Step 8-10: the create itself, one `POST /nodes/{node}/qemu` (import-from, the cloud-init drive,
 * tags and the ownership marker in the description) or one `POST .../clone` (marker in the
 * clone's description), at the VMID persisted before. A create that was sent and got no answer
 * has an unknown outcome: it is recorded as such (status.atProvider.createOutcome) and looked for,
 * never treated as failed. "Already exists" is settled by whose VM sits at the VMID.
 */
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { GiB, MiB, parseQuantity } from '../api/quantity.ts';
import { ANNOTATION_CREATE_PENDING, annotation, externalName, setCondition } from '../engine/resource.ts';
import { ReconcileAborted } from '../engine/types.ts';
import { AlreadyExistsError, PveError } from '../proxmox/index.ts';
import { atProvider, explain, outcomeUnknown, reason, setStep } from './conditions.ts';
import { followTask, type StepContext } from './context.ts';
import { locate } from './lookup.ts';
import { ownershipOf } from './ownership.ts';
import { type CreatePlan, placedOn } from './preflight.ts';
import { sshKeys } from './secrets.ts';
import { needsSnippet, recheckSnippet } from './snippets.ts';
import {
  BLANK_DISK_BYTES,
  desiredDescription,
  desiredIpConfigs,
  desiredNets,
  desiredTags,
  diskBytes,
  diskOptions,
  memoryBytes,
  parseUserData,
  printNet,
  vmName,
  wholeGiB,
} from './spec.ts';
import { clearOfLateDestroys, confirmedAt, giveUpVmid, vmidChosenByUs } from './vmid.ts';

/** Send the create (or clone) the plan describes. Returns the UPID, or nothing when it is already there. */
export async function issueCreate(
  ctx: StepContext,
  r: ProxmoxVM,
  plan: CreatePlan,
): Promise<{ requeueAfterMs?: number }> {
  const fp = r.spec.forProvider;
  const a = atProvider(r);
  const vmid = Number(externalName(r));
  const { node, storage, ciStorage, source } = plan;
  await clearOfLateDestroys(ctx, r, vmid, placedOn(plan));
  try {
    let upid: string;
    let namesSnippet = false;
    if (source.kind === 'template') {
      setStep(r, 'Cloning');
      const full = source.full ?? fp.template?.full ?? true;
      upid = await ctx.client.cloneVm(source.node, source.vmid, vmid, {
        name: vmName(r),
        description: desiredDescription(r, { installation: ctx.site.installation, vmid }),
        full,
        // A linked clone stays on the template's storage (PVE refuses `storage` for one).
        ...(full ? { storage } : {}),
        // Made on the template's node when `node`'s storage is not shared, then migrated (preflight.ts cloneOnTemplateNode).
        ...(source.node !== node && !plan.cloneOnSource ? { target: node } : {}),
        ...(fp.pool ? { pool: fp.pool } : {}),
      });
    } else {
      setStep(r, source.kind === 'import' ? 'Importing' : 'Creating');
      const config = createConfig(ctx, r, vmid, storage, ciStorage, source);
      upid = await ctx.client.createVm(node, vmid, config, { ...(fp.pool ? { pool: fp.pool } : {}) });
      namesSnippet = typeof config.cicustom === 'string' && ctx.memory.snippet !== undefined;
      if (namesSnippet) a.userDataSnippet = ctx.memory.snippet!.volid;
    }
    a.task = upid;
    ctx.site.ownCreates.set(vmid, { upid, uid: r.metadata.uid });
    delete a.createOutcome;
    ctx.site.invalidate(ctx.memory);
    if (namesSnippet) await recheckSnippet(ctx);
    return { requeueAfterMs: followTask(ctx, r, upid) };
  } catch (e) {
    ctx.site.invalidate(ctx.memory);
    // Stopping: this process writes nothing more. The next one finds `external-create-pending`
    // newest with no task recorded and treats the create as of unknown outcome (observe.ts).
    if (e instanceof ReconcileAborted) throw e;
    if (outcomeUnknown(e)) {
      // It may have been applied (or be applied later): keep the slot and the VMID, look before acting.
      a.createOutcome = 'Unknown';
      a.unknownCreateSince ??= annotation(r, ANNOTATION_CREATE_PENDING) ?? new Date(ctx.site.now()).toISOString();
      const err = reason(
        'CreateOutcomeUnknown',
        `the create of VM ${vmid} on node ${node} was sent but no answer came (${e instanceof Error ? e.message : String(e)}); it may exist or appear later, so VMID ${vmid} is kept and looked at before anything is sent again`,
        true,
      );
      err.outcomeUnknown = true;
      throw err;
    }
    ctx.site.releaseCreate(r.metadata.uid);
    if (e instanceof AlreadyExistsError || (e instanceof PveError && /already exists/.test(e.message))) {
      // Never retried blindly: whose is the VM at this VMID?
      const found = await locate(ctx, vmid, true);
      const cfg = found ? await ctx.client.vmConfig(found.node, vmid).catch(() => undefined) : undefined;
      const owner = cfg ? ownershipOf(r, cfg.values, { installation: ctx.site.installation, vmid }) : undefined;
      // Ours (a create of unknown outcome that did apply), or its placeholder: observe takes it from here.
      if (!cfg || owner?.kind === 'ours' || owner?.kind === 'placeholder') return { requeueAfterMs: ctx.taskPollMs };
      if (vmidChosenByUs(r) && !confirmedAt(r, vmid)) {
        // We picked this VMID and someone else took it first (the nextid race): pick another.
        giveUpVmid(ctx, r, vmid);
        throw reason(
          'VMIDTaken',
          `VMID ${vmid} was taken by another VM before this one was created; a new VMID will be chosen`,
          true,
        );
      }
      throw reason(
        'VMIDConflict',
        `VMID ${vmid} (spec.forProvider.vmid) is used by a VM this resource does not own; it will never be modified or deleted`,
      );
    }
    throw explain(ctx.site.name, e);
  }
}

export function createConfig(
  ctx: StepContext,
  r: ProxmoxVM,
  vmid: number,
  storage: string,
  ciStorage: string,
  source: { kind: 'blank' } | { kind: 'import'; from: string },
): Record<string, string | number> {
  const fp = r.spec.forProvider;
  const nets = desiredNets(fp);
  const cfg: Record<string, string | number> = {
    name: vmName(r),
    cores: fp.cpu ?? 1,
    sockets: fp.sockets ?? 1,
    memory: Math.round((memoryBytes(fp) ?? 2048 * MiB) / MiB),
    ostype: 'l26',
    scsihw: 'virtio-scsi-single',
    agent: fp.agent === false ? '0' : '1',
    boot: 'order=scsi0',
    serial0: 'socket',
    tags: desiredTags(r),
    description: desiredDescription(r, { installation: ctx.site.installation, vmid }),
  };
  const disk = diskBytes(fp);
  if (source.kind === 'import') cfg.scsi0 = `${storage}:0,import-from=${source.from},iothread=1`;
  else cfg.scsi0 = `${storage}:${wholeGiB(disk ?? BLANK_DISK_BYTES)},iothread=1`;
  for (const [i, d] of (fp.disks ?? []).entries()) {
    const slot = d.slot ?? `scsi${i + 1}`;
    const size = wholeGiB(parseQuantity(d.size, GiB) ?? GiB);
    cfg[slot] = [`${d.storage ?? storage}:${size}`, ...diskOptions(d)].join(',');
  }
  for (const n of nets) cfg[n.key] = printNet(n);
  cfg.ide2 = `${ciStorage}:cloudinit`;
  const ud = parseUserData(fp.userData);
  const ci = fp.cloudInit;
  const user = ci?.user ?? ud.user;
  if (user) cfg.ciuser = user;
  desiredIpConfigs(fp, nets.length).forEach((v, i) => {
    cfg[`ipconfig${i}`] = v;
  });
  const keys = sshKeys(ctx, r, ud);
  if (keys.length) cfg.sshkeys = keys.join('\n');
  if (ctx.memory.secrets.password !== undefined) cfg.cipassword = ctx.memory.secrets.password;
  if (ci?.dns?.servers?.length) cfg.nameserver = ci.dns.servers.join(' ');
  if (ci?.dns?.searchDomain) cfg.searchdomain = ci.dns.searchDomain;
  if (ci?.userDataSnippet) cfg.cicustom = `user=${ci.userDataSnippet}`;
  else if (ctx.memory.snippet && needsSnippet(r)) cfg.cicustom = `user=${ctx.memory.snippet.volid}`;
  if (fp.onBoot !== undefined) cfg.onboot = fp.onBoot ? 1 : 0;
  if (fp.startup) cfg.startup = fp.startup;
  partialUserData(r, ud.unsupported);
  return cfg;
}

/**
 * userDataMode NativeOnly, with keys the API cannot set: say which were not applied (the user
 * chose this; it is never the silent default).
 */
export function partialUserData(r: ProxmoxVM, unsupported: readonly string[]): void {
  if (r.spec.forProvider.cloudInit?.userDataMode !== 'NativeOnly' || !unsupported.length) return;
  setCondition(
    r,
    {
      type: 'CloudInit',
      status: 'False',
      reason: 'UserDataPartiallyApplied',
      message: `userData keys ${unsupported.join(', ')} were not applied (cloudInit.userDataMode: NativeOnly); users and SSH keys were. Fix: give the site ssh access in the ProviderConfig and remove userDataMode, so that the complete userData goes into a snippet`,
      observedGeneration: r.metadata.generation,
    },
    Date.now(),
  );
}
