/** The Proxmox VE client: see docs/client.md. */
export * from './auth.ts';
export * from './capabilities.ts';
export * from './client.ts';
export * from './client-core.ts';
export * from './errors.ts';
export * from './metrics.ts';
export type { PveRequest, Upid as UpidString } from './requests.ts';
export * as requests from './requests.ts';
export * as clusterRequests from './requests-cluster.ts';
export type {
  CloneOptions,
  ConfigChange,
  CreateOptions,
  DeleteOptions,
  PowerAction,
  PowerOptions,
  QemuConfigInput,
} from './requests-qemu.ts';
export * as qemuRequests from './requests-qemu.ts';
export { backoffDelay } from './retry.ts';
export { Secret, scrub } from './secret.ts';
export * from './site.ts';
export { normalizeFingerprint, probeCertificate, type TlsSettings, tlsMode } from './tls.ts';
export { type HttpMethod, Transport } from './transport.ts';
export * from './types.ts';
export * from './upid.ts';
