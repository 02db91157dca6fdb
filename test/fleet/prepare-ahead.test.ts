/**
 * A phased rollout prepares its next phase while the phase before it boots: the next phase's
 * cloud-init snippets go up ahead of its creates (src/workspace/phases.ts phaseToPrepare,
 * LocalRuntime.prepare, src/vm/snippets.ts prepareSnippet), so that the path from one phase's
 * last Ready to the next one's first create holds no SFTP round trips. What is prepared: which
 * phase, and when (never while the phase before still creates, has a failure or a member not
 * started); that a prepared snippet is the file the create would write, which its create then
 * does not write again (unless it was removed meanwhile); and that preparing creates, reserves and
 * changes nothing else.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ProxmoxVM } from '../../src/api/proxmoxvm.ts';
import { planTarget } from '../../src/local/setup.ts';
import { stepContext } from '../../src/vm/context.ts';
import type { SiteContext } from '../../src/vm/site-cache.ts';
import { prepareSnippet } from '../../src/vm/snippets.ts';
import { phaseToPrepare, type ResourceState, type RolloutPlan } from '../../src/workspace/phases.ts';
import { localRuntimeWorld } from '../helpers/local-runtime.ts';
import { raw, waitTask } from '../helpers/sim.ts';
import { NODE1, SITE1, vm } from '../vm/harness.ts';

/** userData with packages: more than PVE's cloud-init fields carry, so it needs a snippet. */
const USER_DATA = '#cloud-config\npackages:\n  - jq\n';

const plan = (...phases: string[][]): RolloutPlan => ({
  phases: phases.map((members, i) => ({ name: String(i + 1), members })),
  dependsOn: new Map(),
});

describe('phaseToPrepare: which resources a rollout prepares ahead', () => {
  const states = (m: Record<string, ResourceState>) => (k: string) => m[k] ?? 'absent';
  const booting =
    (...keys: string[]) =>
    (k: string) =>
      keys.includes(k);
  const p = plan(['a1', 'a2'], ['b1', 'b2'], ['c1']);

  it('the next phase, once every member of the current one is Ready or booting', () => {
    const s = states({ a1: 'ready', a2: 'progressing' });
    assert.deepEqual(phaseToPrepare(p, s, booting('a2')), ['b1', 'b2']);
    assert.deepEqual(phaseToPrepare(p, s, booting()), [], 'a2 still creates: not yet');
  });

  it('only its members not started, and only the phase right after the current one', () => {
    const s = states({ a1: 'ready', a2: 'ready', b1: 'progressing', b2: 'ready' });
    assert.deepEqual(phaseToPrepare(p, s, booting('b1')), ['c1'], 'phase 2 is the current one: phase 3');
    const started = states({ a1: 'ready', a2: 'progressing', b1: 'progressing' });
    assert.deepEqual(phaseToPrepare(p, started, booting('a2')), ['b2'], 'b1 (started by depends-on) is not prepared');
    assert.deepEqual(phaseToPrepare(p, states({ a1: 'ready', a2: 'ready' }), booting()), []);
  });

  it('nothing while the current phase has a member failed or not started, or after the last phase', () => {
    assert.deepEqual(phaseToPrepare(p, states({ a1: 'failed', a2: 'progressing' }), booting('a2')), []);
    assert.deepEqual(phaseToPrepare(p, states({ a2: 'progressing' }), booting('a2')), []);
    const last = states({ a1: 'ready', a2: 'ready', b1: 'ready', b2: 'ready', c1: 'progressing' });
    assert.deepEqual(phaseToPrepare(p, last, booting('c1')), []);
    assert.deepEqual(phaseToPrepare(plan(['x']), states({ x: 'progressing' }), booting('x')), []);
  });
});

describe('LocalRuntime.prepare: the snippets of resources not started yet', () => {
  const world = localRuntimeWorld('pp-prepare-');
  const runtime = world.runtime;
  const local = () => world.sim.cluster(SITE1).state.storage(NODE1, 'local')!;
  /** The `local` storage's snippets of resource `name` (volume names, relative to the storage). */
  const snippetsOf = (name: string) =>
    [...local().volumes.keys()].filter((v) => v.startsWith(`snippets/provider-proxmox-${name}-`));
  const vmsNamed = (name: string) =>
    [...world.sim.cluster(SITE1).state.vms.values()].filter((v) => v.config.name === name);

  it('uploads the snippet and nothing else; the create finds it written and does not write it again', async () => {
    const rt = runtime('prepare.db');
    const manifest: ProxmoxVM = vm('prep-b1', { node: NODE1, memory: '256Mi', disk: '4Gi', userData: USER_DATA });
    manifest.metadata.namespace = undefined;
    try {
      await rt.prepare([planTarget(undefined, manifest)]);
      const [volid, ...more] = snippetsOf('prep-b1');
      assert.ok(volid, 'the snippet was uploaded');
      assert.deepEqual(more, []);
      assert.deepEqual(vmsNamed('prep-b1'), [], 'no VM');
      assert.equal(rt.store.getSync('default/prep-b1'), undefined, 'nothing stored, no VMID reserved');
      const uploaded = local().volumes.get(volid);

      // A second prepare (a later check) writes nothing either.
      await rt.prepare([planTarget(undefined, manifest)]);
      assert.equal(local().volumes.get(volid), uploaded);

      rt.applyManifests([manifest]);
      const res = await rt.run({ keys: ['default/prep-b1'], until: 'ready', timeoutMs: 60_000 });
      assert.deepEqual(res, { ok: true, timedOut: false });
      const made = vmsNamed('prep-b1');
      assert.equal(made.length, 1);
      assert.equal(made[0]!.config.cicustom, `user=local:${volid}`, 'the VM names the prepared file');
      // A write is a temporary file renamed into place: a new volume. The same one: not written again.
      assert.equal(local().volumes.get(volid), uploaded, 'the create did not upload it again');
      assert.deepEqual(snippetsOf('prep-b1'), [volid]);
    } finally {
      await rt.close();
    }
  });

  it('a prepared snippet removed before the create (another state file deleting a namesake) is written again', async () => {
    const rt = runtime('removed.db');
    const manifest = vm('prep-gone', { node: NODE1, memory: '256Mi', disk: '4Gi', userData: USER_DATA });
    try {
      await rt.prepare([planTarget(undefined, manifest)]);
      const [volid] = snippetsOf('prep-gone');
      assert.ok(volid);
      const del = await raw(
        world.sim.cluster(SITE1).url,
        'DELETE',
        `/nodes/${NODE1}/storage/local/content/${encodeURIComponent(`local:${volid}`)}`,
      );
      assert.equal(del.status, 200, del.text);
      const upid = (del.json as { data: string }).data;
      assert.equal((await waitTask(world.sim.cluster(SITE1).url, NODE1, upid)).exitstatus, 'OK');
      assert.deepEqual(snippetsOf('prep-gone'), []);
      rt.applyManifests([manifest]);
      const res = await rt.run({ keys: ['default/prep-gone'], until: 'ready', timeoutMs: 60_000 });
      assert.deepEqual(res, { ok: true, timedOut: false });
      assert.deepEqual(snippetsOf('prep-gone'), [volid], 'the create wrote it again');
      assert.equal(vmsNamed('prep-gone')[0]?.config.cicustom, `user=local:${volid}`);
    } finally {
      await rt.close();
    }
  });

  it('two writes of one snippet at once (its create and its preparing ahead) make one write, which serves both', async () => {
    const rt = runtime('twice.db');
    const manifest = vm('prep-twice', { node: NODE1, memory: '256Mi', disk: '4Gi', userData: USER_DATA });
    // Every snippet the local storage gets under its name (a write is a temporary file renamed into place).
    const volumes = local().volumes;
    const added: string[] = [];
    const set = volumes.set.bind(volumes);
    volumes.set = (k, v) => {
      if (k.startsWith('snippets/provider-proxmox-prep-twice-') && k.endsWith('.yaml')) added.push(k);
      return set(k, v);
    };
    try {
      // Two writers of the file at once, each of which must succeed (LocalRuntime.prepare would
      // swallow a failure): what the snippet's create and its preparing ahead are.
      const target = planTarget(undefined, manifest);
      const external = await rt.connector.connect(target);
      const site = (external as unknown as { site: SiteContext }).site;
      const ctx = stepContext(site, target, {}, undefined, { lookOnly: true });
      await Promise.all([prepareSnippet(ctx, target, NODE1), prepareSnippet(ctx, target, NODE1)]);
      assert.equal(added.length, 1, `one write: ${added.join(', ')}`);
      assert.deepEqual(snippetsOf('prep-twice'), added);
    } finally {
      volumes.set = set;
      await rt.close();
    }
  });

  it('a target with no pinned node, or on a node the site lacks, is left to its create, without an error', async () => {
    const rt = runtime('no-node.db');
    try {
      // No pinned node: where it goes is decided at its create, so nothing is prepared.
      const unpinned = vm('prep-unpinned', { memory: '256Mi', disk: '4Gi', userData: USER_DATA });
      delete unpinned.spec.forProvider.node;
      await rt.prepare([planTarget(undefined, unpinned)]);
      assert.deepEqual(snippetsOf('prep-unpinned'), []);
      // A node that is not the site's: the failure is the create's to meet, not prepare's.
      await rt.prepare([planTarget(undefined, vm('prep-nowhere', { node: 'no-such-node', userData: USER_DATA }))]);
    } finally {
      await rt.close();
    }
  });
});
