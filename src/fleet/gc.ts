/**
 * `gc` and the controller's orphan scan: what the site's ownership markers say about VMs whose
 * resource is gone (orphans), VMs of ours stuck in a lock we set, half-created VMs, and what is not
 * ours to touch (other installations' VMs, copies an operator cloned from one of ours). A report
 * first; deletion only when asked, only of this installation's VMs, and only after each one is
 * checked again right before it is deleted (same config, created before the scan, still without a
 * resource). VMs without a marker are never touched, except the create/clone placeholder of one of
 * our own creates.
 *
 * Why the care: several runtimes share one Proxmox (two clusters, a cluster and a CLI user, two
 * state files of one CLI user). A VM whose resource this runtime does not know may well be
 * another runtime's, so "unknown" alone never means "orphan": only a uid this store once held (or
 * a store that is the installation's only one, the controller's cluster) does.
 */
import type { LoadedProviderConfig } from '../api/provider-config-load.ts';
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { NotFoundError } from '../proxmox/errors.ts';
import type { PveClient } from '../proxmox/index.ts';
import { clientForSite } from '../proxmox/site.ts';
import { vmidHoldersOf } from '../vm/connector.ts';
import { classify, inventory, type MarkedVm, metaCtime } from '../vm/inventory.ts';
import { isProtected, manualCleanup, unprotect } from '../vm/ownership.ts';
import { isPlaceholderLock, type Marker, ownerKey, parseMarker } from '../vm/spec.ts';

export type GcKind = 'orphan' | 'legacy-unknown' | 'stuck-lock' | 'half-created' | 'copy' | 'managed-elsewhere';

/** Kinds that are never deleted, and that do not make gc's exit code 1 (nothing to collect). */
export const INFORMATIONAL: ReadonlySet<GcKind> = new Set(['copy', 'managed-elsewhere']);

/**
 * Clock skew allowed between this process and the Proxmox nodes: a VM whose config says it was
 * created less than this before the scan started (or after) is never deleted by that scan.
 */
export const CLOCK_SKEW_MS = 5 * 60_000;

export interface GcFinding {
  site: string;
  node: string;
  vmid: number;
  name: string;
  kind: GcKind;
  /** namespace/name of the marker (or, for a placeholder, of the resource holding the VMID). */
  owner?: string;
  uid?: string;
  /** The marker's installation (absent: the first marker format, or none). */
  installation?: string;
  lock?: string;
  status: string;
  detail: string;
  action?: string;
  /** A create/clone placeholder without a marker yet, at a VMID one of our resources holds. */
  placeholder?: boolean;
  /** Whether `--delete` (or `--delete-orphans`) deletes it; half-created/stuck VMs need --include-half-created. */
  deletable?: boolean;
  /** Deletable only while it is stopped (this store never held its uid): checked again before deleting. */
  onlyStopped?: boolean;
  /** Whether this store held the marker's uid (a resource it has, or one deleted from it). */
  uidKnown?: boolean;
  /** What the scan read, for the re-check right before acting. */
  marker?: Marker;
  digest?: string;
  /** When PVE created the VM (the config's `meta` ctime), seconds since the epoch. */
  ctime?: number;
  /** When the scan that found it started (this process's clock), ms since the epoch. */
  scanStartedAt: number;
}

/**
 * The resources a runtime has (a state file's objects, a cluster's ProxmoxVMs) and the uids of
 * those it deleted (a state file's `retired`), as gc compares them with the markers.
 */
export interface KnownResources {
  /** Whether a resource `namespace/name` exists on `site`. */
  has(site: string, key: string): boolean;
  /** uids of the resources that exist. */
  uids: ReadonlySet<string>;
  /** uids of resources deleted from this store. */
  retired: ReadonlySet<string>;
  /** VMID -> namespace/name of the resources of `site` that hold an external name. */
  holders(site: string): Map<number, string>;
}

/**
 * KnownResources of `resources`. A resource's site is `forProvider.site`, else `onlySite`; a
 * resource without either (a config with several sites, the controller that does not resolve
 * configs here) counts on every site: when unsure, a VM is taken as known, never as an orphan.
 */
export function knownResources(
  resources: Iterable<ProxmoxVM>,
  retired: Iterable<string> = [],
  onlySite?: string,
): KnownResources {
  const list = [...resources];
  const bySite = new Map<string, Set<string>>();
  const anySite = new Set<string>();
  for (const r of list) {
    const site = r.spec.forProvider.site ?? onlySite;
    const key = ownerKey(r.metadata);
    if (site === undefined) anySite.add(key);
    else bySite.set(site, (bySite.get(site) ?? new Set()).add(key));
  }
  return {
    has: (site, key) => anySite.has(key) || Boolean(bySite.get(site)?.has(key)),
    uids: new Set(list.map((r) => r.metadata.uid).filter(Boolean)),
    retired: new Set(retired),
    holders: (site) => vmidHoldersOf(list, site, onlySite, (r) => ownerKey(r.metadata)),
  };
}

/** Who is asking, and what it may delete. */
export interface GcPolicy {
  /** This runtime's installation: only VMs whose marker names it are ever ours. */
  installation: string;
  known: KnownResources;
  /** `--include-unknown`: also delete stopped VMs of this installation whose uid this store never held. */
  includeUnknown?: boolean;
  /**
   * The store is the installation's only one (the controller: a cluster is its installation), so a
   * VM of this installation without a resource is an orphan whatever its uid.
   */
  soleStore?: boolean;
  /** What the table calls the store ("this state file", "this cluster"). */
  storeName?: string;
}

const ANOTHER_FLEET =
  "looks like another state file's fleet (same installation, a uid this state file never held, running): not deleted. If it is yours, apply its manifest with the state file that manages it; if it is really abandoned, stop it and run gc with --include-unknown; to keep two fleets apart, give each its own spec.installation";

/** One VM of the inventory, as gc sees it; undefined when there is nothing to say. */
function judge(
  vm: MarkedVm,
  site: string,
  policy: GcPolicy,
  scanStartedAt: number,
  placeholderIdle: (vm: MarkedVm) => Promise<boolean>,
): Promise<GcFinding | undefined> | GcFinding | undefined {
  // Templates, and a ProxmoxTemplate's VM before its conversion: the image room's (src/image).
  if (vm.template || vm.templateBuild) return undefined;
  const m = vm.marker;
  const store = policy.storeName ?? 'this state file';
  const base = {
    site,
    node: vm.node,
    vmid: vm.vmid,
    name: vm.name,
    ...(m ? { owner: ownerKey(m), uid: m.uid, marker: m } : {}),
    ...(m?.installation ? { installation: m.installation } : {}),
    ...(vm.lock ? { lock: vm.lock } : {}),
    status: vm.status,
    digest: vm.digest,
    ...(vm.ctime !== undefined ? { ctime: vm.ctime } : {}),
    scanStartedAt,
  };
  const lockCheck = async (): Promise<GcFinding | undefined> => {
    if (!isPlaceholderLock(vm.lock) || !(await placeholderIdle(vm))) return undefined;
    return {
      ...base,
      kind: vm.lock === 'create' ? 'half-created' : 'stuck-lock',
      detail: `locked '${vm.lock}' with no task running`,
    };
  };
  const stopped = vm.status === 'stopped';
  switch (classify(vm, policy.installation)) {
    case 'unmarked': {
      // Not ours by marker: never touched, unless it is the placeholder of one of our creates.
      const holder = policy.known.holders(site).get(vm.vmid);
      if (!isPlaceholderLock(vm.lock) || !holder) return undefined;
      return placeholderIdle(vm).then((idle) =>
        idle
          ? {
              ...base,
              owner: holder,
              kind: 'half-created' as const,
              placeholder: true,
              detail: `'${vm.lock}' placeholder with no task running at the VMID ${holder} holds (its worker died)`,
            }
          : undefined,
      );
    }
    case 'elsewhere':
      return {
        ...base,
        kind: 'managed-elsewhere',
        detail: `installation '${m!.installation}' manages it: never deleted from here`,
      };
    case 'copy':
      if (m!.installation !== policy.installation)
        return {
          ...base,
          kind: 'managed-elsewhere',
          detail: `a copy of VM ${m!.vmid} of installation '${m!.installation}': never deleted from here`,
        };
      return {
        ...base,
        kind: 'copy',
        detail: `not ours: a copy of VM ${m!.vmid} (a clone copies the description, marker included); never deleted`,
      };
    case 'legacy': {
      // The first marker format names no installation: ours only by a uid this store knows.
      if (policy.known.uids.has(m!.uid)) return lockCheck();
      if (policy.known.retired.has(m!.uid))
        return {
          ...base,
          kind: 'orphan',
          deletable: true,
          uidKnown: true,
          detail: `its resource was deleted from ${store} (old marker, uid ${m!.uid})`,
        };
      const may = Boolean(policy.includeUnknown) && stopped;
      return {
        ...base,
        kind: 'legacy-unknown',
        deletable: may,
        onlyStopped: true,
        uidKnown: false,
        detail: `old marker (no installation) with uid ${m!.uid}, which ${store} never held: any installation may own it; ${
          may
            ? 'stopped, and --include-unknown deletes it'
            : 'never deleted unless stopped and --include-unknown is given'
        }`,
      };
    }
    case 'ours': {
      if (policy.known.has(site, ownerKey(m!))) return lockCheck();
      const uidKnown = policy.known.uids.has(m!.uid) || policy.known.retired.has(m!.uid);
      if (uidKnown || policy.soleStore)
        return {
          ...base,
          kind: 'orphan',
          deletable: true,
          uidKnown,
          detail: `no resource ${ownerKey(m!)} in ${store}${uidKnown ? ` (uid ${m!.uid} was ${store}'s)` : ''}`,
        };
      if (stopped)
        return {
          ...base,
          kind: 'orphan',
          deletable: Boolean(policy.includeUnknown),
          onlyStopped: true,
          uidKnown: false,
          detail: `no resource ${ownerKey(m!)} in ${store}, whose uid ${m!.uid} it never held: it may be another state file's; stopped, ${
            policy.includeUnknown ? 'and --include-unknown deletes it' : '--include-unknown deletes it'
          }`,
        };
      return { ...base, kind: 'orphan', deletable: false, uidKnown: false, detail: ANOTHER_FLEET };
    }
  }
}

/** Scan one site with the inventory: every VM that carries a marker or is a placeholder of ours. */
export async function scanSite(
  client: PveClient,
  site: string,
  policy: GcPolicy,
  opts: { now?: () => number } = {},
): Promise<GcFinding[]> {
  // Taken before the list: whatever PVE creates from now on is not this scan's to delete.
  const scanStartedAt = (opts.now ?? Date.now)();
  const vms = await inventory(client);
  const activeByNode = new Map<string, Promise<Set<string>>>();
  const placeholderIdle = async (vm: MarkedVm) => {
    let active = activeByNode.get(vm.node);
    if (!active) {
      active = client.activeTasks(vm.node).then((ts) => new Set(ts.map((t) => t.id)));
      activeByNode.set(vm.node, active);
    }
    return !(await active).has(String(vm.vmid));
  };
  const out: GcFinding[] = [];
  for (const vm of vms) {
    const f = await judge(vm, site, policy, scanStartedAt, placeholderIdle);
    if (f) out.push(f);
  }
  return out;
}

/** Scan every site of the config. */
export async function scanFleet(
  config: LoadedProviderConfig,
  policy: GcPolicy,
  opts: { now?: () => number } = {},
): Promise<GcFinding[]> {
  const out: GcFinding[] = [];
  for (const site of config.config.spec.sites) {
    const client = clientForSite(config, site.name);
    try {
      out.push(...(await scanSite(client, site.name, policy, opts)));
    } finally {
      await client.close();
    }
  }
  return out;
}

function sameMarker(a: Marker | undefined, b: Marker | undefined): boolean {
  return (
    a?.uid === b?.uid &&
    a?.name === b?.name &&
    a?.namespace === b?.namespace &&
    a?.vmid === b?.vmid &&
    a?.installation === b?.installation
  );
}

/** Why a finding may not be acted on any more, seen from a fresh read of the known resources. */
function stillUnknown(f: GcFinding, known: KnownResources): string | undefined {
  if (f.kind === 'half-created' || f.kind === 'stuck-lock') {
    // Their resource exists by definition; a placeholder must still be at a VMID one holds.
    if (f.placeholder && !known.holders(f.site).has(f.vmid)) return 'skipped: no resource holds its VMID any more';
    return undefined;
  }
  if (f.marker && (known.has(f.site, ownerKey(f.marker)) || known.uids.has(f.marker.uid)))
    return `skipped: its resource ${ownerKey(f.marker)} exists now`;
  return undefined;
}

export interface CollectOptions {
  /** Also delete half-created and stuck VMs of existing resources (`--include-half-created`). */
  includeHalfCreated?: boolean;
  /**
   * A fresh read of the known resources (gc: the state file again; the controller: its informer
   * cache), asked right before each deletion: a resource that appeared since the scan keeps its VM.
   */
  known: () => KnownResources | Promise<KnownResources>;
}

/**
 * Delete what the scan found deletable (stop, unlock when allowed, destroy with purge). Each VM is
 * checked again right before: the same config (digest) and marker as the scan read, created before
 * the scan started (less the clock skew), still without a resource, stopped if it had to be.
 * Returns what happened per VM acted on.
 */
export async function collect(
  config: LoadedProviderConfig,
  findings: GcFinding[],
  opts: CollectOptions,
): Promise<GcFinding[]> {
  const mine = findings.filter(
    (f) =>
      (f.deletable && (f.kind === 'orphan' || f.kind === 'legacy-unknown')) ||
      (Boolean(opts.includeHalfCreated) && (f.kind === 'half-created' || f.kind === 'stuck-lock')),
  );
  return perSite(
    config,
    mine,
    (client) => client.capabilities(),
    async (client, f, caps) => {
      // Only what a scan read can be re-checked against (a finding without it is not a scan's).
      if (!f.digest || !Number.isFinite(f.scanStartedAt)) {
        return 'skipped: not found by a scan';
      }
      let cfg: Awaited<ReturnType<PveClient['vmConfig']>>;
      try {
        cfg = await client.vmConfig(f.node, f.vmid);
      } catch (e) {
        if (e instanceof NotFoundError) {
          return 'skipped: gone since the scan';
        }
        throw e;
      }
      const ctime = metaCtime(cfg.values.meta);
      if (ctime !== undefined && ctime * 1000 >= f.scanStartedAt - CLOCK_SKEW_MS) {
        return `skipped: created ${new Date(ctime * 1000).toISOString()}, after the scan started or within ${CLOCK_SKEW_MS / 60_000} min of it (clock skew); run gc again later`;
      }
      if (cfg.digest !== f.digest || !sameMarker(parseMarker(cfg.values.description), f.marker)) {
        return 'skipped: its config changed since the scan; run gc again';
      }
      const lock = cfg.values.lock;
      const placeholderLock = isPlaceholderLock(lock);
      // Only the create/clone lock we set, with no task running, is ours to clear (skiplock on
      // destroy, root@pam only). backup, migrate, snapshot, suspended... belong to somebody else.
      if (lock && !placeholderLock) {
        return `skipped: locked (${lock}) by another operation; such locks are never cleared`;
      }
      // An operator's choice, found before the VM is stopped for a destroy refused (isProtected).
      if (isProtected(cfg.values)) {
        return `skipped: protected (protection: 1), which Proxmox refuses to destroy; to collect it, ${unprotect(f.vmid, f.node, f.site)}, then run gc again`;
      }
      if (placeholderLock) {
        const running = (await client.activeTasks(f.node, { vmid: f.vmid })).length > 0;
        if (running) {
          return `skipped: locked (${lock}) by a task still running`;
        }
        if (!caps.rootTicket) {
          return `skipped: locked (${lock}); only root@pam with a password can clear it over the API. Fix: ${manualCleanup(f.node, f.vmid)}`;
        }
      }
      const st = await client.vmStatus(f.node, f.vmid);
      if (f.onlyStopped && st.status !== 'stopped') {
        return `skipped: ${st.status} now; a VM whose uid this store never held is deleted only while stopped`;
      }
      const gone = stillUnknown(f, await opts.known());
      if (gone) {
        return gone;
      }
      if (st.status === 'running') {
        await client.waitTask(await client.stopVm(f.node, f.vmid));
        // Stopping takes a while: a resource applied meanwhile still keeps its VM.
        const late = stillUnknown(f, await opts.known());
        if (late) {
          return `${late} (left stopped)`;
        }
      }
      await client.waitTask(
        await client.deleteVm(f.node, f.vmid, {
          purge: true,
          destroyUnreferencedDisks: true,
          ...(placeholderLock ? { skiplock: true } : {}),
        }),
      );
      return 'deleted';
    },
  );
}

/**
 * Act on findings site by site, one client per site (`prepare`d once): each finding gets the
 * outcome `act` returns (`deleted`, `skipped: ...`), or `failed: <message>` when it throws. gc's
 * VMs and snippet files (gc-snippets.ts) are collected so.
 */
export async function perSite<F extends { site: string }, P>(
  config: LoadedProviderConfig,
  findings: F[],
  prepare: (client: PveClient) => Promise<P>,
  act: (client: PveClient, f: F, prepared: P) => Promise<string>,
): Promise<F[]> {
  const done: F[] = [];
  for (const site of new Set(findings.map((f) => f.site))) {
    const client = clientForSite(config, site);
    try {
      const prepared = await prepare(client);
      for (const f of findings.filter((x) => x.site === site)) {
        try {
          done.push({ ...f, action: await act(client, f, prepared) });
        } catch (e) {
          done.push({ ...f, action: `failed: ${e instanceof Error ? e.message : String(e)}` });
        }
      }
    } finally {
      await client.close();
    }
  }
  return done;
}
