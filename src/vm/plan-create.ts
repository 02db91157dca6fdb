/**
 * What a create's own checks would refuse, for the plan (`plan`, and `apply` before it asks): a
 * bridge, storage, image or template that is not there, a VM larger than its node, a userData the
 * site cannot take. The plan said "create" for such a VM, and `apply` then failed it at once; the
 * checks are preflight's (preflight.ts checkOnNode), on the node the create would use, reading the
 * site's shared node facts that the create reads again at no cost. Only what the create would be
 * refused for for good (ReasonedError.permanent): a node down or memory in use now waits in
 * `apply`, and a read that fails is the create's to meet, as a template not built yet is.
 */

import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { ReasonedError } from '../engine/types.ts';
import type { StepContext } from './context.ts';
import { checkOnNode, resolveNode } from './preflight.ts';
import { checkSnippetPossible } from './snippets.ts';

/** The reason and message a create of `r` would be refused with for good; undefined when none. */
export async function createRefusal(
  ctx: StepContext,
  r: ProxmoxVM,
): Promise<{ reason: string; message: string } | undefined> {
  try {
    checkSnippetPossible(ctx, r);
    await checkOnNode(ctx, r, await resolveNode(ctx, r));
  } catch (e) {
    if (e instanceof ReasonedError && e.permanent) return { reason: e.reason, message: e.message };
  }
  return undefined;
}
