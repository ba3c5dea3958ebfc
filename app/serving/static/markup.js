// Inline HTML markup kept through translation: data/markup.py ported to the page, function
// for function and with the same names (camelCase), so that the two read side by side.
// data/markup.py's docstring states the rules; this port follows them to the letter, and
// tests/serving/test_page_markup.py holds the two equal on every case of
// tests/data/markup_cases.json (stripped texts, errors, restored lines).
//
//     const stripped = strip("A <b>big</b> dog.");           // stripped.text === "A big dog."
//     restore(stripped, "Ein großer Hund.", [[0, 0], [1, 1], [2, 2]]);  // "Ein <b>großer</b> Hund."
//     markupText("Ein <b>gro&szlig;er</b> Hund.");           // "Ein großer Hund."
//     await translateMarkup(["A <b>big</b> dog."], align);   // align: the export's `align` signature
//
// **Offsets.** Python counts characters in code points; a JavaScript string in UTF-16
// units, two for a character outside the Basic Multilingual Plane (an emoji). The scanner
// below reads the markup with string indices, which is safe: every character it looks for
// is ASCII, and it only slices the markup with them. Everything this module gives out
// counts code points, as Python's does: an error's and an element's column (`Places`), and
// the offsets into the plain text (its length, `breaks`, `wordSpans`).

import {escape, unescape} from "./html.js";
import {WHITE_SPACE, codePoints, distinctPairs, parsePharaoh, slice, wordSpans, words} from "./words.js";

export const ELEMENT = "element", EMPTY = "empty", VOID = "void", ATOM = "atom";

const names = text => new Set(text.split(" "));
// HTML's void elements: no content and no closing tag.
export const VOID_NAMES = names("area base br col embed hr img input link meta source track wbr");
// Elements whose content is raw text up to their closing tag.
export const RAW_TEXT = names("script style");
// Bergamot's ignored elements: kept whole, never translated.
export const UNTRANSLATED = names("code kbd samp var math acronym dir");
// Block elements: their tags separate words, as a line break does.
export const BLOCKS = names(
  "address article aside blockquote dd div dl dt figcaption figure footer h1 h2 h3 h4 h5 h6 header li "
  + "main nav ol p pre section table tbody td tfoot th thead tr ul"
);
export const BREAKS = new Set([...BLOCKS, "br", "hr"]);
// HTML's own white space, which ends a tag name and separates attributes.
const TAG_SPACE = " \t\n\f\r";

/** Markup that is not well-formed inline HTML, at `line` and `column` (from 1, in code points). */
export class MarkupError extends Error {
  constructor(line, column, reason) {
    super(`line ${line}, column ${column}: ${reason}`);
    this.name = "MarkupError";
    this.line = line;
    this.column = column;
    this.reason = reason;
  }
}

// An Element (one tag, a pair of tags, or an item kept whole, as `strip` found it) is
// {kind, open, close, span: [a, b], position, parent, line, column}: Python's dataclass,
// `parent` null at the top. A Stripped line is {text, words, elements, markup, breaks}.

/** Python's `bisect.bisect_right(values, x)` on sorted numbers. */
function bisectRight(values, x) {
  let lo = 0, hi = values.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (x < values[mid]) hi = mid; else lo = mid + 1;
  }
  return lo;
}

/** Python's `bisect.bisect_left(values, x)` on sorted numbers. */
function bisectLeft(values, x) {
  let lo = 0, hi = values.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (values[mid] < x) lo = mid + 1; else hi = mid;
  }
  return lo;
}

/** Lines and columns (from 1, in code points) of string indices in a markup string. */
class Places {
  constructor(markup, firstLine) {
    this.markup = markup;
    this.lineStarts = [0];
    for (let i = markup.indexOf("\n"); i !== -1; i = markup.indexOf("\n", i + 1)) this.lineStarts.push(i + 1);
    this.firstLine = firstLine;
  }

  /** `[line, column]` of the string index `offset`. */
  of(offset) {
    const index = bisectRight(this.lineStarts, offset) - 1;
    return [this.firstLine + index, codePoints(this.markup.slice(this.lineStarts[index], offset)).length + 1];
  }

  error(offset, reason) {
    return new MarkupError(...this.of(offset), reason);
  }

  /** `L:C`, as messages name a place. */
  at(offset) {
    return this.of(offset).join(":");
  }
}

/** The first index from `i` on whose character is not one of `characters` (or the end). */
function past(markup, i, characters) {
  while (i < markup.length && characters.includes(markup[i])) i++;
  return i;
}

/** The first index from `i` on whose character is one of `characters` (or the end). */
function until(markup, i, stops) {
  while (i < markup.length && !stops.includes(markup[i])) i++;
  return i;
}

/**
 * `[end, selfClosing]` of the tag at `start` whose name ends at `i`: the index after its
 * `>`, and whether it ends in `/>` outside an attribute value (HTML's tokenizer, without
 * its repairs: `<a href=/x/>` is not self-closing).
 */
function tagEnd(markup, i, places, start) {
  while (true) {
    i = past(markup, i, TAG_SPACE);
    if (i >= markup.length) throw places.error(start, "unterminated tag");
    if (markup[i] === ">") return [i + 1, false];
    if (markup.startsWith("/>", i)) return [i + 2, true];
    if (markup[i] === "/") {
      i += 1;
      continue;
    }
    // An attribute: its name (whose first character may be "="), then perhaps "=" and a value.
    i = past(markup, until(markup, i + 1, TAG_SPACE + "/>="), TAG_SPACE);
    if (i < markup.length && markup[i] === "=") {
      i = past(markup, i + 1, TAG_SPACE);
      if (i < markup.length && "\"'".includes(markup[i])) {
        i = markup.indexOf(markup[i], i + 1) + 1;
        if (i === 0) throw places.error(start, "unterminated tag");
      } else {
        i = until(markup, i, TAG_SPACE + ">");
      }
    }
  }
}

/** `text` with ASCII capitals made small, and nothing else changed: how HTML compares tag names. */
function asciiLower(text) {
  return text.replace(/[A-Z]/g, letter => letter.toLowerCase());
}

/** Whether `character` is an ASCII letter: what may start a tag name. */
function isLetter(character) {
  return /^[A-Za-z]$/.test(character);
}

/** The index where the tag name that starts at `i` ends. */
function nameEnd(markup, i) {
  return until(markup, i, TAG_SPACE + "/>");
}

/**
 * The index after the closing tag of a `<script>` or `<style>` whose opening tag ends at
 * `start`; null when there is none.
 */
function rawTextEnd(markup, name, start, places) {
  // Without the `u` flag, `i` folds ASCII letters only, as Python's re.ASCII | re.IGNORECASE.
  const closing = new RegExp("</" + name + "(?=[" + TAG_SPACE + "/>]|$)", "gi");
  closing.lastIndex = start;
  const found = closing.exec(markup);
  if (found === null) return null;
  return tagEnd(markup, found.index + found[0].length, places, found.index)[0];
}

/** The error for a `<!` that opens no comment, or for a `<?`. */
function declaration(markup, i, places) {
  if (markup.startsWith("<?", i)) return places.error(i, "<?…?> is not inline markup");
  if (asciiLower(markup.slice(i + 2, i + 9)) === "doctype") return places.error(i, "<!DOCTYPE> is not inline markup");
  if (markup.startsWith("<![CDATA[", i)) return places.error(i, "<![CDATA[…]]> is not inline markup");
  return places.error(i, "<!…> is not inline markup");
}

/** One piece of markup as the scanner reads it: kind "text", "open", "close" or "atom". */
function token(kind, text, name, start, selfClosing = false) {
  return {kind, text, name, start, selfClosing};
}

/**
 * The tokens of `markup`, in order. Throws a MarkupError for an unterminated tag or comment,
 * a declaration, a processing instruction, `</` without a name, a `<script>` or `<style>`
 * never closed.
 */
function* tokens(markup, places) {
  let i = 0, textStart = 0;
  const n = markup.length;
  while (i < n) {
    i = markup.indexOf("<", i);
    if (i === -1) break;
    const following = markup.slice(i + 1, i + 2);
    const closing = following === "/";
    if (!(isLetter(following) || ["/", "!", "?"].includes(following))) {
      i += 1;
      continue;
    }
    if (i > textStart) yield token("text", markup.slice(textStart, i), "", textStart);
    if (markup.startsWith("<!--", i)) {
      const end = markup.indexOf("-->", i + 4);
      if (end === -1) throw places.error(i, "unterminated comment");
      yield token("atom", markup.slice(i, end + 3), "", i);
      i = end + 3;
    } else if (following === "!" || following === "?") {
      throw declaration(markup, i, places);
    } else if (closing && !isLetter(markup.slice(i + 2, i + 3))) {
      throw places.error(i, "</ is not followed by a tag name");
    } else {
      const nameStart = closing ? i + 2 : i + 1;
      const nameStop = nameEnd(markup, nameStart);
      const name = asciiLower(markup.slice(nameStart, nameStop));
      let [end, selfClosing] = tagEnd(markup, nameStop, places, i);
      if (!closing && !selfClosing && RAW_TEXT.has(name)) {
        end = rawTextEnd(markup, name, end, places);
        if (end === null) {
          throw places.error(i, `<${markup.slice(nameStart, nameStop)}> opened at ${places.at(i)} is never closed`);
        }
        yield token("atom", markup.slice(i, end), name, i);
      } else {
        yield token(closing ? "close" : "open", markup.slice(i, end), name, i, selfClosing);
      }
      i = end;
    }
    textStart = i;
  }
  if (textStart < n) yield token("text", markup.slice(textStart), "", textStart);
}

/** `strip`'s state as it reads the tokens: the plain text so far, the open tags, the items found. */
class Stripper {
  constructor(markup, places) {
    this.markup = markup;
    this.places = places;
    // The plain text's pieces, its length (in code points), its last character.
    this.plain = [];
    this.length = 0;
    this.last = "";
    this.pendingBreak = false;  // a break element since the last character, which is not white space
    this.stack = [];  // {token, writtenName, item} of each open tag, outermost first
    // Items (an element as `strip` reads it: {kind, open, plainStart, plainEnd, parent,
    // start, close}), in the order their opening tags appear.
    this.items = [];
    this.untranslated = null;  // the open tag of the UNTRANSLATED element being kept whole
    this.breaks = [];  // the plain text's length at each break tag
  }

  addText(raw) {
    let text = unescape(raw);
    // A reference Python's unescape drops (`&#1;`) leaves no text to add.
    if (this.untranslated || !text) return;
    if (this.pendingBreak && !WHITE_SPACE.includes(text[0])) text = " " + text;
    this.pendingBreak = false;
    this.plain.push(text);
    this.length += codePoints(text).length;
    this.last = text[text.length - 1];
  }

  noteBreak(name) {
    if (this.untranslated || !BREAKS.has(name)) return;
    // At a word's end the text that follows is kept apart by a space (`addText`), so the
    // offset never falls inside a word.
    this.breaks.push(this.length);
    if (this.last && !WHITE_SPACE.includes(this.last)) this.pendingBreak = true;
  }

  /** Adds an item found at the current place of the plain text; returns its index. */
  addItem(kind, text, start) {
    if (this.untranslated) return null;
    const parent = this.stack.length ? this.stack[this.stack.length - 1].item : null;
    this.items.push({kind, open: text, plainStart: this.length, plainEnd: this.length, parent, start, close: ""});
    return this.items.length - 1;
  }

  open(token) {
    const written = token.text.slice(1, nameEnd(token.text, 1));
    if (!this.untranslated && UNTRANSLATED.has(token.name)) {
      this.untranslated = {token, writtenName: written, item: null};
      this.stack.push(this.untranslated);
    } else {
      this.stack.push({token, writtenName: written, item: this.addItem(ELEMENT, token.text, token.start)});
    }
  }

  close(token) {
    const written = token.text.slice(2, nameEnd(token.text, 2));
    const at = this.places.at(token.start);
    if (VOID_NAMES.has(token.name)) {
      const reason = `</${written}> at ${at}: ${token.name} is a void element and has no closing tag`;
      throw this.places.error(token.start, reason);
    }
    if (!this.stack.some(opened => opened.token.name === token.name)) {
      throw this.places.error(token.start, `</${written}> at ${at} closes nothing`);
    }
    const top = this.stack.pop();
    if (top.token.name !== token.name) {
      const openedAt = this.places.at(top.token.start);
      const reason = `</${written}> at ${at} while <${top.writtenName}> (opened at ${openedAt}) is open: tags cross`;
      throw this.places.error(token.start, reason);
    }
    if (top.item !== null) {
      this.items[top.item].close = token.text;
      this.items[top.item].plainEnd = this.length;
    } else if (top === this.untranslated) {
      this.untranslated = null;
      this.addItem(ATOM, this.markup.slice(top.token.start, token.start + token.text.length), top.token.start);
    }
  }

  read(token) {
    if (token.kind === "text") {
      this.addText(token.text);
      return;
    }
    if (token.kind === "atom") {
      this.addItem(ATOM, token.text, token.start);
      return;
    }
    this.noteBreak(token.name);
    if (token.kind === "close") this.close(token);
    else if (VOID_NAMES.has(token.name)) this.addItem(VOID, token.text, token.start);
    else if (token.selfClosing) this.addItem(ATOM, token.text, token.start);
    else this.open(token);
  }

  finish() {
    if (this.stack.length) {
      const first = this.stack[0];
      const at = this.places.at(first.token.start);
      throw this.places.error(first.token.start, `<${first.writtenName}> opened at ${at} is never closed`);
    }
  }
}

/**
 * The Stripped line of `markup`: its plain text and words, and its elements.
 *
 * @param {string} markup one line (or paragraph) of inline HTML.
 * @param {number} firstLine the line number of its first line, for errors (a paragraph of a text).
 * @throws {MarkupError} `markup` is not well-formed, naming the line, the column and the reason.
 */
export function strip(markup, firstLine = 1) {
  const places = new Places(markup, firstLine);
  const stripper = new Stripper(markup, places);
  for (const token of tokens(markup, places)) stripper.read(token);
  stripper.finish();
  const text = stripper.plain.join("");
  const spans = wordSpans(text);
  const ends = spans.map(([, end]) => end), starts = spans.map(([start]) => start);
  const elements = [];
  for (const item of stripper.items) {
    const first = bisectRight(ends, item.plainStart);  // the words that end at or before it
    const after = bisectLeft(starts, item.plainEnd);  // the words that start before its end
    let kind = item.kind;
    if (kind === ELEMENT && !(item.plainEnd > item.plainStart && after > first)) kind = EMPTY;
    const [line, column] = places.of(item.start);
    elements.push(Object.freeze({
      kind, open: item.open, close: item.close, span: kind === ELEMENT ? [first, after] : [first, first],
      position: first, parent: item.parent, line, column,
    }));
  }
  const characters = codePoints(text);
  return Object.freeze({
    text, words: spans.map(([a, b]) => slice(characters, a, b)), elements, markup,
    breaks: [...new Set(stripper.breaks)].sort((a, b) => a - b),
  });
}

/** The plain text of `markup` (`strip(markup).text`): the one definition, for input and output. */
export function markupText(markup) {
  return strip(markup).text;
}

/**
 * Where `restore` puts each element of a line in its translation: an interval of target
 * words, `[lo, hi)`, or a place between them for a zero-width one.
 */
class Layout {
  constructor(stripped, links, targetWords) {
    this.elements = stripped.elements;
    this.targets = stripped.words.map(() => []);  // per source word: its linked target words, sorted
    for (const [i, j] of distinctPairs(links)) this.targets[i].push(j);
    this.children = new Map([[null, []]]);
    this.elements.forEach((element, index) => {
      if (!this.children.has(index)) this.children.set(index, []);
      this.children.get(element.parent).push(index);
    });
    this.interval = new Map();  // element -> [lo, hi], for the elements that hold words
    this.place = new Map();  // element -> q, for the zero-width ones
    this.layOut(null, 0, targetWords);
  }

  /**
   * The target place of source boundary `source`: before the first target word linked to
   * a word after it, else after the last one linked to a word before it, else `hi`.
   */
  anchor(source, hi) {
    for (const targets of this.targets.slice(source)) {
      if (targets.length) return targets[0];
    }
    for (const targets of this.targets.slice(0, source).reverse()) {
      if (targets.length) return targets[targets.length - 1] + 1;
    }
    return hi;
  }

  /** Places the children of `node` inside `[lo, hi)`, then their children inside them. */
  layOut(node, lo, hi) {
    this.takeWords(node, lo, hi);
    const children = this.children.get(node);
    const siblings = children.filter(child => this.interval.has(child)).map(child => this.interval.get(child));
    for (const child of children) {
      if (!this.interval.has(child)) {
        const anchor = Math.min(Math.max(this.anchor(this.elements[child].position, hi), lo), hi);
        this.place.set(child, outside(siblings, anchor));
      }
    }
    for (const child of children) {
      if (this.interval.has(child)) this.layOut(child, ...this.interval.get(child));
      else this.layOut(child, this.place.get(child), this.place.get(child));
    }
  }

  /**
   * Gives the `element` children of `node` disjoint intervals inside `[lo, hi)`: the
   * smallest hull of linked words first (ties: source order), each the best free run
   * inside its hull (`bestInterval`). A child that gets none is left zero-width.
   */
  takeWords(node, lo, hi) {
    const wanting = [];  // [size of the hull, child, its linked target words in [lo, hi), sorted]
    for (const child of this.children.get(node)) {
      const element = this.elements[child];
      if (element.kind === ELEMENT) {
        const found = new Set();
        for (let i = element.span[0]; i < element.span[1]; i++) {
          for (const j of this.targets[i]) if (lo <= j && j < hi) found.add(j);
        }
        const linked = [...found].sort((a, b) => a - b);
        if (linked.length) wanting.push([linked[linked.length - 1] + 1 - linked[0], child, linked]);
      }
    }
    const free = new Array(hi - lo).fill(true);  // free[j - lo]: whether target word j is still free
    for (const [, child, linked] of wanting.sort((a, b) => a[0] - b[0] || a[1] - b[1])) {
      const interval = bestInterval(free, lo, linked);
      if (interval) {
        this.interval.set(child, interval);
        for (let j = interval[0]; j < interval[1]; j++) free[j - lo] = false;
      }
    }
  }
}

/** Python's comparison of two tuples of numbers: negative, zero or positive. */
function compareTuples(a, b) {
  for (let k = 0; k < a.length; k++) {
    if (a[k] !== b[k]) return a[k] - b[k];
  }
  return 0;
}

/**
 * Inside the hull of `linked` (sorted target words), the run of free words holding the
 * most of them, then the longest once cut to the hull of those it holds, then the
 * leftmost; so cut. null when no free run holds any.
 */
function bestInterval(free, lo, linked) {
  let best = null, bestScore = null;
  for (const [runStart, runEnd] of freeRuns(free, lo, linked[0], linked[linked.length - 1] + 1)) {
    const held = linked.filter(j => runStart <= j && j < runEnd);
    if (held.length) {
      const score = [held.length, held[held.length - 1] + 1 - held[0], -held[0]];
      if (bestScore === null || compareTuples(score, bestScore) > 0) {
        best = [held[0], held[held.length - 1] + 1];
        bestScore = score;
      }
    }
  }
  return best;
}

/** The maximal runs `[a, b]` of free target words inside `[start, end)`; `free[j - lo]` says whether j is. */
function freeRuns(free, lo, start, end) {
  const runs = [];
  let runStart = null;
  for (let j = start; j <= end; j++) {
    if (j < end && free[j - lo]) {
      runStart = runStart === null ? j : runStart;
    } else if (runStart !== null) {
      runs.push([runStart, j]);
      runStart = null;
    }
  }
  return runs;
}

/** `q`, moved to the nearer edge of the interval it lies strictly inside (the start on a tie). */
function outside(intervals, q) {
  for (const [lo, hi] of intervals) {
    if (lo < q && q < hi) return q - lo <= hi - q ? lo : hi;
  }
  return q;
}

function checkLinks(links, sourceWords, targetWords) {
  for (const [i, j] of links) {
    if (!(0 <= i && i < sourceWords)) throw new Error(`link ${i}-${j}: the source has ${sourceWords} words`);
    if (!(0 <= j && j < targetWords)) throw new Error(`link ${i}-${j}: the target has ${targetWords} words`);
  }
}

/**
 * The translation of a stripped line with the line's tags put back, as HTML.
 *
 * @param stripped `strip`'s answer for the line.
 * @param {string} translation the translation of `stripped.text`.
 * @param links `[i, j]` pairs: source word i (of `stripped.words`) is linked to target word j
 *   (of `words(translation)`); the `align` signature's Pharaoh line, parsed.
 * @returns {string} the translation, its words escaped and its white space as it is, with
 *   every element of `stripped` placed by data/markup.py's rules; `stripped.markup` as it is
 *   when the stripped line has no words.
 * @throws {Error} a link outside the source's or the translation's words.
 */
export function restore(stripped, translation, links) {
  if (!stripped.words.length) return stripped.markup;
  const spans = wordSpans(translation);
  checkLinks(links, stripped.words.length, spans.length);
  const layout = new Layout(stripped, links, spans.length);
  // The translation's code points: `spans` index them.
  const characters = codePoints(translation);
  const pieces = [spans.length ? slice(characters, 0, spans[0][0]) : translation];
  render(layout, characters, spans, null, [0, spans.length], pieces);
  pieces.push(spans.length ? slice(characters, spans[spans.length - 1][1]) : "");
  return pieces.join("");
}

/**
 * Appends to `pieces` the target words `interval` = `[lo, hi)` with the children of `node`
 * around them: the white space before each word but the first, then the zero-width
 * children at that place (in source order), then the word, or a child starting there, whole.
 */
function render(layout, characters, spans, node, interval, pieces) {
  const [lo, hi] = interval;
  const at = new Map();  // q -> the zero-width children there, in source order
  const starting = new Map();  // q -> the child whose interval starts there
  for (const child of layout.children.get(node)) {
    if (layout.interval.has(child)) {
      starting.set(layout.interval.get(child)[0], child);
    } else {
      const place = layout.place.get(child);
      if (!at.has(place)) at.set(place, []);
      at.get(place).push(child);
    }
  }
  let q = lo;
  while (true) {
    if (lo < q && q < hi) pieces.push(slice(characters, spans[q - 1][1], spans[q][0]));
    for (const child of at.get(q) ?? []) renderElement(layout, characters, spans, child, [q, q], pieces);
    if (q === hi) return;
    if (starting.has(q)) {
      const child = starting.get(q);
      renderElement(layout, characters, spans, child, layout.interval.get(child), pieces);
      q = layout.interval.get(child)[1];
    } else {
      pieces.push(escape(slice(characters, spans[q][0], spans[q][1]), false));
      q += 1;
    }
  }
}

function renderElement(layout, characters, spans, child, interval, pieces) {
  const element = layout.elements[child];
  pieces.push(element.open);
  if (element.kind === ELEMENT || element.kind === EMPTY) render(layout, characters, spans, child, interval, pieces);
  pieces.push(element.close);
}

/**
 * The translations of lines of markup, each with its tags put back (`restore`).
 *
 * Every text is stripped before anything is translated, so that malformed markup fails
 * before any request. The texts are numbered as the lines of one text (text k starts on
 * the line after text k - 1 ends), so that an error names the line. The plain texts that
 * have words go to `align` in one call; a text without words comes back as it is.
 *
 * @param {string[]} texts lines of inline HTML.
 * @param align `async align(plain texts) -> [[translation, Pharaoh line]]`, one pair per
 *   text, in order: the export's `align` signature, over REST.
 * @throws {MarkupError} a text is not well-formed (before `align` is called).
 * @throws {Error} `align` answered another number of texts, or a link out of range.
 */
export async function translateMarkup(texts, align) {
  const stripped = [];
  let line = 1;
  for (const text of texts) {
    stripped.push(strip(text, line));
    line += text.split("\n").length;
  }
  const plain = stripped.filter(item => item.words.length).map(item => item.text);
  const answers = plain.length ? Array.from(await align(plain)) : [];
  if (answers.length !== plain.length) {
    throw new Error(`align answered ${answers.length} translations for ${plain.length} texts`);
  }
  let next = 0;
  const outputs = [];
  for (const item of stripped) {
    if (!item.words.length) {
      outputs.push(item.markup);
      continue;
    }
    const [translation, pharaoh] = answers[next++];
    const links = parsePharaoh(pharaoh, item.words.length, words(translation).length);
    outputs.push(restore(item, translation, links));
  }
  return outputs;
}
