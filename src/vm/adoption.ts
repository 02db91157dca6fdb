/**
 * Adoption: this resource's VM found by its ownership marker rather than by a recorded VMID (a
 * new resource, a lost or another state file, a twin kept while this resource's own VM was
 * retired), on the resource's site or on another site of the ProviderConfig, taken as its own.
 */
import { ANNOTATION_SITE, type ProxmoxVM } from '../api/proxmoxvm.ts';
import { ANNOTATION_EXTERNAL_NAME, setAnnotation } from '../engine/resource.ts';
import { atProvider, ready } from './conditions.ts';
import { type StepContext, stepContext } from './context.ts';
import { findOwnVm, type ObservedVm } from './lookup.ts';
import type { Observed } from './observe.ts';
import { confirmOwnVm } from './ownership.ts';

/** This resource's VM found by its marker (see findOwnVm), adopted; undefined when there is none. */
export async function adoptOwn(ctx: StepContext, r: ProxmoxVM): Promise<ObservedVm | undefined> {
  const own = await findOwnVm(ctx, r);
  if (own) adopt(ctx, r, own);
  return own;
}

/**
 * No VM of this resource on the site it is placed on: before one is made there, its marker on the
 * ProviderConfig's other sites (a lost or another state file, a create whose site was never
 * recorded: fault search F19). Found there, the resource follows it, and the next reconcile moves it
 * where the spec says (a remote migration), instead of a second VM being made here.
 */
export async function adoptElsewhere(ctx: StepContext, r: ProxmoxVM): Promise<Observed | undefined> {
  if (!ctx.elsewhere) return undefined;
  for (const site of await ctx.elsewhere()) {
    // (lookOnly: every new resource looks on every other site; memory kept there for each was half
    // of all resource memory)
    const own = await findOwnVm(stepContext(site, r, ctx.options, ctx.signal, { lookOnly: true }), r);
    // A replacement's old VM is replaced, not adopted back (replace.ts).
    const old = r.status?.atProvider?.replacing;
    if (!own || (old?.site === site.name && old.vmid === own.vmid)) continue;
    adopt(ctx, r, own, site.name);
    const a = atProvider(r);
    a.site = site.name;
    a.node = own.node;
    // With the VMID confirmed, the VM's SMBIOS UUID, as observe records it: without it, an unmarked
    // VM made at this VMID once ours left (moved away by another state file) held the resource in
    // PlacementChangeRefused for good (fault search F61).
    confirmOwnVm(r, own);
    delete a.placedNode;
    delete a.snippetLeftOn;
    return { obs: { exists: true, upToDate: true, requeueAfterMs: 0 } };
  }
  return undefined;
}

/** Take `found` (on `site`, when another) as this resource's VM: record its VMID (the marker says whose it is). */
function adopt(ctx: StepContext, r: ProxmoxVM, found: ObservedVm, site?: string): void {
  setAnnotation(r, ANNOTATION_EXTERNAL_NAME, String(found.vmid));
  // With the VMID, in the same write, the site it is on: a status write lost after this one (a
  // conflict with an edit of the spec's site) must not leave the VMID read on another site (F28).
  setAnnotation(r, ANNOTATION_SITE, site ?? ctx.site.name);
  ctx.site.unreserve(r.metadata.uid);
  ready(
    r,
    'False',
    'Creating',
    `adopted VM ${found.vmid} on ${found.node}${site ? ` of site ${site}` : ''}: its ownership marker names this resource`,
  );
}
