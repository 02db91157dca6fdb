/**
 * The shared SSH connection per node (src/proxmox/ssh-sessions.ts) against the simulator's sshd:
 * concurrent uses share one connection; a connection cut under it (sshd killed with its sessions)
 * is replaced on the next use, and a use that was on it when it went is tried once more on a new
 * one; a use's abort ends that use, not the connection; an idle connection is ended; close() ends
 * them all and refuses new uses.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { SshTarget } from '../../src/proxmox/ssh.ts';
import { SshSessions } from '../../src/proxmox/ssh-sessions.ts';
import type { SimCluster, Simulator } from '../../src/sim/index.ts';
import { startTestSim } from '../helpers/sim.ts';

const NODE = 'ml110-01';
const DIR = '/var/lib/vz/snippets';

describe('SshSessions', () => {
  let sim: Simulator;
  let site: SimCluster;
  let target: SshTarget;
  const accepted = () => site.sshServers.get(NODE)!.accepted;

  before(async () => {
    sim = await startTestSim();
    site = sim.cluster('site-1');
    const info = site.sshNode(NODE);
    target = {
      host: info.host,
      port: info.port,
      user: 'root',
      privateKey: sim.credentials.sshPrivateKey,
      hostKeys: [info.hostKeyFingerprint],
    };
  });
  after(async () => {
    await sim.close();
  });

  it('concurrent uses share one connection, and later ones reuse it', async () => {
    const sessions = new SshSessions();
    try {
      const start = accepted();
      await Promise.all(
        ['a', 'b', 'c', 'd'].map((n) =>
          sessions.use(target, async (files) => {
            await files.mkdirs(DIR);
            await files.write(`${DIR}/share-${n}.yaml`, `#cloud-config\n# ${n}\n`);
          }),
        ),
      );
      const names = await sessions.use(target, (files) => files.list(DIR));
      for (const n of ['a', 'b', 'c', 'd']) assert.ok(names.includes(`share-${n}.yaml`), names.join(', '));
      assert.equal(accepted() - start, 1);
      assert.equal(sessions.size, 1);
    } finally {
      sessions.close();
    }
  });

  it("a connection's first write into a directory that is there checks it with one stat; a missing one is made", async () => {
    const requests = () => Object.fromEntries(site.sshServers.get(NODE)!.sftpRequests);
    const first = new SshSessions();
    try {
      await first.use(target, (files) => files.mkdirs(DIR));
    } finally {
      first.close();
    }
    // A new connection (mkdirs is remembered per connection): the directory is there.
    const sessions = new SshSessions();
    try {
      const before = requests();
      await sessions.use(target, async (files) => {
        await files.mkdirs(DIR);
        await files.write(`${DIR}/one-stat.yaml`, '#cloud-config\n');
      });
      const after = requests();
      const delta = (op: string) => (after[op] ?? 0) - (before[op] ?? 0);
      assert.equal(delta('STAT') + delta('LSTAT'), 1, JSON.stringify({ before, after }));
      assert.equal(delta('MKDIR'), 0);
      // Nested and new: each missing level is made, from the top.
      const deep = `${DIR}/new-a/new-b`;
      await sessions.use(target, async (files) => {
        await files.mkdirs(deep);
        await files.write(`${deep}/x.yaml`, '#cloud-config\n');
      });
      assert.equal((requests().MKDIR ?? 0) - (after.MKDIR ?? 0), 2);
      assert.deepEqual(await sessions.use(target, (files) => files.list(deep)), ['x.yaml']);
    } finally {
      sessions.close();
    }
  });

  it('a connection cut under it is replaced: the next use connects anew', async () => {
    const sessions = new SshSessions();
    try {
      await sessions.use(target, (files) => files.list(DIR));
      const start = accepted();
      const fault = site.addFault({ kind: 'ssh-refused', node: NODE, dropSessions: true });
      await site.sshReady();
      site.removeFault(fault);
      await site.sshReady();
      // The cut may not have reached the client yet: the use on the gone connection is tried again.
      const names = await sessions.use(target, (files) => files.list(DIR));
      assert.ok(Array.isArray(names));
      assert.equal(accepted() - start, 1, 'one new connection');
    } finally {
      sessions.close();
    }
  });

  it('a use on a connection that goes while it runs is tried once more on a new one', async () => {
    const sessions = new SshSessions();
    try {
      await sessions.use(target, (files) => files.list(DIR));
      let tries = 0;
      const names = await sessions.use(target, async (files) => {
        tries++;
        if (tries === 1) {
          // sshd goes with its sessions while this use is under way.
          const fault = site.addFault({ kind: 'ssh-refused', node: NODE, dropSessions: true });
          await site.sshReady();
          site.removeFault(fault);
          await site.sshReady();
          return await new Promise<string[]>(() => {}); // never answered: the connection is gone
        }
        return files.list(DIR);
      });
      assert.equal(tries, 2);
      assert.ok(Array.isArray(names));
    } finally {
      sessions.close();
    }
  });

  it('a failure to connect is not retried, and not kept: sshd refusing gives ECONNREFUSED', async () => {
    const sessions = new SshSessions();
    const fault = site.addFault({ kind: 'ssh-refused', node: NODE, dropSessions: true });
    await site.sshReady();
    try {
      await assert.rejects(
        sessions.use(target, (files) => files.list(DIR)),
        (e: Error & { kind?: string }) => e.kind === 'refused' && /connection refused/.test(e.message),
      );
      assert.equal(sessions.size, 0);
    } finally {
      site.removeFault(fault);
      await site.sshReady();
      sessions.close();
    }
  });

  it("a use's abort ends that use; the connection serves the others", async () => {
    const sessions = new SshSessions();
    try {
      await sessions.use(target, (files) => files.list(DIR));
      const start = accepted();
      const ac = new AbortController();
      const stuck = sessions.use(target, () => new Promise<never>(() => {}), ac.signal);
      ac.abort(new Error('reconcile ended'));
      await assert.rejects(stuck, /reconcile ended/);
      assert.ok(Array.isArray(await sessions.use(target, (files) => files.list(DIR))));
      assert.equal(accepted() - start, 0);
    } finally {
      sessions.close();
    }
  });

  it('warm() connects ahead of a use, which then finds the connection made', async () => {
    const sessions = new SshSessions();
    try {
      const start = accepted();
      sessions.warm(target);
      sessions.warm(target);
      for (let i = 0; i < 200 && accepted() === start; i++) await new Promise((r) => setTimeout(r, 5));
      assert.equal(accepted() - start, 1, 'one connection for two warms');
      await sessions.use(target, (files) => files.list(DIR));
      assert.equal(accepted() - start, 1, 'the use took the warmed connection');
    } finally {
      sessions.close();
    }
  });

  it('an idle connection is ended; close() refuses new uses', async () => {
    const sessions = new SshSessions({ idleMs: 20 });
    await sessions.use(target, (files) => files.list(DIR));
    assert.equal(sessions.size, 1);
    for (let i = 0; i < 100 && sessions.size > 0; i++) await new Promise((r) => setTimeout(r, 10));
    assert.equal(sessions.size, 0, 'ended after being idle');
    sessions.close();
    await assert.rejects(
      sessions.use(target, (files) => files.list(DIR)),
      /stopping/,
    );
  });
});
