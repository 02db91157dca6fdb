/**
 * A ProxmoxTemplate's VM between its create and its conversion carries this installation's marker
 * (naming the ProxmoxTemplate, not a ProxmoxVM of the state file) and is stopped: exactly what
 * `gc --include-unknown --delete` deletes. It is tagged `provider-proxmox;template` and gc never
 * lists it; an untagged VM of the same kind still is.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { cliInstallation, installationOf } from '../../src/api/provider-config.ts';
import { parseProviderConfig } from '../../src/api/provider-config-load.ts';
import { gcCommand } from '../../src/fleet/commands.ts';
import type { GcFinding } from '../../src/fleet/gc.ts';
import { applyCommand } from '../../src/local/commands.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { providerConfigYaml } from '../../src/sim/provider-config.ts';
import { capture } from '../helpers/capture.ts';
import { raw, startTestSim, waitTask } from '../helpers/sim.ts';

const NODE = 'ml110-01';

describe('gc and a template being built', () => {
  let sim: Simulator;
  let dir: string;
  before(async () => {
    sim = await startTestSim();
    dir = mkdtempSync(join(tmpdir(), 'pp-gc-tpl-'));
  });
  after(async () => {
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('never lists a template VM before its conversion; lists the same VM without the tag', async () => {
    const cfgFile = join(dir, 'pc.yaml');
    writeFileSync(cfgFile, providerConfigYaml(sim));
    const loaded = parseProviderConfig(readFileSync(cfgFile, 'utf8'), cfgFile);
    const installation = installationOf(loaded.config, cliInstallation);
    const state = join(dir, 'state.json');
    const m = join(dir, 'vm.yaml');
    writeFileSync(
      m,
      'apiVersion: proxmox.sankofa.io/v1alpha1\nkind: ProxmoxVM\nmetadata:\n  name: keeper\nspec:\n  forProvider:\n    site: site-1\n    node: ml110-01\n    cpu: 1\n    memory: 512Mi\n    template: { vmid: 9000 }\n',
    );
    const applied = capture();
    const code = await applyCommand({
      files: [m],
      loadedConfig: loaded,
      state,
      taskPollMs: 10,
      agentPollMs: 10,
      quiet: true,
      out: applied.out,
      err: applied.out,
      timeoutMs: 60_000,
    });
    assert.equal(code, 0, applied.text());
    const c = sim.cluster('site-1');
    // Two stopped VMs marked by this installation for resources the state file does not hold.
    for (const [vmid, tags] of [
      [801, 'provider-proxmox;template'],
      [802, 'provider-proxmox'],
    ] as const) {
      const marker = `provider-proxmox.owner: default/ubuntu-tpl uid=0b0e2c4a-1111-4a6e-9d2f-0000000008${vmid % 100} vmid=${vmid} installation=${installation}`;
      const r = await raw(c.url, 'POST', `/nodes/${NODE}/qemu`, {
        form: { vmid: String(vmid), name: `ubuntu-tpl-${vmid}`, description: marker, tags, memory: '512' },
      });
      assert.equal(r.status, 200, r.text);
      await waitTask(c.url, NODE, (r.json as { data: string }).data);
    }
    const out = capture();
    const gc = await gcCommand({
      config: cfgFile,
      state,
      includeUnknown: true,
      output: 'json',
      out: out.out,
      now: () => sim.clock.now(),
    });
    const found = JSON.parse(out.text()) as GcFinding[];
    assert.deepEqual(
      found.map((f) => f.vmid),
      [802],
      'the untagged one is listed, the template being built is not',
    );
    assert.equal(gc, 1);
  });
});
