/**
 * The Kubernetes client's behaviour at scale, against a real kube-apiserver (harness.ts):
 * - the client-side rate limit (client-go's QPS/burst): a burst beyond the bucket waits, in order,
 *   an aborted waiter is never sent, and watches pass while the bucket is empty. The bucket runs on
 *   a manual clock (manual-clock.ts), so what is asserted is order and count, never wall time;
 * - status writes that change nothing are not sent (KubeStore over an informer on ProxmoxVMs);
 * - a token file rotated (the old token revoked) is picked up by the informer's next watch, which
 *   resumes where it was without a list.
 * Run with `npm run test:kube`.
 */
import assert from 'node:assert/strict';
import { renameSync, rmSync, writeFileSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { ProxmoxVM } from '../../src/api/proxmoxvm.ts';
import { KubeApi, loadKubeConfig } from '../../src/kube/api.ts';
import { Informer, type KubeObject } from '../../src/kube/informer.ts';
import { TokenBucket } from '../../src/kube/ratelimit.ts';
import { EventRecorder, KubeStore } from '../../src/kube/store.ts';
import { type Kube, startKube } from './harness.ts';
import { ManualClock } from './manual-clock.ts';
import { API, applyCrds, create, del, get, kok, kreq, type Obj, vmPath, waitFor } from './support.ts';

const NS = 'client-scale';
const CONFIGMAPS = `/api/v1/namespaces/${NS}/configmaps`;

describe('Kubernetes client at scale (real kube-apiserver)', () => {
  let kube: Kube;
  let dir: string;

  before(async () => {
    kube = await startKube();
    dir = await mkdtemp(join(tmpdir(), 'kube-client-scale-'));
    await create(kube, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
    for (let i = 0; i < 6; i++)
      await create(kube, { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: `cm-${i}`, namespace: NS } });
    await applyCrds(kube, (plural) => plural === 'proxmoxvms');
  });

  after(async () => {
    await kube?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('rate limit: a burst beyond the bucket waits in order; an aborted waiter is never sent; watches pass', async () => {
    const clock = new ManualClock();
    // 1 request a second, 3 at once.
    const api = new KubeApi(loadKubeConfig(kube.kubeconfigPath), { limiter: new TokenBucket(1, 3, clock) });
    const sent: string[] = [];
    api.onRequest = (verb, status) => sent.push(`${verb} ${status}`);
    const done: number[] = [];
    const aborted = new AbortController();
    const get = (i: number, signal?: AbortSignal) =>
      api
        .request('GET', `${CONFIGMAPS}/cm-${i}`, signal ? { signal } : {})
        .then(() => done.push(i))
        .catch((e: Error) => done.push(-i) && e);
    const stopWatch = new AbortController();
    let watching: Promise<void> | undefined;
    try {
      const all = [0, 1, 2, 3, 4, 5].map((i) => get(i, i === 4 ? aborted.signal : undefined));

      await waitFor('the burst answered', () => done.length === 3, 15_000, 5);
      assert.deepEqual([...done].sort(), [0, 1, 2], 'the bucket let 3 through at once');
      assert.equal(api.limiter.waiting, 3, 'the other 3 wait for a token');

      // A watch needs no token: it opens and delivers while every token is taken.
      const seen: string[] = [];
      watching = api.watch<KubeObject>(
        CONFIGMAPS,
        {},
        (e) => seen.push(`${e.type} ${e.object.metadata.name}`),
        stopWatch.signal,
      );
      await waitFor('the watch delivered the namespace', () => seen.length === 6, 15_000, 5);
      assert.equal(api.limiter.waiting, 3, 'still waiting');
      assert.deepEqual(sent.filter((s) => s.startsWith('GET')).length, 3);

      // One interval: exactly the next one in line goes.
      await clock.advance(1000);
      await waitFor('request 3 answered', () => done.length === 4, 15_000, 5);
      assert.equal(done[3], 3);
      // Request 4 gives up while it waits: it rejects and is never sent.
      aborted.abort(new Error('reconcile aborted'));
      await waitFor('request 4 rejected', () => done.includes(-4), 15_000, 5);
      await clock.advance(1000);
      await waitFor('request 5 answered', () => done.includes(5), 15_000, 5);
      await Promise.all(all);
      assert.deepEqual(done.slice(3), [3, -4, 5]);
      assert.equal(sent.filter((s) => s === 'GET 200').length, 5, 'the aborted request never reached the apiserver');
      assert.equal(api.limiter.delayed, 3);
    } finally {
      aborted.abort();
      stopWatch.abort();
      await watching?.catch(() => {});
      api.close();
    }
  });

  it('a status write equal to the cached status is not sent; any change, a lastTransitionTime too, is', async () => {
    const ns = 'status-writes';
    await create(kube, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } });
    const created = await create(kube, {
      apiVersion: API,
      kind: 'ProxmoxVM',
      metadata: { name: 'steady', namespace: ns },
      spec: {
        forProvider: {
          site: 'site-1',
          node: 'pve1',
          name: 'steady',
          cpu: 1,
          memory: '1Gi',
          disk: '10Gi',
          storage: 'local-lvm',
          network: 'vmbr0',
        },
        providerConfigRef: { name: 'default' },
      },
    });
    const api = new KubeApi(loadKubeConfig(kube.kubeconfigPath));
    const puts: string[] = [];
    api.onRequest = (verb, status) => {
      if (verb === 'PUT') puts.push(String(status));
    };
    const informer = new Informer<ProxmoxVM>(api, vmPath(ns).replace(`/namespaces/${ns}`, ''));
    const store = new KubeStore<ProxmoxVM>(
      api,
      informer,
      { group: 'proxmox.sankofa.io', version: 'v1alpha1', plural: 'proxmoxvms', kind: 'ProxmoxVM' },
      new EventRecorder(api),
    );
    await informer.start();
    const key = `${ns}/steady`;
    const at = '2026-01-01T00:00:00Z';
    const status = {
      observedGeneration: created.metadata.generation,
      atProvider: { step: 'Ready', state: 'running', vmId: 4242, node: 'pve1' },
      conditions: [
        { type: 'Ready', status: 'True', reason: 'Available', lastTransitionTime: at },
        { type: 'Synced', status: 'True', reason: 'ReconcileSuccess', lastTransitionTime: at },
      ],
    };
    const first = (await store.get(key))!;
    first.status = structuredClone(status) as never;
    const written = await store.updateStatus(first);
    assert.deepEqual(store.statusWrites, { skipped: 0, unchanged: 0, changed: 1 });
    await waitFor(
      'the informer saw the write',
      () => informer.cache.get(key)?.metadata.resourceVersion === written.metadata.resourceVersion,
      15_000,
      10,
    );

    // The same status built in another key order (as the engine builds it; the apiserver gives
    // keys back in its own order): deep-equal, so not sent.
    const again = (await store.get(key))!;
    again.status = {
      conditions: status.conditions.map((c) => ({
        lastTransitionTime: c.lastTransitionTime,
        reason: c.reason,
        status: c.status,
        type: c.type,
      })),
      atProvider: { node: 'pve1', vmId: 4242, state: 'running', step: 'Ready' },
      observedGeneration: status.observedGeneration,
    } as never;
    const skipped = await store.updateStatus(again);
    assert.equal(
      skipped.metadata.resourceVersion,
      again.metadata.resourceVersion,
      'the caller keeps the version it read',
    );
    assert.deepEqual(store.statusWrites, { skipped: 1, unchanged: 0, changed: 1 });
    assert.deepEqual(puts, ['200'], 'one PUT only');
    assert.equal((await get(kube, `${vmPath(ns)}/steady`))!.metadata.resourceVersion, written.metadata.resourceVersion);

    // A condition whose status flips back and forth keeps nothing but its lastTransitionTime:
    // that alone is a change, and is written.
    const moved = (await store.get(key))!;
    moved.status!.conditions![0]!.lastTransitionTime = '2026-01-02T00:00:00Z';
    await store.updateStatus(moved);
    assert.deepEqual(store.statusWrites, { skipped: 1, unchanged: 0, changed: 2 });
    assert.deepEqual(puts, ['200', '200']);

    // A cache behind the apiserver (here: made so by hand) sends the write; the apiserver finds
    // nothing to change and keeps the resourceVersion, which is counted apart.
    const current = (await get(kube, `${vmPath(ns)}/steady`))! as Obj;
    const stale = structuredClone(current) as unknown as ProxmoxVM;
    stale.status!.atProvider = { ...stale.status!.atProvider, state: 'stopped' };
    informer.cache.set(key, stale);
    const same = structuredClone(current) as unknown as ProxmoxVM;
    const res = await store.updateStatus(same);
    assert.equal(res.metadata.resourceVersion, current.metadata.resourceVersion);
    assert.deepEqual(store.statusWrites, { skipped: 1, unchanged: 1, changed: 2 });
    await informer.stop();
    api.close();
  });

  it('a rotated token file (old token revoked) is picked up by the next watch, which resumes without a list', async () => {
    const sa = 'client-watcher';
    await create(kube, { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: sa, namespace: NS } });
    await create(kube, {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'Role',
      metadata: { name: sa, namespace: NS },
      rules: [{ apiGroups: [''], resources: ['configmaps'], verbs: ['list', 'watch'] }],
    });
    await create(kube, {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata: { name: sa, namespace: NS },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: sa },
      subjects: [{ kind: 'ServiceAccount', name: sa, namespace: NS }],
    });
    /** A token bound to a new Secret: deleting the Secret revokes it. */
    const boundToken = async (name: string) => {
      const secret = await create(kube, { apiVersion: 'v1', kind: 'Secret', metadata: { name, namespace: NS } });
      const tr = await kok(kube, 'POST', `/api/v1/namespaces/${NS}/serviceaccounts/${sa}/token`, {
        body: {
          apiVersion: 'authentication.k8s.io/v1',
          kind: 'TokenRequest',
          spec: {
            expirationSeconds: 3600,
            boundObjectRef: { apiVersion: 'v1', kind: 'Secret', name, uid: secret.metadata.uid },
          },
        },
      });
      return tr.status.token as string;
    };
    const tokenA = await boundToken('watch-a');
    await waitFor(
      'RoleBinding in effect',
      async () => (await kreq({ ...kube, token: tokenA }, 'GET', CONFIGMAPS)).status === 200,
    );
    const tokenPath = join(dir, 'token');
    writeFileSync(tokenPath, tokenA);
    const kubeconfig = join(dir, 'watcher.kubeconfig');
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
        users: [{ name: sa, user: { tokenFile: tokenPath } }],
        contexts: [{ name: sa, context: { cluster: 'harness', user: sa } }],
        'current-context': sa,
      }),
    );
    const api = new KubeApi(loadKubeConfig(kubeconfig));
    const watchStatuses: number[] = [];
    api.onRequest = (verb, status) => {
      if (verb === 'WATCH') watchStatuses.push(status);
    };
    // The server ends each watch after 1 s, so the informer keeps opening new ones.
    const informer = new Informer<KubeObject>(api, CONFIGMAPS, { watchTimeoutSeconds: 1, backoffBaseMs: 50 });
    const added: string[] = [];
    informer.on((type, o) => type === 'ADDED' && added.push(o.metadata.name));
    await informer.start();
    await waitFor('a watch re-opened', () => informer.watches >= 2, 15_000, 20);

    const tokenB = await boundToken('watch-b');
    writeFileSync(`${tokenPath}.tmp`, tokenB);
    renameSync(`${tokenPath}.tmp`, tokenPath);
    await del(kube, `/api/v1/namespaces/${NS}/secrets/watch-a`);
    await waitFor(
      'token A refused',
      async () => (await kreq({ ...kube, token: tokenA }, 'GET', CONFIGMAPS)).status === 401,
      30_000,
      250,
    );
    // Within the file's 60 s re-read period the cached token A is refused once; the client drops
    // it, reads the file again and watches on with token B.
    await waitFor(
      'a watch refused, then one accepted',
      () => watchStatuses.lastIndexOf(200) > watchStatuses.indexOf(401) && watchStatuses.includes(401),
      30_000,
      20,
    );
    await create(kube, { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'after-rotation', namespace: NS } });
    await waitFor('the new object arrived', () => added.includes('after-rotation'), 15_000, 20);
    assert.equal(informer.lists, 1, 'no list: every watch resumed from the last version seen');
    assert.equal(added.filter((n) => n === 'cm-0').length, 1);
    await informer.stop();
    api.close();
  });
});
