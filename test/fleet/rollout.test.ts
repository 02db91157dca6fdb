/**
 * Phased rollout in `apply` against the in-process simulator: the gates (a failing phase-1 VM
 * holds phase 2), `--no-wait`, `proxmox.sankofa.io/depends-on`, the `--max-parallel` bound
 * (counted from the store at every admission round, never from timings), an interrupted rollout
 * (SIGKILL of the CLI) that resumes with exactly one VM per manifest, dependency cycles, and
 * `--dry-run` changing nothing (as text, and with `-o json|yaml` as the typed plan alone on stdout).
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parse } from 'yaml';
import { type LoadedProviderConfig, parseProviderConfig } from '../../src/api/provider-config-load.ts';
import type { ProxmoxVM } from '../../src/api/proxmoxvm.ts';
import { applyCommand } from '../../src/local/commands.ts';
import { LocalRuntime } from '../../src/local/runtime.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { providerConfigYaml } from '../../src/sim/provider-config.ts';
import type { ResourcePlan } from '../../src/vm/plan.ts';
import { UsageError } from '../../src/workspace/arguments.ts';
import type { ResourceState } from '../../src/workspace/phases.ts';
import { readStateFile } from '../../src/workspace/state-file.ts';
import { capture } from '../helpers/capture.ts';
import { cli, spawnCli } from '../helpers/cli.ts';
import { startTestSim } from '../helpers/sim.ts';

interface Spec {
  name: string;
  phase?: string;
  dependsOn?: string;
  bridge?: string;
  /** userData that needs a snippet (packages): uploaded over SSH before the create. */
  userData?: boolean;
}

function manifest(s: Spec): string {
  const ann = [
    s.phase ? `    proxmox.sankofa.io/phase: "${s.phase}"\n` : '',
    s.dependsOn ? `    proxmox.sankofa.io/depends-on: ${s.dependsOn}\n` : '',
  ].join('');
  return `apiVersion: proxmox.sankofa.io/v1alpha1
kind: ProxmoxVM
metadata:
  name: ${s.name}
${ann ? `  annotations:\n${ann}` : ''}spec:
  forProvider:
    site: site-1
    node: ml110-01
    cpu: 1
    memory: 512Mi
    disk: 4Gi
    storage: local-lvm
    network: ${s.bridge ?? 'vmbr0'}
    image: local:import/ubuntu-22.04-cloud.qcow2
${s.userData ? '    userData: |\n      #cloud-config\n      packages:\n        - jq\n' : ''}`;
}

describe('phased rollout (apply)', () => {
  let sim: Simulator;
  let config: LoadedProviderConfig;
  let configFile: string;
  let dir: string;

  before(async () => {
    sim = await startTestSim();
    dir = mkdtempSync(join(tmpdir(), 'pp-rollout-'));
    configFile = join(dir, 'providerconfig.yaml');
    writeFileSync(configFile, providerConfigYaml(sim));
    config = parseProviderConfig(providerConfigYaml(sim), configFile);
  });
  after(async () => {
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  });

  function fleet(name: string, specs: Spec[]): string {
    const d = join(dir, name);
    mkdirSync(d);
    for (const s of specs) writeFileSync(join(d, `${s.name}.yaml`), manifest(s));
    return d;
  }

  /** Names of the VMs in the simulator (templates aside), each as often as it exists. */
  function simVms(prefix: string): string[] {
    return sim.clusters
      .flatMap((c) => [...c.state.vms.values()])
      .filter((v) => v.config.template !== '1' && (v.config.name ?? '').startsWith(prefix))
      .map((v) => v.config.name!)
      .sort();
  }

  function counters(): number {
    return sim.clusters.reduce((n, c) => n + Object.values(c.counters()).reduce((a, b) => a + b, 0), 0);
  }

  /** Requests that change something (not logging in). */
  function mutating(): number {
    return sim.clusters.reduce(
      (n, c) =>
        n +
        Object.entries(c.counters())
          .filter(([k]) => !k.startsWith('GET ') && k !== 'POST /access/ticket')
          .reduce((a, [, v]) => a + v, 0),
      0,
    );
  }

  async function apply(
    files: string,
    extra: Partial<Parameters<typeof applyCommand>[0]> = {},
  ): Promise<{ code: number; text: string; ticks: Array<Map<string, ResourceState>> }> {
    const c = capture();
    const ticks: Array<Map<string, ResourceState>> = [];
    const code = await applyCommand({
      files: [files],
      loadedConfig: config,
      state: join(files, 'state.json'),
      taskPollMs: 10,
      agentPollMs: 10,
      quiet: true,
      out: c.out,
      timeoutMs: 60_000,
      onTick: (s) => ticks.push(s),
      ...extra,
    });
    return { code, text: c.text(), ticks };
  }

  it('a failing phase-1 VM (bridge vmbr9) holds phase 2: its VMs are never created; exit 1 says why', async () => {
    const d = fleet('gate', [
      { name: 'gate-a1', phase: '1' },
      { name: 'gate-a2', phase: '1', bridge: 'vmbr9' },
      { name: 'gate-b1', phase: '2' },
      { name: 'gate-b2', phase: '2' },
    ]);
    const r = await apply(d);
    assert.equal(r.code, 1, r.text);
    assert.deepEqual(simVms('gate-'), ['gate-a1']);
    assert.match(r.text, /^gate-a2\s.*BridgeNotFound: .*vmbr9/m);
    assert.match(r.text, /^1 VM\(s\) failed; the MESSAGE column says why and how to fix it$/m);
    assert.match(r.text, /^2 VM\(s\) not started: phase 1 has 1 failed VM\(s\): gate-a2$/m);
    // phase 2 was never even admitted: not in the store at any round
    assert.ok(r.ticks.length > 0);
    for (const t of r.ticks)
      assert.deepEqual([t.get('default/gate-b1'), t.get('default/gate-b2')], ['absent', 'absent']);
    const state = readStateFile<ProxmoxVM>(join(d, 'state.json'))!;
    assert.deepEqual(state.objects.map((o) => o.metadata.name).sort(), ['gate-a1', 'gate-a2']);
  });

  it("while phase 1's last VM boots, phase 2's snippets go up ahead of its creates, which do not write them again", async () => {
    const d = fleet('ahead', [
      { name: 'ahead-a1', phase: '1', userData: true },
      { name: 'ahead-b1', phase: '2', userData: true },
    ]);
    const site1 = sim.cluster('site-1');
    const local = () => site1.state.storage('ml110-01', 'local')!;
    const snippetOf = (name: string) =>
      [...local().volumes.keys()].filter((v) => v.startsWith(`snippets/provider-proxmox-${name}-`));
    // ahead-a1's guest gets no answer until phase 2 was prepared (a simulated day: held, not slept;
    // removing the fault releases it): it boots for as long as that takes, whatever the machine.
    const hold = site1.addFault({ kind: 'latency', ms: 86_400_000, path: 're:/agent/' });
    const calls: Array<{ keys: string[]; a1: string; a1Step: unknown; b1: string }> = [];
    let atRelease: { snippets: string[]; vms: string[]; volume: unknown } | undefined;
    const real = LocalRuntime.prototype.prepare;
    LocalRuntime.prototype.prepare = function (this: LocalRuntime, targets: ProxmoxVM[]) {
      calls.push({
        keys: targets.map((t) => `${t.metadata.namespace}/${t.metadata.name}`),
        a1: this.stateOf('default/ahead-a1'),
        a1Step: this.store.getSync('default/ahead-a1')?.status?.atProvider?.step,
        b1: this.stateOf('default/ahead-b1'),
      });
      return real.call(this, targets).then(() => {
        const snippets = snippetOf('ahead-b1');
        atRelease = { snippets, vms: simVms('ahead-b1'), volume: local().volumes.get(snippets[0] ?? '') };
        site1.removeFault(hold);
      });
    };
    let r: Awaited<ReturnType<typeof apply>>;
    try {
      r = await apply(d, { timeoutMs: 20_000 });
    } finally {
      LocalRuntime.prototype.prepare = real;
      site1.removeFault(hold);
    }
    assert.equal(r.code, 0, r.text);
    assert.deepEqual(calls, [
      { keys: ['default/ahead-b1'], a1: 'progressing', a1Step: 'WaitingForAgent', b1: 'absent' },
    ]);
    assert.equal(atRelease?.snippets.length, 1, 'the snippet was up before phase 2 was admitted');
    assert.deepEqual(atRelease?.vms, [], 'and no VM of phase 2 was made for it');
    const volid = atRelease!.snippets[0]!;
    assert.deepEqual(snippetOf('ahead-b1'), [volid]);
    // A write is a temporary file renamed into place, a new volume: the same one was not written again.
    assert.equal(local().volumes.get(volid), atRelease!.volume);
    const [b1] = [...site1.state.vms.values()].filter((v) => v.config.name === 'ahead-b1');
    assert.equal(b1?.config.cicustom, `user=local:${volid}`);
  });

  it('--no-wait starts every phase at once: phase 2 is created although phase 1 has a failure', async () => {
    const d = fleet('nowait', [
      { name: 'nowait-a1', phase: '1' },
      { name: 'nowait-a2', phase: '1', bridge: 'vmbr9' },
      { name: 'nowait-b1', phase: '2' },
      { name: 'nowait-b2', phase: '2' },
    ]);
    const r = await apply(d, { noWait: true });
    assert.equal(r.code, 1, r.text);
    assert.deepEqual(simVms('nowait-'), ['nowait-a1', 'nowait-b1', 'nowait-b2']);
    // all four were admitted in the very first round
    assert.ok(r.ticks[0]);
    assert.ok([...r.ticks[0].values()].every((s) => s !== 'absent'));
    assert.match(r.text, /^1 VM\(s\) failed/m);
    assert.doesNotMatch(r.text, /not started/);
  });

  it('depends-on: a VM starts only when its dependencies are Ready; a failed dependency holds it', async () => {
    const d = fleet('deps', [
      { name: 'deps-db', phase: '1' },
      { name: 'deps-app', phase: '1', dependsOn: 'deps-db' },
      { name: 'deps-broken', phase: '1', bridge: 'vmbr9' },
      { name: 'deps-web', phase: '1', dependsOn: 'deps-broken' },
      { name: 'deps-other', phase: '1' },
    ]);
    const r = await apply(d);
    assert.equal(r.code, 1, r.text);
    assert.deepEqual(simVms('deps-'), ['deps-app', 'deps-db', 'deps-other']);
    // the first round where deps-app is admitted, deps-db is already Ready
    const first = r.ticks.find((t) => t.get('default/deps-app') !== 'absent');
    assert.ok(first, 'deps-app was admitted');
    assert.equal(first.get('default/deps-db'), 'ready');
    assert.ok(
      r.ticks.some((t) => t.get('default/deps-db') === 'progressing' && t.get('default/deps-app') === 'absent'),
    );
    for (const t of r.ticks) assert.equal(t.get('default/deps-web'), 'absent');
    assert.match(
      r.text,
      /^1 VM\(s\) not started: phase 1 has 1 failed VM\(s\): deps-broken\n {2}deps-web waits for deps-broken \(failed\)$/m,
    );
  });

  it('--max-parallel 2: never more than 2 VMs of a phase in progress, and the bound is reached', async () => {
    const names = ['mp-1', 'mp-2', 'mp-3', 'mp-4', 'mp-5', 'mp-6'];
    const d = fleet(
      'maxpar',
      names.map((name) => ({ name, phase: '1' })),
    );
    const site1 = sim.cluster('site-1');
    const running: number[] = [];
    const ticks: Array<Map<string, ResourceState>> = [];
    const r = await apply(d, {
      maxParallel: 2,
      onTick: (s) => {
        ticks.push(s);
        // the simulator's side: VMs of this fleet with a task running right now
        const vmids = new Set(
          [...site1.state.tasks.values()]
            .filter((t) => t.status === 'running')
            .map((t) => Number(t.id))
            .filter((id) => (site1.state.vms.get(id)?.config.name ?? '').startsWith('mp-')),
        );
        running.push(vmids.size);
      },
    });
    assert.equal(r.code, 0, r.text);
    const inProgress = ticks.map((t) => [...t.values()].filter((s) => s === 'progressing').length);
    assert.equal(Math.max(...inProgress), 2, `in progress per round: ${inProgress.join(' ')}`);
    assert.ok(Math.max(...running) <= 2, `VMs with a running task per round: ${running.join(' ')}`);
    assert.deepEqual(simVms('mp-'), names);
    assert.match(r.text, /^all 6 VMs ready$/m);
  });

  it('an interrupted rollout (SIGKILL of the CLI mid-phase-2) resumes and completes with exactly one VM per manifest', async () => {
    const names = ['kill-1', 'kill-2', 'kill-3', 'kill-4', 'kill-5'];
    const d = fleet(
      'kill',
      names.map((name, i) => ({ name, phase: i < 2 ? '1' : '2' })),
    );
    const state = join(d, 'state.json');
    const site1 = sim.cluster('site-1');
    // The third start is the first of phase 2: it hangs until the fault is removed.
    const stall = site1.addFault({ kind: 'task', type: 'qmstart', action: 'stall', nth: 3 });
    const child = spawnCli([
      'apply',
      '--yes',
      '-f',
      d,
      '--config',
      configFile,
      '--state',
      state,
      '--task-poll',
      '20ms',
      '-q',
    ]);
    child.stdout.resume();
    child.stderr?.resume();
    const exited = new Promise<NodeJS.Signals | null>((resolve) => child.on('exit', (_c, sig) => resolve(sig)));
    try {
      for (let i = 0; i < 3000 && !site1.faults.active.get(stall)?.fired; i++)
        await new Promise((r) => setTimeout(r, 10));
      assert.equal(site1.faults.active.get(stall)?.fired, 1, 'phase 2 started and hangs in its first start');
      child.kill('SIGKILL');
      assert.equal(await exited, 'SIGKILL');
    } finally {
      site1.removeFault(stall);
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
    const before = readStateFile<ProxmoxVM>(state)!;
    assert.ok(before.objects.length >= 3 && before.objects.length <= 5, `${before.objects.length} in the state file`);

    // Resume (the dead process's lock file is taken over).
    const r = await apply(d);
    assert.equal(r.code, 0, r.text);
    assert.match(r.text, /^all 5 VMs ready$/m);
    assert.deepEqual(simVms('kill-'), names, 'exactly one VM per manifest');
    const after = readStateFile<ProxmoxVM>(state)!;
    const vmids = after.objects.map((o) => o.metadata.annotations?.['crossplane.io/external-name']);
    assert.equal(new Set(vmids).size, 5);
    for (const o of before.objects) {
      const now = after.objects.find((x) => x.metadata.name === o.metadata.name)!;
      assert.equal(now.metadata.uid, o.metadata.uid, 'the resumed run kept the resources of the first');
    }
  });

  it('dependency cycles and a dependency on a later phase are rejected before anything is contacted', async () => {
    const cyc = fleet('cycle', [
      { name: 'cyc-x', phase: '1', dependsOn: 'cyc-y' },
      { name: 'cyc-y', phase: '1', dependsOn: 'cyc-x' },
    ]);
    for (const c of sim.clusters) c.resetCounters();
    await assert.rejects(
      apply(cyc),
      (e: Error) =>
        e instanceof UsageError && e.message === 'dependency cycle: default/cyc-x -> default/cyc-y -> default/cyc-x',
    );
    const later = fleet('later', [
      { name: 'later-a', phase: '1', dependsOn: 'later-b' },
      { name: 'later-b', phase: '2' },
    ]);
    await assert.rejects(
      apply(later),
      /default\/later-a \(phase 1\) depends on default\/later-b, which is in the later phase 2/,
    );
    assert.equal(counters(), 0);
    assert.deepEqual(simVms('cyc-'), []);
  });

  it('--dry-run prints the phases and the plan read from Proxmox, changing nothing; a fleet file overrides the annotations', async () => {
    const d = fleet('dry', [
      { name: 'dry-a', phase: '1' },
      { name: 'dry-b', phase: '2', dependsOn: 'dry-a' },
      { name: 'dry-c' },
    ]);
    for (const c of sim.clusters) c.resetCounters();
    const c1 = capture();
    const code = await applyCommand({
      files: [d],
      config: configFile,
      state: join(d, 'state.json'),
      dryRun: true,
      out: c1.out,
    });
    assert.equal(code, 0);
    assert.equal(
      c1.text(),
      [
        'Dry run: Proxmox was only read; nothing was changed.',
        '',
        'phase 0: 1 VM(s)',
        '  + create        default/dry-c',
        'phase 1: 1 VM(s), after the previous phase is Ready',
        '  + create        default/dry-a',
        'phase 2: 1 VM(s), after the previous phase is Ready',
        '  + create        default/dry-b; after default/dry-a',
        'Plan: 3 to create, 0 to adopt, 0 to update, 0 to reboot, 0 unchanged.',
        '',
      ].join('\n'),
    );
    const fleetFile = join(dir, 'fleet.yaml');
    writeFileSync(
      fleetFile,
      'phases:\n  - name: core\n    members: [dry-a, dry-c]\n    maxParallel: 1\n  - name: apps\n    members: [dry-b]\n',
    );
    const c2 = capture();
    await applyCommand({
      files: [d],
      config: configFile,
      state: join(d, 'state.json'),
      dryRun: true,
      fleet: fleetFile,
      out: c2.out,
    });
    // the file's order (core, then apps), not the annotations' (dry-c in 0, dry-a in 1, dry-b in 2)
    assert.equal(
      c2.text(),
      [
        'Dry run: Proxmox was only read; nothing was changed.',
        '',
        'phase core (at most 1 at once): 2 VM(s)',
        '  + create        default/dry-a',
        '  + create        default/dry-c',
        'phase apps: 1 VM(s), after the previous phase is Ready',
        '  + create        default/dry-b; after default/dry-a',
        'Plan: 3 to create, 0 to adopt, 0 to update, 0 to reboot, 0 unchanged.',
        '',
      ].join('\n'),
    );
    assert.equal(mutating(), 0, 'the simulator saw only reads');
    assert.deepEqual(simVms('dry-'), []);
  });

  it('--dry-run -o json: stdout is the plan alone, the ResourcePlan[] `plan -o json` has as `changes` (the real CLI)', async () => {
    const d = fleet('dryjson', [{ name: 'dj-a', phase: '1' }]);
    const state = join(d, 'state.json');
    assert.equal((await apply(d, { state })).code, 0);
    // a second manifest, not applied yet: the plan creates it and leaves dj-a as it is
    writeFileSync(join(d, 'dj-b.yaml'), manifest({ name: 'dj-b', phase: '2', dependsOn: 'dj-a' }));
    for (const c of sim.clusters) c.resetCounters();
    const args = ['apply', '-f', d, '--config', configFile, '--state', state, '--dry-run'];
    const json = await cli([...args, '-o', 'json']);
    assert.equal(json.code, 0, json.stderr);
    const plans = JSON.parse(json.stdout) as ResourcePlan[];
    assert.deepEqual(
      plans.map((p) => [p.key, p.action, p.changes]),
      [
        ['default/dj-a', 'no-op', []],
        ['default/dj-b', 'create', []],
      ],
    );
    assert.equal(typeof plans[0]!.vmid, 'number');
    assert.match(json.stderr, /^Dry run: Proxmox was only read; nothing was changed\.$/m);
    const yaml = await cli([...args, '-o', 'yaml']);
    assert.equal(yaml.code, 0, yaml.stderr);
    assert.deepEqual(parse(yaml.stdout), plans);
    // without -o: the text, on stdout
    const text = await cli(args);
    assert.equal(text.code, 0, text.stderr);
    assert.match(text.stdout, /^Dry run: Proxmox was only read; nothing was changed\.$/m);
    assert.match(text.stdout, /^ {2}\+ create {8}default\/dj-b; after default\/dj-a$/m);
    assert.equal(mutating(), 0, 'the simulator saw only reads');
    assert.deepEqual(simVms('dj-'), ['dj-a']);
    // without a ProviderConfig there is no plan to type: a usage error, not text on stdout
    const bare = await cli(['apply', '-f', d, '--state', state, '--dry-run', '-o', 'json']);
    assert.equal(bare.code, 2, bare.stderr);
    assert.equal(bare.stdout, '');
    assert.match(bare.stderr, /apply --dry-run -o json prints the plan read from Proxmox: pass --config FILE/);
  });
});
