/**
 * A value built on first use and kept: the kinds' TypeBox schemas, which a command that never
 * checks or prints a resource of that kind (`validate` of a valid fleet in the bundle, `--help`)
 * then never builds. TypeBox's builders are a part of every cold start that runs them.
 */
export function builtOnce<T>(build: () => T): () => T {
  let built: T | undefined;
  let done = false;
  return () => {
    if (!done) {
      built = build();
      done = true;
    }
    return built as T;
  };
}
