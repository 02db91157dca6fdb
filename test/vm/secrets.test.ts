/**
 * Cloud-init values from Secret references: the password and SSH keys reach Proxmox, never a
 * condition, an event or the status; a missing Secret is a clear condition and creates nothing.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { getCondition } from '../../src/engine/resource.ts';
import { LocalRuntime } from '../../src/local/runtime.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { NODE1, SITE1, simConfig, startSim, TEMPLATE, vm } from './harness.ts';

const PASSWORD = 'pw-secret-7f3a9c';
const KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAISecretKeyFromASecret ops@example';

async function until<T>(probe: () => T | undefined, what: string, ms = 30_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = probe();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('cloud-init Secret references', () => {
  let sim: Simulator;
  before(async () => {
    sim = await startSim();
  });
  after(() => sim.close());

  for (const source of ['import', 'template'] as const) {
    it(`sets the password and the SSH keys from Secrets (${source})`, async () => {
      const secrets = new Map([['default/vm-creds', { password: PASSWORD, keys: `${KEY}\n` }]]);
      const rt = new LocalRuntime({
        config: simConfig(sim),
        secrets,
        taskPollMs: 20,
        agentPollMs: 50,
        backoff: { baseMs: 20, capMs: 200 },
      });
      const name = `sec-${source}`;
      rt.applyManifests([
        vm(name, {
          ...(source === 'template' ? { image: undefined, template: { name: TEMPLATE } } : {}),
          cloudInit: {
            user: 'ops',
            passwordSecretRef: { name: 'vm-creds', key: 'password' },
            sshKeysSecretRef: { name: 'vm-creds', key: 'keys' },
          },
        }),
      ]);
      const res = await rt.run({ keys: [`default/${name}`], until: 'ready', timeoutMs: 60_000, tickMs: 20 });
      const r = rt.store.getSync(`default/${name}`)!;
      assert.ok(res.ok, JSON.stringify(r.status));
      const vmid = Number(r.metadata.annotations?.['crossplane.io/external-name']);
      const conf = sim.cluster(SITE1).state.vms.get(vmid)!.config;
      assert.equal(sim.cluster(SITE1).state.vms.get(vmid)!.node, NODE1);
      assert.ok(conf.cipassword, 'a password is set');
      assert.notEqual(conf.cipassword, PASSWORD, 'stored hashed, like qemu-server does');
      assert.ok(decodeURIComponent(conf.sshkeys ?? '').includes(KEY));
      assert.equal(conf.ciuser, 'ops');
      // The secret appears nowhere a user or a log reads.
      const visible = JSON.stringify([r.status, rt.store.events]);
      assert.ok(!visible.includes(PASSWORD));
      await rt.close();
    });
  }

  it('a missing Secret is a SecretNotFound condition and nothing is created', async () => {
    const rt = new LocalRuntime({ config: simConfig(sim), taskPollMs: 20, backoff: { baseMs: 20, capMs: 200 } });
    const before = sim.cluster(SITE1).state.vms.size;
    rt.applyManifests([vm('sec-missing', { cloudInit: { passwordSecretRef: { name: 'nope', key: 'password' } } })]);
    await rt.controller.start();
    const cond = await until(() => {
      const c = getCondition(rt.store.getSync('default/sec-missing')!, 'Synced');
      return c?.reason === 'SecretNotFound' ? c : undefined;
    }, 'SecretNotFound');
    await rt.controller.stop();
    assert.match(cond.message ?? '', /cloudInit\.passwordSecretRef: Secret nope key password/);
    assert.equal(sim.cluster(SITE1).state.vms.size, before);
    await rt.close();
  });
});
