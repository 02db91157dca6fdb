/**
 * The ProviderConfig source of the cluster-less commands: the one ProviderConfig file they loaded
 * (--config). A resource that names another ProviderConfig gets an error saying which name the
 * file holds and how to fix it.
 */

import type { LoadedProviderConfig } from '../api/provider-config-load.ts';
import type { ProviderConfigSource } from '../vm/connector.ts';

export class FileConfigSource implements ProviderConfigSource {
  private readonly loaded: LoadedProviderConfig;
  constructor(loaded: LoadedProviderConfig) {
    this.loaded = loaded;
  }
  async get(ref: { kind?: string; name: string }): Promise<LoadedProviderConfig> {
    const name = this.loaded.config.metadata.name;
    if (ref.name !== name) {
      throw new Error(
        `ProviderConfig '${ref.name}' not found: ${this.loaded.file} holds '${name}' (fix spec.providerConfigRef.name or pass --config)`,
      );
    }
    return this.loaded;
  }
}
