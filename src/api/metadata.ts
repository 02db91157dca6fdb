/**
 * The rules Kubernetes applies to object metadata, for the places where no API server applies
 * them: the cluster-less CLI reads names and namespaces from files, and references to other
 * objects (a Secret's name in a spec) are plain strings even in a cluster. A name that is not a
 * DNS-1123 name would otherwise reach a VM's ownership marker, a state-file key or an API path
 * (`../../other-namespace/secrets/x`).
 *
 * Also the annotations the engine reads whose values Kubernetes does not check:
 * `crossplane.io/poll-interval` (a Go duration).
 */

/** apimachinery's DNS-1123 label (namespaces, and each part of a subdomain). */
export const DNS1123_LABEL_PATTERN = '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$';
export const DNS1123_LABEL_MAX = 63;
/** apimachinery's DNS-1123 subdomain (the names of most kinds: Secrets, custom resources...). */
export const DNS1123_SUBDOMAIN_PATTERN = '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$';
export const DNS1123_SUBDOMAIN_MAX = 253;

const LABEL = new RegExp(DNS1123_LABEL_PATTERN);
const SUBDOMAIN = new RegExp(DNS1123_SUBDOMAIN_PATTERN);

export type NameRule = 'label' | 'subdomain';

/** What a DNS-1123 name may be, in the words of an error message. */
export function nameAllowed(rule: NameRule): string {
  return rule === 'label'
    ? `at most ${DNS1123_LABEL_MAX} characters: lower-case letters, digits and '-', starting and ending with a letter or digit`
    : `at most ${DNS1123_SUBDOMAIN_MAX} characters: lower-case letters, digits, '-' and '.', each dot-separated part starting and ending with a letter or digit`;
}

export function isDns1123(value: string, rule: NameRule): boolean {
  return rule === 'label'
    ? value.length <= DNS1123_LABEL_MAX && LABEL.test(value)
    : value.length <= DNS1123_SUBDOMAIN_MAX && SUBDOMAIN.test(value);
}

/** The nearest valid name (for a "try ..." hint), or undefined when nothing sensible is left. */
export function suggestName(value: string, rule: NameRule): string | undefined {
  const part = (p: string) =>
    p
      .toLowerCase()
      .replace(/[^a-z0-9-]+/g, '-')
      .replace(/^-+|-+$/g, '');
  const parts = rule === 'label' ? [part(value)] : value.split('.').map(part).filter(Boolean);
  const s = parts
    .join('.')
    .slice(0, rule === 'label' ? DNS1123_LABEL_MAX : DNS1123_SUBDOMAIN_MAX)
    .replace(/[^a-z0-9]+$/, '');
  return s && s !== value && isDns1123(s, rule) ? s : undefined;
}

/** Why `value` is not a valid name, with what is allowed and a fix; undefined when it is valid. */
export function nameProblem(value: unknown, rule: NameRule): string | undefined {
  if (typeof value !== 'string') return `must be a string (${nameAllowed(rule)}); found ${JSON.stringify(value)}`;
  if (isDns1123(value, rule)) return undefined;
  const kind = rule === 'label' ? 'DNS-1123 label' : 'DNS-1123 subdomain';
  const hint = suggestName(value, rule);
  // A YAML block scalar (`|`) keeps its final line break, which is easy to miss.
  const space = /\s/.test(value) ? ' it contains a space or line break;' : '';
  return `${JSON.stringify(value)} is not a valid ${kind} (${nameAllowed(rule)});${space}${hint ? ` try '${hint}'` : ' rename it'}`;
}

// --- Go durations (crossplane.io/poll-interval) -----------------------------------------------------

export const POLL_INTERVAL_ANNOTATION = 'crossplane.io/poll-interval';
/** The longest poll interval accepted: a day is already far longer than any useful poll. */
export const POLL_INTERVAL_MAX_MS = 24 * 3_600_000;

const GO_UNITS: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  µs: 1e-3, // U+00B5 micro sign
  μs: 1e-3, // U+03BC Greek mu
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};

/**
 * A duration as Go's time.ParseDuration reads it (what crossplane-runtime uses for the annotation),
 * in milliseconds: an optional sign, then one or more decimal numbers each with a unit
 * (`1h30m`, `1.5s`, `.5m`, `300ms`), or `0`. Undefined when Go would refuse it.
 */
export function parseGoDuration(s: string): number | undefined {
  const m = /^([-+]?)(.*)$/s.exec(s)!;
  const body = m[2]!;
  if (body === '0') return 0;
  if (!body) return undefined;
  const part = /(\d*)(?:\.(\d*))?([a-zµμ]+)/gy;
  let total = 0;
  let at = 0;
  for (let p = part.exec(body); p; p = part.exec(body)) {
    const [, int = '', frac, unit = ''] = p;
    if (!int && !frac) return undefined; // a unit with no number (`.h`, `h`)
    const scale = GO_UNITS[unit];
    if (scale === undefined) return undefined;
    total += Number(`${int || '0'}.${frac || '0'}`) * scale;
    at = part.lastIndex;
  }
  if (at !== body.length) return undefined;
  // Go's limit: an int64 of nanoseconds (about 2562047h).
  if (total * 1e6 > 2 ** 63 - 1) return undefined;
  return m[1] === '-' ? -total : total;
}

/** Why a poll-interval annotation value would not work, with what is allowed; undefined when it is fine. */
export function pollIntervalProblem(value: unknown): string | undefined {
  const allowed = 'a Go duration from 1ms to 24h, such as 30s, 5m or 1h30m';
  if (typeof value !== 'string') return `must be ${allowed}; found ${JSON.stringify(value)}`;
  // No trimming: Go does not trim either, so ' 5m' would silently fall back to the default.
  const ms = parseGoDuration(value);
  const found = JSON.stringify(value);
  if (ms === undefined) return `${found} is not a Go duration (expected ${allowed}; a bare number has no unit)`;
  if (ms <= 0) return `${found} is not positive (expected ${allowed}, or no annotation for the default, 1m)`;
  if (ms < 1) return `${found} is shorter than 1ms (expected ${allowed})`;
  if (ms > POLL_INTERVAL_MAX_MS) return `${found} is longer than 24h, the longest poll interval (expected ${allowed})`;
  return undefined;
}
