/**
 * `POST /nodes/{node}/vzdump`: the `vzdump` task locks each guest `backup` while it runs, writes
 * `vzdump-qemu-<vmid>-<date>.vma[.zst]` into a storage with backup content (listed with
 * `content=backup`, deletable), fails a guest that is already locked with PVE's text (the job
 * then ends `job errors`), and refuses a storage without backup content.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { SimCluster, Simulator } from '../../src/sim/index.ts';
import { parseTopology } from '../../src/sim/topology.ts';
import { data, finish, NODE, taskLines, vmConfig } from '../helpers/fidelity.ts';
import { raw, startTestSim, waitTask } from '../helpers/sim.ts';

const TOPOLOGY = `
clusters:
  - name: site-1
    listen: 127.0.0.1:0
    nodes:
      - name: ${NODE}
        cpus: 8
        memory: 64G
        storages:
          - { id: local, type: dir, content: [iso, backup], total: 100G }
          - { id: thin, type: lvmthin, content: [images], total: 500G }
        bridges: [{ name: vmbr0 }]
        vms:
          - { vmid: 140, name: a, disk: { storage: thin, size: 4G }, running: true }
          - { vmid: 141, name: b, disk: { storage: thin, size: 1G } }
`;

async function vzdump(url: string, form: Record<string, string>): Promise<string> {
  const r = await raw(url, 'POST', `/nodes/${NODE}/vzdump`, { form });
  assert.equal(r.status, 200, `${r.status} ${r.reason} ${r.text}`);
  return data<string>(r);
}

async function backups(url: string): Promise<Array<Record<string, unknown>>> {
  return data(await raw(url, 'GET', `/nodes/${NODE}/storage/local/content?content=backup`));
}

describe('vzdump', () => {
  let sim: Simulator;
  let c: SimCluster;
  let url: string;
  before(async () => {
    sim = await startTestSim({ topology: parseTopology(TOPOLOGY, 'vzdump.yaml') });
    c = sim.cluster('site-1');
    url = c.url;
  });
  after(() => sim.close());

  it('backs up a VM: lock backup while it runs, a .vma.zst in the storage, then unlocked', async () => {
    // Held after its first wait (the archive being written), while the lock is taken.
    const hold = c.addFault({ kind: 'task', type: 'vzdump', action: 'stall', step: 1 });
    const upid = await vzdump(url, { vmid: '140', storage: 'local', compress: 'zstd', mode: 'snapshot' });
    assert.match(upid, /:vzdump:140:/);
    assert.equal((await vmConfig(url, 140)).lock, 'backup');
    c.removeFault(hold);
    assert.equal((await waitTask(url, NODE, upid)).exitstatus, 'OK');
    assert.equal((await vmConfig(url, 140)).lock, undefined);
    const list = await backups(url);
    assert.equal(list.length, 1);
    const b = list[0]!;
    assert.match(String(b.volid), /^local:backup\/vzdump-qemu-140-\d{4}_\d{2}_\d{2}-\d{2}_\d{2}_\d{2}\.vma\.zst$/);
    assert.equal(b.format, 'vma.zst');
    assert.equal(b.subtype, 'qemu');
    assert.equal(b.vmid, 140);
    const lines = await taskLines(url, upid);
    assert.ok(lines.includes('INFO: Starting Backup of VM 140 (qemu)'), lines.join('\n'));
    assert.ok(lines.includes('INFO: status = running'));
    assert.ok(lines.includes('INFO: Backup job finished successfully'));
    // Deleted through the volume route.
    const del = await raw(url, 'DELETE', `/nodes/${NODE}/storage/local/content/${encodeURIComponent(String(b.volid))}`);
    assert.equal(await finish(url, data<string>(del)), 'OK');
    assert.deepEqual(await backups(url), []);
  });

  it('no compress: .vma; a stopped VM is backed up in stop mode', async () => {
    const upid = await vzdump(url, { vmid: '141', storage: 'local' });
    assert.equal(await finish(url, upid), 'OK');
    assert.ok((await taskLines(url, upid)).includes('INFO: backup mode: stop'));
    const list = await backups(url);
    assert.match(String(list[0]?.volid), /vzdump-qemu-141-.*\.vma$/);
  });

  it('a locked VM fails with its lock, the others are backed up, the job ends with errors', async () => {
    const id = c.addFault({ kind: 'lock', vmid: 141, lock: 'snapshot', flock: false });
    const upid = await vzdump(url, { vmid: '140,141', storage: 'local', compress: 'gzip' });
    assert.doesNotMatch(upid, /:vzdump:14\d:/);
    assert.equal(await finish(url, upid), 'job errors');
    const lines = await taskLines(url, upid);
    assert.ok(lines.includes('ERROR: Backup of VM 141 failed - VM is locked (snapshot)'), lines.join('\n'));
    assert.ok(lines.includes('INFO: Backup job finished with errors'));
    assert.equal((await vmConfig(url, 141)).lock, 'snapshot');
    c.removeFault(id);
    assert.ok((await backups(url)).some((v) => /vzdump-qemu-140-.*\.vma\.gz$/.test(String(v.volid))));
  });

  it('a storage without backup content, a missing vmid, a missing storage', async () => {
    assert.equal(
      await finish(url, await vzdump(url, { vmid: '140', storage: 'thin' })),
      "could not get storage information for 'thin': can't use storage 'thin' for backups - wrong content type",
    );
    const r = await raw(url, 'POST', `/nodes/${NODE}/vzdump`, { form: { storage: 'local' } });
    assert.equal(r.status, 400);
    assert.deepEqual((r.json as { errors: unknown }).errors, { vmid: 'property is missing' });
    assert.equal(
      await finish(url, await vzdump(url, { vmid: '140', storage: 'nope' })),
      "could not activate storage 'nope': storage 'nope' does not exist",
    );
  });

  it('not-backed-up stays job-based: a backup does not take a VM off the list', async () => {
    const nb = data<Array<{ vmid: number }>>(await raw(url, 'GET', '/cluster/backup-info/not-backed-up'));
    assert.deepEqual(
      nb.map((g) => g.vmid),
      [140, 141],
    );
  });
});
