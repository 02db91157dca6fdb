/**
 * `gc --snippets`: the cloud-init snippet files this installation wrote (src/vm/snippets.ts) that
 * no VM reads any more. The provider removes a resource's old files once its VM reads the new one,
 * all of them when it is deleted, and the copy on a node a VM left; a removal that failed (the node
 * unreachable then), a create that failed after its upload, or a phase prepared ahead that never
 * opened leave files nothing removes. A report first; deletion only when asked.
 *
 * A file is this installation's when the identity hash in its name (8 hex of the SHA-256 of
 * `installation/namespace/name`) matches the name it carries, in a namespace the state file knows
 * (or `default`, or none): another installation's files and an operator's own never match. It is
 * read when any VM of any site of the ProviderConfig refers to it in `cicustom` (its config, its
 * pending change, or one of its snapshots, which a rollback puts back): an operator's clone of one
 * of our VMs copies the reference. So the scan reads every VM's pending config and snapshot list:
 * about two requests per VM, plus one per snapshot. A file written less than an hour before the
 * scan is left out (a create or a prepared phase may be about to use it), and deletion checks the
 * file and every reference again right before it removes anything
 * (`DELETE /nodes/{node}/storage/{storage}/content/{volume}`, which needs Datastore.Allocate).
 */
import type { LoadedProviderConfig } from '../api/provider-config-load.ts';
import { NotFoundError } from '../proxmox/errors.ts';
import type { PveClient } from '../proxmox/index.ts';
import { clientForSite } from '../proxmox/site.ts';
import { cicustomVolids, pendingCicustomVolids } from '../vm/snippet-removal.ts';
import { SNIPPET_PREFIX, snippetOwnerOf } from '../vm/snippets.ts';
import { type KnownResources, perSite } from './gc.ts';

/** How old a snippet must be to be listed: younger ones may be about to be used. */
export const SNIPPET_MIN_AGE_MS = 60 * 60_000;

export interface SnippetFinding {
  kind: 'orphan-snippet';
  site: string;
  node: string;
  storage: string;
  volid: string;
  /** namespace/name of the resource the file was rendered for. */
  owner: string;
  /** Whether that resource exists in the state file (then the file is an old version of its userData). */
  ownerExists: boolean;
  /** When the file was written (the storage's ctime), seconds since the epoch. */
  ctime?: number;
  size?: number;
  detail: string;
  action?: string;
  scanStartedAt: number;
}

/** `provider-proxmox-<name>-<8 hex identity>-<12 hex content>.yaml`. */
const FILE_RE = new RegExp(`^${SNIPPET_PREFIX}(.+)-([0-9a-f]{8})-[0-9a-f]{12}\\.yaml$`);

/**
 * The snippet volids some VM of a site refers to: its config (current and pending) and its
 * snapshots. Any read that fails (but a VM gone meanwhile) fails the whole scan: a reference
 * missed would make a file look unread.
 */
export async function referencedSnippets(client: PveClient): Promise<Set<string>> {
  const out = new Set<string>();
  const vms = (await client.clusterResources('vm')).filter((e) => e.type === 'qemu' && e.node && e.vmid !== undefined);
  for (const e of vms) {
    const node = e.node!;
    const vmid = Number(e.vmid);
    let pending: Awaited<ReturnType<PveClient['vmPending']>>;
    let snapshots: Awaited<ReturnType<PveClient['vmSnapshots']>>;
    try {
      pending = await client.vmPending(node, vmid);
      snapshots = await client.vmSnapshots(node, vmid);
    } catch (err) {
      if (isGone(err)) continue;
      throw err;
    }
    for (const v of pendingCicustomVolids(pending)) out.add(v);
    for (const s of snapshots) {
      if (s.name === 'current') continue;
      const cfg = await client.snapshotConfig(node, vmid, s.name).catch((err): Record<string, unknown> => {
        if (isGone(err)) return {};
        throw err;
      });
      for (const v of cicustomVolids(cfg.cicustom)) out.add(v);
    }
  }
  return out;
}

function isGone(err: unknown): boolean {
  return err instanceof NotFoundError;
}

/** What the scan needs to know of the installation and its state file. */
export interface SnippetPolicy {
  installation: string;
  known: KnownResources;
  /** The namespaces a file's identity is tried in (the state file's, `default`, none). */
  namespaces: Iterable<string>;
  /**
   * The state file's resource names: a name over 40 characters is cut to 40 in the file's name,
   * and only a known full name can match its identity hash.
   */
  names?: Iterable<string>;
}

/**
 * This installation's snippet files that no VM of any site reads, older than SNIPPET_MIN_AGE_MS.
 * `references`: what referencedSnippets found on every site (a shared storage may be mounted by
 * another site's nodes).
 */
export async function scanSnippetsOfSite(
  client: PveClient,
  site: string,
  policy: SnippetPolicy,
  references: ReadonlySet<string>,
  scanStartedAt: number,
): Promise<SnippetFinding[]> {
  const out: SnippetFinding[] = [];
  const seen = new Set<string>();
  const namespaces = [...new Set(policy.namespaces)];
  const long = [...new Set(policy.names ?? [])].filter((n) => n.length > 40);
  for (const n of await client.listNodes()) {
    if (n.status !== 'online') continue;
    const storages = (await client.nodeStorages(n.node)).filter(
      (s) => (s.content ?? '').split(',').includes('snippets') && s.active !== 0,
    );
    for (const st of storages) {
      for (const v of await client.storageContent(n.node, st.storage, { content: 'snippets' })) {
        // A shared storage lists the same files on every node: once per site.
        if (seen.has(v.volid)) continue;
        seen.add(v.volid);
        const file = v.volid.replace(/^[^:]+:snippets\//, '');
        const m = FILE_RE.exec(file);
        if (!m) continue;
        const [, cut, hash] = m;
        const names = [cut!, ...long.filter((n) => n.slice(0, 40) === cut)];
        let ns: string | undefined;
        let name = cut!;
        for (const n of names) {
          ns = namespaces.find((x) => snippetOwnerOf(policy.installation, x, n).endsWith(`-${hash}`));
          if (ns !== undefined) {
            name = n;
            break;
          }
        }
        if (ns === undefined || references.has(v.volid)) continue;
        if (v.ctime === undefined || v.ctime * 1000 > scanStartedAt - SNIPPET_MIN_AGE_MS) continue;
        const owner = `${ns ? `${ns}/` : ''}${name}`;
        const ownerExists = policy.known.has(site, owner);
        out.push({
          kind: 'orphan-snippet',
          site,
          node: n.node,
          storage: st.storage,
          volid: v.volid,
          owner,
          ownerExists,
          ctime: v.ctime,
          size: v.size,
          scanStartedAt,
          detail: `${ownerExists ? `an old version of ${owner}'s userData` : `${owner} is not in the state file`}; no VM of any site reads it (config, pending change or snapshot). --delete removes it; by hand: on node ${n.node}, rm "$(pvesm path ${v.volid})"`,
        });
      }
    }
  }
  return out;
}

/** Scan every site: the references of all sites first, then each site's files. */
export async function scanSnippets(
  config: LoadedProviderConfig,
  policy: SnippetPolicy,
  scanStartedAt: number,
): Promise<SnippetFinding[]> {
  const sites = config.config.spec.sites.map((s) => s.name);
  const references = await allReferences(config, sites);
  const out: SnippetFinding[] = [];
  for (const site of sites) {
    const client = clientForSite(config, site);
    try {
      out.push(...(await scanSnippetsOfSite(client, site, policy, references, scanStartedAt)));
    } finally {
      await client.close();
    }
  }
  return out;
}

async function allReferences(config: LoadedProviderConfig, sites: string[]): Promise<Set<string>> {
  const all = new Set<string>();
  for (const site of sites) {
    const client = clientForSite(config, site);
    try {
      for (const v of await referencedSnippets(client)) all.add(v);
    } finally {
      await client.close();
    }
  }
  return all;
}

/**
 * Delete what the scan found. Right before, every site's references are read again and each file
 * must still be listed with the ctime the scan saw; whatever fails a check is skipped with why.
 */
export async function collectSnippets(
  config: LoadedProviderConfig,
  findings: SnippetFinding[],
): Promise<SnippetFinding[]> {
  if (!findings.length) return [];
  const references = await allReferences(
    config,
    config.config.spec.sites.map((s) => s.name),
  );
  return perSite(
    config,
    findings,
    async () => undefined,
    async (client, f) => {
      if (references.has(f.volid)) return 'skipped: a VM reads it now';
      const now = (await client.storageContent(f.node, f.storage, { content: 'snippets' })).find(
        (v) => v.volid === f.volid,
      );
      if (!now) return 'skipped: gone since the scan';
      if (now.ctime !== f.ctime) return 'skipped: written again since the scan; run gc again';
      const upid = await client.deleteVolume(f.node, f.storage, f.volid);
      if (upid) await client.waitTask(upid);
      return 'deleted';
    },
  );
}

/** The snippet files as a table (after the VMs'), or one line when there are none. */
export function formatSnippets(findings: SnippetFinding[]): string {
  if (!findings.length) return 'No snippet files of this installation that no VM reads.';
  const rows = findings.map((f) => [
    f.site,
    f.node,
    f.volid,
    f.owner,
    f.ctime !== undefined ? new Date(f.ctime * 1000).toISOString().replace(/\.\d+Z$/, 'Z') : '',
    f.action ?? f.detail,
  ]);
  const head = ['SITE', 'NODE', 'SNIPPET', 'OWNER', 'WRITTEN', 'DETAIL'];
  const w = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (r: string[]) =>
    r
      .map((c, i) => (i === r.length - 1 ? c : c.padEnd(w[i]!)))
      .join('   ')
      .trimEnd();
  return [line(head), ...rows.map(line)].join('\n');
}
