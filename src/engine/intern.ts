/**
 * String interning for what holds many objects parsed or keyed apart (the Kubernetes informer's
 * cache, the local store, an apply's manifests, every map keyed by `namespace/name`): each parse,
 * copy or key built gives every value a string of its own, so 10,000 resources hold 10,000 copies
 * of the same kind, namespace, site, node, image, condition type and reason, and several of each
 * key. internString returns the one copy V8 keeps in its string table.
 */

/** Longer strings (messages, certificates) are rarely shared, and not worth hashing. */
const INTERN_MAX_LENGTH = 256;
/** What V8 keeps as an array index, not as an interned name: such keys would come back as new strings. */
const ARRAY_INDEX = /^(?:0|[1-9][0-9]*)$/;

/**
 * The strings interned lately, each mapped to itself: a hit costs a hash lookup, where V8's own
 * internalization of a fresh object's key costs about 1 µs (keyOf alone is called millions of
 * times in a large apply). Cleared when full, so it keeps nothing alive for long.
 */
const recent = new Map<string, string>();
const RECENT_MAX = 1 << 15;
/** The one object whose key internalizes a string (a dictionary: adding and deleting keys is cheap). */
const internalizer: Record<string, number> = Object.create(null);

/**
 * The one copy of `s` V8 keeps in its string table: a property name is interned, and the table
 * holds its strings weakly, so a value nobody holds any more (an old resourceVersion, a name of a
 * deleted object) goes with its last holder, which a Map of our own would keep for ever.
 */
export function internString(s: string): string {
  if (s.length > INTERN_MAX_LENGTH) return s;
  const hit = recent.get(s);
  if (hit !== undefined) return hit;
  if (ARRAY_INDEX.test(s)) return s;
  internalizer[s] = 0;
  let interned = s;
  for (const k in internalizer) interned = k;
  delete internalizer[s];
  if (recent.size >= RECENT_MAX) recent.clear();
  recent.set(interned, interned);
  return interned;
}

/**
 * `v` with every string value in it (at any depth, in place) replaced by its interned copy: the
 * same values, one copy of each among all the cached objects. (It also lets go of the
 * text a value was sliced from: a parser's substrings of 13 characters or more are views that keep
 * their whole source file alive.)
 */
export function internStrings<V>(v: V): V {
  if (typeof v === 'string') return internString(v) as V;
  if (typeof v !== 'object' || v === null) return v;
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) v[i] = internStrings(v[i]);
    return v;
  }
  const o = v as Record<string, unknown>;
  for (const k in o) {
    const x = o[k];
    if (typeof x === 'string' || (typeof x === 'object' && x !== null)) o[k] = internStrings(x);
  }
  return v;
}
