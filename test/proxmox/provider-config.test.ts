/** ProviderConfig schema and loader: the simulator's printed config loads; errors name file:line and field. */
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ProviderConfigSchema } from '../../src/api/provider-config.ts';
import { ConfigError, loadProviderConfig, parseProviderConfig } from '../../src/api/provider-config-load.ts';
import { siteConcurrency, siteSecret, siteVmidRange } from '../../src/api/provider-config-site.ts';
import { clientForSite, siteCredentials, siteTls } from '../../src/proxmox/site.ts';
import type { Simulator } from '../../src/sim/index.ts';
import { providerConfigYaml } from '../../src/sim/provider-config.ts';
import { exposed, sim, TOKEN_SECRET } from './helpers.ts';

const FP = 'AB:'.repeat(31) + 'CD';

function yamlOf(spec: string, extra = ''): string {
  return `apiVersion: v1
kind: Secret
metadata:
  name: creds
  namespace: crossplane-system
stringData:
  tokenid: root@pam!provider
  token: ${TOKEN_SECRET}
---
apiVersion: proxmox.sankofa.io/v1alpha1
kind: ClusterProviderConfig
metadata:
  name: default
spec:
  credentials:
    source: Secret
    secretRef:
      name: creds
      namespace: crossplane-system
${spec}${extra}`;
}

const GOOD_SITES = `  sites:
    - name: site-1
      endpoints:
        - https://pve1.example:8006
        - https://pve2.example:8006/api2/json
      nodes: [pve1, pve2]
      tls:
        fingerprint: ${FP}
      concurrency:
        perNode: 3
      vmidRange:
        min: 1000
        max: 1999
`;

function problems(text: string): string[] {
  try {
    parseProviderConfig(text, 'pc.yaml');
  } catch (e) {
    assert.ok(e instanceof ConfigError, String(e));
    return [...e.problems];
  }
  throw new Error('expected a ConfigError');
}

describe('ProviderConfig: schema', () => {
  it('is one TypeBox source: a JSON Schema with the fields', () => {
    const js = JSON.parse(JSON.stringify(ProviderConfigSchema)) as {
      properties: { spec: { properties: Record<string, unknown> } };
    };
    assert.deepEqual(Object.keys(js.properties.spec.properties).sort(), [
      'concurrency',
      'credentials',
      'installation',
      'sites',
      'vmidRange',
    ]);
  });

  it('a good config loads, with defaults', () => {
    const l = parseProviderConfig(yamlOf(GOOD_SITES), 'pc.yaml');
    const site = l.config.spec.sites[0]!;
    assert.equal(site.name, 'site-1');
    assert.deepEqual(siteConcurrency(l.config, site), { perNode: 3, perStorage: 2, requests: 16 });
    assert.deepEqual(siteVmidRange(l.config, site), { min: 1000, max: 1999 });
    assert.deepEqual(siteTls(site), { fingerprints: [FP] });
    assert.equal(siteSecret(l, 'site-1').data.tokenid, 'root@pam!provider');
    const creds = siteCredentials(l, 'site-1');
    assert.equal(creds.kind, 'token');
    assert.equal(l.lineOf('spec.sites[0].tls'), 26);
    assert.equal(l.lineOf('spec.sites[0].endpoints[1]'), 24);
  });
});

describe('ProviderConfig: errors name file:line and field', () => {
  it('unknown field, bad fingerprint, bad endpoint, bad site name', () => {
    const p = problems(
      yamlOf(`  sites:
    - name: Site_1
      endpoint: https://x:8006
      endpoints:
        - ftp://pve1:8006
      tls:
        fingerprint: nope
`),
    );
    assert.ok(p.includes('pc.yaml:21: spec.sites[0].name: must be a lower-case DNS label (a-z, 0-9, -)'), p.join('\n'));
    assert.ok(p.includes('pc.yaml:22: spec.sites[0]: unknown field endpoint'), p.join('\n'));
    assert.ok(
      p.includes(
        'pc.yaml:24: spec.sites[0].endpoints[0]: must be an endpoint URL like https://pve1.example:8006 (no path, no credentials)',
      ),
      p.join('\n'),
    );
  });

  it('fingerprint format is checked after the schema', () => {
    const p = problems(yamlOf(GOOD_SITES.replace(FP, 'AB:CD')));
    assert.deepEqual(p, [
      'pc.yaml:27: spec.sites[0].tls.fingerprint: must be a SHA-256 certificate fingerprint: 32 hex bytes like AB:CD:... (see `pvenode cert info`)',
    ]);
  });

  it('one TLS mode only; vmidRange order; duplicate sites', () => {
    const text = yamlOf(
      GOOD_SITES.replace(
        `        fingerprint: ${FP}\n`,
        `        fingerprint: ${FP}\n        insecureSkipTLSVerify: true\n`,
      )
        .replace('min: 1000', 'min: 3000')
        .concat('    - name: site-1\n      endpoints: [https://pve3.example:8006]\n'),
    );
    const p = problems(text);
    assert.ok(
      p.some((x) => /pc\.yaml:26: spec\.sites\[0\]\.tls: set only one of/.test(x)),
      p.join('\n'),
    );
    assert.ok(
      p.some((x) => /spec\.sites\[0\]\.vmidRange: min \(3000\) is greater than max \(1999\)/.test(x)),
      p.join('\n'),
    );
    assert.ok(
      p.some((x) => /pc\.yaml:\d+: spec\.sites\[1\]\.name: duplicate site name 'site-1'/.test(x)),
      p.join('\n'),
    );
  });

  it('missing required fields and a wrong apiVersion', () => {
    const p = problems(
      yamlOf('  sites:\n    - name: a\n').replace('proxmox.sankofa.io/v1alpha1', 'proxmox.sankofa.io/v1'),
    );
    assert.ok(p.some((x) => /^pc\.yaml:\d+: (\(top level\)|apiVersion): /.test(x)) || p.length > 0);
    const p2 = problems(yamlOf('  sites:\n    - name: a\n'));
    assert.ok(p2.includes('pc.yaml:21: spec.sites[0]: missing required field endpoints'), p2.join('\n'));
  });

  it('YAML syntax errors carry the line', () => {
    const p = problems('kind: ClusterProviderConfig\nspec:\n  sites: [\n');
    assert.match(p[0]!, /^pc\.yaml:\d+: YAML: /);
  });

  it('ClusterProviderConfig secret references need a namespace', () => {
    const p = problems(yamlOf(GOOD_SITES).replace('      namespace: crossplane-system\n', ''));
    assert.ok(
      p.some((x) => /spec\.credentials\.secretRef\.namespace: is required in a ClusterProviderConfig/.test(x)),
      p.join('\n'),
    );
  });

  it('a missing Secret is reported at the reference, never with secret values', () => {
    const text = yamlOf(GOOD_SITES).replace('name: creds\n  namespace', 'name: other\n  namespace');
    const l = parseProviderConfig(text, 'pc.yaml');
    let err: unknown;
    try {
      siteSecret(l, 'site-1');
    } catch (e) {
      err = e;
    }
    assert.ok(err instanceof ConfigError);
    assert.match(
      err.message,
      /^pc\.yaml:17: spec\.credentials\.secretRef: Secret crossplane-system\/creds is not in this file/,
    );
    assert.ok(!exposed(err).includes(TOKEN_SECRET));
  });

  it('a bad Secret names the Secret but not its value', () => {
    const text = yamlOf(GOOD_SITES).replace('tokenid: root@pam!provider', 'tokenid: not-a-token-id');
    const l = parseProviderConfig(text, 'pc.yaml');
    assert.throws(
      () => siteCredentials(l, 'site-1'),
      (e: Error) => {
        assert.match(
          e.message,
          /Secret crossplane-system\/creds \(pc\.yaml:1\): invalid API token id 'not-a-token-id'/,
        );
        assert.ok(!exposed(e).includes(TOKEN_SECRET));
        return true;
      },
    );
  });

  it('base64 data and separate secret files', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'pc-'));
    try {
      const cfg = yamlOf(GOOD_SITES).split('---\n')[1]!;
      await writeFile(join(dir, 'pc.yaml'), cfg);
      await writeFile(
        join(dir, 'secret.yaml'),
        `apiVersion: v1\nkind: Secret\nmetadata: {name: creds, namespace: crossplane-system}\ndata:\n  username: ${Buffer.from('root@pam').toString('base64')}\n  password: ${Buffer.from('pw-from-file').toString('base64')}\n`,
      );
      const l = await loadProviderConfig(join(dir, 'pc.yaml'), { secretFiles: [join(dir, 'secret.yaml')] });
      const c = siteCredentials(l, 'site-1');
      assert.equal(c.kind, 'password');
      assert.equal(c.kind === 'password' && c.password.reveal(), 'pw-from-file');
      await assert.rejects(loadProviderConfig(join(dir, 'missing.yaml')), /missing\.yaml: cannot read: ENOENT/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('ProviderConfig: the simulator prints a config the client can use', () => {
  let s: Simulator;
  before(async () => {
    s = await sim('8.4');
  });
  after(async () => {
    await s.close();
  });

  it('loads, and a client for each site talks to it', async () => {
    const l = parseProviderConfig(providerConfigYaml(s), 'sim.yaml');
    assert.deepEqual(
      l.config.spec.sites.map((x) => x.name),
      ['site-1', 'site-2'],
    );
    for (const site of l.config.spec.sites) {
      const c = clientForSite(l, site.name, { retry: { attempts: 1 } });
      const nodes = await c.listNodes();
      assert.deepEqual(
        nodes.map((n) => n.node),
        site.nodes,
      );
      await c.close();
    }
  });
});
