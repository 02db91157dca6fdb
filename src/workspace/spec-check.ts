/**
 * Whether a document's spec passes its kind's schema, asked before TypeBox's Value.Errors, which
 * walks the schema a second way to say what is wrong and where. A spec that passes has nothing to
 * say, and on the happy path (validate of a fleet with no problem) that walk was, after YAML, the
 * dearest part of reading manifests: interpreted, and cold in a fresh process.
 *
 * In the sources this is TypeBox's Value.Check. In the bundle, src/workspace/spec-check-compiled.ts
 * holds checks that TypeBox's Code() generated at build time from these specSchemas()
 * (scripts/build.ts): what Compile() would build at run time, without building it at every
 * start-up, and nothing cached that could go stale, since a build generates from the schemas it
 * bundles. test/workspace/spec-check.test.ts holds the generated checks to Value.Check.
 */
import { Value } from 'typebox/value';
import { IMAGE_KIND, imageSpecSchemas } from '../api/proxmoximage.ts';
import { TEMPLATE_KIND, templateSpecSchemas } from '../api/proxmoxtemplate.ts';
import { vmSchemas } from '../api/proxmoxvm-schema.ts';
import { COMPILED } from './spec-check-compiled.ts';

/**
 * The spec schema of each kind whose documents src/workspace/manifests.ts checks one by one. A
 * function, so that the schemas are built only when one is read (src/api/proxmoxvm-schema.ts,
 * vmSchemas): in the bundle a spec that passes reads none.
 */
export function specSchemas() {
  return {
    ProxmoxVM: vmSchemas().ProxmoxVMSpecSchema,
    [IMAGE_KIND]: imageSpecSchemas().ProxmoxImageSpecSchema,
    [TEMPLATE_KIND]: templateSpecSchemas().ProxmoxTemplateSpecSchema,
  } as const;
}

export type CheckedKind = keyof ReturnType<typeof specSchemas>;

/** True when `spec` passes the spec schema of `kind`: then Value.Errors would find nothing. */
export function specPasses(kind: CheckedKind, spec: unknown): boolean {
  const compiled = COMPILED[kind];
  return compiled ? compiled(spec) : Value.Check(specSchemas()[kind], spec);
}
