/**
 * `validate`: the seed's three unreadable manifests (test/fixtures/seed-broken, each commented
 * with what is wrong) give precise messages, every problem in one run, with file:line:column,
 * the field, what was found and what is allowed; the seed fleet as fixed in examples/production
 * is valid; duplicate names; references to unknown sites and ProviderConfigs with --config;
 * phases and dependencies; names and namespaces as Kubernetes checks them and the poll-interval
 * annotation, which `apply` and `delete` refuse too before they contact anything.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { validateCommand } from '../../src/fleet/commands.ts';
import { validateManifests } from '../../src/fleet/validate.ts';
import { applyCommand, deleteCommand } from '../../src/local/commands.ts';
import { formatProblem, ManifestError } from '../../src/workspace/manifests.ts';
import { capture } from '../helpers/capture.ts';
import { cli, ROOT } from '../helpers/cli.ts';

const BROKEN = join(ROOT, 'test/fixtures/seed-broken');
const PRODUCTION = join(ROOT, 'examples/production');

/** What validate prints for a file: paths relative to the working directory. */
const rel = (p: string) => relative(process.cwd(), p) || p;

/** The seed's two sites, as a ProviderConfig file (validate contacts nothing: the endpoints are never used). */
const SEED_CONFIG = `apiVersion: v1
kind: Secret
metadata: { name: proxmox-credentials, namespace: crossplane-system }
stringData: { tokenid: "root@pam!sankofa", token: "00000000-0000-4000-8000-000000000000" }
---
apiVersion: proxmox.sankofa.io/v1alpha1
kind: ClusterProviderConfig
metadata: { name: default }
spec:
  credentials: { source: Secret, secretRef: { name: proxmox-credentials, namespace: crossplane-system } }
  sites:
    - name: site-1
      endpoints: ["https://192.168.11.10:8006"]
      nodes: [ml110-01]
      tls: { insecureSkipTLSVerify: true }
      ssh: { secretRef: { name: proxmox-ssh, namespace: crossplane-system }, hostKeys: ["SHA256:${'a'.repeat(43)}"] }
    - name: site-2
      endpoints: ["https://192.168.11.11:8006"]
      nodes: [r630-01]
      tls: { insecureSkipTLSVerify: true }
      ssh: { secretRef: { name: proxmox-ssh, namespace: crossplane-system }, hostKeys: ["SHA256:${'b'.repeat(43)}"] }
`;

function vm(name: string, extra = '', opts: { annotations?: string; forProvider?: string } = {}): string {
  return `apiVersion: proxmox.sankofa.io/v1alpha1
kind: ProxmoxVM
metadata:
  name: ${name}
${opts.annotations ? `  annotations:\n${opts.annotations}` : ''}spec:
  forProvider:
${opts.forProvider ?? '    site: site-1\n    node: ml110-01\n    cpu: 2\n    memory: 4Gi\n    disk: 20Gi\n'}${extra}  providerConfigRef:
    name: default
`;
}

describe('validate', () => {
  let dir: string;
  let config: string;

  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'pp-validate-'));
    config = join(dir, 'providerconfig.yaml');
    writeFileSync(config, SEED_CONFIG);
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("the seed's three unreadable manifests: every problem, in one run, with file:line:column, field, found and allowed", async () => {
    const c = capture();
    const code = await validateCommand({ files: [BROKEN], config, out: c.out });
    assert.equal(code, 1);
    const b = rel(join(BROKEN, 'blockscout.yaml'));
    const l = rel(join(BROKEN, 'large-vm.yaml'));
    const m = rel(join(BROKEN, 'medium-vm.yaml'));
    // Each line was checked against the fixture by hand (the fixtures' comments give the lines).
    assert.deepEqual(c.text().trimEnd().split('\n'), [
      // `spec:` at 17:1 has no forProvider (it is spelt `forprovider` at 18:3)
      `${b}:17:1: spec.forProvider: required (the VM to create)`,
      `${b}:18:3: spec.forprovider: unknown field 'forprovider' (did you mean 'forProvider'?)`,
      // the second document: `  name: blockscout` at 33:9 (value), the first one at 15
      `${b}:33:9: metadata.name: duplicate ProxmoxVM default/blockscout (also in ${b}:15)`,
      `${b}:40:10: spec.forProvider.cpu: must be a whole number between 1 and 1024; found "four"`,
      `${b}:41:13: spec.forProvider.memory: expected a quantity like 4Gi / 512Mi / 20Gi, or a whole number; found "4GB" (did you mean '4Gi'?)`,
      `${b}:48:11: spec.providerConfigRef.name: unknown ProviderConfig 'proxmox' (known: default)`,
      `${l}:18:10: spec.forProvider.cpu: must be between 1 and 1024; found 2048`,
      // unknown fields point at the key (column 5), values at the value
      `${l}:19:5: spec.forProvider.memroy: unknown field 'memroy' (did you mean 'memory'?)`,
      `${l}:20:11: spec.forProvider.disk: disk must be between 1Gi and 100Ti (units Mi, Gi, Ti; a bare number is GiB); got '200Ti'`,
      `${l}:24:11: spec.forProvider.site: unknown site 'site-3' (sites of default: site-1, site-2)`,
      // one tab, one problem (not the dozen follow-on errors of the YAML parser)
      `${m}:17:1: YAML syntax error: Tabs are not allowed as indentation (indent with spaces)`,
      '',
      '11 problem(s) in 3 file(s); 0 valid ProxmoxVM(s)',
    ]);
  });

  it('without --config the references are not checked, everything else is', () => {
    const r = validateManifests([BROKEN]);
    const fields = r.problems.map((p) => `${p.file.split('/').pop()}:${p.line}:${p.field ?? ''}`);
    assert.deepEqual(fields, [
      'blockscout.yaml:17:spec.forProvider',
      'blockscout.yaml:18:spec.forprovider',
      'blockscout.yaml:33:metadata.name',
      'blockscout.yaml:40:spec.forProvider.cpu',
      'blockscout.yaml:41:spec.forProvider.memory',
      'large-vm.yaml:18:spec.forProvider.cpu',
      'large-vm.yaml:19:spec.forProvider.memroy',
      'large-vm.yaml:20:spec.forProvider.disk',
      'medium-vm.yaml:17:',
    ]);
    assert.equal(r.resources, 0);
    assert.equal(r.files, 3);
  });

  it('examples/production (the seed fleet, fixed) is valid, with and without --config: exit 0', async () => {
    for (const args of [{}, { config }]) {
      const c = capture();
      assert.equal(await validateCommand({ files: [PRODUCTION], ...args, out: c.out }), 0, c.text());
      assert.equal(c.text(), '30 ProxmoxVM(s) in 30 file(s): valid\n');
    }
  });

  it('the seed fleet on sites without ssh: every userData with packages is named, with the fix', async () => {
    const noSsh = join(dir, 'no-ssh.yaml');
    writeFileSync(noSsh, SEED_CONFIG.replace(/^ {6}ssh: .*\n/gm, ''));
    const c = capture();
    assert.equal(await validateCommand({ files: [PRODUCTION], config: noSsh, out: c.out }), 1);
    const lines = c
      .text()
      .split('\n')
      .filter((l) => l.includes('spec.forProvider.userData'));
    assert.equal(lines.length, 30, c.text());
    assert.match(lines[0]!, /packages.*has no ssh.*userDataMode: NativeOnly/);
  });

  it('the CLI: exit 1 with the problems on stdout; exit 0 for the seed fleet; -o json parses', async () => {
    const bad = await cli(['validate', '-f', BROKEN, '--config', config]);
    assert.equal(bad.code, 1, bad.stderr);
    assert.match(
      bad.stdout,
      /large-vm\.yaml:19:5: spec\.forProvider\.memroy: unknown field 'memroy' \(did you mean 'memory'\?\)/,
    );
    assert.match(bad.stdout, /^11 problem\(s\) in 3 file\(s\)/m);
    const good = await cli(['validate', '-f', PRODUCTION, '--config', config]);
    assert.equal(good.code, 0, good.stdout + good.stderr);
    const json = await cli(['validate', '-f', BROKEN, '-o', 'json']);
    assert.equal(json.code, 1);
    const parsed = JSON.parse(json.stdout) as { problems: Array<{ file: string; line: number; column?: number }> };
    assert.equal(parsed.problems.length, 9);
    assert.ok(parsed.problems.every((p) => p.file.endsWith('.yaml') && p.line > 0));
  });

  it('duplicate names across files (per namespace), with both places', () => {
    const d = join(dir, 'dup');
    mkdirSync(d);
    writeFileSync(join(d, 'a.yaml'), vm('web'));
    writeFileSync(join(d, 'b.yaml'), vm('web'));
    // the same name in another namespace is another resource
    writeFileSync(join(d, 'c.yaml'), vm('web').replace('  name: web\n', '  name: web\n  namespace: team-b\n'));
    // a duplicate that is also invalid is still reported as a duplicate
    writeFileSync(join(d, 'd.yaml'), vm('web', '    cpu: 0\n').replace('    cpu: 2\n', ''));
    const r = validateManifests([d]);
    assert.deepEqual(r.problems.map(formatProblem), [
      `${rel(join(d, 'b.yaml'))}:4:9: metadata.name: duplicate ProxmoxVM default/web (also in ${rel(join(d, 'a.yaml'))}:1)`,
      `${rel(join(d, 'd.yaml'))}:4:9: metadata.name: duplicate ProxmoxVM default/web (also in ${rel(join(d, 'a.yaml'))}:4)`,
      `${rel(join(d, 'd.yaml'))}:11:10: spec.forProvider.cpu: must be between 1 and 1024; found 0`,
    ]);
    assert.equal(r.resources, 2);
  });

  it('with --config: unknown sites, nodes and ProviderConfigs; a site is required when there are several', async () => {
    const d = join(dir, 'refs');
    mkdirSync(d);
    writeFileSync(
      join(d, 'refs.yaml'),
      [
        vm('a', '', { forProvider: '    site: site-3\n    node: ml110-01\n' }),
        vm('b', '', { forProvider: '    site: site-2\n    node: ml110-01\n' }),
        vm('c', '', { forProvider: '    node: ml110-01\n' }),
        vm('d').replace('    name: default\n', '    name: defualt\n'),
      ].join('---\n'),
    );
    const c = capture();
    assert.equal(await validateCommand({ files: [d], config, out: c.out }), 1);
    const f = rel(join(d, 'refs.yaml'));
    // Documents of 10 lines separated by `---`: they start at lines 1, 12, 23 and 34.
    assert.deepEqual(c.text().trimEnd().split('\n').slice(0, -2), [
      `${f}:7:11: spec.forProvider.site: unknown site 'site-3' (sites of default: site-1, site-2)`,
      `${f}:19:11: spec.forProvider.node: node 'ml110-01' is not a node of site site-2 (nodes: r630-01)`,
      // a missing field is shown at the key of its parent (`  forProvider:`)
      `${f}:28:3: spec.forProvider.site: required: default has several sites (site-1, site-2)`,
      `${f}:45:11: spec.providerConfigRef.name: unknown ProviderConfig 'defualt' (known: default; did you mean 'default'?)`,
    ]);
    // without --config none of these can be known
    assert.deepEqual(validateManifests([d]).problems, []);
  });

  it('a ProviderConfig among the manifests is used like --config', () => {
    const d = join(dir, 'inline');
    mkdirSync(d);
    writeFileSync(join(d, 'config.yaml'), SEED_CONFIG);
    writeFileSync(join(d, 'vm.yaml'), vm('a', '', { forProvider: '    site: site-9\n' }));
    const r = validateManifests([d]);
    assert.deepEqual(
      r.problems.map((p) => [p.field, p.message]),
      [['spec.forProvider.site', "unknown site 'site-9' (sites of default: site-1, site-2)"]],
    );
  });

  it('a missing forProvider, fields one level too high, a kind typo, an unknown power state', () => {
    const d = join(dir, 'shapes');
    mkdirSync(d);
    writeFileSync(
      join(d, 'shapes.yaml'),
      [
        // forProvider: forgotten: its fields sit directly under spec
        'apiVersion: proxmox.sankofa.io/v1alpha1\nkind: ProxmoxVM\nmetadata:\n  name: flat\nspec:\n  cpu: 2\n  memory: 4Gi\n',
        'apiVersion: proxmox.sankofa.io/v1alpha1\nkind: ProxmoxVm\nmetadata:\n  name: typo\nspec: {}\n',
        vm('power', '    powerState: paused\n'),
      ].join('---\n'),
    );
    const f = rel(join(d, 'shapes.yaml'));
    assert.deepEqual(validateManifests([d]).problems.map(formatProblem), [
      `${f}:5:1: spec.forProvider: required (the VM to create)`,
      `${f}:6:3: spec.cpu: unknown field 'cpu' (it belongs under spec.forProvider)`,
      `${f}:7:3: spec.memory: unknown field 'memory' (it belongs under spec.forProvider)`,
      `${f}:10:7: kind: unknown kind 'ProxmoxVm' (did you mean 'ProxmoxVM'?)`,
      // the third document starts at line 15; `    powerState: paused` is its 12th line
      `${f}:26:17: spec.forProvider.powerState: must be one of: running, stopped; found "paused"`,
    ]);
  });

  it("other tools' names, quoted numbers, YAML 1.1 booleans and a bad bridge name get the hint that fixes them", () => {
    const d = join(dir, 'hints');
    mkdirSync(d);
    writeFileSync(
      join(d, 'hints.yaml'),
      vm(
        'hints',
        '    cores: 2\n    ram: 4Gi\n    agent: yes\n    network: "vmbr 0"\n    disks:\n      - size: "10"\n',
      ),
    );
    const f = rel(join(d, 'hints.yaml'));
    const found = validateManifests([d]).problems.map(formatProblem);
    const expect = [
      /spec\.forProvider\.cores: unknown field 'cores' \(did you mean 'cpu'\?\)/,
      /spec\.forProvider\.ram: unknown field 'ram' \(did you mean 'memory'\?\)/,
      /spec\.forProvider\.agent: must be boolean; found "yes" \(did you mean true\?\)/,
      /spec\.forProvider\.network: expected a Linux bridge name like vmbr0: a letter, then up to 14 letters, digits, _ \. or -; found "vmbr 0"/,
    ];
    for (const e of expect)
      assert.ok(
        found.some((p) => e.test(p)),
        `${e} in:\n${found.join('\n')}`,
      );
    assert.ok(found.every((p) => p.startsWith(`${f}:`)));
  });

  it('sizes in decimal units (memory: 4G is 3814.7 MiB, not 4 GiB) are valid, and warned about at their line with the binary spelling; exit 0', async () => {
    const d = join(dir, 'decimal');
    mkdirSync(d);
    writeFileSync(
      join(d, 'decimal.yaml'),
      vm('decimal', '', {
        forProvider:
          '    site: site-1\n    memory: 4G\n    disk: 20G\n    disks:\n      - size: 100Gi\n      - size: 1.5T\n',
      }),
    );
    writeFileSync(
      join(d, 'binary.yaml'),
      vm('binary', '', { forProvider: '    site: site-1\n    memory: 4096\n    disk: 20Gi\n' }),
    );
    const f = rel(join(d, 'decimal.yaml'));
    const r = validateManifests([d]);
    assert.deepEqual(r.problems, []);
    assert.deepEqual(r.warnings.map(formatProblem), [
      `${f}:8:13: spec.forProvider.memory: '4G' is 4,000,000,000 bytes, 3814.7 MiB (G is a power of 1000, as in Kubernetes); for 4 GiB write '4Gi'`,
      `${f}:9:11: spec.forProvider.disk: '20G' is 20,000,000,000 bytes, 18.6 GiB (G is a power of 1000, as in Kubernetes); for 20 GiB write '20Gi'`,
      `${f}:12:15: spec.forProvider.disks[1].size: '1.5T' is 1,500,000,000,000 bytes, 1397.0 GiB (T is a power of 1000, as in Kubernetes); for 1.5 TiB write '1.5Ti'`,
    ]);
    const c = capture();
    assert.equal(await validateCommand({ files: [d], out: c.out }), 0);
    const lines = c.text().trimEnd().split('\n');
    assert.equal(lines.filter((l) => l.startsWith(`warning: ${f}:`)).length, 3);
    assert.equal(lines.at(-1), '2 ProxmoxVM(s) in 2 file(s): valid, 3 warning(s)');
  });

  it('phases and dependencies: unknown dependency (did you mean), cycle, a dependency in a later phase, a bad phase', () => {
    const d = join(dir, 'deps');
    mkdirSync(d);
    const ann = (phase: string, deps?: string) =>
      `    proxmox.sankofa.io/phase: "${phase}"\n${deps ? `    proxmox.sankofa.io/depends-on: ${deps}\n` : ''}`;
    writeFileSync(join(d, 'a.yaml'), vm('dns', '', { annotations: ann('1') }));
    writeFileSync(join(d, 'b.yaml'), vm('git', '', { annotations: ann('1', 'dsn') }));
    writeFileSync(join(d, 'c.yaml'), vm('x', '', { annotations: ann('2', 'y') }));
    writeFileSync(join(d, 'd.yaml'), vm('y', '', { annotations: ann('2', 'x') }));
    writeFileSync(join(d, 'e.yaml'), vm('early', '', { annotations: ann('1', 'late') }));
    writeFileSync(join(d, 'f.yaml'), vm('late', '', { annotations: ann('3') }));
    writeFileSync(join(d, 'g.yaml'), vm('odd', '', { annotations: ann('phase one') }));
    // web-10 is a typo's distance from web-9 itself: no hint names the resource itself
    writeFileSync(join(d, 'h.yaml'), vm('web-9', '', { annotations: ann('1', 'web-10') }));
    const byFile = validateManifests([d]).problems.map((p) => `${p.file.split('/').pop()}:${p.line}: ${p.message}`);
    assert.deepEqual(byFile, [
      "b.yaml:7: depends on 'dsn', which is not among the manifests (did you mean 'dns'?)",
      'c.yaml:7: dependency cycle: x -> y -> x',
      "e.yaml:7: 'early' (phase 1) depends on 'late', which is in the later phase 3: it would wait forever",
      `g.yaml:6: phase must be a number or a name (letters, digits, '.', '_', '-'); found "phase one"`,
      "h.yaml:7: depends on 'web-10', which is not among the manifests",
    ]);
  });

  it('YAML syntax errors: the first error of a document and the independent ones, not the follow-on noise', () => {
    const d = join(dir, 'syntax');
    mkdirSync(d);
    // over-indented line (a value runs into the next line), and in a second document an unclosed quote
    writeFileSync(
      join(d, 's.yaml'),
      'apiVersion: proxmox.sankofa.io/v1alpha1\nkind: ProxmoxVM\nmetadata:\n  name: a\nspec:\n  forProvider:\n    node: ml110-01\n      cpu: 2\n    memory: 4Gi\n---\napiVersion: proxmox.sankofa.io/v1alpha1\nkind: ProxmoxVM\nmetadata:\n  name: "b\n',
    );
    const f = rel(join(d, 's.yaml'));
    assert.deepEqual(validateManifests([d]).problems.map(formatProblem), [
      `${f}:7:11: YAML syntax error: Nested mappings are not allowed in compact mappings (is the next line indented too far, or does an unquoted value contain ': '? quote it)`,
      `${f}:15:1: YAML syntax error: Missing closing "quote`,
    ]);
  });

  describe('names, namespaces and the poll interval, as Kubernetes (and the engine) read them', () => {
    const allowedName =
      "at most 253 characters: lower-case letters, digits, '-' and '.', each dot-separated part starting and ending with a letter or digit";
    const allowedNs =
      "at most 63 characters: lower-case letters, digits and '-', starting and ending with a letter or digit";

    it('metadata.name must be a DNS-1123 subdomain and metadata.namespace a DNS-1123 label (a line break too)', () => {
      const d = join(dir, 'names');
      mkdirSync(d);
      writeFileSync(join(d, 'a.yaml'), vm('Web_01'));
      // A block scalar keeps its line break: this namespace is "prod\n" (it broke the ownership marker).
      writeFileSync(join(d, 'b.yaml'), vm('web').replace('  name: web\n', '  name: web\n  namespace: |\n    prod\n'));
      writeFileSync(
        join(d, 'c.yaml'),
        vm('a..b').replace('  name: a..b\n', `  name: a..b\n  namespace: ${'n'.repeat(64)}\n`),
      );
      writeFileSync(join(d, 'd.yaml'), vm('x'.repeat(254)));
      // Valid: dots in a name, a namespace with a dash.
      writeFileSync(
        join(d, 'e.yaml'),
        vm('web.example-01').replace('  name: web.example-01\n', '  name: web.example-01\n  namespace: team-b\n'),
      );
      const f = (x: string) => rel(join(d, x));
      assert.deepEqual(validateManifests([d]).problems.map(formatProblem), [
        `${f('a.yaml')}:4:9: metadata.name: "Web_01" is not a valid DNS-1123 subdomain (${allowedName}); try 'web-01'`,
        `${f('b.yaml')}:5:14: metadata.namespace: "prod\\n" is not a valid DNS-1123 label (${allowedNs}); it contains a space or line break; try 'prod'`,
        `${f('c.yaml')}:4:9: metadata.name: "a..b" is not a valid DNS-1123 subdomain (${allowedName}); try 'a.b'`,
        `${f('c.yaml')}:5:14: metadata.namespace: "${'n'.repeat(64)}" is not a valid DNS-1123 label (${allowedNs}); try '${'n'.repeat(63)}'`,
        `${f('d.yaml')}:4:9: metadata.name: "${'x'.repeat(254)}" is not a valid DNS-1123 subdomain (${allowedName}); try '${'x'.repeat(253)}'`,
      ]);
    });

    it('other kinds too: a Secret the VMs would look up, a Namespace (a label); cluster-scoped kinds ignore a namespace', () => {
      const d = join(dir, 'names-others');
      mkdirSync(d);
      writeFileSync(
        join(d, 'o.yaml'),
        [
          'apiVersion: v1\nkind: Secret\nmetadata:\n  name: ../../kube-system/secrets/x\n  namespace: team a\nstringData: { a: b }',
          'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team.b',
          'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ok\n  namespace: "ignored anyway"',
        ].join('\n---\n'),
      );
      const problems = validateManifests([d]).problems.map(
        (p) => `${p.line}:${p.column}: ${p.field}: ${p.message.split(' (')[0]}`,
      );
      assert.deepEqual(problems, [
        '4:9: metadata.name: "../../kube-system/secrets/x" is not a valid DNS-1123 subdomain',
        '5:14: metadata.namespace: "team a" is not a valid DNS-1123 label',
        '11:9: metadata.name: "team.b" is not a valid DNS-1123 label',
      ]);
    });

    it('crossplane.io/poll-interval: a Go duration up to 24h (1000h would overflow the timer into a hot loop)', () => {
      const d = join(dir, 'poll');
      mkdirSync(d);
      const cases: Array<[string, string | undefined]> = [
        ['1000h', '"1000h" is longer than 24h, the longest poll interval'],
        ['5', '"5" is not a Go duration'],
        ['5 m', '"5 m" is not a Go duration'],
        ['0s', '"0s" is not positive'],
        ['-1m', '"-1m" is not positive'],
        ['24h', undefined],
        ['1h30m', undefined],
        ['.5m', undefined],
        ['90s', undefined],
      ];
      for (const [i, [value]] of cases.entries()) {
        writeFileSync(
          join(d, `p${i}.yaml`),
          vm(`p${i}`, '', { annotations: `    crossplane.io/poll-interval: "${value}"\n` }),
        );
      }
      const r = validateManifests([d]);
      for (const [i, [value, want]] of cases.entries()) {
        const got = r.problems.filter((p) => p.file.endsWith(`p${i}.yaml`));
        if (!want) {
          assert.deepEqual(got, [], value);
          continue;
        }
        assert.equal(got.length, 1, value);
        assert.equal(got[0]!.field, 'metadata.annotations.crossplane.io/poll-interval');
        assert.equal(`${got[0]!.line}:${got[0]!.column}`, '6:34', value);
        assert.ok(got[0]!.message.startsWith(want), got[0]!.message);
        assert.ok(got[0]!.message.includes('expected a Go duration from 1ms to 24h, such as 30s, 5m or 1h30m'));
      }
    });

    it('apply and delete refuse such manifests before they contact anything or write the state file', async () => {
      const d = join(dir, 'refuse');
      mkdirSync(d);
      writeFileSync(join(d, 'vm.yaml'), vm('web').replace('  name: web\n', '  name: web\n  namespace: "prod\\n"\n'));
      // The site's endpoint: a listener that counts connections (nothing may connect).
      let connections = 0;
      const server = createServer((s) => {
        connections++;
        s.destroy();
      });
      await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
      const port = (server.address() as { port: number }).port;
      const cfg = join(d, 'config.yaml');
      writeFileSync(cfg, SEED_CONFIG.replace(/https:\/\/192\.168\.11\.1[01]:8006/g, `https://127.0.0.1:${port}`));
      const state = join(d, 'state.json');
      try {
        for (const command of [applyCommand, deleteCommand]) {
          const c = capture();
          await assert.rejects(
            command({ files: [join(d, 'vm.yaml')], config: cfg, state, quiet: true, out: c.out, timeoutMs: 2_000 }),
            (e: unknown) =>
              e instanceof ManifestError &&
              e.message.includes(':5:14: metadata.namespace: "prod\\n" is not a valid DNS-1123 label'),
          );
        }
        assert.equal(connections, 0);
        assert.equal(existsSync(state), false, 'no state file written');
      } finally {
        server.close();
      }
    });
  });
});
