// Python's html.escape and html.unescape (Lib/html/__init__.py), ported for markup.js: the
// page must decode a line's entities exactly as data/markup.py does, or its plain text,
// and so its words and the tags' places, would differ. The browser's own HTML parser is
// no substitute: it keeps the control characters that Python's unescape drops (`&#1;`),
// and it would parse the line into a document.

import {HTML5} from "./html_entities.js";

/** `text` with `&`, `<` and `>` written as entities; quotes too when `quote`. */
export function escape(text, quote = true) {
  text = text.replaceAll("&", "&amp;");  // Must be done first!
  text = text.replaceAll("<", "&lt;");
  text = text.replaceAll(">", "&gt;");
  if (quote) {
    text = text.replaceAll('"', "&quot;");
    text = text.replaceAll("'", "&#x27;");
  }
  return text;
}

// https://html.spec.whatwg.org/multipage/parsing.html#numeric-character-reference-end-state
const INVALID_CHARREFS = new Map([
  [0x00, "\ufffd"], [0x0d, "\r"], [0x80, "\u20ac"], [0x81, "\x81"], [0x82, "\u201a"], [0x83, "\u0192"],
  [0x84, "\u201e"], [0x85, "\u2026"], [0x86, "\u2020"], [0x87, "\u2021"], [0x88, "\u02c6"], [0x89, "\u2030"],
  [0x8a, "\u0160"], [0x8b, "\u2039"], [0x8c, "\u0152"], [0x8d, "\x8d"], [0x8e, "\u017d"], [0x8f, "\x8f"],
  [0x90, "\x90"], [0x91, "\u2018"], [0x92, "\u2019"], [0x93, "\u201c"], [0x94, "\u201d"], [0x95, "\u2022"],
  [0x96, "\u2013"], [0x97, "\u2014"], [0x98, "\u02dc"], [0x99, "\u2122"], [0x9a, "\u0161"], [0x9b, "\u203a"],
  [0x9c, "\u0153"], [0x9d, "\x9d"], [0x9e, "\u017e"], [0x9f, "\u0178"],
]);

// Code points a numeric reference may not produce: Python's unescape drops them.
const INVALID_CODEPOINTS = new Set([
  0x1, 0x2, 0x3, 0x4, 0x5, 0x6, 0x7, 0x8,
  0xe, 0xf, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
  0x7f, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8a, 0x8b, 0x8c, 0x8d, 0x8e, 0x8f,
  0x90, 0x91, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9a, 0x9b, 0x9c, 0x9d, 0x9e, 0x9f,
  ...Array.from({length: 0xfdf0 - 0xfdd0}, (_, k) => 0xfdd0 + k),
  0xb, 0xfffe, 0xffff,
  // The last two code points of each plane.
  ...Array.from({length: 16}, (_, k) => [(k + 1) * 0x10000 + 0xfffe, (k + 1) * 0x10000 + 0xffff]).flat(),
]);

function replaceCharref(name) {
  if (name[0] === "#") {
    // A numeric reference.
    const hex = "xX".includes(name[1]);
    const digits = name.slice(hex ? 2 : 1).replace(/;$/, "");
    const number = hex ? parseInt(digits, 16) : parseInt(digits, 10);
    if (INVALID_CHARREFS.has(number)) return INVALID_CHARREFS.get(number);
    if ((0xd800 <= number && number <= 0xdfff) || number > 0x10ffff) return "\ufffd";
    if (INVALID_CODEPOINTS.has(number)) return "";
    return String.fromCodePoint(number);
  }
  // A named reference.
  if (HTML5.has(name)) return HTML5.get(name);
  // The longest name it starts with (as the standard defines it), counted in code points.
  const characters = Array.from(name);
  for (let x = characters.length - 1; x > 1; x--) {
    const prefix = characters.slice(0, x).join("");
    if (HTML5.has(prefix)) return HTML5.get(prefix) + characters.slice(x).join("");
  }
  return "&" + name;
}

// `u`: a name's 32 characters are code points, as Python's regular expression counts them.
const CHARREF = /&(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?)/gu;

/** `text` with every named and numeric character reference replaced, as HTML5 says. */
export function unescape(text) {
  if (!text.includes("&")) return text;
  return text.replace(CHARREF, (match, name) => replaceCharref(name));
}
