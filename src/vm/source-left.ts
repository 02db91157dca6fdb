/**
 * A move's source that Proxmox failed to remove. A remote migration with `delete` destroys the
 * source once the target is unlocked, and a failure there only warns (qemu-server
 * QemuMigrate.pm:1906-1909): the source stays, stopped and locked `migrate`, and only the operator
 * can remove it. The resource says so (SourceVmLeft, with the `qm` commands) and remembers where
 * (status.atProvider.sourceLeft); each full read of its VM then looks at that VMID again, and the
 * condition clears once the VM there is gone or is not this resource's source any more. Without
 * that, the condition stayed True after the operator had removed the source, and once another VM
 * took the VMID it told them to destroy that one.
 */
import type { ProxmoxVM, SiteMove } from '../api/proxmoxvm.ts';
import { getCondition, setCondition } from '../engine/resource.ts';
import { NotFoundError } from '../proxmox/errors.ts';
import { atProvider } from './conditions.ts';
import { type StepContext, stepContext } from './context.ts';
import { ownershipOf } from './ownership.ts';
import { removeSnippetsLeftOn } from './snippet-removal.ts';

/**
 * Our source as it is now, read once no `qmigrate` runs: left behind only if it is still there,
 * ours and locked `migrate`. The worker destroys it after it unlocked the target, then ends: read
 * before that end and taken for left once the task list no longer showed the task, it was
 * reported left although it was gone (found by the fault search).
 */
export async function leftBehind(ctx: StepContext, r: ProxmoxVM, vmid: number, node: string): Promise<boolean> {
  const cfg = await ctx.client.vmConfig(node, vmid).then(
    (c) => c.values,
    (e) => {
      if (e instanceof NotFoundError) return undefined;
      throw e;
    },
  );
  if (cfg?.lock !== 'migrate') return false;
  return ownershipOf(r, cfg, { installation: ctx.site.installation, vmid }).kind === 'ours';
}

/** The move arrived and its source is still there (leftBehind): say so, with the fix. */
export function noteSourceLeft(r: ProxmoxVM, move: SiteMove): void {
  atProvider(r).sourceLeft = { site: move.from, node: move.fromNode, vmid: move.fromVmid };
  setCondition(
    r,
    {
      type: 'SourceVmLeft',
      status: 'True',
      reason: 'SourceNotDeleted',
      message: `VM ${move.fromVmid} is still on node ${move.fromNode} of site ${move.from} after its migration to ${move.to} (Proxmox failed to remove it; see the qmigrate task log), stopped and locked 'migrate'. It is not managed any more. Fix: on node ${move.fromNode} run 'qm unlock ${move.fromVmid} && qm destroy ${move.fromVmid} --purge'`,
      observedGeneration: r.metadata.generation,
    },
    Date.now(),
  );
}

/**
 * At a full read of the resource's VM: the source noted left, if any, looked at again; the
 * condition clears once it is gone or not ours and locked `migrate` (removed by the operator, its
 * VMID taken since). A site that cannot be read now keeps the note for the next full read.
 */
export async function recheckSourceLeft(ctx: StepContext, r: ProxmoxVM): Promise<void> {
  const a = atProvider(r);
  const left = a.sourceLeft;
  if (!left) return;
  const site = (await ctx.elsewhere?.())?.find((s) => s.name === left.site);
  let still = false;
  if (site) {
    try {
      still = await leftBehind(stepContext(site, r, ctx.options, ctx.signal), r, left.vmid, left.node);
    } catch (e) {
      if (ctx.signal?.aborted) throw e;
      return;
    }
  }
  if (still) return;
  // The source's snippet was read by the source alone, which is gone now.
  if (site) await removeSnippetsLeftOn(stepContext(site, r, ctx.options, ctx.signal), r, left.node);
  delete a.sourceLeft;
  if (getCondition(r, 'SourceVmLeft')?.status !== 'True') return;
  setCondition(
    r,
    {
      type: 'SourceVmLeft',
      status: 'False',
      reason: 'SourceRemoved',
      message: site
        ? `VM ${left.vmid} on node ${left.node} of site ${left.site} is gone (or is not this resource's any more)`
        : `site ${left.site} is not in the ProviderConfig any more`,
      observedGeneration: r.metadata.generation,
    },
    Date.now(),
  );
}
