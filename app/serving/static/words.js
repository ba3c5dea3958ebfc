// Words, as word alignments, markup and documents count them, and Pharaoh-format links:
// the part of data/words.py that the page's markup.js and documents.js need, ported
// function for function (camelCase names), so that the two can be read side by side.
//
//     words("Ein  Mann\xa0fährt.")             // ["Ein", "Mann", "fährt."]
//     wordSpans("Ein  Mann")                   // [[0, 3], [5, 9]]
//     parsePharaoh("0-0 1-2", 2, 3)            // [[0, 0], [1, 2]]
//     formatPharaoh([[1, 2], [0, 0], [0, 0]])  // "0-0 1-2"
//
// A **word** is a maximal run of characters that are not Unicode White_Space. Offsets count
// code points, as Python's do: a JavaScript string counts UTF-16 units, two for a character
// outside the Basic Multilingual Plane (an emoji), so these functions never use string
// indices where Python would use offsets. tests/serving/test_page_markup.py holds them equal
// to the Python module on the shared cases.

// Unicode's White_Space property (PropList.txt), every code point of it: data/words.py's WHITE_SPACE.
export const WHITE_SPACE = (
  "\t\n\v\f\r \x85\xa0\u1680"
  + "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
  + "\u2028\u2029\u202f\u205f\u3000"
);
// Every character is in the Basic Multilingual Plane, so one UTF-16 unit each: a class of them.
const SPACE_CLASS = `[${Array.from(WHITE_SPACE, c => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`).join("")}]`;
const WORD = new RegExp(`[^${SPACE_CLASS.slice(1, -1)}]+`, "gu");
const AT_THE_ENDS = new RegExp(`^${SPACE_CLASS}+|${SPACE_CLASS}+$`, "g");
// What Python's str.split() splits at (parsePharaoh): White_Space and U+001C-U+001F.
const PYTHON_SPLIT = new RegExp(`[${SPACE_CLASS.slice(1, -1)}\\x1c-\\x1f]+`);

/** Whether `character` (one code point) is White_Space. */
export function isWhiteSpace(character) {
  return character.length === 1 && WHITE_SPACE.includes(character);
}

/** `[[start, end]]`: each word's offsets in `text`, in code points, in order. */
export function wordSpans(text) {
  // Python's `_WORD.finditer(text)`, counted by code point: a regular expression's
  // `index` would count UTF-16 units.
  const spans = [];
  let offset = 0, start = null;
  for (const character of text) {
    if (isWhiteSpace(character)) {
      if (start !== null) spans.push([start, offset]);
      start = null;
    } else if (start === null) {
      start = offset;
    }
    offset += 1;
  }
  if (start !== null) spans.push([start, offset]);
  return spans;
}

/** The words of `text`, in order: runs of characters that are not White_Space. */
export function words(text) {
  return text.match(WORD) ?? [];
}

/** `text` without its leading and trailing White_Space: Python's `text.strip(WHITE_SPACE)`. */
export function stripWhiteSpace(text) {
  return text.replace(AT_THE_ENDS, "");
}

/** The code points of `text`: where Python's offsets and lengths are counted. */
export function codePoints(text) {
  return Array.from(text);
}

/** Python's `text[start:end]` on `characters`, the code points of a text (`codePoints`). */
export function slice(characters, start, end) {
  return characters.slice(start, end).join("");
}

/**
 * `[[i, j]]` from one Pharaoh line, in its order, checked against the word counts.
 * Throws an Error naming the bad link: not `i-j` of two non-negative integers, or an index
 * outside `sourceWords` / `targetWords` (data/words.py's ValueError messages).
 */
export function parsePharaoh(line, sourceWords, targetWords) {
  const links = [];
  for (const link of line.split(PYTHON_SPLIT).filter(part => part)) {
    const dash = link.indexOf("-");
    const source = dash === -1 ? link : link.slice(0, dash);
    const target = dash === -1 ? "" : link.slice(dash + 1);
    if (dash === -1 || !/^[0-9]+$/.test(source) || !/^[0-9]+$/.test(target)) {
      throw new Error(`link ${pythonRepr(link)}: not i-j, two word indices from 0`);
    }
    const i = Number(source), j = Number(target);
    if (i >= sourceWords) throw new Error(`link ${link}: the source has ${sourceWords} words`);
    if (j >= targetWords) throw new Error(`link ${link}: the target has ${targetWords} words`);
    links.push([i, j]);
  }
  return links;
}

/** One Pharaoh line: the distinct `[i, j]` pairs of `links`, by i and then j. */
export function formatPharaoh(links) {
  return distinctPairs(links).map(([i, j]) => `${i}-${j}`).join(" ");
}

/** Python's `sorted(set(pairs))` for pairs of integers. */
export function distinctPairs(pairs) {
  const seen = new Map(pairs.map(([i, j]) => [`${i}-${j}`, [i, j]]));
  return [...seen.values()].sort((a, b) => a[0] - b[0] || a[1] - b[1]);
}

// Python's repr() of a string, for error messages that quote one as data/*.py's do: single
// quotes unless the text holds one and no double quote; the characters str.isprintable()
// refuses escaped.
const UNPRINTABLE = /^[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}\p{Zs}]$/u;
const ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"};

export function pythonRepr(text) {
  const quote = text.includes("'") && !text.includes('"') ? '"' : "'";
  let body = "";
  for (const character of text) {
    const code = character.codePointAt(0);
    if (Object.hasOwn(ESCAPES, character)) body += ESCAPES[character];
    else if (character === quote) body += "\\" + quote;
    else if (character !== " " && UNPRINTABLE.test(character)) {
      const [prefix, width] = code < 0x100 ? ["\\x", 2] : code < 0x10000 ? ["\\u", 4] : ["\\U", 8];
      body += prefix + code.toString(16).padStart(width, "0");
    } else body += character;
  }
  return quote + body + quote;
}
