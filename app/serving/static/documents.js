// Whole documents: paragraphs split into sentences, translated, and written back a paragraph
// a line. data/documents.py ported to the page, function for function and with the same
// names (camelCase), so that the two read side by side; its docstring states the rules.
// tests/serving/test_page_markup.py holds the two equal on tests/data/document_cases.json.
//
//     const blocks = readBlocks(lines);                       // [Paragraph(1, "P1 a.\nP1 b"), Blank, ...]
//     const results = await translateBlocks(blocks, "en", align);  // [[translation, pharaoh]], one per paragraph
//     const output = writeBlocks(blocks, results.map(([translation]) => translation));
//
// Sentences are split by the same core as Python's sentencex: its Rust code compiled to
// WebAssembly (npm's sentencex-wasm, vendored under vendor/sentencex/, whose README says
// which version and how it was checked against the Python package). Its wasm is fetched on
// first use (`loadSentencex`), as Python imports sentencex lazily.
//
// **Offsets** count code points, as Python's do (a JavaScript string counts UTF-16 units,
// two for an emoji): `splitSentences` takes breaks and gives spans in code points, so its
// answers equal Python's on any text.

import initSentencex, {segment} from "./vendor/sentencex/sentencex_wasm.js";
import {restore, strip} from "./markup.js";
import {
  codePoints, formatPharaoh, parsePharaoh, pythonRepr, slice, stripWhiteSpace, wordSpans, words,
} from "./words.js";

/** A run of non-blank lines of a document: its first line's number (from 1) and its lines joined by "\n". */
export class Paragraph {
  constructor(firstLine, text) {
    this.firstLine = firstLine;
    this.text = text;
    Object.freeze(this);
  }
}

/** A blank line of a document (empty, or White_Space only): written back as an empty line. */
export class Blank {}

/**
 * A document's lines as `[Paragraph or Blank]`, in order: one Paragraph per run of
 * non-blank lines and one Blank per blank line.
 *
 * @param lines the document's lines, each with or without its line ending.
 */
export function readBlocks(lines) {
  const blocks = [];
  let paragraph = [], firstLine = 0, number = 0;
  for (let line of lines) {
    number += 1;
    line = line.replace(/[\r\n]+$/, "");
    if (stripWhiteSpace(line)) {
      firstLine = paragraph.length ? firstLine : number;
      paragraph.push(line);
      continue;
    }
    if (paragraph.length) {
      blocks.push(new Paragraph(firstLine, paragraph.join("\n")));
      paragraph = [];
    }
    blocks.push(new Blank());
  }
  if (paragraph.length) blocks.push(new Paragraph(firstLine, paragraph.join("\n")));
  return blocks;
}

/**
 * The output lines, without line endings: `texts[k]` for the k-th paragraph, "" for a blank.
 * Throws an Error when `texts` does not hold one text per paragraph.
 */
export function writeBlocks(blocks, texts) {
  texts = Array.from(texts);
  const paragraphs = blocks.filter(block => block instanceof Paragraph).length;
  if (texts.length !== paragraphs) throw new Error(`${texts.length} texts for ${paragraphs} paragraphs`);
  let next = 0;
  return blocks.map(block => (block instanceof Blank ? "" : texts[next++]));
}

let sentencexLoading = null;  // the promise of the wasm's instantiation, once asked for
let sentencexLoaded = false;

/** Fetches and instantiates sentencex's wasm, once: `splitSentences` needs it. */
export function loadSentencex() {
  sentencexLoading ??= initSentencex().then(() => { sentencexLoaded = true; });
  return sentencexLoading;
}

/**
 * The sentences of `text` as `[[start, end]]` offsets in code points, in order: the one
 * rule of data/documents.py's split_sentences, step by step.
 *
 * 1. sentencex's segments of `text` in `language`; if they do not concatenate to `text`,
 *    the text is one segment.
 * 2. Each segment is stripped of White_Space; segments left empty are dropped.
 * 3. A boundary with no White_Space at it is dropped: nothing splits inside a word.
 * 4. A segment of one word joins the next one, or the previous one if it is the last.
 * 5. Each offset in `breaks` also ends a sentence; the pieces are stripped again.
 *
 * @param {string} text one paragraph.
 * @param {string} language the source language's code, as sentencex takes it ("en", "de").
 * @param {number[]} breaks offsets in code points in `[0, length]`, none strictly inside a word.
 * @throws {Error} naming a break outside the text or inside a word, or when sentencex is
 *   not loaded yet (`await loadSentencex()` first).
 */
export function splitSentences(text, language, breaks = []) {
  if (!sentencexLoaded) throw new Error("sentencex is not loaded: await loadSentencex() first");
  const characters = codePoints(text);  // Python's offsets index these
  breaks = checkedBreaks(characters, breaks);
  let segments = Array.from(segment(language, text));
  if (segments.join("") !== text) segments = [text];
  let spans = wholeWords(characters, segments);
  spans = oneWordsJoined(characters, spans);
  return spans.flatMap(([start, end]) => broken(characters, start, end, breaks));
}

/** `breaks` sorted and distinct, each checked to lie in the text and at no word's inside. */
function checkedBreaks(characters, breaks) {
  breaks = [...new Set(breaks)].sort((a, b) => a - b);
  const spans = wordSpans(characters.join(""));
  for (const offset of breaks) {
    if (!(0 <= offset && offset <= characters.length)) {
      throw new Error(`break ${offset}: outside the text's ${characters.length} characters`);
    }
    const inside = spans.filter(([start, end]) => start < offset && offset < end);
    if (inside.length) {
      throw new Error(`break ${offset}: inside the word ${pythonRepr(slice(characters, ...inside[0]))}`);
    }
  }
  return breaks;
}

/** Steps 2 and 3: the segments' spans stripped, blank ones dropped, those that touch joined. */
function wholeWords(characters, segments) {
  const spans = [];
  let start = 0;
  for (const segment of segments) {
    const length = codePoints(segment).length;
    const span = stripped(characters, start, start + length);
    start += length;
    if (span && spans.length && span[0] === spans[spans.length - 1][1]) {
      // No White_Space between: one word spans both.
      spans[spans.length - 1] = [spans[spans.length - 1][0], span[1]];
    } else if (span) {
      spans.push(span);
    }
  }
  return spans;
}

/** Step 4: the boundary after each one-word span dropped, and before a last one-word span. */
function oneWordsJoined(characters, spans) {
  const oneWord = spans.map(([start, end]) => words(slice(characters, start, end)).length === 1);
  const ends = [...oneWord.slice(0, -1).map(single => !single), true];  // Whether a sentence ends with span k.
  if (spans.length > 1 && oneWord[oneWord.length - 1]) ends[ends.length - 2] = false;
  const sentences = [];
  let first = null;
  spans.forEach(([start, end], k) => {
    first = first === null ? start : first;
    if (ends[k]) {
      sentences.push([first, end]);
      first = null;
    }
  });
  return sentences;
}

/** Step 5: the sentence `[start, end)` cut at the breaks inside it, each piece stripped. */
function broken(characters, start, end, breaks) {
  const inner = breaks.filter(offset => start < offset && offset < end);
  const bounds = [start, ...inner, end];
  const pieces = inner.concat([end]).map((hi, k) => stripped(characters, bounds[k], hi));
  return pieces.filter(piece => piece);
}

/** `[start, end]` of the text's `[start, end)` less its leading and trailing White_Space; null if blank. */
function stripped(characters, start, end) {
  const found = wordSpans(slice(characters, start, end));
  return found.length ? [start + found[0][0], start + found[found.length - 1][1]] : null;
}

/**
 * Each paragraph's translation and Pharaoh line, its sentences translated by one `align` call.
 *
 * @param blocks `readBlocks`'s list.
 * @param {string} language the source language's code, for `splitSentences`.
 * @param align `async align(sentences) -> [[translation, pharaoh]]`, one pair per sentence,
 *   in order. Called once, with the sentences of every paragraph in document order; not
 *   called when there is no paragraph.
 * @param markup null for plain text, or "html": inline HTML kept through translation
 *   (markup.js); then the Pharaoh lines index the words of the paragraphs' plain text.
 * @returns `[[translation, pharaoh]]`, one per paragraph: the sentences' translations
 *   stripped and joined by one space (empty ones left out), with the paragraph's tags put
 *   back where there are any, and the union of their links, each shifted by the source and
 *   target words of the paragraph's sentences before it.
 * @throws {MarkupError} naming the line and column of malformed markup, before `align` is called.
 * @throws {Error} for another `markup`, when `align` returns another number of results than
 *   sentences, or links outside a sentence's or its translation's words (naming the sentence).
 */
export async function translateBlocks(blocks, language, align, markup = null) {
  if (markup !== null && markup !== "html") {
    throw new Error(`markup=${typeof markup === "string" ? pythonRepr(markup) : markup}: None or 'html'`);
  }
  const paragraphBlocks = blocks.filter(block => block instanceof Paragraph);
  let texts = paragraphBlocks.map(block => block.text), breaks, strippedTexts;
  if (markup) {
    strippedTexts = paragraphBlocks.map(block => strip(block.text, block.firstLine));
    texts = strippedTexts.map(item => item.text);
    breaks = strippedTexts.map(item => item.breaks);
  } else {
    breaks = texts.map(() => []);
  }
  if (texts.length) await loadSentencex();
  // A paragraph's hard-wrapped lines rejoin; one character for one keeps the offsets.
  const plains = texts.map(text => text.replaceAll("\n", " "));
  const paragraphs = plains.map((plain, k) => {
    const characters = codePoints(plain);
    return splitSentences(plain, language, breaks[k]).map(([s, e]) => slice(characters, s, e));
  });
  const sentences = paragraphs.flat();
  const results = sentences.length ? Array.from(await align(sentences)) : [];
  if (results.length !== sentences.length) {
    throw new Error(`align returned ${results.length} results for ${sentences.length} sentences`);
  }
  const joinedParagraphs = [];
  let position = 0;
  for (const paragraph of paragraphs) {
    joinedParagraphs.push(joined(paragraph, results.slice(position, position + paragraph.length)));
    position += paragraph.length;
  }
  if (!markup) return joinedParagraphs;
  return strippedTexts.map((item, k) => restored(item, ...joinedParagraphs[k]));
}

/**
 * A paragraph's `[translation with its tags put back, pharaoh]`; a paragraph without words
 * comes back as it was.
 */
function restored(strippedText, translation, pharaoh) {
  if (!strippedText.words.length) return [strippedText.markup, pharaoh];
  const links = parsePharaoh(pharaoh, strippedText.words.length, words(translation).length);
  return [restore(strippedText, translation, links), pharaoh];
}

/** One paragraph's `[translation, pharaoh]` from its sentences and their `align` results. */
function joined(sentences, results) {
  const translations = [], links = [];
  let sourceWords = 0, targetWords = 0;
  sentences.forEach((sentence, k) => {
    const [translation, pharaoh] = results[k];
    const counts = [words(sentence).length, words(translation).length];
    let sentenceLinks;
    try {
      sentenceLinks = parsePharaoh(pharaoh, ...counts);
    } catch (error) {
      throw new Error(`align's links for ${pythonRepr(sentence)} -> ${pythonRepr(translation)}: ${error.message}`);
    }
    links.push(...sentenceLinks.map(([i, j]) => [i + sourceWords, j + targetWords]));
    sourceWords += counts[0];
    targetWords += counts[1];
    if (stripWhiteSpace(translation)) translations.push(stripWhiteSpace(translation));
  });
  return [translations.join(" "), formatPharaoh(links)];
}
