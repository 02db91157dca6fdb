/**
 * The one place `@kubernetes/client-node` is loaded, for its `KubeConfig` (kubeconfig files, the
 * in-cluster config, contexts and the authenticators: credentials.ts), without the generated API
 * it drags in: `dist/config.js` imports `./gen/index.js` for two names that only
 * `KubeConfig.makeApiClient` uses, and that index loads every generated model and API class of
 * Kubernetes (about 45 MB of the controller's RSS, a fifth of its budget at 10,000 resources,
 * for code this project never calls: it talks REST itself, api.ts).
 *
 * A module resolve hook (node:module registerHooks) gives `config.js`, and only it, a module of
 * those two names taken from their own small files (`gen/configuration.js`, `gen/servers.js`).
 * Everything else loads as published: another importer of `./gen/index.js` (the package's own
 * index, when a test imports it) gets the real one. What `config.js` imports from the index is
 * checked against what the shim gives (test/kube/client-node.test.ts), so an upgrade that needs
 * more fails that test rather than the controller's start.
 */
import { registerHooks } from 'node:module';

/** The names `dist/config.js` of client-node 2.x imports from `./gen/index.js`, and their modules. */
export const GEN_SHIM_EXPORTS: Record<string, string> = {
  createConfiguration: './configuration.js',
  ServerConfiguration: './servers.js',
};

const CONFIG_MODULE = '/@kubernetes/client-node/dist/config.js';

function shimFor(parentURL: string): string {
  const gen = new URL('./gen/', parentURL);
  const lines = Object.entries(GEN_SHIM_EXPORTS).map(
    ([name, file]) => `export { ${name} } from ${JSON.stringify(new URL(file, gen).href)};`,
  );
  return `data:text/javascript,${encodeURIComponent(lines.join('\n'))}`;
}

registerHooks({
  resolve(specifier, context, nextResolve) {
    if (specifier === './gen/index.js' && context.parentURL?.endsWith(CONFIG_MODULE))
      return { url: shimFor(context.parentURL), shortCircuit: true, format: 'module' };
    return nextResolve(specifier, context);
  },
});

const loaded = (await import('@kubernetes/client-node/dist/config.js')) as typeof import('@kubernetes/client-node');

export const KubeConfig = loaded.KubeConfig;
export type KubeConfig = import('@kubernetes/client-node').KubeConfig;
export type User = import('@kubernetes/client-node').User;
