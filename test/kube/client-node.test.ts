/**
 * src/kube/client-node.ts loads client-node's KubeConfig without its generated API: the names
 * `dist/config.js` imports from `./gen/index.js` are all in the shim (so an upgrade that needs more
 * fails here, not at the controller's start), no generated model or API module is loaded, and the
 * KubeConfig it gives loads a kubeconfig and applies its credentials as the package's own does.
 * Each test file runs in a process of its own, so nothing has loaded client-node before this one.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { registerHooks } from 'node:module';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

// Registered before client-node.ts registers its own hook, so this one sees what that one passes on.
const resolved: string[] = [];
registerHooks({
  resolve(specifier, context, nextResolve) {
    const r = nextResolve(specifier, context);
    resolved.push(r.url);
    return r;
  },
});
const { GEN_SHIM_EXPORTS, KubeConfig } = await import('../../src/kube/client-node.ts');

const CONFIG_JS = fileURLToPath(import.meta.resolve('@kubernetes/client-node/dist/config.js'));

describe('client-node without its generated API', () => {
  it('the shim gives every name dist/config.js imports from ./gen/index.js', () => {
    const text = readFileSync(CONFIG_JS, 'utf8');
    const imports = [...text.matchAll(/import\s*\{([^}]*)\}\s*from\s*['"]\.\/gen\/index\.js['"]/g)];
    assert.equal(imports.length, 1, 'one import of ./gen/index.js in config.js');
    const names = imports[0]![1]!
      .split(',')
      .map((n) => n.trim().split(/\s+as\s+/)[0]!)
      .filter(Boolean)
      .sort();
    assert.deepEqual(names, Object.keys(GEN_SHIM_EXPORTS).sort());
  });

  it('loads no generated model or API module', () => {
    assert.ok(
      resolved.some((u) => u.endsWith('/@kubernetes/client-node/dist/config.js')),
      'config.js was loaded',
    );
    assert.ok(
      resolved.some((u) => u.endsWith('/dist/gen/configuration.js')),
      'the shim took createConfiguration from its own file',
    );
    const generated = resolved.filter((u) => /\/dist\/gen\/(index|models\/|apis\/|types\/)/.test(u));
    assert.deepEqual(generated, []);
  });

  it('its KubeConfig loads a kubeconfig and applies a bearer token and the CA', async () => {
    const kc = new KubeConfig();
    kc.loadFromString(
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'Config',
        clusters: [
          {
            name: 'c',
            cluster: {
              server: 'https://127.0.0.1:6443',
              'certificate-authority-data': Buffer.from('CA').toString('base64'),
            },
          },
        ],
        users: [{ name: 'u', user: { token: 'not-a-real-token' } }],
        contexts: [{ name: 'x', context: { cluster: 'c', user: 'u' } }],
        'current-context': 'x',
      }),
    );
    assert.equal(kc.getCurrentCluster()?.server, 'https://127.0.0.1:6443');
    const opts: { headers?: Record<string, string>; ca?: unknown } = {};
    await kc.applyToHTTPSOptions(opts as never);
    assert.equal(opts.headers?.Authorization, 'Bearer not-a-real-token');
    assert.equal(Buffer.from(opts.ca as Buffer).toString(), 'CA');
  });
});
