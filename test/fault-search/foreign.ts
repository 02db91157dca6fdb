/**
 * The other Proxmox user of the fault searches (`ops@pve`, a token of its own): its requests
 * through a site's API, its creates, and what the searches check of its VMs: which it made, and
 * what they looked like once their create ended (invariants.ts: the provider never touches them).
 */
import { FOREIGN_AUTH, FOREIGN_USER, NODE_OF, SITE, SITES, type SiteName, type World } from './world.ts';

/** A request of the other user, through the API of `site` with its own token. */
export async function foreignRequest(
  w: World,
  method: string,
  path: string,
  form?: Record<string, string>,
  site: SiteName = SITE,
): Promise<{ status: number; data: unknown }> {
  // A request held by an `applied-late` fault: the other user's tool gives up at once (it is
  // applied later, when healed), instead of waiting for fetch's five-minute timeout.
  const gaveUp = new AbortController();
  const stop = new AbortController();
  void w.untilHeld(w.heldCount(), stop.signal).then(() => gaveUp.abort());
  try {
    const res = await fetch(`${w.cluster(site).url}/api2/json${path}`, {
      method,
      headers: {
        Authorization: FOREIGN_AUTH,
        ...(form ? { 'Content-Type': 'application/x-www-form-urlencoded' } : {}),
      },
      ...(form ? { body: new URLSearchParams(form).toString() } : {}),
      signal: gaveUp.signal,
    });
    const text = await res.text();
    return { status: res.status, data: text ? (JSON.parse(text) as { data: unknown }).data : null };
  } catch {
    // Connection reset (outage, lost answer) or given up: it did not happen, or nobody can tell.
    return { status: 0, data: null };
  } finally {
    stop.abort();
  }
}

/** The other user creates a VM (`qm create` over the API). Whether it worked is read from PVE itself. */
export async function foreignCreate(
  w: World,
  vmid: number,
  extra: Record<string, string> = {},
  site: SiteName = SITE,
): Promise<void> {
  const res = await foreignRequest(
    w,
    'POST',
    `/nodes/${NODE_OF[site]}/qemu`,
    {
      vmid: String(vmid),
      name: `ops-${vmid}`,
      cores: '1',
      memory: '512',
      net0: 'virtio,bridge=vmbr0',
      scsi0: 'local-lvm:1',
      ...extra,
    },
    site,
  );
  w.log(`  foreign create ${site}/${vmid}: HTTP ${res.status}`);
  observeForeign(w);
}

/** Which VMs the other user made (from PVE's task list), and their state once their create ended. */
export function observeForeign(w: World): void {
  for (const site of SITES)
    for (const t of w.cluster(site).state.tasks.values()) {
      if (t.user !== FOREIGN_USER || t.type !== 'qmcreate' || w.seenTasks.has(t.upid)) continue;
      w.seenTasks.add(t.upid);
      w.foreign.set(`${site}/${t.id}`, { site, vmid: Number(t.id), upid: t.upid });
    }
  for (const f of w.foreign.values()) {
    if (f.baseline || f.vanished) continue;
    const st = w.cluster(f.site).state;
    const t = f.upid ? st.tasks.get(f.upid) : undefined;
    if (t && t.status === 'running') continue;
    const vm = st.vms.get(f.vmid);
    if (!vm) f.vanished = true;
    else f.baseline = { digest: st.digest(vm), status: vm.status, config: { ...vm.config, ...vm.pending } };
  }
}

/** The other user's VMs whose create has ended, with what they looked like then. */
export function foreignBaselines(w: World): Array<{
  site: SiteName;
  vmid: number;
  digest: string;
  status: string;
  config: Record<string, string>;
}> {
  return [...w.foreign.values()].flatMap((f) => (f.baseline ? [{ site: f.site, vmid: f.vmid, ...f.baseline }] : []));
}

/**
 * Who created the VM at `vmid` on `site`: the user of its last qmcreate or qmclone task, or of
 * the `qmtunnel` task of a remote migration that made it there; undefined when no task says.
 */
export function creatorOf(w: World, site: SiteName, vmid: number): { user: string; type: string } | undefined {
  let by: { user: string; type: string } | undefined;
  for (const t of w.cluster(site).state.tasks.values())
    if ((t.type === 'qmcreate' || t.type === 'qmclone' || t.type === 'qmtunnel') && t.id === String(vmid))
      by = { user: t.user, type: t.type };
  return by;
}
