/**
 * String interning for caches that hold many objects parsed apart (the Kubernetes informer's
 * cache, the local store): each parse or copy gives every value a string of its own, so 10,000
 * resources hold 10,000 copies of the same kind, namespace, site, node, image, condition type and
 * reason. internString returns the one copy V8 keeps in its string table.
 */

/** Longer strings (messages, certificates) are rarely shared, and not worth hashing. */
const INTERN_MAX_LENGTH = 256;
/** What V8 keeps as an array index, not as an interned name: such keys would come back as new strings. */
const ARRAY_INDEX = /^(?:0|[1-9][0-9]*)$/;

/**
 * The one copy of `s` V8 keeps in its string table: a property name is interned, and the table
 * holds its strings weakly, so a value nobody holds any more (an old resourceVersion, a name of a
 * deleted object) goes with its last holder, which a Map of our own would keep for ever.
 */
export function internString(s: string): string {
  if (s.length > INTERN_MAX_LENGTH || ARRAY_INDEX.test(s)) return s;
  for (const k in { [s]: 0 }) return k;
  return s;
}
