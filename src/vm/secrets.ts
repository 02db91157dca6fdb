/**
 * Cloud-init values from Secret references (the password, SSH keys). They are read through the
 * runtime's Secret source, kept in the resource's memory in the site for at most 30 s (or until the
 * references change), and only ever go into request bodies marked sensitive: never into status,
 * conditions, events or logs.
 */
import type { ProxmoxVM } from '../api/proxmoxvm.ts';
import { reason } from './conditions.ts';
import type { StepContext } from './context.ts';

const SECRET_TTL_MS = 30_000;

export async function loadSecrets(ctx: StepContext, r: ProxmoxVM): Promise<void> {
  const ci = r.spec.forProvider.cloudInit;
  const refs = [ci?.passwordSecretRef, ci?.sshKeysSecretRef].filter(Boolean);
  const refKey = JSON.stringify(refs);
  const m = ctx.memory;
  if (refs.length && m.secretsLoaded?.refs === refKey && ctx.site.now() - m.secretsLoaded.at < SECRET_TTL_MS) return;
  m.secrets = { sshKeys: [] };
  m.secretsLoaded = undefined;
  if (!refs.length) return;
  const source = ctx.options.secret;
  if (!source)
    throw reason(
      'SecretNotFound',
      "cloudInit Secret references need a Secret source: put the Secret among the manifests (apply) or in the resource's namespace (controller)",
    );
  const read = async (ref: { name: string; key: string; namespace?: string }, field: string) => {
    try {
      return await source(ref, r);
    } catch (e) {
      throw reason(
        'SecretNotFound',
        `${field}: Secret ${ref.namespace ? `${ref.namespace}/` : ''}${ref.name} key ${ref.key}: ${e instanceof Error ? e.message : String(e)}`,
        true,
      );
    }
  };
  if (ci?.passwordSecretRef)
    m.secrets.password = await read(ci.passwordSecretRef, 'spec.forProvider.cloudInit.passwordSecretRef');
  if (ci?.sshKeysSecretRef)
    m.secrets.sshKeys = (await read(ci.sshKeysSecretRef, 'spec.forProvider.cloudInit.sshKeysSecretRef'))
      .split('\n')
      .map((k) => k.trim())
      .filter(Boolean);
  m.secretsLoaded = { at: ctx.site.now(), refs: refKey };
}

/** The SSH keys of the spec, the userData and the Secret reference, in that order. */
export function sshKeys(ctx: StepContext, r: ProxmoxVM, ud: { readonly sshKeys: readonly string[] }): string[] {
  return [...(r.spec.forProvider.cloudInit?.sshKeys ?? []), ...ud.sshKeys, ...ctx.memory.secrets.sshKeys];
}

/** Remove the resource's Secret values from a text that Proxmox produced (a task's exit status). */
export function withoutSecrets(ctx: StepContext, text: string): string {
  let out = text;
  const values = [ctx.memory.secrets.password, ...ctx.memory.secrets.sshKeys].filter(
    (v): v is string => typeof v === 'string' && v.length >= 4,
  );
  for (const v of values) out = out.split(v).join('[redacted]');
  return out;
}
