/**
 * `gc --snippets` against the in-process simulator: this installation's cloud-init snippet files
 * that no VM reads are listed, and deleted with `--delete --yes`; a file a VM's config or one of
 * its snapshots names is not, nor a file written less than an hour before the
 * scan, nor one whose name carries another installation's identity, nor an operator's own.
 *
 * The files are put where the provider's SFTP upload puts them (the storage's `snippets`
 * directory, as the simulator's SSH server records a written file); the VMs that read them are
 * made through the API with `cicustom`. gc runs on the simulator's clock.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parseProviderConfig } from '../../src/api/provider-config-load.ts';
import { gcCommand } from '../../src/fleet/commands.ts';
import type { SnippetFinding } from '../../src/fleet/gc-snippets.ts';
import { applyCommand } from '../../src/local/commands.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { providerConfigYaml } from '../../src/sim/provider-config.ts';
import { newFile, snippetVolume } from '../../src/sim/storage-files.ts';
import { snippetOwnerOf } from '../../src/vm/snippets.ts';
import { capture } from '../helpers/capture.ts';
import { raw, startTestSim, waitTask } from '../helpers/sim.ts';

const INSTALLATION = 'cli-default';
const LONG = 'inventory-reporting-service-primary-replica-01';
const NODE = 'ml110-01';

/** A snippet file name as the provider makes it for `namespace/name` of `installation`. */
const fileOf = (name: string, content: string, installation = INSTALLATION, namespace = 'default') =>
  `provider-proxmox-${snippetOwnerOf(installation, namespace, name)}-${content.padEnd(12, '0')}.yaml`;

describe('gc --snippets', () => {
  let sim: Simulator;
  let dir: string;
  let config: string;
  let state: string;
  const gc = (a: Omit<Parameters<typeof gcCommand>[0], 'now'>) => gcCommand({ ...a, now: () => sim.clock.now() });
  const files = () =>
    [...sim.cluster('site-1').state.storage(NODE, 'local')!.volumes.keys()]
      .filter((v) => v.startsWith('snippets/'))
      .map((v) => v.slice('snippets/'.length))
      .sort();

  /** A file in local:snippets/ of site-1, as an SFTP upload leaves it. */
  function put(name: string): string {
    const c = sim.cluster('site-1').state;
    const s = c.storage(NODE, 'local')!;
    const f = newFile(c);
    f.data = Buffer.from('#cloud-config\n');
    s.volumes.set(`snippets/${name}`, snippetVolume(c, s, name, f));
    return `local:snippets/${name}`;
  }

  /** A VM made through the API whose cicustom names `volid`. */
  async function reader(vmid: number, volid: string): Promise<void> {
    const c = sim.cluster('site-1');
    const res = await raw(c.url, 'POST', `/nodes/${NODE}/qemu`, {
      form: { vmid: String(vmid), name: `reader-${vmid}`, memory: '512', cicustom: `user=${volid}` },
    });
    assert.equal(res.status, 200, res.text);
    assert.equal((await waitTask(c.url, NODE, (res.json as { data: string }).data)).exitstatus, 'OK');
  }

  async function call(method: 'POST' | 'PUT', path: string, form: Record<string, string>): Promise<void> {
    const c = sim.cluster('site-1');
    const res = await raw(c.url, method, path, { form });
    assert.equal(res.status, 200, res.text);
    const upid = (res.json as { data: string | null }).data;
    if (upid) assert.equal((await waitTask(c.url, NODE, upid)).exitstatus, 'OK');
  }

  before(async () => {
    sim = await startTestSim();
    dir = mkdtempSync(join(tmpdir(), 'pp-gc-snippets-'));
    config = join(dir, 'providerconfig.yaml');
    writeFileSync(config, providerConfigYaml(sim));
    // The state file: `web`, and one whose name is cut to 40 characters in its files' names.
    const manifest = join(dir, 'web.yaml');
    const doc = (name: string) =>
      `apiVersion: proxmox.sankofa.io/v1alpha1\nkind: ProxmoxVM\nmetadata:\n  name: ${name}\nspec:\n  forProvider:\n    site: site-1\n    node: ml110-01\n    cpu: 1\n    memory: 512Mi\n    template: { vmid: 9000 }\n`;
    writeFileSync(manifest, `${doc('web')}---\n${doc(LONG)}`);
    state = join(dir, 'state.json');
    const c = capture();
    const loadedConfig = parseProviderConfig(providerConfigYaml(sim), config);
    assert.equal(
      await applyCommand({
        loadedConfig,
        state,
        files: [manifest],
        taskPollMs: 10,
        agentPollMs: 10,
        quiet: true,
        out: c.out,
      }),
      0,
      c.text(),
    );
    // Old versions of web's userData and a deleted resource's file: nothing reads them.
    put(fileOf('web', 'aaaa'));
    put(fileOf('gone', 'bbbb'));
    put(fileOf(LONG, 'cafe'));
    // Read by a VM's config; by a snapshot only (802's config names eeee since).
    await reader(801, put(fileOf('web', 'cccc')));
    await reader(802, put(fileOf('web', 'dddd')));
    await call('POST', `/nodes/${NODE}/qemu/802/snapshot`, { snapname: 'before' });
    await call('PUT', `/nodes/${NODE}/qemu/802/config`, { cicustom: `user=${put(fileOf('web', 'eeee'))}` });
    // Not this installation's: another one's identity, and an operator's own file.
    put(fileOf('web', 'abab', 'cli-other-team'));
    put('user-data-by-hand.yaml');
    // All of the above well older than the scan's hour; then one written just now.
    sim.clock.advance(2 * 3600_000);
    put(fileOf('web', '1234'));
  });
  after(async () => {
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('lists the files nobody reads: exit 1; without --snippets, nothing about them', async () => {
    const c = capture();
    assert.equal(await gc({ config, state, snippets: true, output: 'json', out: c.out }), 1);
    const found = (JSON.parse(c.text()) as Array<{ kind: string }>).filter(
      (f): f is SnippetFinding => f.kind === 'orphan-snippet',
    );
    assert.deepEqual(
      found.map((f) => [f.volid, f.owner, f.ownerExists]).sort(),
      [
        [`local:snippets/${fileOf('web', 'aaaa')}`, 'default/web', true],
        [`local:snippets/${fileOf('gone', 'bbbb')}`, 'default/gone', false],
        [`local:snippets/${fileOf(LONG, 'cafe')}`, `default/${LONG}`, true],
      ].sort(),
    );
    assert.match(found[0]!.detail, /no VM of any site reads it.*rm "\$\(pvesm path local:snippets\//);
    const plain = capture();
    await gc({ config, state, output: 'json', out: plain.out });
    assert.ok(!plain.text().includes('orphan-snippet'));
    const table = capture();
    await gc({ config, state, snippets: true, out: table.out });
    assert.match(table.text(), /SITE +NODE +SNIPPET +OWNER +WRITTEN +DETAIL/);
  });

  it('--delete --yes removes exactly those files; a second run finds nothing', async () => {
    const before = files();
    const c = capture();
    assert.equal(
      await gc({ config, state, snippets: true, delete: true, yes: true, output: 'json', out: c.out }),
      0,
      c.text(),
    );
    const done = (JSON.parse(c.text()) as Array<{ kind: string; action?: string }>).filter(
      (f) => f.kind === 'orphan-snippet',
    );
    assert.deepEqual(
      done.map((f) => f.action),
      ['deleted', 'deleted', 'deleted'],
    );
    assert.deepEqual(
      files(),
      before.filter((f) => ![fileOf('web', 'aaaa'), fileOf('gone', 'bbbb'), fileOf(LONG, 'cafe')].includes(f)),
    );
    const again = capture();
    assert.equal(await gc({ config, state, snippets: true, output: 'json', out: again.out }), 0, again.text());
  });
});
