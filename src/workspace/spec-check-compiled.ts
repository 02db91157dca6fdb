/**
 * The precompiled spec checks of src/workspace/spec-check.ts, by kind. The sources have none (each
 * check is TypeBox's Value.Check there). `npm run build` (scripts/build.ts) bundles, in place of
 * this module, one that TypeBox's Code() generated from spec-check.ts's specSchemas() at that build.
 */
import type { CheckedKind } from './spec-check.ts';

export const COMPILED: Partial<Record<CheckedKind, (spec: unknown) => boolean>> = {};
