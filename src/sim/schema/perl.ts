/**
 * Small helpers that reproduce the Perl semantics PVE's JSONSchema.pm relies on.
 */

/**
 * `$s =~ m/^...$/` for a regex written as `/^...$/`: Perl's `$` (without /m) also matches before
 * a final newline, so "pve\n" matches /^pve$/ in Perl.
 */
export function perlMatch(re: RegExp, s: string): boolean {
  if (re.test(s)) return true;
  return s.endsWith('\n') && re.test(s.slice(0, -1));
}

/** Perl truthiness of a string: everything but '' and '0'. */
export function perlTrue(s: string | undefined): boolean {
  return s !== undefined && s !== '' && s !== '0';
}

/** Perl's `split(/sep/, $s)`: trailing empty fields are removed. */
export function perlSplit(s: string, sep: string | RegExp): string[] {
  const parts = s.split(sep);
  while (parts.length && parts[parts.length - 1] === '') parts.pop();
  return parts;
}

/** PVE::Tools::split_list: NUL-separated, or separated by any of `,` `;` and whitespace. */
export function splitList(text: string | undefined): string[] {
  const t = text ?? '';
  if (t.includes('\0')) return perlSplit(t, '\0');
  return perlSplit(t.replace(/[,;]/g, ' ').replace(/^\s+/, ''), /\s+/);
}

/** JSONSchema::parse_boolean */
export function parseBoolean(s: string): '1' | '0' | undefined {
  if (perlMatch(/^(1|on|yes|true)$/i, s)) return '1';
  if (perlMatch(/^(0|off|no|false)$/i, s)) return '0';
  return undefined;
}

/** JSONSchema::is_number (the regex from perlretut) */
export function isNumber(s: string): boolean {
  return perlMatch(/^[+-]?(\d+\.\d+|\d+\.|\.\d+|\d+)([eE][+-]?\d+)?$/, s);
}

/** JSONSchema::is_integer */
export function isInteger(s: string): boolean {
  return perlMatch(/^[+-]?\d+$/, s);
}

/**
 * How Perl prints a number decoded from JSON: integers exactly, other values like printf('%.15g').
 */
export function perlNumber(n: number): string {
  if (Number.isNaN(n)) return 'NaN';
  if (!Number.isFinite(n)) return n > 0 ? 'Inf' : '-Inf';
  if (Number.isInteger(n) && Math.abs(n) < 1e15) return String(n);
  const [mant, expStr] = n.toExponential(14).split('e') as [string, string];
  const exp = Number(expStr);
  const trim = (x: string) => (x.includes('.') ? x.replace(/0+$/, '').replace(/\.$/, '') : x);
  if (exp < -4 || exp >= 15) {
    const e = Math.abs(exp);
    return `${trim(mant)}e${exp < 0 ? '-' : '+'}${e < 10 ? '0' : ''}${e}`;
  }
  return trim(n.toFixed(Math.max(0, 14 - exp)));
}

/** Perl `length()` of a character string: code points, not UTF-16 units. */
export function perlLength(s: string): number {
  let n = 0;
  for (const _ of s) n++;
  return n;
}
