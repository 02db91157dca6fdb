/**
 * How the ProxmoxVM steps report: `status.atProvider` (the step, the VM's state), the Ready
 * condition, and the translation of Proxmox client errors into reasons a user can act on. Also
 * the one rule about errors that the zero-duplicate promise rests on: a mutation that was sent
 * and got no answer has an *unknown* outcome, never a failed one.
 */
import type { AtProvider, ProxmoxVM } from '../api/proxmoxvm.ts';
import { setCondition } from '../engine/resource.ts';
import { ReasonedError } from '../engine/types.ts';
import { PveError, TlsError, UnavailableError } from '../proxmox/index.ts';
import { tlsFix } from '../proxmox/tls.ts';

/**
 * Reasons that no amount of retrying fixes: only a change of the spec, the credentials, the
 * ProviderConfig or the cluster does. Backed off to the cap after one confirmation (the
 * controller), and `apply` stops waiting for them.
 */
export const PERMANENT_REASONS: ReadonlySet<string> = new Set([
  'InvalidSpec',
  'InvalidExternalName',
  'BridgeNotFound',
  'ImageNotFound',
  'ImageNotImportable',
  'TemplateNotFound',
  'StorageNotFound',
  'StorageCannotHoldImages',
  'NodeNotFound',
  'InsufficientCapacity',
  'VMIDConflict',
  'VMIDRangeExhausted',
  'SiteNotFound',
  'SiteNotSpecified',
  'ProviderConfigNotFound',
  'CredentialsNotFound',
  'PermissionDenied',
  'AuthenticationFailed',
  'TLSVerificationFailed',
  'PlacementChangeRefused',
  'CreateInterrupted',
  'SnippetsUnavailable',
  'CloneAcrossNodes',
  'SnippetStorageNotFound',
  'PasswordInSnippetRefused',
  'SshHostKeyMismatch',
  'SshAuthenticationFailed',
  'DiskSizeStale',
  'DiskVolumeMissing',
]);

export function reason(r: string, msg: string, retryable = false): ReasonedError {
  const e = new ReasonedError(r, msg, retryable);
  e.permanent = !retryable && PERMANENT_REASONS.has(r);
  return e;
}

export function atProvider(r: ProxmoxVM): AtProvider {
  r.status ??= {};
  r.status.atProvider ??= {};
  return r.status.atProvider;
}

export function setStep(r: ProxmoxVM, step: string): void {
  atProvider(r).step = step;
}

export function isReady(r: ProxmoxVM): boolean {
  return r.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
}

export function ready(r: ProxmoxVM, status: 'True' | 'False', why: string, message?: string): void {
  setCondition(
    r,
    { type: 'Ready', status, reason: why, ...(message ? { message } : {}), observedGeneration: r.metadata.generation },
    Date.now(),
  );
}

/**
 * The `PendingReboot` condition: True while Proxmox holds config changes of a running VM until
 * its next boot (`GET .../pending`), with the keys and the fix; False otherwise.
 */
export function pendingReboot(r: ProxmoxVM, keys: string[] | undefined, message?: string): void {
  setCondition(
    r,
    keys?.length
      ? {
          type: 'PendingReboot',
          status: 'True',
          reason: 'ChangesPending',
          ...(message ? { message } : {}),
          observedGeneration: r.metadata.generation,
        }
      : {
          type: 'PendingReboot',
          status: 'False',
          reason: 'NoPendingChanges',
          observedGeneration: r.metadata.generation,
        },
    Date.now(),
  );
}

/**
 * Whether a failed mutation may still have been applied: the request left this process and no
 * answer came back (connection reset after sending, a timeout, an abort while waiting). PVE runs
 * a handler to completion whether or not the client is still connected, so such a create may
 * exist, or may appear later (../shared/research/pve-failure-semantics.md, "Requests").
 */
export function outcomeUnknown(e: unknown): boolean {
  if (e instanceof UnavailableError) return e.requestSent;
  if (e instanceof PveError) return e.kind === 'timeout';
  // An abort (SIGTERM, lost leadership, the reconcile's deadline) after the request was handed to
  // the transport: we cannot know whether it reached Proxmox.
  return e instanceof Error && (e.name === 'AbortError' || e.name === 'TimeoutError');
}

/**
 * Credentials and certificate problems as the reasons they are (AuthenticationFailed,
 * PermissionDenied, TLSVerificationFailed: permanent, with their fix), whichever step met them;
 * any other error unchanged.
 */
export function credentialProblem(site: string, e: unknown): unknown {
  if (e instanceof PveError && (e.kind === 'authentication' || e.kind === 'permission' || e.kind === 'tls'))
    return explain(site, e);
  return e;
}

/**
 * A refusal for want of quorum (errors.ts NoQuorumError, or a task's exit status that says so):
 * retried at the normal backoff, nothing in the spec being wrong, with what a person checks and
 * does meanwhile.
 */
export function noQuorum(site: string, message: string): ReasonedError {
  return reason(
    'NoQuorum',
    `${message}. Site ${site}'s Proxmox cluster has no quorum: /etc/pve is read-only, so Proxmox refuses creates, starts, clones, migrations and config changes until the nodes that are up hold a majority of its votes again; the provider retries until then. Check: pvecm status on a node that is up. Fix: bring the missing node back; for a node gone for good, pvecm expected <votes of the nodes up> on a node that is up, once the missing one is surely off (two nodes that both think they have quorum corrupt /etc/pve)`,
    true,
  );
}

/** A Proxmox client error as a reason with its fix. */
export function explain(site: string, e: unknown): Error {
  if (e instanceof ReasonedError) return e;
  if (e instanceof PveError) {
    if (e.kind === 'locked' || e.kind === 'lock-timeout') return reason('Locked', e.message, true);
    if (e.kind === 'unavailable' || e.kind === 'timeout') return reason('Unavailable', e.message, true);
    if (e.kind === 'no-quorum') return noQuorum(site, e.message);
    if (e.kind === 'permission')
      return reason('PermissionDenied', `${e.message}. Fix: grant the privilege to the credentials of site ${site}`);
    if (e.kind === 'authentication')
      return reason('AuthenticationFailed', `${e.message}. Fix: check the credentials Secret of site ${site}`);
    if (e instanceof TlsError)
      return reason(
        'TLSVerificationFailed',
        `${e.message}. Fix: ${tlsFix('fingerprint', e.presentedFingerprint, `site ${site} of the ProviderConfig`)}; \`provider-proxmox doctor --config FILE\` shows the certificate`,
      );
    if (e.kind === 'unsupported') return reason('ImageNotImportable', e.message);
  }
  return e instanceof Error ? e : new Error(String(e));
}
