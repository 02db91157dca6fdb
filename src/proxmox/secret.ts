/**
 * A credential value that cannot leak by accident: `String()`, template literals, `JSON.stringify`
 * and `util.inspect` all print `[redacted]`; only `reveal()` gives the value. Every secret the client
 * holds (token secret, password, ticket, CSRF token) is wrapped in one.
 */
const REDACTED = '[redacted]';

export class Secret {
  readonly #value: string;

  constructor(value: string) {
    this.#value = value;
  }

  /** The value itself: only for building the request that needs it. */
  reveal(): string {
    return this.#value;
  }

  get empty(): boolean {
    return this.#value.length === 0;
  }

  toString(): string {
    return REDACTED;
  }

  toJSON(): string {
    return REDACTED;
  }

  [Symbol.for('nodejs.util.inspect.custom')](): string {
    return `Secret(${REDACTED})`;
  }
}

/**
 * Removes every occurrence of the given secret values (and their URI-encoded forms) from a text.
 * Used on every message that may echo server or library text.
 */
export function scrub(text: string, secrets: Iterable<string>): string {
  let out = text;
  for (const s of secrets) {
    if (s.length < 4) continue; // too short to be a credential; replacing would mangle text
    for (const form of new Set([s, encodeURIComponent(s)])) {
      out = out.split(form).join(REDACTED);
    }
  }
  return out;
}
