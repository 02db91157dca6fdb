/**
 * Step 10, completely: a userData with more than the Proxmox VE API can set (packages, runcmd,
 * write_files...) becomes a cloud-init snippet. It is rendered (the user's document, plus the
 * default user, SSH keys and hostname where it lacks them, since `cicustom user=` replaces what
 * PVE would generate: qemu-server Cloudinit.pm:145-189 cloudinit_userdata and :637-682), written
 * over SSH into the snippets directory of a storage on the VM's node, and referenced with
 * `cicustom user=<storage>:snippets/<file>`.
 *
 * The file name is `provider-proxmox-<name>-<identity>-<content>.yaml`: the resource's name (for
 * people), 8 hex of the SHA-256 of `installation/namespace/name`, and 12 of the content's. Content-
 * addressed: a changed userData is a new file (a running VM keeps reading the old one until it
 * reboots, and PVE sees a `cicustom` change). Named for the resource's identity, not its uid: two
 * runtimes of one installation managing the same VM (two state files, a lost one) render the same
 * file, instead of taking turns at `cicustom` (found by the fault search). And owned by that
 * identity: its old files are removed once its VM refers to the new one, all when it is deleted
 * (snippet-removal.ts). Without SSH such a VM is refused before anything is created; nothing of the
 * userData is ever dropped silently.
 */
import { createHash } from 'node:crypto';
import { parse as parseYaml, stringify } from 'yaml';
import type { SiteSsh } from '../api/provider-config-site.ts';
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { abortable } from '../proxmox/deadline.ts';
import type { PveClient } from '../proxmox/index.ts';
// ssh2 is loaded only when a snippet is really written (validate and plan never need it).
import type { NodeFiles, SshTarget } from '../proxmox/ssh.ts';
import { reason } from './conditions.ts';
import type { StepContext } from './context.ts';
import { nodeFact } from './node-facts.ts';
import { sshKeys } from './secrets.ts';
import type { SnippetStore } from './site-cache.ts';
import { needsSnippet, parseUserData, userDataDocument, vmName } from './spec.ts';

export const SNIPPET_PREFIX = 'provider-proxmox-';

/** Storage types whose volumes are files in a directory on the node (pve-storage's path-based plugins). */
const DIR_TYPES = new Set(['dir', 'nfs', 'cifs', 'cephfs', 'glusterfs', 'btrfs']);

// Pure over the spec, so that `validate` needs none of the client: it lives in spec.ts.
export { needsSnippet };

/**
 * Refusals before anything is created: a snippet is needed but the site has no SSH, or the spec
 * asks for a password that would have to be written into the snippet in clear text.
 */
export function checkSnippetPossible(ctx: StepContext, r: ProxmoxVM): void {
  if (!needsSnippet(r)) return;
  const keys = parseUserData(r.spec.forProvider.userData).unsupported.join(', ');
  if (!ctx.site.ssh)
    throw reason(
      'SnippetsUnavailable',
      `userData has keys the Proxmox VE API cannot set (${keys}): they need a cloud-init snippet, uploaded over SSH, and site ${ctx.site.name} has no ssh in its ProviderConfig. Fix: add spec.sites[].ssh (user, secretRef with privateKey, hostKeys; see docs/cloud-init.md), or set spec.forProvider.cloudInit.userDataMode: NativeOnly to apply only the users and SSH keys`,
    );
  if (r.spec.forProvider.cloudInit?.passwordSecretRef)
    throw reason(
      'PasswordInSnippetRefused',
      'cloudInit.passwordSecretRef cannot be used with a userData snippet: Proxmox VE ignores cipassword once `cicustom user=` is set, and the provider does not write passwords into files on the node. Fix: put a hashed password into userData (users[].hashed_passwd, from `mkpasswd -m sha-512`), or remove passwordSecretRef',
    );
}

/**
 * The user-data document the snippet holds: the user's #cloud-config, with what PVE's own
 * generation would have given it where the document does not say (hostname, fqdn,
 * manage_etc_hosts, the default user, SSH keys from cloudInit and its Secret).
 */
export function renderUserData(ctx: StepContext, r: ProxmoxVM): string {
  const fp = r.spec.forProvider;
  const name = vmName(r);
  const ud = parseUserData(fp.userData);
  const extra = sshKeys(ctx, r, { sshKeys: [] }).filter((k) => !ud.sshKeys.includes(k));
  // Every reconcile of a resource with a snippet renders it (to see whether it changed): the same
  // inputs give the same text, which is kept instead of parsed and printed again.
  const key = [name, fp.cloudInit?.user ?? '', extra.join('\n'), fp.userData ?? ''].join('\u0000');
  const known = rendered.get(key);
  if (known !== undefined) return known;
  const parsed = userDataDocument(fp.userData ?? '');
  // (Invalid YAML: parsed again, to throw the parser's own error.)
  const doc = (('error' in parsed ? parseYaml(fp.userData ?? '') : parsed.doc) ?? {}) as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  if (doc.hostname === undefined && doc.preserve_hostname !== true) {
    out.hostname = name;
    out.manage_etc_hosts ??= doc.manage_etc_hosts ?? true;
  }
  if (fp.cloudInit?.user && doc.user === undefined) out.user = fp.cloudInit.user;
  // The keys PVE's sshkeys would carry; the document's own top-level keys stay first.
  const own = Array.isArray(doc.ssh_authorized_keys) ? (doc.ssh_authorized_keys as unknown[]) : [];
  const merged = { ...out, ...doc };
  if (extra.length) merged.ssh_authorized_keys = [...own, ...extra];
  const text = `#cloud-config\n${stringify(merged, { lineWidth: 0 })}`;
  if (rendered.size >= 4096) rendered.delete(rendered.keys().next().value as string);
  rendered.set(key, text);
  return text;
}

/** renderUserData's texts by their inputs (bounded: the oldest goes). */
const rendered = new Map<string, string>();

/** The part of a snippet's name that says whose it is: `<name>-<8 hex of installation/ns/name>`. */
export function snippetOwner(r: ProxmoxVM, installation: string): string {
  return snippetOwnerOf(installation, r.metadata.namespace ?? '', r.metadata.name);
}

/** The owner part of a snippet's file name for a resource's identity (see the file's comment). */
export function snippetOwnerOf(installation: string, namespace: string, name: string): string {
  const id = `${installation}/${namespace}/${name}`;
  return `${name.slice(0, 40)}-${createHash('sha256').update(id).digest('hex').slice(0, 8)}`;
}

export function snippetFile(owner: string, content: string): string {
  const hash = createHash('sha256').update(content).digest('hex').slice(0, 12);
  return `${SNIPPET_PREFIX}${owner}-${hash}.yaml`;
}

/** Whether a `cicustom` value is exactly `user=` one of this owner's snippets (nothing else set). */
export function isOwnSnippetRef(cicustom: string | undefined, owner: string): boolean {
  const m = /^user=[^:,\s]+:snippets\/([^,\s]+)$/.exec(cicustom ?? '');
  return !!m && snippetsOf(owner, [m[1]!]).length === 1;
}

/** This owner's snippet files (any version) among a directory's names. */
export function snippetsOf(owner: string, names: string[]): string[] {
  const prefix = `${SNIPPET_PREFIX}${owner}-`;
  return names.filter((n) => n.startsWith(prefix) && /^[0-9a-f]{12}\.yaml$/.test(n.slice(prefix.length)));
}

/**
 * Where snippets go on `node`: spec.sites[].ssh.snippetsStorage, else the first shared storage of
 * the node with `snippets` content and a directory, else the first local one. The directory is the
 * storage's `path` (GET /storage/{id}, which needs Datastore.Allocate; without it, pve-storage's
 * defaults: /var/lib/vz for `local`, /mnt/pve/<id> for network file systems), plus `snippets`.
 */
export function snippetStore(ctx: StepContext, node: string): Promise<SnippetStore> {
  const cached = ctx.site.snippetStores.get(node);
  if (cached) return cached;
  // The node's storages as the preflight's checks read them (one read for both: node-facts.ts).
  const storages = nodeFact(ctx, 'storages', node, (c) => c.nodeStorages(node));
  const found = findSnippetStore(ctx.client, node, ctx.site.ssh?.snippetsStorage, storages);
  ctx.site.snippetStores.set(node, found);
  found.catch(() => ctx.site.snippetStores.delete(node));
  return found;
}

/** snippetStore without the site's cache: also what `doctor` checks. */
export async function findSnippetStore(
  client: PveClient,
  node: string,
  wanted: string | undefined,
  read: Promise<Awaited<ReturnType<PveClient['nodeStorages']>>> = client.nodeStorages(node),
): Promise<SnippetStore> {
  const storages = await read;
  const usable = storages.filter(
    (s) => DIR_TYPES.has(s.type ?? '') && (s.content ?? '').split(',').includes('snippets') && s.active !== 0,
  );
  const pick = wanted ? storages.find((s) => s.storage === wanted) : (usable.find((s) => s.shared === 1) ?? usable[0]);
  if (!pick)
    throw reason(
      'SnippetStorageNotFound',
      wanted
        ? `spec.sites[].ssh.snippetsStorage '${wanted}' is not a storage of node ${node} (it has ${storages.map((s) => s.storage).join(', ')})`
        : `node ${node} has no active directory storage with the snippets content type. Fix: enable it on one (Datacenter > Storage > local > Content: Snippets; or \`pvesm set local --content iso,vztmpl,backup,snippets\`), or name one in spec.sites[].ssh.snippetsStorage`,
    );
  if (wanted && !(pick.content ?? '').split(',').includes('snippets'))
    throw reason(
      'SnippetStorageNotFound',
      `storage ${wanted} (spec.sites[].ssh.snippetsStorage) does not have the snippets content type; PVE would not use a snippet there. Fix: \`pvesm set ${wanted} --content ${[pick.content, 'snippets'].filter(Boolean).join(',')}\``,
    );
  const path = await client
    .storageConfig(pick.storage)
    .then((c) => c.path)
    .catch(() => undefined);
  const base =
    path ??
    (pick.storage === 'local' && pick.type === 'dir'
      ? '/var/lib/vz'
      : pick.type === 'dir'
        ? undefined
        : `/mnt/pve/${pick.storage}`);
  if (!base)
    throw reason(
      'SnippetStorageNotFound',
      `the directory of storage ${pick.storage} is unknown: reading it (GET /storage/${pick.storage}) needs Datastore.Allocate on /storage/${pick.storage}. Fix: grant it, or use storage local (/var/lib/vz) for snippets`,
    );
  return { storage: pick.storage, dir: `${base.replace(/\/+$/, '')}/snippets`, shared: pick.shared === 1 };
}

/**
 * Compute this resource's snippet (content, file, volume) for `node` into its memory; undefined
 * when it needs none. Reads only: nothing is uploaded here.
 */
export async function desiredSnippet(
  ctx: StepContext,
  r: ProxmoxVM,
  node: string,
): Promise<{ volid: string } | undefined> {
  if (!needsSnippet(r)) {
    ctx.memory.snippet = undefined;
    return undefined;
  }
  checkSnippetPossible(ctx, r);
  const content = renderUserData(ctx, r);
  const file = snippetFile(snippetOwner(r, ctx.site.installation), content);
  const prev = ctx.memory.snippet;
  if (prev && prev.file === file && prev.node === node) return { volid: prev.volid };
  const store = await snippetStore(ctx, node);
  const volid = `${store.storage}:snippets/${file}`;
  ctx.memory.snippet = { volid, file, dir: store.dir, node, content };
  return { volid };
}

/**
 * Write this resource's snippet on `node` (a VM going there, or found there, reads it when it
 * starts): what desiredSnippet computes, uploaded unless this reconcile did. False when it needs none.
 */
export async function writeSnippetOn(ctx: StepContext, r: ProxmoxVM, node: string): Promise<boolean> {
  if (!(await desiredSnippet(ctx, r, node))) return false;
  await uploadSnippet(ctx);
  return true;
}

/** Where to SSH to for `node`: spec.sites[].ssh.nodes, else the node's address in /cluster/status. */
function target(ctx: StepContext, node: string): Promise<SshTarget> {
  return sshTarget(ctx.client, ctx.site.ssh!, node);
}

/** The SSH target of a node (also what `doctor` connects to). */
export async function sshTarget(client: PveClient, ssh: SiteSsh, node: string): Promise<SshTarget> {
  const own = ssh.nodes.get(node);
  let host = own?.host;
  if (!host) {
    const status = await client.clusterStatus();
    const entry = status.find((e) => e.type === 'node' && e.name === node);
    host = typeof entry?.ip === 'string' ? entry.ip : undefined;
  }
  if (!host)
    throw reason(
      'SnippetUploadFailed',
      `node ${node} has no address in /cluster/status; set it in spec.sites[].ssh.nodes (name: ${node}, host: ...)`,
    );
  return {
    host,
    port: own?.port ?? ssh.port,
    user: ssh.user,
    privateKey: ssh.privateKey,
    ...(ssh.passphrase ? { passphrase: ssh.passphrase } : {}),
    hostKeys: ssh.hostKeys,
  };
}

/**
 * Run `use` with a node's files over the site's shared SSH connection to it (ssh-sessions.ts; ssh2
 * is loaded here, on the first snippet, so that validate and plan never load it).
 */
async function withNodeFiles<T>(ctx: StepContext, t: SshTarget, use: (files: NodeFiles) => Promise<T>): Promise<T> {
  const { SshSessions } = await import('../proxmox/ssh-sessions.ts');
  ctx.site.sshSessions ??= new SshSessions();
  return ctx.site.sshSessions.use(t, use, ctx.signal);
}

/** An SSH failure as a condition reason: what to fix decides whether retrying can help. */
async function uploadFailed(e: unknown): Promise<Error> {
  const { SshError } = await import('../proxmox/ssh.ts');
  if (!(e instanceof SshError)) return e instanceof Error ? e : new Error(String(e));
  const permanent = e.kind === 'auth' || e.kind === 'host-key' || e.kind === 'permission';
  const why =
    e.kind === 'host-key'
      ? 'SshHostKeyMismatch'
      : e.kind === 'auth'
        ? 'SshAuthenticationFailed'
        : e.kind === 'disk-full'
          ? 'SnippetStorageFull'
          : 'SnippetUploadFailed';
  return reason(why, `uploading the userData snippet: ${e.message}`, !permanent);
}

/**
 * Connect to `node` ahead of an upload that is coming (the create's checks run meanwhile). Only
 * where the resource needs a snippet and none is uploaded yet; a failure shows at the upload.
 */
export function warmSnippetConnection(ctx: StepContext, r: ProxmoxVM, node: string): void {
  if (!ctx.site.ssh || !needsSnippet(r) || snippetChecked(ctx)) return;
  // Once a few seconds per node is enough (a target may cost a /cluster/status read).
  let nodes = warmed.get(ctx.site);
  if (!nodes) {
    nodes = new Map();
    warmed.set(ctx.site, nodes);
  }
  const now = ctx.site.now();
  if (now - (nodes.get(node) ?? -Infinity) < WARM_EVERY_MS) return;
  nodes.set(node, now);
  void (async () => {
    const t = await target(ctx, node);
    const { SshSessions } = await import('../proxmox/ssh-sessions.ts');
    ctx.site.sshSessions ??= new SshSessions();
    ctx.site.sshSessions.warm(t);
  })().catch(() => {});
}

/** When each node's connection was last warmed, per site. */
const warmed = new WeakMap<object, Map<string, number>>();
const WARM_EVERY_MS = 5_000;

/** Whether this reconcile wrote the memory's snippet file or found it on its node. */
export function snippetChecked(ctx: StepContext): boolean {
  return ctx.signal !== undefined && ctx.memory.snippet?.checkedIn === ctx.signal;
}

/**
 * Upload the snippet computed by desiredSnippet, unless this reconcile did (a file this process
 * wrote before costs a stat, see writeSnippet).
 */
export async function uploadSnippet(ctx: StepContext): Promise<void> {
  const s = ctx.memory.snippet;
  if (!s || snippetChecked(ctx)) return;
  try {
    await writeSnippet(ctx, s.node, s.dir, s.file, s.content);
  } catch (e) {
    throw await uploadFailed(e);
  }
  s.checkedIn = ctx.signal;
}

/**
 * Write a snippet file, unless this process wrote it ahead (prepareSnippet) and it is still there
 * at its size: one SFTP round trip (a stat) instead of the write's four or five. Its name is its
 * content's hash, so a file of that name and size is what the write would make; and one removed
 * meanwhile (another state file's delete of a resource of the same name) is written again.
 */
async function writeSnippet(ctx: StepContext, node: string, dir: string, file: string, content: string): Promise<void> {
  const key = writtenKey(node, dir, file);
  const writes = writesOf(ctx);
  // A write of this file already under way (the one prepared ahead, while its create uploads):
  // its outcome serves this one too, unless it failed. Waited for as long as this step's signal lets.
  const writing = writes.inFlight.get(key);
  const served = writing?.then(
    () => true,
    () => false,
  );
  if (served && (await abortable(served, ctx.signal))) return;
  const path = `${dir}/${file}`;
  const write = (async () => {
    const t = await target(ctx, node);
    await withNodeFiles(ctx, t, async (files) => {
      if (writes.written.has(key) && (await files.size(path)) === Buffer.byteLength(content)) return;
      await files.mkdirs(dir);
      await files.write(path, content);
    });
    writes.written.add(key);
  })();
  writes.inFlight.set(key, write);
  try {
    await write;
  } finally {
    if (writes.inFlight.get(key) === write) writes.inFlight.delete(key);
  }
}

/**
 * Once a create naming the snippet is sent: look again that its file is on the node, and write it
 * again if not. Written before the create, it may have gone since to a removal by a twin (another
 * state file's resource of this name, whose files have the same names) that listed the node before
 * this create's placeholder was there (snippet-removal.ts namedByTwins keeps them from then on).
 * The create's task runs meanwhile, so this costs its path nothing. Best effort: a failure leaves
 * the start to meet it.
 */
export async function recheckSnippet(ctx: StepContext): Promise<void> {
  const s = ctx.memory.snippet;
  if (!s) return;
  s.checkedIn = undefined;
  await uploadSnippet(ctx).catch(() => {});
}

/**
 * Upload, ahead of its create, the snippet a resource that is not in the store yet will need on
 * its pinned `node`: a rollout's next phase, while the phase before it boots (src/local/apply.ts).
 * Its SFTP round trips (a second at speed 100) were on the path from one phase's last Ready to
 * the next phase's first create. The file's name carries the resource's identity and a hash of its
 * content (snippetFile), so the upload its create makes later finds it written (writeSnippet) as
 * long as nothing it renders from changed; otherwise it writes its own, and this one stays, named
 * for the resource, like the file of a create that failed. Best effort: a failure here is the
 * create's to meet.
 */
export async function prepareSnippet(ctx: StepContext, r: ProxmoxVM, node: string): Promise<void> {
  if (!ctx.site.ssh || !needsSnippet(r)) return;
  checkSnippetPossible(ctx, r);
  const content = renderUserData(ctx, r);
  const file = snippetFile(snippetOwner(r, ctx.site.installation), content);
  const store = await snippetStore(ctx, node);
  if (writesOf(ctx).written.has(writtenKey(node, store.dir, file))) return;
  await writeSnippet(ctx, node, store.dir, file, content);
}

/**
 * Per site (node, directory and name of each file): the snippet files this process wrote, which a
 * create checks are still there instead of writing them again (a file this process removes is
 * forgotten, forgetSnippetFile), and the writes under way, which a second write of the same file
 * waits for (writeSnippet).
 */
const siteWrites = new WeakMap<object, { written: Set<string>; inFlight: Map<string, Promise<void>> }>();

function writesOf(ctx: StepContext): { written: Set<string>; inFlight: Map<string, Promise<void>> } {
  let w = siteWrites.get(ctx.site);
  if (!w) {
    w = { written: new Set(), inFlight: new Map() };
    siteWrites.set(ctx.site, w);
  }
  return w;
}

function writtenKey(node: string, dir: string, file: string): string {
  return `${node}\u0000${dir}/${file}`;
}

/**
 * Run `use` with `node`'s files over the site's shared SSH connection (snippet-removal.ts); throws
 * when the node has no address to connect to.
 */
export async function withSnippetFiles<T>(
  ctx: StepContext,
  node: string,
  use: (files: NodeFiles) => Promise<T>,
): Promise<T> {
  return withNodeFiles(ctx, await target(ctx, node), use);
}

/**
 * A snippet file this process removes from `node`: no longer taken as written (writeSnippet), nor
 * as checked by the reconcile that found it (snippetChecked).
 */
export function forgetSnippetFile(ctx: StepContext, node: string, dir: string, file: string): void {
  writesOf(ctx).written.delete(writtenKey(node, dir, file));
  const mine = ctx.memory.snippet;
  if (mine?.node === node && mine.file === file) mine.checkedIn = undefined;
}
