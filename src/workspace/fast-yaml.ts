/**
 * The happy path's YAML reader: src/workspace/plain-yaml.ts for the manifests as people write
 * them, and for what it leaves, js-yaml's event parser and constructor, which read a manifest
 * directory in a fraction of the time the `yaml` package takes to build its Document nodes (those
 * carry the line and column of every value, which only a reported problem needs). It returns the
 * documents only when they are certainly what `yaml` would give (its YAML 1.2 core schema,
 * `toJS()` into plain objects), and undefined otherwise, so that the caller reads the file with
 * `yaml` as before: on any syntax error, tag, anchor or alias, directive, key that is not a
 * string (or is `__proto__` or `<<`), number that one library reads and the other does not, block
 * scalar with an indentation indicator, or document that is not a mapping. test/workspace/fast-yaml.test.ts holds it to `yaml` on every
 * YAML file of the repository and on generated and mutated documents.
 */
import {
  CORE_SCHEMA,
  constructFromEvents,
  defineMappingTag,
  defineScalarTag,
  EVENT_ID,
  mapTag,
  NOT_RESOLVED,
  parseEvents,
} from 'js-yaml';
import { plainDocuments } from './plain-yaml.ts';

/** Thrown from inside js-yaml's constructor when a value might differ from `yaml`'s. */
class NotCertain extends Error {}

/**
 * What `yaml`'s core schema reads as a number (its int, intOct, intHex, float, floatExp and
 * floatNaN tests). js-yaml reads the same texts, but leaves one whose value overflows (`1e999`, a
 * 400-digit integer) a string where `yaml` gives Infinity: such a text is left to `yaml`.
 */
const YAML_NUMBER =
  /^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+|[-+]?(?:\.[0-9]+|[0-9]+\.[0-9]*)|[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+|[-+]?\.(?:inf|Inf|INF)|\.nan|\.NaN|\.NAN)$/;
/**
 * js-yaml's core schema with two tags of ours, made on first use: the bundle loads js-yaml only
 * when plain-yaml leaves a file to it (scripts/build.ts, LAZY), and building this loads it.
 */
let schema: ReturnType<typeof CORE_SCHEMA.withTags> | undefined;
function jsYamlSchema(): ReturnType<typeof CORE_SCHEMA.withTags> {
  if (schema) return schema;
  // Comes after js-yaml's own int and float tags: a plain scalar reaches it only when neither read it.
  const unreadNumberTag = defineScalarTag('tag:provider-proxmox:unread-number', {
    implicit: true,
    implicitFirstChars: [...'-+.0123456789'],
    resolve: (source) => {
      if (YAML_NUMBER.test(source)) throw new NotCertain(source);
      return NOT_RESOLVED;
    },
    identify: () => false,
  });
  // `yaml`'s toJS() turns a key that is not a string into one by rules of its own (`1`, `null`,
  // `[a, b]`), keeps `__proto__` as an own key, and `<<` is a merge key in some of its modes: none
  // of that is guessed at here.
  const stringKeyMapTag = defineMappingTag(mapTag.tagName, {
    ...mapTag,
    addPair: (carrier, key, value) => {
      if (typeof key !== 'string' || key === '__proto__' || key === '<<') throw new NotCertain(String(key));
      return mapTag.addPair(carrier, key, value);
    },
  });
  schema = CORE_SCHEMA.withTags(stringKeyMapTag, unreadNumberTag);
  return schema;
}

/**
 * The documents of `text` that hold something (empty ones are skipped, as readManifestFile skips
 * them), each a mapping; undefined when `yaml` must read the file (see the top of this file).
 */
export function fastDocuments(text: string): Array<Record<string, unknown>> | undefined {
  return plainDocuments(text) ?? jsYamlDocuments(text);
}

/**
 * A block scalar header with an explicit indentation indicator (`|2`, `>-1`): js-yaml keeps a
 * trailing line of spaces beyond that indentation as content where `yaml` drops it (`|1` over the
 * lines `   #` and `   `). Anything that looks like one, even inside another scalar, is left to `yaml`.
 */
const INDENTATION_INDICATOR = /[|>][-+]?[1-9]/;

/** fastDocuments with js-yaml alone (the tests hold each reader to `yaml` on its own). */
export function jsYamlDocuments(text: string): Array<Record<string, unknown>> | undefined {
  if (INDENTATION_INDICATOR.test(text)) return undefined;
  try {
    const events = parseEvents(text, {});
    for (const e of events) {
      if (e.type === EVENT_ID.POP) continue;
      if (e.type === EVENT_ID.DOCUMENT) {
        if (e.directives.length) return undefined;
        continue;
      }
      // An alias carries its name as its anchor range.
      if (e.anchorStart !== -1 || (e.type !== EVENT_ID.ALIAS && e.tagStart !== -1)) return undefined;
    }
    const out: Array<Record<string, unknown>> = [];
    for (const v of constructFromEvents(events, { source: text, schema: jsYamlSchema() })) {
      if (v === null || v === undefined) continue;
      if (typeof v !== 'object' || Array.isArray(v)) return undefined;
      out.push(v as Record<string, unknown>);
    }
    return out;
  } catch {
    // A syntax error (yaml reports it with its position), or a NotCertain value.
    return undefined;
  }
}
