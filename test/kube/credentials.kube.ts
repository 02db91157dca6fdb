/**
 * Kubernetes credentials are applied per request (src/kube/credentials.ts), against a real
 * kube-apiserver: a token file that is rotated, with the old token revoked, keeps working (the
 * in-cluster config and a kubeconfig `tokenFile`); an exec credential plugin is re-run when its
 * credential expires and when the server refuses it; and the shared keep-alive agent still carries
 * every request. Run with `npm run test:kube`.
 *
 * Revocation is real: each token is a TokenRequest token bound to a Secret, and the apiserver stops
 * accepting a bound token once its Secret is deleted (after its ~10 s authentication cache).
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { KubeApi, loadKubeConfig } from '../../src/kube/api.ts';
import { type Kube, startKube } from './harness.ts';
import { create, del, kok, kreq, NODE, waitFor } from './support.ts';

const NS = 'credentials';
const SA = 'rotator';
const CONFIGMAPS = `/api/v1/namespaces/${NS}/configmaps`;

/** A token of the test's ServiceAccount, bound to a new Secret `name` (deleting it revokes the token). */
async function boundToken(kube: Kube, name: string): Promise<string> {
  const secret = await create(kube, { apiVersion: 'v1', kind: 'Secret', metadata: { name, namespace: NS } });
  const tr = await kok(kube, 'POST', `/api/v1/namespaces/${NS}/serviceaccounts/${SA}/token`, {
    body: {
      apiVersion: 'authentication.k8s.io/v1',
      kind: 'TokenRequest',
      spec: {
        expirationSeconds: 3600,
        boundObjectRef: { apiVersion: 'v1', kind: 'Secret', name, uid: secret.metadata.uid },
      },
    },
  });
  assert.ok(tr.status.token, 'TokenRequest returned no token');
  return tr.status.token as string;
}

/** Delete the token's Secret and wait until the apiserver refuses the token (its auth cache expires). */
async function revoke(kube: Kube, name: string, token: string): Promise<void> {
  await del(kube, `/api/v1/namespaces/${NS}/secrets/${name}`);
  await waitFor(
    `token bound to ${name} refused`,
    async () => {
      const res = await kreq({ ...kube, token }, 'GET', CONFIGMAPS);
      return res.status === 401;
    },
    30_000,
    250,
  );
}

/** Replace a file at once, as the kubelet swaps a projected token (write aside, rename). */
function rotate(file: string, content: string): void {
  writeFileSync(`${file}.tmp`, content);
  renameSync(`${file}.tmp`, file);
}

async function listConfigMaps(api: KubeApi): Promise<number> {
  const l = await api.request<{ items: unknown[] }>('GET', CONFIGMAPS);
  return l.items.length;
}

describe('Kubernetes credentials per request (real kube-apiserver)', () => {
  let kube: Kube;
  let dir: string;
  let n = 0;
  const fresh = (prefix: string) => `${prefix}-${++n}`;

  before(async () => {
    kube = await startKube();
    dir = mkdtempSync(join(tmpdir(), 'kube-credentials-'));
    await create(kube, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
    await create(kube, { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: SA, namespace: NS } });
    // Not the `view` ClusterRole: its rules are aggregated by kube-controller-manager, which does not run here.
    await create(kube, {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'Role',
      metadata: { name: SA, namespace: NS },
      rules: [{ apiGroups: [''], resources: ['configmaps'], verbs: ['list'] }],
    });
    await create(kube, {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata: { name: SA, namespace: NS },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: SA },
      subjects: [{ kind: 'ServiceAccount', name: SA, namespace: NS }],
    });
    // The authorizer sees a new RoleBinding a moment after it was created.
    const probe = await boundToken(kube, 'rbac-probe');
    await waitFor(
      'RoleBinding in effect',
      async () => (await kreq({ ...kube, token: probe }, 'GET', CONFIGMAPS)).status === 200,
    );
  });

  after(async () => {
    await kube?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('in-cluster config: the service-account token file is rotated and the old token revoked -> requests keep working', async () => {
    // The layout of a pod: /var/run/secrets/kubernetes.io/serviceaccount/{token,ca.crt,namespace}.
    const root = join(dir, 'pod');
    const sa = join(root, 'var/run/secrets/kubernetes.io/serviceaccount');
    mkdirSync(sa, { recursive: true });
    writeFileSync(join(sa, 'ca.crt'), kube.caPem);
    writeFileSync(join(sa, 'namespace'), NS);
    const [a, b] = [fresh('in-cluster'), fresh('in-cluster')];
    const tokenA = await boundToken(kube, a);
    writeFileSync(join(sa, 'token'), tokenA);
    const url = new URL(kube.url);
    const env = { host: process.env.KUBERNETES_SERVICE_HOST, port: process.env.KUBERNETES_SERVICE_PORT };
    process.env.KUBERNETES_SERVICE_HOST = url.hostname;
    process.env.KUBERNETES_SERVICE_PORT = url.port;
    const kc = new KubeConfig();
    try {
      kc.loadFromCluster(root);
    } finally {
      for (const [k, v] of [
        ['KUBERNETES_SERVICE_HOST', env.host],
        ['KUBERNETES_SERVICE_PORT', env.port],
      ] as const) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
    const api = new KubeApi(kc);
    await listConfigMaps(api);
    const statuses: number[] = [];
    api.onRequest = (_verb, status) => statuses.push(status);
    rotate(join(sa, 'token'), await boundToken(kube, b));
    await revoke(kube, a, tokenA);
    // Within the token file's 60 s re-read period: the first request is refused (401), the cached
    // token is dropped and the request sent again with the file's new token.
    await listConfigMaps(api);
    await listConfigMaps(api);
    assert.deepEqual(statuses, [401, 200, 200]);
    api.close();
  });

  it('kubeconfig user with tokenFile (relative to the kubeconfig): rotated and revoked -> requests keep working', async () => {
    const [a, b] = [fresh('tokenfile'), fresh('tokenfile')];
    const tokenA = await boundToken(kube, a);
    const tokenPath = join(dir, 'sa-token');
    // A token file written by hand ends with a newline; it is not part of the token.
    writeFileSync(tokenPath, `${tokenA}\n`);
    const kubeconfig = join(dir, 'tokenfile.kubeconfig');
    writeFileSync(
      kubeconfig,
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'Config',
        clusters: [
          {
            name: 'harness',
            cluster: { server: kube.url, 'certificate-authority-data': Buffer.from(kube.caPem).toString('base64') },
          },
        ],
        users: [{ name: 'rotator', user: { tokenFile: 'sa-token' } }],
        contexts: [{ name: 'rotator', context: { cluster: 'harness', user: 'rotator' } }],
        'current-context': 'rotator',
      }),
    );
    const api = new KubeApi(loadKubeConfig(kubeconfig));
    await listConfigMaps(api);
    const statuses: number[] = [];
    api.onRequest = (_verb, status) => statuses.push(status);
    rotate(tokenPath, await boundToken(kube, b));
    await revoke(kube, a, tokenA);
    await listConfigMaps(api);
    await listConfigMaps(api);
    // One refused request (the old token), then the new token from then on.
    assert.deepEqual(statuses, [401, 200, 200]);
    api.close();
  });

  it('exec credential plugin: re-run when its credential expires, and when the server refuses it', async () => {
    const plugin = join(dir, 'exec-plugin.mjs');
    const tokenPath = join(dir, 'exec-token');
    const runs = join(dir, 'exec-runs');
    const ttl = join(dir, 'exec-ttl');
    // Prints an ExecCredential with the token in `tokenPath`, valid for `ttl` seconds; counts its runs.
    writeFileSync(
      plugin,
      [
        "import { appendFileSync, readFileSync } from 'node:fs';",
        'const [tokenPath, runs, ttl] = process.argv.slice(2);',
        "appendFileSync(runs, 'x');",
        "const seconds = Number(readFileSync(ttl, 'utf8'));",
        'const expirationTimestamp = new Date(Date.now() + seconds * 1000).toISOString();',
        "const token = readFileSync(tokenPath, 'utf8').trim();",
        "process.stdout.write(JSON.stringify({ apiVersion: 'client.authentication.k8s.io/v1', kind: 'ExecCredential', status: { token, expirationTimestamp } }));",
      ].join('\n'),
    );
    const runCount = () => {
      try {
        return readFileSync(runs, 'utf8').length;
      } catch {
        return 0;
      }
    };
    const [a, b] = [fresh('exec'), fresh('exec')];
    const tokenA = await boundToken(kube, a);
    writeFileSync(tokenPath, tokenA);
    writeFileSync(ttl, '2');
    const kubeconfig = join(dir, 'exec.kubeconfig');
    writeFileSync(
      kubeconfig,
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'Config',
        clusters: [
          {
            name: 'harness',
            cluster: { server: kube.url, 'certificate-authority-data': Buffer.from(kube.caPem).toString('base64') },
          },
        ],
        users: [
          {
            name: 'exec',
            user: {
              exec: {
                apiVersion: 'client.authentication.k8s.io/v1',
                command: NODE,
                args: [plugin, tokenPath, runs, ttl],
                interactiveMode: 'Never',
              },
            },
          },
        ],
        contexts: [{ name: 'exec', context: { cluster: 'harness', user: 'exec' } }],
        'current-context': 'exec',
      }),
    );
    const api = new KubeApi(loadKubeConfig(kubeconfig));
    // Concurrent first requests share one run of the plugin.
    await Promise.all([listConfigMaps(api), listConfigMaps(api), listConfigMaps(api)]);
    assert.equal(runCount(), 1, 'one plugin run for the first requests');
    await listConfigMaps(api);
    assert.equal(runCount(), 1, 'the credential is reused until it expires');
    await new Promise((r) => setTimeout(r, 2_300));
    await listConfigMaps(api);
    assert.equal(runCount(), 2, 'an expired credential runs the plugin again');

    // A long-lived credential, revoked early: the 401 runs the plugin again.
    writeFileSync(ttl, '3600');
    await new Promise((r) => setTimeout(r, 2_300));
    await listConfigMaps(api);
    assert.equal(runCount(), 3);
    rotate(tokenPath, await boundToken(kube, b));
    await revoke(kube, a, tokenA);
    await listConfigMaps(api);
    assert.equal(runCount(), 4, 'the refused credential was replaced by a new plugin run');
    await listConfigMaps(api);
    assert.equal(runCount(), 4);
    api.close();
  });

  it('static credentials that the server refuses are not retried (nothing could change)', async () => {
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [
        { name: 'h', server: kube.url, caData: Buffer.from(kube.caPem).toString('base64'), skipTLSVerify: false },
      ],
      users: [{ name: 'u', token: 'not-a-token' }],
      contexts: [{ name: 'c', cluster: 'h', user: 'u' }],
      currentContext: 'c',
    });
    const api = new KubeApi(kc);
    const statuses: number[] = [];
    api.onRequest = (_verb, status) => statuses.push(status);
    await assert.rejects(listConfigMaps(api), /401/);
    assert.deepEqual(statuses, [401]);
    api.close();
  });

  it('every request still goes through the one keep-alive agent', async () => {
    const api = new KubeApi(loadKubeConfig(kube.kubeconfigPath));
    for (let i = 0; i < 50; i++) await listConfigMaps(api);
    assert.equal(api.connections, 1, `50 sequential requests opened ${api.connections} connections`);
    api.close();
  });
});
