/**
 * A second real third-party client, the npm package `@corsinvest/cv4pve-api-javascript` (MIT, a
 * devDependency used only here, never imported from src/), drives the simulator unchanged over
 * HTTPS: ticket login and API-token auth, a linked clone of the template, a snapshot without RAM,
 * start, the guest agent (`get-osinfo`, then `exec` of `cloud-init status --wait` polled through
 * `exec-status`, as Cluster API providers check cloud-init), a snapshot with RAM, the snapshot
 * list and config, rollback, and snapshot delete.
 *
 * The package is CommonJS and speaks JSON bodies (booleans as 0/1), `https` with
 * `rejectUnauthorized: false` built in (it has no option for a CA), so that is what it gets.
 * Deterministic: the guest's boot and cloud-init are passed with the simulated clock, and the
 * client's own task wait polls every 5 ms against a simulator at speed 1000.
 */
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { after, before, describe, it } from 'node:test';
import type { Simulator } from '../../src/sim/index.ts';
import { ROOT_PASSWORD, startTestSim, TOKEN_SECRET } from '../helpers/sim.ts';

const NODE = 'ml110-01';

/** What the test uses of the package (it ships no types). */
interface Result {
  statusCode: number;
  reasonPhrase: string;
  isSuccessStatusCode: boolean;
  response: { data: unknown; message?: string };
}
type Call = (...args: unknown[]) => Promise<Result>;
interface Vm {
  clone: { cloneVm: Call };
  status: { start: { vmStart: Call }; current: { vmStatus: Call } };
  agent: { getOsinfo: { getOsinfo: Call }; exec: { exec: Call }; execStatus: { execStatus: Call } };
  snapshot: {
    snapshot: Call;
    snapshotList: Call;
    get(name: string): { delsnapshot: Call; rollback: { rollback: Call }; config: { getSnapshotConfig: Call } };
  };
}
interface Client {
  apiToken: string;
  login(user: string, password: string, realm?: string): Promise<boolean>;
  waitForTaskToFinish(upid: string, wait?: number, timeout?: number): Promise<boolean>;
  getExitStatusTask(upid: string): Promise<string>;
  nodes: { get(node: string): { qemu: { get(vmid: number): Vm } } };
}

const { PveClient } = createRequire(import.meta.url)('@corsinvest/cv4pve-api-javascript') as {
  PveClient: new (host: string, port: number) => Client;
};

describe('third-party client (npm @corsinvest/cv4pve-api-javascript) over HTTPS', () => {
  let sim: Simulator;
  let host: string;
  let port: number;
  before(async () => {
    sim = await startTestSim({ http: false, profile: '9.2' });
    const u = new URL(sim.cluster('site-1').url);
    host = u.hostname;
    port = Number(u.port);
  });
  after(() => sim.close());

  /** Run a task to its end with the client's own wait; its exit status. */
  async function task(client: Client, r: Result): Promise<string> {
    assert.equal(r.statusCode, 200, `${r.statusCode} ${r.reasonPhrase}`);
    const upid = String(r.response.data);
    assert.equal(await client.waitForTaskToFinish(upid, 5, 20_000), true);
    return client.getExitStatusTask(upid);
  }

  const cycle = async (client: Client, vmid: number) => {
    const tpl = client.nodes.get(NODE).qemu.get(9000);
    assert.equal(
      await task(client, await tpl.clone.cloneVm(vmid, undefined, undefined, undefined, undefined, `cv-${vmid}`)),
      'OK',
    );
    const vm = client.nodes.get(NODE).qemu.get(vmid);

    // A disk-only snapshot of the stopped clone (lvmthin: linked clones can snapshot).
    assert.equal(await task(client, await vm.snapshot.snapshot('pre', 'before boot')), 'OK');
    assert.equal(await task(client, await vm.status.start.vmStart()), 'OK');

    // Without qemu-guest-agent in the guest: not running (deterministic, unlike racing the boot).
    const site = sim.cluster('site-1');
    site.setGuestAgent(vmid, false);
    const early = await vm.agent.getOsinfo.getOsinfo();
    assert.equal(early.statusCode, 500);
    assert.equal(early.reasonPhrase, 'QEMU guest agent is not running');
    site.setGuestAgent(vmid, true);
    sim.clock.advance(60_000);
    const os = await vm.agent.getOsinfo.getOsinfo();
    assert.equal(os.statusCode, 200);
    assert.equal((os.response.data as { result: { id: string } }).result.id, 'ubuntu');

    // exec + exec-status: a process still running answers `exited: 0` until its end.
    const sleeper = await vm.agent.exec.exec(['sleep', '3600']);
    const spid = (sleeper.response.data as { pid: number }).pid;
    assert.deepEqual((await vm.agent.execStatus.execStatus(spid)).response.data, { exited: 0 });
    sim.clock.advance(sim.clock.scaled(3_600_000));
    assert.deepEqual((await vm.agent.execStatus.execStatus(spid)).response.data, { exited: 1, exitcode: 0 });

    // cloud-init status --wait, as Cluster API providers check cloud-init.
    const ex = await vm.agent.exec.exec(['cloud-init', 'status', '--wait']);
    assert.equal(ex.statusCode, 200, ex.reasonPhrase);
    const pid = (ex.response.data as { pid: number }).pid;
    sim.clock.advance(sim.clock.scaled(60_000));
    const done = await vm.agent.execStatus.execStatus(pid);
    const st = done.response.data as { exited: number; exitcode: number; 'out-data': string };
    assert.equal(st.exited, 1);
    assert.equal(st.exitcode, 0);
    assert.equal(st['out-data'], 'status: done\n');
    // qemu-ga forgets a reaped process.
    const gone = await vm.agent.execStatus.execStatus(pid);
    assert.equal(gone.statusCode, 500);
    assert.equal(gone.reasonPhrase, `VM ${vmid} qga command 'guest-exec-status' failed - Invalid parameter 'pid'`);

    // A snapshot with RAM of the running VM, then the list: oldest first, `current` last.
    assert.equal(await task(client, await vm.snapshot.snapshot('live', 'with RAM', true)), 'OK');
    const list = (await vm.snapshot.snapshotList()).response.data as Array<Record<string, unknown>>;
    assert.deepEqual(
      list.map((s) => [s.name, s.vmstate ?? null, s.parent ?? null]),
      [
        ['pre', 0, null],
        ['live', 1, 'pre'],
        ['current', null, 'live'],
      ],
    );
    const cfg = (await vm.snapshot.get('live').config.getSnapshotConfig()).response.data as Record<string, unknown>;
    assert.match(String(cfg.vmstate), new RegExp(`^local-lvm:vm-${vmid}-state-live$`));
    assert.equal(cfg.description, 'with RAM');

    // Rollback to the disk-only snapshot stops the VM (no RAM to resume).
    assert.equal(await task(client, await vm.snapshot.get('pre').rollback.rollback()), 'OK');
    const cur = (await vm.status.current.vmStatus()).response.data as { status: string; lock?: string };
    assert.equal(cur.status, 'stopped');
    assert.equal(cur.lock, undefined);

    assert.equal(await task(client, await vm.snapshot.get('live').delsnapshot()), 'OK');
    assert.equal(await task(client, await vm.snapshot.get('pre').delsnapshot()), 'OK');
    const left = (await vm.snapshot.snapshotList()).response.data as Array<{ name: string }>;
    assert.deepEqual(
      left.map((s) => s.name),
      ['current'],
    );
    // The RAM state volume went with its snapshot.
    assert.equal(sim.cluster('site-1').state.volume(NODE, `local-lvm:vm-${vmid}-state-live`), undefined);
  };

  it('ticket login: clone, snapshots with and without RAM, agent exec, rollback, delete', async () => {
    const client = new PveClient(host, port);
    assert.equal(await client.login('root', ROOT_PASSWORD, 'pam'), true);
    await cycle(client, 160);
  });

  it('API token: the same', async () => {
    const client = new PveClient(host, port);
    client.apiToken = `root@pam!test=${TOKEN_SECRET}`;
    await cycle(client, 161);
  });

  it('a wrong password: login() resolves false', async () => {
    const client = new PveClient(host, port);
    assert.equal(await client.login('root', 'wrong', 'pam'), false);
  });
});
