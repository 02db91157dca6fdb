/**
 * The first of the happy path's YAML readers: manifests as people write them (block mappings and
 * sequences, plain and simple quoted scalars, `|` literals, one-line flow lists) read line by line
 * with a few regular expressions, which Node runs as native code; js-yaml's parser walks every
 * character in interpreted JavaScript, and on a fresh process (every `validate`) that walk, and
 * loading js-yaml at all, was most of reading the seed fleet. Like src/workspace/fast-yaml.ts,
 * which calls it first, it returns the documents only when they are certainly what `yaml` would
 * give (its YAML 1.2 core schema, `toJS()` into plain objects), and undefined for anything outside
 * that subset: a tab, a carriage return or an unusual character anywhere, a quoted or
 * non-string key, an escape, a folded or kept block scalar, an anchor, alias, tag or directive, a
 * scalar that spans lines, a flow collection that is not a list of plain words, a duplicate key,
 * a number it does not read exactly as `yaml` does, a document that is not a mapping. Then the
 * caller reads the file another way. test/workspace/fast-yaml.test.ts holds it to `yaml` the way
 * it holds fast-yaml.
 */

/** A document's line: its indentation and what follows it (a sequence entry's content is re-read in place). */
interface Line {
  indent: number;
  text: string;
}

/** Thrown when the text leaves the subset; caught at the top, where it becomes undefined. */
class NotPlain extends Error {}

const notPlain = (why: string): never => {
  throw new NotPlain(why);
};

/** Characters outside the subset: controls, tabs, carriage returns, NEL, NBSP, line separators, BOM. */
const UNUSUAL = /[\u0000-\u0009\u000b-\u001f\u007f-\u00a0\u2028\u2029\ufeff]/;
/** A block mapping's entry: a key of a manifest's usual characters, a colon, then nothing or a space. */
const ENTRY = /^([A-Za-z0-9_][A-Za-z0-9_./-]*):(?:$| +(.*)$)/;
/** A block sequence's entry: a dash, then nothing or spaces and the content. */
const ITEM = /^-(?:$|( +)(.*)$)/;
const BLANK_OR_COMMENT = /^ *(?:#.*)?$/;
const NOT_SPACE = /[^ ]/;
const DOCUMENT_START = /^--- *$/;
/** `|` or `|-`: a literal block scalar, clipped or stripped. */
const LITERAL = /^\|(-?) *$/;
const DOUBLE_QUOTED = /^"([^"\\]*)"(?: +#.*)? *$/;
const SINGLE_QUOTED = /^'((?:[^']|'')*)'(?: +#.*)? *$/;
/** A one-line flow list of plain words (`[sudo]`, `[a, b]`, `[]`). */
const FLOW_LIST = /^\[([^[\]{}#"'`:?!&*|>%@,]*(?:,[^[\]{}#"'`:?!&*|>%@,]*)*)\](?: +#.*)? *$/;
const FLOW_WORD = /^(?:[A-Za-z0-9_./=+]|-[A-Za-z0-9])[A-Za-z0-9_./=+ -]*$/;
const EMPTY_MAP = /^\{ *\}(?: +#.*)? *$/;
/** What may start a plain scalar here: a character that is no indicator, or `-` before a letter or digit. */
const PLAIN_START = /^(?:[^-?:,[\]{}#&*!|>'"%@`\s]|-[A-Za-z0-9])/;
const COMMENT = / #/;

/** What `yaml`'s core schema reads as a number (as fast-yaml's YAML_NUMBER). */
const YAML_NUMBER =
  /^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+|[-+]?(?:\.[0-9]+|[0-9]+\.[0-9]*)|[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+|[-+]?\.(?:inf|Inf|INF)|\.nan|\.NaN|\.NAN)$/;
/** The numbers read here: integers and decimals that a double holds exactly as written, no sign but `-`. */
const INTEGER = /^(?:0|-?[1-9][0-9]{0,14})$/;
const DECIMAL = /^-?(?:0|[1-9][0-9]{0,14})\.[0-9]{1,15}$/;
const NULL = /^(?:~|[Nn]ull|NULL)?$/;
const TRUE = /^(?:[Tt]rue|TRUE)$/;
const FALSE = /^(?:[Ff]alse|FALSE)$/;

/** A plain scalar's value under the core schema: null, a boolean, a number, or the text itself. */
function plainValue(text: string): unknown {
  if (NULL.test(text)) return null;
  if (TRUE.test(text)) return true;
  if (FALSE.test(text)) return false;
  if (INTEGER.test(text) || DECIMAL.test(text)) return Number(text);
  if (YAML_NUMBER.test(text)) notPlain(text);
  return text;
}

/**
 * The documents of `text` that hold something (empty ones skipped, as readManifestFile skips
 * them), each a mapping; undefined when the text is outside the subset (see the top of this file).
 */
export function plainDocuments(text: string): Array<Record<string, unknown>> | undefined {
  if (UNUSUAL.test(text)) return undefined;
  try {
    const out: Array<Record<string, unknown>> = [];
    let doc: string[] = [];
    const end = () => {
      const v = readDocument(doc);
      if (v) out.push(v);
      doc = [];
    };
    for (const raw of text.split('\n')) {
      if (raw.startsWith('---') || raw.startsWith('...') || raw.startsWith('%')) {
        if (!DOCUMENT_START.test(raw)) return undefined;
        end();
      } else doc.push(raw);
    }
    end();
    return out;
  } catch (e) {
    if (e instanceof NotPlain) return undefined;
    throw e;
  }
}

/** One document's lines: a mapping at the left margin, or nothing but blanks and comments. */
function readDocument(raw: string[]): Record<string, unknown> | undefined {
  // A regular expression finds the indentation: a loop over characters runs interpreted here.
  const lines: Line[] = raw.map((r) => {
    const indent = r.search(NOT_SPACE);
    return indent < 0 ? { indent: r.length, text: '' } : { indent, text: r.slice(indent) };
  });
  const reader = new DocumentReader(raw, lines);
  const first = reader.next();
  if (first < 0) return undefined;
  if (lines[first]!.indent !== 0 || !ENTRY.test(lines[first]!.text)) notPlain('not a mapping at the margin');
  const value = reader.mapping(first, 0);
  if (reader.next() >= 0) notPlain('more after the mapping');
  return value;
}

/** A value written on one line: a quoted or plain scalar, a flow list of plain words, or `{}`. */
function scalarOrFlow(text: string): unknown {
  const double = DOUBLE_QUOTED.exec(text);
  if (double) return double[1];
  const single = SINGLE_QUOTED.exec(text);
  if (single) return single[1]!.replaceAll("''", "'");
  const list = FLOW_LIST.exec(text);
  if (list) {
    const words = list[1]!.split(',').map((w) => w.trim());
    // `[a, b,]`: a trailing comma ends the list; `[]` has no word at all.
    if (words.length > 1 && words[words.length - 1] === '') words.pop();
    if (words.length === 1 && words[0] === '') return [];
    return words.map((w) => (FLOW_WORD.test(w) ? plainValue(w) : notPlain(`flow word ${w}`)));
  }
  if (EMPTY_MAP.test(text)) return {};
  if (!PLAIN_START.test(text)) notPlain(`plain scalar ${text}`);
  const comment = COMMENT.exec(text);
  const plain = (comment ? text.slice(0, comment.index) : text).trimEnd();
  if (plain.includes(': ') || plain.endsWith(':')) notPlain(`plain scalar ${plain}`);
  return plainValue(plain);
}

class DocumentReader {
  /** The line being read; every method leaves it on the first line it did not consume. */
  at = 0;
  readonly raw: string[];
  readonly lines: Line[];
  constructor(raw: string[], lines: Line[]) {
    this.raw = raw;
    this.lines = lines;
  }

  /** The next line that holds content (not blank, not a comment), or -1; `at` moves to it. */
  next(): number {
    while (this.at < this.lines.length && BLANK_OR_COMMENT.test(this.lines[this.at]!.text)) this.at++;
    return this.at < this.lines.length ? this.at : -1;
  }

  /** The node whose first line is `i`: a sequence or a mapping (a scalar on a line of its own is not taken). */
  node(i: number, indent: number): unknown {
    const text = this.lines[i]!.text;
    if (ITEM.test(text)) return this.sequence(i, indent);
    if (ENTRY.test(text)) return this.mapping(i, indent);
    return notPlain('a scalar on a line of its own');
  }

  /** The value after `key:` with nothing on its line: the lines below it, or null. */
  nested(indent: number, sequenceAtSameIndent: boolean): unknown {
    const j = this.next();
    if (j < 0) return null;
    const line = this.lines[j]!;
    if (line.indent > indent) return this.node(j, line.indent);
    // `key:` followed by `- item` at the key's own indentation: the sequence is the key's value.
    if (sequenceAtSameIndent && line.indent === indent && ITEM.test(line.text)) return this.sequence(j, indent);
    return null;
  }

  mapping(i: number, indent: number): Record<string, unknown> {
    const out: Record<string, unknown> = {};
    const keys = new Set<string>();
    for (let j = i; j >= 0; j = this.next()) {
      const line = this.lines[j]!;
      if (line.indent < indent) break;
      if (line.indent > indent) notPlain('indented further than its mapping');
      const m = ENTRY.exec(line.text);
      if (!m) {
        // The end of a sequence at a key's own indentation comes back here: one more key or the end.
        if (ITEM.test(line.text)) break;
        notPlain(`not a mapping entry: ${line.text}`);
      }
      const key = m![1]!;
      // `yaml` keeps __proto__ as an own key and refuses implicit keys over 1024 characters.
      if (typeof plainValue(key) !== 'string' || keys.has(key) || key === '__proto__' || key.length > 1000)
        notPlain(`key ${key}`);
      keys.add(key);
      const rest = m![2] ?? '';
      this.at = j + 1;
      const literal = LITERAL.exec(rest);
      out[key] =
        rest === '' || rest.startsWith('#')
          ? this.nested(indent, true)
          : literal
            ? this.literal(indent, literal[1] === '-')
            : this.inline(rest, indent);
    }
    return out;
  }

  sequence(i: number, indent: number): unknown[] {
    const out: unknown[] = [];
    for (let j = i; j >= 0; j = this.next()) {
      const line = this.lines[j]!;
      if (line.indent < indent) break;
      if (line.indent > indent) notPlain('indented further than its sequence');
      const m = ITEM.exec(line.text);
      if (!m) {
        // A key after a sequence at that key's indentation: the mapping above reads it.
        if (ENTRY.test(line.text)) break;
        notPlain(`not a sequence entry: ${line.text}`);
      }
      const rest = m![2] ?? '';
      if (rest === '' || rest.startsWith('#')) {
        this.at = j + 1;
        out.push(this.nested(indent, false));
        continue;
      }
      if (ENTRY.test(rest) || ITEM.test(rest)) {
        // `- key: value` / `- - x`: the entry's content is a node at its own column, read in place.
        const column = indent + 1 + m![1]!.length;
        this.lines[j] = { indent: column, text: rest };
        out.push(this.node(j, column));
        continue;
      }
      this.at = j + 1;
      if (LITERAL.test(rest)) notPlain('a literal as a sequence entry');
      out.push(this.inline(rest, indent));
    }
    return out;
  }

  /** A value on its key's or dash's line; the lines after it must not continue it. */
  inline(text: string, indent: number): unknown {
    const value = scalarOrFlow(text);
    const j = this.next();
    if (j >= 0 && this.lines[j]!.indent > indent) notPlain('a value continued on the next line');
    return value;
  }

  /**
   * A `|` or `|-` block scalar below a key at `indent`: the lines indented further than the first
   * of them, kept as written, with one final line break (`|`) or none (`|-`).
   */
  literal(indent: number, strip: boolean): string {
    const first = this.lines[this.at];
    if (!first || first.text === '' || first.indent <= indent) return notPlain('an empty or blank-led literal');
    const by = first.indent;
    const content: string[] = [];
    for (; this.at < this.lines.length; this.at++) {
      const line = this.lines[this.at]!;
      if (line.text === '') {
        if (line.indent > by) notPlain('spaces beyond the literal indentation on a blank line');
        content.push('');
        continue;
      }
      if (line.indent < by) {
        if (line.indent > indent) notPlain('a literal line indented less than the first');
        break;
      }
      content.push(this.raw[this.at]!.slice(by));
    }
    while (content.length && content[content.length - 1] === '') content.pop();
    return content.join('\n') + (strip ? '' : '\n');
  }
}
