/**
 * Helpers for the controller tests against the real kube-apiserver (harness.ts) and the in-process
 * Proxmox VE simulator: a raw REST client (admin token, the harness's CA), YAML apply, polling,
 * a least-privilege kubeconfig for the controller (the deploy/ ServiceAccount's token), the
 * controller as a child process, and views of the simulator's VMs and tasks.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { createWriteStream, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import { createServer } from 'node:net';
import { join, resolve } from 'node:path';
import { parseAllDocuments } from 'yaml';
import type { Simulator } from '../../src/sim/index.ts';
import { providerConfigYaml } from '../../src/sim/provider-config.ts';
import { markerUid } from '../../src/vm/spec.ts';
import type { Kube } from './harness.ts';

export const ROOT = resolve(import.meta.dirname, '../..');
export const NODE = join(ROOT, 'node_modules/.bin/node');
/**
 * V8 flags the controller runs with, as the image runs it (Dockerfile ENTRYPOINT). V8 sizes its heap
 * from the machine's memory, and on a large host without a memory limit that is a heap of 4 GB:
 * - `--max-semi-space-size=8`: the young generation would grow to 64 MB a semi-space (134 MB of new
 *   space) under the controller's allocation rate, a third of its RSS at 10,000 resources
 *   (bench/kube-scale.ts); 8 MB is as fast for objects that live a reconcile;
 * - `--heap-growing-percent=20`: with a 4 GB limit V8 lets the old generation grow to 2-4 times
 *   what survived the last full GC before the next one, and the garbage of the start-up burst
 *   (10,000 first reconciles, their request and response buffers) made the peak: 150 MB of heap
 *   and 47 MB of buffers for 65 MB live, 311 MB RSS. 20% over the live heap, nearer what V8 allows
 *   itself when the heap limit is small (a Pod's memory limit), without a limit that could be hit:
 *   236 MB at its peak (30%: 251).
 */
export const CONTROLLER_NODE_FLAGS = ['--max-semi-space-size=8', '--heap-growing-percent=20'];
export const GROUP = 'proxmox.sankofa.io';
export const VERSION = 'v1alpha1';
export const API = `${GROUP}/${VERSION}`;
/** The deploy/ namespace (the controller's ServiceAccount, RBAC and Lease live here). */
export const SYSTEM_NS = 'provider-proxmox-system';

/** Parsed JSON from the apiserver: Kubernetes objects are open-ended in these tests. */
// biome-ignore lint/suspicious/noExplicitAny: see above
export type Json = any;

export type Obj = Record<string, Json> & {
  apiVersion: string;
  kind: string;
  metadata: {
    name: string;
    namespace?: string;
    uid?: string;
    resourceVersion?: string;
    generation?: number;
    annotations?: Record<string, string>;
    labels?: Record<string, string>;
    finalizers?: string[];
    deletionTimestamp?: string;
    ownerReferences?: Array<{ kind: string; name: string; uid: string }>;
  };
};

export interface Res {
  status: number;
  json: Json;
  text: string;
  headers: Record<string, string | string[] | undefined>;
}

/** A raw request to the apiserver as the admin (bearer token, the harness's CA). Never throws on a status. */
export function kreq(
  kube: Kube,
  method: string,
  path: string,
  opts: { body?: unknown; contentType?: string; accept?: string; query?: Record<string, string> } = {},
): Promise<Res> {
  const url = new URL(path, kube.url);
  for (const [k, v] of Object.entries(opts.query ?? {})) url.searchParams.set(k, v);
  const body = opts.body === undefined ? undefined : Buffer.from(JSON.stringify(opts.body));
  return new Promise((ok, fail) => {
    const req = https.request(
      url,
      {
        method,
        ca: kube.caPem,
        headers: {
          Authorization: `Bearer ${kube.token}`,
          Accept: opts.accept ?? 'application/json',
          ...(body ? { 'Content-Type': opts.contentType ?? 'application/json', 'Content-Length': body.length } : {}),
        },
        timeout: 30_000,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let json: unknown;
          try {
            json = text ? JSON.parse(text) : undefined;
          } catch {
            json = undefined;
          }
          ok({ status: res.statusCode ?? 0, json, text, headers: res.headers });
        });
        res.on('error', fail);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`${method} ${path}: timed out`)));
    req.on('error', fail);
    if (body) req.write(body);
    req.end();
  });
}

/** Like kreq, but the status must be 2xx; returns the parsed body. */
export async function kok(
  kube: Kube,
  method: string,
  path: string,
  opts: Parameters<typeof kreq>[3] = {},
): Promise<Json> {
  const res = await kreq(kube, method, path, opts);
  assert.ok(res.status >= 200 && res.status < 300, `${method} ${path}: ${res.status} ${res.text.slice(0, 500)}`);
  return res.json;
}

const CORE_PLURALS: Record<string, [string, boolean]> = {
  Namespace: ['namespaces', false],
  ServiceAccount: ['serviceaccounts', true],
  Secret: ['secrets', true],
  ConfigMap: ['configmaps', true],
  ClusterRole: ['clusterroles', false],
  ClusterRoleBinding: ['clusterrolebindings', false],
  Role: ['roles', true],
  RoleBinding: ['rolebindings', true],
  Deployment: ['deployments', true],
  CustomResourceDefinition: ['customresourcedefinitions', false],
  ProxmoxVM: ['proxmoxvms', true],
  ProxmoxVMScaleSet: ['proxmoxvmscalesets', true],
  ProxmoxImage: ['proxmoximages', true],
  ProxmoxTemplate: ['proxmoxtemplates', true],
  ProviderConfig: ['providerconfigs', true],
  ClusterProviderConfig: ['clusterproviderconfigs', false],
  ProviderConfigUsage: ['providerconfigusages', true],
  ClusterProviderConfigUsage: ['clusterproviderconfigusages', false],
};

/** The collection path of an object's kind (in its namespace, default `default`). */
export function collection(apiVersion: string, kind: string, namespace?: string): string {
  const known = CORE_PLURALS[kind];
  assert.ok(known, `no plural known for ${kind}`);
  const [plural, namespaced] = known;
  const prefix = apiVersion.includes('/') ? `/apis/${apiVersion}` : `/api/${apiVersion}`;
  return namespaced ? `${prefix}/namespaces/${namespace ?? 'default'}/${plural}` : `${prefix}/${plural}`;
}

export function objPath(o: {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string };
}): string {
  return `${collection(o.apiVersion, o.kind, o.metadata.namespace)}/${o.metadata.name}`;
}

export function vmPath(namespace: string, name?: string): string {
  const c = collection(API, 'ProxmoxVM', namespace);
  return name ? `${c}/${name}` : c;
}

/** Every document of a YAML file (comments and empty documents dropped). */
export function readYaml(file: string): Obj[] {
  return parseAllDocuments(readFileSync(file, 'utf8'))
    .map((d) => d.toJS() as Obj | null)
    .filter((d): d is Obj => Boolean(d));
}

/** Every YAML file under `dir`, recursively, sorted. */
export function yamlFiles(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...yamlFiles(p));
    else if (/\.ya?ml$/.test(e.name)) out.push(p);
  }
  return out.sort();
}

/** POST an object; `existsOk` tolerates 409 AlreadyExists. */
export async function create(kube: Kube, o: Obj, opts: { existsOk?: boolean } = {}): Promise<Obj> {
  const res = await kreq(kube, 'POST', collection(o.apiVersion, o.kind, o.metadata.namespace), { body: o });
  if (res.status === 409 && opts.existsOk) return o;
  assert.ok(res.status === 201 || res.status === 200, `create ${o.kind} ${o.metadata.name}: ${res.status} ${res.text}`);
  return res.json as Obj;
}

export async function get(kube: Kube, path: string): Promise<Obj | undefined> {
  const res = await kreq(kube, 'GET', path);
  if (res.status === 404) return undefined;
  assert.equal(res.status, 200, `GET ${path}: ${res.text}`);
  return res.json as Obj;
}

export async function list(kube: Kube, path: string, query: Record<string, string> = {}): Promise<Obj[]> {
  return ((await kok(kube, 'GET', path, { query })) as { items: Obj[] }).items;
}

/** JSON merge patch. */
export function mergePatch(kube: Kube, path: string, patch: unknown): Promise<Obj> {
  return kok(kube, 'PATCH', path, { body: patch, contentType: 'application/merge-patch+json' });
}

export async function del(kube: Kube, path: string): Promise<void> {
  const res = await kreq(kube, 'DELETE', path);
  assert.ok(
    res.status === 200 || res.status === 202 || res.status === 404,
    `DELETE ${path}: ${res.status} ${res.text}`,
  );
}

/**
 * Apply the generated CRDs (those whose plural `only` accepts) and wait until each is Established
 * and serves its resource.
 */
export async function applyCrds(kube: Kube, only: (plural: string) => boolean = () => true): Promise<void> {
  const files = yamlFiles(join(ROOT, 'deploy/crds'));
  const crds = files.flatMap(readYaml).filter((c) => only(c.spec.names.plural as string));
  for (const crd of crds) await create(kube, crd);
  for (const crd of crds) {
    await waitFor(`CRD ${crd.metadata.name} Established`, async () => {
      const got = await get(kube, objPath(crd));
      return got?.status?.conditions?.some(
        (c: { type: string; status: string }) => c.type === 'Established' && c.status === 'True',
      );
    });
    // Right after Established the new resource can still be missing from the handler chain for a moment.
    const plural = crd.spec.names.plural as string;
    const namespaced = crd.spec.scope === 'Namespaced';
    await waitFor(`${plural} served`, async () => {
      const res = await kreq(
        kube,
        'GET',
        `/apis/${GROUP}/${VERSION}${namespaced ? '/namespaces/default' : ''}/${plural}`,
      );
      return res.status === 200;
    });
  }
}

/** The simulator's ProviderConfig (+ its Secrets: the credentials, the SSH key), created in the apiserver. */
export async function createProviderConfig(kube: Kube, sim: Simulator, name = 'default'): Promise<Obj> {
  const docs = parseAllDocuments(providerConfigYaml(sim, { name })).map((d) => d.toJS() as Obj);
  const secrets = docs.filter((d) => d.kind === 'Secret');
  await create(
    kube,
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name: secrets[0]!.metadata.namespace! } },
    { existsOk: true },
  );
  for (const secret of secrets) await create(kube, secret, { existsOk: true });
  return create(kube, docs.find((d) => d.kind === 'ClusterProviderConfig')!);
}

/** The deploy/ install objects in dependency order: namespace, service account, RBAC, deployment. */
export function installManifests(): Obj[] {
  return ['namespace.yaml', 'serviceaccount.yaml', 'rbac.yaml', 'deployment.yaml'].flatMap((f) =>
    readYaml(join(ROOT, 'deploy', f)),
  );
}

/**
 * A kubeconfig holding a token of the deploy/ ServiceAccount (or of `serviceAccount` in the same
 * namespace): the controller then runs with exactly the rights deploy/rbac.yaml grants (or none).
 * The namespace, ServiceAccount and RBAC must exist.
 */
export async function serviceAccountKubeconfig(
  kube: Kube,
  file: string,
  serviceAccount = 'provider-proxmox',
): Promise<string> {
  const tr = await kok(kube, 'POST', `/api/v1/namespaces/${SYSTEM_NS}/serviceaccounts/${serviceAccount}/token`, {
    body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: { expirationSeconds: 3600 } },
  });
  const token = tr.status.token as string;
  assert.ok(token, 'TokenRequest returned no token');
  writeFileSync(
    file,
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [
        {
          name: 'harness',
          cluster: { server: kube.url, 'certificate-authority-data': Buffer.from(kube.caPem).toString('base64') },
        },
      ],
      users: [{ name: 'provider-proxmox', user: { token } }],
      contexts: [{ name: 'provider-proxmox', context: { cluster: 'harness', user: 'provider-proxmox' } }],
      'current-context': 'provider-proxmox',
    }),
  );
  return file;
}

/** The namespace, ServiceAccount and RBAC of deploy/, created for real (no Deployment: nothing runs pods here). */
export async function installRbac(kube: Kube): Promise<void> {
  for (const o of installManifests()) if (o.kind !== 'Deployment') await create(kube, o, { existsOk: true });
}

/**
 * Poll `fn` until it returns a truthy value (returned); errors and falsy values retry. On timeout
 * the error names `what` and the last value or error.
 */
export async function waitFor<T>(
  what: string,
  fn: () => Promise<T | undefined | false | null> | T | undefined | false | null,
  timeoutMs = 60_000,
  intervalMs = 200,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
      last = v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) {
      throw new Error(
        `${what}: not true after ${timeoutMs} ms (last: ${last instanceof Error ? last.message : JSON.stringify(last)?.slice(0, 2000)})`,
      );
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

export function condition(
  o: Obj | undefined,
  type: string,
): { status: string; reason: string; message?: string } | undefined {
  return o?.status?.conditions?.find((c: { type: string }) => c.type === type);
}

export function isReady(o: Obj | undefined): boolean {
  return condition(o, 'Ready')?.status === 'True' && condition(o, 'Synced')?.status === 'True';
}

/** One line per resource that is not Ready+Synced yet (for failure messages). */
export function notReady(objs: Obj[]): string[] {
  return objs
    .filter((o) => !isReady(o))
    .map((o) => {
      const r = condition(o, 'Ready');
      const s = condition(o, 'Synced');
      return `${o.metadata.name}: Ready=${r?.status}/${r?.reason} Synced=${s?.status}/${s?.reason} ${s?.message ?? ''}`;
    });
}

/** Wait until every ProxmoxVM in `namespace` (or the named ones) is Ready and Synced. */
export async function waitAllReady(
  kube: Kube,
  namespace: string,
  names?: string[],
  timeoutMs = 120_000,
): Promise<Obj[]> {
  let last: string[] = [];
  try {
    return await waitFor(
      `ProxmoxVMs in ${namespace} Ready`,
      async () => {
        const items = (await list(kube, vmPath(namespace))).filter((o) => !names || names.includes(o.metadata.name));
        last = notReady(items);
        if (names && items.length !== names.length) return false;
        return last.length === 0 && items.length > 0 ? items : false;
      },
      timeoutMs,
      500,
    );
  } catch (e) {
    throw new Error(`${(e as Error).message}\nnot ready:\n${last.join('\n')}`);
  }
}

/** A free TCP port on 127.0.0.1. */
export function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.once('error', fail);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      const port = typeof a === 'object' && a ? a.port : 0;
      s.close(() => ok(port));
    });
  });
}

/** GET on a local health/metrics port. */
export async function httpGet(port: number, path: string): Promise<{ status: number; text: string }> {
  const res = await fetch(`http://127.0.0.1:${port}${path}`);
  return { status: res.status, text: await res.text() };
}

/** The value of a Prometheus sample (summed over every series matching the labels). */
export function metric(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  let found = false;
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!m || m[1] !== name) continue;
    const ls = Object.fromEntries([...(m[2] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => ls[k] === v)) {
      sum += Number(m[3]);
      found = true;
    }
  }
  return found ? sum : Number.NaN;
}

// ---- the simulator ----

export interface SimVm {
  site: string;
  vmid: number;
  node: string;
  name?: string;
  uid?: string;
  template: boolean;
  status: string;
  config: Record<string, string>;
}

/** Every VM of every simulated site, with the resource uid of its ownership marker. */
export function simVms(sim: Simulator): SimVm[] {
  const out: SimVm[] = [];
  for (const c of sim.clusters) {
    for (const vm of c.state.vms.values()) {
      const uid = markerUid(vm.config.description);
      out.push({
        site: c.name,
        vmid: vm.vmid,
        node: vm.node,
        ...(vm.config.name ? { name: vm.config.name } : {}),
        ...(uid ? { uid } : {}),
        template: vm.config.template === '1',
        status: vm.status,
        config: { ...vm.config },
      });
    }
  }
  return out;
}

/**
 * How many `qmcreate` tasks made (or are making) a VM per `site/vmid` since that VMID's last
 * `qmdestroy` (Proxmox hands a freed VMID out again). A create task that failed made nothing
 * (qemu-server `src/PVE/API2/Qemu.pm` create_vm: vdisk_free of what it allocated, then the config
 * file unlinked, ~1544-1606), so the create sent again at
 * the same VMID is not a second VM: only running and successful ones count. The VMs here are
 * imported, never cloned.
 */
export function createTasks(sim: Simulator): Map<string, number> {
  const out = new Map<string, number>();
  for (const c of sim.clusters) {
    // The simulator keeps every task, in the order they started.
    for (const t of c.state.tasks.values()) {
      const k = `${c.name}/${t.id}`;
      if (t.type === 'qmdestroy') out.delete(k);
      else if (t.type === 'qmcreate' && (t.status === 'running' || /^(OK|WARNINGS: \d+)$/.test(t.exitstatus ?? '')))
        out.set(k, (out.get(k) ?? 0) + 1);
    }
  }
  return out;
}

/**
 * The invariants every rollout here must keep: for each resource, exactly one VM carries its
 * marker, at the VMID of its external name; each VMID was created by exactly one create task.
 */
export function assertOneVmPerResource(sim: Simulator, objs: Obj[]): void {
  const vms = simVms(sim);
  for (const o of objs) {
    const mine = vms.filter((v) => v.uid === o.metadata.uid);
    assert.equal(
      mine.length,
      1,
      `exactly one VM for ${o.metadata.namespace}/${o.metadata.name} (uid ${o.metadata.uid}): ${JSON.stringify(mine.map((v) => `${v.site}/${v.vmid}`))}`,
    );
    assert.equal(String(mine[0]!.vmid), o.metadata.annotations?.['crossplane.io/external-name']);
  }
  const tasks = createTasks(sim);
  for (const [k, n] of tasks) assert.equal(n, 1, `VM ${k} was created by ${n} tasks`);
}

// ---- the controller as a child process ----

export interface ChildController {
  child: ChildProcess;
  healthPort: number;
  metricsPort: number;
  logFile: string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Lines of its JSON log so far. */
  log(): string;
  kill(signal?: NodeJS.Signals): Promise<void>;
}

/**
 * The command line of `provider-proxmox controller` as the tests and bench/kube-scale.ts run it:
 * `nodeFlags` for Node, then the controller's flags and `extra`.
 */
export function controllerArgv(o: {
  kubeconfig: string;
  healthPort: number;
  metricsPort: number;
  nodeFlags?: string[];
  extra?: string[];
}): string[] {
  return [
    ...(o.nodeFlags ?? CONTROLLER_NODE_FLAGS),
    join(ROOT, 'src/cli/main.ts'),
    'controller',
    '--kubeconfig',
    o.kubeconfig,
    '--namespace',
    SYSTEM_NS,
    '--health-port',
    String(o.healthPort),
    '--metrics-port',
    String(o.metricsPort),
    '--orphan-scan',
    '0',
    '--task-poll',
    '50ms',
    ...(o.extra ?? []),
  ];
}

/** `provider-proxmox controller` in its own process. */
export async function spawnController(
  kubeconfig: string,
  logFile: string,
  extra: string[] = [],
): Promise<ChildController> {
  const healthPort = await freePort();
  const metricsPort = await freePort();
  const child = spawn(NODE, controllerArgv({ kubeconfig, healthPort, metricsPort, extra }), {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, LOG_LEVEL: 'debug' },
  });
  const out = createWriteStream(logFile, { flags: 'a' });
  child.stdout!.pipe(out, { end: false });
  child.stderr!.pipe(out, { end: false });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((ok) =>
    child.once('exit', (code, signal) => ok({ code, signal })),
  );
  const c: ChildController = {
    child,
    healthPort,
    metricsPort,
    logFile,
    exited,
    log: () => readFileSync(logFile, 'utf8'),
    kill: async (signal = 'SIGKILL') => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      await exited;
    },
  };
  liveChildren.add(c);
  void exited.then(() => liveChildren.delete(c));
  await waitFor(
    'controller /readyz',
    async () => {
      if (child.exitCode !== null) throw new Error(`controller exited (${child.exitCode}): ${c.log().slice(-2000)}`);
      return (await httpGet(healthPort, '/readyz')).status === 200;
    },
    30_000,
  );
  return c;
}

const liveChildren = new Set<ChildController>();
process.once('exit', () => {
  for (const c of liveChildren) c.child.kill('SIGKILL');
});

/** Stop every child controller still running (SIGKILL; they hold nothing worth a clean stop). */
export async function killAllControllers(): Promise<void> {
  await Promise.all([...liveChildren].map((c) => c.kill('SIGKILL')));
}
